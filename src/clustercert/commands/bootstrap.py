"""`clustercert bootstrap`: bring nodes to the pinned software state of their node-class profile.

Validates the inventory (every ``clustercert_*`` variable and each host's resolved profile), runs
``playbooks/bootstrap.yml`` through the engine with live progress, then prints a per-host summary
table, or with ``--format json`` the document schemas/bootstrap.schema.json describes::

    {"schema": "clustercert.bootstrap/v1", "run", "started", "finished", "inventory", "check", "ok", ...,
     "hosts": {NAME: {"ok", "changed", "failed", "unreachable", "skipped"}},
     "changes": [{"host", "task", "role", "diff"}], "failures": [{"host", "task", "status", "msg"}]}

``changes`` lists every task that changed (or, under ``--check``, would change) something, with its
diff when ``--diff`` is given; the table is followed by those diffs as ansible-playbook prints them
(clustercert.report.diffs). ``-v``..``-vvvv`` print Ansible's own output at that verbosity on stderr (in
place of the live table). ``--list-tasks``, ``--list-tags`` and ``--syntax-check`` print ansible-playbook's
answer on stdout and stop (exit 0, or 1 when it failed). Exit status: 0 when every host is ok, 1 when a host
failed or was unreachable (or the run itself failed). The run uses mitogen's strategy where it is installed
(clustercert.collect.engine.strategy_env).
"""

from __future__ import annotations

import sys
import time

from clustercert import paths
from clustercert.collect import engine
from clustercert.commands import STATEFUL
from clustercert.commands.common import inventory
from clustercert.commands.output import emit, exit_code, wants_json
from clustercert.report.diffs import render_changes
from clustercert.report.documents import bootstrap_document, bootstrap_summary
from clustercert.report.progress import PlaybookProgress
from clustercert.report.terminal import bootstrap_table

NEEDS = STATEFUL


def _listing(args) -> str | None:
    return next((name for name in engine.LISTINGS if getattr(args, name.replace("-", "_"), False)), None)


def _write(stream):
    def out(text: str) -> None:
        stream.write(text if text.endswith("\n") else text + "\n")
        stream.flush()
    return out


def run(args) -> int:
    extra_vars = engine.parse_extra_vars(args.extra_vars)
    inv = inventory(args)  # InputError (exit 2) before anything runs
    listing = _listing(args)
    started = time.time()
    # with -v, Ansible's own output (on stderr) takes the live table's place
    show = not listing and not args.verbose and (not wants_json(args) or sys.stderr.isatty())
    output = _write(sys.stdout) if listing else _write(sys.stderr) if args.verbose else None
    progress = PlaybookProgress("bootstrap", enabled=show, total=len(inv.hosts))
    with progress:
        result = engine.run_playbook(
            paths.playbooks_dir() / engine.BOOTSTRAP_PLAYBOOK, inv.source, limit=args.limit, check=args.check,
            diff=args.diff, tags=args.tags, skip_tags=args.skip_tags, extra_vars=extra_vars, forks=args.forks,
            verbosity=args.verbose, progress=progress, envvars=engine.strategy_env(),
            start_at_task=args.start_at_task, listing=listing, output=output,
        )
    if listing:
        return exit_code(result.rc == 0)
    summary = bootstrap_summary(result)
    ok = result.ok and all(not (h["failed"] or h["unreachable"]) for h in summary["hosts"].values())
    if not summary["hosts"]:
        ok = False

    def text() -> None:
        print(bootstrap_table(summary, result, args.check))
        if args.diff:
            print(render_changes(result.changes, args.check) or "(no task reported a difference)")

    emit(args, lambda: bootstrap_document(result, summary, started, time.time(), str(inv.source), args.check,
                                          ok), text)
    return exit_code(ok)
