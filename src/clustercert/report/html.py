"""report.html: one self-contained page rendered from Jinja2 templates (autoescape on).

The page loads nothing (inline CSS and SVG, no script, no remote resource; a Content-Security-Policy
forbids loading any) and every string from the certificate is escaped by Jinja2: evidence is untrusted
tool output. Control characters are shown as \\xNN.

Order. The page opens (under its header) with one table: the nodes that did not pass, each with its
first failing check and what it observed (an unreachable node: why), failing nodes first; then the counts,
localisation, the rounds and the rest.

Sizes. Pair results are drawn as what was measured, per round: the measurements that did not pass
first, each in words ("212.4 Gb/s, below the floor of 320 Gb/s"), then, up to COMPACT_PAIRS_NODES
nodes, a pairs x channels matrix (every cell a measurement), above that a per-channel summary and the
round's pairs as a folded list. Above COLLAPSE_NODES nodes the checks x nodes table, the per-node bars,
the versions table and the evidence show the nodes that did not pass, with a count of the others (the
certificate holds everything). A 1,024-node certificate renders to about 0.3 MB, 4.4 MB with every node
and every link failing (benchmarks/scale.py).

Templates. ``render_html(cert, templates=DIR)`` or the environment variable
``CLUSTERCERT_REPORT_TEMPLATES=DIR`` puts a site's template directory in front of the built-in one
(src/clustercert/report/templates): a file there of the same name replaces the built-in one —
``report.html.j2`` (the page), ``report.css``, or one section under ``sections/``. Templates get
``report`` (the view built by ``build_view``: plain dicts and lists, strings not yet escaped) and
``cert`` (the certificate itself).
"""

from __future__ import annotations

import functools
import os
import statistics
from collections import Counter, defaultdict
from pathlib import Path

import jinja2
from markupsafe import Markup

from clustercert.errors import InputError
from clustercert.record.certificate import finding_evidence
from clustercert.report.common import (
    COLLAPSE_NODES,
    COMPACT_PAIRS_NODES,
    HEAT_MISSING,
    STATUS_ORDER,
    _channel_rank,
    aggregate,
    by_check,
    channel_title,
    check_ids,
    clean,
    counts,
    duration,
    eo,
    fabric_of,
    fabric_title,
    fingerprint_of,
    heat_colour,
    link_groups,
    link_threshold,
    loc_subject,
    more_text,
    natural,
    node_names,
    not_passing,
    not_passing_title,
    num,
    standing,
    text_on,
    threshold_for,
    threshold_text,
    unit_label,
    val,
    worse,
)

TEMPLATES_ENV = "CLUSTERCERT_REPORT_TEMPLATES"
BUILTIN_TEMPLATES = Path(__file__).parent / "templates"
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
EVIDENCE_MAX_CHARS = 32_000  # one evidence block; the certificate has the whole text
CLOSEST_SHOWN = 5            # collapsed bars: this many passing values nearest their threshold stay
LINK_EVIDENCE_SHOWN = 200    # above COLLAPSE_NODES: the tool output of this many links that did not pass
FIRST_TABLE_ROWS = 100       # the page's first table: this many nodes that did not pass, then a count
_RANK = {"fail": 0, "error": 1, "pass": 2, "skip": 3}


# ---- the environment ---------------------------------------------------------------------------------

def _finalize(value):
    """Every ``{{ }}``: None prints nothing, text has its control characters shown (then autoescape)."""
    if value is None:
        return ""
    if isinstance(value, Markup):
        return value
    if isinstance(value, str):
        return clean(value)
    return value


@functools.lru_cache(maxsize=8)
def _environment(site: str | None) -> jinja2.Environment:
    loaders: list[jinja2.BaseLoader] = []
    if site:
        loaders.append(jinja2.FileSystemLoader(site))
    loaders.append(jinja2.FileSystemLoader(str(BUILTIN_TEMPLATES)))
    env = jinja2.Environment(loader=jinja2.ChoiceLoader(loaders), autoescape=True, finalize=_finalize,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True)
    env.filters["num"] = num
    return env


