"""`certify --drain slurm`: drain the nodes that failed, resume the passing ones clustercert drained.

Ownership is the reason: clustercert drains with ``Reason=clustercert: <failing check ids>`` and resumes
a passing node only when its reason starts with ``clustercert:``. A node drained by anyone else is
left as it is -- passing or failing (it is out of service already, and its reason stays theirs).

``scontrol`` runs on a node of the cluster (its Slurm client configuration and munge are there), as
roles/rolling_reboot does: the first Slurm node (``clustercert_slurm: true``) that answered. All of
it goes through clustercert.collect.ssh, every command under the node's command timeout.
``node-check --drain`` applies the same rules to the node it runs on, with scontrol run there (apply_here).

Pure parts (parse_show_node, drain_reason, decide) are separate from the remote part (apply).
"""

from __future__ import annotations

import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from clustercert.collect.ssh import LOCAL, collect_node
from clustercert.errors import InputError
from clustercert.model.evidence import CommandResult, NodeEvidence
from clustercert.shell import q

if TYPE_CHECKING:  # node-check's zipapp has no inventory (nor pydantic)
    from clustercert.model.inventory import HostView, Inventory

REASON_PREFIX = "clustercert:"
MAX_REASON = 160  # characters; longer check lists end in "+N more"
FAILING = ("fail", "error", "unreachable")

# " [user@time]" that scontrol appends to the first line of the reason (src/api/node_info.c)
_REASON_STAMP = re.compile(r"\s\[[^\[\]\s@]+@[^\[\]\s]+\]")


@dataclass(frozen=True)
class NodeState:
    node: str            # NodeName
    state: str           # e.g. IDLE, IDLE+DRAIN, DOWN+DRAIN+NOT_RESPONDING, MIXED+DRAIN
    reason: str | None   # without the " [user@time]" stamp; None: no reason set

    @property
    def drained(self) -> bool:
        """DRAIN set (drained or draining). Older Slurm spelled it DRAINED/DRAINING, or IDLE*+DRAIN."""
        flags = [f.rstrip("*~#%$@!^-") for f in self.state.upper().split("+")]
        return any(f in ("DRAIN", "DRAINED", "DRAINING") for f in flags)

    @property
    def ours(self) -> bool:
        return self.drained and (self.reason or "").startswith(REASON_PREFIX)


def parse_show_node(text: str) -> NodeState:
    """``scontrol show node NAME --oneliner`` (one line: Key=Value fields, the reason last) -> NodeState.
    Raises ValueError for text that is not such a line."""
    line = next((x for x in text.splitlines() if x.startswith("NodeName=")), None)
    if line is None:
        raise ValueError(f"no NodeName= line in scontrol output: {text.strip()[:200]!r}")
    name = re.match(r"NodeName=(\S+)", line).group(1)
    state = re.search(r"(?:^|\s)State=(\S+)", line)
    if state is None:
        raise ValueError(f"no State= in scontrol output for {name}: {line[:200]!r}")
    reason = None
    m = re.search(r"(?:^|\s)Reason=(.*)$", line)
    if m:
        text = m.group(1)
        stamp = _REASON_STAMP.search(text)
        reason = (text[:stamp.start()] if stamp else text).strip() or None
    return NodeState(name, state.group(1), reason)


def failing_checks(node: dict) -> list[str]:
    return sorted({f["check"] for f in node.get("findings", []) if f.get("status") in ("fail", "error")})


def drain_reason(node: dict) -> str:
    """``clustercert: <sorted failing check ids>`` (``clustercert: unreachable`` for a node that did not
    answer), at most MAX_REASON characters: the ids that do not fit are counted as ``+N more``."""
    if node["verdict"] == "unreachable":
        return f"{REASON_PREFIX} unreachable"
    ids = failing_checks(node) or [node["verdict"]]
    text = f"{REASON_PREFIX} " + ",".join(ids)
    if len(text) <= MAX_REASON:
        return text
    for keep in range(len(ids) - 1, 0, -1):
        text = f"{REASON_PREFIX} " + ",".join(ids[:keep]) + f" +{len(ids) - keep} more"
        if len(text) <= MAX_REASON:
            return text
    return f"{REASON_PREFIX} {len(ids)} failing checks"


