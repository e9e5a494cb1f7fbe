"""`deskllm serve`: a local OpenAI-compatible API server for one model (see docs/server.md)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from deskllm import settings as settings_mod
from deskllm.backends import Resolver
from deskllm.cli.chat import add_speculation_arguments, draft_path, resolve_model
from deskllm.database import open_database
from deskllm.engine.domain import LoadParams
from deskllm.engine.errors import EngineError
from deskllm.loader import ModelLoader, params_from_settings
from deskllm.server.config import (
    DEFAULT_MAX_QUEUE,
    DEFAULT_PORT,
    DEFAULT_SHUTDOWN_GRACE_S,
    ServerConfig,
    is_loopback,
)
from deskllm.settings import AUTO_SERVER_SLOTS
from deskllm.store import ModelLibrary


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve a model through an OpenAI-compatible HTTP API")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on; any but loopback uses an API key (the stored "
                        "one unless --api-key names one)")  # fmt: skip
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--model", default=None,
                   help="a .gguf path or an installed model's name: the model served "
                        "(requests may also name any installed model, auto, NAME/MODEL or "
                        "*/MODEL)")  # fmt: skip
    keys = p.add_mutually_exclusive_group()
    keys.add_argument("--api-key", default=None,
                      help="clients must send 'Authorization: Bearer KEY'; 'stored': the key "
                           "generated on first use and kept in the deskllm home. A KEY given "
                           "here is visible to other users (ps): prefer --api-key-file or "
                           "the DESKLLM_API_KEY environment variable")  # fmt: skip
    keys.add_argument("--api-key-file", type=Path, default=None, metavar="PATH",
                      help="read the key from PATH's first line (once; refused when other "
                           "users may read the file)")  # fmt: skip
    p.add_argument("--allowed-hosts", action="append", default=[], metavar="NAME",
                   help="a host name besides localhost, 127.0.0.1 and [::1] that requests "
                        "to a loopback server may name (Host, Origin); repeatable")  # fmt: skip
    p.add_argument("--shutdown-grace", type=float, default=DEFAULT_SHUTDOWN_GRACE_S,
                   metavar="SECONDS",
                   help="on SIGTERM or Ctrl+C, how long running replies may finish before "
                        "their streams are ended (default %(default)g)")  # fmt: skip
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="let web pages from ORIGIN (scheme://host[:port]) call the API; "
                        "repeatable; none: CORS off")  # fmt: skip
    p.add_argument("--max-queue", type=int, default=DEFAULT_MAX_QUEUE,
                   help="requests that may wait while one is answered; more get 429")  # fmt: skip
    p.add_argument("--ctx", type=int, default=0, help="context length in tokens (0: settings)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: settings)")
    add_speculation_arguments(p, "--model's", ", for every request without its own")
    p.add_argument("--parallel", type=int, default=None,
                   help="requests answered at once (slots of --ctx tokens each); 0: as many "
                        "as fit, up to 4; default: the server_slots setting (0)")  # fmt: skip
    p.add_argument("--keep-alive", default="10m", metavar="DURATION",
                   help="how long a model loaded for a request stays after its last one "
                        "(5m, 1h, 600; -1: until the server stops); the served model never "
                        "expires (default %(default)s)")  # fmt: skip
    p.add_argument("--memory-budget", type=float, default=None, metavar="GIB",
                   help="RAM in GiB that all loaded models share: a model that does not fit "
                        "beside the others unloads the idle ones, least recently used first "
                        "(default: the memory free when a model loads)")  # fmt: skip
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from deskllm.backends.routing import escalate_share
    from deskllm.server.api_key import (
        ENV_VAR,
        KeyFileError,
        key_path,
        read_key_file,
        stored_key,
    )
    from deskllm.server.gateway import Gateway
    from deskllm.server.installed import InstalledModels, library_models, served_id
    from deskllm.server.model_host import KEEP_ALIVE_S, ModelHost
    from deskllm.server.runner import serve

    api_key = args.api_key or None
    if args.api_key_file is not None:
        try:
            api_key = read_key_file(args.api_key_file)
        except KeyFileError as exc:
            print(f"deskllm: {exc}", file=sys.stderr)
            return 2
    elif api_key is not None and api_key != "stored":
        print("deskllm: warning: a key given with --api-key is visible to every user of this "
              "machine (ps); use --api-key-file PATH or the DESKLLM_API_KEY environment "
              "variable", file=sys.stderr)  # fmt: skip
    elif api_key is None:
        api_key = os.environ.get(ENV_VAR) or None
    if api_key == "stored" or (api_key is None and not is_loopback(args.host)):
        # Anyone who can reach this address could use the model: never without a key.
        api_key = stored_key()
        print(f"deskllm: clients must send the API key stored in {key_path()}:\n  {api_key}",
              file=sys.stderr, flush=True)  # fmt: skip
    config = ServerConfig(host=args.host, port=args.port, api_key=api_key,
                          max_queue=args.max_queue, cors_origins=tuple(args.cors_origin),
                          allowed_hosts=tuple(args.allowed_hosts),
                          shutdown_grace_s=args.shutdown_grace)  # fmt: skip
    parallel = args.parallel
    refusal = config.refusal() or (
        "--parallel must be 0 (as many as fit) or more"
        if parallel is not None and parallel < 0
        else None
    )
    from deskllm.server.durations import parse_duration

    try:
        keep_alive = parse_duration(args.keep_alive)
    except ValueError as exc:
        refusal = refusal or f"--keep-alive: {exc}"
        keep_alive = None
    if args.memory_budget is not None and args.memory_budget <= 0:
        refusal = refusal or "--memory-budget must be more than 0 GiB"
    if refusal:
        print(f"deskllm: {refusal}", file=sys.stderr)
        return 2
    db = open_database()
    library = ModelLibrary(db)
    model_path = resolve_model(Resolver(db), args.model)
    installed = library.find(model_path)
    model_id = served_id(installed, model_path)
    settings = settings_mod.load()

    draft = draft_path(Resolver(db), args, model_path)

    def params_for(path: str) -> LoadParams:
        # The draft is --model's: another model of the server may be of another family.
        return params_from_settings(
            settings, path, n_ctx=args.ctx or None, n_threads=args.threads or None,
            speculation=args.speculation, draft_model_path=draft if path == model_path else "",
        )  # fmt: skip

    # A request naming another installed model loads it with the same settings and flags.
    installed_models = InstalledModels(library_models, params_for, _remove_installed,
                                       _pull_model)  # fmt: skip
    params = params_for(model_path)
    slots = settings.server_slots if parallel is None else parallel
    if slots == 0:
        try:
            slots = ModelLoader(None).slots_that_fit(params, AUTO_SERVER_SLOTS)
        except EngineError:
            slots = 1  # a bad file: the load says why
    # `auto` and the registered remote endpoints' models answer beside the local ones.
    gateway = Gateway(open_database, escalate_share(settings.router_escalate))
    budget = int(args.memory_budget * (1 << 30)) if args.memory_budget else None
    host = ModelHost(params, model_id, max_queue=args.max_queue, open_db=open_database,
                     parallel=slots, installed=installed_models, gateway=gateway,
                     keep_alive_s=KEEP_ALIVE_S if keep_alive is None else keep_alive,
                     memory_budget=budget)  # fmt: skip
    print(f"deskllm: serving {model_id} at http://{args.host}:{args.port}/v1 with {slots} "
          f"slot{'s' if slots > 1 else ''} (loading…)", file=sys.stderr, flush=True)  # fmt: skip
    return serve(host, config)


def _pull_model(repo: str, selector: str | None, on_progress, stop):
    """Ollama's /api/pull: `repo` (the planner's pick for this machine, or `selector`)
    downloaded into the library; the final Progress (DONE, FAILED, or PAUSED when stopped)."""
    from deskllm.downloads.errors import DownloadError
    from deskllm.downloads.events import DownloadState, Progress
    from deskllm.downloads.resolve import resolve
    from deskllm.downloads.single import download_one
    from deskllm.server import errors

    user = settings_mod.load()
    try:
        item = resolve(repo, selector, n_ctx=user.n_ctx, kv_type=user.kv_type,
                       usable_tps=user.usable_tps)  # fmt: skip
    except DownloadError as exc:
        raise errors.ApiError(404 if "not found" in str(exc).lower() else 500,
                              str(exc), type="not_found_error") from None  # fmt: skip
    record, _stats = download_one(item, user.models_path(), on_progress, stop)
    return Progress(record.id, item.name, record.state, record.bytes_done, record.total,
                    error=record.error if record.state != DownloadState.DONE else None,
                    path=record.path)  # fmt: skip


def _remove_installed(model) -> None:
    """Forget an installed model and delete its file (the bundled starter file is kept)."""
    db = open_database()
    try:
        ModelLibrary(db).remove(model.id, delete_file=True)
    finally:
        db.close()
