"""The lab's apt proxy (apt-cacher-ng with its own configuration) and the HTTP server for the lab's
simulated package repository. Both listen on the management bridge address only; the proxy is
the only thing in the lab that reaches beyond it (to the Debian mirror the host itself uses)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from pathlib import Path

from clustercert_lab import image
from clustercert_lab.node import pid_alive, python_env, read_pid, spawn_daemon, wait_gone


def _wait_port(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((image.MGMT_HOST_IP, port), timeout=0.5):
            return True
        time.sleep(0.05)
    return False


def acng_conf(lab_dir: Path) -> str:
    pdir = lab_dir / "proxy"
    return (
        "# clustercert lab apt proxy (generated)\n"
        f"CacheDir: {image.apt_proxy_cache()}\n"
        f"LogDir: {pdir / 'log'}\n"
        "SupportDir: /usr/lib/apt-cacher-ng\n"
        f"Port: {image.PROXY_PORT}\n"
        f"BindAddress: {image.MGMT_HOST_IP}\n"
        f"PidFile: {pdir / 'acng.pid'}\n"
        f"SocketPath: {pdir / 'acng.socket'}\n"
        "ExThreshold: 4\n"
        "VerboseLog: 1\n"
        # No Remap-* lines: apt-cacher-ng then fetches from the host named in each request
        # (the node's sources.list names the host's own mirror), instead of its built-in backend list.
    )


def start_proxy(lab_dir: Path) -> int:
    pdir = lab_dir / "proxy"
    pid = read_pid(pdir / "acng.pid")
    if pid_alive(pid, "apt-cacher-ng") and _wait_port(image.PROXY_PORT, 1):
        return pid
    for sub in ("conf", "log"):
        (pdir / sub).mkdir(parents=True, exist_ok=True)
    image.apt_proxy_cache().mkdir(parents=True, exist_ok=True)
    (pdir / "conf" / "acng.conf").write_text(acng_conf(lab_dir))
    (pdir / "acng.pid").unlink(missing_ok=True)
    # apt-cacher-ng daemonises itself (ForeGround: 0) and writes PidFile.
    spawn_daemon(["apt-cacher-ng", "-c", str(pdir / "conf")], pdir / "log" / "start.log")
    if not _wait_port(image.PROXY_PORT, 10):
        raise RuntimeError(f"apt proxy did not listen on {image.MGMT_HOST_IP}:{image.PROXY_PORT} (see "
                           f"{pdir}/log)")
    for _ in range(50):
        pid = read_pid(pdir / "acng.pid")
        if pid:
            return pid
        time.sleep(0.05)
    raise RuntimeError("apt proxy wrote no pid file")


def start_repo_server(lab_dir: Path, repo: Path) -> int:
    pdir = lab_dir / "proxy"
    pidfile = pdir / "repo.pid"
    pid = read_pid(pidfile)
    if pid_alive(pid, "clustercert_lab.repo_server") and _wait_port(image.REPO_PORT, 1):
        return pid
    pdir.mkdir(parents=True, exist_ok=True)
    pidfile.unlink(missing_ok=True)
    spawn_daemon(
        [sys.executable, "-m", "clustercert_lab.repo_server", image.MGMT_HOST_IP, str(image.REPO_PORT),
         str(repo), str(pidfile)],
        pdir / "repo.log",
        env=python_env(),
    )  # fmt: skip
    if not _wait_port(image.REPO_PORT, 10):
        raise RuntimeError(f"repo server did not listen on {image.MGMT_HOST_IP}:{image.REPO_PORT} (see "
                           f"{pdir}/repo.log)")
    return read_pid(pidfile) or 0


def stop(lab_dir: Path) -> None:
    pdir = lab_dir / "proxy"
    for pidfile, marker in ((pdir / "acng.pid", "apt-cacher-ng"),
                            (pdir / "repo.pid", "clustercert_lab.repo_server")):
        pid = read_pid(pidfile)
        if pid_alive(pid, marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            if not wait_gone(pid, 5):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                wait_gone(pid, 2)
        pidfile.unlink(missing_ok=True)