@dataclass
class Action:
    node: str                 # inventory name
    slurm_node: str           # Slurm NodeName
    action: str               # drain | resume | none
    reason: str = ""          # the drain reason set, or the reason found
    ok: bool = True
    detail: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def decide(
    nodes: dict[str, dict], slurm_names: dict[str, str], states: dict[str, NodeState | str]
) -> list[Action]:
    """What to do with each Slurm node. ``nodes``: the certificate's nodes ({name: {verdict, findings}});
    ``slurm_names``: inventory name -> Slurm NodeName, for the nodes clustercert manages in Slurm (the
    others are ignored); ``states``: Slurm NodeName -> its state, or the error text of reading it."""
    out = []
    for name in sorted(slurm_names):
        sn, node = slurm_names[name], nodes.get(name)
        if node is None:
            continue
        st = states.get(sn, "its state was not read")
        failing = node["verdict"] in FAILING
        want = drain_reason(node) if failing else ""
        if isinstance(st, str):
            out.append(
                Action(
                    name,
                    sn,
                    "drain" if failing else "none",
                    want,
                    False,
                    f"cannot read the Slurm node's state: {st}",
                )
            )
        elif failing and st.drained and not st.ours:
            out.append(Action(name, sn, "none", st.reason or "", True,
                              f"{st.state}, drained by someone else (Reason={st.reason or 'none'}): left as "
                              "it is"))
        elif failing and st.ours and st.reason == want:
            out.append(
                Action(name, sn, "none", want, True, f"{st.state}, already drained for the same reason")
            )
        elif failing:
            out.append(Action(name, sn, "drain", want, True, f"was {st.state}"))
        elif st.ours:
            out.append(Action(name, sn, "resume", st.reason or "", True, f"was {st.state}"))
        elif st.drained:
            out.append(Action(name, sn, "none", st.reason or "", True,
                              f"{st.state}, drained by someone else (Reason={st.reason or 'none'}): left as "
                              "it is"))
        else:
            out.append(Action(name, sn, "none", "", True, st.state))
    return out


def show_cmd(slurm_node: str) -> str:
    return f"scontrol show node {q(slurm_node)} --oneliner"


def update_cmd(a: Action) -> str:
    """The update; the node name and the reason each stay in one word (``NodeName=<name>``,
    ``Reason=<reason>``)."""
    if a.action == "drain":
        return f"scontrol update NodeName={q(a.slurm_node)} State=DRAIN Reason={q(a.reason)}"
    return f"scontrol update NodeName={q(a.slurm_node)} State=RESUME"


def unusable_name(slurm_node: str) -> str | None:
    """Why ``slurm_node`` is never handed to scontrol, or None. Quoting keeps it one word, but a word that
    starts with '-' would be one of scontrol's options, and an empty one or one with a control character
    (a newline) is no NodeName."""
    if not slurm_node or slurm_node.startswith("-") or not slurm_node.isprintable():
        return f"not a Slurm node name: {slurm_node!r} (clustercert_slurm_node_name); scontrol not run for it"
    return None


def slurm_hosts(inv: Inventory) -> dict[str, HostView]:
    return {n: h for n, h in sorted(inv.hosts.items()) if h.vars.clustercert_slurm}


def slurm_name(h: HostView) -> str:
    return h.vars.clustercert_slurm_node_name or h.name.split(".")[0]


def check_inventory(inv: Inventory) -> None:
    """Before anything runs: --drain slurm needs Slurm nodes to drain (else exit 2)."""
    if not slurm_hosts(inv):
        raise InputError(str(inv.source), "clustercert_slurm",
                         "--drain slurm: no host (of those selected) has clustercert_slurm: true")


def _why(r: CommandResult | None, timeout: float) -> str:
    if r is None:
        return "not run"
    if r.timed_out:
        return f"timed out after {timeout:g} s"
    return (r.stderr.strip() or r.stdout.strip() or f"exit status {r.rc}").splitlines()[-1][:300]


