"""``--backend slurm`` on drained nodes: a maintenance reservation, the drained nodes resumed inside it, their
drains restored afterwards.

Slurm gives a DRAINED node to no job, not even inside a MAINT reservation. So, as admins do by hand:

1. read each node's state and drain reason verbatim (``scontrol show node --oneliner``, by the backend);
2. take the nodes in a reservation: clustercert's own (``scontrol create reservation
   ReservationName=clustercert-<id> Nodes=... StartTime=now Duration=RESERVATION_MIN Users=<the user>
   Flags=MAINT,IGNORE_JOBS``), made only where a node is drained, or the admin's (``--reservation NAME``: it
   must be ACTIVE and hold every node; clustercert never creates, changes nor deletes it);
3. save the drained nodes' reasons (the state directory, ``slurm-reservations/<job name>.json``, 0600), then
   resume ONLY those nodes: inside the reservation no user job starts on them;
4. the run's job asks for the reservation (``salloc --reservation=NAME``);
5. at the end (``close``; also on an error or Ctrl-C): drain every node that was drained again with its
   ORIGINAL reason, verbatim (a node someone drained meanwhile keeps that), then delete the reservation only
   if clustercert made it, and the saved file. ``certify --drain slurm`` decides after that, by its own rules
   (collect.slurm).

A run killed outright leaves its nodes resumed but reserved until the reservation ends; the next ``--backend
slurm`` run from this state directory finds the leftover clustercert-* reservation and its saved file,
restores those drains first and deletes it, saying so. A clustercert-* reservation with no saved file here
(another controller's run) is left alone.

Pure parts (parse_reservation, expand_hostlist, plan, to_restore, the argv builders) are apart from the I/O
(recover, restore, which run scontrol through ``call``: argv, never a shell, each under a timeout).
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from clustercert.collect.slurm import NodeState, _blocking_flags, unusable_name

PREFIX = "clustercert-"
# minutes: only a run killed outright leaves it; the run's job holds its nodes while it runs
RESERVATION_MIN = 480
SCONTROL_S = 20        # every scontrol call's timeout
DELETE_WAIT_S = 60     # how long a reservation still busy with the cancelled job's end is asked again
NO_REASON = "clustercert: drain restored (the node had no reason)"
# a flag Slurm sets on a node that is drained, or in a (maintenance) reservation: none keeps our job off it
# then
_ALLOWED = ("DRAIN", "DRAINED", "MAINT", "RESERVED")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")

Call = Callable[[list[str], float], dict]  # argv, timeout -> {rc, stdout, stderr, timed_out}


def reservation_name(text: str) -> str:
    """``--reservation``: a Slurm reservation's name (letters, digits, _ . -; not starting with '-')."""
    if not _NAME.match(text):
        raise ValueError(f"not a reservation name: {text!r} (letters, digits, '_', '.', '-'; at most 64)")
    return text


@dataclass(frozen=True)
class Reservation:
    name: str
    state: str               # ACTIVE | INACTIVE
    nodes: tuple[str, ...]   # expanded
    flags: tuple[str, ...]
    users: str


def expand_hostlist(expr: str) -> list[str]:
    """Slurm's hostlist ``node[01-03,07],gpu1`` -> its names. ValueError for what it cannot read."""
    out: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", expr):
        m = re.fullmatch(r"([^\[\]]*)\[([^\]]+)\]([^\[\]]*)", part)
        if m is None:
            if "[" in part or "]" in part:
                raise ValueError(f"cannot read the hostlist {expr!r}")
            out.append(part)
            continue
        head, ranges, tail = m.groups()
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise ValueError(f"cannot read the hostlist {expr!r}")
            for i in range(int(lo), int(hi or lo) + 1):
                out.append(f"{head}{str(i).zfill(len(lo))}{tail}")
    return out


def parse_reservations(text: str) -> dict[str, Reservation]:
    """``scontrol show reservation --oneliner`` (one line a reservation; "No reservations in the system" for
    none)."""
    out = {}
    for line in text.splitlines():
        if not line.startswith("ReservationName="):
            continue
        fields = dict(re.findall(r"(?:^|\s)([A-Za-z]+)=(\S*)", line))
        nodes = fields.get("Nodes", "")
        out[fields["ReservationName"]] = Reservation(
            fields["ReservationName"], fields.get("State", ""),
            tuple(expand_hostlist(nodes)) if nodes and nodes != "(null)" else (),
            tuple(f for f in fields.get("Flags", "").split(",") if f), fields.get("Users", ""))
    return out


def check_reservation(res: Reservation | None, name: str, nodes: list[str]) -> str | None:
    """Why the admin's reservation ``name`` cannot hold the run's ``nodes``, or None."""
    if res is None:
        return f"--reservation {name}: Slurm has no such reservation"
    if res.state.upper() != "ACTIVE":
        return (
            f"--reservation {name}: it is {res.state or 'not active'}, not ACTIVE (it has not started or has "
            "ended)"
        )
    missing = sorted(set(nodes) - set(res.nodes))
    if missing:
        return (
            f"--reservation {name}: it does not hold "
            f"{', '.join(missing[:5])}{' and more' if len(missing) > 5 else ''}"
        )
    return None