def check_templates(templates: str | Path | None = None) -> None:
    """Raise InputError now if ``templates`` (else $CLUSTERCERT_REPORT_TEMPLATES) names no directory:
    for a caller that wants to refuse before it runs, not when it writes the reports."""
    environment(templates)


def environment(templates: str | Path | None = None) -> jinja2.Environment:
    """The Jinja2 environment: ``templates`` (else $CLUSTERCERT_REPORT_TEMPLATES) in front of the
    built-in templates."""
    site = templates if templates is not None else os.environ.get(TEMPLATES_ENV) or None
    if site is not None:
        path = Path(site).expanduser()
        if not path.is_dir():
            raise InputError(str(path), None if templates is not None else TEMPLATES_ENV,
                             "report template directory not found")
        site = str(path.resolve())
    return _environment(site)


# ---- the view ----------------------------------------------------------------------------------------

def _header(cert: dict) -> dict:
    verdict = str(cert.get("verdict", "?"))
    v = cert.get("versions") or {}
    return {
        "cluster": cert.get("cluster"),
        "schema": cert.get("schema"),
        "verdict": verdict.upper(),
        "verdict_class": verdict if verdict in ("pass", "fail") else "fail",
        "meta": [
            ("started", cert.get("started")),
            ("finished", cert.get("finished")),
            ("duration", duration(cert)),
            ("rounds", cert.get("rounds")),
            ("profiles", ", ".join(sorted(cert.get("profiles") or {})) or "—"),
            ("clustercert", v.get("clustercert")),
            ("ansible-core", v.get("ansible-core")),
            ("signed by", fingerprint_of(cert) or "unsigned"),
        ],
    }


def _first(cert: dict) -> dict:
    """The table the page opens with: the nodes that did not pass and why (the first failing check and what it
    observed; an unreachable node's reason), then a line on the link measurements that did not pass."""
    nodes = cert.get("nodes") or {}
    rows = not_passing(nodes)
    bad_links = [lk for lk in cert.get("links") or [] if lk.get("status") != "pass"]
    loc_links = sum(1 for item in cert.get("localisation") or [] if "link" in item)
    links = ""
    if bad_links:
        links = (
            f"{len(bad_links)} link measurement{'s' if len(bad_links) != 1 else ''} did not pass"
            + (f" ({loc_links} localised as a bad link)" if loc_links else "")
            + ": see Localisation and the rounds."
        )
    return {
        "title": not_passing_title(nodes, rows),
        "links": links,
        "hidden": max(0, len(rows) - FIRST_TABLE_ROWS),
        "rows": [r | {"more": more_text(r["more"])} for r in rows[:FIRST_TABLE_ROWS]],
    }


def _cards(cert: dict) -> list[dict]:
    c = counts(cert)
    order = {"nodes": ("pass", "fail", "unreachable", "error"), "checks": ("pass", "fail", "error", "skip"),
             "links": ("pass", "fail", "error")}
    titles = {"nodes": "Nodes", "checks": "Node × check results", "links": "Link measurements"}
    return [{"title": titles[k], "total": sum(c[k].values()),
             "pills": [(st, f"{c[k][st]} {st}") for st in order[k] if c[k].get(st)]} for k in titles]


def _localisation(cert: dict) -> list[dict]:
    out = []
    for item in cert.get("localisation") or []:
        kind = str(item.get("kind", ""))
        out.append(
            {
                "kind": kind,
                "label": {"bad_node": "bad node", "bad_link": "bad link"}.get(kind, kind.replace("_", " ")),
                "subject": loc_subject(item),
                "reason": item.get("reason"),
                "fabric": None if item.get("fabric") is None else fabric_title(int(item["fabric"])),
                "probes": [str(p) for p in item.get("probes") or []],
                "partners": sorted((str(p) for p in item.get("partners") or []), key=natural),
            }
        )
    return out


