"""Collect: the one place that does remote I/O.

Evidence for a node is gathered in ONE connection per node: a small stdlib-only Python program is
sent over SSH (or run locally for ``ansible_connection=local``) with the list of commands; it runs
them concurrently on the node, each under its own timeout, and returns one JSON document. A command
that timed out, was missing or failed is reported as such, and the evaluators turn that into an
``error`` finding — never a pass.
"""

from __future__ import annotations

import json
import os
import re
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
env = dict(os.environ, LC_ALL="C", LANG="C", PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           CLUSTERCERT_PYTHON=sys.executable)
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


def _overall_timeout(timeouts: list[float], parallel: int) -> float:
    """How long the node's runner may take: the longest command when all run at once; otherwise they
    queue (``parallel`` at a time), bounded by sum/parallel + longest (one after another: the sum)."""
    if not timeouts:
        return 10.0
    if parallel >= len(timeouts):
        return max(timeouts)
    return min(sum(timeouts), sum(timeouts) / max(1, parallel) + max(timeouts))


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
    overall = _overall_timeout([t for _, t in commands.values()], parallel) + 20
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


def collect_in_turn(
    nodes: dict[str, dict],
    commands_for: dict[str, dict[str, tuple[str, float]]],
    *,
    control_dir: Path | None = None,
) -> dict[str, NodeEvidence]:
    """Collect from one node after the other, in the order of ``nodes``: for steps that disturb a node
    (the bond failover test), so that no two nodes are disturbed at the same moment."""
    return {n: collect_node(n, conn, commands_for[n], control_dir=control_dir, parallel=1) for n, conn in nodes.items()}


# ---- probes: a server on one node, a client on another, both bounded and cleaned up ----------

LISTEN_POLL_S = 2.0
LISTEN_MARK = "CLUSTERCERT_LISTEN="


def listen_poll_script(port: int, bound: float = LISTEN_POLL_S) -> str:
    """Shell that exits 0 once something listens on TCP ``port`` here, 124 after ``bound`` seconds
    without, 3 where ``ss`` is missing (the caller then falls back to a fixed wait). ``timeout
    --foreground`` keeps the poll in its caller's process group (a probe's group kill reaches it)."""
    until = f"until ss -ltn 'sport = :{int(port)}' 2>/dev/null | grep -q LISTEN; do sleep 0.05; done"
    return f"command -v ss >/dev/null 2>&1 || exit 3; exec timeout --foreground {bound:g} /bin/sh -c {shlex.quote(until)}"


def _bounded(cmd: str, timeout: int, listen_port: int | None = None) -> str:
    """CMD in its own process group under a hard timeout. The group id is printed first, so the
    controller can kill the whole group (server and anything it spawned) whatever happens. With
    ``listen_port`` (a server), a watcher in the same group and SSH session (no round trip of its own)
    prints LISTEN_MARK<status>: 0 once the port listens, 124 after LISTEN_POLL_S without, 3 where
    ``ss`` is missing."""
    watch = (f"( /bin/sh -c {shlex.quote(listen_poll_script(listen_port))}; echo {LISTEN_MARK}$? ) & "
             if listen_port is not None else "")
    inner = f"echo PGID=$$; {watch}exec timeout -s KILL {timeout} /bin/sh -c {shlex.quote(cmd)}"
    return f"setsid -w /bin/sh -c {shlex.quote(inner)}"


def _remote(conn: dict, node: str, script: str, control_dir: Path | None) -> list[str]:
    if conn.get("ansible_connection") == "local":
        return ["/bin/sh", "-c", script]
    return ssh_argv(conn, node, control_dir) + [script]


def _kill_group(conn: dict, node: str, pgid: str | None, control_dir: Path | None) -> None:
    if not pgid or not pgid.isdigit():
        return
    try:
        subprocess.run(_remote(conn, node, f"kill -KILL -{pgid} 2>/dev/null; true", control_dir),
                       capture_output=True, timeout=15)
    except (subprocess.TimeoutExpired, OSError):
        pass


def _pgid_and_output(text: str) -> tuple[str | None, str]:
    first, _, rest = text.partition("\n")
    if first.startswith("PGID="):
        return first[5:].strip(), rest
    return None, text


@dataclass
class ProbeRun:
    server: CommandResult | None
    client: CommandResult
    reachable: bool = True          # the client's node answered
    error: str = ""
    server_reachable: bool = True   # the server's node answered


_MARK_LINE = re.compile(rb"^" + LISTEN_MARK.encode() + rb"(\d*)\r?\n", re.M)


