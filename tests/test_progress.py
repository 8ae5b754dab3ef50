"""Live progress of validate, certify and probe (issue 35.5): nodes done of the total, the pair round and its
pairs, an ETA, on stderr where it is a terminal; nothing where it is not, nor with --format json."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import select
import socket
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console
from test_probe_run import FakeFabric

from clustercert.probes import run as probe_run
from clustercert.probes.judge import ThresholdJudge
from clustercert.probes.plan import ProbeSettings
from clustercert.report.progress import RunProgress


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_nodes_done_of_the_total_with_an_eta_from_the_first_wave_and_who_is_still_running():
    clock = Clock()
    p = RunProgress("validate", enabled=False, clock=clock)
    names = [f"n{i}" for i in range(1, 11)]
    p("nodes", phase="validate", names=names, forks=5)
    clock.t += 1
    assert p.lines() == ["validate: 1s", "  validate: 0/10 nodes done · 1s so far · ETA unknown"]
    for i, n in enumerate(names[:5]):  # the first wave of five: 4 s each on average
        clock.t = 100.0 + 2 + i
        p("node", name=n, status="unreachable" if n == "n3" else "pass")
    # two waves of ~4 s: 8 s in all, 6 s gone
    assert p.lines()[1] == "  validate: 5/10 nodes done (1 unreachable) · 6s so far · ETA ~2s"
    for n in names[5:8]:
        p("node", name=n, status="fail")
    clock.t = 120.0
    assert p.lines()[1] == ("  validate: 8/10 nodes done (3 fail, 1 unreachable) · 20s so far · ETA unknown"
                            " · waiting on n9, n10")
    p("node", name="n9", status="pass")
    p("node", name="n10", status="pass")
    p("node", name="n10", status="pass")  # told twice: counted once
    assert p.lines()[1] == "  validate: 10/10 nodes done (3 fail, 1 unreachable) in 20s"


def test_certify_stages_are_kept_and_a_pair_round_shows_its_number_pairs_and_question():
    clock = Clock()
    p = RunProgress("certify", enabled=False, clock=clock)
    p("nodes", phase="validate", names=["a", "b", "c"], forks=25)
    clock.t += 3
    for n in "abc":
        p("node", name=n, status="pass")
    p("nodes", phase="node probes", names=["a", "b", "c"], forks=25)
    clock.t += 40
    p("node", name="a", status="pass")
    p(
        "round",
        number=2,
        most=4,
        pairs=[("a", "b"), ("c", "d")],
        question="each failing pair's ends with another",
        forks=1,
    )
    clock.t += 10
    p("pair", a="a", b="b", status="fail")
    clock.t += 2
    lines = p.lines()
    assert lines[0] == "certify: 55s"
    assert lines[1] == "  validate: 3/3 nodes done in 3s"
    assert lines[2] == "  node probes: 1/3 nodes done in 40s"  # ended when the round began
    assert lines[3] == ("  pair round 2 of at most 4 (each failing pair's ends with another): 1/2 pairs done "
                        "(1 fail) · 12s so far · ETA ~8s · waiting on c<->d")


def test_nothing_is_written_where_stderr_is_not_a_terminal_and_a_live_display_where_it_is():
    out = io.StringIO()
    with RunProgress("validate", enabled=True, console=Console(file=out, force_terminal=False)) as p:
        p("nodes", phase="validate", names=["a"], forks=1)
        p("node", name="a", status="pass")
    assert out.getvalue() == ""
    out = io.StringIO()
    with RunProgress("validate", enabled=False, console=Console(file=out, force_terminal=True)) as p:
        p("nodes", phase="validate", names=["a"], forks=1)
    assert out.getvalue() == ""  # --format json: not enabled
    out = io.StringIO()
    with RunProgress(
        "validate", enabled=True, console=Console(file=out, force_terminal=True, width=100)
    ) as p:
        p("nodes", phase="validate", names=["a"], forks=1)
        p("node", name="a", status="unreachable")
    assert "validate: 1/1 nodes done (1 unreachable) in 0s" in out.getvalue()


def test_the_probe_run_tells_each_round_and_each_pair_as_it_ends(monkeypatch, tmp_path):
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path))
    events = []
    fab = FakeFabric(6, slow=[("n03", 0)])
    inv = SimpleNamespace(hosts=fab.hosts())
    out = probe_run.run(
        inv,
        fab.names,
        ProbeSettings(2, 20, only=frozenset({"ib_write_bw"}), node_probes=False),
        ThresholdJudge(),
        25,
        io=fab,
        progress=lambda kind, **ev: events.append((kind, ev)),
    )
    rounds = [ev for kind, ev in events if kind == "round"]
    assert [r["number"] for r in rounds] == [r.number for r in out.rounds] and len(rounds) >= 2
    assert rounds[0]["most"] == 4 and rounds[0]["question"].startswith("a matching of every node")
    for r in rounds:  # every pair of a round is told once, after the round began and before the next one
        start = events.index(("round", r))
        told = [ev for kind, ev in events[start + 1:] if kind == "pair"][:len(r["pairs"])]
        assert {(e["a"], e["b"]) for e in told} == set(r["pairs"])
    slow = [ev for kind, ev in events if kind == "pair" and "n03" in (ev["a"], ev["b"])]
    assert slow and all(e["status"] == "fail" for e in slow)


# ---- through the CLI, on a pseudo-terminal -------------------------------------------------------

def _inventory(path: Path, port: int) -> Path:
    """This machine and a host ``gone`` at 127.0.0.1:``port`` (test_validate_cli's inventory)."""
    from test_validate_cli import local_and_unreachable

    return local_and_unreachable(path, port)


def _on_a_terminal(
    args: list[str], env: dict, timeout: float = 90
) -> tuple[int, str, list[tuple[float, str]], float]:
    """Run the CLI with stderr on a pseudo-terminal (80x40) and stdout on a pipe: (exit status, stdout, the
    terminal's output as it came with the seconds since the start, seconds in all)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    full = dict(os.environ, TERM="xterm-256color", **env)
    for k in ("COLUMNS", "LINES", "NO_COLOR", "TERM_PROGRAM"):
        full.pop(k, None)
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "clustercert", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=slave, env=full)
    os.close(slave)
    chunks: list[tuple[float, str]] = []
    try:
        while time.monotonic() - t0 < timeout:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                chunks.append((time.monotonic() - t0, data.decode(errors="replace")))
            elif proc.poll() is not None:
                break
        stdout = proc.stdout.read().decode()
        rc = proc.wait(timeout=10)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return rc, stdout, chunks, time.monotonic() - t0


@pytest.fixture
def silent_port():
    """A port that accepts connections and never speaks: ssh waits out its ConnectTimeout (10 s) there,
    like a host that is up but not answering."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield s.getsockname()[1]
    s.close()


@pytest.mark.slow
def test_validate_on_a_terminal_shows_progress_while_a_node_does_not_answer(tmp_path, silent_port):
    inv = _inventory(tmp_path / "hosts.yml", silent_port)
    rc, stdout, chunks, took = _on_a_terminal(["validate", "-i", str(inv), "--checks", "gpu,tuning"],
                                              {"CLUSTERCERT_HOME": str(tmp_path / "state")})
    assert rc == 1 and took < 60, (rc, took)
    text = "".join(c for _, c in chunks)
    # while gone holds the run up: which node, how far, for how long -- redrawn as time passes
    waiting = [(t, c) for t, c in chunks if "validate: 1/2 nodes done" in c and "waiting on gone" in c]
    assert waiting, text[-2000:]
    seconds = {int(m) for _, c in waiting for m in re.findall(r"· (\d+)s so far", c)}
    assert len(seconds) >= 3, seconds  # redrawn each second at least
    assert waiting[0][0] < chunks[-1][0] - 3
    assert re.search(r"validate: 2/2 nodes done \((?:\d+ (?:error|fail), )?1 unreachable\) in \d+s", text), (
        text[-600:]
    )
    # the report itself is on stdout, untouched by the live display; it opens with the nodes that did not pass
    assert stdout.startswith("validate ") and "did not pass: " in stdout.splitlines()[0]
    assert "nodes done" not in stdout and "\x1b[" not in stdout


def test_validate_is_quiet_where_stderr_is_not_a_terminal_and_with_format_json(cli, tmp_path):
    with socket.socket() as s:  # a port nothing listens on: refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inv = _inventory(tmp_path / "hosts.yml", port)
    env = {"CLUSTERCERT_HOME": str(tmp_path / "state")}
    r = cli("validate", "-i", str(inv), "--checks", "tuning", env=env)
    assert r.returncode == 1 and "did not pass" in r.stdout
    assert "nodes done" not in r.stderr and "\x1b[" not in r.stderr, r.stderr
    rc, stdout, chunks, _ = _on_a_terminal(
        ["validate", "-i", str(inv), "--checks", "tuning", "--format", "json"], env
    )
    assert rc == 1 and json.loads(stdout)["nodes"]["gone"]["verdict"] == "unreachable"
    assert "nodes done" not in "".join(c for _, c in chunks)
