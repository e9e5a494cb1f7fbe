"""Router benchmark: what `deskllm chat --model auto` adds to a reply that stays local, and
how many replies escalate at three thresholds. Prints one JSON object.

    .venv/bin/python bench/router.py [--model PATH] [--max-tokens 32] [--rounds 1]

The starter model answers each prompt of the fixed calibration set (deskllm.remote.calibration)
twice, side by side in one run: straight from EngineClient (the baseline) and through the
Router with a remote target and the uncertainty check on at a threshold nothing falls below
(so nothing escalates, and the remote, an address nobody listens on, is never contacted).

Keys: prompts, decision_ms_p50 / decision_ms_max (the router's own time per reply: all but
waiting for the engine and for the reader; target <= 5 ms), baseline_s_p50 and routed_s_p50
(whole replies), routed_over_baseline (the median over prompts of routed / baseline time,
each pair side by side, alternating which runs first: this includes the engine computing K
log-probabilities and the first K tokens held back), load_avg_1m, ttft_baseline_s_p50 /
ttft_routed_s_p50, and escalation: the share of the prompt set whose score (the mean
log-probability of the first K tokens) is below each of three thresholds, with the scores'
quartiles.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from deskllm.catalog.starter import starter_model_path  # noqa: E402
from deskllm.engine.client import EngineClient  # noqa: E402
from deskllm.engine.domain import ChatMessage, LoadParams, Sampling, TextDelta  # noqa: E402
from deskllm.loader import ModelLoader  # noqa: E402
from deskllm.remote.calibration import CALIBRATION_PROMPTS, local_scores  # noqa: E402
from deskllm.remote.client import RemoteClient  # noqa: E402
from deskllm.remote.endpoint import Endpoint  # noqa: E402
from deskllm.remote.remote_model import RemoteModel  # noqa: E402
from deskllm.remote.router import RoutePolicy, Router  # noqa: E402

THRESHOLDS = (-0.5, -1.0, -2.0)
K = 16


def timed(reply) -> tuple[float, float | None]:
    started = time.perf_counter()
    first = None
    for event in reply.events():
        if first is None and isinstance(event, TextDelta):
            first = time.perf_counter() - started
    assert reply.ok, reply.error
    return time.perf_counter() - started, first


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    model = args.model or str(starter_model_path())
    sampling = Sampling(temperature=0, max_tokens=args.max_tokens)
    with EngineClient() as client:
        ModelLoader(client).load(LoadParams(model, n_ctx=2048))
        nowhere = RemoteModel("none", RemoteClient(Endpoint("nowhere", "http://127.0.0.1:9/v1")),
                              "nowhere/none")  # fmt: skip
        router = Router(client, nowhere, RoutePolicy(-math.inf, K))
        client.chat("warm", [ChatMessage("user", "Hi")], sampling).wait()
        decisions, base_s, routed_s, ratios, base_ttft, routed_ttft = [], [], [], [], [], []
        for r in range(args.rounds):
            for i, prompt in enumerate(CALIBRATION_PROMPTS):
                messages = [ChatMessage("user", prompt)]
                # A fresh conversation id each time: no reply reuses another's KV cache.
                # Alternate which goes first: on a busy machine the order itself skews.
                if i % 2 == 0:
                    b, bt = timed(client.chat(f"b{r}-{i}", messages, sampling))
                    t, tt = timed(router.chat(f"r{r}-{i}", messages, sampling))
                else:
                    t, tt = timed(router.chat(f"r{r}-{i}", messages, sampling))
                    b, bt = timed(client.chat(f"b{r}-{i}", messages, sampling))
                decisions.append(router.overhead_s * 1000)
                base_s.append(b)
                routed_s.append(t)
                ratios.append(t / b)
                base_ttft.append(bt)
                routed_ttft.append(tt)
        scores = local_scores(client, CALIBRATION_PROMPTS, K, Sampling(temperature=0))
        router.close()
    quartiles = statistics.quantiles(scores, n=4)
    result = {
        "model": Path(model).name,
        "prompts": len(CALIBRATION_PROMPTS) * args.rounds,
        "uncertainty_tokens": K,
        "decision_ms_p50": round(statistics.median(decisions), 3),
        "decision_ms_max": round(max(decisions), 3),
        "baseline_s_p50": round(statistics.median(base_s), 4),
        "routed_s_p50": round(statistics.median(routed_s), 4),
        "routed_over_baseline": round(statistics.median(ratios), 3),
        "ttft_baseline_s_p50": round(statistics.median(base_ttft), 4),
        "ttft_routed_s_p50": round(statistics.median(routed_ttft), 4),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "escalation": {
            "scores_quartiles": [round(q, 3) for q in quartiles],
            "share_below": {
                str(t): round(sum(s < t for s in scores) / len(scores), 3) for t in THRESHOLDS
            },  # fmt: skip
        },
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
