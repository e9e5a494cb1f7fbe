"""Which installed models pair for speculative decoding (draft_pairs, installed_draft_pairs):
the rule of ModelLibrary.draft_candidates both ways, on real files: the starter model (Q4_1)
drafts for a Q8_0 requantization of itself; a same-size copy pairs with nothing; a model of
another vocabulary never pairs; headers are read once per (path, size)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deskllm.gguf.header import read_header
from deskllm.llamacpp.requantize import requantize
from deskllm.store import ModelLibrary, open_database
from deskllm.store.library import (
    DraftPairs,
    cached_vocabulary,
    draft_pairs,
    installed_draft_pairs,
    vocabulary_key,
)


@pytest.fixture(scope="module")
def q8_0(starter_model, tmp_path_factory) -> Path:
    """A Q8_0 copy of the starter model: the same vocabulary, the starter 0.68 of its size."""
    target = tmp_path_factory.mktemp("drafts") / "starter-q8_0.gguf"
    requantize(starter_model, {"Q8_0": target})
    return target


@pytest.fixture
def library(deskllm_home) -> ModelLibrary:
    library = ModelLibrary(open_database())
    library.ensure_starter()
    return library


def names(models) -> list[str]:
    return [Path(m.path).name for m in models]


def test_the_starter_drafts_for_its_q8_0_copy_and_not_the_other_way(library, q8_0):
    starter = library.list()[0]
    target = library.add(q8_0)
    models = library.list()
    assert installed_draft_pairs(target, models) == DraftPairs(drafts=(starter,))
    assert installed_draft_pairs(starter, models) == DraftPairs(drafts_for=(target,))
    # The same rule as the library's own suggestion (used by --draft-model auto).
    for model in models:
        assert list(installed_draft_pairs(model, models).drafts) == library.draft_candidates(
            model.path
        )


def test_a_file_on_the_hub_pairs_by_its_header_and_size(library, q8_0, starter_model):
    models = library.list()  # the starter alone
    vocabulary = vocabulary_key(read_header(q8_0))
    size, starter_size = q8_0.stat().st_size, starter_model.stat().st_size
    assert draft_pairs(vocabulary, size, models) == DraftPairs(drafts=tuple(models))
    assert draft_pairs(vocabulary, starter_size, models) == DraftPairs()
    smaller = starter_size // 2
    assert draft_pairs(vocabulary, smaller, models) == DraftPairs(drafts_for=tuple(models))
    assert draft_pairs(("another", 1, 2, 3), size, models) == DraftPairs()


def test_a_copy_of_the_same_size_pairs_with_nothing(library, copy_model):
    copy = library.add(copy_model("same.gguf"))
    assert installed_draft_pairs(copy, library.list()) == DraftPairs()


def test_another_vocabulary_never_pairs(library, q8_0, embedding_model):
    # MiniLM is small enough to draft for either by the size rule: its vocabulary keeps it out.
    minilm = library.add(embedding_model)
    library.add(q8_0)
    models = library.list()
    assert minilm.size_bytes <= 0.75 * min(m.size_bytes for m in models if m != minilm)
    for model in models:
        pairs = installed_draft_pairs(model, models)
        assert minilm not in pairs.drafts + pairs.drafts_for
    assert installed_draft_pairs(minilm, models) == DraftPairs()


def test_gemma_never_pairs_with_smollm(library, q8_0, gemma_model):
    gemma = library.add(gemma_model)
    library.add(q8_0)
    models = library.list()
    assert installed_draft_pairs(gemma, models) == DraftPairs()
    assert all(gemma not in installed_draft_pairs(m, models).drafts for m in models)


def test_a_header_is_read_once_per_path_and_size(tmp_path, copy_model):
    path = copy_model("kept.gguf")
    size = path.stat().st_size
    first = cached_vocabulary(str(path), size)
    assert first is not None
    path.write_bytes(b"\0" * size)  # the same size: the kept answer stands, nothing is read
    assert cached_vocabulary(str(path), size) == first
    path.write_bytes(b"not a model")  # another size: read again, and unreadable
    assert cached_vocabulary(str(path), path.stat().st_size) is None


def test_an_unreadable_file_is_not_kept(tmp_path, starter_model):
    path = tmp_path / "later.gguf"
    size = starter_model.stat().st_size
    assert cached_vocabulary(str(path), size) is None  # not there yet
    path.write_bytes(starter_model.read_bytes())
    assert cached_vocabulary(str(path), size) == vocabulary_key(read_header(starter_model))