def runnable(st: NodeState, reserved: bool = False) -> str | None:
    """The run's test of a node: why Slurm would give it no job even once resumed, or None. A drained node
    counts only where it is IDLE (no job still running there) and drain is all that keeps jobs off it; with
    ``reserved`` (the admin's reservation) the flags a reservation sets (MAINT, RESERVED) keep nothing off
    either."""
    allowed = _ALLOWED if reserved else ("DRAIN", "DRAINED")
    base, blocking = _blocking_flags(st)
    others = [f for f in blocking if f not in allowed and f != "COMPLETING"]
    if not st.drained and not others and base in ("IDLE", "MIXED"):
        return None
    if st.drained and not others and base == "IDLE":
        return None
    reason = f" (Reason={st.reason})" if st.reason else ""
    why = f"Slurm starts no job on {st.node} now: it is {st.state}{reason}"
    if st.drained:
        return (
            why + "; not resumed for the run (only an IDLE node whose drain is all that keeps jobs off it is)"
        )
    return why


@dataclass
class Plan:
    blocked: dict[str, str] = field(default_factory=dict)   # inventory name -> why no job there
    # Slurm NodeNames of the run's job (and reservation)
    nodes: list[str] = field(default_factory=list)
    # NodeName -> its drain reason, verbatim: resume, restore
    drained: dict[str, str] = field(default_factory=dict)


def plan(names: dict[str, str], states: dict[str, NodeState], reserved: bool = False) -> Plan:
    """Which nodes the run's job takes (IDLE, MIXED, or IDLE and drained) and which of them to resume first
    (the drained), with the reason each had. ``names``: inventory name -> NodeName; ``states``: NodeName ->
    state; ``reserved``: in the admin's reservation."""
    p = Plan()
    for n, sn in sorted(names.items()):
        st = states.get(sn)
        why = f"Slurm does not know a node {sn}" if st is None else runnable(st, reserved)
        if why:
            p.blocked[n] = why
            continue
        if sn not in p.nodes:
            p.nodes.append(sn)
        if st.drained:
            p.drained[sn] = st.reason or NO_REASON
    p.nodes.sort()
    return p


def to_restore(saved: dict[str, str], now: dict[str, NodeState | str]) -> dict[str, str]:
    """The drains to put back: each saved node ({NodeName: reason}) not drained now (one someone drained
    during the run keeps that drain and reason); a node whose state could not be read is drained all the
    same."""
    return {sn: reason for sn, reason in sorted(saved.items())
            if not (isinstance(now.get(sn), NodeState) and now[sn].drained)}


def _reason_arg(reason: str) -> str:
    """``Reason=...`` as ONE argv word, kept verbatim: scontrol strips one leading and one trailing double
    quote from the value (src/scontrol/update_node.c), so the reason goes inside a pair of them; a control
    character (none comes from a --oneliner line) becomes '?'."""
    text = "".join(c if c.isprintable() else "?" for c in reason)
    return f'Reason="{text}"'


def create_argv(name: str, nodes: list[str], user: str, minutes: int = RESERVATION_MIN) -> list[str]:
    return ["scontrol", "create", "reservation", f"ReservationName={name}", f"Nodes={','.join(nodes)}",
            "StartTime=now", f"Duration={minutes}", f"Users={user}", "Flags=MAINT,IGNORE_JOBS"]


def delete_argv(name: str) -> list[str]:
    return ["scontrol", "delete", f"ReservationName={name}"]