def _channel(cert: dict, key: tuple[int, str], links: list[dict]) -> dict:
    fabric, probe = key
    th = link_threshold(cert, links[0])
    unit = unit_label((th or {}).get("unit") or links[0].get("unit"))
    values = sorted(float(lk["value"]) for lk in links if isinstance(lk.get("value"), int | float))
    c = Counter(str(lk.get("status")) for lk in links)
    return {
        "key": key,
        "fabric": fabric,
        "probe": probe,
        "title": channel_title(fabric, probe),
        "threshold": threshold_text(th, unit),
        "source": (th or {}).get("source"),
        "th": th,
        "unit": unit,
        "measured": len(links),
        "pass": c["pass"],
        "fail": c["fail"],
        "error": c["error"],
        "low": val(values[0], unit) if values else "—",
        "median": val(statistics.median(values), unit) if values else "—",
        "high": val(values[-1], unit) if values else "—",
    }


def _round_view(
    cert: dict, k: int, links: list[dict], sched: dict, times: dict, history: dict, compact: bool
) -> dict:
    groups: dict[tuple[int, str], list[dict]] = defaultdict(list)
    for lk in links:
        groups[(fabric_of(lk), str(lk.get("probe")))].append(lk)
    channels = [_channel(cert, key, groups[key]) for key in sorted(groups, key=_channel_rank)]
    ch_of = {ch["key"]: ch for ch in channels}
    pairs: dict[frozenset, dict] = {}
    for lk in links:
        p = pairs.setdefault(
            frozenset((lk.get("a"), lk.get("b"))), {"a": lk.get("a"), "b": lk.get("b"), "cells": {}}
        )
        key = (fabric_of(lk), str(lk.get("probe")))
        old = p["cells"].get(key)
        p["cells"][key] = lk if old is None else worse(old, lk, ch_of[key]["th"])
    rows = []
    for p in pairs.values():
        status = min((str(e.get("status")) for e in p["cells"].values()), key=lambda s: _RANK.get(s, 1))
        cells = []
        for ch in channels:
            e = p["cells"].get(ch["key"])
            if e is None:
                cells.append({"status": "missing", "text": "", "fill": HEAT_MISSING, "fg": "#6b7280",
                              "title": f"{p['a']} ↔ {p['b']}: {ch['title']} not measured in round {k}"})
                continue
            st = str(e.get("status"))
            fill = heat_colour(e.get("value"), ch["th"], st)
            cells.append(
                {
                    "status": st,
                    "text": "err" if e.get("value") is None else num(e.get("value")),
                    "fill": fill,
                    "fg": text_on(fill),
                    "title": f"{p['a']} ↔ {p['b']} · {ch['title']} · round {k}: "
                    f"{standing(e.get('value'), st, ch['th'], ch['unit'], e.get('observed'))}",
                }
            )
        rows.append({"a": p["a"], "b": p["b"], "status": status, "cells": cells})
    # failing, errored, passing
    rows.sort(key=lambda r: (_RANK.get(r["status"], 1), natural(r["a"]), natural(r["b"])))
    failing: dict[frozenset, dict] = {}
    for lk in sorted((lk for lk in links if lk.get("status") != "pass"),
                     key=lambda x: (natural(x.get("a")), natural(x.get("b")),
                                    _channel_rank((fabric_of(x), str(x.get("probe")))))):
        ch = ch_of[(fabric_of(lk), str(lk.get("probe")))]
        pair = frozenset((lk.get("a"), lk.get("b")))
        other = [e for e in history[(pair, ch["key"])] if e is not lk]
        item = failing.setdefault(
            pair, {"a": lk.get("a"), "b": lk.get("b"), "status": "error", "measurements": []}
        )
        if lk.get("status") == "fail":
            item["status"] = "fail"
        item["measurements"].append(
            {
                "status": lk.get("status"),
                "channel": ch["title"],
                "fabric": ch["fabric"],
                "probe": ch["probe"],
                "words": standing(
                    lk.get("value"), str(lk.get("status")), ch["th"], ch["unit"], lk.get("observed")
                ),
                "history": "; ".join(
                    f"round {e.get('round')}: {val(e.get('value'), ch['unit'])} ({e.get('status')})"
                    for e in sorted(other, key=lambda e: int(e.get("round") or 1))
                ),
            }
        )
    t = times.get(k) or {}
    return {
        "number": k,
        "question": sched.get("question") or "",
        "scheduled": sched.get("pairs"),
        "pairs_measured": len(pairs),
        "wall_s": t.get("wall_s"),
        "tool_s": t.get("tool_s"),
        "channels": channels,
        "rows": rows,
        "compact": compact,
        "failing": sorted(
            failing.values(), key=lambda f: (_RANK.get(f["status"], 1), natural(f["a"]), natural(f["b"]))
        ),
        "failing_count": sum(len(f["measurements"]) for f in failing.values()),
        "passing_pairs": sum(1 for r in rows if r["status"] == "pass"),
    }


