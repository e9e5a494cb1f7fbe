"""The batched runtime hands llama.cpp each step's tokens in slot order, with the real engine.

Its KV cache is not unified, and llama.cpp then decodes each run of consecutive sequence ids
in the batch's order in a pass of its own over the weights: streams listed in the order they
arrived (say slots 2, 0, 1) cost three passes a step where slot order costs one. The runtime
runs in a process of its own here, as in the engine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = r"""
import json, sys
from deskllm.engine.scheduler import Scheduler
from deskllm.engine.domain import LoadParams, Sampling

model, extra = sys.argv[1], sys.argv[2] == "1"
params = LoadParams(model, n_ctx=256, n_threads=2, use_extra_bufts=extra,
                    kv_ram_budget_mb=0, kv_disk_budget_mb=0)
rt = Scheduler(params, 3, extra)
greedy = Sampling(temperature=0.0, max_tokens=4)
texts = ["The lighthouse keeper wrote in his log", "Bread is made from flour and",
         "The first trains ran on"]
prompts = [rt.tokenize(t) for t in texts]
steps, texts_out = [], {}

def run(order, extend):
    for i in order:
        rt.submit(len(steps) * 10 + i, prompts[i] + extend, greedy, f"c{i}")
    first = True
    while rt.running or rt.waiting:
        outputs = rt.step()
        if first:  # admitted this step, in arrival order
            steps.append({"admitted": [r.slot.index for r in rt.running.values()]})
            first = False
        b = rt._batch
        steps.append({
            "seqs": [b.seq_id[i][0] for i in range(b.n_tokens)],
            "logits_rows": [[o.run.slot.index, b.seq_id[o.run.batch_index][0]]
                            for o in outputs if o.finish is None],
        })
        for o in outputs:
            texts_out[o.run.request_id] = texts_out.get(o.run.request_id, "") + o.text
    while rt.busy:  # finished replies read again, alone
        rt.step()

run([0, 1, 2], [])
extend = rt.tokenize(" and then")[1:]
run([2, 0, 1], extend)  # the first back to the slot holding its prompt
print(json.dumps({"steps": steps, "texts": texts_out}))
"""


def test_each_step_lists_the_slots_in_order_whatever_order_the_requests_came_in(
    starter_model: Path, extra_bufts: bool
):
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(starter_model), "1" if extra_bufts else "0"],
        cwd=root, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    admitted = [s["admitted"] for s in result["steps"] if "admitted" in s]
    assert admitted[0] == [0, 1, 2]
    assert admitted[1][0] == 2 and admitted[1] != sorted(admitted[1])  # out of slot order
    steps = [s for s in result["steps"] if "seqs" in s]
    assert any(len(set(s["seqs"])) == 3 for s in steps)
    for step in steps:
        assert step["seqs"] == sorted(step["seqs"])  # one run of ids: one pass
        # Each stream samples from its own sequence's logits.
        assert all(slot == row for slot, row in step["logits_rows"])
    assert all(result["texts"].values())
