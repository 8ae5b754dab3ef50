"""The unit tests scripts/test.sh runs beside the lab tests (tests/suites.py BESIDE_LAB) read no clock:
beside the lab, at the lowest CPU priority, a step may take many times its quiet length, so a test there that
bounds seconds or sleeps for a state would fail by the machine's load, not by what it tests."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from suites import BESIDE_LAB, beside_lab

REPO = Path(__file__).resolve().parent.parent

CLOCK = {"monotonic", "monotonic_ns", "time", "time_ns", "perf_counter", "perf_counter_ns", "process_time",
         "sleep"}


def _files() -> list[Path]:
    out = []
    for entry in BESIDE_LAB:
        path = REPO / entry
        assert path.exists(), entry
        files = sorted(path.rglob("test_*.py")) if entry.endswith("/") else [path]
        out += [f for f in files if not f.name.endswith("_lab.py")]
    return out


def clock_reads(source: str) -> list[int]:
    """Lines of ``source`` that read a clock or sleep: time.X for X in CLOCK, or names imported from time."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "time":
            lines.append(node.lineno)
        elif (isinstance(node, ast.Attribute) and node.attr in CLOCK and isinstance(node.value, ast.Name)
              and node.value.id == "time"):
            lines.append(node.lineno)
    return lines


def test_no_test_run_beside_the_lab_reads_a_clock():
    files = _files()
    assert len(files) >= 10
    found = {str(f.relative_to(REPO)): clock_reads(f.read_text()) for f in files}
    assert not {f: lines for f, lines in found.items() if lines}


def test_the_clock_finder_finds_each_way_of_reading_one():
    src = "import time\nfrom time import monotonic\nt = time.monotonic()\ntime.sleep(1)\nx = obj.time\n"
    assert sorted(clock_reads(src)) == [2, 3, 4]


def test_the_marker_selects_those_files_and_no_lab_test():
    assert beside_lab("tests/provisioning/test_render.py") and beside_lab("tests/test_wheel.py")
    assert not beside_lab("tests/test_probes.py") and not beside_lab("tests/test_wheel.py.bak")
    # a folder of them (lab tests inside), a file of them, a file not among them
    paths = ["tests/provisioning", "tests/test_wheel.py", "tests/test_probes.py"]
    p = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                        "-m", "beside_lab", *paths], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    ids = [ln for ln in p.stdout.splitlines() if "::" in ln]
    assert ids and all(beside_lab(i.split("::")[0]) for i in ids), ids[:5]
    assert {i.split("::")[0].rsplit("/", 1)[0] for i in ids} == {"tests/provisioning", "tests"}
    assert not [i for i in ids if i.split("::")[0].endswith("_lab.py") or "test_probes.py" in i]
