"""``--backend slurm``: every node's work is a step of ONE Slurm job, started from one node of the cluster.

The controller holds ONE SSH session for the run: to the launch node, the first Slurm node of the inventory
(``clustercert_slurm: true``, in its order) that answers and has srun, where clustercert/remote/slurm_agent.py
runs. There the run first takes its nodes in one job (``salloc --no-shell --exclusive``: no user job shares a
node while it is measured; the nodes' GPUs as GRES where they all have the same); every command for a node is
then a step of that job (``srun --jobid=J --overlap``), never a connection of the controller's own:

* many nodes' commands at once (collect_many: validate's checks, certify's, drift's): ONE step across them,
  one task per node; every task gets the same stdin (``--input=all``), the node runner's "nodes" request, runs
  its own node's part and writes its document framed in short lines (remote/runner.py: framed) that
  ``--label`` keeps whole;
* one node's commands (collect_node: a node's own probes, a pair's reachability pass): the runner in a step on
  it;
* a pair's probes: ONE step across the two nodes (PairStep, remote/pair_step.py), started with the pair's
  first server and ended once its last process has been waited for. Its stdin stays open: each server and each
  client is a line sent there, so they start in the order they do over SSH -- the server's output (its port
  listening) comes back through srun before its client is sent --, each bounded as over SSH
  (collect.ssh.bounded). A process that does not end by itself is killed there, and cancelling the job ends
  every process of every step. A probe with no pair (a client alone) is a step of its own; a pair's NCCL and
  DDP launches are steps of the same job (probes.run: the srun inside the client's step joins the job,
  ``SLURM_OVERLAP``).

SlurmBackend implements collect.backend.Backend, as collect.ssh.SshBackend does (collect_node,
collect_many, collect_in_turn, start_server, stop_server, finish_probe, run_server_client, runner_limit,
job_id): checks.run and probes.run run over either, so the findings and the localisation come from the same
evaluators over the same tools' output.

Slurm gives no node it keeps jobs off (down, reserved, not responding, busy) to the job: such a node is not
reached, and the reason is Slurm's state, read when the backend opens -- the job is asked for with
``--immediate``, so nothing waits in the queue. A drained node (IDLE, drain all that keeps jobs off it) is
resumed inside a maintenance reservation for the run and drained again with its own reason at the end
(collect.maintenance). ``close`` cancels the job; the agent cancels it too when its session ends (the
controller gone).
"""

from __future__ import annotations

import base64
import json
import queue
import re
import select
import shlex
import subprocess
import sys
import threading
import time
import uuid
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from clustercert import paths, remote
from clustercert.collect import DEFAULT_FORKS, maintenance, ssh
from clustercert.collect.slurm import slurm_hosts, slurm_name
from clustercert.errors import InputError
from clustercert.model.evidence import CommandResult, NodeEvidence
from clustercert.remote.pair_step import MARK as PAIR_MARK
from clustercert.remote.runner import DONE_MARK, PART_MARK, REQUEST_MARK

if TYPE_CHECKING:
    from clustercert.model.inventory import Inventory

IMMEDIATE_S = 20   # salloc --immediate: the job's nodes now, or the run's nodes are not reached (no queueing)
SLACK_S = 15       # beyond a command's own bound: a step's start and end
HELLO_S = 30       # how long the launch node's agent may take to say hello
STATES_S = 20      # scontrol show node, on the launch node
JOB_PREFIX = "clustercert-"
# a probe step's commands keep only the job's id of the step's SLURM_* variables, and SLURM_OVERLAP: an srun
# inside them (the pair NCCL and DDP launches) is then a step of the run's job, across the nodes it names,
# sharing them with the steps running there (not the task count and node list of the step it started from)
STEP_ENV = ("for v in $(env | sed -n 's/^\\(SLURM[A-Za-z0-9_]*\\)=.*/\\1/p'); do case $v in "
            "SLURM_JOB_ID|SLURM_JOBID) ;; *) unset \"$v\";; esac; done; export SLURM_OVERLAP=1; ")
_LABEL = re.compile(r"^\s*\d+: ")
def check_inventory(inv: Inventory) -> None:
    """Before anything runs: --backend slurm reaches only Slurm nodes (clustercert_slurm: true)."""
    others = sorted(set(inv.hosts) - set(slurm_hosts(inv)))
    if others:
        raise InputError(str(inv.source), "clustercert_slurm", f"--backend slurm: {', '.join(others[:5])}"
                         f"{' and more' if len(others) > 5 else ''} not a Slurm node (clustercert_slurm: "
                         "true): select Slurm nodes (--limit), or use --backend ssh")


