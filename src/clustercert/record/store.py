"""Record: the SQLite store of runs, per-node verdicts, findings and link measurements.

WAL journal and one transaction per write, so a run killed with SIGKILL leaves the store readable:
its run row stays ``running`` (shown as interrupted), and the next run works.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable
from contextlib import closing
from pathlib import Path
from urllib.parse import quote

from clustercert import paths
from clustercert.errors import InputError
from clustercert.model.strict_yaml import load_yaml_file
from clustercert.record.certificate import evidence_ref, finding_evidence

SQLITE_MAGIC = b"SQLite format 3\x00"
APPLICATION_ID = 0x63634331  # "ccC1": PRAGMA application_id of a clustercert store
TABLES = {"runs", "nodes", "findings", "links", "actions", "hardware", "evidence"}
SCHEMA_VERSION = 1  # PRAGMA user_version of a store this clustercert writes; 0: made before it was set

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,              -- validate | certify | drift | bootstrap | probe
    inventory TEXT NOT NULL,
    started REAL NOT NULL,
    finished REAL,
    status TEXT NOT NULL,            -- running | done | failed
    verdict TEXT,                    -- pass | fail | drift | ...
    meta TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS nodes (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    node TEXT NOT NULL,
    verdict TEXT NOT NULL,           -- pass | fail | unreachable | error
    detail TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (run_id, node)
);
CREATE TABLE IF NOT EXISTS findings (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    node TEXT NOT NULL,
    check_id TEXT NOT NULL,
    status TEXT NOT NULL,            -- pass | fail | error | skip
    subject TEXT NOT NULL DEFAULT '',
    expected TEXT NOT NULL DEFAULT '',
    observed TEXT NOT NULL DEFAULT '',
    evidence TEXT NOT NULL DEFAULT '',  -- '' where evidence_ref names the text (stores before: the text)
    value REAL,
    unit TEXT
    -- evidence_ref TEXT: added by MIGRATIONS (a store made before it gets it on open)
);
CREATE INDEX IF NOT EXISTS findings_run_node ON findings(run_id, node);
CREATE TABLE IF NOT EXISTS evidence (   -- each distinct evidence text of a node in a run, once (the certificate's)
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    node TEXT NOT NULL,
    ref TEXT NOT NULL,               -- clustercert.record.certificate.evidence_ref(text)
    text TEXT NOT NULL,
    PRIMARY KEY (run_id, node, ref)
);
CREATE TABLE IF NOT EXISTS links (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    a TEXT NOT NULL, b TEXT NOT NULL, fabric INTEGER, probe TEXT NOT NULL,
    value REAL, unit TEXT, status TEXT NOT NULL, round INTEGER
);
CREATE TABLE IF NOT EXISTS actions (    -- what a run did to the cluster's own systems (certify --drain slurm)
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    system TEXT NOT NULL,            -- slurm
    node TEXT NOT NULL,              -- inventory name
    target TEXT NOT NULL DEFAULT '', -- the system's own name for it (Slurm NodeName)
    action TEXT NOT NULL,            -- drain | resume | none
    reason TEXT NOT NULL DEFAULT '',
    ok INTEGER NOT NULL,
    detail TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS hardware (   -- what a node was made of in a run (the certificate's nodes.*.hardware)
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    node TEXT NOT NULL,
    identity TEXT NOT NULL,          -- JSON: board, gpus, hcas, nvswitch_count (clustercert.checks.hardware)
    PRIMARY KEY (run_id, node)
);
-- one index per query the verbs make (runs, latest_certified, history, links, actions; prune's cascade)
CREATE INDEX IF NOT EXISTS runs_started ON runs(started);
CREATE INDEX IF NOT EXISTS runs_kind_started ON runs(kind, started);
CREATE INDEX IF NOT EXISTS runs_certified ON runs(inventory, kind, verdict, status, started);
CREATE INDEX IF NOT EXISTS nodes_node ON nodes(node);
CREATE INDEX IF NOT EXISTS links_run ON links(run_id);
CREATE INDEX IF NOT EXISTS actions_run ON actions(run_id, system, node);
"""  # noqa: E501
# columns added after a store could first be made: (table, column, declaration)
MIGRATIONS = (("findings", "evidence_ref", "TEXT"),)
DEFAULT_KEEP = 500  # runs `report prune` keeps without --keep/--older-than and without a config value
CONFIG_NAME = "config.yml"


