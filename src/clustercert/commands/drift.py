"""`clustercert drift`: what changed since the baseline run — configuration, state and performance.

Glue only: the bootstrap playbook in check mode (clustercert.collect.engine), the validators
(clustercert.checks.run), the pair probes against the baseline (clustercert.probes.run with the baseline
judge); clustercert.checks.drift turns what they found into drift items. ``--fix`` bootstraps the drifted
nodes (only the roles that drifted) and validates them again.
"""

from __future__ import annotations

import json
import time

from clustercert import paths
from clustercert.checks import COMPONENT_ORDER
from clustercert.checks import run as check_run
from clustercert.checks.drift import (
    Item,
    configuration_items,
    fix_scope,
    fold_symptoms,
    hardware_items,
    performance_items,
    state_items,
)
from clustercert.checks.hardware import nvlink_baseline
from clustercert.collect import backend, engine, ssh
from clustercert.commands import ON_NODES
from clustercert.commands.common import inventory
from clustercert.errors import InputError
from clustercert.model.inventory import load_inventory
from clustercert.probes import run as probe_run
from clustercert.probes.judge import BaselineJudge
from clustercert.probes.plan import ProbeSettings
from clustercert.record.results import node_hardware
from clustercert.record.runlock import inventory_lock
from clustercert.record.store import Store, default_path
from clustercert.report import prom
from clustercert.report.documents import drift_document
from clustercert.report.progress import PlaybookProgress
from clustercert.report.terminal import print_drift

NEEDS = ON_NODES


def run(args) -> int:
    inv = inventory(args)
    backend.check(inv, args.backend, getattr(args, "reservation", None))
    if not default_path().exists():
        raise InputError(str(default_path()), None, "no store yet: run `clustercert certify` first to set a baseline")
    store = Store()
    base = baseline_run(store, inv, args.baseline)
    forks = args.forks or 25  # every stage of drift, the playbook's check run included, at --forks
    with inventory_lock(str(inv.source), "drift"):
        run_id = paths.new_run_id()
        started = time.time()
        perf_links: list = []
        store.start_run(run_id, "drift", str(inv.source), {"baseline": base["id"], "probes": args.probes,
                                                             "backend": args.backend})
        with PlaybookProgress("drift: configuration (check mode)", enabled=args.format != "json") as progress:
            cfg_result = engine.run_playbook(paths.playbooks_dir() / engine.BOOTSTRAP_PLAYBOOK, inv.source,
                                             limit=args.limit, check=True, diff=True, forks=forks, progress=progress,
                                             envvars=engine.strategy_env())
        items = configuration_items(cfg_result)
        base_findings = store.findings(base["id"])
        with backend.opened(inv, args.backend, getattr(args, "reservation", None)) as io:
            current = check_run.validate_nodes(inv, list(COMPONENT_ORDER), forks,
                                               nvlink_baseline=nvlink_baseline(base_findings), io=io)
            if args.probes != "none":
                reachable = [n for n, r in sorted(current.items()) if r.verdict != "unreachable"]
                perf, measured = performance(inv, reachable, store.links(base["id"]),
                                             lambda n: inv.hosts[n].profile.drift_tolerance,
                                             2 if args.probes == "quick" else 5, forks, io,
                                             {n: r.rails for n, r in current.items() if r.rails is not None})
                perf_links = [m.link_record() for m in measured]
        items += state_items(current, base_findings)
        items = fold_symptoms(items)
        items += hardware_items({n: node_hardware(r, inv.hosts[n].profile.ib.link_layer) for n, r in current.items()},
                                store.hardware(base["id"]))
        if args.probes != "none":
            items += perf
        fixed = fix(inv, items, forks, args.backend) if args.fix else None
        nodes = {n: r.to_json() | {"detail": r.detail} for n, r in current.items()}
        verdict = "drift" if items else "clean"
        store.finish_run(run_id, verdict, nodes)
        store.set_meta(run_id, {"baseline": base["id"], "probes": args.probes, "items": [i.to_json() for i in items],
                                "fixed": fixed})
        finished = time.time()
        doc = drift_document(items, base["id"], run_id, started, finished, str(inv.source), fixed)
        if args.prom:
            prom.write_drift(args.prom, doc, inv, current, store.links(base["id"]), perf_links, started, finished)
    if args.format == "json":
        print(json.dumps(doc, indent=2, default=str))
    else:
        print_drift(doc, run_id)
    return 1 if items else 0


def baseline_run(store: Store, inv, baseline: str) -> dict:
    """``--baseline``: a run id from the store, or the latest certified run of this inventory."""
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


def performance(inv, nodes: list[str], baseline_links: list[dict], tolerance_of, seconds: int,
                forks: int = 25, io=ssh, rails: dict | None = None) -> tuple[list[Item], list]:
    """``--probes quick|full``: the pair probes through the same round loop certify uses, judged against the
    baseline (clustercert.probes.judge.BaselineJudge); (their drift items, the measurements). ``rails``: each
    node's compute rails as the validators found them (clustercert.checks.rails)."""
    judge = BaselineJudge(baseline_links, tolerance_of)
    outcome = probe_run.run(inv, nodes, ProbeSettings(seconds, 60, node_probes=False, training=False, rails=rails),
                            judge, forks, io=io)
    return performance_items(outcome, judge), outcome.pairs


def fix(inv, items: list[Item], forks: int = 25, through: str = "ssh") -> dict:
    """``--fix``: bootstrap only the drifted nodes and the roles (tags) that drifted, then re-validate them (over
    ``through``, the run's --backend)."""
    nodes, tags = fix_scope(items)
    if not nodes:
        return {"nodes": [], "tags": [], "ok": True, "revalidated": {}}
    result = engine.run_playbook(paths.playbooks_dir() / engine.BOOTSTRAP_PLAYBOOK, inv.source, limit=",".join(nodes),
                                 tags=",".join(tags) or None, forks=forks, envvars=engine.strategy_env())
    sub = load_inventory(str(inv.source), ",".join(nodes))
    with backend.opened(sub, through) as io:
        again = check_run.validate_nodes(sub, list(COMPONENT_ORDER), forks, io=io)
    return {"nodes": nodes, "tags": tags, "ok": result.ok, "run": result.run_id,
            "revalidated": {n: r.verdict for n, r in again.items()}}
