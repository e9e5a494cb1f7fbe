"""Draftless speculative decoding: propose the tokens that followed the last few tokens where
they occurred before in the same sequence (prompt lookup), verify them in the step's one
decode, keep those the model agrees with.

A reply that copies its input (rewriting code, quoting a pasted text, JSON repeating its keys)
gets several tokens from one pass over the weights. Verification samples each drafted position
with the request's own sampler chain, in order, and stops at the first token that differs from
the draft: with a one-token (deterministic) draft this is exactly rejection sampling, so the
reply's distribution is the model's, and the sampler (seed, penalties, grammar) sees the same
tokens in the same order as without speculation.

The drafts are checked in a multi-token decode, which rounds differently from the one-token
decode of plain decoding (slots.py): where the model's two best tokens are nearly tied a greedy
reply could flip. So a greedy reply keeps a drafted position only where its top two logits are
at least NEAR_TIE_LOGITS apart; elsewhere the position is decoded again alone next step.

Pure bookkeeping (no llama.cpp), testable alone; the scheduler runs it per slot.
"""

from __future__ import annotations

from dataclasses import dataclass

NGRAM_SIZES = (12, 8, 5, 3, 2)  # longest match first: a longer context predicts better
MAX_DRAFT = 32
START_DRAFT = 4
# Draft positions that must be rejected in a row (no token accepted from them) before a slot
# stops drafting, and the steps it then waits before trying again (doubling, to a cap).
MISSES_TO_BACK_OFF = 3
BACK_OFF_STEPS = 8
MAX_BACK_OFF_STEPS = 256
# Logit gap under which a greedy pick from a batched verification is decided by a one-token
# decode instead, as plain decoding decides it (the two roundings differ by hundredths of a
# logit at a position; cells made by batched checks move later logits by up to about 0.1).
NEAR_TIE_LOGITS = 0.05
# "auto" drafts only where the measured step times say a draft writes this much more per
# second than none, and tries a short draft again after this many steps without one.
MIN_GAIN = 0.05
EXPLORE_STEPS = 48
COST_MAX_TOKENS = 64  # decodes of more tokens (long prompt chunks) are not learnt from
COST_DECAY = 0.97  # older step times weigh less: threads and other load change
PRIOR_TOKENS = 16.0


class NgramIndex:
    """Where each n-gram of a token sequence last occurred with a token after it. Appending is
    O(len(NGRAM_SIZES)); a lookup is a dict read."""

    def __init__(self, tokens: list[int] | None = None) -> None:
        self.tokens: list[int] = []
        self._next: dict[tuple[int, ...], int] = {}  # n-gram → index of the token after it
        self.order = 0  # the n of the last proposal's match (0: none)
        self.extend(tokens or [])

    def extend(self, tokens: list[int]) -> None:
        seq = self.tokens
        for token in tokens:
            end = len(seq)  # `token` is the one after each n-gram ending here
            for n in NGRAM_SIZES:
                if end >= n:
                    self._next[tuple(seq[end - n : end])] = end
            seq.append(token)

    def propose(self, limit: int) -> list[int]:
        """Up to `limit` tokens that followed the longest recent match of the sequence's end.
        A match near the end (the sequence repeating itself: a list, a table, a loop) runs
        on into its own proposal, as the text would go on repeating, so the draft is not cut
        at the repeat's length."""
        seq = self.tokens
        self.order = 0
        if limit <= 0:
            return []
        for n in NGRAM_SIZES:
            if len(seq) <= n:
                continue
            at = self._next.get(tuple(seq[-n:]))
            if at is not None:
                self.order = n
                draft = seq[at : at + limit]
                gap = len(seq) - at  # the repeat's period where the draft runs past the end
                while len(draft) < limit:
                    draft.append(draft[len(draft) - gap])
                return draft
        return []


