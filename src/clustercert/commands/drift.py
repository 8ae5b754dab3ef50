"""`clustercert drift`: what changed since the baseline run — configuration, state and performance.

Glue only: the bootstrap playbook in check mode (clustercert.collect.engine), the validators
(clustercert.checks.run), the pair probes against the baseline (clustercert.probes.run with the baseline
judge); clustercert.checks.drift turns what they found into drift items. ``--fix`` bootstraps the drifted
nodes (only the roles that drifted) and validates them again.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from clustercert import paths
from clustercert.checks import COMPONENT_ORDER
from clustercert.checks import drift as drift_checks
from clustercert.checks import run as check_run
from clustercert.checks.hardware import nvlink_baseline
from clustercert.collect import DEFAULT_FORKS, backend, engine
from clustercert.commands import ON_NODES
from clustercert.commands.context import Run, rails_found, reachable
from clustercert.commands.output import emit, exit_code
from clustercert.errors import InputError
from clustercert.model.inventory import load_inventory
from clustercert.probes import run as probe_run
from clustercert.probes.judge import BaselineJudge
from clustercert.probes.plan import ProbeSettings
from clustercert.record.results import node_hardware
from clustercert.record.store import Store, default_path
from clustercert.report import prom
from clustercert.report.documents import drift_document
from clustercert.report.progress import PlaybookProgress
from clustercert.report.terminal import print_drift

if TYPE_CHECKING:
    from clustercert.collect.backend import Backend

NEEDS = ON_NODES

# --probes quick|full: each pair probe's seconds (as cmdoptions.DRIFT_PROBES's help says), and the seconds
# past them before a probe is killed and an error (probe's and certify's --probe-timeout default)
PROBE_SECONDS = {"quick": 2, "full": 5}
PROBE_TIMEOUT_S = 60


def run(args) -> int:
    ctx = Run(args, "drift")
    inv = ctx.inv
    if not default_path().exists():
        raise InputError(
            str(default_path()), None, "no store yet: run `clustercert certify` first to set a baseline"
        )
    base = baseline_run(ctx.store, inv, args.baseline)
    forks = ctx.forks  # every stage of drift, the playbook's check run included, at --forks
    with ctx.locked():
        started = time.time()
        perf_links: list = []
        run_id = ctx.start({"baseline": base["id"], "probes": args.probes, "backend": ctx.backend_name})
        with PlaybookProgress("drift: configuration (check mode)", enabled=not ctx.json) as progress:
            cfg_result = engine.run_playbook(
                paths.playbooks_dir() / engine.BOOTSTRAP_PLAYBOOK,
                inv.source,
                limit=args.limit,
                check=True,
                diff=True,
                forks=forks,
                progress=progress,
                envvars=engine.strategy_env(),
            )
        items = drift_checks.configuration_items(cfg_result)
        base_findings = ctx.store.findings(base["id"])
        with ctx.opened() as io:
            current = check_run.validate_nodes(inv, list(COMPONENT_ORDER), forks,
                                               nvlink_baseline=nvlink_baseline(base_findings), io=io)
            if args.probes != "none":
                perf, measured = performance(inv, reachable(current), ctx.store.links(base["id"]),
                                             lambda n: inv.hosts[n].profile.drift_tolerance,
                                             PROBE_SECONDS[args.probes], forks, io=io,
                                             rails=rails_found(current))
                perf_links = [m.link_record() for m in measured]
        items += drift_checks.state_items(current, base_findings)
        items = drift_checks.fold_symptoms(items)
        hardware = {n: node_hardware(r, inv.hosts[n].profile.ib.link_layer) for n, r in current.items()}
        items += drift_checks.hardware_items(hardware, ctx.store.hardware(base["id"]))
        if args.probes != "none":
            items += perf
        fixed = fix(inv, items, forks, ctx.backend_name) if args.fix else None
        verdict = "drift" if items else "clean"
        ctx.finish(verdict, {n: r.to_json() | {"detail": r.detail} for n, r in current.items()})
        ctx.store.set_meta(run_id, {"baseline": base["id"], "probes": args.probes,
                                    "items": [i.to_json() for i in items], "fixed": fixed})
        finished = time.time()
        doc = drift_document(items, base["id"], run_id, started, finished, ctx.source, fixed)
        if args.prom:
            prom.write_drift(args.prom, doc, inv, current, ctx.store.links(base["id"]), perf_links, started,
                             finished)
    emit(args, doc, lambda: print_drift(doc, run_id))
    return exit_code(not items)


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
                forks: int = DEFAULT_FORKS, *, io: Backend,
                rails: dict | None = None) -> tuple[list[drift_checks.Item], list]:
    """``--probes quick|full``: the pair probes through the same round loop certify uses, judged against the
    baseline (clustercert.probes.judge.BaselineJudge); (their drift items, the measurements). ``rails``: each
    node's compute rails as the validators found them (clustercert.checks.rails)."""
    judge = BaselineJudge(baseline_links, tolerance_of)
    settings = ProbeSettings(seconds, PROBE_TIMEOUT_S, node_probes=False, training=False, rails=rails)
    outcome = probe_run.run(inv, nodes, settings, judge, forks, io=io)
    return drift_checks.performance_items(outcome, judge), outcome.pairs


def fix(inv, items: list[drift_checks.Item], forks: int = DEFAULT_FORKS, through: str = "ssh") -> dict:
    """``--fix``: bootstrap only the drifted nodes and the roles (tags) that drifted, then re-validate them
    (over ``through``, the run's --backend)."""
    nodes, tags = drift_checks.fix_scope(items)
    if not nodes:
        return {"nodes": [], "tags": [], "ok": True, "revalidated": {}}
    result = engine.run_playbook(
        paths.playbooks_dir() / engine.BOOTSTRAP_PLAYBOOK,
        inv.source,
        limit=",".join(nodes),
        tags=",".join(tags) or None,
        forks=forks,
        envvars=engine.strategy_env(),
    )
    sub = load_inventory(str(inv.source), ",".join(nodes))
    with backend.opened(sub, through) as io:
        again = check_run.validate_nodes(sub, list(COMPONENT_ORDER), forks, io=io)
    return {"nodes": nodes, "tags": tags, "ok": result.ok, "run": result.run_id,
            "revalidated": {n: r.verdict for n, r in again.items()}}