def default_path() -> Path:
    return paths.state_dir() / "store.sqlite"


def _store_header(path: Path) -> bytes | None:
    """The first 100 bytes of the file at ``path`` (None: no file there). InputError for a directory, a
    dangling symlink, something not a regular file, or a file that cannot be read."""
    if path.is_dir():
        raise InputError(str(path), None, "is a directory, expected the clustercert store (an SQLite file)")
    if not path.exists():
        if path.is_symlink():
            raise InputError(str(path), None, "is a dangling symlink, expected the clustercert store")
        return None
    if not path.is_file():
        raise InputError(str(path), None, "is not a regular file, expected the clustercert store")
    try:
        with open(path, "rb") as f:
            return f.read(100)
    except OSError as exc:
        raise InputError(str(path), None, f"cannot read the store: {exc.strerror}") from None


def _read_schema(path: Path, head: bytes) -> tuple[int, set[str], int, dict[str, set[str]], str]:
    """(application_id, tables, user_version, the known tables' columns, quick_check's answer), read only.
    WAL-mode files (header bytes 18/19 = 2): a read-only connection would create -wal/-shm beside a
    foreign file, so it is read immutable unless a live store's -wal is already there."""
    wal = head[18:20] == b"\x02\x02"
    mode = "immutable=1" if wal and not Path(f"{path}-wal").exists() else "mode=ro"
    try:
        with closing(sqlite3.connect(f"file:{quote(str(path.resolve()))}?{mode}", uri=True)) as db:
            app_id = db.execute("PRAGMA application_id").fetchone()[0]
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            version = db.execute("PRAGMA user_version").fetchone()[0]
            columns = {t: {r[1] for r in db.execute(f"PRAGMA table_info({t})")} for t in tables & TABLES}
            ok = db.execute("PRAGMA quick_check").fetchone()[0]
    except sqlite3.Error as exc:
        raise InputError(str(path), None, f"corrupt SQLite file ({exc}): not touched") from None
    return app_id, tables, version, columns, ok


def check_store_file(path: Path) -> bool:
    """Refuse (InputError naming the path) anything at ``path`` that is not a clustercert store, before a
    byte of it is written: a directory, garbage, a corrupt SQLite file, another program's SQLite file.
    Only reads: the header, then the schema over a read-only connection. True when the file exists."""
    head = _store_header(path)
    if head is None:
        return False
    if not head:
        return True  # an empty file holds nothing yet: it becomes the store
    if not head.startswith(SQLITE_MAGIC) or len(head) < 100:
        raise InputError(
            str(path), None, "not a clustercert store (not an SQLite file): refusing to touch it"
        )
    app_id, tables, version, columns, ok = _read_schema(path, head)
    if ok != "ok":
        raise InputError(str(path), None, f"corrupt store (integrity check: {ok}): not touched")
    if app_id not in (0, APPLICATION_ID) or (tables and "runs" not in tables) or not tables <= TABLES:
        other = ", ".join(sorted(tables - TABLES)[:3]) or f"application_id {app_id:#x}"
        raise InputError(
            str(path), None, f"another program's SQLite file ({other}), not a clustercert store: not touched"
        )
    if version > SCHEMA_VERSION:
        raise InputError(str(path), None, f"store of a newer clustercert (schema version {version}, this one "
                         f"reads up to {SCHEMA_VERSION}): not touched")
    for table, have in columns.items():
        if unknown := have - _known_columns()[table]:
            raise InputError(str(path), None, f"another program's SQLite file (table {table} has columns "
                             f"{', '.join(sorted(unknown)[:3])}), not a clustercert store: not touched")
    return True


def _known_columns() -> dict[str, set[str]]:
    """Each table's columns in this version's schema (with its migrations): an older store's are a subset."""
    global _KNOWN
    if _KNOWN is None:
        with closing(sqlite3.connect(":memory:")) as db:
            db.executescript(SCHEMA)
            _KNOWN = {t: {r[1] for r in db.execute(f"PRAGMA table_info({t})")} for t in TABLES}
        for table, column, _decl in MIGRATIONS:
            _KNOWN[table].add(column)
    return _KNOWN


