"""`deskllm chat` and `deskllm models`."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from sqlite_utils import Database

from deskllm import settings as settings_mod
from deskllm.engine.client import EngineClient, EngineError
from deskllm.engine.protocol import (
    Done,
    Error,
    Exited,
    Loaded,
    LoadParams,
    Sampling,
    TextDelta,
)
from deskllm.session import ChatSession
from deskllm.store import ConversationStore, ModelLibrary, open_database


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("chat", help="chat with a model in the terminal")
    p.add_argument("--model", default=None, help="a .gguf path or an installed model's name")
    p.add_argument("--prompt", default=None, help="one message; without it, an interactive REPL")
    p.add_argument("--system", default="", help="system prompt")
    p.add_argument("--ctx", type=int, default=0, help="context length in tokens (0: default)")
    p.add_argument("--kv", choices=settings_mod.KV_TYPES, default=None, help="KV cache type")
    p.add_argument("--flash-attn", action="store_true", default=None)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--repeat-penalty", type=float, default=1.1)
    p.add_argument("--seed", type=int, default=-1)
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    p.add_argument("--metrics", action="store_true", help="print speed and cache figures")
    p.set_defaults(func=cmd_chat)

    m = sub.add_parser("models", help="list, import or remove installed models")
    m.add_argument("--json", action="store_true")
    m.add_argument("--import", dest="import_paths", action="append", default=[],
                   metavar="PATH", help="add a .gguf file or every model in a folder")
    m.add_argument("--scan", action="store_true",
                   help="add the models of the Hugging Face cache and LM Studio, if present")
    m.add_argument("--remove", metavar="NAME", help="forget an installed model")
    m.add_argument("--delete-file", action="store_true", help="with --remove: delete the file")
    m.add_argument("--yes", action="store_true", help="with --remove: do not ask")
    m.set_defaults(func=cmd_models)


def resolve_model(library: ModelLibrary, name: str | None) -> str:
    """A path or installed name → a model path; None → the starter model."""
    if name is None:
        starter = library.ensure_starter()
        if starter is None:
            raise SystemExit("no model given and the starter model is not installed")
        return starter.path
    if Path(name).expanduser().is_file():
        return str(Path(name).expanduser())
    found = library.find(name)
    if found is None:
        raise SystemExit(f"no installed model matches {name!r}; see `deskllm models`")
    return found.path


def load_params(args: argparse.Namespace, model_path: str) -> LoadParams:
    return settings_mod.load().load_params(
        model_path, n_ctx=args.ctx or None, kv_type=args.kv, flash_attn=args.flash_attn
    )


def _print_metrics(done: Done) -> None:
    m = done.metrics
    tg = f"{m.tg_tps:.1f}" if m.tg_tps else "-"
    pp = f"{m.pp_tps:.0f}" if m.pp_tps else "-"
    ttft = f"{m.ttft_s * 1000:.0f} ms" if m.ttft_s is not None else "-"
    print(
        f"[{m.generated_tokens} tokens, {tg} tok/s, TTFT {ttft}, prompt {m.prompt_tokens} "
        f"({m.cached_tokens} cached, {m.evaluated_tokens} evaluated at {pp} tok/s), "
        f"context {m.n_past}/{m.n_ctx}, RAM {m.rss_bytes / 2**20:.0f} MiB, {m.device}]",
        file=sys.stderr,
    )
    for warning in done.warnings:
        print(f"[note: {warning}]", file=sys.stderr)


def _calibrate(db: Database, params: LoadParams, loaded: Loaded) -> None:
    """Tell the planner how far its estimate was from this load; never stops the chat."""
    from deskllm.catalog.gguf_header import read_header
    from deskllm.planner.calibration import record_load

    try:
        record_load(db, read_header(params.model_path), params, loaded)
    except Exception:
        logging.getLogger("deskllm.planner").warning("load not recorded", exc_info=True)


def cmd_chat(args: argparse.Namespace) -> int:
    db = open_database()
    library, store = ModelLibrary(db), ConversationStore(db)
    model_path = resolve_model(library, args.model)
    sampling = Sampling(
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        min_p=args.min_p,
        repeat_penalty=args.repeat_penalty,
        seed=args.seed,
        max_tokens=args.max_tokens,
        stop=tuple(args.stop),
    )
    with EngineClient() as client:
        try:
            loaded = client.load(load_params(args, model_path))
        except EngineError as exc:
            print(f"deskllm: {exc}", file=sys.stderr)
            return 1
        _calibrate(db, client.params, loaded)
        session = ChatSession(client, store)
        title = (args.prompt or "Terminal chat")[:60]
        conversation = store.create(
            title, args.system, model_path, sampling.__dict__ | {"stop": list(sampling.stop)}
        )
        prompts = [args.prompt] if args.prompt is not None else None
        while True:
            if prompts is not None:
                if not prompts:
                    return 0
                text = prompts.pop()
            else:
                try:
                    text = input("> ")
                except (EOFError, KeyboardInterrupt):
                    print()
                    return 0
                if not text.strip():
                    continue
            status = _stream(session, conversation.id, text, sampling, args.metrics)
            if status and prompts is not None:
                return status


def _stream(
    session: ChatSession, conversation_id: str, text: str, sampling: Sampling, metrics: bool
) -> int:
    try:
        for event in session.send(conversation_id, text, sampling):
            if isinstance(event, TextDelta):
                sys.stdout.write(event.text)
                sys.stdout.flush()
            elif isinstance(event, Done):
                print()
                if metrics:
                    _print_metrics(event)
            elif isinstance(event, Error):
                print(f"\ndeskllm: {event.message}", file=sys.stderr)
                return 1
            elif isinstance(event, Exited):
                print(f"\ndeskllm: {event.reason}; the reply so far is saved", file=sys.stderr)
                return 1
    except KeyboardInterrupt:
        session.client.cancel()
        print("\n[stopped]", file=sys.stderr)
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from deskllm.store.library_import import import_known_folders, import_path

    library = ModelLibrary(open_database())
    library.ensure_starter()
    results = [import_path(library, p) for p in args.import_paths]
    if args.scan:
        results.append(import_known_folders(library))
    for result in results:
        for model in result.added:
            print(f"added {model.name}: {model.path}", file=sys.stderr)
        for path, why in result.skipped:
            print(f"skipped {path}: {why}", file=sys.stderr)
    if args.remove:
        return _remove(library, args)
    if results:
        return 1 if any(r.skipped and not r.added for r in results) else 0
    models = library.list()
    if args.json:
        print(json.dumps([m.__dict__ | {"exists": m.exists} for m in models], indent=2))
        return 0
    if not models:
        print("no models installed")
    for m in models:
        missing = "" if m.exists else "  [file missing: moved or deleted outside deskllm]"
        print(
            f"{m.name}\n  {m.architecture}, {m.parameters / 1e6:.0f}M params, {m.quant}, "
            f"{m.size_bytes / 2**20:.0f} MiB, context {m.context_length}\n  {m.path}{missing}"
        )
    return 0


def _remove(library: ModelLibrary, args: argparse.Namespace) -> int:
    model = library.find(args.remove)
    if model is None:
        print(f"deskllm: no installed model matches {args.remove!r}", file=sys.stderr)
        return 1
    what = f"{model.name} ({model.path})" + (" and delete the file" if args.delete_file else "")
    if not args.yes:
        answer = input(f"Remove {what}? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("nothing removed", file=sys.stderr)
            return 1
    library.remove(model.id, delete_file=args.delete_file)
    print(f"removed {model.name}", file=sys.stderr)
    return 0
