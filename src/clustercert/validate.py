"""validate: collect evidence from every node (one connection each), evaluate it, record it.

Glue between collect (remote I/O), checks (pure evaluation) and the store; no check logic here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clustercert import paths
from clustercert.checks import (
    COMPONENT_ORDER,
    Finding,
    HostContext,
    components,
    node_verdict,
    parsed,
    run_evaluations,
)
from clustercert.checks import ib as ib_checks
from clustercert.collect import NodeEvidence, collect_many
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


def host_context(h: HostView) -> HostContext:
    return HostContext(
        name=h.name,
        profile=h.profile,
        timeout_s=float(h.vars.clustercert_command_timeout_s),
        fabric_addresses=dict(h.vars.clustercert_fabric_addresses),
        sm_priority=h.vars.clustercert_sm_priority,
    )


def validate_nodes(inv: Inventory, comp_names: list[str], forks: int = 25) -> dict[str, NodeResult]:
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
    for r in results.values():
        if r.verdict != "unreachable":
            r.verdict = node_verdict(r.findings)
    return results


def summary_table(results: dict[str, NodeResult], comp_names: list[str]) -> list[dict]:
    """Rows of node x component: worst status and counts, for the terminal table."""
    rank = {"fail": 3, "error": 2, "pass": 1, "skip": 0}
    prefix = {c: components([c])[0].check_ids for c in comp_names}
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


def write_out_dir(out: Path, results: dict[str, NodeResult]) -> None:
    import json

    out.mkdir(parents=True, exist_ok=True)
    (out / "validate.json").write_text(json.dumps({"nodes": {n: r.to_json() for n, r in sorted(results.items())}}, indent=2))
    ev_dir = out / "evidence"
    ev_dir.mkdir(exist_ok=True)
    for n, r in results.items():
        if r.evidence is not None:
            (ev_dir / f"{n}.json").write_text(json.dumps(r.evidence.to_json(), indent=1))


def run(inventory: str, *, limit: str | None = None, checks: str | None = None, forks: int | None = None,
        fmt: str = "table", out: str | None = None) -> int:
    """The `clustercert validate` verb: validate input, collect, evaluate, record, report."""
    import json

    from clustercert.engine import new_run_id
    from clustercert.inventory import load_inventory
    from clustercert.report_text import print_validate
    from clustercert.store import Store

    comp_names = parse_components(checks)
    inv = load_inventory(inventory, limit)
    store = Store()
    run_id = new_run_id()
    store.start_run(run_id, "validate", str(inv.source), {"components": comp_names, "limit": limit})
    results = validate_nodes(inv, comp_names, forks or 25)
    verdict = "pass" if all(r.verdict == "pass" for r in results.values()) else "fail"
    store.finish_run(run_id, verdict, {n: r.to_json() | {"detail": r.detail} for n, r in results.items()})
    if out:
        write_out_dir(Path(out), results)
    if fmt == "json":
        print(json.dumps({"nodes": {n: r.to_json() for n, r in sorted(results.items())}}, indent=2))
    else:
        print_validate(summary_table(results, comp_names), comp_names, results, run_id)
    return 0 if verdict == "pass" else 1
