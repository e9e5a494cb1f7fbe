"""`deskllm chat`: chat in the terminal, one message or a REPL."""

from __future__ import annotations

import argparse
import sys

from deskllm import settings as settings_mod
from deskllm.cli.remote import remote_model_for
from deskllm.engine.client import EngineClient
from deskllm.engine.errors import EngineError, ErrorKind
from deskllm.engine.protocol import Loaded, Metrics, Sampling
from deskllm.engine.reply import Reply
from deskllm.loader import LoadCheck, ModelLoader, params_from_settings
from deskllm.store import ConversationStore, ModelLibrary, ModelNotFound, open_database
from deskllm.store.chat_session import ChatSession


def register(sub: argparse._SubParsersAction) -> None:
    defaults = Sampling()
    p = sub.add_parser("chat", help="chat with a model in the terminal")
    p.add_argument(
        "--model",
        default=None,
        help="a .gguf path, an installed model's name, or a remote model: NAME/MODEL "
        "(NAME a `deskllm remote` endpoint; */MODEL: any endpoint serving it)",
    )
    p.add_argument("--prompt", default=None, help="one message; without it, an interactive REPL")
    p.add_argument("--system", default="", help="system prompt")
    p.add_argument("--ctx", type=int, default=0, help="context length in tokens (0: default)")
    p.add_argument("--kv", choices=settings_mod.choices("kv_type"), default=None,
                   help="KV cache type")  # fmt: skip
    p.add_argument("--flash-attn", action="store_true", default=None)
    p.add_argument("--temperature", type=float, default=defaults.temperature)
    p.add_argument("--top-p", type=float, default=defaults.top_p)
    p.add_argument("--top-k", type=int, default=defaults.top_k)
    p.add_argument("--min-p", type=float, default=defaults.min_p)
    p.add_argument("--repeat-penalty", type=float, default=defaults.repeat_penalty)
    p.add_argument("--seed", type=int, default=defaults.seed)
    p.add_argument("--max-tokens", type=int, default=defaults.max_tokens)
    p.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    p.add_argument("--metrics", action="store_true", help="print speed and cache figures")
    p.set_defaults(func=cmd_chat)


def resolve_model(library: ModelLibrary, name: str | None) -> str:
    """The model argument → a path, or exit with the reason."""
    try:
        return library.resolve(name)
    except ModelNotFound as exc:
        raise SystemExit(f"deskllm: {exc}") from None


def _print_load(check: LoadCheck | None, loaded: Loaded) -> None:
    """The planner's estimate for this load next to what the engine holds, and how many
    earlier loads calibrated it."""
    if check is None or check.plan is None:
        return
    est = check.plan.estimate
    samples = check.corrections.samples
    calibrated = f"calibrated by {samples} earlier loads" if samples else "not calibrated yet"
    print(
        f"[load: {loaded.n_gpu_layers} GPU layers, estimated RAM "
        f"{est.ram_bytes / 2**20:.0f} MiB ({calibrated}), engine RSS "
        f"{loaded.rss_bytes / 2**20:.0f} MiB, {loaded.load_s:.2f} s]",
        file=sys.stderr,
    )


def _print_metrics(reply: Reply) -> None:
    m = reply.metrics
    if reply.done is None or m is None:
        return
    if m.engine != "local":
        _print_remote_metrics(m)
        return
    tg = f"{m.tg_tps:.1f}" if m.tg_tps else "-"
    pp = f"{m.pp_tps:.0f}" if m.pp_tps else "-"
    ttft = f"{m.ttft_s * 1000:.0f} ms" if m.ttft_s is not None else "-"
    print(
        f"[{m.generated_tokens} tokens, {tg} tok/s, TTFT {ttft}, prompt {m.prompt_tokens} "
        f"({m.cached_tokens} cached, {m.evaluated_tokens} evaluated at {pp} tok/s), "
        f"context {m.n_past}/{m.n_ctx}, RAM {m.rss_bytes / 2**20:.0f} MiB, {m.device}]",
        file=sys.stderr,
    )
    for warning in reply.done.warnings:
        print(f"[note: {warning}]", file=sys.stderr)


def _print_remote_metrics(m: Metrics) -> None:
    """A remote reply's figures: what the stream showed and what the server reported."""
    tg = f"{m.tg_tps:.1f}" if m.tg_tps else "-"
    ttft = f"{m.ttft_s * 1000:.0f} ms" if m.ttft_s is not None else "-"
    print(
        f"[{m.generated_tokens} tokens, {tg} tok/s, TTFT {ttft}, prompt {m.prompt_tokens} "
        f"({m.cached_tokens} cached), engine: remote endpoint {m.engine}]",
        file=sys.stderr,
    )


def cmd_chat(args: argparse.Namespace) -> int:
    db = open_database()
    library, store = ModelLibrary(db), ConversationStore(db)
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
    remote = remote_model_for(db, args.model)
    if remote is not None:
        with remote:
            return _converse(args, store, ChatSession(remote, store, model=remote.label),
                             remote.label, sampling)  # fmt: skip
    model_path = resolve_model(library, args.model)
    params = params_from_settings(
        settings_mod.load(), model_path,
        n_ctx=args.ctx or None, kv_type=args.kv, flash_attn=args.flash_attn,
    )  # fmt: skip
    with EngineClient() as client:
        loader = ModelLoader(client, db=db)
        try:
            loaded = loader.load(params)
        except EngineError as exc:
            print(f"deskllm: {exc}", file=sys.stderr)
            return 1
        if args.metrics:
            _print_load(loader.last_check, loaded)
        return _converse(args, store, ChatSession(client, store), model_path, sampling)


def _converse(
    args: argparse.Namespace,
    store: ConversationStore,
    session: ChatSession,
    model: str,
    sampling: Sampling,
) -> int:
    """One message (--prompt) or a REPL, in a new stored conversation."""
    title = (args.prompt or "Terminal chat")[:60]
    conversation = store.create(
        title, args.system, model, sampling.__dict__ | {"stop": list(sampling.stop)}
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
        status = _stream(session.send(conversation.id, text, sampling), args.metrics)
        if status and prompts is not None:
            return status


def _stream(reply: Reply, metrics: bool) -> int:
    try:
        for text in reply:
            sys.stdout.write(text)
            sys.stdout.flush()
    except KeyboardInterrupt:
        reply.cancel()
        print("\n[stopped]", file=sys.stderr)
        return 0
    if reply.error is None:
        print()
        if metrics:
            _print_metrics(reply)
        return 0
    if reply.error.kind in (ErrorKind.EXITED, ErrorKind.HUNG, ErrorKind.DROPPED) and reply.text:
        print(f"\ndeskllm: {reply.error}; the reply so far is saved", file=sys.stderr)
    else:
        print(f"\ndeskllm: {reply.error}", file=sys.stderr)
    return 1
