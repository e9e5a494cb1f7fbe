"""AppModel: the app's loaded model, freed for a while and loaded again. The Benchmark dialog
runs its suite in an engine process of its own; with the app's copy beside it a big model
would need twice the memory. Both steps go through the main window's own unload and load
path (EngineBridge), so the status bar, the Models panel and the chat say what happens.
"""

from __future__ import annotations

from collections.abc import Callable

from deskllm.gui.engine_bridge import EngineBridge


class AppModel:
    """`loaded_path()`: the model loaded now (None: none); `load(path)`: the window's load."""

    def __init__(
        self,
        bridge: EngineBridge,
        loaded_path: Callable[[], str | None],
        load: Callable[[str], None],
    ) -> None:
        self.bridge = bridge
        self._loaded_path = loaded_path
        self._load = load
        self.held: str | None = None  # the model freed, to be loaded again
        self.held_server: tuple[object, int] | None = None  # (config, slots) it served with

    @property
    def loaded(self) -> str | None:
        return self._loaded_path()

    @property
    def serving(self) -> bool:
        """Whether the local API server serves the loaded model (an unload stops it)."""
        return self.bridge.server is not None

    def release(self, then: Callable[[], None]) -> None:
        """Free the loaded model and call `then` once it is freed (on the GUI thread); with
        none loaded, call it now. The unload waits for a reply being written to end."""
        path = self._loaded_path()
        if path is None:
            then()
            return
        self.held = path
        server = self.bridge.server
        self.held_server = (server.config, server.slots) if server is not None else None

        def freed() -> None:
            self.bridge.unloaded.disconnect(freed)
            then()

        self.bridge.unloaded.connect(freed)
        self.bridge.unload()

    def restore(self) -> None:
        """Load the freed model again, unless the user loaded one in the meantime; where the
        API server served it, start the server again as it was once the model is back."""
        path, self.held = self.held, None
        server, self.held_server = self.held_server, None
        if path is None or self._loaded_path() is not None:
            return
        if server is not None:
            config, slots = server

            def back(_loaded) -> None:
                self.bridge.loaded.disconnect(back)
                self.bridge.start_serving(config, slots)

            self.bridge.loaded.connect(back)
        self._load(path)