def _rounds(cert: dict, compact: bool) -> list[dict]:
    links = [lk for lk in cert.get("links") or [] if lk.get("a") != lk.get("b")]
    by_round: dict[int, list[dict]] = defaultdict(list)
    history: dict[tuple, list[dict]] = defaultdict(list)
    for lk in links:
        by_round[int(lk.get("round") or 1)].append(lk)
        history[(frozenset((lk.get("a"), lk.get("b"))), (fabric_of(lk), str(lk.get("probe"))))].append(lk)
    schedule = {int(s["round"]): s for s in cert.get("schedule") or [] if s.get("round") is not None}
    times = {
        int(r["round"]): r
        for r in (cert.get("timing") or {}).get("rounds") or []
        if r.get("round") is not None
    }
    return [_round_view(cert, k, by_round.get(k, []), schedule.get(k, {}), times, history, compact)
            for k in sorted(set(schedule) | set(by_round))]


def _bar_rows(cert: dict) -> list[tuple[str, str, list[dict], dict | None]]:
    """(title, unit, rows, threshold) per measured quantity: node findings with a value, and
    loopback link measurements (a == b)."""
    out = []
    per_check: dict[str, list[dict]] = defaultdict(list)
    for name in sorted(cert.get("nodes") or {}, key=natural):
        for f in cert["nodes"][name].get("findings") or []:
            if isinstance(f.get("value"), int | float) and not isinstance(f.get("value"), bool):
                per_check[str(f.get("check"))].append(
                    {
                        "node": name,
                        "subject": f.get("subject") or "",
                        "value": float(f["value"]),
                        "status": f.get("status"),
                        "unit": f.get("unit"),
                        "threshold": f.get("threshold"),
                    }
                )
    for check, rows in per_check.items():
        th = threshold_for(cert, rows[0].get("threshold") or check)
        out.append((check, unit_label(rows[0].get("unit")), rows, th))
    for (fabric, probe), links in link_groups(cert).items():
        rows = [{"node": link["a"], "subject": f"round {link.get('round')}", "value": link.get("value"),
                 "status": link.get("status"), "unit": link.get("unit")}
                for link in links if link.get("a") == link.get("b")]
        if rows:
            out.append((f"{probe} loopback, fabric {fabric}", unit_label(rows[0].get("unit")), rows,
                        link_threshold(cert, links[0])))
    return out


