"""Sessions with the nodes: the evidence of a node in one connection, and the probes' servers and clients.

Evidence for a node is gathered in ONE connection per node: a small stdlib-only Python program (the node
runner, clustercert/remote/runner.py) is sent over SSH as ``python3 -c <its text>`` (or run locally for
``ansible_connection=local``) with the list of commands; it runs them concurrently on the node, each
under its own timeout, and returns one JSON document (clustercert.model.evidence). A command
that timed out, was missing or failed is reported as such, and the evaluators turn that into an
``error`` finding — never a pass. A probe's server and client each run in a session of their own,
bounded and reaped (start_server, finish_probe).
"""

from __future__ import annotations

import json
import os
import re
import resource
import select
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from clustercert import remote
from clustercert.collect import DEFAULT_FORKS
from clustercert.errors import InputError
from clustercert.model.evidence import CommandResult, NodeEvidence
from clustercert.remote.runner import DONE_MARK, REQUEST_MARK

# DONE_MARK, REQUEST_MARK: the node runner writes the one and reads the request after the other.

# ---- how many sessions a node's connection carries at once ---------------------------------------------

# sshd's MaxSessions (its default): the sessions one multiplexed connection (ControlMaster) may carry.
# clustercert keeps at most MaxSessions - 1 open per node (one to spare for ssh's own use): MAX_SESSIONS - 2
# for runners, probe servers and clients, and one for the group kills that end them (a kill needs a
# session while the sessions it ends still hold theirs).
MAX_SESSIONS = 10
FDS_PER_SESSION = 3  # the controller's ends of a session's stdin, stdout and stderr
FDS_BASE = 64        # the controller's own: Python, the store, the lock, the logs


class _Sessions:
    """Per node: a semaphore for long sessions and one for kills (see MAX_SESSIONS)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: dict[tuple[str, bool], threading.BoundedSemaphore] = {}

    def slot(self, node: str, kill: bool = False) -> threading.BoundedSemaphore:
        with self._lock:
            sem = self._slots.get((node, kill))
            if sem is None:
                sem = self._slots[(node, kill)] = threading.BoundedSemaphore(
                    1 if kill else max(1, MAX_SESSIONS - 2)
                )
            return sem


SESSIONS = _Sessions()


@contextmanager
def node_session(node: str, kill: bool = False):
    """Hold one of ``node``'s sessions (waiting for one) while the block runs."""
    sem = SESSIONS.slot(node, kill)
    sem.acquire()
    try:
        yield
    finally:
        sem.release()


def sessions_at_peak(forks: int) -> int:
    """The most sessions the controller holds at once with ``forks``: a pair round runs ``forks`` pairs, each
    on two nodes, each node at most MaxSessions - 1 sessions (the validators: ``forks`` nodes, one each)."""
    return max(1, forks) * 2 * (MAX_SESSIONS - 1)


