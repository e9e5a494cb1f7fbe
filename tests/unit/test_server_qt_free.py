"""The API server is core code: importing it (and its command) loads no Qt."""

from __future__ import annotations

import subprocess
import sys


def test_the_server_imports_no_qt():
    code = (
        "import sys, deskllm.server, deskllm.server.runner, deskllm.cli.serve\n"
        "qt = sorted(m for m in sys.modules if m.startswith(('PySide6', 'deskllm.gui')))\n"
        "print(','.join(qt))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""