def _bars_svg(rows: list[dict], th: dict | None, unit: str) -> dict:
    label_w, bar_w, row_h = 250, 760, 20
    values = [r["value"] for r in rows if r.get("value") is not None]
    limit = None if th is None else th["floor"] if th.get("floor") is not None else th.get("ceiling")
    top = max(values + ([float(limit)] if limit is not None else []) + [1e-9]) * 1.12
    bars = []
    for i, r in enumerate(rows):
        y = i * row_h
        bar = {
            "y": y,
            "ty": y + 14,
            "label": f"{r['node']} {r['subject']}".strip(),
            "status": r.get("status"),
            "value": None if r.get("value") is None else num(r["value"]),
        }
        if r.get("value") is not None:
            w = max(1.0, bar_w * float(r["value"]) / top)
            bar |= {
                "w": f"{w:.1f}",
                "tx": f"{label_w + w + 5:.1f}",
                "fill": {"pass": "#34a853", "fail": "#e5484d", "error": "#f59e0b"}.get(
                    str(r.get("status")), "#9ca3af"
                ),
            }
        bars.append(bar)
    line = None
    if limit is not None:
        line = {
            "x": f"{label_w + bar_w * float(limit) / top:.1f}",
            "y2": len(rows) * row_h,
            "ty": len(rows) * row_h + 16,
            "text": f"{'floor' if th.get('floor') is not None else 'ceiling'} {num(limit)} {unit}",
        }
    return {
        "width": label_w + bar_w + 70,
        "height": len(rows) * row_h + 26,
        "label_w": label_w,
        "row_h": row_h,
        "bars": bars,
        "line": line,
    }


def _bars(cert: dict, large: bool) -> list[dict]:
    out = []
    for title, unit, rows, th in _bar_rows(cert):
        note = ""
        if large:
            bad = [r for r in rows if r.get("status") != "pass"]
            good = [r for r in rows if r.get("status") == "pass" and r.get("value") is not None]
            ceiling = bool(th) and th.get("floor") is None and th.get("ceiling") is not None
            good.sort(key=lambda r: -r["value"] if ceiling else r["value"])
            closest = good[:CLOSEST_SHOWN]
            rest = sorted(r["value"] for r in good[CLOSEST_SHOWN:])
            if rest:
                note = (f"{len(rest)} more passed, not drawn: lowest {val(rest[0], unit)}, median "
                        f"{val(statistics.median(rest), unit)}, highest {val(rest[-1], unit)}. Drawn: the "
                        f"{len(bad)} that did not pass and the {len(closest)} passing nearest the threshold.")
            rows = bad + closest
        out.append({"title": title, "unit": unit, "threshold": threshold_text(th, unit), "note": note,
                    "svg": _bars_svg(rows, th, unit)})
    return out


def _matrix(cert: dict, large: bool) -> dict:
    nodes = sorted(cert.get("nodes") or {}, key=natural)
    shown = [n for n in nodes if cert["nodes"][n].get("verdict") != "pass"] if large else nodes
    per_node = {n: by_check(cert["nodes"][n]) for n in shown}
    rows, group = [], None
    for check in check_ids(cert):
        g = check.split(".", 1)[0]
        if g != group:
            group = g
            rows.append({"group": g})
        cells = []
        for n in shown:
            fs = per_node[n].get(check, [])
            if not fs:
                verdict = str(cert["nodes"][n].get("verdict"))
                cells.append(
                    {
                        "status": "unreachable" if verdict in ("unreachable", "error") else "none",
                        "text": "—",
                        "title": f"{n}: {check} not evaluated",
                        "details": [],
                    }
                )
                continue
            st = aggregate(f.get("status") for f in fs)
            bad = [f for f in fs if f.get("status") == st] if st in ("fail", "error") else []
            details = [eo(f) for f in bad[:2]] + ([f"… {len(bad) - 2} more"] if len(bad) > 2 else [])
            # large: no hover text on passes
            title = "\n".join(eo(f) for f in (bad or fs)) if bad or not large else None
            cells.append(
                {
                    "status": st,
                    "details": details,
                    "title": title,
                    "text": st
                    if len(fs) == 1
                    else f"{st} {sum(1 for f in fs if f.get('status') == st)}/{len(fs)}",
                }
            )
        rows.append({"check": check, "cells": cells})
    return {"nodes": [{"name": n, "verdict": str(cert["nodes"][n].get("verdict"))} for n in shown],
            "rows": rows, "hidden": len(nodes) - len(shown), "collapsed": large}


