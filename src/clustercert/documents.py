"""The JSON documents the verbs print with ``--format json``, and their schemas.

Every document starts with the same envelope::

    {"schema": "clustercert.<verb>/v1", "run": "<run id>" | null, "started": "...", "finished": "...", ...}

``schema`` names the JSON Schema the document follows; the schemas ship inside the package
(``clustercert/schemas/<verb>.schema.json``, Draft 2020-12) and ``schema_for`` finds them. ``run`` is the
id of the run the verb recorded in the store (validate, certify, probe, drift) or of the playbook run
(bootstrap), and null for verbs that record nothing (inventory, checks, version, report, init, --list-hosts).
``started`` and ``finished`` are ISO 8601 times in UTC, to the second.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from importlib import resources

VERSION = "v1"
# verb -> schema file stem; the document's "schema" is "clustercert.<stem>/v1"
KINDS = ("validate", "certify", "probe", "drift", "report", "bootstrap", "inventory", "checks", "version", "init",
         "hosts")


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


def envelope(kind: str, run: str | None, started: datetime | float, finished: datetime | float | None = None) -> dict:
    """The keys every document starts with."""
    return {"schema": schema_id(kind), "run": run, "started": iso(started), "finished": iso(finished or now())}


def schema_for(kind: str) -> dict:
    """The JSON Schema a ``kind`` document follows (shipped as package data)."""
    text = resources.files("clustercert").joinpath("schemas", f"{kind}.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=2, default=str)
