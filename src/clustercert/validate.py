"""validate: collect evidence from every node (one connection each), evaluate it, record it.

Glue between collect (remote I/O), checks (pure evaluation) and the store; no check logic here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clustercert import paths
from clustercert.checks import (
    COMPONENT_ORDER,
    DISRUPTIVE,
    Finding,
    HostContext,
    bond_failover,
    components,
    disruptive_component,
    node_verdict,
    parsed,
    run_evaluations,
)
from clustercert.checks import ib as ib_checks
from clustercert.collect import NodeEvidence, collect_in_turn, collect_many
from clustercert.errors import InputError
from clustercert.inventory import HostView, Inventory


@dataclass
class NodeResult:
    name: str
    verdict: str  # pass | fail | unreachable | error
    findings: list[Finding]
    detail: str = ""
    evidence: NodeEvidence | None = None

    def to_json(self) -> dict:
        out = {"verdict": self.verdict, "findings": [f.to_json() for f in self.findings]}
        if self.detail:
            out["detail"] = self.detail
        return out


def parse_components(text: str | None) -> list[str]:
    if not text:
        return list(COMPONENT_ORDER)
    chosen = [c.strip() for c in text.split(",") if c.strip()]
    unknown = [c for c in chosen if c not in COMPONENT_ORDER]
    if unknown:
        raise InputError("--checks", unknown[0], f"unknown component (known: {', '.join(COMPONENT_ORDER)})")
    return chosen


def select(checks: str | None, skip: str | None, disruptive: bool = False) -> tuple[list[str], set[str]]:
    """``--checks``/``--skip`` (check ids and component names) -> (the components to run, in order; the check
    ids to report). The disruptive test (ib.bond_failover) is in only with ``disruptive``. Bad input -- an
    unknown id, a selection that leaves nothing, the failover test named without --disruptive, --disruptive
    without it -- is an InputError naming the flag, before anything runs."""
    from clustercert import catalogue

    chosen = catalogue.expand("--checks", checks)
    skipped = catalogue.expand("--skip", skip) or set()
    failover = {e.id for e in catalogue.CHECKS if e.disruptive}
    named = {x.strip() for x in (checks or "").split(",")} & failover
    if named and not disruptive:
        raise InputError("--checks", sorted(named)[0], "runs only with --disruptive (it takes each node's active "
                                                       "bond slave down for a moment)")
    ids = (chosen if chosen is not None else {e.id for e in catalogue.CHECKS}) - skipped
    if not disruptive:
        ids -= failover
    if not ids:
        raise InputError("--skip" if skip else "--checks", skip or checks, "leaves no check to run")
    if disruptive and not ids & failover:
        why = "is skipped (--skip)" if failover & skipped else f"is not in --checks {checks}: add bond"
        raise InputError("--disruptive", None, f"the disruptive test belongs to {', '.join(DISRUPTIVE)} and {why}")
    return catalogue.components_for(ids), ids


def host_context(h: HostView) -> HostContext:
    return HostContext(
        name=h.name,
        profile=h.profile,
        timeout_s=float(h.vars.clustercert_command_timeout_s),
        fabric_addresses=dict(h.vars.clustercert_fabric_addresses),
        sm_priority=h.vars.clustercert_sm_priority,
        bond_address=h.bond_address,
    )


def validate_nodes(inv: Inventory, comp_names: list[str], forks: int = 25, disruptive: bool = False,
                   selected: set[str] | None = None) -> dict[str, NodeResult]:
    """Collect and evaluate every node; with ``disruptive``, then run the components' disruptive tests
    (the bond failover test) node by node. ``selected``: report only these check ids (the components
    still run whole: the failover test needs ib.bond's verdict); the node verdicts follow them."""
    comps = components(comp_names)
    contexts = {name: host_context(h) for name, h in inv.hosts.items()}
    commands_for = {}
    for name, ctx in contexts.items():
        cmds: dict[str, tuple[str, float]] = {}
        for comp in comps:
            cmds.update(comp.commands(ctx))
        commands_for[name] = cmds
    evidence = collect_many({n: h.connection for n, h in inv.hosts.items()}, commands_for, forks=forks,
                            control_dir=paths.state_dir() / "cp")
    results: dict[str, NodeResult] = {}
    sysfs: dict[str, dict] = {}
    for name, ev in evidence.items():
        if not ev.reachable:
            results[name] = NodeResult(name, "unreachable", [], ev.error, ev)
            continue
        findings = run_evaluations(ev.results, contexts[name], comps)
        if "ib" in comp_names:
            rec, _ = parsed("sysfs-infiniband", ev.results.get("ib_sysfs"), ())
            if rec is not None:
                sysfs[name] = rec
        results[name] = NodeResult(name, "pass", findings, "", ev)
    if "ib" in comp_names and len(sysfs) > 1:
        extra = ib_checks.cluster_findings(sysfs, {n: inv.hosts[n].profile for n in sysfs})
        for name, fs in extra.items():
            results[name].findings.extend(fs)
    if disruptive and "bond" in comp_names:
        run_bond_failover(inv, contexts, results)
    for r in results.values():
        if selected is not None:
            r.findings = [f for f in r.findings if f.check in selected]
        if r.verdict != "unreachable":
            r.verdict = node_verdict(r.findings)
    return results


def run_bond_failover(inv: Inventory, contexts: dict[str, HostContext], results: dict[str, NodeResult]) -> None:
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
    evidence = collect_in_turn({n: inv.hosts[n].connection for n in todo}, todo, control_dir=paths.state_dir() / "cp")
    for name, ev in evidence.items():
        r = results[name]
        if r.evidence is not None:  # the node's checking time includes its failover test
            r.evidence.seconds += ev.seconds
        if not ev.reachable:
            bond = contexts[name].profile.ib.bond
            r.findings.extend(Finding(c, "error", bond.name if bond else "", "",
                                      f"the node did not answer for the failover test: {ev.error}") for c in comp.check_ids)
            continue
        r.findings.extend(run_evaluations(ev.results, contexts[name], [comp]))
        if r.evidence is not None:
            r.evidence.results.update(ev.results)


def summary_table(results: dict[str, NodeResult], comp_names: list[str]) -> list[dict]:
    """Rows of node x component: worst status and counts, for the terminal table."""
    rank = {"fail": 3, "error": 2, "pass": 1, "skip": 0}
    prefix = {c: components([c])[0].check_ids + (disruptive_component(c).check_ids if c in DISRUPTIVE else ())
              for c in comp_names}
    rows = []
    for name, r in sorted(results.items()):
        row = {"node": name, "verdict": r.verdict}
        for comp in comp_names:
            fs = [f for f in r.findings if f.check in prefix[comp]]
            if r.verdict == "unreachable":
                row[comp] = "unreachable"
            elif not fs:
                row[comp] = "-"
            else:
                worst = max(fs, key=lambda f: rank[f.status]).status
                n_bad = sum(1 for f in fs if f.status == worst)
                row[comp] = worst if worst in ("pass", "skip") else f"{worst} ({n_bad})"
        rows.append(row)
    return rows


def document(results: dict[str, NodeResult], run_id: str, started: float, finished: float, verdict: str,
             inventory: str, comp_names: list[str], ids: set[str]) -> dict:
    """The `validate --format json` document (and --out's validate.json): every finding of every node."""
    from clustercert import documents

    return documents.envelope("validate", run_id, started, finished) | {
        "inventory": inventory,
        "verdict": verdict,
        "components": comp_names,
        "checks": sorted(ids),
        "nodes": {n: r.to_json() for n, r in sorted(results.items())},
    }


def write_out_dir(out: Path, results: dict[str, NodeResult], doc: dict | None = None) -> None:
    import json

    out.mkdir(parents=True, exist_ok=True)
    doc = doc if doc is not None else {"nodes": {n: r.to_json() for n, r in sorted(results.items())}}
    (out / "validate.json").write_text(json.dumps(doc, indent=2))
    ev_dir = out / "evidence"
    ev_dir.mkdir(exist_ok=True)
    for n, r in results.items():
        if r.evidence is not None:
            (ev_dir / f"{n}.json").write_text(json.dumps(r.evidence.to_json(), indent=1))


def cluster_name(inv: Inventory) -> str:
    """The inventory's clustercert_cluster_name, else its file or directory name (as certify names it)."""
    return next((h.vars.clustercert_cluster_name for h in inv.hosts.values() if h.vars.clustercert_cluster_name),
                None) or inv.source.name


def write_junit(path: str, results: dict[str, NodeResult], cluster: str, started: float, wall_s: float) -> None:
    """--junit: the run's findings as JUnit XML (report.junit.render_junit_validation), each node's checks
    charged the seconds its collection took (NodeEvidence.seconds). Written atomically: a temporary file
    beside ``path`` (mode 0600, as the run's other files), then renamed over it."""
    import os
    import tempfile

    from clustercert import documents
    from clustercert.report.junit import render_junit_validation

    xml = render_junit_validation(dict(sorted(results.items())), cluster=cluster, timestamp=documents.iso(started),
                                  wall_s=wall_s)
    target = Path(path).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(xml)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_prom(path: str, doc: dict, started: float, finished: float) -> None:
    """--prom: per node and check the status, per node the verdict, the run's duration, when it finished and
    when a validate of this inventory last passed."""
    from clustercert import prom

    ok = finished if doc["verdict"] == "pass" else prom.last_success("validate", doc["inventory"])
    prom.write_atomic(path, prom.render("validate", nodes=doc["nodes"], duration_s=finished - started,
                                        finished=finished, last_success=ok))


def run(inventory: str, *, limit: str | None = None, checks: str | None = None, skip: str | None = None,
        forks: int | None = None, fmt: str = "table", out: str | None = None, disruptive: bool = False,
        prom: str | None = None, junit: str | None = None) -> int:
    """The `clustercert validate` verb: validate input, collect, evaluate, record, report. ``disruptive``
    adds the bond failover test (opt-in: it takes each node's active bond slave down for a moment);
    ``junit``: also write the findings as JUnit XML there."""
    import json
    import time

    from clustercert.engine import new_run_id
    from clustercert.inventory import load_inventory
    from clustercert.report_text import print_validate
    from clustercert.store import Store

    comp_names, ids = select(checks, skip, disruptive)  # bad input first: nothing runs
    inv = load_inventory(inventory, limit)
    store = Store()
    run_id = new_run_id()
    started = time.time()
    store.start_run(run_id, "validate", str(inv.source), {"components": comp_names, "checks": sorted(ids),
                                                           "limit": limit, "disruptive": disruptive})
    t0 = time.monotonic()
    results = validate_nodes(inv, comp_names, forks or 25, disruptive, ids)
    wall_s = time.monotonic() - t0
    verdict = "pass" if all(r.verdict == "pass" for r in results.values()) else "fail"
    store.finish_run(run_id, verdict, {n: r.to_json() | {"detail": r.detail} for n, r in results.items()})
    finished = time.time()
    doc = document(results, run_id, started, finished, verdict, str(inv.source), comp_names, ids)
    if out:
        write_out_dir(Path(out), results, doc)
    if prom:
        write_prom(prom, doc, started, finished)
    if junit:
        write_junit(junit, results, cluster_name(inv), started, wall_s)
    if fmt == "json":
        print(json.dumps(doc, indent=2))
    else:
        print_validate(summary_table(results, comp_names), comp_names, results, run_id)
    return 0 if verdict == "pass" else 1
