"""`clustercert validate`: collect every node's evidence (one connection each), evaluate it, record it.

Glue only: the check selection is report.catalogue's, the run checks.run's (collect + the pure
evaluators), the record the store's; then the document, ``--out``, ``--prom``, ``--junit`` and the table.
"""

from __future__ import annotations

import time
from pathlib import Path

from clustercert.checks import run as check_run
from clustercert.commands import ON_NODES
from clustercert.commands.context import Run
from clustercert.commands.output import emit, exit_code
from clustercert.report import catalogue, prom
from clustercert.report.documents import validate_document
from clustercert.report.files import write_validate_junit, write_validate_out
from clustercert.report.terminal import print_validate, summary_table

NEEDS = ON_NODES


def run(args) -> int:
    """``--disruptive`` adds the bond failover test (opt-in: it takes each node's active bond slave down for
    a moment)."""
    # bad input first: nothing runs
    comp_names, ids = catalogue.select(args.checks, args.skip, args.disruptive)
    ctx = Run(args, "validate")
    inv = ctx.inv
    started = time.time()
    run_id = ctx.start({"components": comp_names, "checks": sorted(ids), "limit": args.limit,
                        "disruptive": args.disruptive, "backend": ctx.backend_name})
    t0 = time.monotonic()
    with ctx.progress() as progress, ctx.opened() as io:
        results = check_run.validate_nodes(inv, comp_names, ctx.forks, args.disruptive, ids, io=io,
                                           progress=progress)
    wall_s = time.monotonic() - t0
    verdict = "pass" if all(r.verdict == "pass" for r in results.values()) else "fail"
    ctx.finish(verdict, {n: r.to_json() | {"detail": r.detail} for n, r in results.items()})
    finished = time.time()
    doc = validate_document(results, run_id, started, finished, verdict, ctx.source, comp_names, ids)
    if args.out:
        write_validate_out(Path(args.out), results, doc)
    if args.prom:
        prom.write_validate(args.prom, doc, started, finished)
    if args.junit:
        write_validate_junit(args.junit, results, inv.cluster_name, started, wall_s)
    emit(args, doc, lambda: print_validate(summary_table(results, comp_names), comp_names, results, run_id))
    return exit_code(verdict == "pass")