def _versions(cert: dict, large: bool) -> dict | None:
    per = (cert.get("versions") or {}).get("nodes") or {}
    if not per:
        return None
    cols = ("driver", "nccl", "ofed")
    common = {}
    for c in cols:
        mc = Counter(str(v.get(c)) for v in per.values() if v.get(c) is not None).most_common(1)
        common[c] = mc[0][0] if mc else None
    rows = []
    for n in sorted(per, key=natural):
        cells = [
            {
                "text": per[n].get(c) if per[n].get(c) is not None else "—",
                "drift": per[n].get(c) is not None
                and common[c] is not None
                and str(per[n].get(c)) != common[c],
            }
            for c in cols
        ]
        if not large or any(c["drift"] or c["text"] == "—" for c in cells):
            rows.append({"node": n, "cells": cells})
    return {"rows": rows, "hidden": len(per) - len(rows), "common": [(c, common[c] or "—") for c in cols]}


def _slurm(cert: dict) -> list[dict]:
    return [
        {
            "node": a.get("node"),
            "slurm_node": a.get("slurm_node"),
            "action": a.get("action"),
            "reason": a.get("reason"),
            "ok": bool(a.get("ok")),
            "detail": a.get("detail"),
        }
        for a in cert.get("slurm") or []
    ]


def _thresholds(cert: dict) -> list[dict]:
    out = []
    for key, th in sorted((cert.get("thresholds") or {}).items()):
        kind = "floor" if th.get("floor") is not None else "ceiling"
        out.append({"key": key, "kind": kind, "value": num(th.get(kind)), "unit": unit_label(th.get("unit")),
                    "source": th.get("source")})
    return out


def _evidence_text(text) -> str:
    s = clean(text) or "(no evidence recorded)"
    if len(s) > EVIDENCE_MAX_CHARS:
        s = (
            s[:EVIDENCE_MAX_CHARS]
            + f"\n… ({len(s) - EVIDENCE_MAX_CHARS} more characters in certificate.json)"
        )
    return s


def hardware_text(hw: dict | None) -> str:
    """A node's certified hardware (its ``hardware`` member) in one line; "" when none was recorded."""
    if not hw:
        return ""
    parts = []
    board = hw.get("board") or {}
    if board:
        parts.append(
            f"system serial {board.get('system_serial') or 'n/a'}, chassis "
            f"{board.get('chassis_serial') or 'n/a'}"
        )
    if hw.get("gpus") is not None:
        parts.append(f"{len(hw['gpus'])} GPUs (" + ", ".join(f"GPU{g['index']} {g.get('serial') or 'n/a'}"
                                                            for g in hw["gpus"]) + ")")
    if hw.get("hcas") is not None:
        parts.append(
            "HCAs "
            + ", ".join(
                f"{h['name']} {h.get('node_guid') or 'n/a'} fw {h.get('fw_ver') or 'n/a'}" for h in hw["hcas"]
            )
        )
    if hw.get("nvswitch_count") is not None:
        parts.append(f"{hw['nvswitch_count']} NVSwitches")
    return "; ".join(parts)


