"""`promtool check metrics` (Debian's prometheus package; scripts/setup.sh installs it) over a Prometheus text
exposition: the tests run it on every --prom file they make. Where promtool is missing the test is skipped
(at the point it is called: call it after the test's own assertions)."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def promtool_check(text: str) -> None:
    """Fail the test with promtool's complaints when ``text`` does not pass `promtool check metrics`."""
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool is not installed (Debian's prometheus package; scripts/setup.sh installs it)")
    r = subprocess.run([tool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"promtool check metrics (exit {r.returncode}):\n{r.stdout}{r.stderr}"