def check_open_files(forks: int) -> int:
    """Before anything runs: the file descriptors ``forks`` may need at once (sessions_at_peak x
    FDS_PER_SESSION + FDS_BASE) against the open-files limit. The soft limit is raised towards the hard
    one where that is enough; otherwise InputError naming --forks, what it needs and the limits, and the
    largest --forks that fits. Returns the soft limit in force."""
    need = sessions_at_peak(forks) * FDS_PER_SESSION + FDS_BASE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or need <= soft:
        return soft
    if hard == resource.RLIM_INFINITY or need <= hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
            return need
        except (ValueError, OSError):
            pass
    limit = hard if hard != resource.RLIM_INFINITY else soft
    fits = max(0, (limit - FDS_BASE) // (FDS_PER_SESSION * 2 * (MAX_SESSIONS - 1)))
    raise InputError("--forks", str(forks), f"needs up to {need} open files ({sessions_at_peak(forks)} SSH "
                     f"sessions at once), the open-files limit is {soft} (hard {hard}): use --forks {fits} "
                     "or less, or raise the limit (ulimit -n)")



def ssh_argv(conn: dict, host: str, control_dir: Path | None = None, connect_timeout: int = 10) -> list[str]:
    """ssh command line from Ansible connection variables. Host-key checking stays on:
    StrictHostKeyChecking=yes comes before anything from the inventory (ssh keeps the first value of an
    option), so no ``ansible_ssh_common_args`` can turn it off; a node whose key is not in known_hosts, or
    differs, is refused before anything runs there."""
    argv = [
        "ssh",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={connect_timeout}",
        "-o",
        "ServerAliveInterval=10",
        "-o",
        "ServerAliveCountMax=3",
    ]
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


BECOME_PASS_ENV = "ANSIBLE_BECOME_PASS"


def _truthy(value) -> bool:
    return value is True or str(value).strip().lower() in ("1", "true", "yes", "on", "y", "t")


def become_argv(conn: dict) -> tuple[list[str], bytes]:
    """(the words that run a command as the become user, what to write first on its stdin) for a host whose
    inventory asks ``ansible_become``: ``sudo -n`` (never waits for a password) or, where the inventory sets
    ``ansible_become_password``/``ansible_become_pass`` (vaulted or not) or else ANSIBLE_BECOME_PASS is set
    (clustercert -K), ``sudo -S`` fed the password on stdin: never on a command line, never logged.
    No become: ([], b""). Only the sudo method is supported here; another one raises ValueError."""
    if not _truthy(conn.get("ansible_become", False)):
        return [], b""
    method = str(conn.get("ansible_become_method") or "sudo")
    if method != "sudo":
        raise ValueError(
            f"ansible_become_method {method!r} is not supported by clustercert's collector (sudo only)"
        )
    user = str(conn.get("ansible_become_user") or "root")
    inventory_pass = conn.get("ansible_become_password")  # model.inventory: a vault.Hidden, never shown
    password = (
        inventory_pass.reveal() if hasattr(inventory_pass, "reveal") else os.environ.get(BECOME_PASS_ENV)
    )
    if password:
        return ["sudo", "-S", "-p", "", "-u", user, "--"], password.encode() + b"\n"
    return ["sudo", "-n", "-u", user, "--"], b""


_HOST_KEY_SIGNS = ("host key verification failed", "remote host identification has changed",
                   "host key is known", "host key for", "no matching host key", "mismatching host key")
HOST_KEY_FAILURE = (
    "host key verification failed: the node's SSH host key is not the one in known_hosts (nothing was run)"
)


def describe_failure(stderr: str, rc: int | None, conn: dict | None = None) -> str:
    """One line saying why a node's session did not run: the host-key and sudo cases in words of their own,
    else ssh's last line."""
    text = stderr or ""
    low = text.lower()
    if any(sign in low for sign in _HOST_KEY_SIGNS):
        return HOST_KEY_FAILURE
    user = str((conn or {}).get("ansible_become_user") or "root")
    if "a password is required" in low or "a terminal is required" in low:
        return (f"sudo needs a password to become {user}: give it with -K/--ask-become-pass "
                "(ANSIBLE_BECOME_PASS) or the inventory's ansible_become_password (vaulted), or allow "
                "password-less sudo")
    if "incorrect password attempt" in low or "sorry, try again" in low:
        return f"sudo refused the become password (the inventory's or ANSIBLE_BECOME_PASS) for {user}"
    if "is not in the sudoers file" in low or "not allowed to execute" in low:
        return (
            f"sudo: {(conn or {}).get('ansible_user', 'the login user')} may not run commands as {user} "
            "(sudoers)"
        )
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else f"exit status {rc}")[:300]


def interpreter(conn: dict) -> str:
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


def runner_limit(
    commands: dict[str, tuple], stages: list[list[str]] | None = None, parallel: int = 8
) -> float:
    """How long collect_node waits for the node's runner: with ``stages``, each stage as long as its
    longest command (a client: 5 s more, for its server's start), one stage after another; without,
    _overall_timeout; and a margin for the connection."""
    if stages:
        overall = sum(
            max(commands[n][1] + (5 if len(commands[n]) > 2 else 0) for n in st) for st in stages if st
        )
    else:
        overall = _overall_timeout([v[1] for v in commands.values()], parallel)
    return overall + 20


