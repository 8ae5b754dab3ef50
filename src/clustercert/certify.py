"""certify: validators + probes -> verdicts, a signed certificate, reports.

Glue only: collection is clustercert.collect, the probes and their rounds clustercert.probes (run with
the threshold judge), evaluation clustercert.checks, recording clustercert.store and
clustercert.certificate, rendering clustercert.reports.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

from clustercert import paths
from clustercert.checks import Finding, cluster_verdict, node_verdict
from clustercert.probes import run as probe_run
from clustercert.probes.evaluate import probe_findings
from clustercert.probes.judge import ThresholdJudge
from clustercert.probes.plan import ProbeSettings


def build_nodes(validation: dict, outcome) -> dict[str, dict]:
    """The certificate's ``nodes`` object: validator findings + the node's probe findings."""
    nodes = {}
    for name, r in validation.items():
        if r.verdict == "unreachable" or name in outcome.down:
            detail = r.detail or f"stopped answering during the probes: {outcome.why_down.get(name) or 'no answer'}"
            nodes[name] = {"verdict": "unreachable", "findings": [f.to_json() for f in r.findings], "detail": detail}
            continue
        findings: list[Finding] = list(r.findings)
        findings += probe_findings(name, outcome.per_node.get(name, []), outcome.localisation)
        nodes[name] = {"verdict": node_verdict(findings), "findings": [f.to_json() for f in findings]}
    return nodes


def _versions(inv, validation: dict) -> dict:
    from importlib.metadata import version

    from clustercert import __version__

    per_node = {}
    for name, r in validation.items():
        ev = r.evidence.results if r.evidence else {}
        drv = next((f.observed for f in r.findings if f.check == "driver.version" and f.status != "error"), None)
        nccl = ev.get("nccl_pkg").stdout.strip() if ev.get("nccl_pkg") and ev["nccl_pkg"].ok else None
        ofed = ev.get("ofed_info").stdout.strip() if ev.get("ofed_info") and ev["ofed_info"].ok else None
        per_node[name] = {"driver": drv, "nccl": nccl, "ofed": ofed}
    return {"clustercert": __version__, "ansible-core": version("ansible-core"), "nodes": per_node}


def node_timing(validation: dict) -> dict[str, dict]:
    """The certificate's ``timing.nodes``: per node the seconds its validator collection took
    (NodeEvidence.seconds: one connection, its commands at once), what junit.xml charges its checks."""
    return {name: {"validate_s": round(r.evidence.seconds, 3)} for name, r in sorted(validation.items())
            if r.evidence is not None}


def document(cert: dict, run_id: str, out_dir: Path, inventory: str) -> dict:
    """The `certify --format json` document: the envelope, where the certificate was written, and the
    certificate's verdicts, findings, links and localisation (its signature and profiles stay in
    certificate.json)."""
    from clustercert import documents

    doc = documents.envelope("certify", run_id, _parse_time(cert["started"]), _parse_time(cert["finished"]))
    doc |= {"inventory": inventory, "out": str(out_dir), "certificate": str(out_dir / "certificate.json"),
            "cluster": cert.get("cluster"), "verdict": cert["verdict"], "rounds": cert.get("rounds"),
            "nodes": cert["nodes"], "links": cert["links"], "localisation": cert.get("localisation", []),
            "thresholds": cert.get("thresholds", {})}
    for key in ("slurm", "timing"):
        if key in cert:
            doc[key] = cert[key]
    return doc


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def write_prom(path: str, cert: dict, inventory: str) -> None:
    """--prom: per node and check the status, per node the verdict, per link the value and the bound it was held
    to, the run's duration, when it finished and when a certify of this inventory last passed."""
    from clustercert import prom

    started, finished = _parse_time(cert["started"]).timestamp(), _parse_time(cert["finished"]).timestamp()
    ok = finished if cert["verdict"] == "pass" else prom.last_success("certify", inventory)
    prom.write_atomic(path, prom.render("certify", nodes=cert["nodes"], links=cert["links"],
                                        bounds=prom.threshold_bounds(cert.get("thresholds", {})),
                                        duration_s=finished - started, finished=finished, last_success=ok))


