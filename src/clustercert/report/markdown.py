"""summary.md: verdict, then one table of the nodes that did not pass and why (each one's first failing check
and what it observed; an unreachable node's reason), then the run, counts, failing nodes with every failing
check, localisation, the rounds and their questions, links (what a failing link observed), Slurm actions.
Above COLLAPSE_NODES nodes the link table lists the measurements that did not pass, with a count of those that
did per channel."""

from __future__ import annotations

from collections import Counter

from clustercert.report.common import (
    COLLAPSE_NODES,
    aggregate,
    by_check,
    channel_title,
    clean,
    counts,
    duration,
    eo,
    fabric_of,
    fingerprint_of,
    link_groups,
    link_order,
    link_threshold,
    loc_subject,
    more_text,
    natural,
    node_names,
    not_passing,
    not_passing_title,
    threshold_text,
    unit_label,
    val,
)


def md(text) -> str:
    """One Markdown table cell / inline text: no newlines, pipes and backticks escaped."""
    s = clean(text).replace("\r", " ").replace("\n", " ")
    return s.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`").replace("<", "&lt;")


def _counts_table(cert: dict) -> list[str]:
    c = counts(cert)
    out = ["| | total | pass | fail | error | other |", "|---|---:|---:|---:|---:|---:|"]
    for key, title in (("nodes", "nodes"), ("checks", "node × check"), ("links", "links")):
        cc = c[key]
        other = sum(cc.values()) - cc["pass"] - cc["fail"] - cc["error"]
        extra = ", ".join(f"{k} {cc[k]}" for k in sorted(cc) if k not in ("pass", "fail", "error"))
        out.append(f"| {title} | {sum(cc.values())} | {cc['pass']} | {cc['fail']} | {cc['error']} | "
                   f"{other}{f' ({extra})' if extra else ''} |")
    return out


def _first_table(cert: dict) -> list[str]:
    """The table summary.md opens with: every node that did not pass, with why."""
    nodes = cert.get("nodes") or {}
    rows = not_passing(nodes)
    out = [f"## {not_passing_title(nodes, rows)}", ""]
    if rows:
        out += ["| node | status | first failing check | why | |", "|---|---|---|---|---|"]
        for r in rows:
            check = f"`{md(r['check'])}`" if r["check"] else "—"
            out.append(
                f"| **{md(r['node'])}** | {md(r['verdict'])} | {check} | {md(r['why'])} | "
                f"{more_text(r['more'])} |"
            )
    bad = sum(1 for lk in cert.get("links") or [] if lk.get("status") != "pass")
    if bad:
        out += [
            "",
            f"{bad} link measurement{'s' if bad != 1 else ''} did not pass: see Localisation and Links.",
        ]
    return out


def _failing_nodes(cert: dict) -> list[str]:
    bad_nodes = [
        n for n in sorted(cert.get("nodes") or {}, key=natural) if cert["nodes"][n].get("verdict") != "pass"
    ]
    out = [] if bad_nodes else ["None: every node passed."]
    for n in bad_nodes:
        node = cert["nodes"][n]
        out.append(f"- **{md(n)}** — {md(node.get('verdict'))}")
        shown = False
        for check, fs in by_check(node).items():
            st = aggregate(f.get("status") for f in fs)
            if st in ("fail", "error"):
                shown = True
                worst = [f for f in fs if f.get("status") == st]
                out.append(f"  - `{md(check)}` {st}: " + "; ".join(md(eo(f)) for f in worst[:3])
                           + (f" (+{len(worst) - 3} more)" if len(worst) > 3 else ""))
        if not shown:
            out.append(
                "  - no check could run" if not node.get("findings") else "  - (no failing check recorded)"
            )
    return out


def _localisation(cert: dict) -> list[str]:
    loc = cert.get("localisation") or []
    out = [] if loc else ["Nothing localised."]
    for item in loc:
        extra = []
        if item.get("fabric") is not None:
            extra.append(f"fabric {item['fabric']}")
        if item.get("probes"):
            extra.append("probes " + ", ".join(str(p) for p in item["probes"]))
        if item.get("partners"):
            extra.append("partners " + ", ".join(str(p) for p in item["partners"]))
        tail = f" ({md('; '.join(extra))})" if extra else ""
        out.append(f"- {md(item.get('kind'))}: **{md(loc_subject(item))}** — {md(item.get('reason'))}{tail}")
    return out


def _rounds(cert: dict) -> list[str]:
    schedule = cert.get("schedule") or []
    if not schedule:
        return []
    out = ["", "## Rounds", "", "| round | pairs | question |", "|---:|---:|---|"]
    out += [
        f"| {md(s.get('round'))} | {md(s.get('pairs'))} | {md(s.get('question') or '—')} |" for s in schedule
    ]
    return out


def _links(cert: dict) -> list[str]:
    links = cert.get("links") or []
    if not links:
        return ["No link measurements."]
    large = len(node_names(cert)) > COLLAPSE_NODES
    shown = [lk for lk in links if lk.get("status") != "pass"] if large else links
    out = []
    if large:
        out.append(f"{len(links) - len(shown)} of {len(links)} measurements passed; those that did not:")
        for (fabric, probe), group in link_groups(cert).items():
            c = Counter(str(lk.get("status")) for lk in group)
            out.append(f"- {md(channel_title(fabric, probe))}: {len(group)} measured, "
                       + ", ".join(f"{c[k]} {k}" for k in sorted(c)))
        out.append("")
    if shown:
        out += [
            "| fabric | probe | a | b | round | value | threshold | status |",
            "|---:|---|---|---|---:|---:|---|---|",
        ]
    for link in sorted(shown, key=link_order):
        th = link_threshold(cert, link)
        unit = unit_label(link.get("unit") or (th or {}).get("unit"))
        status = str(link.get("status"))
        fab = "all" if fabric_of(link) < 0 else link.get("fabric", 0)
        out.append(f"| {fab} | {md(link.get('probe'))} | {md(link.get('a'))} | {md(link.get('b'))} | "
                   f"{link.get('round')} | {val(link.get('value'), unit)} | {md(threshold_text(th, unit))} | "
                   f"{'**' + status + '**' if status != 'pass' else status} |")
    bad = [lk for lk in links if lk.get("status") != "pass" and lk.get("observed")]
    if bad:
        out.append("")
    for link in bad:
        out.append(f"- {md(link.get('probe'))} {md(link.get('a'))} → {md(link.get('b'))} (round "
                   f"{link.get('round')}) {md(link.get('status'))}: {md(link.get('observed'))}")
    return out


def _cluster(cert: dict) -> list[str]:
    """The cluster-wide findings (probe.nccl_cluster), where the certificate has any."""
    found = cert.get("cluster_findings") or []
    if not found:
        return []
    out = ["", "## Cluster", ""]
    for f in found:
        out.append(f"- {md(f.get('check'))} {md(f.get('subject'))}: **{md(f.get('status'))}** — "
                   f"{md(f.get('observed'))} (expected {md(f.get('expected'))})")
    return out


def render_summary(cert: dict) -> str:
    verdict = str(cert.get("verdict", "?"))
    fp = fingerprint_of(cert)
    v = cert.get("versions") or {}
    out = [
        f"# clustercert certificate: {md(cert.get('cluster'))} — **{verdict.upper()}**",
        "",
        *_first_table(cert),
        "",
        "## Run",
        "",
        f"- started {md(cert.get('started'))}, finished {md(cert.get('finished'))} "
        f"({duration(cert)}), {cert.get('rounds')} round(s)",
        f"- clustercert {md(v.get('clustercert'))}, ansible-core {md(v.get('ansible-core'))}; "
        f"profiles: {md(', '.join(sorted(cert.get('profiles') or {})) or '—')}",
        f"- signed by {fp}" if fp else "- unsigned",
    ]
    out += ["", "## Counts", "", *_counts_table(cert)]
    out += ["", "## Failing nodes: every failing check", "", *_failing_nodes(cert)]
    out += ["", "## Localisation", "", *_localisation(cert)]
    out += _rounds(cert)
    out += ["", "## Links", "", *_links(cert)]
    out += _cluster(cert)
    acts = cert.get("slurm") or []
    if acts:
        out += ["", "## Slurm (--drain slurm)", ""]
        for a in acts:
            what = a.get("action") if a.get("action") != "drain" else f"drain ({a.get('reason')})"
            out.append(f"- {md(a.get('node'))} ({md(a.get('slurm_node'))}): {md(what)}"
                       f"{'' if a.get('ok') else ' — **not done**'}: {md(a.get('detail'))}")
    return "\n".join(out) + "\n"