def read_states(
    inv: Inventory, names: dict[str, str], skip: set[str] = frozenset(), control_dir: Path | None = None
) -> tuple[tuple[str, HostView] | None, dict[str, NodeState | str], list[str]]:
    """The Slurm states of ``names`` (inventory name -> Slurm NodeName), read with ``scontrol show
    node`` on the first Slurm node (not in ``skip``) where scontrol works. Returns (that node and its
    host, {NodeName: state or the error text of reading it}, what the nodes tried before said);
    (None, {}, tried) when no Slurm node could run scontrol."""
    refused: dict[str, NodeState | str] = {
        sn: why for sn in set(names.values()) if (why := unusable_name(sn))
    }
    shows = {f"show {sn}": show_cmd(sn) for sn in sorted(set(names.values()) - set(refused))}
    tried: list[str] = []
    if not shows:
        return None, refused, ["no Slurm node name could be asked about"]
    for runner, h in slurm_hosts(inv).items():
        if runner in skip:
            continue
        t = float(h.vars.clustercert_command_timeout_s)
        ev = collect_node(
            runner, h.connection, {k: (c, t) for k, c in shows.items()}, control_dir=control_dir
        )
        if not ev.reachable:
            tried.append(f"{runner}: {ev.error}")
            continue
        states = {
            key.removeprefix("show "): state_of(key.removeprefix("show "), r, t)
            for key, r in ev.results.items()
        }
        if states and all(isinstance(s, str) for s in states.values()):
            tried.append(f"{runner}: {next(iter(states.values()))}")
            continue  # scontrol does not work there (no client config, munge, controller): try the next
        return (runner, h), states | refused, tried
    return None, refused, tried


def state_of(sn: str, r: CommandResult | None, t: float) -> NodeState | str:
    """The state ``scontrol show node SN --oneliner`` gave (its result ``r``), or why it is not known: any
    non-zero exit (unknown node, no controller), a timeout, text that is no node line, another node's line."""
    try:
        st = parse_show_node(r.stdout) if r is not None and r.ok else _why(r, t)
    except ValueError as exc:
        return str(exc)
    if isinstance(st, NodeState) and st.node != sn:
        return f"scontrol answered for NodeName={st.node}, not {sn}"
    return st


def _updated(a: Action, up: NodeEvidence, key: str, t: float, where: str) -> None:
    """Record in ``a`` how its update (``key`` of ``up``, the scontrol run on ``where``) went."""
    r = up.results.get(key)
    if not up.reachable or r is None or not r.ok:
        a.ok = False
        a.detail = f"scontrol update on {where} failed: {up.error if not up.reachable else _why(r, t)}"
    else:
        a.detail += f"; scontrol on {where}"


# flags that keep a step off a node (scontrol prints them after the base state: IDLE+DRAIN)
_BLOCKING = (
    "DRAIN",
    "DRAINED",
    "DRAINING",
    "DOWN",
    "FAIL",
    "FAILING",
    "MAINT",
    "RESERVED",
    "NOT_RESPONDING",
    "POWERED_DOWN",
    "POWERING_DOWN",
    "POWER_DOWN",
    "POWERING_UP",
    "REBOOT_REQUESTED",
    "REBOOT_ISSUED",
    "INVALID_REG",
    "COMPLETING",
    "PLANNED",
)


def _blocking_flags(st: NodeState) -> tuple[str, list[str]]:
    """(the base state as scontrol prints it, its flags of _BLOCKING): ``IDLE+DRAIN`` -> ("IDLE",
    ["DRAIN"])."""
    base, *flags = st.state.upper().split("+")
    return base, [f.rstrip("*~#%$@!^-") for f in flags if f.rstrip("*~#%$@!^-") in _BLOCKING]


def accepts_step(st: NodeState | str) -> bool:
    """True where srun can start a probe step on the node now without waiting or sharing it: IDLE
    and nothing that keeps jobs off it. A node being certified is usually drained: srun cannot
    place a step there (the probes then launch over ssh)."""
    if isinstance(st, str):
        return False
    base, blocking = _blocking_flags(st)
    return base == "IDLE" and not blocking


