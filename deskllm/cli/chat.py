"""`deskllm chat`: chat in the terminal, one message or a REPL."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

from deskllm import settings as settings_mod
from deskllm.backends import AUTO, Resolver
from deskllm.cli.docs import ChatDocs
from deskllm.engine.client import EngineClient
from deskllm.engine.domain import Loaded, Metrics, PromptProgress, Sampling, TextDelta
from deskllm.engine.errors import EngineError, ErrorKind
from deskllm.engine.reply import Reply
from deskllm.engine.speculation import drafts_text
from deskllm.engine.thread_governor import threads_text
from deskllm.loader import LoadCheck, ModelLoader, params_from_settings
from deskllm.remote.calibration import CALIBRATION_PROMPTS, local_scores
from deskllm.remote.remote_model import RemoteModel
from deskllm.remote.router import (
    DEFAULT_UNCERTAINTY_TOKENS,
    RoutedMetrics,
    RoutePolicy,
    Router,
    threshold_for_share,
)
from deskllm.store import ConversationStore, ModelLibrary, ModelNotFound, open_database
from deskllm.store.chat_session import ChatSession


def register(sub: argparse._SubParsersAction) -> None:
    defaults = Sampling()
    p = sub.add_parser("chat", help="chat with a model in the terminal")
    p.add_argument(
        "--model",
        default=None,
        help="a .gguf path, an installed model's name, a remote model: NAME/MODEL "
        "(NAME a `deskllm remote` endpoint; */MODEL: any endpoint serving it), or auto: "
        "the router (local first; a remote only where routing is allowed)",
    )
    p.add_argument("--local-model", default=None, metavar="MODEL",
                   help="--model auto: the local model (default: the default model)")  # fmt: skip
    p.add_argument("--remote", default=None, metavar="NAME/MODEL",
                   help="--model auto: the remote model to escalate to (its endpoint must "
                   "allow routing; default: the first that does, and its first model)")  # fmt: skip
    p.add_argument("--escalate-share", type=float, default=None, metavar="S",
                   help="--model auto: escalate uncertain replies, with the threshold set so "
                   "that share S (0..1) of a fixed prompt set would go remote")  # fmt: skip
    p.add_argument("--escalate-below", type=float, default=None, metavar="LOGPROB",
                   help="--model auto: escalate when the mean log-probability of the first "
                   "tokens is below this (instead of --escalate-share)")  # fmt: skip
    p.add_argument("--uncertainty-tokens", type=int, default=DEFAULT_UNCERTAINTY_TOKENS,
                   metavar="K", help="--model auto: the first K tokens the uncertainty is "
                   "measured on (held back until decided)")  # fmt: skip
    p.add_argument("--prompt", default=None, help="one message; without it, an interactive REPL")
    p.add_argument("--system", default="", help="system prompt")
    p.add_argument("--ctx", type=int, default=0, help="context length in tokens (0: default)")
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads, fixed (0: settings; Automatic adapts to a busy machine)")
    p.add_argument("--kv", choices=settings_mod.choices("kv_type"), default=None,
                   help="KV cache type")  # fmt: skip
    p.add_argument("--flash-attn", action="store_true", default=None)
    add_speculation_arguments(p)
    p.add_argument("--temperature", type=float, default=defaults.temperature)
    p.add_argument("--top-p", type=float, default=defaults.top_p)
    p.add_argument("--top-k", type=int, default=defaults.top_k)
    p.add_argument("--min-p", type=float, default=defaults.min_p)
    p.add_argument("--repeat-penalty", type=float, default=defaults.repeat_penalty)
    p.add_argument("--seed", type=int, default=defaults.seed)
    p.add_argument("--max-tokens", type=int, default=defaults.max_tokens)
    p.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    p.add_argument("--metrics", action="store_true", help="print speed and cache figures")
    p.add_argument("--think", choices=("off", "on", "low", "medium", "high"), default=None,
                   help="a reasoning model's thinking: off, on, or an effort where its "
                        "template takes one (default: the template's own)")  # fmt: skip
    p.add_argument("--mcp", default=None, metavar="NAME[,NAME]",
                   help="let the model use these MCP servers' tools (`deskllm mcp add`); each "
                        "call is asked on the terminal first")  # fmt: skip
    p.add_argument("--allow", action="append", default=[], metavar="TOOL",
                   help="with --mcp: run this tool without asking (repeatable)")
    p.add_argument("--tool-choice", choices=("auto", "required", "none"), default="auto",
                   help="with --mcp: required makes the model's first reply a call")
    p.add_argument("--tool-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="with --mcp: a call that takes longer is abandoned (default 30)")
    p.add_argument("--docs", default=None, metavar="NAME[,NAME]",
                   help="answer from these document collections (`deskllm docs add`), citing "
                        "the passages used")
    p.add_argument("--reasoning-budget", type=int, default=0, metavar="TOKENS",
                   help="close a reasoning model's thinking after this many tokens and make "
                        "it answer (0: no limit)")  # fmt: skip
    p.set_defaults(func=cmd_chat)


def resolve_model(resolver: Resolver, name: str | None) -> str:
    """A local model argument → a path, or exit with the reason."""
    try:
        return resolver.local_path(name)
    except ModelNotFound as exc:
        raise SystemExit(f"deskllm: {exc}") from None


def _print_load(check: LoadCheck | None, loaded: Loaded) -> None:
    """The planner's estimate for this load next to what the engine holds, and how many
    earlier loads calibrated it."""
    if check is None or check.plan is None:
        return
    if check.measured:  # an automatic load that followed `deskllm bench --suite`
        print(f"[automatic configuration: {check.measured}]", file=sys.stderr)
    if check.speculation:  # Automatic speculation that followed it
        print(f"[automatic speculation: {check.speculation}]", file=sys.stderr)
    est = check.plan.estimate
    samples = check.corrections.samples
    calibrated = f"calibrated by {samples} earlier loads" if samples else "not calibrated yet"
    print(
        f"[load: {loaded.n_gpu_layers} GPU layers, estimated RAM "
        f"{est.ram_bytes / 2**20:.0f} MiB ({calibrated}), engine RSS "
        f"{loaded.rss_bytes / 2**20:.0f} MiB, {loaded.load_s:.2f} s]",
        file=sys.stderr,
    )


def _print_template_note(loaded: Loaded) -> None:
    """A refused or missing chat template, always: the model chats in ChatML then, which it
    may not have been trained on."""
    if loaded.chat_template_source == "fallback":
        for warning in loaded.warnings:
            print(f"[note: {warning}; replies may be worse than with the model's own template]",
                  file=sys.stderr)  # fmt: skip


def _print_metrics(reply: Reply) -> None:
    m = reply.metrics
    if reply.done is None or m is None:
        return
    if isinstance(m, RoutedMetrics):
        score = f", score {m.route_score:.2f}" if m.route_score is not None else ""
        where = "local" if m.engine == "local" else f"remote endpoint {m.engine}"
        print(f"[route: {m.route_reason}{score}; answered by {where} ({m.model})]",
              file=sys.stderr)  # fmt: skip
    if m.engine != "local":
        _print_remote_metrics(m)
        return
    tg = f"{m.tg_tps:.1f}" if m.tg_tps else "-"
    pp = f"{m.pp_tps:.0f}" if m.pp_tps else "-"
    ttft = f"{m.ttft_s * 1000:.0f} ms" if m.ttft_s is not None else "-"
    threads = threads_text(m.n_threads, m.max_threads, m.threads_reason)
    drafts = drafts_text(m.draft_n, m.draft_n_accepted, m.draft_passes) if m.draft_n else ""
    print(
        f"[{m.generated_tokens} tokens, {tg} tok/s, TTFT {ttft}, prompt {m.prompt_tokens} "
        f"({m.cached_tokens} cached, {m.evaluated_tokens} evaluated at {pp} tok/s), "
        f"context {m.n_past}/{m.n_ctx}, RAM {m.rss_bytes / 2**20:.0f} MiB, {m.device}"
        f"{', ' + threads if threads else ''}{', ' + drafts if drafts else ''}]",
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
    if args.docs and args.mcp:
        raise SystemExit("deskllm: --docs and --mcp cannot be used together yet")
    docs = ChatDocs(args.docs) if args.docs else None
    try:
        return _chat(args, docs)
    finally:
        if docs is not None:
            docs.close()


def _chat(args: argparse.Namespace, docs: ChatDocs | None) -> int:
    db = open_database()
    store = ConversationStore(db)
    sampling = Sampling(
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        min_p=args.min_p,
        repeat_penalty=args.repeat_penalty,
        seed=args.seed,
        max_tokens=args.max_tokens,
        stop=tuple(args.stop),
        think=args.think,
        reasoning_budget=max(0, args.reasoning_budget),
    )
    resolver = Resolver(db)
    if args.model == AUTO:
        return _auto_chat(args, resolver, store, sampling, docs)
    try:
        remote = resolver.remote(args.model) if args.model else None
    except EngineError as exc:
        raise SystemExit(f"deskllm: {exc.reason}") from None
    if remote is not None:
        with remote:
            if args.mcp:  # the endpoint's own tool calling (OpenAI's `tools`)
                from deskllm.cli.mcp import tool_chat

                return tool_chat(args, remote, None, sampling)
            return _converse(args, store, ChatSession(remote, store, docs), remote.label, sampling)
    model_path = resolve_model(resolver, args.model)
    params = params_from_settings(
        settings_mod.load(), model_path, n_ctx=args.ctx or None,
        n_threads=args.threads or None, kv_type=args.kv, flash_attn=args.flash_attn,
        draft_model_path=draft_path(resolver, args, model_path), speculation=args.speculation,
    )  # fmt: skip
    with EngineClient() as client:
        loader = ModelLoader(client, db=db)
        try:
            loaded = loader.load(params)
        except EngineError as exc:
            print(f"deskllm: {exc}", file=sys.stderr)
            return 1
        _print_template_note(loaded)
        if args.metrics:
            _print_load(loader.last_check, loaded)
        if args.mcp:
            from deskllm.cli.mcp import tool_chat

            return tool_chat(args, client, model_path, sampling)
        return _converse(args, store, ChatSession(client, store, docs), model_path, sampling)


def add_speculation_arguments(p: argparse.ArgumentParser, whose: str = "",
                              scope: str = "") -> None:  # fmt: skip
    """--speculation and --draft-model, as `chat` and `serve` take them (`whose`: what the
    draft is for, `scope`: what the speculation applies to, in the help)."""
    p.add_argument("--speculation", choices=settings_mod.choices("speculation"), default=None,
                   help=f"speculative decoding: n-gram drafts, or a draft model's{scope} "
                        "(default: settings)")  # fmt: skip
    p.add_argument("--draft-model", default=None, metavar="MODEL",
                   help=f"{whose or 'the'} draft model for --speculation draft: a .gguf path, "
                        "an installed model's name, or auto: the installed model the library "
                        "suggests (default: settings)")  # fmt: skip


def draft_path(resolver: Resolver, args, model_path: str) -> str | None:
    """--draft-model's file (None: the settings'); given, it turns draft speculation on.
    "auto": the installed model the library suggests for `model_path`."""
    if not args.draft_model:
        return None
    if args.speculation not in (None, "draft"):
        raise SystemExit(
            f"deskllm: --draft-model needs --speculation draft, not {args.speculation}")
    args.speculation = "draft"
    if args.draft_model != "auto":
        return resolve_model(resolver, args.draft_model)
    suggested = ModelLibrary(resolver.db).suggest_draft(model_path)
    if suggested is None:
        raise SystemExit(f"deskllm: no installed model can draft for {Path(model_path).name}: "
                         "one with the same vocabulary and a smaller file is needed")  # fmt: skip
    print(f"[draft model: {suggested.name}]", file=sys.stderr)
    return suggested.path


def _routing_target(resolver: Resolver, spec: str | None) -> tuple[RemoteModel | None, str | None]:
    """The remote model `--model auto` may escalate to (see Resolver.routing_target), or why
    its endpoint did not answer: then every reply is local, with a notice."""
    try:
        return resolver.routing_target(spec), None
    except EngineError as exc:
        if exc.kind == ErrorKind.BAD_REQUEST:
            raise SystemExit(f"deskllm: --remote: {exc.reason}") from None
        print(f"[router: {exc.reason}; replies stay local]", file=sys.stderr)
        return None, exc.reason


def _auto_chat(args, resolver: Resolver, store: ConversationStore, sampling, docs) -> int:
    """`--model auto`: the local model first, through the router."""
    if args.escalate_share is not None and not 0 <= args.escalate_share <= 1:
        raise SystemExit("deskllm: --escalate-share is a share between 0 and 1")
    if args.uncertainty_tokens < 1:
        raise SystemExit("deskllm: --uncertainty-tokens must be at least 1")
    model_path = resolve_model(resolver, args.local_model)
    params = params_from_settings(
        settings_mod.load(), model_path, n_ctx=args.ctx or None,
        n_threads=args.threads or None, kv_type=args.kv, flash_attn=args.flash_attn,
        draft_model_path=draft_path(resolver, args, model_path), speculation=args.speculation,
    )  # fmt: skip
    target, unreachable = _routing_target(resolver, args.remote)
    with EngineClient() as client:
        loader = ModelLoader(client, db=resolver.db)
        try:
            loaded = loader.load(params)
        except EngineError as exc:
            if target is None:
                print(f"deskllm: {exc}", file=sys.stderr)
                return 1
            print(f"[router: the local model did not load ({exc.reason}); replies go to "
                  f"{target.label}]", file=sys.stderr)  # fmt: skip
        else:
            _print_template_note(loaded)
            if args.metrics:
                _print_load(loader.last_check, loaded)
        threshold = args.escalate_below
        if target is not None and threshold is None and args.escalate_share is not None:
            scores = local_scores(client, CALIBRATION_PROMPTS, args.uncertainty_tokens,
                                  sampling, args.system)  # fmt: skip
            if scores:
                threshold = threshold_for_share(scores, args.escalate_share)
                print(f"[router: threshold {threshold:.3f} escalates "
                      f"{args.escalate_share:.0%} of {len(scores)} calibration prompts]",
                      file=sys.stderr)  # fmt: skip
            else:
                print("[router: the local model gave no scores; uncertainty check off]",
                      file=sys.stderr)  # fmt: skip
        if target is None:
            print("[router: no endpoint allows routing; every reply stays on this machine]",
                  file=sys.stderr)  # fmt: skip
        policy = RoutePolicy(threshold, args.uncertainty_tokens)
        router = Router(client, target, policy, unreachable)
        try:
            if args.mcp:  # a turn with tools stays on the engine that began it
                from deskllm.cli.mcp import tool_chat

                return tool_chat(args, router, model_path, sampling)
            session = ChatSession(router, store, docs)
            return _converse(args, store, session, router.label, sampling, router)
        finally:
            router.close()


def _converse(
    args: argparse.Namespace,
    store: ConversationStore,
    session: ChatSession,
    model: str,
    sampling: Sampling,
    router: Router | None = None,
) -> int:
    """One message (--prompt) or a REPL, in a new stored conversation. With the router, a
    REPL line `/remote TEXT` asks the remote model for that reply."""
    docs = session.retrieve if isinstance(session.retrieve, ChatDocs) else None
    title = (args.prompt or "Terminal chat")[:60]
    conversation = store.create(
        title, args.system, model, sampling.__dict__ | {"stop": list(sampling.stop)}
    )
    for text in user_messages(args.prompt):
        if router is not None and text.startswith("/remote "):
            try:
                router.ask_remote_next()
            except ValueError as exc:
                print(f"deskllm: {exc}", file=sys.stderr)
                continue
            text = text.removeprefix("/remote ")
        status = _stream(session.send(conversation.id, text, sampling), args.metrics)
        if docs is not None:
            docs.print_sources()
        if status and args.prompt is not None:
            return status
    return 0


def user_messages(prompt: str | None) -> Iterator[str]:
    """The one message of --prompt, or the REPL's lines (blank ones skipped) until end of
    input or Ctrl+C."""
    if prompt is not None:
        yield prompt
        return
    while True:
        try:
            text = input("> ")
        except (EOFError, KeyboardInterrupt):
            print()
            return
        if text.strip():
            yield text


class _PromptLine:
    """A long prompt's progress on stderr: one line rewritten in place on a terminal, a line
    per update with --metrics elsewhere (logs), nothing otherwise (scripts)."""

    def __init__(self, metrics: bool) -> None:
        self.live = sys.stderr.isatty()
        self.lines = metrics and not self.live
        self.shown = False

    def show(self, progress: PromptProgress) -> None:
        if self.live:
            sys.stderr.write(f"\r\033[K[{progress.describe()}]")
            sys.stderr.flush()
            self.shown = True
        elif self.lines:
            print(f"[{progress.describe()}]", file=sys.stderr)

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.shown = False


class _Thinking:
    """A reasoning model's thinking, on stderr (dim on a terminal) between "[thinking]" and
    "[/thinking]", so that stdout holds the answer alone."""

    def __init__(self) -> None:
        self.open = False
        tty = sys.stderr.isatty()
        self.dim, self.plain = ("\033[2m", "\033[0m") if tty else ("", "")

    def write(self, text: str) -> None:
        if not self.open:
            self.open = True
            sys.stderr.write(f"{self.dim}[thinking]\n")
        sys.stderr.write(text)
        sys.stderr.flush()

    def end(self) -> None:
        if self.open:
            self.open = False
            sys.stderr.write(f"\n[/thinking]{self.plain}\n")
            sys.stderr.flush()


def _stream(reply: Reply, metrics: bool) -> int:
    progress = _PromptLine(metrics)
    thinking = _Thinking()
    try:
        for event in reply.events():
            if isinstance(event, PromptProgress):
                progress.show(event)
            elif isinstance(event, TextDelta) and event.reasoning:
                progress.clear()
                thinking.write(event.text)
            elif isinstance(event, TextDelta):
                progress.clear()
                thinking.end()
                sys.stdout.write(event.text)
                sys.stdout.flush()
        progress.clear()
        thinking.end()
    except KeyboardInterrupt:
        progress.clear()
        reply.cancel()
        print("\n[stopped]", file=sys.stderr)
        return 0
    notice = getattr(reply.metrics, "route_notice", None)
    if notice:
        print(f"[router: {notice}]", file=sys.stderr)
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
