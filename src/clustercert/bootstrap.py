"""`clustercert bootstrap`: bring nodes to the pinned software state of their node-class profile.

Validates the inventory (every ``clustercert_*`` variable and each host's resolved profile), runs
``playbooks/bootstrap.yml`` through the engine with live progress, then prints a per-host summary
table, or with ``fmt="json"`` the document schemas/bootstrap.schema.json describes::

    {"schema": "clustercert.bootstrap/v1", "run", "started", "finished", "inventory", "check", "ok", ...,
     "hosts": {NAME: {"ok", "changed", "failed", "unreachable", "skipped"}},
     "changes": [{"host", "task", "role", "diff"}], "failures": [{"host", "task", "status", "msg"}]}

``changes`` lists every task that changed (or, under ``--check``, would change) something, with its
diff when ``--diff`` is given. Exit status: 0 when every host is ok, 1 when a host failed or was
unreachable (or the run itself failed).

Speed: when the ``mitogen`` package is importable the run uses its ``mitogen_linear`` strategy (one
persistent interpreter per host instead of one SSH round trip + Python start per task); set
``CLUSTERCERT_STRATEGY=linear`` to force Ansible's own strategy.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from clustercert import engine, paths
from clustercert.errors import EXIT_FINDINGS, EXIT_OK
from clustercert.inventory import load_inventory

PLAYBOOK = "bootstrap.yml"
SUMMARY_KEYS = ("ok", "changed", "failed", "unreachable", "skipped")


def strategy_env() -> dict[str, str]:
    """Environment selecting the fastest available strategy (mitogen when installed)."""
    wanted = os.environ.get("CLUSTERCERT_STRATEGY", "auto")
    if wanted not in ("auto", "mitogen_linear"):
        return {"ANSIBLE_STRATEGY": wanted} if wanted else {}
    try:
        import ansible_mitogen  # noqa: F401  (the mitogen package's Ansible integration)
    except ImportError:
        return {}
    plugin_dir = Path(sys.modules["ansible_mitogen"].__file__).resolve().parent / "plugins" / "strategy"
    if not plugin_dir.is_dir():
        return {}
    return {"ANSIBLE_STRATEGY_PLUGINS": str(plugin_dir), "ANSIBLE_STRATEGY": "mitogen_linear"}


def summarise(result: engine.RunResult) -> dict:
    """The JSON document `--format json` prints."""
    hosts = {
        name: {k: getattr(stats, k) for k in SUMMARY_KEYS}
        for name, stats in sorted(result.stats.items())
    }
    changes = [
        {"host": c["host"], "task": c["task"], "role": c.get("role", ""), "diff": c.get("diff")}
        for c in result.changes
    ]
    return {"hosts": hosts, "changes": changes}


def document(result: engine.RunResult, summary: dict, started: float, finished: float, inventory: str,
             check: bool, ok: bool) -> dict:
    """The `bootstrap --format json` document: the envelope (``run`` is the playbook run, its directory under
    the state directory's runs/), and per host the task counts, every change and every failure."""
    from clustercert import documents

    return documents.envelope("bootstrap", result.run_id, started, finished) | {
        "inventory": inventory, "check": check, "ok": ok, "status": result.status, "run_dir": str(result.run_dir),
        **summary, "failures": result.failures}


def render_table(summary: dict, result: engine.RunResult, check: bool) -> str:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="clustercert bootstrap" + (" (check mode: nothing was changed)" if check else ""),
              title_justify="left")
    t.add_column("host")
    for k in SUMMARY_KEYS:
        t.add_column(k, justify="right")
    t.add_column("result")
    for name, row in summary["hosts"].items():
        bad = row["failed"] or row["unreachable"]
        t.add_row(name, *(str(row[k]) for k in SUMMARY_KEYS), "FAILED" if bad else "ok")
    console = Console(record=True, width=120, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(t)
    lines = [console.export_text().rstrip()]
    if summary["changes"]:
        lines.append("")
        lines.append(("would change" if check else "changed") + ":")
        lines += [f"  {c['host']}: {c['role'] + ' : ' if c['role'] else ''}{c['task']}" for c in summary["changes"]]
    for f in result.failures:
        lines.append(f"{f['status']}: {f['host']}: {f['task']}: {f['msg']}".rstrip(": "))
    lines.append(f"run: {result.run_dir}")
    return "\n".join(lines)


def bootstrap(
    inventory: str,
    *,
    limit: str | None = None,
    check: bool = False,
    diff: bool = False,
    tags: str | None = None,
    skip_tags: str | None = None,
    extra_vars: dict | None = None,
    forks: int | None = None,
    fmt: str = "table",
    verbosity: int = 0,
) -> int:
    inv = load_inventory(inventory, limit)  # InputError (exit 2) before anything runs
    started = time.time()
    from clustercert.progress import PlaybookProgress

    progress = PlaybookProgress("bootstrap", enabled=fmt != "json" or sys.stderr.isatty())
    with progress:
        result = engine.run_playbook(
            paths.playbooks_dir() / PLAYBOOK,
            inv.source,
            limit=limit,
            check=check,
            diff=diff,
            tags=tags,
            skip_tags=skip_tags,
            extra_vars=extra_vars,
            forks=forks,
            verbosity=verbosity,
            progress=progress,
            envvars=strategy_env(),
        )
    summary = summarise(result)
    ok = result.ok and all(not (h["failed"] or h["unreachable"]) for h in summary["hosts"].values())
    if not summary["hosts"]:
        ok = False
    if fmt == "json":
        doc = document(result, summary, started, time.time(), str(inv.source), check, ok)
        print(json.dumps(doc, indent=2, default=str))
    else:
        print(render_table(summary, result, check))
    return EXIT_OK if ok else EXIT_FINDINGS