def run(inventory: str, *, limit: str | None = None, forks: int | None = None, out: str, all_pairs: bool = False,
        key: str | None = None, probe_seconds: int = 5, probe_timeout: float = 60.0, drain: str | None = None,
        fmt: str = "table", prom: str | None = None) -> int:
    from clustercert import certificate
    from clustercert.inventory import load_inventory
    from clustercert.store import Store

    inv = load_inventory(inventory, limit)
    if drain == "slurm":
        from clustercert import slurm

        slurm.check_inventory(inv)
    out_dir = Path(out)
    signing_key, pub_path = certificate.load_or_create_key(Path(key) if key else None, paths.state_dir())
    from clustercert.runlock import inventory_lock

    store = Store()
    with inventory_lock(str(inv.source), "certify"):
        return _certify(inv, store, out_dir, signing_key, pub_path, limit, forks, all_pairs, probe_seconds, probe_timeout,
                        drain, fmt, prom)


def _certify(inv, store, out_dir: Path, signing_key, pub_path: Path, limit, forks, all_pairs, probe_seconds, probe_timeout,
             drain=None, fmt: str = "table", prom: str | None = None) -> int:
    from clustercert import certificate, reports, validate
    from clustercert.engine import new_run_id
    from clustercert.report_text import print_certify

    run_id = new_run_id()
    started = datetime.now(UTC)
    store.start_run(run_id, "certify", str(inv.source), {"limit": limit, "all_pairs": all_pairs})
    forks = forks or 25
    t_validate = time.monotonic()
    validation = validate.validate_nodes(inv, list(validate.COMPONENT_ORDER), forks)
    validate_s = round(time.monotonic() - t_validate, 2)
    reachable = [n for n, r in sorted(validation.items()) if r.verdict != "unreachable"]
    outcome = probe_run.run(inv, reachable, ProbeSettings(probe_seconds, probe_timeout), ThresholdJudge.for_inventory(inv),
                            forks, all_pairs)
    nodes = build_nodes(validation, outcome)
    links = [m.link_record() for m in outcome.pairs]
    thresholds = {}
    for h in inv.hosts.values():
        for tname, t in h.profile.thresholds.items():
            thresholds.setdefault(tname, {"floor": t.floor, "ceiling": t.max, "unit": t.unit, "source": t.source})
    verdict = cluster_verdict(nodes, links)
    cert = {
        "schema": "clustercert.certificate/v1",
        "cluster": next((h.vars.clustercert_cluster_name for h in inv.hosts.values() if h.vars.clustercert_cluster_name), None)
        or inv.source.name,
        "profiles": {h.profile.name: json.loads(h.profile.model_dump_json()) for h in inv.hosts.values()},
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "versions": _versions(inv, validation),
        "verdict": verdict,
        "rounds": len(outcome.rounds),
        "schedule": outcome.schedule(),
        "nodes": nodes,
        "links": links,
        "localisation": [x.to_json() for x in outcome.localisation],
        "thresholds": thresholds,
        "timing": {"validate_s": validate_s, **outcome.timing, "nodes": node_timing(validation)},
    }
    if drain == "slurm":  # after the verdicts, before signing: what was done is part of the certificate
        from clustercert import slurm

        cert["slurm"] = slurm.apply(inv, nodes, paths.state_dir() / "cp")
    cert = certificate.sign(cert, signing_key)
    out_dir.mkdir(parents=True, exist_ok=True)
    certificate.write_certificate(cert, out_dir / "certificate.json")
    (out_dir / "signing.pub").write_text(pub_path.read_text())
    reports.write_reports(cert, out_dir)
    store.finish_run(run_id, verdict, nodes, links, actions={"slurm": cert["slurm"]} if "slurm" in cert else None)
    if prom:
        write_prom(prom, cert, str(inv.source))
    if fmt == "json":
        print(json.dumps(document(cert, run_id, out_dir, str(inv.source)), indent=2, default=str))
    else:
        print_certify(cert, out_dir, run_id, outcome.seconds)
    return 0 if verdict == "pass" and all(a["ok"] for a in cert.get("slurm", [])) else 1
