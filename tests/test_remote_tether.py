"""The tether (clustercert.remote.tether), as code: run here around a stand-in for ansible-playbook that
starts processes in its own group and in a session of their own, all ignoring SIGTERM and SIGHUP; and the
wrapper clustercert.collect.engine writes around it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clustercert import remote
from clustercert.collect import engine
from clustercert.remote import tether

TETHER = Path(tether.__file__)
NOT_A_PID = str(2**22 + 1)  # above any pid_max: never this process's parent

# The stand-in: records its arguments and SECRET_VAR, starts a sleeper in its group, one in a session of its
# own and one double-forked into a session of its own (all ignore SIGTERM and SIGHUP, as the commands of a
# task may), writes their pids to ARGV[1] (a JSON object), then sleeps; with ARGV[2] = "exit N" it exits N at
# once instead, "kill" SIGKILLs itself, "detach" exits 0 leaving the session sleeper behind.
PLAYBOOK = f"""#!{sys.executable}
import json, os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
sleeper = [sys.executable, "-c", "import time; time.sleep(300)"]  # inherits the ignored signals
what = sys.argv[2] if len(sys.argv) > 2 else ""
pids = {{"tether": os.getppid(), "playbook": os.getpid(), "argv": sys.argv[1:], "secret": os.environ.get("SECRET_VAR")}}
if what.startswith("exit"):
    pass
elif what == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
else:
    pids["session"] = subprocess.Popen(sleeper, start_new_session=True).pid
    if what != "detach":
        pids["group"] = subprocess.Popen(sleeper).pid
        # double-forked: its parent exits at once, and the tether (the subreaper) inherits it
        start = "import subprocess, sys; print(subprocess.Popen(sys.argv[1:], start_new_session=True, stdout=subprocess.DEVNULL).pid)"
        pids["orphan"] = int(subprocess.run([sys.executable, "-c", start] + sleeper, stdout=subprocess.PIPE).stdout)
with open(sys.argv[1] + ".tmp", "w") as f:
    json.dump(pids, f)
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
if what.startswith("exit"):
    sys.exit(int(what.split()[1]))
if what != "detach":
    time.sleep(300)
