"""Child-process isolation: real crashes, hangs and exceptions become error entries.

Targets are standard-library callables (picklable by name in any test layout): calling
ctypes.string_at(0) really dereferences NULL in the child.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
import time

import pytest

from deskllm.hardware.isolation import IsolatedProbes, describe_exit
from deskllm.hardware.report import ProbeError

SEGFAULT = functools.partial(ctypes.string_at, 0)
HANG = functools.partial(time.sleep, 120)
RAISES = functools.partial(int, "not a number")

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signal names")


@posix_only
def test_a_crash_names_the_api_and_the_signal_and_the_rest_still_run() -> None:
    results = IsolatedProbes([("vulkan", SEGFAULT), ("opencl", os.getpid)]).results()
    error = results["vulkan"]
    assert isinstance(error, ProbeError)
    assert error.api == "vulkan"
    assert "crashed" in error.message and "SIGSEGV" in error.message
    # The probe after the crash ran in a fresh child: a real pid, not ours.
    assert isinstance(results["opencl"], int) and results["opencl"] != os.getpid()


def test_a_hang_is_stopped_after_the_timeout() -> None:
    started = time.monotonic()
    results = IsolatedProbes([("opencl", HANG), ("engine", os.getpid)], timeout_s=2.0).results()
    assert time.monotonic() - started < 20
    assert isinstance(results["opencl"], ProbeError)
    assert "no answer within 2 s" in results["opencl"].message
    assert isinstance(results["engine"], int)


def test_an_exception_is_reported_without_killing_the_child() -> None:
    results = IsolatedProbes([("nvml", RAISES), ("engine", os.getpid)]).results()
    assert isinstance(results["nvml"], ProbeError)
    assert "ValueError" in results["nvml"].message
    assert isinstance(results["engine"], int)


@posix_only
def test_describe_exit() -> None:
    assert describe_exit(-signal.SIGSEGV) == "was killed by signal SIGSEGV"
    assert describe_exit(3) == "exited with code 3 before answering"
