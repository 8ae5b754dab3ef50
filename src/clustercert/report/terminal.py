"""Terminal rendering (tables) for the CLI. Pure presentation: data in, text out."""

from __future__ import annotations

import os
import sys
import time

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from clustercert.checks import DISRUPTIVE, components, disruptive_component
from clustercert.report.catalogue import value_text
from clustercert.report.common import more_text, not_passing, not_passing_title
from clustercert.report.documents import BOOTSTRAP_COUNTS
from clustercert.report.text import fold_findings, fold_line, slurm_line


def console() -> Console:
    """The console every table is printed on (the lab's status too: clustercert_lab.cli): a pipe or a CI log
    gets full-width tables rather than rich's 80-column default."""
    return Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)


def print_inventory(view: dict) -> None:
    con = console()
    con.print(f"inventory: {view['inventory']}")
    t = Table(title="hosts", title_justify="left")
    for col in ("host", "address", "profile", "profile from", "groups", "overrides"):
        t.add_column(col)
    for name, h in sorted(view["hosts"].items()):
        t.add_row(name, str(h["address"]), h["profile"], h.get("profile_from", ""), ",".join(h["groups"]),
                  "yes" if h["overrides"] else "")
    con.print(t)
    for label, p in view["profiles"].items():
        t = Table(title=f"profile {label}: effective thresholds", title_justify="left")
        for col in ("threshold", "floor", "ceiling", "unit", "source"):
            t.add_column(col, overflow="fold")
        for name, th in sorted(p["thresholds"].items()):
            t.add_row(name, _num(th["floor"]), _num(th["ceiling"]), th["unit"], th["source"])
        con.print(t)


