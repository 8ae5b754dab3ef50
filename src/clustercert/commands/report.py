"""`clustercert report history|runs|prune|show`: per-node trends and past runs from the store; retention; a
certificate file (`show CERT`: summary.md's text, or with --format json the certificate expanded: each node's
findings and the links as lists of objects, as docs/schemas/certificate.schema.json describes; not
verified)."""

from __future__ import annotations

import json
from pathlib import Path

from clustercert.commands import STATEFUL
from clustercert.commands.output import emit
from clustercert.errors import EXIT_OK, InputError
from clustercert.record import certificate
from clustercert.record.store import Store, default_keep, default_path
from clustercert.report import documents
from clustercert.report.terminal import print_history, print_runs

NEEDS = STATEFUL


def run(args) -> int:
    started = documents.now()
    cert_path = getattr(args, "report_certificate", None)
    if args.what == "show":
        return show(args, cert_path)
    if cert_path is not None:
        raise InputError("CERT", cert_path, "only `report show` takes a certificate file")
    if not default_path().exists():
        raise InputError(str(default_path()), None,
                         "no store yet: run `clustercert validate` or `certify` first")
    store = Store()
    if args.what == "prune":
        return prune(args, store, started)
    if (getattr(args, "keep", None) or getattr(args, "older_than", None) or getattr(args, "dry_run", False)):
        raise InputError("--keep/--older-than/--dry-run", args.what, "only `report prune` takes them")
    rows = _rows(args, store)
    emit(args, lambda: documents.report_document(args.what, args.node, rows, started),
         lambda: print_history(rows) if args.what == "history" else print_runs(rows))
    return EXIT_OK


def _rows(args, store: Store) -> list[dict]:
    """``report history``: the node's (or every node's) results; ``report runs``: the runs, their meta
    read."""
    if args.what == "history":
        rows = store.history(args.node)
        if args.node and not rows:
            raise InputError("--node", args.node, "no recorded results for this node")
        return rows
    rows = store.runs()
    for r in rows:
        meta = r.get("meta")
        r["meta"] = json.loads(meta) if isinstance(meta, str) and meta else (meta or {})
    return rows


def prune(args, store: Store, started) -> int:
    """``report prune``: --keep N and/or --older-than D; neither: the configured keep."""
    if args.node:
        raise InputError("--node", args.node, "`report prune` prunes whole runs, not one node's")
    keep = args.keep if args.keep or args.older_than else default_keep()
    result = store.prune(keep, args.older_than, dry_run=args.dry_run)
    rows = [{"id": i, "action": "would remove" if args.dry_run else "removed"} for i in result["removed"]]
    rows += [{"id": i, "action": "kept: a baseline"} for i in result["protected"]]
    verb = "would remove" if args.dry_run else "removed"
    emit(args, lambda: documents.report_document("prune", None, rows, started) | {"prune": result},
         lambda: print(f"{verb} {len(result['removed'])} run(s), kept {result['kept']} "
                       f"({len(result['protected'])} kept as baselines); store {result['bytes_before']} -> "
                       f"{result['bytes_after']} bytes"))
    return EXIT_OK


def show(args, cert_path: str | None) -> int:
    """``report show CERT``: the certificate file read (and refused, exit 2, where it is not a certificate or
    its tables are malformed) and printed expanded."""
    if cert_path is None:
        raise InputError("CERT", None,
                         "`report show` needs a certificate file: clustercert report show "
                         "cert/certificate.json")
    if (args.node or getattr(args, "keep", None) or getattr(args, "older_than", None)
            or getattr(args, "dry_run", False)):
        raise InputError("--node/--keep/--older-than/--dry-run", "show",
                         "`report show` takes a certificate file only")
    try:
        cert = certificate.expanded(certificate.load_certificate(Path(cert_path)))
    except ValueError as e:
        raise InputError(cert_path, "nodes/links", f"malformed table: {e}") from None
    emit(args, cert, lambda: print(summary_text(cert), end=""))
    return EXIT_OK


def summary_text(cert: dict) -> str:
    """summary.md's text (report.markdown, imported only where it is printed)."""
    from clustercert.report.markdown import render_summary

    return render_summary(cert)
