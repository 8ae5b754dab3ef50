"""node_exporter textfile-collector output (``--prom FILE`` on validate, certify and drift), rendered by
prometheus_client and written atomically (temp file in the same directory, fsync, rename, mode 0644 so
that node_exporter, another user, can read it). Names follow Prometheus's conventions: base units in the
name (bytes per second, seconds), one metric per unit, a status as 0/1 gauges with a ``status`` label (a
state set), so that ``clustercert_check_status{status="fail"} == 1`` alerts on failures and a skip never
reads as one; ``promtool check metrics`` passes on every file (tests/test_store_lock_prom.py).

Metrics (every one but ``clustercert_drift_items`` carries ``verb``, so validate, certify and drift may
write to files of one textfile directory without clashing series):

* ``clustercert_check_status{verb,node,check,status}``: per node and check, 1 for the check's worst status in
  the last run (fail over error over pass over skip) and 0 for each other status (pass, fail, error, skip);
* ``clustercert_node_verdict{verb,node,verdict}``: 1 for the node's verdict, 0 for the others (pass, fail,
  error, unreachable);
* per node-to-node measurement (the last round's), labels ``{verb,a,b,fabric,probe,subject}``:
  ``clustercert_link_bandwidth_bytes_per_second`` (Gb/s and GB/s converted),
  ``clustercert_link_latency_seconds`` (µs, ns, ms), ``clustercert_link_ratio`` (ratio; percent / 100), each
  with the bound it was held to, ``clustercert_link_bandwidth_threshold_bytes_per_second`` /
  ``clustercert_link_latency_threshold_seconds`` / ``clustercert_link_ratio_threshold`` (``bound``: floor or
  ceiling); a value in a unit outside these is not exported (its status is);
  ``clustercert_link_status{...,status}``: 0/1 per status like a check's;
* ``clustercert_run_duration_seconds{verb}``, ``clustercert_last_run_timestamp_seconds{verb}``,
  ``clustercert_last_success_timestamp_seconds{verb}`` (absent until a run of the verb passed);
* drift only: ``clustercert_drift_items{node,kind}`` (kind: configuration, state, performance, hardware).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from clustercert.probes.judge import BaselineJudge
from clustercert.record.store import Store, default_path
from clustercert.report.documents import parse_time

STATUSES = ("pass", "fail", "error", "skip")
VERDICTS = ("pass", "fail", "error", "unreachable")
RANK = {"skip": 0, "pass": 1, "error": 2, "fail": 3}
LINK_LABELS = ("verb", "a", "b", "fabric", "probe", "subject")

# a measurement's unit -> (the quantity, the factor to its base unit)
BASE_UNITS: dict[str, tuple[str, float]] = {
    "gbit_per_s": ("bandwidth", 1e9 / 8), "mbit_per_s": ("bandwidth", 1e6 / 8),
    "gbyte_per_s": ("bandwidth", 1e9), "mbyte_per_s": ("bandwidth", 1e6), "byte_per_s": ("bandwidth", 1.0),
    "usec": ("latency", 1e-6), "nsec": ("latency", 1e-9), "ms": ("latency", 1e-3), "s": ("latency", 1.0),
    "ratio": ("ratio", 1.0), "percent": ("ratio", 0.01),
}
# the quantity -> (its value metric, its threshold metric, what HELP says of the unit)
QUANTITIES: dict[str, tuple[str, str, str]] = {
    "bandwidth": (
        "clustercert_link_bandwidth_bytes_per_second",
        "clustercert_link_bandwidth_threshold_bytes_per_second",
        "bytes per second (Gb/s x 1.25e8, GB/s x 1e9)",
    ),
    "latency": (
        "clustercert_link_latency_seconds",
        "clustercert_link_latency_threshold_seconds",
        "seconds (us x 1e-6)",
    ),
    "ratio": ("clustercert_link_ratio", "clustercert_link_ratio_threshold", "a ratio (percent / 100)"),
}


def base_value(value: float, unit: str | None) -> tuple[str, float] | None:
    """(quantity, ``value`` in its base unit) for a unit BASE_UNITS knows, else None."""
    q = BASE_UNITS.get(unit or "")
    return None if q is None else (q[0], float(value) * q[1])


def _state_set(gauge: Gauge, labels: tuple, states: tuple[str, ...], current: str) -> None:
    for st in states:
        gauge.labels(*labels, st).set(1 if st == current else 0)


def _worst_statuses(findings: list[dict]) -> dict[str, str]:
    """Each check's worst status among ``findings`` (an unknown status counts as error)."""
    worst: dict[str, str] = {}
    for f in findings:
        st = f["status"] if f["status"] in RANK else "error"
        if f["check"] not in worst or RANK[st] > RANK[worst[f["check"]]]:
            worst[f["check"]] = st
    return worst


