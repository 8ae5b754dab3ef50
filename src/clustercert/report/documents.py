"""The JSON documents the verbs print with ``--format json``, and their schemas.

Every document starts with the same envelope::

    {"schema": "clustercert.<verb>/v1", "run": "<run id>" | null, "started": "...", "finished": "...", ...}

``schema`` names the JSON Schema the document follows; the schemas ship inside the package
(``clustercert/schemas/<verb>.schema.json``, Draft 2020-12) and ``schema_for`` finds them. ``run`` is the
id of the run the verb recorded in the store (validate, certify, probe, drift) or of the playbook run
(bootstrap), and null for verbs that record nothing (inventory, checks, version, report, init, --list-hosts).
``started`` and ``finished`` are ISO 8601 times in UTC, to the second. Stdlib only, and Python 3.10's:
node-check's zipapp carries this module (clustercert.remote.nodeapp).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

UTC = timezone.utc  # noqa: UP017 - datetime.UTC is Python 3.11's; a node's Python may be 3.10

VERSION = "v1"
# verb -> schema file stem; the document's "schema" is "clustercert.<stem>/v1"
KINDS = (
    "validate",
    "certify",
    "probe",
    "drift",
    "report",
    "bootstrap",
    "inventory",
    "checks",
    "version",
    "init",
    "hosts",
    "node-check",
)


def now() -> datetime:
    return datetime.now(UTC)


def iso(t: datetime | float | None) -> str | None:
    if t is None:
        return None
    if isinstance(t, int | float):
        t = datetime.fromtimestamp(t, UTC)
    return t.astimezone(UTC).isoformat(timespec="seconds")


def schema_id(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"no schema for {kind!r}")
    return f"clustercert.{kind}/{VERSION}"


def envelope(
    kind: str, run: str | None, started: datetime | float, finished: datetime | float | None = None
) -> dict:
    """The keys every document starts with."""
    return {
        "schema": schema_id(kind),
        "run": run,
        "started": iso(started),
        "finished": iso(finished or now()),
    }


def schema_for(kind: str) -> dict:
    """The JSON Schema a ``kind`` document follows (shipped as package data)."""
    text = (
        resources.files("clustercert").joinpath("schemas", f"{kind}.schema.json").read_text(encoding="utf-8")
    )
    return json.loads(text)


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=2, default=str)


def parse_time(text: str) -> datetime:
    """A certificate's ``started``/``finished`` (ISO 8601, ``Z`` or an offset) as a datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# ---- the verbs' documents ----------------------------------------------------------------------------

def validate_document(
    results: dict,
    run_id: str,
    started: float,
    finished: float,
    verdict: str,
    inventory: str,
    comp_names: list[str],
    ids: set[str],
) -> dict:
    """The `validate --format json` document (and --out's validate.json): every finding of every node."""
    return envelope("validate", run_id, started, finished) | {
        "inventory": inventory,
        "verdict": verdict,
        "components": comp_names,
        "checks": sorted(ids),
        "nodes": {n: r.to_json() for n, r in sorted(results.items())},
    }


def node_check_document(result, started: float, finished: float, profile: str, comp_names: list[str],
                        ids: set[str], slurm: list[dict]) -> dict:
    """The `node-check --format json` document: one node's findings, in validate's per-node shape (``nodes``),
    so that the controller can merge it (merge_node_checks), and what --drain did in Slurm (certify's
    entries)."""
    return envelope("node-check", None, started, finished) | {
        "profile": profile,
        "verdict": "pass" if result.verdict == "pass" else "fail",
        "components": comp_names,
        "checks": sorted(ids),
        "nodes": {result.name: result.to_json()},
        "slurm": slurm,
    }


def merge_node_checks(base: dict, *docs: dict) -> dict:
    """``base`` (a validate or node-check document) with the nodes of node-check documents ``docs`` added:
    their checks and components joined, the verdict taken over every node, the latest ``finished``;
    node-check's Slurm actions stay with node-check documents (a validate document has none). A node in two
    documents, or a document that is not a node-check one, is a ValueError: which one holds would be a
    guess."""
    # imported here, not with the module: every verb's documents would load the checks and parsers
    from clustercert.checks import COMPONENT_ORDER

    out = dict(
        base, nodes=dict(base["nodes"]), checks=set(base["checks"]), components=set(base["components"])
    )
    for doc in docs:
        if doc.get("schema") != schema_id("node-check"):
            raise ValueError(f"not a node-check document: schema {doc.get('schema')!r}")
        for name, node in doc["nodes"].items():
            if name in out["nodes"]:
                raise ValueError(f"node {name} is in two of the documents merged")
            out["nodes"][name] = node
        out["checks"] |= set(doc["checks"])
        out["components"] |= set(doc["components"])
        out["finished"] = max(out["finished"], doc["finished"], key=parse_time)
        if "slurm" in out:
            out["slurm"] = [*out["slurm"], *doc["slurm"]]
    out["checks"] = sorted(out["checks"])
    out["components"] = [c for c in COMPONENT_ORDER if c in out["components"]]
    out["nodes"] = dict(sorted(out["nodes"].items()))
    out["verdict"] = "pass" if all(n["verdict"] == "pass" for n in out["nodes"].values()) else "fail"
    return out


