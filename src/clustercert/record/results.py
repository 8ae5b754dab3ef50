"""What a run records about its nodes and links, and the body of the certificate that certify signs.

Node records join a node's validator findings (clustercert.checks.run) with its probe findings
(clustercert.probes.evaluate, localisation included) into one verdict; the certificate body adds the
links, the schedule, the thresholds each profile held the nodes to, the versions found and the timing.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from importlib.metadata import version

from clustercert import __version__
from clustercert.checks import Finding, cluster_verdict, node_verdict
from clustercert.checks.hardware import identity
from clustercert.model.inventory import Inventory
from clustercert.probes.evaluate import probe_findings
from clustercert.record.certificate import SCHEMA, pack_evidence

SHARED_MEMBERS = ("check", "status", "subject", "expected", "observed", "unit", "threshold")


def finding_record(f: Finding) -> dict:
    """A finding as the certificate holds it, its short texts shared (``sys.intern``) with every other node's
    equal ones: at fleet scale most nodes' subjects, expected and observed texts are the same."""
    d = f.to_json()
    for k in SHARED_MEMBERS:
        if type(d.get(k)) is str:
            d[k] = sys.intern(d[k])
    return d


def node_hardware(r, link_layer: str = "InfiniBand") -> dict | None:
    """What a node's validator evidence says it is made of (clustercert.checks.hardware.identity): the
    certificate's per-node ``hardware``, which drift compares with the baseline's. None: nothing known."""
    if getattr(r, "hardware_taken", False):  # taken by the validators' run before the raw outputs went
        return r.hardware
    if r.evidence is None or not r.evidence.reachable:
        return None
    return identity(r.evidence.results, link_layer)


def build_nodes(validation: dict, outcome, link_layers: dict[str, str] | None = None,
                consume: bool = False) -> dict[str, dict]:
    """The certificate's ``nodes`` object: validator findings + the node's probe findings, and what hardware
    was certified (``hardware``, where the evidence shows it). ``consume``: each node's validator results
    are released as soon as they are recorded (certify at fleet scale: never the Finding objects of every
    node and their records at once)."""
    nodes = {}
    for name, r in validation.items():
        if consume:
            validation[name] = None
        if r.verdict == "unreachable" or name in outcome.down:
            detail = (
                r.detail
                or f"stopped answering during the probes: {outcome.why_down.get(name) or 'no answer'}"
            )
            nodes[name] = {"verdict": "unreachable", "findings": [finding_record(f) for f in r.findings],
                           "detail": detail}
            continue
        findings: list[Finding] = list(r.findings)
        findings += probe_findings(name, outcome.per_node.get(name, []), outcome.localisation)
        nodes[name] = {"verdict": node_verdict(findings), "findings": [finding_record(f) for f in findings]}
        hw = node_hardware(r, (link_layers or {}).get(name, "InfiniBand"))
        if hw is not None:
            nodes[name]["hardware"] = hw
        rails = getattr(r, "rails", None)
        # the GPU->NIC rails its evidence showed (checks.rails)
        if rails is not None and rails.source != "none":
            nodes[name]["rails"] = rails.to_json()
    return nodes


def probe_nodes(names: list[str], outcome) -> dict[str, dict]:
    """`probe`'s nodes: per node its own probes plus what localisation put on it."""
    nodes = {}
    for name in names:
        if name in outcome.down:
            nodes[name] = {
                "verdict": "unreachable",
                "findings": [],
                "detail": f"did not answer during the probes: {outcome.why_down.get(name) or 'no answer'}",
            }
            continue
        findings = probe_findings(name, outcome.per_node.get(name, []), outcome.localisation)
        nodes[name] = {"verdict": node_verdict(findings), "findings": [f.to_json() for f in findings]}
    return nodes


def versions(validation: dict) -> dict:
    """The certificate's ``versions``: clustercert's and ansible-core's, and per node the driver, NCCL and
    OFED the validators found."""
    per_node = {}
    for name, r in validation.items():
        ev = r.evidence.results if r.evidence else {}
        drv = next(
            (f.observed for f in r.findings if f.check == "driver.version" and f.status != "error"), None
        )
        nccl = ev.get("nccl_pkg").stdout.strip() if ev.get("nccl_pkg") and ev["nccl_pkg"].ok else None
        ofed = ev.get("ofed_info").stdout.strip() if ev.get("ofed_info") and ev["ofed_info"].ok else None
        per_node[name] = {"driver": drv, "nccl": nccl, "ofed": ofed}
    return {"clustercert": __version__, "ansible-core": version("ansible-core"), "nodes": per_node}


def node_timing(validation: dict) -> dict[str, dict]:
    """The certificate's ``timing.nodes``: per node the seconds its validator collection took
    (NodeEvidence.seconds: one connection, its commands at once), what junit.xml charges its checks."""
    return {name: {"validate_s": round(r.evidence.seconds, 3)} for name, r in sorted(validation.items())
            if r.evidence is not None}


def thresholds(inv: Inventory) -> dict[str, dict]:
    """The certificate's ``thresholds``: each threshold as the first profile that sets it holds it."""
    out: dict[str, dict] = {}
    for h in inv.hosts.values():
        for tname, t in h.profile.thresholds.items():
            out.setdefault(tname, {"floor": t.floor, "ceiling": t.max, "unit": t.unit, "source": t.source})
    return out


def cluster_record(m) -> dict:
    """A cluster-wide finding (probe.nccl_cluster) as the certificate's ``cluster_findings`` holds it: the
    finding, the nodes it ran across, its rail group's fabric (null: every rail) and how long its tool ran."""
    return finding_record(m.finding()) | {"nodes": list(getattr(m, "nodes", ())), "fabric": m.fabric,
                                          "seconds": m.elapsed}


def cluster_verdict_with(verdict: str, cluster: list[dict]) -> str:
    """The cluster's verdict, failed also by a cluster-wide finding that failed or could not be measured."""
    return "fail" if any(c.get("status") in ("fail", "error") for c in cluster) else verdict


def certificate_body(inv: Inventory, validation: dict, outcome, started: datetime, validate_s: float,
                     consume: bool = False) -> dict:
    """The certificate before signing (and before a Slurm drain adds its ``slurm`` entries). ``consume``:
    ``validation`` is emptied as its nodes are recorded (build_nodes); the caller reads it no more."""
    found, timing = versions(validation), node_timing(validation)
    nodes = pack_evidence(
        build_nodes(validation, outcome, {n: h.profile.ib.link_layer for n, h in inv.hosts.items()}, consume)
    )
    if consume:
        validation.clear()
    links = [m.link_record() for m in outcome.pairs]
    clustered = [cluster_record(m) for m in getattr(outcome, "cluster", [])]
    return {
        "schema": SCHEMA,
        "cluster": inv.cluster_name,
        "profiles": {h.profile.name: json.loads(h.profile.model_dump_json()) for h in inv.hosts.values()},
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "versions": found,
        "verdict": cluster_verdict_with(cluster_verdict(nodes, links), clustered),
        "rounds": len(outcome.rounds),
        "schedule": outcome.schedule(),
        "nodes": nodes,
        "links": links,
        "localisation": [x.to_json() for x in outcome.localisation],
        # probe.nccl_cluster (issue 33): findings of the cluster, not of one node
        "cluster_findings": clustered,
        "thresholds": thresholds(inv),
        "timing": {"validate_s": validate_s, **outcome.timing, "nodes": timing},
    }