# the connection of a node that is this machine: the runner runs here, without SSH (node-check, and the
# inventories' ``ansible_connection: local``)
LOCAL = {"ansible_connection": "local"}


def collect_node(
    node: str,
    conn: dict,
    commands: dict[str, tuple],
    *,
    control_dir: Path | None = None,
    parallel: int = 8,
    stages: list[list[str]] | None = None,
    on_done: Callable[[str], None] | None = None,
    path: str = "",
) -> NodeEvidence:
    """Run ``commands`` on ``node`` in one connection: {name: (shell command, timeout s)}, or (shell
    command, timeout s, server) where server = {"cmd", "port", "timeout"} is started on the node
    first and the command is its client (see clustercert.remote.runner). With ``stages`` (lists of names), the
    stages run one after another, each stage's commands at once; without, ``parallel`` at a time.
    ``on_done(name)`` is called as the node reports each command ended, while the others run. ``path``:
    directories the commands' tools are looked for in before the runner's fixed PATH."""
    request = json.dumps(runner_request(commands, parallel, stages, on_done is not None, path))
    overall = runner_limit(commands, stages, parallel)
    interp = interpreter(conn)
    try:
        become, first = become_argv(conn)
    except ValueError as exc:
        return NodeEvidence(node, False, str(exc), seconds=0.0)
    if first:
        request = first.decode() + REQUEST_MARK + request
    runner = remote.source("runner")
    if conn.get("ansible_connection") == "local":
        argv = [*become, interp if interp != "python3" else sys.executable, "-c", runner]
    else:
        line = " ".join(shlex.quote(w) for w in [*become, interp, "-c", runner])
        argv = ssh_argv(conn, node, control_dir) + [line]
    t0 = time.monotonic()
    try:
        with node_session(node):
            if on_done is not None:
                rc, stdout, stderr = _run_marked(argv, request, overall, on_done)
            else:
                p = subprocess.run(argv, input=request, capture_output=True, text=True, timeout=overall)
                rc, stdout, stderr = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return NodeEvidence(
            node, False, f"no answer within {overall:.0f} s", seconds=round(time.monotonic() - t0, 3)
        )
    except OSError as exc:
        return NodeEvidence(node, False, f"cannot start ssh: {exc}", seconds=0.0)
    seconds = round(time.monotonic() - t0, 3)
    if rc == 255 or not stdout.strip():
        return NodeEvidence(node, False, describe_failure(stderr, rc, conn), seconds=seconds)
    return runner_evidence(node, commands, stdout, seconds)


def runner_request(commands: dict[str, tuple], parallel: int = 8, stages: list[list[str]] | None = None,
                   marks: bool = False, path: str = "") -> dict:
    """The node runner's request (clustercert.remote.runner) for ``commands`` (see collect_node)."""
    return ({"commands": {k: list(v) for k, v in commands.items()}, "parallel": parallel, "stages": stages,
             "marks": marks} | ({"path": path} if path else {}))


def runner_evidence(node: str, commands: dict[str, tuple], text: str, seconds: float) -> NodeEvidence:
    """The node's evidence from the runner's JSON document ``text`` (unreachable where it is unreadable)."""
    try:
        doc = json.loads(text)
        results = {
            name: CommandResult(
                command=commands[name][0],
                **{k: r[k] for k in ("rc", "stdout", "stderr", "timed_out", "seconds")},
            )
            for name, r in doc["results"].items()
        }
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
        return NodeEvidence(node, False, "the node's collector returned unreadable output", seconds=seconds)
    return NodeEvidence(node, True, "", results, seconds)


