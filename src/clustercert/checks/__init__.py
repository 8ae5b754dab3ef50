"""Evaluate: evidence + profile -> findings. Pure functions; no I/O (but in the drivers below).

Each component module declares the commands it needs (``commands(ctx)`` -> {name: (shell, timeout)})
and evaluates their results (``evaluate(ev, ctx)`` -> [Finding]). The validators' driver,
clustercert.checks.run, collects the union of commands in one connection per node (clustercert.collect.ssh);
the testinfra modules in validators/ collect the same commands through testinfra's ``host``
(clustercert.checks.testinfra) and call the same ``evaluate``. A command that could not run (missing
tool, timeout, unparseable output) gives ``error``, never ``pass``. clustercert.checks.drift compares a
run's findings with a baseline's (``clustercert drift``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from difflib import get_close_matches
from typing import TYPE_CHECKING

from clustercert.errors import InputError
from clustercert.model.evidence import CommandResult
from clustercert.parsers import ParseError, parse_once

if TYPE_CHECKING:  # node-check's zipapp has no pydantic: there the profile is clustercert.model.plain's
    from clustercert.model.profile import Profile

STATUSES = ("pass", "fail", "error", "skip")
COMPONENT_ORDER = (
    "gpu",
    "driver",
    "rdma",
    "ib",
    "bond",
    "container",
    "tuning",
    "time",
    "packages",
    "hardware",
    "storage",
)
# Opt-in tests that disturb a node (`validate --disruptive` only, never by default): the component they
# belong to -> the module that holds them (same interface as a component module).
DISRUPTIVE = {"bond": "bond_failover"}
# Every module ``component`` imports by name (importlib, which no import statement shows): what a program that
# runs the checks carries besides the modules it imports (node-check's zipapp, clustercert.remote.nodeapp).
COMPONENT_MODULES = (*COMPONENT_ORDER, *DISRUPTIVE.values())


@dataclass
class Finding:
    check: str
    status: str
    subject: str = ""
    expected: str = ""
    observed: str = ""
    evidence: str = ""
    value: float | None = None
    unit: str | None = None
    threshold: str = ""  # the profile threshold's key that judged the value (probe findings)

    def to_json(self) -> dict:
        """The finding as a JSON object (asdict's members in their order; no value and unit where there is no
        value, no threshold where there is none)."""
        if type(self.value) not in _SCALARS or type(self.unit) not in _SCALARS:
            d = asdict(self)  # a value that is not a scalar: asdict's own copy of it
        else:
            d = {
                "check": self.check,
                "status": self.status,
                "subject": self.subject,
                "expected": self.expected,
                "observed": self.observed,
                "evidence": self.evidence,
                "value": self.value,
                "unit": self.unit,
                "threshold": self.threshold,
            }
        if d["value"] is None:
            d.pop("value")
            d.pop("unit")
        if not d["threshold"]:
            d.pop("threshold")
        return d


_SCALARS = (float, int, str, bool, type(None))


@dataclass
class HostContext:
    """What the evaluators may know about a host besides its evidence."""

    name: str
    profile: Profile  # or its plain copy (clustercert.model.plain): the same attributes
    timeout_s: float = 30.0
    fabric_addresses: dict[str, str] = field(default_factory=dict)
    sm_priority: int | None = None
    bond_address: str | None = None  # the bond's own address/prefix, when the inventory gives one
    bond_peer: str | None = None     # bond failover test: the address pinged over the bond meanwhile
    bond_peer_note: str = ""         # the peer's node name, or why there is no peer
    # drift: the NVLink error counters the baseline run recorded, per GPU UUID ({crc, replay, recovery}),
    # so gpu.nvlink_errors judges what was added since (clustercert.checks.hardware.nvlink_baseline)
    nvlink_baseline: dict[str, dict[str, int]] = field(default_factory=dict)


Evidence = dict[str, CommandResult]


@dataclass(frozen=True)
class Component:
    name: str
    check_ids: tuple[str, ...]
    commands: Callable[[HostContext], dict[str, tuple[str, float]]]
    evaluate: Callable[[Evidence, HostContext], list[Finding]]


def component(name: str) -> Component:
    mod = importlib.import_module(f"clustercert.checks.{name}")
    return Component(name, tuple(mod.CHECK_IDS), mod.commands, mod.evaluate)


def components(names: list[str] | None = None) -> list[Component]:
    chosen = names or list(COMPONENT_ORDER)
    return [component(n) for n in chosen]


def disruptive_component(name: str) -> Component | None:
    """The opt-in disruptive test of component ``name`` (None when it has none)."""
    return component(DISRUPTIVE[name]) if name in DISRUPTIVE else None


def registry() -> dict[str, str]:
    """Every check id the validators can emit -> the component that emits it (``validate --checks`` and
    ``--skip`` name either); the disruptive tests' ids belong to the component they test."""
    out = {c: comp.name for comp in components() for c in comp.check_ids}
    for name in COMPONENT_ORDER:
        if (d := disruptive_component(name)) is not None:
            out.update({c: name for c in d.check_ids})
    return out


