"""The benchmark suite's speculation stage: the chosen configuration measured with speculative
decoding off, with n-gram drafts ("auto": drafts only while they pay) and with each
compatible installed draft model, on a copy-heavy reply (quoting a pasted text) and a free one
(a story). The Automatic speculation setting follows the choice (deskllm.loader), as the
automatic configuration follows the suite's.

Each load measures its modes interleaved, round by round, and each mode is compared with
"off" measured in the same load: the ratios, not the speeds, decide (this machine may be
busy with other work, and a draft's load changes what else is in memory).
"""

from __future__ import annotations

import statistics
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from deskllm.engine.client import EngineClient
from deskllm.engine.domain import ChatMessage, LoadParams, Sampling
from deskllm.engine.errors import EngineError

QUOTED = (
    "The lighthouse stood on the rock for two hundred years. Its keeper climbed the ninety "
    "steps every evening, lit the lamp, wound the clockwork and wrote in her log: the wind, "
    "the height of the waves, the ships that passed. In the winter of the great storm the "
    "lamp burned for six days without rest, and not one ship was lost on the reef."
)
SHAPES = {
    "copy": "Here is a text.\n\n" + QUOTED + "\n\nQuote the text above word for word.",
    "free": "Write a long story about a lighthouse keeper and a storm.",
}
TOKENS, QUICK_TOKENS = 160, 48
ROUNDS, QUICK_ROUNDS = 2, 1
# A mode is chosen only where the free reply keeps this share of plain decoding's speed at
# least (the "never slower than plain by more than 5%"), and only where it gains on
# the two shapes together (their geometric mean) by more than MIN_GAIN: a tie stays "off",
# which is plain decoding exactly.
FREE_FLOOR = 0.95
MIN_GAIN = 0.03

Progress = Callable[[str], None]
Load = Callable[[LoadParams], None]


@dataclass(frozen=True)
class SpecCandidate:
    mode: str  # "auto" (n-gram drafts while they pay) or "draft"
    draft: str | None = None  # the draft model's file for "draft"

    @property
    def label(self) -> str:
        return f"draft model {Path(self.draft).name}" if self.draft else "n-gram drafts"


def measure_speculation(
    client: EngineClient,
    load: Load,
    base: LoadParams,
    drafts: list[str],
    *,
    quick: bool = False,
    progress: Progress | None = None,
    check: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """{"measured": [a row per candidate], "chosen": {mode, draft, reason}} for `base` (the
    chosen configuration's params) with n-gram drafts and each of `drafts` (files of
    installed models that may draft for it). `load` loads params into `client`; `check`
    raises where the run was cancelled."""
    say = progress or (lambda _line: None)
    tokens, rounds = (QUICK_TOKENS, QUICK_ROUNDS) if quick else (TOKENS, ROUNDS)
    plain = replace(base, speculation="off", draft_model_path="")
    loads = [(plain, [SpecCandidate("auto")])]
    loads += [(replace(plain, speculation="draft", draft_model_path=d), [SpecCandidate("draft", d)])
              for d in drafts]  # fmt: skip
    rows: list[dict[str, Any]] = []
    for params, candidates in loads:
        check()
        try:
            load(params)
            figures = _interleaved(client, ["off", *(c.mode for c in candidates)], tokens,
                                   rounds, check)  # fmt: skip
        except EngineError as exc:
            check()
            for c in candidates:
                rows.append(_row(c) | {"error": str(exc)})
                say(f"    {c.label}: failed: {exc}")
            continue
        for c in candidates:
            row = _row(c) | _ratios(figures, c.mode)
            rows.append(row)
            say(f"    {c.label}: {_row_text(row)}")
    chosen = choose_speculation(rows)
    say(f"    automatic speculation: {chosen['label']} ({chosen['reason']})")
    return {"measured": rows, "chosen": chosen, "tokens": tokens, "rounds": rounds}


def choose_speculation(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The mode the Automatic setting takes: of the rows measured in full whose free reply
    keeps FREE_FLOOR of plain speed, the one with the best geometric mean of the two shapes'
    ratios, where it gains more than MIN_GAIN; "off" otherwise. {mode, draft, reason}."""
    fit = [r for r in rows if r.get("error") is None and r["free_over_off"] >= FREE_FLOOR]
    best = max(fit, key=_gain, default=None)
    if best is not None and _gain(best) > 1 + MIN_GAIN:
        return {"mode": best["mode"], "draft": best["draft"], "label": best["label"],
                "reason": _row_text(best)}  # fmt: skip
    why = "; ".join(f"{r['label']} {_row_text(r)}" for r in rows) or "nothing to draft with"
    return {"mode": "off", "draft": None, "label": "off",
            "reason": f"no speculation paid: {why}"}  # fmt: skip


def _gain(row: dict[str, Any]) -> float:
    return (row["copy_over_off"] * row["free_over_off"]) ** 0.5


def _row(candidate: SpecCandidate) -> dict[str, Any]:
    return {"mode": candidate.mode, "draft": candidate.draft, "label": candidate.label,
            "copy_tps": None, "free_tps": None, "copy_over_off": None, "free_over_off": None,
            "acceptance_copy": None, "acceptance_free": None, "error": None}  # fmt: skip


def _interleaved(client: EngineClient, modes: list[str], tokens: int, rounds: int,
                 check: Callable[[], None]) -> dict[tuple[str, str], list[dict]]:  # fmt: skip
    """Every shape's greedy reply in every mode, each round, the modes' order reversed every
    other round (what runs second may find the CPU warmer or busier)."""
    figures: dict[tuple[str, str], list[dict]] = {}
    for index in range(rounds):
        for shape, text in SHAPES.items():
            for mode in modes if index % 2 == 0 else modes[::-1]:
                check()
                figures.setdefault((shape, mode), []).append(_reply(client, text, mode, tokens))
    return figures


def _reply(client: EngineClient, text: str, mode: str, tokens: int) -> dict[str, float]:
    sampling = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=tokens,
                        speculation=mode)  # fmt: skip
    reply = client.chat(uuid.uuid4().hex, [ChatMessage("user", text)], sampling).wait()
    if reply.done is None:
        raise reply.error or EngineError("the reply ended without a result")
    m = reply.done.metrics
    return {"tg_tps": m.tg_tps or 0.0, "drafted": m.draft_n, "accepted": m.draft_n_accepted}


def _ratios(figures: dict[tuple[str, str], list[dict]], mode: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for shape in SHAPES:
        tps = statistics.median(f["tg_tps"] for f in figures[shape, mode])
        off = statistics.median(f["tg_tps"] for f in figures[shape, "off"])
        drafted = sum(f["drafted"] for f in figures[shape, mode])
        accepted = sum(f["accepted"] for f in figures[shape, mode])
        out |= {f"{shape}_tps": round(tps, 2),
                f"{shape}_over_off": round(tps / off, 3) if off else 0.0,
                f"acceptance_{shape}": round(accepted / drafted, 3) if drafted else None}
    return out


def _row_text(row: dict[str, Any]) -> str:
    if row.get("error"):
        return f"failed: {row['error']}"
    return (f"{row['copy_over_off']:.2f}× plain speed quoting a text, "
            f"{row['free_over_off']:.2f}× writing freely")  # fmt: skip