def _run_marked(
    argv: list[str], request: str, timeout: float, on_done: Callable[[str], None]
) -> tuple[int, str, str]:
    """subprocess.run(argv, input=request, capture_output=True, timeout=timeout), reading stdout as
    it comes: each DONE_MARK line is handed to ``on_done`` and left out of the returned stdout.
    Raises subprocess.TimeoutExpired (the process killed) past ``timeout``."""
    with tempfile.TemporaryFile() as err_file:
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err_file)
        expired = threading.Event()

        def expire():
            expired.set()
            p.kill()

        timer = threading.Timer(timeout, expire)
        timer.start()
        out = []
        try:
            try:
                p.stdin.write(request.encode())
                p.stdin.close()
            except OSError:  # it ended without reading: its exit status and stderr say why
                pass
            mark = DONE_MARK.encode()
            for line in p.stdout:
                if line.startswith(mark):
                    on_done(line[len(mark):].strip().decode(errors="replace"))
                else:
                    out.append(line)
            p.wait()
        finally:
            timer.cancel()
            if p.poll() is None:
                p.kill()
                p.wait()
        if expired.is_set():
            raise subprocess.TimeoutExpired(argv, timeout)
        err_file.seek(0)
        return (
            p.returncode,
            b"".join(out).decode("utf-8", "replace"),
            err_file.read().decode("utf-8", "replace"),
        )


def collect_many(
    nodes: dict[str, dict],
    commands_for: dict[str, dict[str, tuple[str, float]]],
    *,
    forks: int = DEFAULT_FORKS,
    control_dir: Path | None = None,
    each: Callable[[str, NodeEvidence], NodeEvidence] | None = None,
) -> dict[str, NodeEvidence]:
    """Collect from every node in parallel (bounded by ``forks``); one slow node holds up no other. ``each``:
    called in this thread with each node's evidence as its collection ends; what it returns is what the
    result holds for the node (the validators evaluate a node there and keep less of its raw outputs)."""
    workers = max(1, min(forks, len(nodes) or 1))
    with ThreadPoolExecutor(max_workers=workers) as ex:
        if each is None:
            futures = {n: ex.submit(collect_node, n, conn, commands_for[n], control_dir=control_dir)
                       for n, conn in nodes.items()}
            return {n: f.result() for n, f in futures.items()}
        # at most two nodes per worker submitted and not yet handed to ``each``: the raw outputs held at once
        # stay bounded by --forks, not by the fleet, even where ``each`` is slower than the collections
        todo, running, done = iter(nodes.items()), {}, {}

        def submit() -> None:
            for n, conn in todo:
                running[ex.submit(collect_node, n, conn, commands_for[n], control_dir=control_dir)] = n
                return

        for _ in range(2 * workers):
            submit()
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in finished:
                n = running.pop(f)
                done[n] = each(n, f.result())
                submit()
        return {n: done[n] for n in nodes}


def collect_in_turn(
    nodes: dict[str, dict],
    commands_for: dict[str, dict[str, tuple[str, float]]],
    *,
    control_dir: Path | None = None,
) -> dict[str, NodeEvidence]:
    """Collect from one node after the other, in the order of ``nodes``: for steps that disturb a node
    (the bond failover test), so that no two nodes are disturbed at the same moment."""
    return {
        n: collect_node(n, conn, commands_for[n], control_dir=control_dir, parallel=1)
        for n, conn in nodes.items()
    }


# ---- probes: a server on one node, a client on another, both bounded and cleaned up ----------

LISTEN_POLL_S = 2.0
LISTEN_MARK = "CLUSTERCERT_LISTEN="
END_MARK = "CLUSTERCERT_END="


def listen_poll_script(port: int, bound: float = LISTEN_POLL_S) -> str:
    """Shell that exits 0 once something listens on TCP ``port`` here (a LISTEN row for the port in
    /proc/net/tcp or tcp6), 124 after ``bound`` seconds without, 3 where /proc/net/tcp cannot be
    read (the caller then falls back to a fixed wait). The rows are read with shell builtins and the
    pause grows from 10 to 50 ms: many servers start at once on a busy node, and their polls must
    not take the CPU the servers need to start. ``timeout --foreground`` keeps the poll in its
    caller's process group (a probe's group kill reaches it)."""
    loop = ("d=0.01; while :; do for f in /proc/net/tcp /proc/net/tcp6; do [ -r $f ] || continue; while "
            f"read -r _ l _ st _; do case \"$l $st\" in *:{int(port):04X}\\ 0A) exit 0;; esac; done < $f; "
            "done; sleep $d; case $d in 0.01) d=0.02;; *) d=0.05;; esac; done")
    return (
        f"[ -r /proc/net/tcp ] || exit 3; exec timeout --foreground {bound:g} /bin/sh -c {shlex.quote(loop)}"
    )