def expand(flag: str, text: str | None, refuse: Mapping[str, str] | None = None) -> set[str] | None:
    """``--checks``/``--skip`` LIST (check ids and component names, comma separated) -> the check ids it
    names; None for an absent flag. An unknown id, or one of ``refuse`` (id -> why it is not taken here), is
    bad input: one line naming the flag and the id."""
    if text is None:
        return None
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise InputError(flag, text, "names no check id or component (`clustercert checks` lists them)")
    reg = registry()
    out: set[str] = set()
    for name in names:
        if name in COMPONENT_ORDER:
            out |= {c for c, comp in reg.items() if comp == name}
        elif refuse and name in refuse:
            raise InputError(flag, name, refuse[name])
        elif name in reg:
            out.add(name)
        else:
            close = get_close_matches(name, [*reg, *COMPONENT_ORDER], n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise InputError(flag, name, f"unknown check id or component{hint}; components: "
                                         f"{', '.join(COMPONENT_ORDER)}; `clustercert checks` lists the ids")
    return out


def components_for(ids: set[str]) -> list[str]:
    """The components that produce ``ids``, in the components' order."""
    reg = registry()
    wanted = {reg[i] for i in ids}
    return [c for c in COMPONENT_ORDER if c in wanted]


def all_check_ids(disruptive: bool = False) -> list[str]:
    """The stable check ids; with ``disruptive``, also those only `validate --disruptive` produces."""
    ids = [c for comp in components() for c in comp.check_ids]
    if disruptive:
        ids += [c for name in COMPONENT_ORDER if (d := disruptive_component(name)) for c in d.check_ids]
    return ids


# ---- helpers shared by the component modules ------------------------------------------------


def why_not(res: CommandResult | None, timeout: float | None = None) -> str | None:
    """Why a command's result cannot be used, or None when it ran fine."""
    if res is None:
        return "not collected"
    if res.timed_out:
        secs = f"{timeout:g} s" if timeout else "its timeout"
        return f"timed out after {secs}: {res.command}"
    if res.rc == 127 or "command not found" in res.stderr or ": not found" in res.stderr:
        return f"tool not found: {res.command}"
    if res.rc != 0:
        first = (res.stderr.strip() or res.stdout.strip()).splitlines()[:1]
        return f"exit status {res.rc}: {res.command}" + (f": {first[0][:200]}" if first else "")
    return None


def printed_nothing(res: CommandResult | None) -> str | None:
    """For a command that exited 0 and printed nothing: evidence saying so (with its stderr, if any); else
    None."""
    if res is None or not res.ok or res.stdout.strip():
        return None
    err = res.stderr.strip()
    return f"{res.command}: exit status 0, no output" + (f"; stderr: {err[:200]}" if err else "")


def error(check: str, reason: str, res: CommandResult | None = None, subject: str = "") -> Finding:
    return Finding(check, "error", subject, "", reason, res.excerpt() if res else "")


def parsed(
    kind: str,
    res: CommandResult | None,
    checks: tuple[str, ...] | list[str],
    timeout: float | None = None,
    allow_rc: tuple[int, ...] = (0,),
) -> tuple[dict | None, list[Finding]]:
    """Parse a command's output; on failure return error findings for every check that needed it."""
    reason = None
    if res is None or res.timed_out or res.rc not in allow_rc:
        reason = why_not(res, timeout)
    if reason is None:
        try:
            return parse_once(kind, res.stdout), []
        except ParseError as exc:
            reason = f"unparseable {kind} output: {exc.reason}"
    return None, [error(c, reason, res) for c in checks]


def ok(check: str, subject: str, expected, observed, evidence: str = "", value=None, unit=None) -> Finding:
    return Finding(check, "pass", subject, str(expected), str(observed), evidence, value, unit)


def judge(
    check: str, good: bool, subject: str, expected, observed, evidence: str = "", value=None, unit=None
) -> Finding:
    return Finding(
        check, "pass" if good else "fail", subject, str(expected), str(observed), evidence, value, unit
    )


def run_evaluations(ev: Evidence, ctx: HostContext, comps: list[Component]) -> list[Finding]:
    """Evaluate every component; an evaluator bug becomes an error finding, not a crash or a pass."""
    out: list[Finding] = []
    for comp in comps:
        try:
            out.extend(comp.evaluate(ev, ctx))
        except Exception as exc:  # noqa: BLE001 - reported as an error finding, never hidden
            out.extend(
                Finding(c, "error", "", "", f"internal evaluator error: {type(exc).__name__}: {exc}")
                for c in comp.check_ids
            )
    return out


def cluster_verdict(nodes: dict[str, dict], links: list[dict]) -> str:
    """pass when every node passed and every node-to-node measurement passed."""
    ok = all(n["verdict"] == "pass" for n in nodes.values()) and all(lk["status"] == "pass" for lk in links)
    return "pass" if ok else "fail"


def node_verdict(findings: list[Finding]) -> str:
    statuses = {f.status for f in findings}
    if "fail" in statuses:
        return "fail"
    if "error" in statuses:
        return "error"
    return "pass"