def salloc_argv(nodes: list[str], job: str, gres: str | None, reservation: str | None = None) -> list[str]:
    """The run's job: ``nodes`` (Slurm NodeNames) whole (--exclusive), now or not at all (--immediate), no
    shell (the steps are started beside it); ``gres`` (e.g. gpu:8) per node where every node has it; in
    ``reservation`` where the run has one (collect.maintenance)."""
    return ["salloc", "--no-shell", "--exclusive", f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}",
            f"--job-name={job}", f"--immediate={IMMEDIATE_S}", *([f"--gres={gres}"] if gres else []),
            *([f"--reservation={reservation}"] if reservation else [])]


def srun_argv(job_id: str, nodes: list[str], *, label: bool = False, input_all: bool = False) -> list[str]:
    """srun for one step of job ``job_id``: one task on each of ``nodes`` (Slurm NodeNames), sharing the nodes
    with the job's other steps (--overlap); a task that fails ends no other node's (--kill-on-bad-exit=0)."""
    argv = ["srun", f"--jobid={job_id}", "--overlap", f"--nodes={len(nodes)}", "--ntasks-per-node=1",
            f"--nodelist={','.join(nodes)}", "--kill-on-bad-exit=0", "--quiet"]
    if label:
        argv.append("--label")
    if input_all:
        argv.append("--input=all")
    return argv


def job_gres(hosts) -> str | None:
    """The GRES every node of the job asks for (clustercert_slurm_gres and the profile's GPU count), where all
    have the same; None otherwise (the steps then see what Slurm gives an exclusive job)."""
    want = {(h.vars.clustercert_slurm_gres, h.profile.gpu.count) for h in hosts}
    if len(want) != 1:
        return None
    (gres, count), = want
    return f"{gres}:{count}" if gres and count else None


class Frames:
    """Reassembles the framed documents of a step's tasks (remote/runner.py: framed) as their lines come."""

    def __init__(self) -> None:
        self.parts: dict[str, dict[int, str]] = {}

    def add(self, line: str) -> tuple[str, str] | None:
        """Take one line of the step's output (with or without srun's label); (Slurm NodeName, document) once
        that node's every piece has come; None otherwise, and for a line that is no piece."""
        text = _LABEL.sub("", line, count=1).rstrip("\r\n")
        if not text.startswith(PART_MARK):
            return None
        try:
            name, i, n, piece = text[len(PART_MARK):].split(" ", 3)
            i, n = int(i), int(n)
        except ValueError:
            return None
        got = self.parts.setdefault(name, {})
        got[i] = piece
        if len(got) < n or set(got) != set(range(n)):
            return None
        del self.parts[name]
        try:
            return name, zlib.decompress(base64.b64decode("".join(got[k] for k in range(n)))).decode()
        except (ValueError, zlib.error, UnicodeDecodeError):
            return None


def unframe(lines: list[str]) -> dict[str, str]:
    """The documents of a step's framed output ({Slurm NodeName: text}): only nodes whose every piece came."""
    frames, out = Frames(), {}
    for line in lines:
        if (got := frames.add(line)) is not None:
            out[got[0]] = got[1]
    return out


# ---- the session with the launch node's agent -------------------------------------------------------

@dataclass
class Call:
    """One srun the agent runs: its streamed lines, and its end."""

    id: int = -1
    lines: queue.Queue = field(default_factory=queue.Queue)
    done: threading.Event = field(default_factory=threading.Event)
    result: dict = field(default_factory=dict)

    def wait(self, timeout: float) -> dict:
        if not self.done.wait(timeout):
            return {}
        return self.result

    def next_line(self, timeout: float) -> str | None:
        """The next streamed line within ``timeout`` s; None at its end or past the time."""
        try:
            return self.lines.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None