def bounded(cmd: str, timeout: int, listen_port: int | None = None) -> str:
    """CMD in its own process group under a hard timeout. The group id is printed first, so the
    controller can kill the whole group (server and anything it spawned) when the session does not
    end normally. When CMD ends (or is killed at the timeout) the wrapper kills what is left of its
    group itself and prints END_MARK<status> last: a session that printed it left nothing behind, and
    needs no kill of its own. With ``listen_port`` (a server), a watcher in the same group and SSH
    session (no round trip of its own) prints LISTEN_MARK<status>: 0 once the port listens, 124
    after LISTEN_POLL_S without, 3 where that cannot be told.
    ``timeout --foreground``: timeout stays in the group (without it, it would make a group of its
    own that neither the wrapper nor the controller kills); the wrapper's kill reaches CMD's children."""
    watch = (f"( /bin/sh -c {shlex.quote(listen_poll_script(listen_port))}; echo {LISTEN_MARK}$? ) & "
             if listen_port is not None else "")
    reap = ("if pids=$(pgrep -g $$ 2>/dev/null); then for p in $pids; do [ \"$p\" = $$ ] || kill -KILL "
            f"\"$p\" 2>/dev/null; done; echo {END_MARK}$rc; fi; exit $rc")
    inner = (f"echo PGID=$$; {watch}timeout --foreground -s KILL {timeout} /bin/sh -c {shlex.quote(cmd)} </"
             f"dev/null; rc=$?; {reap}")
    return f"setsid -w /bin/sh -c {shlex.quote(inner)}"


def _remote(conn: dict, node: str, script: str, control_dir: Path | None) -> list[str]:
    """The command line that runs shell ``script`` on ``node`` for a probe's server or client: as the login
    user, also where the inventory asks ansible_become. A probe needs no root (GPUs and RDMA devices are
    the users'), and the NCCL launcher (mpirun) must log into the other nodes as the account the cluster_ssh
    role set up, which is the login user: a site that refuses root logins refuses root's mpirun too.
    The node's own reads (collect_node) run under sudo."""
    if conn.get("ansible_connection") == "local":
        return ["/bin/sh", "-c", script]
    return ssh_argv(conn, node, control_dir) + [script]


def _kill_group(conn: dict, node: str, pgid: str | None, control_dir: Path | None) -> None:
    if not pgid or not pgid.isdigit():
        return
    try:
        with node_session(node, kill=True):
            subprocess.run(_remote(conn, node, f"kill -KILL -{pgid} 2>/dev/null; true", control_dir),
                           capture_output=True, timeout=15)
    except (subprocess.TimeoutExpired, OSError):
        pass


def pgid_and_output(text: str) -> tuple[str | None, str]:
    first, _, rest = text.partition("\n")
    if first.startswith("PGID="):
        return first[5:].strip(), rest
    return None, text


_END_LINE = re.compile(r"^" + END_MARK + r"(\d+)\r?\n?\Z", re.M)


def ended(text: str) -> tuple[bool, str]:
    """(whether the wrapper reaped its group and said so, the output without its END_MARK line)."""
    m = _END_LINE.search(text)
    return (True, text[:m.start()]) if m else (False, text)


@dataclass
class ProbeRun:
    server: CommandResult | None
    client: CommandResult
    reachable: bool = True          # the client's node answered
    error: str = ""
    server_reachable: bool = True   # the server's node answered
    # where a backend ran it, when it is more than the nodes (--backend slurm: its step)
    where: str = ""


_MARK_LINE = re.compile(rb"^" + LISTEN_MARK.encode() + rb"(\d*)\r?\n", re.M)