@dataclass
class DraftPolicy:
    """How many tokens a slot drafts next. "ngram" (limit()): more after a draft taken whole,
    the accepted count plus one after a partial one, none for a while after drafts keep
    missing. "auto" (best()): the length that pays most by the measured step times and the
    acceptance, none where none does."""

    auto: bool = False
    most: int = MAX_DRAFT  # the longest draft
    length: int = START_DRAFT
    misses: int = 0
    wait: int = 0
    back_off: int = BACK_OFF_STEPS
    drafted: int = 0  # tokens proposed, for the figures
    accepted: int = 0  # of them, taken
    passes: int = 0  # verification decodes
    rejected: int = 0  # passes that ended at a drafted token the model did not take
    idle: int = 0  # steps "auto" chose not to draft since it last did

    def limit(self) -> int:
        """The draft length for this step (0: do not draft now)."""
        if self.wait > 0:
            self.wait -= 1
            return 0
        return self.length

    def acceptance(self, prior: tuple[float, float] = (0.0, 0.0)) -> float:
        """The chance the model takes a drafted token, given it took the ones before: a pass
        that took j of k drafts saw j acceptances and (j < k) one rejection. `prior`: the
        engine's recent (accepted, rejected) for drafts like this one (AcceptanceByOrder);
        before any, one in two."""
        acc, rej = self.accepted + prior[0], self.rejected + prior[1]
        return (acc + 1) / (acc + rej + 2)

    def expected(self, k: int, a: float | None = None) -> float:
        """Tokens a pass with k drafted tokens writes, on average (the token after the last
        accepted one included), where each drafted token is taken with chance `a`."""
        a = min(self.acceptance() if a is None else a, 0.999)
        return (1 - a ** (k + 1)) / (1 - a)

    def best(self, limit: int, tokens: float, n: int, costs: StepCosts,
             prior: tuple[float, float] = (0.0, 0.0)) -> int:  # fmt: skip
        """For "auto": the draft length that writes the most tokens per second in a step that
        already holds `n` tokens writing `tokens` (this run's one included), by this
        machine's measured decode times (StepCosts); 0 where drafting does not pay. Without
        measurements yet, or every EXPLORE_STEPS steps without drafts, a short draft is tried
        (the acceptance and the costs are learnt from it)."""
        if limit <= 0:
            return 0
        if not costs.known(n + limit):
            return min(self.length, limit)  # lengths vary: the costs of several sizes
        a = self.acceptance(prior)
        rates = [(tokens - 1 + self.expected(k, a)) / costs.seconds(n + k)
                 for k in range(1, limit + 1)]  # fmt: skip
        best_k = max(range(limit), key=rates.__getitem__) + 1
        if rates[best_k - 1] <= tokens / costs.seconds(n) * (1 + MIN_GAIN):
            best_k = 0
        if best_k == 0:
            self.idle += 1
            if self.idle >= EXPLORE_STEPS:
                self.idle = 0
                return min(START_DRAFT, limit)  # the acceptance may have changed
        else:
            self.idle = 0
        return best_k

    def record(self, drafted: int, accepted: int) -> None:
        self.drafted += drafted
        self.accepted += accepted
        self.rejected += accepted < drafted
        self.passes += 1
        if accepted == drafted:
            self.length = min(self.length * 2, self.most)
            self.misses, self.back_off = 0, BACK_OFF_STEPS
        else:
            self.length = max(accepted + 1, 2)
            self.misses = self.misses + 1 if accepted == 0 else 0
        if self.misses >= MISSES_TO_BACK_OFF:
            self.wait, self.misses = self.back_off, 0
            self.back_off = min(self.back_off * 2, MAX_BACK_OFF_STEPS)


class StepCosts:
    """How long a decode of n tokens takes on this machine now, learnt from the engine's own
    steps: one token alone (llama.cpp's one-token path, much cheaper per step on a CPU), and a
    line a + b·n fitted to the multi-token steps (decayed least squares)."""

    def __init__(self) -> None:
        self.single: float | None = None
        self._sums = [0.0] * 5  # weight, Σn, Σt, Σn², Σn·t
        self._sizes: set[int] = set()

    def record(self, n: int, seconds: float) -> None:
        if n == 1:
            self.single = seconds if self.single is None else 0.8 * self.single + 0.2 * seconds
            return
        if n > COST_MAX_TOKENS:
            return
        w, sn, st, snn, snt = (x * COST_DECAY for x in self._sums)
        self._sums = [w + 1, sn + n, st + seconds, snn + n * n, snt + n * seconds]
        self._sizes.add(n)

    def known(self, n: int) -> bool:
        """Whether seconds() rests on measurements: the one-token step, and multi-token steps
        of two sizes or more."""
        return self.single is not None and (n == 1 or len(self._sizes) >= 2)

    def seconds(self, n: int) -> float:
        if n == 1:
            return self.single
        w, sn, st, snn, snt = self._sums
        det = w * snn - sn * sn
        slope = (w * snt - sn * st) / det if det > 1e-9 else 0.0
        slope = max(slope, 0.0)
        return max((st - slope * sn) / w + slope * n, self.single)


class AcceptanceByOrder:
    """The engine's recent acceptance of drafts by the length of the n-gram match they came
    from (a 4-token match in a quoted text is taken far more often than a 2-token one in free
    text): the prior of a new reply's acceptance, weighing at most PRIOR_TOKENS tokens."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[float, float]] = {}

    def record(self, order: int, accepted: int, rejected: int) -> None:
        acc, rej = self._seen.get(order, (0.0, 0.0))
        scale = min(1.0, PRIOR_TOKENS / max(acc + rej + accepted + rejected, 1))
        self._seen[order] = ((acc + accepted) * scale, (rej + rejected) * scale)

    def prior(self, order: int) -> tuple[float, float]:
        return self._seen.get(order, (0.0, 0.0))


def drafts_text(drafted: int, accepted: int, passes: int) -> str:
    """A reply's speculation figures, "drafts 85% · 4.6 tok/pass": the share of drafted tokens
    the model accepted, and tokens written per decode that verified a draft (its accepted
    drafts and the token after them)."""
    text = f"drafts {accepted / drafted:.0%}" if drafted else "no drafts"
    return text + (f" · {(accepted + passes) / passes:.1f} tok/pass" if passes else "")