def resume_argv(node: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={node}", "State=RESUME"]


def drain_argv(node: str, reason: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={node}", "State=DRAIN", _reason_arg(reason)]


def show_nodes_argv() -> list[str]:
    return ["scontrol", "show", "node", "--oneliner"]


def show_reservations_argv() -> list[str]:
    return ["scontrol", "show", "reservation", "--oneliner"]


def why(res: dict, limit: float = SCONTROL_S) -> str:
    if not res or res.get("timed_out"):
        return f"no answer within {limit:.0f} s"
    text = (res.get("stderr") or "").strip() or (res.get("stdout") or "").strip()
    return text.splitlines()[-1][:300] if text else f"exit status {res.get('rc')}"


def ok(res: dict) -> bool:
    return bool(res) and res.get("rc") == 0 and not res.get("timed_out")


# ---- the saved reasons (the state directory)
# ----------------------------------------------------------------

def saved_dir(state_dir: Path) -> Path:
    return state_dir / "slurm-reservations"


@dataclass
class Saved:
    key: str                    # the run's (its job's name): the file's name
    reservation: str
    created: bool               # clustercert made it (and deletes it)
    drained: dict[str, str]     # NodeName -> reason, verbatim
    pid: int = 0
    host: str = ""

    def path(self, state_dir: Path) -> Path:
        return saved_dir(state_dir) / f"{self.key}.json"

    def write(self, state_dir: Path) -> None:
        d = saved_dir(state_dir)
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        p = self.path(state_dir)
        fd = os.open(p.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"reservation": self.reservation, "created": self.created, "drained": self.drained,
                       "pid": self.pid or os.getpid(), "host": self.host or socket.gethostname()}, f)
        os.replace(p.with_suffix(".tmp"), p)

    def remove(self, state_dir: Path) -> None:
        self.path(state_dir).unlink(missing_ok=True)


def read_saved(state_dir: Path) -> list[Saved]:
    out = []
    d = saved_dir(state_dir)
    for p in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            doc = json.loads(p.read_text())
            s = Saved(p.stem, str(doc["reservation"]), bool(doc["created"]),
                      {str(k): str(v) for k, v in dict(doc["drained"]).items()}, int(doc.get("pid", 0)),
                      str(doc.get("host", "")))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _readable(s):
            out.append(s)
    return out


def _readable(s: Saved) -> bool:
    """Only names fit for scontrol come out of a saved file (it could have been edited)."""
    try:
        reservation_name(s.reservation)
    except ValueError:
        return False
    return all(unusable_name(sn) is None for sn in s.drained)


def alive(s: Saved) -> bool:
    """Whether the run that saved ``s`` may still run: its process is there, or it ran on another host (a
    state directory shared between hosts: that run cannot be seen from here, so it is left to its own
    host)."""
    if s.host != socket.gethostname():
        return True
    try:
        os.kill(s.pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


# ---- I/O: scontrol through ``call``
# -------------------------------------------------------------------------

def read_nodes(call: Call) -> dict[str, NodeState] | str:
    from clustercert.collect.slurm import parse_show_node

    res = call(show_nodes_argv(), SCONTROL_S)
    if not ok(res):
        return why(res)
    states = {}
    for line in res["stdout"].splitlines():
        if line.startswith("NodeName="):
            try:
                st = parse_show_node(line)
            except ValueError:
                continue
            states[st.node] = st
    return states


def read_reservations(call: Call) -> dict[str, Reservation] | str:
    res = call(show_reservations_argv(), SCONTROL_S)
    if not ok(res):
        return why(res)
    try:
        return parse_reservations(res["stdout"])
    except ValueError as exc:
        return str(exc)


def restore(call: Call, saved: Saved, state_dir: Path, say: Callable[[str], None]) -> bool:
    """Drain the saved nodes again with their reasons (those not drained now), delete the reservation where
    clustercert made it, then the saved file. False (and the file kept, for the next run) where a step
    failed."""
    now = read_nodes(call)
    states = now if isinstance(now, dict) else {}
    good = True
    for sn, reason in to_restore(saved.drained, states).items():
        res = call(drain_argv(sn, reason), SCONTROL_S)
        if not ok(res):
            good = False
            say(f"{sn}: its drain (Reason={reason}) could not be restored: {why(res)}")
    if saved.created:
        deadline = time.monotonic() + DELETE_WAIT_S
        while True:  # a job still completing there keeps it busy a moment after scancel
            res = call(delete_argv(saved.reservation), SCONTROL_S)
            busy = "in use" in why(res).lower() or "busy" in why(res).lower()  # ESLURM_RESERVATION_BUSY
            if ok(res) or not busy or time.monotonic() > deadline:
                break
            time.sleep(2)
        gone = "requested reservation is invalid" in why(res).lower()  # (it ended, or an admin deleted it)
        if not ok(res) and not gone:
            good = False
            say(f"reservation {saved.reservation} could not be deleted: {why(res)}")
    if good:
        saved.remove(state_dir)
    return good


def recover(call: Call, state_dir: Path, say: Callable[[str], None]) -> None:
    """A leftover of a run killed outright: each saved file of this state directory whose run is gone -- its
    drains restored, its reservation (clustercert's) deleted; said on stderr. A clustercert-* reservation with
    no saved file here is another controller's: named, left alone."""
    leftovers = [s for s in read_saved(state_dir) if not alive(s)]
    for s in leftovers:
        say(f"reservation {s.reservation} was left by a run that did not end (pid {s.pid}): restoring the "
            "drains of "
            f"{', '.join(sorted(s.drained)) or 'no node'}" + (" and deleting it" if s.created else ""))
        restore(call, s, state_dir, say)
    known = {s.reservation for s in read_saved(state_dir)} | {s.reservation for s in leftovers}
    found = read_reservations(call)
    if isinstance(found, dict):
        for name in sorted(n for n in found if n.startswith(PREFIX) and n not in known):
            say(f"reservation {name} is clustercert's but not this state directory's (another controller's "
                "run?): left as it is")
