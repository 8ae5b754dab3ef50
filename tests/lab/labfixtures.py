"""Shared fixtures for the lab tests.

``lab`` (session scope) holds /tmp/clustercert-lab.lock for the whole test session (only one lab can
exist on a machine; other sessions wait), brings up a fresh 4-node lab from the embedded default
spec, and takes it down at the end. Tests that change the lab's shape restore it with ``lab.up()``.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from pathlib import Path

import pytest

LOCK_PATH = "/tmp/clustercert-lab.lock"
LOCK_WAIT_S = 30 * 60
LAB_NODES = 4


class Lab:
    """The running lab as tests see it."""

    def __init__(self) -> None:
        from clustercert_lab import manager

        self.manager = manager
        self.refresh()

    def refresh(self) -> None:
        st = self.manager.status()
        self.status = st
        self.dir = self.manager.lab_dir()
        self.inventory = Path(st["inventory"])
        self.ssh_config = Path(st["ssh_config"])
        self.nodes = sorted(st["nodes"])
        self.link_mbit = int(st["spec"]["link_mbit"])

    def up(self, nodes: int = LAB_NODES) -> dict:
        st = self.manager.up(nodes=nodes)
        self.refresh()
        return st

    def handle(self, name: str):
        return self.manager.handle(name)

    def ssh(self, name: str, command: str, timeout: float = 120, check: bool = True, fresh: bool = False):
        argv = ["ssh", "-F", str(self.ssh_config)]
        if fresh:  # no shared master connection: proves that a new SSH session is accepted
            argv += ["-o", "ControlMaster=no", "-o", "ControlPath=none", "-o", "ConnectTimeout=3"]
        proc = subprocess.run([*argv, name, command], capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"ssh {name} {command!r} -> {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def wait_ssh(self, name: str, timeout: float = 60) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.ssh(name, "true", timeout=10, check=False, fresh=True).returncode == 0:
                return time.monotonic() - t0
            time.sleep(0.2)
        raise AssertionError(f"{name} did not answer SSH within {timeout} s")


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def lock_held_by_ancestor() -> bool:
    """True when the session runs under `flock /tmp/clustercert-lab.lock pytest ...` already."""
    try:
        inode = os.stat(LOCK_PATH).st_ino
        locks = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return False
    mine = _ancestors()
    for line in locks:
        f = line.split()
        if len(f) >= 6 and f[1] == "FLOCK" and f[5].rsplit(":", 1)[-1] == str(inode) and int(f[4]) in mine:
            return True
    return False


@pytest.fixture(scope="session")
def lab_lock():
    if os.geteuid() != 0:
        pytest.skip(
            "lab tests need root (they create network namespaces, bridges, mounts and systemd-nspawn nodes)"
        )
    if lock_held_by_ancestor():
        yield
        return
    fh = open(LOCK_PATH, "w")  # noqa: SIM115 - held for the whole session
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                pytest.fail(f"{LOCK_PATH} still held by another lab user after {LOCK_WAIT_S} s")
            time.sleep(1)
    try:
        yield
    finally:
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


@pytest.fixture(scope="session")
def lab(lab_lock):
    from clustercert_lab import manager

    manager.down()  # a fresh lab: nothing left over from an earlier session
    manager.up(nodes=LAB_NODES)
    try:
        yield Lab()
    finally:
        manager.down()


@pytest.fixture(scope="module")
def fresh_lab(lab):
    """Bare nodes for a module that needs them: earlier modules of the session may have bootstrapped
    the lab (their apt sources and services differ from a bare node's)."""
    lab.manager.down()
    lab.up()
    return lab


def bootstrap(lab, *args: str, timeout: float = 1500) -> tuple[int, dict]:
    """`clustercert bootstrap -i <lab inventory> --format json ARGS` with the bootstrap tests' state
    directory: (exit status, the JSON document)."""
    import json
    import sys

    env = dict(os.environ, CLUSTERCERT_HOME=str(lab.dir.parent / "bootstrap-test-state"))
    proc = subprocess.run([sys.executable, "-m", "clustercert", "bootstrap", "-i", str(lab.inventory),
                           "--format", "json", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"bootstrap printed no JSON (rc {proc.returncode}): {proc.stdout[-2000:]} "
                             f"{proc.stderr[-3000:]}") from None
    return proc.returncode, doc


NCCL_LEFTOVER = "[a]ll_reduce_perf|[o]rted|[m]pirun"  # [x]yz: the grep does not match itself


def nccl_leftovers(lab, nodes) -> dict[str, str]:
    """Each node's nccl-tests or MPI launcher processes still running (none after a run ends)."""
    out = {}
    for n in nodes:
        r = lab.ssh(n, f"ps -eo pid,args | grep -E '{NCCL_LEFTOVER}' || true", check=False)
        if r.stdout.strip():
            out[n] = r.stdout.strip()
    return out