class Agent:
    """The agent on the launch node, over one SSH session (or a local process for a local connection)."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.calls: dict[int, Call] = {}
        self.lock = threading.Lock()
        self.next_id = 0
        self.hello: dict = {}
        self.gone = ""
        ready, _, _ = select.select([self.proc.stdout], [], [], HELLO_S)
        first = self.proc.stdout.readline() if ready else b""
        try:
            self.hello = json.loads(first)
        except ValueError:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            err = self.proc.stderr.read().decode(errors="replace")
            self.gone = (ssh.describe_failure(err, self.proc.returncode) if err.strip()
                         else f"the agent did not start within {HELLO_S} s")
            return
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            try:
                doc = json.loads(raw)
            except ValueError:
                continue
            call = self.calls.get(doc.get("id"))
            if call is None:
                continue
            if "line" in doc:
                call.lines.put(doc["line"])
            else:
                call.result = doc
                self.calls.pop(doc["id"], None)
                call.done.set()
                call.lines.put(None)
        err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
        self.gone = ("the Slurm launch node's session ended"
                     + (f": {err.strip().splitlines()[-1][:200]}" if err.strip() else ""))
        for call in list(self.calls.values()):
            call.result = {"rc": None, "stdout": "", "stderr": self.gone, "timed_out": False, "seconds": 0.0,
                           "lost": True}
            call.done.set()
            call.lines.put(None)
        self.calls.clear()

    def _send(self, doc: dict) -> bool:
        try:
            with self.lock:
                self.proc.stdin.write((json.dumps(doc) + "\n").encode())
                self.proc.stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    def call(self, argv: list[str], stdin: str | None, timeout: float, *, stream: bool = False,
             hold: bool = False) -> Call:
        """Start ``argv`` there; with ``hold`` its stdin stays open for ``write``."""
        call = Call()
        with self.lock:
            rid, self.next_id = self.next_id, self.next_id + 1
        self.calls[rid] = call
        call.id = rid
        if self.gone or not self._send({"op": "run", "id": rid, "argv": argv, "stdin": stdin,
                                        "timeout": timeout,
                                        "stream": stream, "hold": hold}):
            self.calls.pop(rid, None)
            call.result = {"rc": None, "stdout": "",
                           "stderr": self.gone or "the Slurm launch node's session ended",
                           "timed_out": False, "seconds": 0.0, "lost": True}
            call.done.set()
            call.lines.put(None)
        return call

    def cancel(self, call: Call) -> None:
        if not call.done.is_set():
            self._send({"op": "cancel", "id": call.id})

    def write(self, call: Call, text: str, *, eof: bool = False) -> bool:
        """``text`` to the stdin of a held call; with ``eof``, then close it. False where the session has
        ended."""
        if call.done.is_set():
            return False
        return self._send({"op": "eof" if eof else "input", "id": call.id, "data": text})

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _why(res: dict, limit: float) -> str:
    if res.get("lost"):
        return res.get("stderr") or "the Slurm launch node's session ended"
    if not res or res.get("timed_out"):
        return f"no answer within {limit:.0f} s (the step was ended)"
    lines = [_LABEL.sub("", ln) for ln in (res.get("stderr") or "").strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else f"exit status {res.get('rc')} and no output"


# ---- a pair's step ----------------------------------------------------------------------------------

@dataclass
class StepProc(Call):
    """A server or client run in a pair's step, read as a streamed Call: its output lines as they come
    (``next_line``), and its end (``wait``: rc, stdout, stderr, timed_out, seconds, as the agent's answer)."""

    node: str = ""
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)
    partial: bytes = b""

    def add(self, kind: str, data: bytes) -> None:
        if kind == "e":
            self.err += data
            return
        self.out += data
        *whole, self.partial = (self.partial + data).split(b"\n")
        for line in whole:
            self.lines.put(line.decode(errors="replace") + "\n")

    def end(self, rc: int | None, seconds: float, why: str = "") -> None:
        if self.done.is_set():
            return
        if self.partial:
            self.lines.put(self.partial.decode(errors="replace"))
        self.result = {"rc": rc, "stdout": self.out.decode(errors="replace"),
                       "stderr": why or self.err.decode(errors="replace"), "timed_out": False,
                       "seconds": seconds, **({"lost": True} if why else {})}
        self.done.set()
        self.lines.put(None)


