"""The installed models a server may load when a request names one: the library's models, each
under the id /v1/models lists it by, and how to load one (the settings the server started
with)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deskllm.engine.domain import LoadParams
from deskllm.store.library import InstalledModel


def api_id(name: str) -> str:
    """The id the API gives a model: its library name as a client can type it (no spaces or
    brackets, lower case): "SmolLM2-135M-Instruct (Q4_1)" → "smollm2-135m-instruct-q4_1".
    The name itself is accepted too."""
    return re.sub(r"[^a-z0-9._:-]+", "-", name.lower()).strip("-") or "model"


def names_model(name: str, model_id: str, path: Path, aliases: set[str]) -> bool:
    """Whether a request's `name` means the model `model_id` loaded from `path`: its id, its
    library name, its file name or stem, or a short name found to mean it (`aliases`)."""
    return (name in (model_id, path.name, path.stem) or api_id(name) == model_id
            or name in aliases)  # fmt: skip


def served_id(installed: InstalledModel | None, model_path: str) -> str:
    """The id the API serves a model file under: its library name's, else its file stem's
    (`deskllm serve` and the window's server alike)."""
    return api_id(installed.name if installed else Path(model_path).stem)


@dataclass(frozen=True)
class InstalledModels:
    """`list` reads the library (called in a worker thread: it may open the database);
    `params_for` gives the load parameters of a model file; `remove` forgets a model and
    deletes its file (Ollama's /api/delete; None: models cannot be deleted here); `pull`
    downloads one (Ollama's /api/pull)."""

    list: Callable[[], list[InstalledModel]]
    params_for: Callable[[str], LoadParams]
    remove: Callable[[InstalledModel], None] | None = None
    # Download a model from the Hub into the library (Ollama's /api/pull; None: not here):
    # pull(repo, quant or None, on_progress, stop) -> the final Progress.
    pull: Callable[..., Any] | None = None

    def by_id(self) -> dict[str, InstalledModel]:
        """Every installed model whose file is there, by a unique id: its name's api_id, or its
        file name's where an earlier model has that one already."""
        found: dict[str, InstalledModel] = {}
        for model in self.list():
            if not model.exists:
                continue
            key = api_id(model.name)
            found.setdefault(key if key not in found else api_id(Path(model.path).name), model)
        return found

    def find(self, name: str) -> tuple[str, InstalledModel] | None:
        """The model a request names: by id, name (any case), file name or file stem, or a
        short name that is part of exactly one model's id or file name (any case)."""
        models = self.by_id()
        if name in models:
            return name, models[name]
        if api_id(name) in models:  # its library name, "SmolLM2-135M-Instruct (Q4_1)"
            return api_id(name), models[api_id(name)]
        for key, model in models.items():
            path = Path(model.path)
            if name.lower() == model.name.lower() or name in (path.name, path.stem):
                return key, model
        short, short_id = name.lower(), api_id(name)
        found = [(key, model) for key, model in models.items()
                 if short_id in key or short in Path(model.path).name.lower()]  # fmt: skip
        return found[0] if len(found) == 1 and short else None


def library_models(db_path: Path | None = None) -> list[InstalledModel]:
    """The library now (a model may be installed while a server runs), from any thread."""
    from deskllm.database import open_database
    from deskllm.store.library import ModelLibrary

    db = open_database(db_path)
    try:
        return ModelLibrary(db).list()
    finally:
        db.close()
