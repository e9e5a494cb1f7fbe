"""Draft-model speculation in the real engine: the starter model (Q4_1) drafts for a Q8_0 copy
of itself made with llama_model_quantize. Greedy replies are plain decoding's token for token
except at near-ties, at one stream and at four; sampling keeps the model's distribution; a
draft of another vocabulary is refused with the reason."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from remote_helpers import needs_llama_server
from test_engine_speculation import (
    COPY,
    QUOTE,
    SAMPLES,
    assert_same_but_near_ties,
    chi_square_same,
    divergence_report,
    divergences,
    four_at_once_against_plain,
    greedy,
    token_counts,
    tokens_of,
)

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, LoadParams
from deskllm.engine.draft_model import VocabFacts, draft_refusal
from deskllm.engine.errors import EngineError
from deskllm.llamacpp.requantize import requantize

STORY = [ChatMessage("user", "Write a short story about a lighthouse keeper.")]


@pytest.fixture(scope="module")
def pair(starter_model, tmp_path_factory) -> tuple[Path, Path]:
    """(the model, its draft): a Q8_0 copy of the starter model, and the starter model."""
    target = tmp_path_factory.mktemp("draft") / "starter-q8_0.gguf"
    requantize(starter_model, {"Q8_0": target})
    return target, starter_model


@pytest.fixture(scope="module")
def drafting(pair, extra_bufts):
    target, draft = pair
    with EngineClient(n_slots=4) as client:
        client.load(LoadParams(str(target), n_ctx=2048, n_threads=2, use_extra_bufts=extra_bufts,
                               kv_ram_budget_mb=0, kv_disk_budget_mb=0,
                               draft_model_path=str(draft)))  # fmt: skip
        yield client


@pytest.mark.parametrize("messages", [COPY, QUOTE, STORY], ids=["code", "quote", "story"])
def test_greedy_replies_with_a_draft_model_are_plain_decodings(drafting, messages):
    plain, plain_done = tokens_of(drafting, messages, greedy("off"))
    spec, spec_done = tokens_of(drafting, messages, greedy("draft"))
    assert_same_but_near_ties(plain, spec)
    m = spec_done.metrics
    assert plain_done.metrics.draft_n == 0 and m.draft_n > 0 and m.draft_passes > 0
    # A same-weights draft is taken nearly always: fewer decodes than tokens.
    assert m.draft_n_accepted >= 0.8 * m.draft_n
    assert m.draft_passes < m.generated_tokens / 2


def test_four_streams_draft_at_once_and_each_is_its_plain_reply(drafting):
    asks = [COPY, QUOTE, STORY, [ChatMessage("user", "Name ten rivers of Europe.")]]
    for _tokens, done in four_at_once_against_plain(drafting, asks, "draft"):
        assert done.metrics.draft_n_accepted > 0


def test_sampling_with_a_draft_model_keeps_the_models_distribution(drafting):
    plain, _ = token_counts(drafting, "off")
    drafted, accepted = token_counts(drafting, "draft")
    assert accepted > SAMPLES // 2  # drafts were taken (the draft stops where it is unsure)
    stat, critical = chi_square_same(plain, drafted)
    assert len(plain) > 1, plain
    assert stat < critical, (plain, drafted)


def test_a_draft_of_another_vocabulary_is_refused_with_the_reason(starter_model, gemma_model,
                                                                 extra_bufts):  # fmt: skip
    with EngineClient() as client, pytest.raises(EngineError) as refused:
        client.load(LoadParams(str(starter_model), n_ctx=1024, n_threads=2,
                               use_extra_bufts=extra_bufts,
                               draft_model_path=str(gemma_model)))  # fmt: skip
    message = str(refused.value)
    assert f"{gemma_model} cannot be the draft model" in message
    assert message.endswith("its tokenizer is SentencePiece (SPM), the model's byte-pair (BPE)")


def facts(**changes) -> VocabFacts:
    base = dict(kind=2, n_tokens=8, bos=1, eos=2, add_bos=False,
                texts=tuple(f"t{i}".encode() for i in range(8)))  # fmt: skip
    return VocabFacts(**(base | changes))


def test_the_compatibility_rules():
    assert draft_refusal(facts(), facts()) is None
    # A few tokens added at the end (an instruct model's chat tokens) are fine.
    assert draft_refusal(facts(), facts(n_tokens=9, texts=facts().texts + (b"x",))) is None
    assert "tokenizer is SentencePiece (SPM)" in draft_refusal(facts(), facts(kind=1))
    assert "vocabulary has 1,000 tokens, the model's 8" in draft_refusal(
        facts(), facts(n_tokens=1000, texts=tuple(b"t%d" % i for i in range(1000))))
    assert "special tokens differ" in draft_refusal(facts(), facts(eos=3))
    other = facts(texts=facts().texts[:6] + (b"zz", b"t7"))
    assert draft_refusal(facts(), other) == (
        "token 6 is b'zz' in it and b't6' in the model: another vocabulary")
    # The first tokens (control tokens: <unk>, <s>...) may be named differently.
    assert draft_refusal(facts(), facts(texts=(b"<pad>",) + facts().texts[1:])) is None


def test_a_request_for_draft_without_a_draft_model_gets_ngram_drafts(starter_model, extra_bufts):
    with EngineClient() as client:
        client.load(LoadParams(str(starter_model), n_ctx=2048, n_threads=2,
                               use_extra_bufts=extra_bufts, kv_ram_budget_mb=0,
                               kv_disk_budget_mb=0))  # fmt: skip
        done = client.chat(uuid.uuid4().hex, QUOTE, greedy("draft")).wait().done
    assert done is not None and done.metrics.draft_n > 0


def test_the_library_suggests_a_draft_of_the_same_vocabulary_and_a_smaller_file(
        pair, gemma_model, tmp_path):  # fmt: skip
    from deskllm.database.connection import open_database
    from deskllm.store.library import ModelLibrary

    target, draft = pair
    db = open_database(tmp_path / "store.sqlite3")
    library = ModelLibrary(db)
    for path in (target, draft, gemma_model):
        library.add(path)
    suggested = library.suggest_draft(str(target))
    assert suggested is not None and suggested.path == str(Path(draft).resolve())
    assert library.suggest_draft(str(draft)) is None  # nothing smaller speaks its tokens
    assert library.suggest_draft(str(gemma_model)) is None  # another vocabulary only
    db.close()


@needs_llama_server
def test_our_draft_replies_diverge_no_more_than_llama_servers(pair, drafting, extra_bufts,
                                                              tmp_path, record_property):
    """The same check on llama-server's draft-model speculation (`--spec-type draft-simple`
    with the same pair): ours may differ from plain decoding only at near-ties; where theirs
    differ, and how near a tie, is reported."""
    target, draft = pair
    ours, theirs = divergences(drafting, target, "draft",
                               ("--spec-type", "draft-simple", "--model-draft", str(draft)),
                               tmp_path, extra_bufts)  # fmt: skip
    divergence_report(ours, theirs, "draft-simple", record_property)
