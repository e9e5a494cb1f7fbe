"""Ollama's model endpoints: /api/tags (installed), /api/show (one model's card), /api/ps
(loaded), /api/delete. Names are the ids /v1/models lists; `NAME:latest` is NAME."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from deskllm.gguf.header import GgufHeader, read_header
from deskllm.server import errors
from deskllm.server.model_host import HostState, ModelHost
from deskllm.server.ollama.serving import model_name
from deskllm.store.library import InstalledModel

# A model that never expires (the served one is pinned): Ollama's clients read a date.
FOREVER = "9999-12-31T23:59:59Z"


@dataclass(frozen=True)
class Entry:
    """A model as the Ollama API shows it."""

    id: str
    path: Path
    installed: InstalledModel | None  # None: served from a file outside the library


def entries(host: ModelHost) -> list[Entry]:
    """The served model first, then every other installed model. Reads the library: call
    from a worker thread."""
    served = Path(host.params.model_path).resolve()
    found = [Entry(host.model_id, served, None)]
    if host.installed is not None:
        for model_id, model in host.installed.by_id().items():
            path = Path(model.path).resolve()
            if path == served:
                found[0] = Entry(host.model_id, served, model)
            else:
                found.append(Entry(model_id, path, model))
    return found


def find(host: ModelHost, name: str) -> Entry:
    """The entry `name` means (an id, library name, file name or short name); 404 else."""
    name = model_name(name)
    listed = entries(host)
    if host.serves(name):
        return listed[0]
    if host.installed is not None and (hit := host.installed.find(name)) is not None:
        path = Path(hit[1].path).resolve()
        return next((e for e in listed if e.path == path), Entry(hit[0], path, hit[1]))
    raise errors.ApiError(404, f"model {name!r} not found (GET /api/tags lists the models "
                               "this server has)", type="not_found_error")  # fmt: skip


def digest(path: Path) -> str:
    """An id of the file as it is (path, size, modification time), in Ollama's digest form:
    not its content's sha256, which would read gigabytes on every listing."""
    stat = path.stat()
    return hashlib.sha256(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()


def parameter_size(n: int) -> str:
    if n <= 0:
        return ""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.1f}".removesuffix(".0") + unit
    return str(n)


def details(entry: Entry, header: GgufHeader | None = None) -> dict[str, Any]:
    model = entry.installed
    if model is not None:
        arch, params, quant = model.architecture, model.parameters, model.quant
    else:
        header = header or read_header(entry.path)
        from deskllm.catalog.quants import file_type_name

        arch, params = header.architecture, header.n_params
        quant = file_type_name(header.metadata.get("general.file_type"))
    return {"parent_model": "", "format": "gguf", "family": arch, "families": [arch],
            "parameter_size": parameter_size(params), "quantization_level": quant or ""}


def modified_at(entry: Entry) -> str:
    return datetime.fromtimestamp(entry.path.stat().st_mtime, UTC).isoformat().replace(
        "+00:00", "Z")


def tags(host: ModelHost) -> dict:
    models = []
    for entry in entries(host):
        if not entry.path.is_file():
            continue
        models.append({"name": entry.id, "model": entry.id, "modified_at": modified_at(entry),
                       "size": entry.path.stat().st_size, "digest": digest(entry.path),
                       "details": details(entry)})  # fmt: skip
    return {"models": models}


def _info_value(value: Any) -> Any:
    """GGUF metadata as Ollama's model_info gives it; the header reader does not keep the
    long arrays (the vocabulary): null, as Ollama shows them without `verbose`."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return list(value) if isinstance(value, tuple) else value


def capabilities(header: GgufHeader) -> list[str]:
    found = ["completion"]
    template = header.chat_template or ""
    if "tools" in template:
        found.append("tools")
    if header.metadata.get(f"{header.architecture}.pooling_type") not in (None, 0):
        found.append("embedding")
    return found


def show(host: ModelHost, name: str) -> dict:
    entry = find(host, name)
    header = read_header(entry.path)
    template = header.chat_template or ""
    info = {k: _info_value(v) for k, v in header.metadata.items()
            if not k.startswith("tokenizer.chat_template")}  # fmt: skip
    info["general.parameter_count"] = header.n_params
    modelfile = f"# Modelfile generated by deskllm\nFROM {entry.path}\n"
    if template:
        modelfile += f'TEMPLATE """{template}"""\n'
    license_text = str(header.metadata.get("general.license") or "")
    return {"modelfile": modelfile, "parameters": "", "template": template,
            "license": license_text, "details": details(entry, header), "model_info": info,
            "capabilities": capabilities(header), "modified_at": modified_at(entry)}  # fmt: skip


def ps(host: ModelHost) -> dict:
    """The loaded models: the served one (pinned: it never expires) first, then those loaded
    beside it, each with its keep-alive's end."""
    models = []
    loaded, extras = host.client.loaded, host.loaded_extras()
    listed = {e.path: e for e in entries(host)} if loaded is not None or extras else {}
    if host.state == HostState.READY and loaded is not None:
        entry = next(iter(listed.values()))  # the served model comes first
        models.append(_running(entry, host.footprint_bytes, loaded, host.n_ctx, FOREVER))
    for extra in extras:
        if extra.client.loaded is None:
            continue
        path = Path(extra.params.model_path).resolve()
        installed = listed[path].installed if path in listed else None
        left = extra.expires_in()
        expires = FOREVER if left is None else (
            datetime.now(UTC) + timedelta(seconds=left)).isoformat().replace("+00:00", "Z")
        models.append(_running(Entry(extra.model_id, path, installed), extra.footprint_bytes,
                               extra.client.loaded, extra.n_ctx, expires))  # fmt: skip
    return {"models": models}


def _running(entry: Entry, footprint: int, loaded, n_ctx: int, expires: str) -> dict:
    vram = sum(int(v) for k, v in loaded.buffers.items() if not k.upper().startswith("CPU"))
    return {
        "name": entry.id, "model": entry.id, "size": max(footprint, loaded.rss_bytes) + vram,
        "size_vram": vram, "digest": digest(entry.path), "details": details(entry),
        "expires_at": expires, "context_length": n_ctx,
    }  # fmt: skip


def delete(host: ModelHost, name: str) -> None:
    """Forget an installed model and delete its file (the bundled starter file is kept);
    the served model, and one answering a request, are refused: a file is never pulled from
    under a running reply."""
    entry = find(host, name)
    if entry.path == Path(host.params.model_path).resolve() or host.serves(model_name(name)):
        raise errors.bad_request(f"model {entry.id!r} is in use: it is the model this server "
                                 "serves; serve another first.", param="model")  # fmt: skip
    if host.installed is None or host.installed.remove is None or entry.installed is None:
        raise errors.bad_request(f"model {entry.id!r} cannot be deleted through this server.",
                                 param="model")  # fmt: skip
    extra = next((e for e in host.loaded_extras() if e.serves(entry.id)), None)
    if extra is not None and extra.busy:
        raise errors.bad_request(f"model {entry.id!r} is answering a request; delete it when "
                                 "it is done.", param="model")  # fmt: skip
    host.unload(entry.id)  # loaded beside the served one and idle: unloaded first
    host.installed.remove(entry.installed)