def _node_metrics(reg: CollectorRegistry, verb: str, nodes: dict[str, dict]) -> None:
    status = Gauge("clustercert_check_status", "1 for the worst status of each check per node in the last "
                   "run, 0 for the other statuses (pass, fail, error, "
                   "skip).", ["verb", "node", "check", "status"],
                   registry=reg)
    verdict = Gauge("clustercert_node_verdict", "1 for each node's verdict in the last run, 0 for the others "
                    "(pass, fail, error, unreachable).", ["verb", "node", "verdict"], registry=reg)
    for node, body in sorted(nodes.items()):
        v = body.get("verdict")
        _state_set(verdict, (verb, node), VERDICTS, v if v in VERDICTS else "error")
        for check, st in sorted(_worst_statuses(body.get("findings", [])).items()):
            _state_set(status, (verb, node, check), STATUSES, st)


def _latest_links(verb: str, links: list[dict]) -> dict[tuple, dict]:
    """Each link's measurement by its labels; a later round's replaces an earlier one's."""
    latest: dict[tuple, dict] = {}
    for lk in sorted(links, key=lambda x: x.get("round") or 0):
        labels = (verb, lk["a"], lk["b"], "" if lk.get("fabric") is None else str(lk["fabric"]), lk["probe"],
                  lk.get("subject") or "")
        latest[labels] = lk
    return latest


def _link_metrics(reg: CollectorRegistry, verb: str, links: list[dict],
                  bounds: dict[str, tuple] | None) -> None:
    lstatus = Gauge("clustercert_link_status", "1 for the status of each node-to-node measurement (the last "
                    "round's), 0 for the other statuses (pass, fail, error, skip).", [*LINK_LABELS, "status"],
                    registry=reg)
    value = {
        q: Gauge(name, f"Node-to-node measurement (the last round's) in {unit}.", LINK_LABELS, registry=reg)
        for q, (name, _, unit) in QUANTITIES.items()
    }
    bound = {q: Gauge(name, f"The bound a node-to-node measurement was held to (bound: floor or ceiling), in "
                      f"{unit}.", [*LINK_LABELS, "bound"], registry=reg)
             for q, (_, name, unit) in QUANTITIES.items()}
    for labels, lk in _latest_links(verb, links).items():
        st = lk.get("status")
        _state_set(lstatus, labels, STATUSES, st if st in STATUSES else "error")
        if lk.get("value") is not None and (got := base_value(lk["value"], lk.get("unit"))) is not None:
            value[got[0]].labels(*labels).set(got[1])
        b = (bounds or {}).get(lk.get("threshold") or lk["probe"])
        if b is not None and (got := base_value(b[1], (b[2] if len(b) > 2 else None) or lk.get("unit"))):
            bound[got[0]].labels(*labels, b[0]).set(got[1])


def _run_metrics(reg: CollectorRegistry, verb: str, duration_s: float | None, finished: float | None,
                 succeeded: float | None) -> None:
    run = Gauge("clustercert_run_duration_seconds", "Wall time of the last run.", ["verb"], registry=reg)
    last = Gauge(
        "clustercert_last_run_timestamp_seconds", "When the last run finished.", ["verb"], registry=reg
    )
    ok = Gauge("clustercert_last_success_timestamp_seconds", "When the last passing run finished.", ["verb"],
               registry=reg)
    for gauge, v in ((run, None if duration_s is None else round(duration_s, 3)), (last, finished),
                     (ok, succeeded)):
        if v is not None:
            gauge.labels(verb).set(v)


