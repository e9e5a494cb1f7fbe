"""The models: listing the served one, the installed ones a request may load and the gateway's
(`auto`, NAME/MODEL), and checking a request names one that can answer now."""

from __future__ import annotations

from pathlib import Path

from deskllm.engine.backend import ChatBackend
from deskllm.server import errors
from deskllm.server.model_host import HostState, ModelHost
from deskllm.server.models.protocol import ModelCard, ModelList


def model_list(host: ModelHost) -> ModelList:
    """The served model first (its context as served), then every other installed model
    (the context it was trained for), then the gateway's: `auto` and each remote endpoint's
    models as NAME/MODEL (owned by the endpoint; context unknown: 0). Reads the library and
    asks the endpoints: call from a worker thread."""
    ready = host.state == HostState.READY
    cards = [ModelCard(id=host.model_id, created=host.created, context_length=host.n_ctx,
                       loaded=ready, memory_bytes=host.footprint_bytes if ready else None,
                       slots=host.parallel if ready else None, pinned=True)]  # fmt: skip
    if host.installed is not None:
        served = Path(host.params.model_path).resolve()
        extras = {Path(e.params.model_path).resolve(): e for e in host.loaded_extras()}
        for model_id, model in host.installed.by_id().items():
            path = Path(model.path).resolve()
            if model_id == host.model_id or path == served:
                continue
            extra = extras.get(path)
            if extra is None:
                cards.append(ModelCard(id=model_id, created=int(model.added_at),
                                       context_length=model.context_length))  # fmt: skip
                continue
            cards.append(ModelCard(id=model_id, created=int(model.added_at),
                                   context_length=extra.n_ctx, loaded=True,
                                   memory_bytes=extra.footprint_bytes, slots=extra.queue.slots,
                                   keep_alive_left_s=extra.expires_in(),
                                   pinned=extra.keep_alive_s < 0))  # fmt: skip
    if host.gateway is not None:
        for name in host.gateway.model_ids():
            auto = host.gateway.needs_local(name)
            cards.append(ModelCard(
                id=name, created=host.created, owned_by="deskllm" if auto else name.split("/")[0],
                context_length=host.n_ctx if auto else 0,
                loaded=auto and host.state == HostState.READY,
            ))  # fmt: skip
    return ModelList(data=cards)


def check_ready(host: ModelHost) -> None:
    if host.state == HostState.LOADING:
        raise errors.loading(_loading_message(host))
    if host.state == HostState.FAILED:
        raise errors.loading(f"The model could not be loaded: {host.failure}")
    if host.state == HostState.RESTARTING:
        raise errors.loading(f"The engine is restarting ({host.restart_cause}); retry in a "
                             "few seconds.")  # fmt: skip
    if host.state == HostState.STOPPING:
        raise errors.shutting_down()


def _loading_message(host: ModelHost) -> str | None:
    if host.loading_id is None or (host.loading_id == host.model_id and host.n_ctx == 0):
        return None  # the first load: the default message
    return f"The model {host.loading_id!r} is loading; retry in a few seconds."


def check_model(host: ModelHost, name: str) -> None:
    """The served model's id, its file name or its file stem; anything else is 404 (after
    ModelHost.use has loaded an installed model a request named)."""
    if not host.serves(name):
        installed = tuple(host.installed.by_id()) if host.installed is not None else ()
        raise errors.model_not_found(name, host.model_id, installed)


# A remote model caps its own replies; this only keeps max_tokens a sane number.
REMOTE_MAX_TOKENS = 1 << 20


def check_target(host: ModelHost, name: str, backend: ChatBackend | None) -> int:
    """A chat request's model: the served one (loaded, and the one named) or a gateway
    backend (`auto` needs the served model loaded). Raises ApiError (404, 503); returns the
    context that caps max_tokens."""
    local = backend is None or (host.gateway is not None and host.gateway.needs_local(name))
    if local:
        check_ready(host)
    if backend is None:
        check_model(host, name)
    return host.n_ctx if local else REMOTE_MAX_TOKENS


def check_gateway_request(name: str, *, tools: bool, response_format: bool,
                          logprobs: bool) -> None:  # fmt: skip
    """What `auto` and remote models do not pass on (the remote client streams plain chat):
    400 rather than a reply that silently ignores it."""
    for asked, param in ((tools, "tools"), (response_format, "response_format"),
                         (logprobs, "logprobs")):  # fmt: skip
        if asked:
            raise errors.bad_request(f"{param} needs a local model; {name!r} answers plain chat "
                                     "only.", param=param)  # fmt: skip


def check_local_only(name: str, backend: ChatBackend | None) -> None:
    """Text completions and embeddings: only the models this server loads."""
    if backend is not None:
        raise errors.bad_request(f"{name!r} answers chat requests only (/v1/chat/completions, "
                                 "/v1/messages).", param="model")  # fmt: skip