def probe_document(outcome, run_id: str, started: datetime, inventory: str, probes: frozenset[str] | None,
                   verdict: str, nodes: dict, links: list[dict]) -> dict:
    """The `probe --format json` document: every node's probe findings, the links, the rounds and
    what localisation concluded."""
    return envelope("probe", run_id, started) | {
        "inventory": inventory,
        "probes": sorted(probes) if probes else None,
        "verdict": verdict,
        "rounds": len(outcome.rounds),
        "schedule": outcome.schedule(),
        "seconds": outcome.seconds,
        "nodes": nodes,
        "links": links,
        "localisation": [x.to_json() for x in outcome.localisation],
    }


def certify_document(cert: dict, run_id: str, out_dir: Path, inventory: str) -> dict:
    """The `certify --format json` document: the envelope, where the certificate was written, and the
    certificate's verdicts, findings, links and localisation (its signature and profiles stay in
    certificate.json)."""
    doc = envelope("certify", run_id, parse_time(cert["started"]), parse_time(cert["finished"]))
    doc |= {"inventory": inventory, "out": str(out_dir), "certificate": str(out_dir / "certificate.json"),
            "cluster": cert.get("cluster"), "verdict": cert["verdict"], "rounds": cert.get("rounds"),
            "nodes": cert["nodes"], "links": cert["links"], "localisation": cert.get("localisation", []),
            "thresholds": cert.get("thresholds", {})}
    for key in ("slurm", "timing", "cluster_findings"):
        if key in cert:
            doc[key] = cert[key]
    return doc


def drift_document(items: list, baseline: str, run_id: str, started: float, finished: float, inventory: str,
                   fixed: dict | None = None) -> dict:
    """The `drift --format json` document."""
    doc = envelope("drift", run_id, started, finished) | {
        "inventory": inventory, "baseline": baseline, "verdict": "drift" if items else "clean",
        "items": [i.to_json() for i in items]}
    if fixed is not None:
        doc["fixed"] = fixed
    return doc


BOOTSTRAP_COUNTS = ("ok", "changed", "failed", "unreachable", "skipped")


def bootstrap_summary(result) -> dict:
    """A playbook run (clustercert.collect.engine.RunResult) per host, and every change: what
    `bootstrap` prints as JSON and as a table."""
    hosts = {
        name: {k: getattr(stats, k) for k in BOOTSTRAP_COUNTS}
        for name, stats in sorted(result.stats.items())
    }
    changes = [
        {"host": c["host"], "task": c["task"], "role": c.get("role", ""), "diff": c.get("diff")}
        for c in result.changes
    ]
    return {"hosts": hosts, "changes": changes}


def bootstrap_document(result, summary: dict, started: float, finished: float, inventory: str, check: bool,
                       ok: bool) -> dict:
    """The `bootstrap --format json` document: the envelope (``run`` is the playbook run, its directory under
    the state directory's runs/), and per host the task counts, every change and every failure."""
    return envelope("bootstrap", result.run_id, started, finished) | {
        "inventory": inventory,
        "check": check,
        "ok": ok,
        "status": result.status,
        "run_dir": str(result.run_dir),
        **summary,
        "failures": result.failures,
    }


def report_document(what: str, node: str | None, rows: list[dict], started: datetime) -> dict:
    """The `report history|runs|prune --format json` document: the store's rows, their times in ISO 8601."""
    if what == "runs":
        rows = [
            r | {"started": iso(r["started"]), "finished": iso(r["finished"]) if r.get("finished") else None}
            for r in rows
        ]
    elif what == "prune":
        rows = list(rows)
    else:
        rows = [r | {"started": iso(r["started"])} for r in rows]
    return envelope("report", None, started) | {"report": what, "node": node, "rows": rows}