def render(verb: str, *, nodes: dict[str, dict] | None = None, links: list[dict] | None = None,
           bounds: dict[str, tuple] | None = None, duration_s: float | None = None,
           finished: float | None = None, last_success: float | None = None,
           drift_items: dict[tuple[str, str], int] | None = None) -> str:
    """The textfile for one run of ``verb``.

    ``nodes``: node -> {"verdict", "findings": [{"check", "status", ...}]} (validate's and the
    certificate's shape); ``links``: the certificate's link records ({"a", "b", "fabric", "probe",
    "subject", "unit", "value", "status", "threshold", "round"}); ``bounds``: the bound each link is held
    to, by its ``threshold`` name (else its probe): name -> ("floor" | "ceiling", value[, unit]), in the unit
    given (else the link's).
    """
    reg = CollectorRegistry()
    if nodes is not None:
        _node_metrics(reg, verb, nodes)
    if links:
        _link_metrics(reg, verb, links, bounds)
    _run_metrics(reg, verb, duration_s, finished, last_success)
    if drift_items is not None:
        drift = Gauge("clustercert_drift_items", "Drift items found by the last clustercert drift run, per "
                      "node and kind.", ["node", "kind"], registry=reg)
        for (node, kind), n in sorted(drift_items.items()):
            drift.labels(node, kind).set(n)
    return generate_latest(reg).decode("utf-8")


def threshold_bounds(thresholds: dict[str, dict]) -> dict[str, tuple[str, float, str | None]]:
    """The certificate's ``thresholds`` ({name: {"floor", "ceiling", "unit", ...}}) -> {name: (bound, value,
    unit)}."""
    out = {}
    for name, t in thresholds.items():
        if t.get("floor") is not None:
            out[name] = ("floor", t["floor"], t.get("unit"))
        elif t.get("ceiling") is not None:
            out[name] = ("ceiling", t["ceiling"], t.get("unit"))
    return out


def last_success(kind: str, inventory: str, passed: tuple[str, ...] = ("pass",)) -> float | None:
    """When the latest run of ``kind`` on ``inventory`` that ended with one of the ``passed`` verdicts
    finished (from the store), or None."""
    if not default_path().exists():
        return None
    for r in Store().runs(kind=kind, limit=100_000):
        if r["inventory"] == inventory and r["verdict"] in passed and r["finished"]:
            return float(r["finished"])
    return None


def write_atomic(path: Path | str, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# ---- each verb's textfile ---------------------------------------------------------------------------

def write_validate(path: str, doc: dict, started: float, finished: float) -> None:
    """validate --prom: per node and check the status, per node the verdict, the run's duration, when it
    finished and when a validate of this inventory last passed."""
    ok = finished if doc["verdict"] == "pass" else last_success("validate", doc["inventory"])
    write_atomic(path, render("validate", nodes=doc["nodes"], duration_s=finished - started,
                              finished=finished, last_success=ok))


def write_certify(path: str, cert: dict, inventory: str) -> None:
    """certify --prom: per node and check the status, per node the verdict, per link the value and the bound
    it was held to, the run's duration, when it finished and when a certify of this inventory last passed."""
    started, finished = parse_time(cert["started"]).timestamp(), parse_time(cert["finished"]).timestamp()
    ok = finished if cert["verdict"] == "pass" else last_success("certify", inventory)
    write_atomic(path, render("certify", nodes=cert["nodes"], links=cert["links"],
                              bounds=threshold_bounds(cert.get("thresholds", {})),
                              duration_s=finished - started, finished=finished, last_success=ok))


def write_drift(path: str, doc: dict, inv, current: dict, baseline_links: list[dict], links: list[dict],
                started: float, finished: float) -> None:
    """drift --prom: drift items per node and kind, per node and check the status, per node the verdict, per
    link (--probes) the value and the bound the baseline sets (its median less the profile's drift
    tolerance; a latency: plus), the run's duration, when it finished and when a drift of this inventory
    was last clean."""
    counts: dict[tuple[str, str], int] = {(n, k): 0 for n in inv.hosts for k in ("configuration", "state",
                                                                                  "performance", "hardware")}
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
    ok = finished if doc["verdict"] == "clean" else last_success("drift", doc["inventory"], ("clean",))
    write_atomic(path, render("drift", nodes=nodes, links=keyed, bounds=bounds, duration_s=finished - started,
                              finished=finished, last_success=ok, drift_items=counts))