def _num(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return f"{v:g}" if isinstance(v, float) else str(v)


_STYLE = {
    "pass": "green",
    "fail": "bold red",
    "error": "yellow",
    "unreachable": "bold magenta",
    "skip": "dim",
}


def _styled(cell: str) -> str:
    style = _STYLE.get(cell.split(" ")[0])
    return f"[{style}]{cell}[/{style}]" if style else cell


# the first table's nodes that did not pass; the rest are counted (the JSON has them all)
FIRST_TABLE_ROWS = 50


def print_not_passing(con: Console, nodes: dict, head: str) -> None:
    """What every verb's output opens with: one table of the nodes that did not pass, each with its first
    failing check and what it observed (an unreachable node: why); one line when every node passed.
    ``nodes``: name -> {"verdict", "findings" (dicts), "detail"}, as the certificate holds them."""
    rows = not_passing(nodes)
    what = not_passing_title(nodes, rows)
    title = f"{head} — {what[:1].lower()}{what[1:]}"
    if not rows:
        con.print(f"[green]{escape(title)}[/green]")
        return
    t = Table(title=escape(title), title_justify="left", title_style="bold red")
    t.add_column("node", no_wrap=True)
    t.add_column("status", no_wrap=True)
    t.add_column("first failing check", overflow="fold")
    t.add_column("why", overflow="fold", ratio=1)
    for r in rows[:FIRST_TABLE_ROWS]:
        t.add_row(escape(r["node"]), _styled(r["verdict"]), escape(r["check"] or "-"),
                  escape(r["why"]) + (f" [dim]({more_text(r['more'])})[/dim]" if r["more"] else ""))
    if len(rows) > FIRST_TABLE_ROWS:
        t.caption = (
            f"… and {len(rows) - FIRST_TABLE_ROWS} more nodes did not pass (--format json lists every one)"
        )
        t.caption_justify = "left"
    con.print(t)


def print_validate(rows: list[dict], comp_names: list[str], results: dict, run_id: str) -> None:
    con = console()
    verdict = "pass" if all(r.verdict == "pass" for r in results.values()) else "fail"
    print_not_passing(con, {n: r.to_json() | {"detail": r.detail} for n, r in results.items()},
                      f"validate {run_id}: {verdict.upper()}")
    t = Table(title=f"validate {run_id}: node x component", title_justify="left")
    t.add_column("node")
    for c in comp_names:
        t.add_column(c)
    t.add_column("verdict")
    for row in rows:
        t.add_row(row["node"], *(_styled(row[c]) for c in comp_names), _styled(row["verdict"]))
    con.print(t)
    for g in fold_findings(results):
        if g["status"] == "unreachable" and len(g["nodes"]) == 1:
            # the first table gives each unreachable node's reason; a reason several share folds here
            continue
        style = _STYLE[g["status"]]
        line = fold_line(g)
        head, _, rest = line.partition(": ") if g["status"] != "unreachable" else (line, "", "")
        if rest:
            con.print(f"[{style}]{escape(head)}[/{style}]: {escape(rest)}")
        else:
            con.print(f"[{style}]{escape(head)}[/{style}]")


def print_certify(cert: dict, out_dir, run_id: str, probe_seconds: float) -> None:
    con = console()
    print_not_passing(con, cert["nodes"], f"certify {run_id}: {cert['verdict'].upper()}")
    t = Table(title=f"certify {run_id}: every node", title_justify="left")
    for col in ("node", "verdict", "failing checks"):
        t.add_column(col)
    for name, n in sorted(cert["nodes"].items()):
        bad = sorted({f["check"] for f in n["findings"] if f["status"] in ("fail", "error")})
        t.add_row(name, _styled(n["verdict"]), ", ".join(bad) or n.get("detail", ""))
    con.print(t)
    _print_rounds_and_localisation(con, cert)
    failing_links = [lk for lk in cert["links"] if lk["status"] != "pass"]
    for lk in failing_links[:20]:
        where = f"fabric {lk['fabric']}" if lk["fabric"] is not None else "all rails"
        seen = (
            f"{_num(lk['value'])} {lk['unit']}"
            if lk["value"] is not None
            else (lk.get("observed") or "no value")
        )
        con.print(
            f"link {lk['a']}->{lk['b']} {where} {lk['probe']}: {lk['status']} {seen} (round {lk['round']})"
        )
    for f in cert.get("cluster_findings") or []:  # probe.nccl_cluster
        con.print(
            f"cluster {f['check']} {f['subject']}: {f['status']} {f.get('observed') or ''}", soft_wrap=True
        )
    for a in cert.get("slurm", []):
        con.print(slurm_line(a))
    con.print(
        f"probes took {probe_seconds:.1f} s over {cert['rounds']} round(s); certificate: {out_dir}/"
        "certificate.json"
    )
    if tm := cert.get("timing"):
        con.print(f"probes: {tm['probe_wall_s']:.1f} s wall, {tm['probe_tool_s']:.1f} s in the tools, "
                  f"control overhead {tm['control_overhead_s']:.1f} s ({tm['control_overhead_pct']:.1f}%); "
                  f"validators {tm['validate_s']:.1f} s")


def print_probe(doc: dict) -> None:
    con = console()
    print_not_passing(con, doc["nodes"], f"probe {doc['run']}: {doc['verdict'].upper()}")
    t = Table(
        title=f"probe {doc['run']}: {doc['verdict'].upper()} ({doc['rounds']} pair round(s), "
              f"{doc['seconds']:.1f} s)",
        title_justify="left",
    )
    for col in ("probe", "node / pair", "subject", "value", "status", "expected", "round"):
        t.add_column(col, overflow="fold")
    for name, n in sorted(doc["nodes"].items()):
        if n["verdict"] == "unreachable":
            t.add_row("-", name, "", "", _styled("unreachable"), n.get("detail", ""), "")
        for f in n["findings"]:
            value = (
                f"{_num(f['value'])} {f.get('unit') or ''}".strip()
                if f.get("value") is not None
                else f["observed"]
            )
            t.add_row(
                f["check"].removeprefix("probe."),
                name,
                f["subject"],
                value,
                _styled(f["status"]),
                f["expected"],
                "",
            )
    for lk in doc["links"]:
        value = f"{_num(lk['value'])} {lk['unit']}" if lk["value"] is not None else ""
        t.add_row(
            lk["probe"],
            f"{lk['a']}->{lk['b']}",
            lk["subject"],
            value,
            _styled(lk["status"]),
            "",
            str(lk["round"]),
        )
    for f in doc.get("cluster_findings") or []:  # probe.nccl_cluster: the cluster's, across its nodes
        value = (
            f"{_num(f['value'])} {f.get('unit') or ''}".strip()
            if f.get("value") is not None
            else f["observed"]
        )
        t.add_row(
            f["check"].removeprefix("probe."),
            "cluster",
            f["subject"],
            value,
            _styled(f["status"]),
            f["expected"],
            "",
        )
    con.print(t)
    _print_rounds_and_localisation(con, doc)
    for name, n in sorted(doc["nodes"].items()):  # the reason in full: a table cell folds it
        if n["verdict"] == "unreachable":
            con.print(f"{name}: unreachable: {n.get('detail', '')}", soft_wrap=True)


def _print_rounds_and_localisation(con, doc: dict) -> None:
    """What each round after the first asked, and what localisation concluded."""
    for r in doc.get("schedule", [])[1:]:
        con.print(f"round {r['round']} ({r['pairs']} pair(s)): {r['question']}", soft_wrap=True)
    for loc in doc.get("localisation", []):
        con.print(
            f"localised: {loc['kind']} {loc.get('node') or loc.get('link')}: {loc['reason']}", soft_wrap=True
        )


def print_history(rows: list[dict]) -> None:
    con = console()
    t = Table(title="history (newest first)", title_justify="left")
    for col in ("time", "run", "kind", "node", "verdict", "failing checks", "probe values (min)"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(
            time.strftime("%Y-%m-%d %H:%M", time.localtime(r["started"])),
            r["id"],
            r["kind"],
            r["node"],
            _styled(r["verdict"]),
            ", ".join(r["failing"]),
            ", ".join(f"{k}={v:g}" for k, v in r["values"].items()),
        )
    con.print(t)


def print_runs(rows: list[dict]) -> None:
    con = console()
    t = Table(title="runs (newest first)", title_justify="left")
    for col in ("run", "kind", "inventory", "status", "verdict"):
        t.add_column(col)
    for r in rows:
        status = r["status"] if r["status"] != "running" or r["finished"] else "running/interrupted"
        t.add_row(r["id"], r["kind"], r["inventory"], status, _styled(r["verdict"] or "-"))
    con.print(t)


def print_drift(doc: dict, run_id: str) -> None:
    con = console()
    items = doc["items"]
    t = Table(title=f"drift {run_id} against {doc['baseline']}: {len(items)} item(s)", title_justify="left")
    for col in ("node", "kind", "check / task", "before", "after"):
        t.add_column(col, overflow="fold")
    for i in items:
        t.add_row(i["node"], i["kind"], i.get("check") or i.get("task") or "", (i.get("before") or "")[:80],
                  (i.get("after") or "")[:80])
    con.print(t)
    # why a node could not be looked at (host key, refused, timeout): the table's cells are too short for it
    for i in items:
        if i.get("check") == "node.reachable" and i.get("detail"):
            con.print(f"{i['node']}: unreachable: {i['detail']}", soft_wrap=True)
        elif i.get("kind") == "hardware" and i.get("detail"):  # the part: "GPU3 00000000:4C:00.0: swapped"
            con.print(f"{i['node']}: hardware: {i['detail']}", soft_wrap=True)
    if doc.get("fixed"):
        f = doc["fixed"]
        con.print(f"--fix: bootstrapped {', '.join(f['nodes']) or 'nothing'} (tags "
                  f"{', '.join(f['tags']) or 'all'}), re-validated: {f['revalidated']}")


def print_checks(doc: dict) -> None:
    """`clustercert checks`: one row per id; the expectations of each profile on their own lines."""
    con = console()
    t = Table(title=f"checks and probes ({len(doc['entries'])} ids; profiles: {', '.join(doc['profiles'])})",
              title_justify="left", show_lines=True)
    for col in ("id", "reads", "expects (profile: value, source)", "lab fault -> status"):
        t.add_column(col, overflow="fold")
    for e in doc["entries"]:
        first = next(iter(e["profiles"].values()))
        reads = "\n".join(r["command"] for r in first["reads"])
        expects = []
        for pname, p in e["profiles"].items():
            for x in p["expects"]:
                expects.append(f"{pname}: {x['key']} {value_text(x['value'])} ({x['source']})")
        lab = [f"{p['fault']}{''.join(f' {k}={v}' for k, v in p['params'].items())} -> {p['status']}"
               for p in e["lab"]["proofs"]]
        if e["lab"]["note"]:
            lab.append(("" if e["lab"]["fails_in_lab"] else "none fails it: ") + e["lab"]["note"])
        if not doc.get("lab_installed", True):
            lab = ["the lab (clustercert-lab) is not installed"]
        ident = e["id"] + (" (--disruptive)" if e["disruptive"] else "") + f"\n[dim]{escape(e['what'])}[/dim]"
        t.add_row(ident, escape(reads), escape("\n".join(expects) or "-"), escape("\n".join(lab)))
    con.print(t)


def summary_table(results: dict, comp_names: list[str]) -> list[dict]:
    """Rows of node x component: worst status and counts, for the terminal table."""
    rank = {"fail": 3, "error": 2, "pass": 1, "skip": 0}
    prefix = {c: components([c])[0].check_ids + (disruptive_component(c).check_ids if c in DISRUPTIVE else ())
              for c in comp_names}
    rows = []
    for name, r in sorted(results.items()):
        row = {"node": name, "verdict": r.verdict}
        for comp in comp_names:
            fs = [f for f in r.findings if f.check in prefix[comp]]
            if r.verdict == "unreachable":
                row[comp] = "unreachable"
            elif not fs:
                row[comp] = "-"
            else:
                worst = max(fs, key=lambda f: rank[f.status]).status
                n_bad = sum(1 for f in fs if f.status == worst)
                row[comp] = worst if worst in ("pass", "skip") else f"{worst} ({n_bad})"
        rows.append(row)
    return rows


def bootstrap_table(summary: dict, result, check: bool) -> str:
    """`bootstrap`'s output: per host the task counts, what changed (or would), the failures, the run."""
    t = Table(title="clustercert bootstrap" + (" (check mode: nothing was changed)" if check else ""),
              title_justify="left")
    t.add_column("host")
    for k in BOOTSTRAP_COUNTS:
        t.add_column(k, justify="right")
    t.add_column("result")
    for name, row in summary["hosts"].items():
        bad = row["failed"] or row["unreachable"]
        t.add_row(name, *(str(row[k]) for k in BOOTSTRAP_COUNTS), "FAILED" if bad else "ok")
    console = Console(record=True, width=120, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(t)
    lines = [console.export_text().rstrip()]
    if summary["changes"]:
        lines.append("")
        lines.append(("would change" if check else "changed") + ":")
        lines += [
            f"  {c['host']}: {c['role'] + ' : ' if c['role'] else ''}{c['task']}" for c in summary["changes"]
        ]
    for f in result.failures:
        lines.append(f"{f['status']}: {f['host']}: {f['task']}: {f['msg']}".rstrip(": "))
    lines.append(f"run: {result.run_dir}")
    return "\n".join(lines)