_KNOWN: dict[str, set[str]] | None = None


class Store:
    def __init__(self, path: Path | None = None):
        self.path = Path(path or default_path())
        exists = check_store_file(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not exists:
            try:
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:  # another run created it meanwhile
                check_store_file(self.path)
        elif self.path.stat().st_mode & 0o077:
            os.chmod(self.path, 0o600)  # our own store: run results are the operator's alone
        with closing(self._connect()) as db:
            # creation or an older store's migration: one transaction, so a kill leaves it as it was
            try:
                db.executescript("BEGIN IMMEDIATE;\n" + SCHEMA)  # left open: the rest joins it
                for table, column, decl in MIGRATIONS:
                    if column not in {r["name"] for r in db.execute(f"PRAGMA table_info({table})")}:
                        db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
                db.execute(f"PRAGMA application_id={APPLICATION_ID}")
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                db.commit()
            except BaseException:
                db.rollback()
                raise

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level="DEFERRED")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
        db.row_factory = sqlite3.Row
        return db

    def start_run(self, run_id: str, kind: str, inventory: str, meta: dict | None = None) -> None:
        with closing(self._connect()) as db, db:
            db.execute("INSERT INTO runs (id, kind, inventory, started, status, meta) VALUES (?,?,?,?,?,?)",
                       (run_id, kind, inventory, time.time(), "running", json.dumps(meta or {})))

    def finish_run(
        self,
        run_id: str,
        verdict: str,
        nodes: dict[str, dict],
        links: Iterable[dict] = (),
        status: str = "done",
        actions: dict[str, Iterable[dict]] | None = None,
    ) -> None:
        """Record every node's verdict, findings and hardware (the certificate's ``nodes`` object), its links
        and what it did to other systems (``actions``: system -> the certificate's entries, e.g. {"slurm":
        [...]}) in one transaction."""
        with closing(self._connect()) as db, db:
            for node, body in nodes.items():
                db.execute("INSERT OR REPLACE INTO nodes (run_id, node, verdict, detail) VALUES (?,?,?,?)",
                           (run_id, node, body["verdict"], body.get("detail", "")))
                if body.get("hardware") is not None:
                    db.execute("INSERT OR REPLACE INTO hardware (run_id, node, identity) VALUES (?,?,?)",
                               (run_id, node, json.dumps(body["hardware"], sort_keys=True)))
                texts: dict[str, str] = {}
                rows = []
                for f in body.get("findings", []):
                    text = finding_evidence(body, f)
                    # the reference a packed finding carries is its text's (pack_evidence, node_findings): not
                    # hashed again
                    ref = (f["evidence_ref"] if f.get("evidence") is None and f.get("evidence_ref") else
                           evidence_ref(text)) if text else None
                    if ref:
                        texts.setdefault(ref, text)
                    rows.append(
                        (
                            run_id,
                            node,
                            f["check"],
                            f["status"],
                            f.get("subject", ""),
                            str(f.get("expected", "")),
                            str(f.get("observed", "")),
                            "",
                            ref,
                            f.get("value"),
                            f.get("unit"),
                        )
                    )
                db.executemany("INSERT OR IGNORE INTO evidence (run_id, node, ref, text) VALUES (?,?,?,?)",
                               [(run_id, node, ref, text) for ref, text in texts.items()])
                db.executemany(
                    "INSERT INTO findings (run_id, node, check_id, status, subject, expected, observed, "
                    "evidence, evidence_ref, value, unit) VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
            db.executemany(
                "INSERT INTO links (run_id, a, b, fabric, probe, value, unit, status, round) VALUES (?,?,?,?,"
                "?,?,?,?,?)",
                [(run_id, lk["a"], lk["b"], lk.get("fabric"), lk["probe"], lk.get("value"), lk.get("unit"),
                  lk["status"], lk.get("round")) for lk in links],
            )
            db.executemany(
                "INSERT INTO actions (run_id, system, node, target, action, reason, ok, detail) VALUES (?,?,"
                "?,?,?,?,?,?)",
                [
                    (
                        run_id,
                        system,
                        a["node"],
                        a.get("slurm_node", ""),
                        a["action"],
                        a.get("reason", ""),
                        int(bool(a["ok"])),
                        a.get("detail", ""),
                    )
                    for system, entries in (actions or {}).items()
                    for a in entries
                ],
            )
            db.execute(
                "UPDATE runs SET finished=?, status=?, verdict=? WHERE id=?",
                (time.time(), status, verdict, run_id),
            )

    def runs(self, kind: str | None = None, limit: int = 50) -> list[dict]:
        with closing(self._connect()) as db:
            q = "SELECT * FROM runs" + (" WHERE kind=?" if kind else "") + " ORDER BY started DESC LIMIT ?"
            args = (kind, limit) if kind else (limit,)
            return [dict(r) for r in db.execute(q, args)]

    def findings(self, run_id: str, node: str | None = None) -> list[dict]:
        """The run's findings, each with its evidence text (stored once per node, or inline in older runs)."""
        with closing(self._connect()) as db:
            q = ("SELECT f.run_id, f.node, f.check_id, f.status, f.subject, f.expected, f.observed,"
                 " COALESCE(e.text, f.evidence) AS evidence, f.value, f.unit FROM findings f"
                 " LEFT JOIN evidence e ON e.run_id = f.run_id AND e.node = f.node AND e.ref = f.evidence_ref"
                 " WHERE f.run_id=?" + (" AND f.node=?" if node else ""))
            return [dict(r) for r in db.execute(q, (run_id, node) if node else (run_id,))]

    def node_verdicts(self, run_id: str) -> dict[str, str]:
        with closing(self._connect()) as db:
            return {
                r["node"]: r["verdict"]
                for r in db.execute("SELECT node, verdict FROM nodes WHERE run_id=?", (run_id,))
            }

    def integrity_ok(self) -> bool:
        with closing(self._connect()) as db:
            return db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    def history(self, node: str | None = None, limit: int = 30) -> list[dict]:
        """Per-node trend rows, newest first: run, time, kind, node verdict, failing checks, probe values."""
        with closing(self._connect()) as db:
            q = (
                "SELECT r.id, r.kind, r.started, n.node, n.verdict FROM nodes n JOIN runs r ON r.id = "
                "n.run_id"
                + (" WHERE n.node = ?" if node else "")
                + " ORDER BY r.started DESC LIMIT ?"
            )
            rows = [dict(r) for r in db.execute(q, (node, limit) if node else (limit,))]
            for row in rows:
                fs = db.execute(
                    "SELECT check_id, status, subject, value, unit FROM findings WHERE run_id=? AND node=?",
                    (row["id"], row["node"]),
                ).fetchall()
                row["failing"] = sorted({f["check_id"] for f in fs if f["status"] in ("fail", "error")})
                values: dict[str, list[float]] = {}
                for f in fs:
                    if f["value"] is not None and f["check_id"].startswith("probe."):
                        values.setdefault(f"{f['check_id']} [{f['unit']}]", []).append(f["value"])
                row["values"] = {k: round(min(v), 3) for k, v in sorted(values.items())}
            return rows

    def set_meta(self, run_id: str, meta: dict) -> None:
        with closing(self._connect()) as db, db:
            db.execute("UPDATE runs SET meta=? WHERE id=?", (json.dumps(meta, default=str), run_id))

    def get_run(self, run_id: str) -> dict | None:
        with closing(self._connect()) as db:
            row = db.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()
            return dict(row) if row else None

    def latest_certified(self, inventory: str) -> dict | None:
        with closing(self._connect()) as db:
            row = db.execute("SELECT * FROM runs WHERE kind='certify' AND verdict='pass' AND status='done' "
                             "AND inventory=? ORDER BY started DESC LIMIT 1", (inventory,)).fetchone()
            return dict(row) if row else None

    def actions(self, run_id: str) -> list[dict]:
        with closing(self._connect()) as db:
            return [
                dict(r, ok=bool(r["ok"]))
                for r in db.execute("SELECT * FROM actions WHERE run_id=? ORDER BY system, node", (run_id,))
            ]

    def hardware(self, run_id: str) -> dict[str, dict]:
        """Per node, the hardware identity the run recorded (nodes without one are absent)."""
        with closing(self._connect()) as db:
            return {r["node"]: json.loads(r["identity"])
                    for r in db.execute("SELECT node, identity FROM hardware WHERE run_id=?", (run_id,))}

    def links(self, run_id: str) -> list[dict]:
        with closing(self._connect()) as db:
            return [dict(r) for r in db.execute("SELECT * FROM links WHERE run_id=?", (run_id,))]

    # ---- retention ----------------------------------------------------------------------------------

    def protected(self, leaving: set[str] = frozenset()) -> set[str]:
        """Runs prune never removes: each inventory's latest certified run (the baseline drift compares
        against by default), runs still going, and the baseline each recorded drift run named (but for
        the drift runs in ``leaving``, which go themselves)."""
        with closing(self._connect()) as db:
            keep = {r[0] for r in db.execute(
                "SELECT id FROM runs r WHERE kind='certify' AND verdict='pass' AND status='done' AND started "
                "= ( SELECT MAX(started) FROM runs s WHERE s.kind='certify' AND s.verdict='pass' AND "
                "s.status='done' AND s.inventory = r.inventory)")}
            keep |= {r[0] for r in db.execute("SELECT id FROM runs WHERE status='running'")}
            for run_id, meta in db.execute("SELECT id, meta FROM runs WHERE kind='drift'"):
                if run_id in leaving:
                    continue
                try:
                    base = json.loads(meta or "{}").get("baseline")
                except (ValueError, AttributeError):
                    base = None
                if isinstance(base, str):
                    keep.add(base)
        return keep

    def prune(self, keep: int | None = None, older_than_s: float | None = None, now: float | None = None,
              dry_run: bool = False) -> dict:
        """Remove runs (and, by cascade, their nodes, findings, evidence, links, actions, hardware): those
        beyond the newest ``keep`` and/or started more than ``older_than_s`` seconds before ``now`` (both
        given: a run must be both); never a protected run. One IMMEDIATE transaction, then VACUUM to hand
        the space back. The caller holds the state's run locks (runlock.all_locks)."""
        now = time.time() if now is None else now
        with closing(self._connect()) as db:
            ids = [r[0] for r in db.execute("SELECT id, started FROM runs ORDER BY started DESC, id DESC")]
            started = dict(db.execute("SELECT id, started FROM runs").fetchall())
        doomed = set(ids[keep:]) if keep is not None else set(ids)
        if older_than_s is not None:
            doomed = {i for i in doomed if started[i] < now - older_than_s}
        kept_baselines = sorted(doomed & self.protected(doomed))
        doomed -= set(kept_baselines)
        before = self.size()
        if doomed and not dry_run:
            db = self._connect()
            try:
                db.execute("BEGIN IMMEDIATE")
                db.executemany("DELETE FROM runs WHERE id=?", [(i,) for i in sorted(doomed)])
                db.commit()
                db.isolation_level = None
                db.execute("VACUUM")
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except BaseException:
                if db.in_transaction:
                    db.rollback()
                raise
            finally:
                db.close()
        return {"removed": sorted(doomed), "kept": len(ids) - len(doomed), "protected": kept_baselines,
                "bytes_before": before, "bytes_after": self.size(), "dry_run": dry_run}

    def size(self) -> int:
        """The store's bytes on disk: the database file and its write-ahead log."""
        wal = Path(f"{self.path}-wal")
        return self.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def default_keep(state: Path | None = None) -> int:
    """How many runs `report prune` keeps when told neither --keep nor --older-than: ``report.keep`` in
    ``<state>/config.yml`` (a positive integer), else DEFAULT_KEEP. InputError naming the file and key."""
    path = Path(state or paths.state_dir()) / CONFIG_NAME
    if not path.exists():
        return DEFAULT_KEEP
    doc = load_yaml_file(path) or {}
    if not isinstance(doc, dict):
        raise InputError(str(path), None, "expected a mapping at the top level")
    report = doc.get("report", {})
    value = report.get("keep", DEFAULT_KEEP) if isinstance(report, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(str(path), "report.keep", f"expected a positive integer, got {value!r}")
    return value
