"""Run probes that may crash or hang in native code in a child process.

A buggy GPU driver can segfault or hang inside vkCreateInstance or clGetPlatformIDs; in a child
that costs one error entry instead of the app. Children are started with the "spawn" context
(no inherited state, the same on every OS and in a PyInstaller-frozen app, which must call
multiprocessing.freeze_support() at start-up), never as `sys.executable -m ...`.

Starting an interpreter costs more than the probes themselves (~60-100 ms here), so one child
runs several probes in turn and sends each answer as soon as it has it. A crash or a hang
costs only the probe that caused it: the parent names it in an error entry and runs the
remaining probes in a fresh child.
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from deskllm.hardware.isolated_child import run_targets
from deskllm.hardware.report import ProbeError

DEFAULT_TIMEOUT_S = 10.0
_CONTEXT = multiprocessing.get_context("spawn")

# Windows NTSTATUS codes a crashed process exits with.
_NTSTATUS = {
    0xC0000005: "an access violation",
    0xC000001D: "an illegal instruction",
    0xC00000FD: "a stack overflow",
    0xC0000409: "a stack buffer overrun",
    0xC0000374: "heap corruption",
}

Probe = tuple[str, Callable[[], Any]]


class IsolatedProbes:
    """Starts `(api, target)` probes in a child process at once; `results()` collects them.

    Each target must be a module-level function (pickled by name) returning a picklable
    value. `timeout_s` bounds the wait for each answer (the first one includes the child's
    start-up).
    """

    def __init__(self, probes: Sequence[Probe], timeout_s: float | None = None) -> None:
        self.timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
        self._pending = list(probes)
        self._child = self._start()

    def results(self) -> dict[str, Any]:
        """api -> the target's return value, or a ProbeError if it raised, crashed or hung."""
        results: dict[str, Any] = {}
        try:
            while self._pending:
                api, _ = self._pending.pop(0)
                if isinstance(self._child, ProbeError):
                    results[api] = ProbeError(api, f"the {api} probe {self._child.message}")
                    continue
                answer = self._child.next_answer(api, self.timeout_s)
                if isinstance(answer, _Fatal):
                    results[api] = answer.error
                    self._child.reap(wait=True)
                    self._child = self._start()
                else:
                    results[api] = answer
        finally:
            if isinstance(self._child, _Child):
                self._child.reap(wait=bool(self._pending))  # pending: we are unwinding
        return results

    def _start(self) -> _Child | ProbeError | None:
        """A child for the pending probes; if none can be started, why (as an error)."""
        if not self._pending:
            return None
        try:
            return _Child(self._pending)
        except (OSError, RuntimeError) as exc:  # out of processes, or an unguarded __main__
            return ProbeError("", f"could not start its process: {type(exc).__name__}: {exc}")


class _Fatal:
    """The child is gone or stuck: the current probe failed and the child must be replaced."""

    def __init__(self, error: ProbeError) -> None:
        self.error = error


class _Child:
    def __init__(self, probes: Sequence[Probe]) -> None:
        receiver, sender = _CONTEXT.Pipe(duplex=False)
        self._receiver = receiver
        names = "-".join(api for api, _ in probes)
        self._process = _CONTEXT.Process(
            target=run_targets,
            args=(sender, [target for _, target in probes]),
            name=f"deskllm-probe-{names}",
            daemon=True,
        )
        self._process.start()
        sender.close()  # the child holds its own end; EOF then means the child is gone

    def next_answer(self, api: str, timeout_s: float) -> Any:
        if not self._receiver.poll(timeout_s):
            return _Fatal(
                ProbeError(
                    api,
                    f"the {api} probe gave no answer within {timeout_s:g} s (a hung driver?) "
                    "and was stopped",
                )
            )
        try:
            ok, payload = self._receiver.recv()
        except (EOFError, OSError):
            self._process.join(timeout=2.0)
            how = describe_exit(self._process.exitcode)
            return _Fatal(ProbeError(api, f"the {api} probe crashed: its process {how}"))
        return payload if ok else ProbeError(api, f"the {api} probe failed: {payload}")

    def reap(self, *, wait: bool) -> None:
        """Make sure the child ends. With wait=False an answered child may finish its exit
        (interpreter and driver teardown, tens of ms) on its own, watched by a thread."""
        self._receiver.close()
        if wait:
            self._end(grace_s=0.0)
        else:
            threading.Thread(
                target=self._end, args=(2.0,), daemon=True, name="deskllm-probe-reaper"
            ).start()

    def _end(self, grace_s: float) -> None:
        self._process.join(timeout=grace_s)
        if self._process.is_alive():
            self._process.kill()  # hung, or stuck in a driver's exit handler after answering
            self._process.join(timeout=2.0)


def describe_exit(exitcode: int | None) -> str:
    """A child's exit code in words: "was killed by signal SIGSEGV", "exited with code 3"."""
    if exitcode is None:
        return "did not exit"
    if exitcode < 0:
        try:
            return f"was killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    if sys.platform == "win32" and exitcode & 0xFFFFFFFF in _NTSTATUS:
        code = exitcode & 0xFFFFFFFF
        return f"died of {_NTSTATUS[code]} ({code:#010X})"
    return f"exited with code {exitcode} before answering"
