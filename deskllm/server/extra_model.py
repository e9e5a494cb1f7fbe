"""An installed model loaded on demand beside the served one: its own engine process (a crash
there touches no other model), slots and queue, kept for its keep-alive time after its last
request and unloaded when that runs out or when another model needs its memory."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import LoadParams
from deskllm.server.engine_queue import EngineQueue
from deskllm.server.installed import InstalledModels, names_model

# Between a request's use() and its admission the model must not expire: a keep-alive of 0
# unloads it this long after its last reply at the soonest.
MIN_IDLE_S = 0.5


@dataclass(eq=False)
class ExtraModel:
    """What the servings need of a model they answer with (as of ModelHost): its queue,
    context, id and state."""

    model_id: str
    params: LoadParams
    client: EngineClient
    queue: EngineQueue
    n_ctx: int
    footprint_bytes: int  # what the planner said it needs in RAM
    keep_alive_s: float  # after its last request; negative: never expires
    installed: InstalledModels | None = None
    last_used: float = field(default_factory=time.monotonic)
    loaded_at: float = field(default_factory=time.time)
    aliases: set[str] = field(default_factory=set)
    # It is loaded and answering when it is in the host's table; a dead engine is started
    # again by its next request, as the served model's is.
    state: str = "ready"
    loading_id: str | None = None
    failure: str | None = None
    restart_cause: str | None = None

    def serves(self, name: str) -> bool:
        return names_model(name, self.model_id, Path(self.params.model_path), self.aliases)

    held: int = 0  # replies of the window's own chat writing with it now (not queued here)

    @property
    def busy(self) -> bool:
        return self.queue.waiting + self.queue.running + self.held > 0

    def touch(self, keep_alive_s: float | None = None) -> None:
        self.last_used = time.monotonic()
        if keep_alive_s is not None:
            self.keep_alive_s = keep_alive_s

    def expires_in(self, now: float | None = None) -> float | None:
        """Seconds until it expires if it stays idle; None: never."""
        if self.keep_alive_s < 0:
            return None
        now = time.monotonic() if now is None else now
        return max(0.0, self.last_used + max(self.keep_alive_s, MIN_IDLE_S) - now)

    def expired(self, now: float) -> bool:
        return not self.busy and self.expires_in(now) == 0.0

    def close(self) -> None:
        self.queue.close()
        self.client.close()
