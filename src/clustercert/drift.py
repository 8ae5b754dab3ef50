"""drift: what changed since the baseline certificate — configuration, state and performance.

1. configuration: the bootstrap playbook in --check --diff; every task that would change is an item.
2. state: the validators; new failures since the baseline, and changed versions.
3. performance: probes against the baseline's values; a drop beyond the profile's tolerance.
A state failure that configuration drift explains (the bootstrap would put it back) is reported
once, as the configuration item that causes it.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

from clustercert import engine, paths
from clustercert.errors import InputError

# checks whose state is put back by the bootstrap playbook: a failure here with configuration drift on
# the same node is that drift's symptom, not a separate item
CONFIG_MANAGED = {
    "packages.pinned", "nccl.config", "nccl.version", "driver.version", "ofed.version", "cuda.version",
    "container.runtime", "container.cdi", "tuning.memlock", "tuning.sysctl", "tuning.hugepages",
    "tuning.governor", "ib.bond", "rdma.peermem", "gpu.persistence", "gpu.fabricmanager", "driver.module_loaded",
}
VERSION_CHECKS = {"driver.version", "nccl.version", "ofed.version", "cuda.version", "ib.firmware"}


@dataclass
class Item:
    node: str
    kind: str  # configuration | state | performance
    check: str | None = None
    task: str | None = None
    before: str = ""
    after: str = ""
    detail: str = ""
    role: str = ""
    explains: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if v not in (None, [], "") or k in ("before", "after", "detail")}
        d.pop("role", None)
        return d


def _diff_text(diff) -> tuple[str, str, str]:
    """(before, after, unified-ish detail) from an Ansible diff."""
    parts = diff if isinstance(diff, list) else [diff] if diff else []
    before, after, detail = [], [], []
    for d in parts:
        if not isinstance(d, dict):
            continue
        if "prepared" in d:
            detail.append(str(d["prepared"]))
        b, a = d.get("before"), d.get("after")
        if b is not None or a is not None:
            before.append(str(b if b is not None else ""))
            after.append(str(a if a is not None else ""))
            hdr = d.get("after_header") or d.get("before_header") or ""
            if hdr:
                detail.append(f"--- {hdr}")
    return "\n".join(before)[:2000], "\n".join(after)[:2000], "\n".join(detail)[:2000]


def configuration_items(result: engine.RunResult) -> list[Item]:
    items = []
    for c in result.changes:
        before, after, detail = _diff_text(c.get("diff"))
        items.append(Item(c["host"], "configuration", task=c["task"], before=before, after=after,
                          detail=detail or f"{c.get('role') or 'play'}: would change", role=c.get("role") or ""))
    for f in result.failures:
        items.append(Item(f["host"], "configuration", task=f["task"], detail=f"check mode {f['status']}: {f['msg']}"))
    return items


def state_items(current: dict, baseline_findings: list[dict]) -> list[Item]:
    base: dict[tuple[str, str], list[dict]] = {}
    for f in baseline_findings:
        base.setdefault((f["node"], f["check_id"]), []).append(f)
    items = []
    for node, r in sorted(current.items()):
        if r.verdict == "unreachable":
            items.append(Item(node, "state", check="node.reachable", before="reachable", after="unreachable", detail=r.detail))
            continue
        by_check: dict[str, list] = {}
        for f in r.findings:
            by_check.setdefault(f.check, []).append(f)
        for check, fs in sorted(by_check.items()):
            bad = [f for f in fs if f.status in ("fail", "error")]
            before = base.get((node, check), [])
            was_bad = any(b["status"] in ("fail", "error") for b in before)
            if bad and not was_bad:
                f = bad[0]
                items.append(Item(node, "state", check=check, before=(before[0]["observed"] if before else "not checked"),
                                  after=f"{f.status}: {f.observed}",
                                  detail="; ".join(f"{x.subject}: expected {x.expected}, observed {x.observed}" for x in bad)[:1000]))
            elif check in VERSION_CHECKS and not bad and before:
                old = {b["subject"]: b["observed"] for b in before}
                for f in fs:
                    if f.subject in old and old[f.subject] != f.observed:
                        items.append(Item(node, "state", check=check, before=old[f.subject], after=f.observed,
                                          detail=f"{f.subject}: version changed"))
    return items


def fold_symptoms(items: list[Item]) -> list[Item]:
    config_nodes = {i.node for i in items if i.kind == "configuration"}
    out = []
    for i in items:
        if i.kind == "state" and i.node in config_nodes and i.check in CONFIG_MANAGED:
            cfg = next(x for x in items if x.kind == "configuration" and x.node == i.node)
            cfg.explains.append(i.check)
            continue
        out.append(i)
    return out


def performance_items(inv, nodes: list[str], baseline_links: list[dict], tolerance_of, seconds: int,
                      forks: int = 25) -> tuple[list[Item], list]:
    """The pair probes through the same round loop certify uses (clustercert.probes.run), judged against
    the baseline: a value that fell more than the profile's tolerance below the baseline median of the
    same probe and fabric (a latency: rose more than it) fails its channel, and localisation tells the
    node (on which fabric) from the link."""
    from clustercert.probes import run as probe_run
    from clustercert.probes.judge import BaselineJudge
    from clustercert.probes.plan import ProbeSettings

    judge = BaselineJudge(baseline_links, tolerance_of)
    outcome = probe_run.run(inv, nodes, ProbeSettings(seconds, 60, node_probes=False), judge, forks)
    notes: dict[frozenset, list[str]] = {}
    for m in outcome.pairs:
        note = judge.note(m)
        if note:
            notes.setdefault(frozenset((m.a, m.b)), []).append(note)
    items = []
    for loc in outcome.localisation:
        if "<->" in loc.subject:
            a, b = loc.subject.split("<->")
            ns = notes.get(frozenset((a, b)), [])
            items.append(Item(loc.subject, "performance", check="probe.link", before="baseline", after="; ".join(ns[:3]),
                              detail=f"{loc.kind}: {loc.reason}"))
        else:
            mine = [n for key, ns in notes.items() if loc.subject in key for n in ns
                    if loc.fabric is None or f"fabric {loc.fabric}" in n]
            items.append(Item(loc.subject, "performance", check="probe.pairs", before="baseline",
                              after="; ".join(mine[:3]), detail=f"{loc.kind}: {loc.reason}"))
    return items, outcome.pairs


def _resolve_baseline(store, inv, baseline: str) -> dict:
    if baseline == "latest-certified":
        run = store.latest_certified(str(inv.source))
        if run is None:
            raise InputError("--baseline", "latest-certified",
                             f"no certified run recorded for {inv.source}: run `clustercert certify` first")
        return run
    run = store.get_run(baseline)
    if run is None:
        raise InputError("--baseline", baseline, "no such run in the store (see `clustercert report runs`)")
    return run


def run(inventory: str, *, limit: str | None = None, baseline: str = "latest-certified", probes: str = "none",
        fix: bool = False, prom_path: str | None = None, fmt: str = "table", forks: int | None = None) -> int:
    from clustercert import validate
    from clustercert.bootstrap import PLAYBOOK, strategy_env
    from clustercert.inventory import load_inventory
    from clustercert.progress import PlaybookProgress
    from clustercert.report_text import print_drift
    from clustercert.runlock import inventory_lock
    from clustercert.store import Store, default_path

    inv = load_inventory(inventory, limit)
    if not default_path().exists():
        raise InputError(str(default_path()), None, "no store yet: run `clustercert certify` first to set a baseline")
    store = Store()
    base = _resolve_baseline(store, inv, baseline)
    with inventory_lock(str(inv.source), "drift"):
        run_id = engine.new_run_id()
        started = time.time()
        perf_links: list = []
        store.start_run(run_id, "drift", str(inv.source), {"baseline": base["id"], "probes": probes})
        with PlaybookProgress("drift: configuration (check mode)", enabled=fmt != "json") as progress:
            cfg_result = engine.run_playbook(paths.playbooks_dir() / PLAYBOOK, inv.source, limit=limit, check=True,
                                             diff=True, forks=forks, progress=progress, envvars=strategy_env())
        items = configuration_items(cfg_result)
        current = validate.validate_nodes(inv, list(validate.COMPONENT_ORDER), forks or 25)
        items += state_items(current, store.findings(base["id"]))
        items = fold_symptoms(items)
        if probes != "none":
            reachable = [n for n, r in sorted(current.items()) if r.verdict != "unreachable"]
            perf, measured = performance_items(inv, reachable, store.links(base["id"]),
                                               lambda n: inv.hosts[n].profile.drift_tolerance,
                                               2 if probes == "quick" else 5, forks or 25)
            items += perf
            perf_links = [m.link_record() for m in measured]
        fixed = None
        if fix:
            fixed = _fix(inv, items, validate, forks)
        nodes = {n: r.to_json() | {"detail": r.detail} for n, r in current.items()}
        verdict = "drift" if items else "clean"
        store.finish_run(run_id, verdict, nodes)
        store.set_meta(run_id, {"baseline": base["id"], "probes": probes, "items": [i.to_json() for i in items],
                                "fixed": fixed})
        finished = time.time()
        doc = document(items, base["id"], run_id, started, finished, str(inv.source), fixed)
        if prom_path:
            write_prom(prom_path, doc, inv, current, store.links(base["id"]), perf_links, started, finished)
    if fmt == "json":
        print(json.dumps(doc, indent=2, default=str))
    else:
        print_drift(doc, run_id)
    return 1 if items else 0


def document(items: list[Item], baseline: str, run_id: str, started: float, finished: float, inventory: str,
             fixed: dict | None = None) -> dict:
    """The `drift --format json` document."""
    from clustercert import documents

    doc = documents.envelope("drift", run_id, started, finished) | {
        "inventory": inventory, "baseline": baseline, "verdict": "drift" if items else "clean",
        "items": [i.to_json() for i in items]}
    if fixed is not None:
        doc["fixed"] = fixed
    return doc


def write_prom(path: str, doc: dict, inv, current: dict, baseline_links: list[dict], links: list[dict],
               started: float, finished: float) -> None:
    """--prom: drift items per node and kind, per node and check the status, per node the verdict, per link
    (--probes) the value and the bound the baseline sets (its median less the profile's drift tolerance; a
    latency: plus), the run's duration, when it finished and when a drift of this inventory was last clean."""
    from clustercert import prom
    from clustercert.probes.judge import BaselineJudge

    counts: dict[tuple[str, str], int] = {(n, k): 0 for n in inv.hosts for k in ("configuration", "state",
                                                                                  "performance")}
    for i in doc["items"]:
        counts[(i["node"], i["kind"])] = counts.get((i["node"], i["kind"]), 0) + 1
    judge = BaselineJudge(baseline_links, lambda n: inv.hosts[n].profile.drift_tolerance)
    bounds: dict[str, tuple[str, float]] = {}
    keyed = []
    for lk in links:
        ref = judge.median.get((lk["probe"], lk["fabric"]))
        if ref is None:
            keyed.append(lk)
            continue
        tol = inv.hosts[lk["a"]].profile.drift_tolerance
        key = f"{lk['probe']}|{lk['fabric']}|{lk['a']}"
        ceiling = lk["probe"].endswith("_lat")
        bounds[key] = ("ceiling", ref * (1 + tol)) if ceiling else ("floor", ref * (1 - tol))
        keyed.append(lk | {"threshold": key})
    nodes = {n: r.to_json() | {"verdict": r.verdict} for n, r in current.items()}
    ok = finished if doc["verdict"] == "clean" else prom.last_success("drift", doc["inventory"], ("clean",))
    prom.write_atomic(path, prom.render("drift", nodes=nodes, links=keyed, bounds=bounds, duration_s=finished - started,
                                        finished=finished, last_success=ok, drift_items=counts))


def _fix(inv, items: list[Item], validate, forks) -> dict:
    """Bootstrap only the drifted nodes and the roles (tags) that drifted, then re-validate them."""
    from clustercert.bootstrap import PLAYBOOK, strategy_env
    from clustercert.inventory import load_inventory

    cfg = [i for i in items if i.kind == "configuration"]
    nodes = sorted({i.node for i in cfg})
    if not nodes:
        return {"nodes": [], "tags": [], "ok": True, "revalidated": {}}
    roles = {i.role for i in cfg}
    tags = sorted(roles) if "" not in roles else []  # a change outside any role: run everything
    result = engine.run_playbook(paths.playbooks_dir() / PLAYBOOK, inv.source, limit=",".join(nodes),
                                 tags=",".join(tags) or None, forks=forks, envvars=strategy_env())
    sub = load_inventory(str(inv.source), ",".join(nodes))
    again = validate.validate_nodes(sub, list(validate.COMPONENT_ORDER), forks or 25)
    return {"nodes": nodes, "tags": tags, "ok": result.ok, "run": result.run_id,
            "revalidated": {n: r.verdict for n, r in again.items()}}
