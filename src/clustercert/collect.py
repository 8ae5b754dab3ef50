"""Collect: the one place that does remote I/O.

Evidence for a node is gathered in ONE connection per node: a small stdlib-only Python program is
sent over SSH (or run locally for ``ansible_connection=local``) with the list of commands; it runs
them concurrently on the node, each under its own timeout, and returns one JSON document. A command
that timed out, was missing or failed is reported as such, and the evaluators turn that into an
``error`` finding — never a pass.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Runs on the node (python3 >= 3.6, stdlib only). Reads {"commands": {name: [cmd, timeout]}} on stdin.
REMOTE_RUNNER = r'''
import json, os, signal, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
req = json.loads(sys.stdin.read())
env = dict(os.environ, LC_ALL="C", LANG="C", PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
def run(item):
    name, (cmd, timeout) = item
    t0 = time.time()
    try:
        p = subprocess.Popen(["/bin/sh", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    except OSError as exc:
        return name, {"rc": None, "stdout": "", "stderr": str(exc), "timed_out": False, "seconds": 0.0}
    try:
        out, err = p.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            out, err = p.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            out, err = b"", b""
        timed_out = True
    return name, {"rc": None if timed_out else p.returncode,
                  "stdout": out.decode("utf-8", "replace")[:2000000],
                  "stderr": err.decode("utf-8", "replace")[:20000],
                  "timed_out": timed_out, "seconds": round(time.time() - t0, 3)}
with ThreadPoolExecutor(max_workers=req.get("parallel", 8)) as ex:
    results = dict(ex.map(run, req["commands"].items()))
sys.stdout.write(json.dumps({"results": results, "hostname": os.uname()[1]}))
'''


@dataclass
class CommandResult:
    rc: int | None
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float
    command: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out

    def excerpt(self, limit: int = 600) -> str:
        text = self.stdout if self.stdout.strip() else self.stderr
        text = text.strip()
        return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters)"


@dataclass
class NodeEvidence:
    node: str
    reachable: bool
    error: str = ""
    results: dict[str, CommandResult] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {"node": self.node, "reachable": self.reachable, "error": self.error, "seconds": self.seconds,
                "results": {k: asdict(v) for k, v in self.results.items()}}


def ssh_argv(conn: dict, host: str, control_dir: Path | None = None, connect_timeout: int = 10) -> list[str]:
    """ssh command line from Ansible connection variables. Host-key checking stays on."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={connect_timeout}",
            "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3"]
    if control_dir is not None:
        control_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        argv += ["-o", "ControlMaster=auto", "-o", "ControlPersist=60s",
                 "-o", f"ControlPath={control_dir}/%C"]
    if conn.get("ansible_port"):
        argv += ["-p", str(conn["ansible_port"])]
    if conn.get("ansible_user"):
        argv += ["-l", str(conn["ansible_user"])]
    if conn.get("ansible_ssh_private_key_file"):
        argv += ["-i", str(conn["ansible_ssh_private_key_file"]), "-o", "IdentitiesOnly=yes"]
    if conn.get("ansible_ssh_common_args"):
        argv += shlex.split(str(conn["ansible_ssh_common_args"]))
    argv.append(str(conn.get("ansible_host") or host))
    return argv


def _interpreter(conn: dict) -> str:
    interp = str(conn.get("ansible_python_interpreter") or "python3")
    return "python3" if "{{" in interp or interp.startswith("auto") else interp


def collect_node(
    node: str,
    conn: dict,
    commands: dict[str, tuple[str, float]],
    *,
    control_dir: Path | None = None,
    parallel: int = 8,
) -> NodeEvidence:
    """Run ``commands`` ({name: (shell command, timeout s)}) on ``node`` in one connection."""
    request = json.dumps({"commands": {k: [c, t] for k, (c, t) in commands.items()}, "parallel": parallel})
    overall = max((t for _, t in commands.values()), default=10) + 20
    interp = _interpreter(conn)
    if conn.get("ansible_connection") == "local":
        argv = [interp if interp != "python3" else sys.executable, "-c", REMOTE_RUNNER]
    else:
        argv = ssh_argv(conn, node, control_dir) + [f"{shlex.quote(interp)} -c {shlex.quote(REMOTE_RUNNER)}"]
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, input=request, capture_output=True, text=True, timeout=overall)
    except subprocess.TimeoutExpired:
        return NodeEvidence(node, False, f"no answer within {overall:.0f} s", seconds=round(time.monotonic() - t0, 3))
    except OSError as exc:
        return NodeEvidence(node, False, f"cannot start ssh: {exc}", seconds=0.0)
    seconds = round(time.monotonic() - t0, 3)
    if p.returncode == 255 or not p.stdout.strip():
        err = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
        return NodeEvidence(node, False, err[:300], seconds=seconds)
    try:
        doc = json.loads(p.stdout)
    except json.JSONDecodeError:
        return NodeEvidence(node, False, "the node's collector returned unreadable output", seconds=seconds)
    results = {
        name: CommandResult(command=commands[name][0], **{k: r[k] for k in ("rc", "stdout", "stderr", "timed_out", "seconds")})
        for name, r in doc["results"].items()
    }
    return NodeEvidence(node, True, "", results, seconds)


def collect_many(
    nodes: dict[str, dict],
    commands_for: dict[str, dict[str, tuple[str, float]]],
    *,
    forks: int = 25,
    control_dir: Path | None = None,
) -> dict[str, NodeEvidence]:
    """Collect from every node in parallel (bounded by ``forks``); one slow node holds up no other."""
    with ThreadPoolExecutor(max_workers=max(1, min(forks, len(nodes) or 1))) as ex:
        futures = {n: ex.submit(collect_node, n, conn, commands_for[n], control_dir=control_dir)
                   for n, conn in nodes.items()}
        return {n: f.result() for n, f in futures.items()}
