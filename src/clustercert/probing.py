"""`clustercert probe`: the bandwidth/latency probes alone, on the two-round pair schedule.

Glue only: the probes and their schedule are certify's (clustercert.certify.run_probes); this runs
them without the validators, prints every value against its threshold, records the run and exits
0 when every probe passed, 1 otherwise.
"""

from __future__ import annotations

from clustercert import probes
from clustercert.errors import InputError


def parse_probe_list(text: str | None) -> frozenset[str] | None:
    """``--probes ib_write_bw,iperf3`` -> the probe names; None for all. Unknown names are bad input."""
    if text is None:
        return None
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise InputError("--probes", text, f"no probe named (choose from {', '.join(probes.PROBE_NAMES)})")
    unknown = [x for x in names if x not in probes.PROBE_NAMES]
    if unknown:
        raise InputError("--probes", unknown[0], f"unknown probe (choose from {', '.join(probes.PROBE_NAMES)})")
    return frozenset(names)


def probe_nodes(names: list[str], probe_out: dict) -> dict[str, dict]:
    """Per node: its own probes plus a finding when the schedule localised a bad node to it."""
    from clustercert.checks import Finding, node_verdict

    bad = {x.subject: x for x in probe_out["localisation"] if x.kind == "bad_node"}
    nodes = {}
    for name in names:
        if name in probe_out["down"]:
            nodes[name] = {"verdict": "unreachable", "findings": [], "detail": "did not answer during the probes"}
            continue
        findings = [m.finding() for m in probe_out["per_node"].get(name, [])]
        if name in bad:
            findings.append(Finding("probe.pairs", "fail", name, "passes node-to-node probes", bad[name].reason))
        nodes[name] = {"verdict": node_verdict(findings), "findings": [f.to_json() for f in findings]}
    return nodes


def run(inventory: str, *, limit: str | None = None, forks: int | None = None, only: str | None = None,
        all_pairs: bool = False, fmt: str = "table", probe_seconds: int = 5, probe_timeout: float = 60.0) -> int:
    import json

    from clustercert.certify import ProbeSettings, run_probes
    from clustercert.engine import new_run_id
    from clustercert.inventory import load_inventory
    from clustercert.report_text import print_probe
    from clustercert.runlock import inventory_lock
    from clustercert.store import Store

    selected = parse_probe_list(only)  # bad input first: nothing runs
    inv = load_inventory(inventory, limit)
    names = sorted(inv.hosts)
    store = Store()
    with inventory_lock(str(inv.source), "probe"):
        run_id = new_run_id()
        store.start_run(run_id, "probe", str(inv.source), {"limit": limit, "probes": sorted(selected or []),
                                                             "all_pairs": all_pairs})
        out = run_probes(inv, names, ProbeSettings(probe_seconds, probe_timeout, selected), all_pairs, forks or 25)
        nodes = probe_nodes(names, out)
        links = [m.link_record() for m in out["pairs"]]
        ok = all(n["verdict"] == "pass" for n in nodes.values()) and all(lk["status"] == "pass" for lk in links)
        store.finish_run(run_id, "pass" if ok else "fail", nodes, links)
    doc = {"run": run_id, "verdict": "pass" if ok else "fail", "rounds": out["rounds"], "seconds": out["seconds"],
           "nodes": nodes, "links": links, "localisation": [x.to_json() for x in out["localisation"]]}
    if fmt == "json":
        print(json.dumps(doc, indent=2))
    else:
        print_probe(doc)
    return 0 if ok else 1
