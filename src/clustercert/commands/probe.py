"""`clustercert probe`: the bandwidth/latency probes alone, on the pair rounds.

Glue only: the probes run through clustercert.probes.run with the threshold judge, as in certify;
this runs them without the validators, prints every value against its threshold, records the run
and exits 0 when every probe passed, 1 otherwise.
"""

from __future__ import annotations

from clustercert.checks import cluster_verdict
from clustercert.commands import ON_NODES
from clustercert.commands.context import Run
from clustercert.commands.output import emit, exit_code
from clustercert.errors import InputError
from clustercert.probes import run as probe_run
from clustercert.probes.catalog import PROBE_NAMES
from clustercert.probes.judge import ThresholdJudge
from clustercert.probes.plan import ProbeSettings
from clustercert.record.results import cluster_record, cluster_verdict_with, probe_nodes
from clustercert.report import documents
from clustercert.report.terminal import print_probe

NEEDS = ON_NODES


def parse_probe_list(text: str | None) -> frozenset[str] | None:
    """``--probes ib_write_bw,iperf3`` -> the probe names; None for all. Unknown names are bad input."""
    if text is None:
        return None
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise InputError("--probes", text, f"no probe named (choose from {', '.join(PROBE_NAMES)})")
    unknown = [x for x in names if x not in PROBE_NAMES]
    if unknown:
        raise InputError("--probes", unknown[0], f"unknown probe (choose from {', '.join(PROBE_NAMES)})")
    return frozenset(names)


def run(args) -> int:
    selected = parse_probe_list(args.probes)  # bad input first: nothing runs
    ctx = Run(args, "probe")
    inv = ctx.inv
    started = documents.now()
    names = sorted(inv.hosts)
    with ctx.locked(), ctx.opened() as io:
        run_id = ctx.start({"limit": args.limit, "probes": sorted(selected or []),
                            "all_pairs": args.all_pairs, "nccl_cluster": args.nccl_cluster})
        rails = probe_run.discover_rails(inv, names, ctx.forks, io=io)  # the rails' names first
        cfg = ProbeSettings(args.probe_seconds, args.probe_timeout, selected, rails=rails,
                            per_fabric=args.nccl_cluster == "per-fabric")
        with ctx.progress() as progress:
            out = probe_run.run(inv, names, cfg, ThresholdJudge.for_inventory(inv), ctx.forks, args.all_pairs,
                                io=io, progress=progress)
        nodes = probe_nodes(names, out)
        links = [m.link_record() for m in out.pairs]
        clustered = [cluster_record(m) for m in out.cluster]  # probe.nccl_cluster
        verdict = cluster_verdict_with(cluster_verdict(nodes, links), clustered)
        ctx.finish(verdict, nodes, links)
    doc = documents.probe_document(out, run_id, started, ctx.source, selected, verdict, nodes, links)
    doc["cluster_findings"] = clustered
    emit(args, doc, lambda: print_probe(doc))
    return exit_code(verdict == "pass")