"""  # noqa: E501

# A stand-in for clustercert: starts the tether (ARGV[1:], its own pid put in front) and sleeps.
PARENT = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, sys.argv[1], str(os.getpid())] + sys.argv[2:])
time.sleep(300)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def wait_gone(pids, seconds: float = 10) -> list[int]:
    deadline = time.monotonic() + seconds
    while [p for p in pids if alive(p)] and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def read_pids(path: Path, seconds: float = 20) -> dict:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, "the stand-in playbook did not start"
        time.sleep(0.05)
    return json.loads(path.read_text())


@pytest.fixture
def run(tmp_path):
    """(playbook, pids file, mark); every process a test records is SIGKILLed at its end if still there."""
    playbook = tmp_path / "ansible-playbook"
    playbook.write_text(PLAYBOOK)
    playbook.chmod(0o755)
    left: list[int] = []

    class Run:
        path = playbook
        pids = tmp_path / "pids.json"
        mark = tmp_path / "timed-out"

        @staticmethod
        def args(parent: str, timeout: int = 0, secrets: str = "", *what: str) -> list[str]:
            return [sys.executable, str(TETHER), parent, str(timeout), str(Run.mark), secrets, str(playbook),
                    str(Run.pids), *what]

        @staticmethod
        def started() -> dict:
            pids = read_pids(Run.pids)
            left.extend(v for v in pids.values() if isinstance(v, int))
            return pids

    yield Run
    for pid in left:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_the_playbooks_exit_status_arguments_and_secrets_pass_through(run, tmp_path):
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"SECRET_VAR": "s3cr3t"}))
    p = subprocess.Popen(run.args(str(os.getpid()), 0, str(secrets), "exit 3"))
    assert p.wait(30) == 3
    pids = run.started()
    assert pids["argv"] == [str(run.pids), "exit 3"] and pids["secret"] == "s3cr3t"
    assert pids["tether"] == p.pid
    assert not run.mark.exists()


def test_a_playbook_killed_by_a_signal_is_128_plus_it(run):
    p = subprocess.run(run.args(str(os.getpid()), 0, "", "kill"), timeout=30)
    assert p.returncode == 128 + signal.SIGKILL


def test_a_playbook_that_ends_by_itself_leaves_its_detached_processes(run):
    """ssh ControlPersist masters outlive ansible-playbook as usual: the tether kills nothing then."""
    p = subprocess.run(run.args(str(os.getpid()), 0, "", "detach"), timeout=30)
    assert p.returncode == 0
    assert alive(run.started()["session"])


@pytest.mark.parametrize("how", ["parent dies", "SIGTERM", "SIGHUP", "SIGINT"])
def test_the_run_dies_whole_with_its_parent_or_a_signal(run, how):
    """Its parent SIGKILLed (PR_SET_PDEATHSIG), or the tether signalled: the playbook, the processes in its
    group and in a session of their own (orphans the tether inherits) are killed, all of them ignoring SIGTERM
    and SIGHUP."""
    args = run.args(str(os.getpid()))
    if how == "parent dies":  # the parent's own pid goes where args[2] stands
        parent = subprocess.Popen([sys.executable, "-c", PARENT, args[1], *args[3:]])
    else:
        parent = subprocess.Popen(args)
    try:
        pids = run.started()
        assert (pids["tether"] == parent.pid) == (how != "parent dies")
        everything = [pids["tether"], pids["playbook"], pids["group"], pids["session"], pids["orphan"]]
        assert all(alive(p) for p in everything)
        assert parent_of(pids["orphan"]) == pids["tether"]
        if how == "parent dies":
            parent.kill()
        else:
            os.kill(pids["tether"], getattr(signal, how))
        assert wait_gone(everything) == []
        if how != "parent dies":
            assert parent.wait(10) == 128 + getattr(signal, how)
        assert not run.mark.exists()
    finally:
        parent.kill()
        parent.wait()


def test_the_timeout_ends_the_run_whole_and_leaves_the_mark(run):
    t0 = time.monotonic()
    p = subprocess.Popen(run.args(str(os.getpid()), 2))
    pids = run.started()
    assert p.wait(30) == 128 + signal.SIGALRM and time.monotonic() - t0 < 20
    assert run.mark.exists()
    assert wait_gone([pids["playbook"], pids["group"], pids["session"], pids["orphan"]]) == []


def test_a_tether_whose_parent_is_already_gone_runs_nothing(run):
    p = subprocess.run(run.args(NOT_A_PID), timeout=30)
    assert p.returncode == 128 + signal.SIGTERM
    assert not run.pids.exists()


def test_descendants_as_a_function():
    p = subprocess.Popen(["/bin/sh", "-c", "sleep 300 & wait"])
    try:
        def argv0(pid: int) -> bytes:
            try:
                return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                return b""

        deadline = time.monotonic() + 10
        # until the shell's child has run `sleep` (forked, it is a /bin/sh for a moment: longer under load)
        while [argv0(c) for c in tether.descendants(p.pid)] != [b"sleep"] and time.monotonic() < deadline:
            time.sleep(0.05)
        (child,) = tether.descendants(p.pid)
        assert argv0(child) == b"sleep"
        assert p.pid in tether.descendants() and child in tether.descendants()
    finally:
        for pid in tether.descendants(p.pid):
            os.kill(pid, signal.SIGKILL)
        p.kill()
        p.wait()


def test_the_engines_wrapper_execs_the_tether_with_its_settings(run, tmp_path, monkeypatch):
    """<run_dir>/bin/ansible-playbook (what ansible-runner runs): this interpreter on <run_dir>/bin/tether.py
    (the module's text), this process as the parent, the timeout, the mark, the secrets FIFO, the real
    ansible-playbook; ansible-runner's arguments after them."""
    monkeypatch.setattr(
        engine.shutil, "which", lambda name: str(run.path) if name == "ansible-playbook" else None
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    fifo = engine._secrets_fifo(run_dir, {"SECRET_VAR": "from the fifo"})
    try:
        wrapper = engine._tethered_playbook_binary(run_dir, 0, fifo)
        assert wrapper == run_dir / "bin" / "ansible-playbook" and os.access(wrapper, os.X_OK)
        assert (run_dir / "bin" / "tether.py").read_text() == remote.source("tether")
        p = subprocess.Popen([str(wrapper), str(run.pids), "exit 0"])
        assert p.wait(30) == 0
    finally:
        engine._close_fifo(fifo)
    pids = run.started()
    assert pids["argv"] == [str(run.pids), "exit 0"] and pids["secret"] == "from the fifo"
    assert pids["tether"] == p.pid  # the shell exec'd the tether: its pid, and this process its parent