def takes_jobs(st: NodeState) -> str | None:
    """--backend slurm's test of a node for the run's job: why Slurm would give it no job now, or None where
    it would -- IDLE or MIXED (a user job beside it: salloc --exclusive then fails at once and says so),
    nothing of _BLOCKING but COMPLETING (an epilog ending within salloc's --immediate wait). ALLOCATED: every
    core is some job's; a '*' after the base state: not responding."""
    base, blocking = _blocking_flags(st)
    if base in ("IDLE", "MIXED") and not [f for f in blocking if f != "COMPLETING"]:
        return None
    reason = f" (Reason={st.reason})" if st.reason else ""
    return f"Slurm starts no job on {st.node} now: it is {st.state}{reason}"


def apply(inv: Inventory, nodes: dict[str, dict], control_dir: Path | None = None) -> list[dict]:
    """Read the Slurm nodes' states on a reachable Slurm node, decide (decide()) and run the updates
    there. Returns the certificate's ``slurm`` entries; a failure is an entry with ok false (and a line
    on stderr), never a silent success."""
    hosts = slurm_hosts(inv)
    names = {n: slurm_name(h) for n, h in hosts.items() if n in nodes}
    if not names:
        return []
    unreachable = {n for n in hosts if nodes.get(n, {}).get("verdict") == "unreachable"}
    found, states, tried = read_states(inv, names, unreachable, control_dir)
    if found is not None:
        runner, h = found
        t = float(h.vars.clustercert_command_timeout_s)
        actions = decide(nodes, names, states)
        todo = {
            f"{a.action} {a.slurm_node}": (update_cmd(a), t) for a in actions if a.ok and a.action != "none"
        }
        if todo:
            up = collect_node(runner, h.connection, todo, control_dir=control_dir, parallel=1)
            for a in actions:
                key = f"{a.action} {a.slurm_node}"
                if key in todo:
                    _updated(a, up, key, t, runner)
        entries = [a.to_json() for a in actions]
    else:
        why = "; ".join(tried) or "every Slurm node was unreachable"
        entries = [
            Action(
                n,
                sn,
                "drain" if nodes[n]["verdict"] in FAILING else "none",
                drain_reason(nodes[n]) if nodes[n]["verdict"] in FAILING else "",
                False,
                states.get(sn)
                if isinstance(states.get(sn), str)
                else f"no Slurm node could run scontrol ({why})",
            ).to_json()
            for n, sn in sorted(names.items())
        ]
    for e in entries:
        _say_if_not_done(e)
    return entries


def _say_if_not_done(e: dict) -> None:
    if not e["ok"]:
        print(
            f"clustercert: slurm: {e['node']} ({e['slurm_node']}): {e['action']} not done: {e['detail']}",
            file=sys.stderr,
        )


HERE_TIMEOUT_S = 10  # node-check's scontrol calls: a Slurm HealthCheckProgram is killed after 60 s


def apply_here(
    name: str, node: dict, slurm_node: str, path: str = "", timeout: float = HERE_TIMEOUT_S
) -> dict:
    """``node-check --drain``: decide() for this node alone -- ``node`` ({verdict, findings}) known to Slurm
    as ``slurm_node`` -- with ``scontrol show node`` and ``scontrol update`` run here, each under ``timeout``
    (by the node runner, as every command of node-check; ``path``: where scontrol is looked for first).
    Returns the action's entry (as certify's ``slurm`` list); one not done (Slurm not read, the update
    refused) has ok false and a line on stderr."""
    ev = collect_node(name, LOCAL, {"show": (show_cmd(slurm_node), timeout)}, path=path)
    state = state_of(slurm_node, ev.results.get("show"), timeout) if ev.reachable else ev.error
    (a,) = decide({name: node}, {name: slurm_node}, {slurm_node: state})
    if a.ok and a.action != "none":
        key = f"{a.action} {slurm_node}"
        _updated(
            a,
            collect_node(name, LOCAL, {key: (update_cmd(a), timeout)}, path=path),
            key,
            timeout,
            "this node",
        )
    _say_if_not_done(entry := a.to_json())
    return entry