class PairStep:
    """The probes between two nodes as processes of ONE step across both (remote/pair_step.py; the module's
    text). ``users``: the servers and clients that still need it; the last ``release`` closes its stdin, which
    ends it."""

    def __init__(self, agent: Agent, argv: list[str], limit: float, nodes: set[str]) -> None:
        self.agent, self.limit, self.nodes = agent, limit, nodes  # nodes: the two Slurm NodeNames
        self.call = agent.call(argv, None, limit, stream=True, hold=True)
        self.procs: dict[int, StepProc] = {}
        self.lock = threading.Lock()
        self.next_id, self.users, self.ended = 0, 0, False
        self.step_id = ""  # <job>.<step>, as its tasks say
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while (line := self.call.next_line(self.limit + 60)) is not None:
            text = _LABEL.sub("", line, count=1).rstrip("\r\n")
            if not text.startswith(PAIR_MARK):
                continue
            try:
                rid, kind, *rest = text[len(PAIR_MARK):].split(" ")
                if rid == "-" and kind == "step":
                    self.step_id = self.step_id or rest[0]
                    continue
                proc = self.procs.get(int(rid))
                if proc is None:
                    continue
                if kind in ("o", "e"):
                    proc.add(kind, base64.b64decode(rest[0]))
                elif kind == "rc":
                    proc.end(None if rest[0] == "-" else int(rest[0]), float(rest[1]))
            except (ValueError, IndexError):  # a line broken on its way: its process ends unread (an error)
                continue
        res = self.call.wait(IMMEDIATE_S + 30)
        why = "the pair's step ended: " + _why(res, self.limit)
        with self.lock:
            self.ended = True
            left = list(self.procs.values())
        for proc in left:
            proc.end(None, 0.0, why)

    def start(self, node: str, script: str) -> StepProc:
        """Run shell ``script`` on ``node`` (its Slurm NodeName) in the step."""
        with self.lock:
            proc = StepProc(id=self.next_id, node=node)
            self.procs[proc.id] = proc
            self.next_id += 1
            ended = self.ended
        if ended or not self.agent.write(self.call,
                                         json.dumps({"node": node, "id": proc.id, "run": script}) + "\n"):
            proc.end(None, 0.0, "the pair's step had ended: " + _why(self.call.wait(0), self.limit))
        return proc

    def kill(self, proc: StepProc) -> None:
        if not proc.done.is_set():
            self.agent.write(self.call, json.dumps({"node": proc.node, "id": proc.id, "kill": True}) + "\n")

    def close(self) -> None:
        self.agent.write(self.call, "", eof=True)


# ---- the backend -------------------------------------------------------------------------------------

@dataclass
class SlurmServer:
    """A probe's server started as a step (start_server)."""

    node: str
    cmd: str
    call: Call | StepProc | None
    pgid: str | None
    head: list[str]
    error: str = ""
    step: PairStep | None = None  # the pair's step it runs in (else a step of its own)


