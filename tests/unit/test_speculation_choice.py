"""The rule the Automatic speculation setting follows (speculation_stage.choose_speculation):
a mode is taken only where it gains on the two shapes together and keeps free text within 5%
of plain decoding; a failed measurement is never taken; otherwise "off"."""

from __future__ import annotations

from deskllm.measure.speculation_stage import FREE_FLOOR, SpecCandidate, choose_speculation


def row(mode: str, copy: float, free: float, draft: str | None = None,
        error: str | None = None) -> dict:  # fmt: skip
    return {"mode": mode, "draft": draft, "label": SpecCandidate(mode, draft).label,
            "copy_tps": 60 * copy, "free_tps": 60 * free, "copy_over_off": copy,
            "free_over_off": free, "acceptance_copy": 0.7, "acceptance_free": 0.3,
            "error": error}  # fmt: skip


def test_the_mode_that_gains_most_on_both_shapes_is_chosen():
    chosen = choose_speculation([row("auto", 1.6, 0.99), row("draft", 1.9, 1.2, "/m/small.gguf")])
    assert (chosen["mode"], chosen["draft"]) == ("draft", "/m/small.gguf")
    assert chosen["label"] == "draft model small.gguf"
    assert chosen["reason"] == "1.90× plain speed quoting a text, 1.20× writing freely"


def test_a_mode_that_slows_free_text_past_the_floor_is_not_chosen_however_fast_it_copies():
    chosen = choose_speculation([row("auto", 1.1, 0.98), row("draft", 3.0, FREE_FLOOR - 0.01,
                                                             "/m/small.gguf")])  # fmt: skip
    assert chosen["mode"] == "auto"


def test_no_gain_or_only_failures_leave_it_off_with_every_figure_in_the_reason():
    chosen = choose_speculation([row("auto", 1.02, 1.0),
                                 row("draft", 0, 0, "/m/small.gguf", error="refused")])  # fmt: skip
    assert (chosen["mode"], chosen["draft"]) == ("off", None)
    assert chosen["reason"] == ("no speculation paid: n-gram drafts 1.02× plain speed quoting a "
                                "text, 1.00× writing freely; draft model small.gguf failed: "
                                "refused")  # fmt: skip
    assert choose_speculation([])["reason"] == "no speculation paid: nothing to draft with"
