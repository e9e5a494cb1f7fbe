"""plan_installed: fit classes of model files on disk, against saved hardware profiles."""

from __future__ import annotations

import json
from pathlib import Path

from planner_models import write_tiny_gguf

from deskllm.hardware import report_from_dict
from deskllm.planner.installed_fit import load_context, plan_installed

PROFILES = Path(__file__).parent.parent / "data" / "hardware"


def profile(name: str):
    return report_from_dict(json.loads((PROFILES / name).read_text(encoding="utf-8")))


def test_each_file_is_planned_for_the_machine_and_a_bad_one_is_none(tmp_path):
    tiny = str(write_tiny_gguf(tmp_path / "tiny.gguf", context=2048))
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 12)
    missing = str(tmp_path / "gone.gguf")
    laptop = plan_installed([tiny, str(broken), missing], profile("laptop_rtx4070_8gb.json"))
    assert laptop[tiny].fit == "gpu" and laptop[tiny].target
    assert laptop[str(broken)] is None and laptop[missing] is None
    desktop = plan_installed([tiny], profile("desktop_cpu_16gb.json"), n_ctx=4096)
    assert desktop[tiny].fit == "cpu"
    # Planned at the context a load would get: the model's own 2,048 tokens at most.
    assert desktop[tiny].load.n_ctx == 2048


def test_the_context_of_a_load():
    assert load_context(0, 131072) == 4096  # automatic: the training context, capped
    assert load_context(0, 2048) == 2048
    assert load_context(0, None) == 4096
    assert load_context(8192, 2048) == 2048  # never past what the model was trained for
    assert load_context(8192, None) == 8192