def _read_server_start(
    proc: subprocess.Popen, pgid_wait: float, port: int | None
) -> tuple[str | None, int | None, bytes]:
    """Reads a server's first lines: its PGID (within ``pgid_wait``), then, with ``port``, the
    watcher's LISTEN_MARK line (within LISTEN_POLL_S + 3 s). Returns (pgid, listen status or None
    where it could not tell, the server's own output read meanwhile). Raw reads on the pipe: nothing
    is left in a buffer that select() cannot see."""
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


@dataclass
class Server:
    """A probe server started on its node (see start_server)."""

    node: str
    conn: dict
    cmd: str
    proc: subprocess.Popen
    pgid: str | None
    head: bytes
    control_dir: Path | None = None
    slot: threading.BoundedSemaphore | None = None  # the node session it holds until it has ended

    def release(self) -> None:
        """Give the node's session back (once the server's process has ended; a second call does nothing)."""
        slot, self.slot = self.slot, None
        if slot is not None:
            slot.release()


def start_server(
    server: tuple[str, dict, str],
    timeout: float,
    *,
    control_dir: Path | None = None,
    server_start_delay: float = 0.5,
    server_port: int | None = None,
    peer: str | None = None,
) -> Server:
    """Start ``server`` = (node, conn, cmd) in its own process group under ``timeout``, and return once
    a client may connect: with ``server_port``, as soon as the node shows that TCP port listening
    (polled there in the server's own session, for up to LISTEN_POLL_S); without it, or where that
    cannot be told, after ``server_start_delay``. End it with finish_probe or stop_server. ``peer``, the node
    its client will run on, is for --backend slurm (one step per pair: collect.srun); a session here is per
    node."""
    node, conn, cmd = server
    script = bounded(cmd, int(max(1, timeout)), server_port)
    slot = SESSIONS.slot(node)
    slot.acquire()  # held until stop_server has seen it end
    try:
        proc = subprocess.Popen(_remote(conn, node, script, control_dir), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    except BaseException:
        slot.release()
        raise
    # no PGID line: the server's node did not start it (no answer): there is nothing to wait for
    pgid, listening, head = _read_server_start(proc, 15, server_port)
    if pgid is None or listening not in (0, 124):
        time.sleep(server_start_delay)
    return Server(node, conn, cmd, proc, pgid, head, control_dir, slot)


def stop_server(srv: Server, wait: float = 0.0) -> CommandResult:
    """The server's result once it has ended: it gets ``wait`` seconds to end by itself (a server
    whose wrapper reaped its group and said so needs nothing more); otherwise its group is killed.
    Its node session is given back once it has ended."""
    try:
        return _stop_server(srv, wait)
    finally:  # ended, or killed and waited for
        srv.release()


def _stop_server(srv: Server, wait: float) -> CommandResult:
    try:
        out, err = srv.proc.communicate(timeout=wait)
    except subprocess.TimeoutExpired:
        out = None
    reaped, text = ended(_MARK_LINE.sub(b"", srv.head + (out or b"")).decode(errors="replace"))
    if not reaped:
        _kill_group(srv.conn, srv.node, srv.pgid, srv.control_dir)
        if out is None:
            try:
                out, err = srv.proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                srv.proc.kill()
                out, err = srv.proc.communicate()
            text = _MARK_LINE.sub(b"", srv.head + (out or b"")).decode(errors="replace")
    return CommandResult(
        srv.proc.returncode, text, (err or b"").decode(errors="replace"), False, 0.0, srv.cmd
    )


def finish_probe(srv: Server | None, client: tuple[str, dict, str], timeout: float, *,
                 control_dir: Path | None = None, background: ThreadPoolExecutor | None = None) -> ProbeRun:
    """Run ``client`` = (node, conn, cmd) against the started server ``srv`` (or alone), both bounded
    by ``timeout``; then make sure neither left a process: each wrapper kills its own group when its
    command ends, and a session that did not say so has its group killed from here (the client's
    while the server ends). With ``background``, a server that started is ended there (its traffic
    ended with its client's) and the probe returns without its result (``server`` None): the
    caller's next probe need not wait; the caller waits for ``background`` before it is done."""
    t_int = int(max(1, timeout))
    cli_node, cli_conn, cli_cmd = client
    script = bounded(cli_cmd, t_int)
    t0 = time.monotonic()
    try:
        with node_session(cli_node):
            p = subprocess.run(
                _remote(cli_conn, cli_node, script, control_dir),
                capture_output=True,
                text=True,
                timeout=t_int + 15,
            )
        cli_pgid, cli_out = pgid_and_output(p.stdout)
        reaped, cli_out = ended(cli_out)
        elapsed = time.monotonic() - t0
        timed_out = p.returncode in (124, 137) or elapsed >= t_int
        client_res = CommandResult(
            None if timed_out else p.returncode, cli_out, p.stderr, timed_out, round(elapsed, 3), cli_cmd
        )
        unreachable = p.returncode == 255 and not cli_pgid
        p_rc = p.returncode
    except subprocess.TimeoutExpired:
        cli_pgid, unreachable, reaped, p_rc = None, True, False, None
        client_res = CommandResult(
            None, "", "no answer from the node", True, round(time.monotonic() - t0, 3), cli_cmd
        )
    wait = 3 if client_res.ok else 0.5
    server_res = None
    if background is not None and srv is not None and srv.pgid is not None:
        if not reaped:
            background.submit(_kill_group, cli_conn, cli_node, cli_pgid, control_dir)
        background.submit(stop_server, srv, wait)
    else:
        with ThreadPoolExecutor(max_workers=1) as ex:
            if not reaped:
                ex.submit(_kill_group, cli_conn, cli_node, cli_pgid, control_dir)
            server_res = stop_server(srv, wait) if srv is not None else None
    server_reachable = srv is None or srv.pgid is not None or srv.proc.returncode != 255
    return ProbeRun(
        server_res,
        client_res,
        not unreachable,
        describe_failure(client_res.stderr, p_rc, cli_conn) if unreachable else "",
        server_reachable,
    )


def run_server_client(
    server: tuple[str, dict, str] | None,
    client: tuple[str, dict, str],
    timeout: float,
    *,
    control_dir: Path | None = None,
    server_start_delay: float = 0.5,
    server_port: int | None = None,
) -> ProbeRun:
    """Start ``server`` = (node, conn, cmd) (start_server), then run ``client`` against it
    (finish_probe); both are killed at ``timeout`` and no probe process outlives the probe."""
    srv = (start_server(server, timeout, control_dir=control_dir, server_start_delay=server_start_delay,
                        server_port=server_port) if server is not None else None)
    return finish_probe(srv, client, timeout, control_dir=control_dir)


# ---- the backend -------------------------------------------------------------------------------

class SshBackend:
    """This module as a collect.backend.Backend (``--backend ssh``, the default): one connection per node from
    here. Each method is the module's function of that name, with the arguments as given, looked up when it is
    called (what replaces the function, a test's fake, is what runs); tests/test_backend_protocol.py holds the
    functions' signatures to the protocol's. ``job_id`` is None: no Slurm job holds the run's nodes."""

    job_id: str | None = None

    def runner_limit(self, *args, **kwargs) -> float:
        return runner_limit(*args, **kwargs)

    def collect_node(self, *args, **kwargs) -> NodeEvidence:
        return collect_node(*args, **kwargs)

    def collect_many(self, *args, **kwargs) -> dict[str, NodeEvidence]:
        return collect_many(*args, **kwargs)

    def collect_in_turn(self, *args, **kwargs) -> dict[str, NodeEvidence]:
        return collect_in_turn(*args, **kwargs)

    def start_server(self, *args, **kwargs) -> Server:
        return start_server(*args, **kwargs)

    def stop_server(self, *args, **kwargs) -> CommandResult:
        return stop_server(*args, **kwargs)

    def finish_probe(self, *args, **kwargs) -> ProbeRun:
        return finish_probe(*args, **kwargs)

    def run_server_client(self, *args, **kwargs) -> ProbeRun:
        return run_server_client(*args, **kwargs)
