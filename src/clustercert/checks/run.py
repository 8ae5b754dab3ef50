"""The validators' run: collect every node's evidence (one connection each), evaluate it.

The checks' I/O driver, as clustercert.probes.run is the probes': it asks each component for its
commands, collects them through the run's backend (``io``: clustercert.collect.backend.Backend; every node
at once, the disruptive bond failover test one node after the other) and hands the evidence to the
components' pure evaluators.
``validate_here`` is the same for the machine it runs on (``clustercert node-check``): the node's own
checks, its commands run here by the same node runner, no SSH, no inventory.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clustercert import paths
from clustercert.checks import (
    DISRUPTIVE,
    Component,
    Finding,
    HostContext,
    bond_failover,
    components,
    components_for,
    disruptive_component,
    expand,
    node_verdict,
    parsed,
    registry,
    run_evaluations,
)
from clustercert.checks import cluster as cluster_checks
from clustercert.checks import hardware as hardware_checks
from clustercert.checks import ib as ib_checks
from clustercert.checks import rails as rails_checks
from clustercert.collect import DEFAULT_FORKS
from clustercert.collect.ssh import LOCAL, collect_node
from clustercert.errors import InputError
from clustercert.model.evidence import NodeEvidence
from clustercert.parsers import one_parse_per_output

if TYPE_CHECKING:  # node-check's zipapp has no inventory (nor pydantic), nor collect.backend
    from clustercert.collect.backend import Backend
    from clustercert.model.inventory import HostView, Inventory


@dataclass
class NodeResult:
    name: str
    verdict: str  # pass | fail | unreachable | error
    findings: list[Finding]
    detail: str = ""
    evidence: NodeEvidence | None = None
    # what the node's evidence says it is made of (clustercert.checks.hardware.identity), taken before its raw
    # outputs are dropped; None: not taken (or nothing known)
    hardware: dict | None = None
    hardware_taken: bool = False
    # the node's compute rails as its evidence shows them (clustercert.checks.rails): what the certificate
    # records and the probes use; None: not taken (its components did not run)
    rails: rails_checks.NodeRails | None = None

    def to_json(self) -> dict:
        out = {"verdict": self.verdict, "findings": [f.to_json() for f in self.findings]}
        if self.detail:
            out["detail"] = self.detail
        return out


def host_context(h: HostView) -> HostContext:
    return HostContext(
        name=h.name,
        profile=h.profile,
        timeout_s=float(h.vars.clustercert_command_timeout_s),
        fabric_addresses=dict(h.vars.clustercert_fabric_addresses),
        sm_priority=h.vars.clustercert_sm_priority,
        bond_address=h.bond_address,
    )


def validate_nodes(inv: Inventory, comp_names: list[str], forks: int = DEFAULT_FORKS,
                   disruptive: bool = False, selected: set[str] | None = None,
                   nvlink_baseline: dict[str, dict[str, dict[str, int]]] | None = None,
                   keep_outputs: bool = True, after_node: Callable[[], None] | None = None,
                   *, io: Backend, progress: Callable[..., None] | None = None) -> dict[str, NodeResult]:
    """Collect and evaluate every node; then the cluster-wide checks over every reachable node's evidence;
    with ``disruptive``, then run the components' disruptive tests (the bond failover test) node by node.
    ``selected``: report only these check ids (the components still run whole: the failover test needs
    ib.bond's verdict); the node verdicts follow them. ``nvlink_baseline`` (drift): per node the NVLink
    error counters of the baseline run (clustercert.checks.hardware.nvlink_baseline). Each result's
    ``hardware`` is taken from its evidence; without ``keep_outputs`` each node's raw command outputs are then
    dropped but for KEPT_OUTPUTS (certify: at fleet scale they were most of the controller's memory; validate
    --out keeps them, it writes them). ``after_node``: called after each node's evaluation (certify settles
    its memory). ``io``: the run's collect.backend.Backend (collect.ssh's SshBackend, or --backend slurm's
    SlurmBackend). ``progress``: told as the collection begins and as each node's ends
    (clustercert.report.progress.RunProgress)."""
    comps = components(comp_names)
    contexts = {name: host_context(h) for name, h in inv.hosts.items()}
    for name, counters in (nvlink_baseline or {}).items():
        if name in contexts:
            contexts[name].nvlink_baseline = counters
    tell = progress or (lambda kind, **ev: None)
    settled = after_node or (lambda: None)
    commands_for = {name: node_commands(ctx, comps) for name, ctx in contexts.items()}
    results: dict[str, NodeResult] = {}
    sysfs: dict[str, dict] = {}
    parts: dict[str, dict] = {}

    def take(name: str, ev: NodeEvidence) -> NodeEvidence:
        """One node, as soon as its collection ends: evaluated, and what the cluster-wide checks and the
        certificate need of its raw outputs taken, so that (without ``keep_outputs``) they can go now."""
        if not ev.reachable:
            results[name] = NodeResult(name, "unreachable", [], ev.error, ev)
            tell("node", name=name, status="unreachable")
            return ev
        findings, hardware, rails = _evaluate_node(name, ev, contexts[name], comps, comp_names, sysfs, parts)
        results[name] = NodeResult(name, "pass", findings, "", ev, hardware, True, rails)
        if not keep_outputs:
            ev.results = {k: v for k, v in ev.results.items() if k in KEPT_OUTPUTS}
        settled()
        tell("node", name=name, status=node_verdict(findings))
        return ev

    tell("nodes", phase="validate", names=list(inv.hosts), forks=forks)

    evidence = io.collect_many({n: h.connection for n, h in inv.hosts.items()}, commands_for, forks=forks,
                            control_dir=paths.control_dir(), each=take)
    for name, ev in evidence.items():  # a collect_many that did not call ``each`` (tests' fakes)
        if name not in results:
            take(name, ev)
    # the inventory's order, not the order the nodes answered in
    results = {n: results[n] for n in evidence}
    sysfs = {n: sysfs[n] for n in evidence if n in sysfs}
    _add_cluster_findings(inv, results, comp_names, sysfs, parts, contexts)
    if disruptive and "bond" in comp_names:
        run_bond_failover(inv, contexts, results, io=io)
    for r in results.values():
        _settle(r, selected, keep_outputs)
    return results


def _settle(r: NodeResult, selected: set[str] | None, keep_outputs: bool) -> None:
    """A node's result once every check has run: its findings narrowed to ``selected``, its verdict from them,
    and (without ``keep_outputs``) its raw outputs, the failover test's too, dropped but for KEPT_OUTPUTS."""
    if selected is not None:
        r.findings = [f for f in r.findings if f.check in selected]
    if r.verdict != "unreachable":
        r.verdict = node_verdict(r.findings)
    if r.evidence is not None and not keep_outputs:
        r.evidence.results = {k: v for k, v in r.evidence.results.items() if k in KEPT_OUTPUTS}


