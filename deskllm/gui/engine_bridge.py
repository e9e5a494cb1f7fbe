"""EngineBridge: runs the blocking ModelLoader / ChatSession calls on one TaskRunner thread
(in order: a load queued before a reply runs first) and hands their results to the GUI thread
as Qt signals. Stop goes straight to the client (thread-safe).

A conversation whose model is NAME/MODEL chats with that remote model, one whose model is
"auto" through the router on the loaded local model (deskllm.backends); replies
from either are stored and streamed exactly like local ones.

Signals (all emitted on the GUI thread):
    load_progress(float): 0..1 while a model loads.
    loaded(Loaded): the model is ready.
    load_failed(str): why the load failed, in words for the user.
    unloaded(): the model was freed.
    delta(str, str): conversation id, text as it streams.
    thinking(str, str): conversation id, a reasoning model's thinking as it streams.
    metrics(Metrics): live figures of the reply being written.
    prompt_progress(str, PromptProgress): conversation id, how far a long prompt is read.
    finished(str, Reply): conversation id and the stored, finished Reply.
    notice(str, str): conversation id, what the reply waits for (Auto's calibration).
    serving(object): the EmbeddedServer now answering the API, or None once it stopped.
    serve_failed(str): why the server could not start (the model stays as it was).
    consent_needed(str, ToolCall): conversation id, a tool call waiting for the user's
        answer (answer_consent gives it); nothing runs before it.
    tool_stored(str, Message): conversation id, a step of a turn with tools was stored (a
        reply with its calls, or a call's result).

A conversation given MCP servers (its Tools menu) chats with their tools: each call is asked
of the user first (unless always allowed), run on its server, its result stored and given
back to the model, until the model answers (deskllm.tools.stored_turn).

One engine process serves the window's chat (through a SlotClient: its Stop ends only the
window's replies) and the API server's requests: they share its scheduler and slots. Starting
the server reloads the model only when the engine has fewer slots than the server asks for
(once, through the loader); stopping it never does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from deskllm.backends import AUTO, Resolver, routing
from deskllm.backends.names import is_remote
from deskllm.engine.client import EngineClient
from deskllm.engine.domain import (
    Error,
    LoadParams,
    Metrics,
    PromptProgress,
    Sampling,
    TextDelta,
)
from deskllm.engine.errors import EngineError
from deskllm.engine.reply import Reply
from deskllm.engine.slot_client import SlotClient
from deskllm.gui.model_menu import same_file
from deskllm.gui.qt import QObject, Signal
from deskllm.gui.tasks import TaskRunner
from deskllm.loader import ModelLoader
from deskllm.remote.calibration import CALIBRATION_PROMPTS
from deskllm.store import ConversationStore, ModelLibrary, open_database
from deskllm.store.chat_session import ChatSession
from deskllm.tools.mcp_config import McpConfig, McpConfigError
from deskllm.tools.stored_turn import stored_tool_turn
from deskllm.tools.tool_host import ToolHost
from deskllm.tools.tool_loop import MAX_STEPS, ToolCall

log = logging.getLogger("deskllm.gui")


class EngineBridge(QObject):
    load_progress = Signal(float)
    loaded = Signal(object)
    load_failed = Signal(str)
    unloaded = Signal()
    delta = Signal(str, str)
    thinking = Signal(str, str)  # a reasoning model's thinking as it streams
    metrics = Signal(object)
    prompt_progress = Signal(str, object)
    finished = Signal(str, object)
    notice = Signal(str, str)
    serving = Signal(object)
    serve_failed = Signal(str)
    consent_needed = Signal(str, object)
    tool_stored = Signal(str, object)

    def __init__(self, client: EngineClient, db_path: Path) -> None:
        super().__init__()
        self.engine = client  # the one engine: the window's chat and the API server share it
        self.client = SlotClient(client)  # the window's own view of it
        self.server = None  # the EmbeddedServer (task thread writes, GUI thread reads)
        self.db_path = db_path
        self.tasks = TaskRunner("engine", self)
        self._session: ChatSession | None = None  # made on the task thread
        self._loader: ModelLoader | None = None
        self._db = None  # the task thread's connection
        # NAME/MODEL the router may escalate to now (set by the chat: the cached lists).
        self.routing_target: Callable[[], str | None] = lambda: None
        # The share of replies Auto sends remote for being unsure (None: off; the window sets it).
        self.escalate_share: Callable[[], float | None] = lambda: None
        self.calibrations: dict[str, routing.Calibration] = {}  # task thread only
        self._active_lock = threading.Lock()
        self._active: Reply | None = None  # the reply streaming now, to stop a remote one
        # The window's Documents: a conversation's collections are searched for each message.
        self.documents = None
        # MCP tools: the servers configured (mcp.json), those running, the step limit and
        # call timeout (the window sets them from its settings).
        self.mcp_config: McpConfig | None = None
        self.tool_host = ToolHost()
        self.tool_limits: Callable[[], tuple[int, float]] = lambda: (MAX_STEPS, 30.0)
        self._consent_lock = threading.Lock()
        self._consents: dict[str, tuple[threading.Event, list[str]]] = {}
        self._tool_cancel: threading.Event | None = None  # the turn with tools running now
        self._tool_client = None  # and what answers it (a remote model, the router)
        # How the window's API server loads another installed model a request names (the
        # window's settings); None: it serves the window's model only.
        self.params_for: Callable[[str], LoadParams] | None = None

    # GUI thread -------------------------------------------------------------------------------
    def load(self, params: LoadParams) -> None:
        self.tasks.run(lambda: self._load(params))

    def restart(self) -> None:
        """End the engine process whatever it is doing (a hung reply too) and load the same
        model in a fresh one."""
        self.client.kill()  # a reply being read ends with Exited; then the restart runs
        self.tasks.run(self._restart)

    def unload(self) -> None:
        self.tasks.run(self._unload)

    def send(self, conversation_id: str, text: str) -> None:
        target, share = self.routing_target(), self.escalate_share()
        start = lambda s: s.send(conversation_id, text)  # noqa: E731
        self.tasks.run(lambda: self._turn(conversation_id, start, text, target, share=share))

    def regenerate(self, conversation_id: str, ask: str | None = None) -> None:
        """Write the last reply anew; `ask` (NAME/MODEL): on that remote model, through the
        router (route reason "asked")."""
        target, share = ask or self.routing_target(), self.escalate_share()
        start = lambda s: s.reply(conversation_id)  # noqa: E731
        self.tasks.run(lambda: self._turn(conversation_id, start, None, target, ask is not None,
                                          share))  # fmt: skip

    def answer_consent(self, call_id: str, decision: str) -> None:
        """The user's answer to a tool call: "once", "always" or "deny"."""
        with self._consent_lock:
            waiting = self._consents.get(call_id)
        if waiting is not None:
            waiting[1][0] = decision
            waiting[0].set()

    def pending_consents(self) -> list[str]:
        """The calls waiting for the user's answer (their ids)."""
        with self._consent_lock:
            return list(self._consents)

    def continue_reply(self, conversation_id: str) -> None:
        """Go on with the conversation's interrupted last reply, in the same message."""
        self.tasks.run(
            lambda: self._stream(conversation_id, lambda s: s.continue_reply(conversation_id))
        )

    def start_serving(self, config, slots: int) -> None:
        """Serve the loaded model at `config`'s address with `slots` slots (0: as many as
        fit, up to AUTO_SERVER_SLOTS); `serving` or `serve_failed` follows."""
        self.tasks.run(lambda: self._start_serving(config, slots))

    def stop_serving(self) -> None:
        self.tasks.run(self._stop_serving)

    def forget(self, conversation_id: str) -> None:
        """The conversation was deleted: drop its KV state in RAM and on disk, and the index of
        the files attached to it."""
        self.client.forget(conversation_id)
        if self.documents is not None:
            documents = self.documents
            self.tasks.run(lambda: documents.detach(conversation_id))

    def stop(self) -> None:
        tool_turn = self._tool_cancel
        if tool_turn is not None:
            tool_turn.set()  # a call running or waiting for consent ends the turn at once
            if self._tool_client is not None:
                self._tool_client.cancel()  # a remote step's stream ends now, not at its next chunk
        self.client.cancel()
        with self._active_lock:
            active = self._active
        if active is not None:
            active.cancel()  # a remote stream, or the router's current one

    @property
    def streaming(self) -> bool:
        """Whether a reply of this window is being written now."""
        with self._active_lock:
            return self._active is not None

    @property
    def loader(self) -> ModelLoader | None:
        """The loader of the task thread (None before the first load); read its last_check
        on the GUI thread only after `loaded` or `load_failed`."""
        return self._loader

    def shutdown(self) -> None:
        self.stop()  # a remote stream too: its read would otherwise hold the exit
        if self.server is not None:
            self.tasks.run(self._stop_server_only)
        self.tasks.shutdown(wait=True)
        self.tool_host.close()
        self.engine.close()

    # Task thread ------------------------------------------------------------------------------
    def _parts(self) -> tuple[ModelLoader, ChatSession]:
        # An SQLite connection belongs to the thread that opened it: the task thread opens its
        # own (WAL lets it write while the GUI thread reads).
        if self._db is None:
            self._db = open_database(self.db_path)
        if self._session is None or self._loader is None:
            self._session = ChatSession(self.client, ConversationStore(self._db), self._retrieve)
            # The engine's slot count; the documents' embedding models' RAM left free.
            self._loader = ModelLoader(self.client, db=self._db, reserve=self._reserve)
        return self._loader, self._session

    def _start_serving(self, config, slots: int) -> None:
        from deskllm.server.embedded import EmbeddedServer, ServerStartError
        from deskllm.server.gateway import Gateway
        from deskllm.server.installed import InstalledModels, library_models
        from deskllm.settings import AUTO_SERVER_SLOTS

        if self.server is not None:
            self.tasks.post(self.serving.emit, self.server)
            return
        params = self.engine.params
        if params is None:
            self.tasks.post(self.serve_failed.emit, "Load a model first: the server serves "
                            "the model loaded in the window.")  # fmt: skip
            return
        loader = self._parts()[0]
        if slots <= 0:
            slots = loader.slots_that_fit(params, AUTO_SERVER_SLOTS)
        if self.engine.n_slots < slots or self.engine.loaded is None:
            previous = self.engine.n_slots
            try:  # one reload, through the loader: its memory check counts the slots
                loader.slots = slots
                loader.load(params, self._progress)
            except Exception as exc:  # the window keeps its model whatever failed
                if not isinstance(exc, EngineError):
                    log.exception("loading the model with slots failed")
                loader.slots = previous
                self._reload(params)
                self.tasks.post(self.serve_failed.emit, f"The model could not be loaded with "
                                f"{slots} slots: {exc}")  # fmt: skip
                return
            finally:
                loader.slots = None  # the engine's count from now on
        try:
            # `auto` and the remote endpoints' models answer there too, as in `deskllm serve`.
            gateway = Gateway(lambda: open_database(self.db_path), self.escalate_share())
            # A request naming another installed model loads it beside the window's.
            installed = None
            if self.params_for is not None:
                db_path = self.db_path
                installed = InstalledModels(lambda: library_models(db_path), self.params_for)
            server = EmbeddedServer(self.engine, self.engine.loaded,
                                    self._model_id(params.model_path), config, slots,
                                    gateway, installed, self._footprint(params))  # fmt: skip
            server.start()
        except Exception as exc:  # the model stays loaded as it is
            if not isinstance(exc, ServerStartError):
                log.exception("the API server could not start")
            self.tasks.post(self.serve_failed.emit, str(exc))
            return
        self.server = server
        self.tasks.post(self.serving.emit, server)

    def _footprint(self, params: LoadParams) -> int:
        """The RAM the planner counted for the window's model (its file size without a plan)."""
        from deskllm.server.model_host import planned_ram

        return planned_ram(self._parts()[0], params)

    def _model_id(self, model_path: str) -> str:
        """What the API calls the model: its name in the library as an id, as `deskllm serve`
        does."""
        from deskllm.server.installed import served_id

        return served_id(ModelLibrary(self._db).find(model_path), model_path)

    def _reload(self, params: LoadParams) -> None:
        try:
            loaded = self._parts()[0].load(params, self._progress)
        except EngineError as exc:
            self.tasks.post(self.load_failed.emit, str(exc))
        else:
            self.tasks.post(self.loaded.emit, loaded)

    def _stop_server_only(self) -> None:
        """Stop the server; the engine keeps its model and slots, and the window its chat."""
        server, self.server = self.server, None
        if server is not None:
            server.stop()

    def _stop_serving(self) -> None:
        self._stop_server_only()
        self.tasks.post(self.serving.emit, None)

    def _load(self, params: LoadParams) -> None:
        try:
            loaded = self._parts()[0].load(params, self._progress)
            if self.server is not None:  # the API serves the model the window loaded
                self.server.model_changed(loaded, self._model_id(params.model_path))
        except EngineError as exc:
            self.tasks.post(self.load_failed.emit, str(exc))
        except Exception as exc:  # any failure becomes a message, never a dead task thread
            log.exception("loading %s failed", params.model_path)
            self.tasks.post(self.load_failed.emit, f"{type(exc).__name__}: {exc}")
        else:
            self.tasks.post(self.loaded.emit, loaded)

    def _progress(self, fraction: float) -> None:
        self.tasks.post(self.load_progress.emit, fraction)

    def _restart(self) -> None:
        try:
            loaded = self.client.restart(self._progress)
        except EngineError as exc:
            self.tasks.post(self.load_failed.emit, str(exc))
            return
        if loaded is None:
            self.tasks.post(self.load_failed.emit, "no model was loaded to restart with")
        else:
            self.tasks.post(self.loaded.emit, loaded)

    def _unload(self) -> None:
        if self.server is not None:  # nothing left to serve
            self._stop_server_only()
            self.tasks.post(self.serving.emit, None)
        self.client.unload()
        self.tasks.post(self.unloaded.emit)

    def _session_for(
        self, conversation_id: str, target: str | None, asked: bool, share: float | None
    ) -> tuple[ChatSession, Callable[[], None] | None]:
        """The session that answers this conversation now, and what closes its client."""
        local = self._parts()[1]
        conversation = local.store.get(conversation_id)
        model = conversation.model
        resolver = Resolver(self._db)
        if asked or model == AUTO:
            router = resolver.stored_router(self.client, target)
            if asked:
                router.ask_remote_next()
            elif router.target is not None and share is not None:
                sampling = Sampling.from_dict(conversation.sampling)
                router.policy = self._calibration(conversation_id, share, sampling).policy
            return ChatSession(router, local.store, self._retrieve), router.close
        if is_remote(model):
            remote = resolver.stored_remote(model)
            return ChatSession(remote, local.store, self._retrieve), remote.close
        server, loaded = self.server, self.engine.params
        if (server is not None and model and loaded is not None
                and not same_file(model, loaded.model_path) and Path(model).is_file()):  # fmt: skip
            # The API server runs: another model answers beside the window's (loaded there
            # as a request naming it would be), instead of reloading the one both serve.
            try:
                engine, release = server.hold_model(model)
            except EngineError as exc:
                return ChatSession(_Refused(model, exc), local.store, self._retrieve), None
            return ChatSession(SlotClient(engine), local.store, self._retrieve), release
        return local, None

    def _reserve(self) -> int:
        return self.documents.memory_to_reserve() if self.documents is not None else 0

    def _retrieve(self, conversation_id: str, question: str) -> list:
        """The conversation's passages for this message; a search that fails is said, and the
        reply goes on without them."""
        if self.documents is None:
            return []
        # Attachments go in whole while they take at most half the chat's context.
        budget = self.engine.conversation_ctx // 2
        try:
            return self.documents.retrieve(conversation_id, question, budget)
        except Exception as exc:  # noqa: BLE001 (the reply matters more than its sources)
            log.exception("document search failed")
            self.tasks.post(self.notice.emit, conversation_id,
                            f"Your documents could not be searched: {exc}")  # fmt: skip
            return []

    def _calibration(
        self, conversation_id: str, share: float, sampling: Sampling
    ) -> routing.Calibration:
        """Auto's threshold for `share`, measured on the loaded model the first time."""
        model = self.client.label or ""
        key = routing.calibration_key(model, share, sampling)
        if key not in self.calibrations:
            n = len(CALIBRATION_PROMPTS)
            self.tasks.post(self.notice.emit, conversation_id, f"Measuring how sure the local "
                            f"model is on {n} fixed prompts (once per model)…")  # fmt: skip
            self.calibrations[key] = routing.calibrate(self.client, share, sampling)
        return self.calibrations[key]

    def _stream(
        self,
        conversation_id: str,
        start,
        target: str | None = None,
        asked: bool = False,
        share: float | None = None,
    ) -> None:
        reply: Reply | None = None
        close = None
        try:
            session, close = self._session_for(conversation_id, target, asked, share)
            reply = start(session)
            with self._active_lock:
                self._active = reply
            for event in reply.events():
                self._post_event(conversation_id, event)
        except EngineError as exc:  # a remote endpoint that is gone: said as it is
            reply = reply or Reply(iter(()))
            reply.error = exc
        except Exception as exc:  # keep the GUI alive whatever the core raised
            log.exception("chat failed")
            reply = reply or Reply(iter(()))
            reply.error = EngineError(f"{type(exc).__name__}: {exc}")
        finally:
            with self._active_lock:
                self._active = None
            if close is not None:
                close()
        self.tasks.post(self.finished.emit, conversation_id, reply)

    def _post_event(self, conversation_id: str, event) -> None:
        """A reply's event, to the window: its text, thinking, figures or prompt progress."""
        if isinstance(event, TextDelta) and event.reasoning:
            self.tasks.post(self.thinking.emit, conversation_id, event.text)
        elif isinstance(event, TextDelta):
            self.tasks.post(self.delta.emit, conversation_id, event.text)
        elif isinstance(event, Metrics):
            self.tasks.post(self.metrics.emit, event)
        elif isinstance(event, PromptProgress):
            self.tasks.post(self.prompt_progress.emit, conversation_id, event)

    def _turn(self, conversation_id: str, start, text: str | None, target: str | None = None,
              asked: bool = False, share: float | None = None) -> None:  # fmt: skip
        """A turn with tools where the conversation has MCP servers (on the local model, a
        remote one, or Auto's router, which keeps the turn on one engine); otherwise a plain
        reply. A reply asked of the remote model is written without tools."""
        conversation = self._parts()[1].store.get(conversation_id)
        if conversation.tool_servers and self.mcp_config is not None and not asked:
            self._tool_stream(conversation_id, text, conversation.tool_servers, target, share)
        else:
            self._stream(conversation_id, start, target, asked, share)

    def _tool_stream(self, conversation_id: str, text: str | None, names: list[str],
                     target: str | None, share: float | None) -> None:  # fmt: skip
        store = self._parts()[1].store
        if text is not None:
            store.add_message(conversation_id, "user", text)
        servers, failures = [], {}
        for name in names:
            try:
                server = self.mcp_config.get(name)
            except McpConfigError as exc:
                failures[name] = str(exc)
                continue
            if server.enabled:
                servers.append(server)
            else:
                failures[name] = "it is turned off in Chat → Tool servers…"
        steps, timeout = self.tool_limits()
        self.tool_host.call_timeout_s = timeout
        cancel = threading.Event()
        self._tool_cancel = cancel
        reply: Reply | None = None
        close = None
        try:
            session, close = self._session_for(conversation_id, target, False, share)
            self._tool_client = session.client
            box, failed = self.tool_host.toolbox(servers)
            failures.update(failed)
            by_server = {s.name: set(s.always_allow) for s in servers}
            allowed = {t.name for t in box.tools() if t.remote_name in by_server.get(t.server, ())}
            turn = stored_tool_turn(
                session, conversation_id, box,
                lambda call: self._consent(conversation_id, call, cancel),
                allowed=allowed, max_steps=steps, cancel=cancel,
                on_event=lambda event: self._post_event(conversation_id, event),
                on_stored=lambda m: self.tasks.post(self.tool_stored.emit, conversation_id, m),
                failures=failures,
            )  # fmt: skip
            reply = turn.last_reply
        except Exception as exc:  # keep the GUI alive whatever the core raised
            log.exception("chat with tools failed")
            reply = Reply(iter(()))
            reply.error = EngineError(f"{type(exc).__name__}: {exc}")
        finally:
            self._tool_cancel = self._tool_client = None
            if close is not None:
                close()
        if reply is None:  # no model reply at all (stopped before the first)
            reply = Reply(iter(()))
            reply.error = EngineError("stopped before the model replied")
        self.tasks.post(self.finished.emit, conversation_id, reply)

    def _consent(self, conversation_id: str, call: ToolCall, cancel: threading.Event) -> str:
        """Ask the window, and wait for the answer (a Stop answers "deny" and ends the turn).
        "Always" is kept in mcp.json for that server's tool."""
        waiting = (threading.Event(), ["deny"])
        with self._consent_lock:
            self._consents[call.id] = waiting
        self.tasks.post(self.consent_needed.emit, conversation_id, call)
        try:
            while not waiting[0].wait(0.1) and not cancel.is_set():
                pass
        finally:
            with self._consent_lock:
                self._consents.pop(call.id, None)
        decision = waiting[1][0] if not cancel.is_set() else "deny"
        if decision == "always" and call.tool is not None and self.mcp_config is not None:
            try:
                self.mcp_config.allow_always(call.tool.server, call.tool.remote_name)
            except (McpConfigError, OSError):
                log.exception("could not keep the always-allowed tool")
        return decision


class _Refused:
    """A chat backend that cannot answer, and says why in each reply (stored as an error
    after the user's message, which is kept)."""

    def __init__(self, label: str, error: EngineError) -> None:
        self.label = label
        self.error = error

    def chat(self, *_args, **_options) -> Reply:
        return Reply(iter([Error(None, self.error.reason, self.error.kind)]))

    def cancel(self) -> None:
        pass
