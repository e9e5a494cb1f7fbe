"""The installed models a server may load when a request names one: the library's models, each
under the id /v1/models lists it by, and how to load one (the settings the server started
with)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deskllm.engine.domain import LoadParams
from deskllm.store.library import InstalledModel


@dataclass(frozen=True)
class InstalledModels:
    """`list` reads the library (called in a worker thread: it may open the database);
    `params_for` gives the load parameters of a model file."""

    list: Callable[[], list[InstalledModel]]
    params_for: Callable[[str], LoadParams]

    def by_id(self) -> dict[str, InstalledModel]:
        """Every installed model whose file is there, by a unique id: its name, or its file
        name where an earlier model has that name already."""
        found: dict[str, InstalledModel] = {}
        for model in self.list():
            if not model.exists:
                continue
            key = model.name if model.name not in found else Path(model.path).name
            found.setdefault(key, model)
        return found

    def find(self, name: str) -> tuple[str, InstalledModel] | None:
        """The model a request names: by id, name (any case), file name or file stem, or a
        short name that is part of exactly one model's id or file name (any case)."""
        models = self.by_id()
        if name in models:
            return name, models[name]
        for key, model in models.items():
            path = Path(model.path)
            if name.lower() == model.name.lower() or name in (path.name, path.stem):
                return key, model
        short = name.lower()
        found = [(key, model) for key, model in models.items()
                 if short in key.lower() or short in Path(model.path).name.lower()]  # fmt: skip
        return found[0] if len(found) == 1 and short else None