def _evaluate_node(name: str, ev: NodeEvidence, ctx: HostContext, comps: list[Component],
                   comp_names: list[str],
                   sysfs: dict[str, dict], parts: dict[str, dict]) -> tuple[list[Finding], object, object]:
    """One reachable node's (findings, hardware identity, rails); what the cluster-wide checks need of its
    outputs is put in ``sysfs`` and ``parts``."""
    with one_parse_per_output():  # the node's outputs parsed once each, whichever checks read them
        findings = run_evaluations(ev.results, ctx, comps)
        if "ib" in comp_names:
            rec, _ = parsed("sysfs-infiniband", ev.results.get("ib_sysfs"), ())
            if rec is not None:
                sysfs[name] = rec
        if "hardware" in comp_names:
            parts[name] = cluster_checks.node_parts(ev.results, ctx)
        hardware = hardware_checks.identity(ev.results, ctx.profile.ib.link_layer)
        rails = (rails_checks.of_evidence(ctx.profile, ev.results.get("nvsmi_topo"),
                                          ev.results.get("ib_sysfs"),
                                          ctx.timeout_s) if {"hardware", "ib"} & set(comp_names) else None)
    return findings, hardware, rails


def _add_cluster_findings(inv: Inventory, results: dict[str, NodeResult], comp_names: list[str],
                          sysfs: dict[str, dict], parts: dict[str, dict], contexts: dict) -> None:
    """The cluster-wide checks over every reachable node's evidence, added to the nodes' findings."""
    if "ib" in comp_names and len(sysfs) > 1:
        extra = ib_checks.cluster_findings(sysfs, {n: inv.hosts[n].profile for n in sysfs})
        for name, fs in extra.items():
            results[name].findings.extend(fs)
    if "hardware" not in comp_names:
        return
    reachable = {n: parts[n] for n in results if n in parts}
    for name, fs in cluster_checks.parts_findings(reachable, contexts).items():
        results[name].findings.extend(fs)
    results_rails = {n: r.rails for n, r in results.items() if r.rails is not None}
    for name, what in rails_checks.peer_differences(
            results_rails, {n: inv.hosts[n].profile.name for n in results_rails}).items():
        results[name].findings.append(Finding(
            "gpu.nic_affinity", "fail", "rails", "the GPU->NIC mapping of the node's peers (same profile)",
            f"differs from its peers': {what}", json.dumps(results_rails[name].to_json(), sort_keys=True)))