def _read_server_start(proc: subprocess.Popen, pgid_wait: float, port: int | None) -> tuple[str | None, int | None, bytes]:
    """Reads a server's first lines: its PGID (within ``pgid_wait``), then, with ``port``, the
    watcher's LISTEN_MARK line (within LISTEN_POLL_S + 3 s). Returns (pgid, listen status or None
    where it could not tell, the server's own output read meanwhile). Raw reads on the pipe: nothing
    is left in a buffer that select() cannot see."""
    import select

    fd, buf = proc.stdout.fileno(), b""

    def read_until(pattern: re.Pattern, wait: float) -> re.Match | None:
        nonlocal buf
        deadline = time.monotonic() + wait
        while (m := pattern.search(buf)) is None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:  # EOF: the server's session ended
                return None
            buf += chunk
        return m

    m = read_until(re.compile(rb"\A([^\n]*)\n"), pgid_wait)
    if m is None or not m.group(1).startswith(b"PGID="):
        return None, None, buf
    pgid = m.group(1)[5:].strip().decode(errors="replace")
    buf = buf[m.end():]
    if port is None:
        return pgid, None, buf
    m = read_until(_MARK_LINE, LISTEN_POLL_S + 3)
    if m is None:
        return pgid, None, buf
    return pgid, int(m.group(1)) if m.group(1) else None, buf[:m.start()] + buf[m.end():]


def run_server_client(
    server: tuple[str, dict, str] | None,
    client: tuple[str, dict, str],
    timeout: float,
    *,
    control_dir: Path | None = None,
    server_start_delay: float = 0.5,
    server_port: int | None = None,
) -> ProbeRun:
    """Start ``server`` = (node, conn, cmd), then ``client``; both killed at ``timeout``.

    With ``server_port`` the client starts as soon as the server's node shows that TCP port
    listening (polled there with ``ss`` in the server's own session, for up to 2 s, then the client
    starts anyway); without it, or where that poll cannot tell, after ``server_start_delay``.

    The server and client run in their own process groups on their nodes under ``timeout -s KILL``;
    afterwards both groups are killed explicitly (at once), so no probe process outlives the probe.
    """
    t_int = int(max(1, timeout))
    srv_proc = srv_pgid = None
    srv_head = b""
    if server is not None:
        srv_node, srv_conn, srv_cmd = server
        script = _bounded(srv_cmd, t_int, server_port)
        srv_proc = subprocess.Popen(_remote(srv_conn, srv_node, script, control_dir), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        # no PGID line: the server's node did not start it (no answer): there is nothing to wait for
        srv_pgid, listening, srv_head = _read_server_start(srv_proc, 15, server_port)
        if srv_pgid is None or listening not in (0, 124):
            time.sleep(server_start_delay)
    cli_node, cli_conn, cli_cmd = client
    script = _bounded(cli_cmd, t_int)
    t0 = time.monotonic()
    try:
        p = subprocess.run(_remote(cli_conn, cli_node, script, control_dir), capture_output=True, text=True,
                           timeout=t_int + 15)
        cli_pgid, cli_out = _pgid_and_output(p.stdout)
        elapsed = time.monotonic() - t0
        timed_out = p.returncode in (124, 137) or elapsed >= t_int
        client_res = CommandResult(None if timed_out else p.returncode, cli_out, p.stderr, timed_out, round(elapsed, 3), cli_cmd)
        unreachable = p.returncode == 255 and not cli_pgid
    except subprocess.TimeoutExpired:
        cli_pgid, unreachable = None, True
        client_res = CommandResult(None, "", "no answer from the node", True, round(time.monotonic() - t0, 3), cli_cmd)
    if srv_proc is None:
        _kill_group(cli_conn, cli_node, cli_pgid, control_dir)
        server_res = None
    else:
        with ThreadPoolExecutor(max_workers=1) as ex:  # the client's group is killed while the server ends
            done = ex.submit(_kill_group, cli_conn, cli_node, cli_pgid, control_dir)
            try:
                out, err = srv_proc.communicate(timeout=3 if client_res.ok else 0.5)
            except subprocess.TimeoutExpired:
                _kill_group(srv_conn, srv_node, srv_pgid, control_dir)
                try:
                    out, err = srv_proc.communicate(timeout=10)
                except subprocess.TimeoutExpired:
                    srv_proc.kill()
                    out, err = srv_proc.communicate()
            _kill_group(srv_conn, srv_node, srv_pgid, control_dir)
            done.result()
        text = _MARK_LINE.sub(b"", srv_head + (out or b"")).decode(errors="replace")
        server_res = CommandResult(srv_proc.returncode, text, (err or b"").decode(errors="replace"), False, 0.0, srv_cmd)
    server_reachable = server is None or srv_pgid is not None or srv_proc.returncode != 255
    return ProbeRun(server_res, client_res, not unreachable, client_res.stderr.strip()[-300:] if unreachable else "",
                    server_reachable)
