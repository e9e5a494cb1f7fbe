"""ModelHost: the one model a server serves, loaded through the loader in the background (so
/health can answer 503 while it loads), and the queue in front of its engine: the
single-stream engine, or with `parallel` > 1 the batched engine with that many slots."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from enum import StrEnum

from deskllm.engine.client import EngineClient
from deskllm.engine.errors import EngineError
from deskllm.engine.protocol import LoadParams
from deskllm.loader import ModelLoader
from deskllm.server.engine_queue import EngineQueue

log = logging.getLogger("deskllm.server")


class HostState(StrEnum):
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"


class ModelHost:
    """Serves `params`' model as `model_id`. `open_db` opens the app's database in the loading
    thread (the loader records calibration there); None loads without calibration."""

    def __init__(
        self,
        params: LoadParams,
        model_id: str,
        *,
        max_queue: int,
        open_db: Callable[[], object] | None = None,
        client: EngineClient | None = None,
        parallel: int = 1,
    ) -> None:
        self.params = params
        self.model_id = model_id
        self.parallel = parallel
        if parallel > 1:
            from deskllm.engine.batch_client import BatchEngineClient
            from deskllm.server.batch_queue import BatchEngineQueue

            self.client = client or BatchEngineClient(parallel)
            self.queue = BatchEngineQueue(self.client, max_queue, parallel)
        else:
            self.client = client or EngineClient()
            self.queue = EngineQueue(self.client, max_queue)
        self.state = HostState.LOADING
        self.failure: str | None = None
        self.n_ctx = 0
        self.created = int(time.time())
        self._open_db = open_db
        self.loaded_event = threading.Event()
        self.on_failure: Callable[[str], None] | None = None

    def start_loading(self) -> None:
        threading.Thread(target=self._load, name="deskllm-api-load", daemon=True).start()

    def _load(self) -> None:
        try:
            db = self._open_db() if self._open_db else None
            loaded = ModelLoader(self.client, db=db, slots=self.parallel).load(self.params)
        except EngineError as exc:
            self._fail(str(exc))
        except Exception as exc:  # a bug: say so rather than serve 503 forever
            log.exception("loading the model failed")
            self._fail(f"loading failed: {exc}")
        else:
            self.n_ctx = loaded.n_ctx // self.parallel  # one slot's context
            self.state = HostState.READY
            log.info("serving %s (%d-token context)", self.model_id, self.n_ctx)
        finally:
            self.loaded_event.set()

    def _fail(self, reason: str) -> None:
        self.failure = reason
        self.state = HostState.FAILED
        if self.on_failure is not None:
            self.on_failure(reason)

    def close(self) -> None:
        self.queue.close()
        self.client.close()