# the outputs certify still reads once the checks have run: the certificate's versions (nccl, ofed)
KEPT_OUTPUTS = frozenset({"nccl_pkg", "ofed_info"})


def node_commands(ctx: HostContext, comps: list[Component]) -> dict[str, tuple[str, float]]:
    """What a node runs for ``comps``: every component's commands, {name: (shell, timeout s)}."""
    cmds: dict[str, tuple[str, float]] = {}
    for comp in comps:
        cmds.update(comp.commands(ctx))
    return cmds


# ---- one node, here: clustercert node-check --------------------------------------------------------

# what node-check does not run, and why: the checks that compare nodes, and the tests that disturb one
NOT_HERE = ({c: "is cluster-wide (it compares the nodes): `clustercert validate` runs it"
             for c in hardware_checks.CLUSTER_CHECK_IDS}
            | {c: "disturbs the node (opt-in): `clustercert validate --disruptive` runs it"
               for name in DISRUPTIVE for c in disruptive_component(name).check_ids})


def node_selection(checks: str | None, skip: str | None) -> tuple[list[str], set[str]]:
    """node-check's ``--checks``/``--skip`` -> (the components to run, in order; the check ids to report):
    every per-node check unless narrowed. Naming a check of NOT_HERE, an unknown id, or leaving nothing is bad
    input."""
    chosen = expand("--checks", checks, NOT_HERE)
    skipped = expand("--skip", skip) or set()
    ids = (chosen if chosen is not None else set(registry())) - skipped - set(NOT_HERE)
    if not ids:
        raise InputError("--skip" if skip else "--checks", skip or checks, "leaves no check to run")
    return components_for(ids), ids


def validate_here(ctx: HostContext, comp_names: list[str], selected: set[str],
                  tool_path: str = "") -> NodeResult:
    """The node's own checks on this machine: the components' commands run here by the node runner
    (clustercert.remote.runner: each under its timeout in a process group of its own, LC_ALL=C, its fixed PATH
    after ``tool_path``), all at once, then the same evaluators as validate's. Only ``selected`` ids are
    reported; a runner that did not run makes every one of them an error."""
    comps = components(comp_names)
    cmds = node_commands(ctx, comps)
    ev = collect_node(ctx.name, LOCAL, cmds, parallel=max(1, len(cmds)), path=tool_path)
    if not ev.reachable:
        findings = [Finding(c, "error", "", "", f"the node runner did not run: {ev.error}")
                    for comp in comps for c in comp.check_ids if c in selected]
        return NodeResult(ctx.name, "error", findings, ev.error, ev)
    findings = [f for f in run_evaluations(ev.results, ctx, comps) if f.check in selected]
    return NodeResult(ctx.name, node_verdict(findings), findings, "", ev)


def run_bond_failover(inv: Inventory, contexts: dict[str, HostContext], results: dict[str, NodeResult],
                      *, io: Backend) -> None:
    """--disruptive: the bond failover test on every reachable node, ONE NODE AT A TIME in inventory order,
    after the normal checks. Each node pings the bond address of the next node (in order) that answered
    and whose ib.bond passed: that peer is never failing over at the same moment."""
    comp = disruptive_component("bond")
    order = list(inv.hosts)
    healthy = {n for n, r in results.items() if r.verdict != "unreachable"
               and any(f.check == "ib.bond" and f.status == "pass" for f in r.findings)}
    peers = bond_failover.choose_peers(order, {n: h.bond_address for n, h in inv.hosts.items()}, healthy)
    todo: dict[str, dict[str, tuple[str, float]]] = {}
    for name in order:
        if results[name].verdict == "unreachable":
            continue
        ctx = contexts[name]
        ctx.bond_peer, ctx.bond_peer_note = peers[name]
        cmds = comp.commands(ctx)
        if cmds:
            todo[name] = cmds
        else:  # nothing to run on the node (no bond in its profile): the evaluator says why
            results[name].findings.extend(run_evaluations({}, ctx, [comp]))
    evidence = io.collect_in_turn({n: inv.hosts[n].connection for n in todo}, todo,
                                  control_dir=paths.control_dir())
    for name, ev in evidence.items():
        r = results[name]
        if r.evidence is not None:  # the node's checking time includes its failover test
            r.evidence.seconds += ev.seconds
        if not ev.reachable:
            bond = contexts[name].profile.ib.bond
            r.findings.extend(Finding(c, "error", bond.name if bond else "", "",
                                      f"the node did not answer for the failover test: {ev.error}")
                              for c in comp.check_ids)
            continue
        r.findings.extend(run_evaluations(ev.results, contexts[name], [comp]))
        if r.evidence is not None:
            r.evidence.results.update(ev.results)