class SlurmBackend:
    """collect.backend.Backend over the steps of one Slurm job (see the module's text). ``open`` takes the
    job, ``close`` ends it."""

    def __init__(self, inv: Inventory, agent: Agent | None, launch: str, blocked: dict[str, str]) -> None:
        self.names = {n: slurm_name(h) for n, h in inv.hosts.items()}
        self.conns = {n: h.connection for n, h in inv.hosts.items()}
        self.agent, self.launch, self.blocked = agent, launch, blocked
        self.job_id: str | None = None
        self.job_name = f"{JOB_PREFIX}{uuid.uuid4().hex[:12]}"
        self.reservation: str | None = None      # the run's job's (clustercert's own, or the admin's)
        self.saved: maintenance.Saved | None = None  # the drains to restore at close
        self.state_dir: Path | None = None
        self.pairs: dict[frozenset, PairStep] = {}  # the pairs' steps open now
        self.pairs_lock = threading.Lock()

    # -- opening and closing

    @classmethod
    def open(cls, inv: Inventory, control_dir: Path | None = None, reservation: str | None = None,
             state_dir: Path | None = None) -> SlurmBackend:
        """The agent on the first Slurm node that answers and has srun; there, the states of every node, the
        drained ones resumed in a maintenance reservation (collect.maintenance; ``reservation``: the admin's),
        and the job of those Slurm would give one."""
        tried = []
        for name, h in slurm_hosts(inv).items():
            conn = h.connection
            line = " ".join(shlex.quote(w) for w in (ssh.interpreter(conn), "-c",
                                                     remote.source("slurm_agent")))
            argv = (["/bin/sh", "-c", line] if conn.get("ansible_connection") == "local"
                    else ssh.ssh_argv(conn, name, control_dir) + [line])
            agent = Agent(argv)
            if agent.gone or not agent.hello.get("srun"):
                tried.append(f"{name}: {agent.gone or 'no srun there'}")
                print(f"clustercert: slurm: {name} is not the launch node: {tried[-1].split(': ', 1)[1]}",
                      file=sys.stderr)
                agent.close()
                continue
            backend = cls(inv, agent, name, {})
            backend.state_dir = state_dir or paths.state_dir()
            try:  # from here on, close() puts back what was changed (a drain resumed, a reservation made)
                backend._prepare(reservation)
                backend._allocate(job_gres([h for n, h in inv.hosts.items() if n not in backend.blocked]))
            except BaseException:
                backend.close()
                raise
            return backend
        why = "no Slurm node could start srun (" + ("; ".join(tried) or "none in the inventory") + ")"
        return cls(inv, None, "", {n: why for n in inv.hosts})

    def _scontrol(self, argv: list[str], timeout: float) -> dict:
        """``argv`` (scontrol, no shell) on the launch node, under ``timeout``: its answer ({} past the
        time)."""
        return self.agent.call(argv, None, timeout).wait(timeout + 10)

    def _say(self, text: str) -> None:
        print(f"clustercert: slurm: {text}", file=sys.stderr)

    def _prepare(self, reservation: str | None) -> None:
        """Which nodes the job takes (self.blocked: the others, and why); a drained one resumed in a
        maintenance reservation -- clustercert's own, made only where a node is drained, or the admin's
        ``reservation`` -- its reason saved first, for close() to restore."""
        call = self._scontrol
        maintenance.recover(call, self.state_dir, self._say)
        states = maintenance.read_nodes(call)
        if isinstance(states, str):
            self.blocked = {n: f"Slurm's node states could not be read on {self.launch}: {states}"
                            for n in self.names}
            return
        p = maintenance.plan(self.names, states, reserved=reservation is not None)
        self.blocked = dict(p.blocked)
        if not p.nodes or (reservation is None and not p.drained):
            return
        by_sn: dict[str, list[str]] = {}
        for n, sn in self.names.items():
            by_sn.setdefault(sn, []).append(n)
        if reservation is not None and not self._take_reservation(reservation, p.nodes):
            return
        if not p.drained:
            return
        saved = maintenance.Saved(self.job_name, reservation or self.job_name, reservation is None, p.drained)
        saved.write(self.state_dir)  # before anything changes: a run killed from here on is recovered
        self.saved = saved
        if reservation is None and not self._make_reservation(saved, p, by_sn):
            return
        for sn, reason in sorted(p.drained.items()):
            res = call(maintenance.resume_argv(sn), maintenance.SCONTROL_S)
            if not maintenance.ok(res):
                self.blocked.update({n: f"{sn} is drained (Reason={reason}) and could not be resumed in the "
                                        f"reservation: {maintenance.why(res)}" for n in by_sn[sn]})
            else:
                self._say(f"{sn} resumed in reservation {self.reservation}; its drain (Reason={reason}) is "
                          "put back when the run ends")

    def _take_reservation(self, reservation: str, nodes: list[str]) -> bool:
        """The admin's --reservation, where it covers ``nodes`` (else every node is blocked, saying why)."""
        found = maintenance.read_reservations(self._scontrol)
        why = (f"--reservation {reservation}: the reservations could not be read: {found}"
               if isinstance(found, str)
               else maintenance.check_reservation(found.get(reservation), reservation, nodes))
        if why:
            self.blocked.update({n: why for n in self.names if n not in self.blocked})
            return False
        self.reservation = reservation
        return True

    def _make_reservation(self, saved: maintenance.Saved, p, by_sn: dict[str, list[str]]) -> bool:
        """clustercert's own maintenance reservation for the drained nodes (where it cannot be made, they are
        blocked, saying why, and nothing is left to restore)."""
        call = self._scontrol
        who = call(["id", "-un"], maintenance.SCONTROL_S)
        user = (who.get("stdout") or "").strip() if maintenance.ok(who) else ""
        res = (call(maintenance.create_argv(saved.reservation, p.nodes, user), maintenance.SCONTROL_S)
               if user and user.isprintable() and " " not in user else who)
        if not maintenance.ok(res):
            saved.remove(self.state_dir)
            self.saved = None
            why = f"the maintenance reservation for its drain could not be made: {maintenance.why(res)}"
            for sn, reason in p.drained.items():
                self.blocked.update({n: f"{sn} is drained (Reason={reason}); {why}" for n in by_sn[sn]})
            return False
        self.reservation = saved.reservation
        self._say(f"reservation {saved.reservation} made on {','.join(p.nodes)} (Flags=MAINT,IGNORE_JOBS, "
                  f"{maintenance.RESERVATION_MIN} min) to certify the drained {', '.join(sorted(p.drained))}")
        return True

    def _allocate(self, gres: str | None) -> None:
        """The run's job, on every node not blocked; where Slurm does not give it, every node says why."""
        nodes = sorted({sn for n, sn in self.names.items() if n not in self.blocked})
        if not nodes:
            return
        argv = salloc_argv(nodes, self.job_name, gres, self.reservation)
        res = self.agent.call(argv, None, IMMEDIATE_S + 30).wait(IMMEDIATE_S + 40)
        # the agent read the job from salloc's "Granted job allocation N"
        if res.get("rc") == 0 and res.get("job"):
            self.job_id = str(res["job"])
            return
        why = f"Slurm did not give the run's job ({' '.join(argv[1:])}): {_why(res, IMMEDIATE_S + 30)}"
        self.blocked.update({n: why for n in self.names if n not in self.blocked})

    def close(self) -> None:
        """Cancel the run's job (every step of it ends), put the drains back and delete clustercert's
        reservation (collect.maintenance.restore), then end the agent's session."""
        if self.agent is not None:
            try:
                for step in list(self.pairs.values()):
                    step.close()
                if self.job_id is not None:
                    self.agent.call(["scancel", self.job_id], None, STATES_S).wait(STATES_S + 10)
                    self.job_id = None
            finally:
                if self.saved is not None:
                    saved, self.saved = self.saved, None
                    if maintenance.restore(self._scontrol, saved, self.state_dir, self._say):
                        self._say(f"drains restored on {', '.join(sorted(saved.drained))}"
                                  + (f"; reservation {saved.reservation} deleted" if saved.created else ""))
                    else:
                        kept = maintenance.saved_dir(self.state_dir) / (saved.reservation + ".json")
                        self._say(f"not all was put back: the next --backend slurm run restores it ({kept})")
                self.agent.close()

    def __enter__(self) -> SlurmBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the collect.ssh interface: the node runner

    @staticmethod
    def runner_limit(commands: dict[str, tuple], stages: list[list[str]] | None = None,
                     parallel: int = 8) -> float:
        return ssh.runner_limit(commands, stages, parallel) + SLACK_S

    def collect_node(self, node: str, conn: dict, commands: dict[str, tuple], *,
                     control_dir: Path | None = None,
                     parallel: int = 8, stages: list[list[str]] | None = None, on_done=None,
                     path: str = "") -> NodeEvidence:
        req = ssh.runner_request(commands, parallel, stages, on_done is not None, path)
        return self._runner_step({node: (commands, req)}, self.runner_limit(commands, stages, parallel), None,
                                 on_done)[node]

    def collect_many(self, nodes: dict[str, dict], commands_for: dict[str, dict[str, tuple]], *,
                     forks: int = DEFAULT_FORKS, control_dir: Path | None = None,
                     each=None) -> dict[str, NodeEvidence]:
        """Every node's commands in ONE srun step (a task per node); ``each`` as each node's document is
        complete. ``forks`` does not apply: Slurm starts the step's tasks, the controller holds one
        session."""
        requests = {n: (commands_for[n], ssh.runner_request(commands_for[n])) for n in nodes}
        limit = max((self.runner_limit(c) for c, _ in requests.values()), default=SLACK_S)
        return self._runner_step(requests, limit, each)

    def collect_in_turn(self, nodes: dict[str, dict], commands_for: dict[str, dict[str, tuple]], *,
                        control_dir: Path | None = None) -> dict[str, NodeEvidence]:
        return {n: self.collect_node(n, conn, commands_for[n], parallel=1) for n, conn in nodes.items()}

    def _runner_step(self, requests: dict[str, tuple[dict, dict]], limit: float, each=None,
                     on_done=None) -> dict[str, NodeEvidence]:
        out: dict[str, NodeEvidence] = {}

        def done(name: str, ev: NodeEvidence) -> None:
            out[name] = each(name, ev) if each is not None else ev

        groups: dict[tuple, list[str]] = {}
        for n in requests:
            if n in self.blocked:
                done(n, NodeEvidence(n, False, self.blocked[n], seconds=0.0))
                continue
            try:
                become, first = ssh.become_argv(self.conns[n])
            except ValueError as exc:
                done(n, NodeEvidence(n, False, str(exc), seconds=0.0))
                continue
            groups.setdefault((tuple(become), first, ssh.interpreter(self.conns[n])), []).append(n)
        lock = threading.Lock()

        def locked_done(name: str, ev: NodeEvidence) -> None:
            with lock:
                done(name, ev)

        if groups:
            with ThreadPoolExecutor(max_workers=len(groups)) as ex:
                list(ex.map(lambda kv: self._runner_group(*kv, requests, limit, locked_done, on_done),
                            groups.items()))
        return {n: out[n] for n in requests}

    def _runner_group(self, key: tuple, names: list[str], requests: dict[str, tuple[dict, dict]],
                      limit: float, done, on_done) -> None:
        """One srun step for the nodes ``names`` that become root alike (``key``); ``done`` as each node's
        document is complete, and for each node the step left without one (why, in words)."""
        become, first, interp = key
        by_sn = {self.names[n]: n for n in names}
        # every task reads the whole of it: compressed, the nodes' nearly alike requests cost little more than
        # one
        nodes = json.dumps({self.names[n]: requests[n][1] for n in names}).encode()
        body = json.dumps({"nodes_z": base64.b64encode(zlib.compress(nodes, 6)).decode("ascii")})
        stdin = (first.decode() + REQUEST_MARK + body) if first else body
        argv = srun_argv(self.job_id, sorted(by_sn), label=True, input_all=True) + [
            *become, interp, "-c", remote.source("runner")]
        t0 = time.monotonic()
        deadline = t0 + limit + 30
        call = self.agent.call(argv, stdin, limit, stream=True)
        frames, pending = Frames(), dict(by_sn)
        while (line := call.next_line(deadline - time.monotonic())) is not None:
            text = _LABEL.sub("", line, count=1)
            if text.startswith(DONE_MARK):
                if on_done is not None:
                    on_done(text[len(DONE_MARK):].strip())
            elif (got := frames.add(text)) is not None and got[0] in pending:
                n = pending.pop(got[0])
                done(n, ssh.runner_evidence(n, requests[n][0], got[1], round(time.monotonic() - t0, 3)))
        if not call.done.is_set():
            self.agent.cancel(call)
        why = self._step_failure(call.wait(IMMEDIATE_S + 30), limit, names[0])
        for n in pending.values():
            done(n, NodeEvidence(n, False, why, seconds=round(time.monotonic() - t0, 3)))

    def _step_failure(self, res: dict, limit: float, node: str) -> str:
        """Why a step's node gave no document, from the step's end ``res``."""
        why = _why(res, limit)
        if res and not res.get("lost") and not res.get("timed_out") and (res.get("stderr") or "").strip():
            # sudo's refusals in words of their own, as over ssh (collect.ssh.describe_failure)
            err = "\n".join(_LABEL.sub("", ln, count=1) for ln in res["stderr"].splitlines())
            why = ssh.describe_failure(err, res.get("rc"), self.conns[node])
        return why

    # -- the collect.ssh interface: a probe's server and client

    def _probe_argv(self, node: str, script: str) -> list[str]:
        return srun_argv(self.job_id, [self.names[node]]) + ["/bin/sh", "-c", STEP_ENV + script]

    def _pair_step(self, node: str, peer: str, limit: float) -> PairStep:
        """The step of the pair (node, peer), started with its first server; one user more."""
        key = frozenset((node, peer))
        with self.pairs_lock:
            step = self.pairs.get(key)
            if step is None or step.ended:
                names = {self.names[n] for n in key}
                argv = srun_argv(self.job_id, sorted(names), label=True, input_all=True) + [
                    ssh.interpreter(self.conns[node]), "-c", remote.source("pair_step")]
                step = self.pairs[key] = PairStep(self.agent, argv, limit + SLACK_S, names)
            step.users += 1  # (_use, under the lock already held)
            return step

    def _use(self, step: PairStep) -> None:
        """One user more of a step that has one already (a client beside its server)."""
        with self.pairs_lock:
            step.users += 1

    def _release(self, step: PairStep) -> None:
        """One user fewer; the last one ends the step."""
        with self.pairs_lock:
            step.users -= 1
            if step.users > 0:
                return
            for key in [k for k, v in self.pairs.items() if v is step]:
                del self.pairs[key]
        step.close()

    def start_server(self, server: tuple[str, dict, str], timeout: float, *, control_dir: Path | None = None,
                     server_start_delay: float = 0.5, server_port: int | None = None,
                     peer: str | None = None) -> SlurmServer:
        """As collect.ssh.start_server; with ``peer`` (the node its client will run on) in the pair's step."""
        node, _conn, cmd = server
        if node in self.blocked:
            return SlurmServer(node, cmd, None, None, [], self.blocked[node])
        script = ssh.bounded(cmd, int(max(1, timeout)), server_port)
        step = None
        if peer is not None and peer != node and peer in self.names and peer not in self.blocked:
            step = self._pair_step(node, peer, timeout)
            call: Call | StepProc = step.start(self.names[node], STEP_ENV + script)
        else:
            call = self.agent.call(self._probe_argv(node, script), None, timeout + SLACK_S, stream=True)
        head: list[str] = []
        pgid = listening = None
        line = call.next_line(SLACK_S)
        if line is not None and line.startswith("PGID="):
            pgid = line[5:].strip()
            if server_port is not None:
                deadline = time.monotonic() + ssh.LISTEN_POLL_S + 3
                while (line := call.next_line(deadline - time.monotonic())) is not None:
                    if line.startswith(ssh.LISTEN_MARK):
                        listening = int(line[len(ssh.LISTEN_MARK):].strip() or -1)
                        break
                    head.append(line)
        elif line is not None:
            head.append(line)
        if pgid is None or listening not in (0, 124):
            time.sleep(server_start_delay)
        return SlurmServer(node, cmd, call, pgid, head, step=step)

    def stop_server(self, srv: SlurmServer, wait: float = 0.0) -> CommandResult:
        if srv.call is None:
            return CommandResult(None, "", srv.error, False, 0.0, srv.cmd)
        try:
            res = srv.call.wait(wait)
            if not res:
                if srv.step is not None:
                    srv.step.kill(srv.call)
                else:
                    self.agent.cancel(srv.call)
                res = srv.call.wait(IMMEDIATE_S + 30) or {"rc": None, "stderr": "", "timed_out": True}
        finally:
            if srv.step is not None:
                self._release(srv.step)
        lines = srv.head[:]
        while (line := srv.call.next_line(0)) is not None:
            if not line.startswith(ssh.LISTEN_MARK):
                lines.append(line)
        _reaped, text = ssh.ended("".join(lines))
        return CommandResult(res.get("rc"), text, res.get("stderr") or "", bool(res.get("timed_out")),
                             float(res.get("seconds") or 0.0), srv.cmd)

    def _run_client(self, srv: SlurmServer | None, node: str, script: str, t_int: int) -> tuple[dict, str]:
        """The client's answer, and where it ran: in its server's pair step where it has one, else in a step
        of its own."""
        step = srv.step if srv is not None and srv.step is not None and not srv.step.ended else None
        if step is None or self.names[node] not in step.nodes:  # (a client elsewhere than its server's pair)
            call = self.agent.call(self._probe_argv(node, script), None, t_int + SLACK_S)
            return call.wait(t_int + SLACK_S + 30) or {"rc": None, "stderr": "", "timed_out": True,
                                                       "seconds": t_int}, ""
        self._use(step)
        try:
            proc = step.start(self.names[node], STEP_ENV + script)
            res = proc.wait(t_int + SLACK_S)
            if not res:  # the script bounds itself: a process past that is killed there
                step.kill(proc)
                res = proc.wait(SLACK_S) or {"rc": None, "stderr": "", "timed_out": True, "seconds": t_int}
            return res, f"the pair's Slurm step {step.step_id}" if step.step_id else ""
        finally:
            self._release(step)

    def finish_probe(self, srv: SlurmServer | None, client: tuple[str, dict, str], timeout: float, *,
                     control_dir: Path | None = None,
                     background: ThreadPoolExecutor | None = None) -> ssh.ProbeRun:
        t_int = int(max(1, timeout))
        node, _conn, cmd = client
        where = ""
        if node in self.blocked:
            res, pgid, out = {"rc": None, "stderr": self.blocked[node], "lost": True}, None, ""
        else:
            res, where = self._run_client(srv, node, ssh.bounded(cmd, t_int), t_int)
            pgid, out = ssh.pgid_and_output(res.get("stdout") or "")
            _reaped, out = ssh.ended(out)
        started = pgid is not None
        seconds = float(res.get("seconds") or 0.0)
        timed_out = started and (bool(res.get("timed_out")) or res.get("rc") in (124, 137))
        client_res = CommandResult(None if timed_out or not started else res.get("rc"), out,
                                   res.get("stderr") or "", timed_out, round(seconds, 3), cmd)
        wait = 3 if client_res.ok else 0.5
        server_res = None
        if srv is not None:
            if background is not None and srv.pgid is not None:
                background.submit(self.stop_server, srv, wait)
            else:
                server_res = self.stop_server(srv, wait)
        error = "" if started else (self.blocked.get(node) or _why(res, t_int))
        return ssh.ProbeRun(server_res, client_res, started, error, srv is None or srv.pgid is not None,
                            where)

    def run_server_client(self, server: tuple[str, dict, str] | None, client: tuple[str, dict, str],
                          timeout: float, *, control_dir: Path | None = None, server_start_delay: float = 0.5,
                          server_port: int | None = None) -> ssh.ProbeRun:
        srv = (self.start_server(server, timeout, server_start_delay=server_start_delay,
                                 server_port=server_port, peer=client[0]) if server is not None else None)
        return self.finish_probe(srv, client, timeout)