def _evidence(cert: dict, large: bool) -> dict:
    blocks, hidden = [], 0
    for n in sorted(cert.get("nodes") or {}, key=natural):
        node = cert["nodes"][n]
        verdict = str(node.get("verdict"))
        if large and verdict == "pass":
            hidden += 1
            continue
        fs = sorted(node.get("findings") or [], key=lambda f: _RANK.get(f.get("status"), 9))
        c = Counter(str(f.get("status")) for f in fs)
        shown = [f for f in fs if f.get("status") not in ("pass", "skip")] if large else fs
        findings = [
            {
                "status": str(f.get("status")),
                "check": f.get("check"),
                "subject": f.get("subject"),
                "value": f"{num(f['value'])} {unit_label(f.get('unit'))}".rstrip()
                if isinstance(f.get("value"), int | float)
                else None,
                "expected": f.get("expected"),
                "observed": f.get("observed"),
                "evidence": _evidence_text(finding_evidence(node, f)),
                "open": f.get("status") in ("fail", "error"),
            }
            for f in shown
        ]
        blocks.append({"node": n, "verdict": verdict, "open": verdict != "pass", "findings": findings,
                       "omitted": len(fs) - len(shown), "detail": node.get("detail"),
                       "hardware": hardware_text(node.get("hardware")),
                       "pills": [(st, f"{c[st]} {st}") for st in STATUS_ORDER if c.get(st)]})
    return {"nodes": blocks, "hidden": hidden}


def _link_evidence(cert: dict, large: bool) -> dict:
    bad = sorted((lk for lk in cert.get("links") or [] if lk.get("status") != "pass"),
                 key=lambda x: (natural(x.get("a")), natural(x.get("b")), str(x.get("probe")), fabric_of(x)))
    shown = bad[:LINK_EVIDENCE_SHOWN] if large else bad
    out = []
    for lk in shown:
        out.append(
            {
                "status": str(lk.get("status")),
                "probe": lk.get("probe"),
                "a": lk.get("a"),
                "b": lk.get("b"),
                "fabric": "all rails" if fabric_of(lk) < 0 else f"fabric {lk.get('fabric', 0)}",
                "round": lk.get("round"),
                "subject": lk.get("subject"),
                "expected": lk.get("expected") or "—",
                "observed": lk.get("observed") or "—",
                "evidence": _evidence_text(lk.get("evidence")),
            }
        )
    return {"links": out, "hidden": len(bad) - len(shown)}


def build_view(cert: dict) -> dict:
    """What the templates show: plain dicts and lists built from the certificate (strings unescaped)."""
    n_nodes = len(node_names(cert))
    large = n_nodes > COLLAPSE_NODES
    return {
        "title": f"clustercert — {cert.get('cluster')} — {str(cert.get('verdict', '?')).upper()}",
        "csp": Markup(CSP),
        "header": _header(cert),
        "first": _first(cert),
        "cards": _cards(cert),
        "localisation": _localisation(cert),
        "node_count": n_nodes,
        "large": large,
        "compact_pairs": n_nodes <= COMPACT_PAIRS_NODES,
        "limits": {"collapse_nodes": COLLAPSE_NODES, "compact_pairs_nodes": COMPACT_PAIRS_NODES},
        "rounds": _rounds(cert, n_nodes <= COMPACT_PAIRS_NODES),
        "bars": _bars(cert, large),
        "matrix": _matrix(cert, large),
        "slurm": _slurm(cert),
        "versions": _versions(cert, large),
        "thresholds": _thresholds(cert),
        "evidence": _evidence(cert, large),
        "link_evidence": _link_evidence(cert, large),
        "clustercert": (cert.get("versions") or {}).get("clustercert", ""),
        "cluster_findings": list(cert.get("cluster_findings") or []),  # probe.nccl_cluster (sections/cluster)
    }


def render_html(cert: dict, templates: str | Path | None = None) -> str:
    """report.html from the certificate. ``templates``: a site's template directory (else
    $CLUSTERCERT_REPORT_TEMPLATES), searched before the built-in templates."""
    return "".join(html_chunks(cert, templates))


def html_chunks(cert: dict, templates: str | Path | None = None):
    """``render_html``'s text in the pieces the template makes, for writing it out without holding the page
    and every piece of it at once (a fleet's page is tens of MB)."""
    return environment(templates).get_template("report.html.j2").generate(report=build_view(cert), cert=cert)
