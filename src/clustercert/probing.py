"""`clustercert probe`: the bandwidth/latency probes alone, on the pair rounds.

Glue only: the probes run through clustercert.probes.run with the threshold judge, as in certify;
this runs them without the validators, prints every value against its threshold, records the run
and exits 0 when every probe passed, 1 otherwise.
"""

from __future__ import annotations

from clustercert.errors import InputError
from clustercert.probes.catalog import PROBE_NAMES


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


def probe_nodes(names: list[str], outcome) -> dict[str, dict]:
    """Per node: its own probes plus what localisation put on it."""
    from clustercert.checks import node_verdict
    from clustercert.probes.evaluate import probe_findings

    nodes = {}
    for name in names:
        if name in outcome.down:
            nodes[name] = {"verdict": "unreachable", "findings": [],
                           "detail": f"did not answer during the probes: {outcome.why_down.get(name) or 'no answer'}"}
            continue
        findings = probe_findings(name, outcome.per_node.get(name, []), outcome.localisation)
        nodes[name] = {"verdict": node_verdict(findings), "findings": [f.to_json() for f in findings]}
    return nodes


def run(inventory: str, *, limit: str | None = None, forks: int | None = None, only: str | None = None,
        all_pairs: bool = False, fmt: str = "table", probe_seconds: int = 5, probe_timeout: float = 60.0) -> int:
    import json

    from clustercert import documents
    from clustercert.checks import cluster_verdict
    from clustercert.engine import new_run_id
    from clustercert.inventory import load_inventory
    from clustercert.probes import run as probe_run
    from clustercert.probes.judge import ThresholdJudge
    from clustercert.probes.plan import ProbeSettings
    from clustercert.report_text import print_probe
    from clustercert.runlock import inventory_lock
    from clustercert.store import Store

    selected = parse_probe_list(only)  # bad input first: nothing runs
    inv = load_inventory(inventory, limit)
    started = documents.now()
    names = sorted(inv.hosts)
    store = Store()
    with inventory_lock(str(inv.source), "probe"):
        run_id = new_run_id()
        store.start_run(run_id, "probe", str(inv.source), {"limit": limit, "probes": sorted(selected or []),
                                                             "all_pairs": all_pairs})
        out = probe_run.run(inv, names, ProbeSettings(probe_seconds, probe_timeout, selected),
                            ThresholdJudge.for_inventory(inv), forks or 25, all_pairs)
        nodes = probe_nodes(names, out)
        links = [m.link_record() for m in out.pairs]
        verdict = cluster_verdict(nodes, links)
        ok = verdict == "pass"
        store.finish_run(run_id, verdict, nodes, links)
    doc = documents.envelope("probe", run_id, started) | {
        "inventory": str(inv.source), "probes": sorted(selected) if selected else None, "verdict": verdict,
        "rounds": len(out.rounds), "schedule": out.schedule(), "seconds": out.seconds, "nodes": nodes, "links": links,
        "localisation": [x.to_json() for x in out.localisation]}
    if fmt == "json":
        print(json.dumps(doc, indent=2))
    else:
        print_probe(doc)
    return 0 if ok else 1
