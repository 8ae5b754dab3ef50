"""`clustercert report history|runs`: per-node trends and past runs from the store."""

from __future__ import annotations

import json

from clustercert.errors import EXIT_OK, InputError
from clustercert.record.store import Store, default_path
from clustercert.report import documents
from clustercert.report.terminal import print_history, print_runs


def run(args) -> int:
    started = documents.now()
    if not default_path().exists():
        raise InputError(str(default_path()), None, "no store yet: run `clustercert validate` or `certify` first")
    store = Store()
    if args.what == "history":
        rows = store.history(args.node)
        if args.node and not rows:
            raise InputError("--node", args.node, "no recorded results for this node")
    else:
        rows = store.runs()
        for r in rows:
            r["meta"] = json.loads(r["meta"]) if isinstance(r.get("meta"), str) and r["meta"] else (r.get("meta") or {})
    if args.format == "json":
        print(documents.dumps(documents.report_document(args.what, args.node, rows, started)))
    elif args.what == "history":
        print_history(rows)
    else:
        print_runs(rows)
    return EXIT_OK
