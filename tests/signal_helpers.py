"""Child processes that get Ctrl+C as a terminal gives it."""

from __future__ import annotations

import signal


def sigint_as_at_a_terminal() -> None:
    """preexec_fn for a child a test will send SIGINT: a test runner started in the
    background (a CI job, `cmd &`) has SIGINT ignored, children inherit that, and the Ctrl+C
    the test sends would never arrive. A user's terminal delivers it; so does this."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
