"""`clustercert bootstrap`: bring nodes to the pinned software state of their node-class profile.

Validates the inventory (every ``clustercert_*`` variable and each host's resolved profile), runs
``playbooks/bootstrap.yml`` through the engine with live progress, then prints a per-host summary
table, or with ``--format json`` the document schemas/bootstrap.schema.json describes::

    {"schema": "clustercert.bootstrap/v1", "run", "started", "finished", "inventory", "check", "ok", ...,
     "hosts": {NAME: {"ok", "changed", "failed", "unreachable", "skipped"}},
     "changes": [{"host", "task", "role", "diff"}], "failures": [{"host", "task", "status", "msg"}]}

``changes`` lists every task that changed (or, under ``--check``, would change) something, with its
diff when ``--diff`` is given. Exit status: 0 when every host is ok, 1 when a host failed or was
unreachable (or the run itself failed). The run uses mitogen's strategy where it is installed
(clustercert.collect.engine.strategy_env).
"""

from __future__ import annotations

import json
import sys
import time

from clustercert import paths
from clustercert.collect import engine
from clustercert.commands.common import inventory
from clustercert.errors import EXIT_FINDINGS, EXIT_OK
from clustercert.report.documents import bootstrap_document, bootstrap_summary
from clustercert.report.progress import PlaybookProgress
from clustercert.report.terminal import bootstrap_table


def run(args) -> int:
    extra_vars = engine.parse_extra_vars(args.extra_vars)
    inv = inventory(args)  # InputError (exit 2) before anything runs
    started = time.time()
    progress = PlaybookProgress("bootstrap", enabled=args.format != "json" or sys.stderr.isatty())
    with progress:
        result = engine.run_playbook(
            paths.playbooks_dir() / engine.BOOTSTRAP_PLAYBOOK, inv.source, limit=args.limit, check=args.check,
            diff=args.diff, tags=args.tags, skip_tags=args.skip_tags, extra_vars=extra_vars, forks=args.forks,
            verbosity=args.verbose, progress=progress, envvars=engine.strategy_env(),
        )
    summary = bootstrap_summary(result)
    ok = result.ok and all(not (h["failed"] or h["unreachable"]) for h in summary["hosts"].values())
    if not summary["hosts"]:
        ok = False
    if args.format == "json":
        doc = bootstrap_document(result, summary, started, time.time(), str(inv.source), args.check, ok)
        print(json.dumps(doc, indent=2, default=str))
    else:
        print(bootstrap_table(summary, result, args.check))
    return EXIT_OK if ok else EXIT_FINDINGS
