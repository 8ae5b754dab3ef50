"""Reports rendered from a certificate: report.html, junit.xml, summary.md. Pure: dict in, files out.

* report.html is one self-contained file (inline CSS and SVG, no script, no remote resource; a
  Content-Security-Policy forbids loading any). Every string from the certificate is escaped: evidence
  is untrusted tool output.
* junit.xml has one <testcase> per node x check (classname = node, name = check id; the findings of
  one check on one node are aggregated: failure if any fail, else error if any error, skipped if all
  skip), one ``node.status`` testcase (an error) for a node that was unreachable or errored without
  findings, and one testcase per link measurement (classname ``link.fabric<N>.<probe>``).
* summary.md: verdict, counts, failing nodes with their failing checks, localisation, links (what a
  failing link observed), Slurm actions.
"""

from __future__ import annotations

import html
import math
import re
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path

from clustercert.probes.catalog import PAIR_THRESHOLD

STATUS_ORDER = ("fail", "error", "pass", "skip")
UNIT_LABEL = {"gbit_per_s": "Gb/s", "gbyte_per_s": "GB/s", "usec": "µs", "percent": "%"}
PROBE_LABEL = {
    "ib_write_bw": "ib_write_bw (RDMA write bandwidth)",
    "ib_write_lat": "ib_write_lat (RDMA write latency)",
    "iperf3": "iperf3 (TCP over IPoIB)",
    "nccl_allreduce": "NCCL all_reduce bus bandwidth",
}

# status -> (background, foreground)
STATUS_STYLE = {
    "pass": ("#dcf5e3", "#0f6b2f"),
    "fail": ("#fde0dd", "#a4161a"),
    "error": ("#ffe9cc", "#8a4b00"),
    "skip": ("#eef0f3", "#4b5563"),
    "unreachable": ("#e5e7eb", "#374151"),
    "none": ("#f6f7f9", "#9ca3af"),
}
HEAT_MISSING = "#e9ebef"
HEAT_ERROR = "#5b6170"

_CTRL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def _clean(text) -> str:
    """Text safe for XML 1.0 and readable in HTML: control characters shown as \\xNN."""
    s = "" if text is None else str(text)
    return _CTRL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else "\ufffd", s)


def _e(text) -> str:
    return html.escape(_clean(text), quote=True)


def _natural(name: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(name))]


def _num(v) -> str:
    if v is None:
        return "—"
    v = float(v)
    if not math.isfinite(v):
        return str(v)
    if abs(v) >= 1000:
        return f"{v:.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}" if v.is_integer() else f"{v:.1f}"
    return f"{v:.3g}" if abs(v) >= 1 else f"{v:.2g}"


def _unit(u) -> str:
    return UNIT_LABEL.get(u or "", u or "")


def _val(v, unit: str) -> str:
    return "no value" if v is None else f"{_num(v)} {unit}".rstrip()


# ---- aggregation (shared by all three reports) --------------------------------------------------

def aggregate(statuses) -> str:
    """One status for several findings of a check on a node: fail > error > pass > skip."""
    s = set(statuses)
    if not s:
        return "none"
    for st in ("fail", "error", "pass"):
        if st in s:
            return st
    return "skip"


def _nodes(cert: dict) -> list[str]:
    names = set(cert.get("nodes") or {})
    for link in cert.get("links") or []:
        names.update((link.get("a"), link.get("b")))
    names.discard(None)
    return sorted(names, key=_natural)


def _checks(cert: dict) -> list[str]:
    """Check ids in the order the evaluators produced them (first appearance across nodes)."""
    seen: dict[str, None] = {}
    for name in sorted(cert.get("nodes") or {}, key=_natural):
        for f in cert["nodes"][name].get("findings") or []:
            seen.setdefault(str(f.get("check")), None)
    return list(seen)


def _by_check(node: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for f in node.get("findings") or []:
        out[str(f.get("check"))].append(f)
    return out


def threshold_for(cert: dict, key: str) -> dict | None:
    """The certificate's threshold ``key`` (a profile threshold's name; a link's probe name is mapped
    through the probe catalog for certificates whose links do not name theirs)."""
    ths = cert.get("thresholds") or {}
    th = ths.get(key) if key in ths else ths.get(PAIR_THRESHOLD.get(key, key))
    if isinstance(th, dict) and (th.get("floor") is not None or th.get("ceiling") is not None):
        return th
    return None


def _link_threshold(cert: dict, link: dict) -> dict | None:
    return threshold_for(cert, str(link.get("threshold") or link.get("probe")))


def _ratio(value: float, th: dict | None) -> float | None:
    """How the value stands against its threshold: >= 1 is good, < 1 is short, for floors and ceilings."""
    if th is None or value is None:
        return None
    if th.get("floor") is not None and float(th["floor"]) > 0:
        return float(value) / float(th["floor"])
    if th.get("ceiling") is not None and float(value) > 0:
        return float(th["ceiling"]) / float(value)
    return None


def _mix(c1: str, c2: str, t: float) -> str:
    t = min(1.0, max(0.0, t))
    a = [int(c1[i:i + 2], 16) for i in (1, 3, 5)]
    b = [int(c2[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(a, b, strict=True))


def heat_colour(value: float | None, threshold: dict | None, status: str | None = None) -> str:
    """Fill colour of a heatmap cell. Greens at or above the threshold (darker = more headroom, up to
    +30 %), orange to red below it (red at half the threshold); error = dark grey; missing = light grey."""
    if status is None and value is None:
        return HEAT_MISSING
    if value is None or status == "error":
        return HEAT_ERROR
    r = _ratio(value, threshold)
    if r is None:
        return "#74c476" if status == "pass" else "#ef6548"
    if r >= 1.0 and status != "fail":
        return _mix("#c7e9c0", "#238b45", (r - 1.0) / 0.3)
    return _mix("#cb181d", "#fdae6b", (min(r, 0.999) - 0.5) / 0.5)


def _text_on(fill: str) -> str:
    r, g, b = (int(fill[i:i + 2], 16) for i in (1, 3, 5))
    return "#111827" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#ffffff"


def _fabric(link: dict) -> int:
    """A link's fabric; -1 for a probe over every rail at once (NCCL across two nodes has none)."""
    f = link.get("fabric", 0)
    return -1 if f is None else int(f)


def _fabric_title(fabric: int) -> str:
    return "All rails" if fabric < 0 else f"Fabric {fabric}"


def link_groups(cert: dict) -> dict[tuple[int, str], list[dict]]:
    groups: dict[tuple[int, str], list[dict]] = defaultdict(list)
    for link in cert.get("links") or []:
        groups[(_fabric(link), str(link.get("probe")))].append(link)
    rank = {p: i for i, p in enumerate(PROBE_LABEL)}
    # one probe's fabrics side by side
    return dict(sorted(groups.items(), key=lambda kv: (rank.get(kv[0][1], 99), kv[0][1], kv[0][0])))


def _worse(a: dict, b: dict, th: dict | None) -> dict:
    rank = {"error": 0, "fail": 1, "pass": 2}
    ra, rb = rank.get(a.get("status"), 0), rank.get(b.get("status"), 0)
    if ra != rb:
        return a if ra < rb else b
    va, vb = a.get("value"), b.get("value")
    if va is None or vb is None:
        return a if va is None else b
    if th and th.get("ceiling") is not None:
        return a if va >= vb else b
    return a if va <= vb else b


def pair_results(links: list[dict], th: dict | None) -> dict[frozenset, tuple[dict, list[dict]]]:
    """Per unordered pair: (the result shown = the worst entry of the latest round, all entries)."""
    out: dict[frozenset, tuple[dict, list[dict]]] = {}
    by_pair: dict[frozenset, list[dict]] = defaultdict(list)
    for link in links:
        if link.get("a") != link.get("b"):
            by_pair[frozenset((link.get("a"), link.get("b")))].append(link)
    for pair, entries in by_pair.items():
        last = max(int(e.get("round", 1)) for e in entries)
        shown = None
        for e in entries:
            if int(e.get("round", 1)) == last:
                shown = e if shown is None else _worse(shown, e, th)
        out[pair] = (shown, sorted(entries, key=lambda e: int(e.get("round", 1))))
    return out


def counts(cert: dict) -> dict:
    nodes = Counter(str(n.get("verdict")) for n in (cert.get("nodes") or {}).values())
    checks: Counter = Counter()
    for node in (cert.get("nodes") or {}).values():
        for fs in _by_check(node).values():
            checks[aggregate(f.get("status") for f in fs)] += 1
    links = Counter(str(link.get("status")) for link in cert.get("links") or [])
    return {"nodes": nodes, "checks": checks, "links": links}


def _fingerprint(cert: dict) -> str | None:
    sig = cert.get("signature") or {}
    try:
        import base64

        from clustercert.certificate import fingerprint

        return fingerprint(base64.b64decode(sig["public_key"], validate=True))
    except Exception:  # unsigned, or a key that is not one: the report just does not name a signer
        return None


def _duration(cert: dict) -> str:
    try:
        a = datetime.fromisoformat(str(cert["started"]).replace("Z", "+00:00"))
        b = datetime.fromisoformat(str(cert["finished"]).replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return ""
    secs = int((b - a).total_seconds())
    h, rem = divmod(max(secs, 0), 3600)
    m, s = divmod(rem, 60)
    return f"{h}h {m:02d}m {s:02d}s" if h else f"{m}m {s:02d}s"


def _seconds(cert: dict) -> float:
    try:
        a = datetime.fromisoformat(str(cert["started"]).replace("Z", "+00:00"))
        b = datetime.fromisoformat(str(cert["finished"]).replace("Z", "+00:00"))
        return max((b - a).total_seconds(), 0.0)
    except (KeyError, ValueError):
        return 0.0


def _loc_subject(item: dict) -> str:
    if "node" in item:
        return str(item["node"])
    link = item.get("link")
    if isinstance(link, dict):
        s = f"{link.get('a')} ↔ {link.get('b')}"
        if link.get("fabric") is not None:
            s += f" (fabric {link.get('fabric')})"
        if link.get("probe"):
            s += f" {link.get('probe')}"
        return s
    if isinstance(link, list | tuple):
        return " ↔ ".join(str(x) for x in link)
    return str(link)


# ---- HTML -------------------------------------------------------------------------------------

_CSS = """
:root{--ink:#1f2937;--muted:#6b7280;--line:#e5e7eb;--bg:#f6f7f9;--card:#fff;--accent:#1d4ed8}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:14px/1.45 -apple-system,"Segoe UI",Roboto,"Helvetica Neue","DejaVu Sans",Arial,sans-serif}
main{max-width:1360px;margin:0 auto;padding:20px 24px 48px}
header.top{background:#111827;color:#f9fafb;padding:18px 24px}
header.top .inner{max-width:1360px;margin:0 auto;display:flex;gap:24px;align-items:center;flex-wrap:wrap}
header.top h1{font-size:20px;margin:0;font-weight:600;letter-spacing:.2px}
header.top .sub{color:#9ca3af;font-size:12.5px;margin-top:2px}
.verdict{font-weight:700;font-size:18px;padding:6px 16px;border-radius:6px;letter-spacing:1px}
.verdict.pass{background:#16a34a;color:#fff}.verdict.fail{background:#dc2626;color:#fff}
.meta{display:grid;grid-template-columns:repeat(3,auto);gap:3px 28px;margin-left:auto;font-size:12.5px}
.meta div span{color:#9ca3af;margin-right:6px}
.meta code{color:#e5e7eb}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;margin:16px 0;padding:14px 18px}
section h2{font-size:15px;margin:0 0 10px;font-weight:600}
section h3{font-size:13px;margin:0 0 4px;font-weight:600}
.note{color:var(--muted);font-size:12px}
.cards{display:flex;gap:14px;flex-wrap:wrap;margin:16px 0}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 16px;min-width:200px;flex:1}
.card .k{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.6px}
.card .v{font-size:22px;font-weight:600}
.card .pills{margin-top:4px}
.pill{display:inline-block;font-size:11.5px;font-weight:600;padding:1px 8px;border-radius:999px;margin:2px 4px 0 0}
.st-pass{background:#dcf5e3;color:#0f6b2f}.st-fail{background:#fde0dd;color:#a4161a}
.st-error{background:#ffe9cc;color:#8a4b00}.st-skip{background:#eef0f3;color:#4b5563}
.st-unreachable{background:#e5e7eb;color:#374151}
td.st-unreachable{background:repeating-linear-gradient(135deg,#e5e7eb 0 6px,#f3f4f6 6px 12px)}
.st-none{background:#f6f7f9;color:#9ca3af}
ul.loc{list-style:none;margin:0;padding:0}
ul.loc li{padding:6px 0;border-bottom:1px solid var(--line)}ul.loc li:last-child{border:0}
ul.loc .what{font-weight:600;margin:0 8px}
.heatmaps{display:flex;flex-wrap:wrap;gap:18px}
.heatmap{border:1px solid var(--line);border-radius:6px;padding:10px 12px;background:#fff}
.heatmap svg text{font-family:inherit}
.legend{display:flex;align-items:center;gap:8px;font-size:11.5px;color:var(--muted);margin-top:6px;flex-wrap:wrap}
.legend i{display:inline-block;width:14px;height:12px;border-radius:2px;vertical-align:middle;margin-right:3px}
table{border-collapse:collapse;font-size:12.5px}
table.matrix{width:100%;table-layout:fixed}
table.matrix th,table.matrix td{border:1px solid #fff;padding:4px 6px;vertical-align:top}
table.matrix thead th{background:#f3f4f6;font-weight:600;text-align:center;position:sticky;top:0}
table.matrix th.check{text-align:left;width:190px;background:#fafafa;font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-weight:500;font-size:12px}
table.matrix tr.group th{background:#eef2ff;color:#3730a3;text-align:left;font-size:11.5px;text-transform:uppercase;letter-spacing:.6px}
table.matrix td{text-align:center;font-weight:600;font-size:11.5px}
table.matrix td .eo{font-weight:400;font-size:10.5px;text-align:left;margin-top:2px;word-break:break-word}
table.plain th,table.plain td{border-bottom:1px solid var(--line);padding:4px 10px;text-align:left}
table.plain th{color:var(--muted);font-weight:600;font-size:12px}
td.drift{background:#fff4d6}
details{margin:3px 0}
details>summary{cursor:pointer;padding:3px 0}
details.node>summary{font-weight:600}
details.ev{margin-left:18px}
details.ev>summary{font-size:12.5px}
pre{background:#0f172a;color:#e2e8f0;padding:10px 12px;border-radius:6px;overflow:auto;max-height:420px;font-size:12px;white-space:pre-wrap;word-break:break-word}
dl.eo{display:grid;grid-template-columns:90px 1fr;margin:4px 0;font-size:12.5px}dl.eo dt{color:var(--muted)}dl.eo dd{margin:0}
code{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:12px}
footer{color:var(--muted);font-size:12px;text-align:center;margin-top:24px}
"""


def _pill(status: str, text: str | None = None) -> str:
    return f'<span class="pill st-{_e(status)}">{_e(text if text is not None else status)}</span>'


def _html_header(cert: dict) -> str:
    verdict = str(cert.get("verdict", "?"))
    v = cert.get("versions") or {}
    fp = _fingerprint(cert)
    profiles = ", ".join(sorted(cert.get("profiles") or {})) or "—"
    meta = [
        ("started", cert.get("started")), ("finished", cert.get("finished")),
        ("duration", _duration(cert)), ("rounds", cert.get("rounds")),
        ("profiles", profiles), ("clustercert", v.get("clustercert")),
        ("ansible-core", v.get("ansible-core")), ("signed by", fp or "unsigned"),
    ]
    cells = "".join(f"<div><span>{_e(k)}</span><code>{_e(val)}</code></div>" for k, val in meta)
    cls = verdict if verdict in ("pass", "fail") else "fail"
    return (f'<header class="top"><div class="inner"><div><h1>{_e(cert.get("cluster"))}</h1>'
            f'<div class="sub">clustercert certificate · {_e(cert.get("schema"))}</div></div>'
            f'<div class="verdict {cls}" id="verdict">{_e(verdict.upper())}</div>'
            f'<div class="meta">{cells}</div></div></header>')


def _html_cards(cert: dict) -> str:
    c = counts(cert)
    order = {"nodes": ("pass", "fail", "unreachable", "error"), "checks": ("pass", "fail", "error", "skip"),
             "links": ("pass", "fail", "error")}
    out = []
    titles = {"nodes": "Nodes", "checks": "Node × check results", "links": "Link measurements"}
    for key in ("nodes", "checks", "links"):
        total = sum(c[key].values())
        pills = "".join(_pill(st, f"{c[key][st]} {st}") for st in order[key] if c[key].get(st))
        out.append(f'<div class="card"><div class="k">{titles[key]}</div><div class="v">{total}</div>'
                   f'<div class="pills">{pills}</div></div>')
    return '<div class="cards">' + "".join(out) + "</div>"


def _html_localisation(cert: dict) -> str:
    items = cert.get("localisation") or []
    if not items:
        body = '<p class="note">Nothing localised: no bad node or bad link was singled out.</p>'
    else:
        lis = []
        for item in items:
            kind = str(item.get("kind", ""))
            label = {"bad_node": "bad node", "bad_link": "bad link"}.get(kind, kind)
            lis.append(f'<li>{_pill("fail", label)}<span class="what">{_e(_loc_subject(item))}</span>'
                       f'<span class="note">{_e(item.get("reason"))}</span></li>')
        body = '<ul class="loc">' + "".join(lis) + "</ul>"
    return f'<section id="localisation"><h2>Localisation</h2>{body}</section>'


def _heatmap_svg(nodes: list[str], pairs: dict, th: dict | None, unit: str, fabric: int, probe: str) -> str:
    n = len(nodes)
    cell = 52 if n <= 10 else max(20, 520 // max(n - 1, 1))
    longest = max((len(x) for x in nodes), default=4)
    left = 12 + int(longest * 7.2)
    bottom = 14 + int(longest * 5.4)
    width = left + (n - 1) * cell + 8
    height = (n - 1) * cell + bottom
    font = 12 if cell >= 40 else 9
    parts = [f'<svg class="hm" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(probe)} fabric {fabric} heatmap">']
    for i in range(1, n):
        y = (i - 1) * cell
        parts.append(f'<text x="{left - 6}" y="{y + cell / 2 + 4:.1f}" text-anchor="end" font-size="11.5" '
                     f'fill="#374151">{_e(nodes[i])}</text>')
        for j in range(i):
            x = left + j * cell
            a, b = nodes[j], nodes[i]
            found = pairs.get(frozenset((a, b)))
            if found is None:
                fill, label, tip, status = HEAT_MISSING, "", f"{a} ↔ {b}: not measured", "missing"
            else:
                shown, entries = found
                status = str(shown.get("status"))
                fill = heat_colour(shown.get("value"), th, status)
                label = "err" if shown.get("value") is None else _num(shown.get("value"))
                rounds = "; ".join(f"round {e.get('round')}: {_val(e.get('value'), unit)} ({e.get('status')})"
                                   for e in entries)
                tip = f"{shown.get('a')} → {shown.get('b')}: {label} {unit}, {status} — {rounds}"
            stroke = ' stroke="#7f1d1d" stroke-width="2.5"' if status == "fail" else ' stroke="#ffffff" stroke-width="1"'
            parts.append(f'<g class="hm-cell" data-a="{_e(a)}" data-b="{_e(b)}" data-status="{_e(status)}">'
                         f'<title>{_e(tip)}</title>'
                         f'<rect x="{x + 1}" y="{y + 1}" width="{cell - 2}" height="{cell - 2}" rx="3" fill="{fill}"{stroke}/>')
            if label:
                parts.append(f'<text x="{x + cell / 2:.1f}" y="{y + cell / 2 + font / 3:.1f}" text-anchor="middle" '
                             f'font-size="{font}" font-weight="600" fill="{_text_on(fill)}">{_e(label)}</text>')
            parts.append("</g>")
    base = (n - 1) * cell + 6
    for j in range(n - 1):
        x = left + j * cell + cell / 2
        parts.append(f'<text x="{x:.1f}" y="{base}" text-anchor="end" font-size="11.5" fill="#374151" '
                     f'transform="rotate(-40 {x:.1f} {base})">{_e(nodes[j])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _threshold_text(th: dict | None, unit: str) -> str:
    if not th:
        return "no threshold recorded: coloured by status"
    if th.get("floor") is not None:
        return f"floor {_num(th['floor'])} {unit}"
    return f"ceiling {_num(th['ceiling'])} {unit}"


def _html_heatmaps(cert: dict) -> str:
    nodes = _nodes(cert)
    groups = link_groups(cert)
    blocks = []
    for (fabric, probe), links in groups.items():
        if not any(link.get("a") != link.get("b") for link in links):
            continue
        th = _link_threshold(cert, links[0])
        unit = _unit((th or {}).get("unit") or links[0].get("unit"))
        pairs = pair_results(links, th)
        svg = _heatmap_svg(nodes, pairs, th, unit, fabric, probe)
        lo = heat_colour(0.5 * float(th["floor"]), th, "fail") if th and th.get("floor") else "#cb181d"
        legend = (f'<div class="legend"><span><i style="background:{lo}"></i>≤50 % of threshold</span>'
                  f'<span><i style="background:#fdae6b"></i>just below</span>'
                  f'<span><i style="background:#c7e9c0"></i>at threshold</span>'
                  f'<span><i style="background:#238b45"></i>≥ +30 %</span>'
                  f'<span><i style="background:{HEAT_ERROR}"></i>error</span>'
                  f'<span><i style="background:{HEAT_MISSING}"></i>not measured</span></div>')
        source = f' · <span title="{_e((th or {}).get("source"))}">source: {_e((th or {}).get("source"))}</span>' if th and th.get("source") else ""
        svg_w = int(re.search(r'width="(\d+)"', svg).group(1))
        blocks.append(f'<div class="heatmap" style="width:{max(svg_w, 380) + 26}px" data-fabric="{fabric}" data-probe="{_e(probe)}">'
                      f'<h3>{_fabric_title(fabric)} · {_e(PROBE_LABEL.get(probe, probe))}</h3>'
                      f'<div class="note">{_e(_threshold_text(th, unit))}{source} · latest round per pair</div>'
                      f'{svg}{legend}</div>')
    if not blocks:
        blocks.append('<p class="note">No pairwise link measurements in this certificate.</p>')
    return ('<section id="heatmaps"><h2>Pairwise link measurements</h2><div class="heatmaps">'
            + "".join(blocks) + "</div></section>")


def _bar_rows(cert: dict) -> list[tuple[str, str, list[dict], dict | None]]:
    """(title, unit, rows, threshold) per measured quantity: node findings with a value, and
    loopback link measurements (a == b)."""
    out = []
    by_check: dict[str, list[dict]] = defaultdict(list)
    for name in sorted(cert.get("nodes") or {}, key=_natural):
        for f in cert["nodes"][name].get("findings") or []:
            if isinstance(f.get("value"), int | float) and not isinstance(f.get("value"), bool):
                by_check[str(f.get("check"))].append({"node": name, "subject": f.get("subject") or "",
                                                      "value": float(f["value"]), "status": f.get("status"),
                                                      "unit": f.get("unit"), "threshold": f.get("threshold")})
    for check, rows in by_check.items():
        th = threshold_for(cert, rows[0].get("threshold") or check)
        out.append((check, _unit(rows[0].get("unit")), rows, th))
    for (fabric, probe), links in link_groups(cert).items():
        rows = [{"node": link["a"], "subject": f"round {link.get('round')}", "value": link.get("value"),
                 "status": link.get("status"), "unit": link.get("unit")}
                for link in links if link.get("a") == link.get("b")]
        if rows:
            th = threshold_for(cert, probe)
            out.append((f"{probe} loopback, fabric {fabric}", _unit(rows[0].get("unit")), rows, th))
    return out


def _bars_svg(rows: list[dict], th: dict | None, unit: str) -> str:
    label_w, bar_w, row_h = 250, 760, 20
    values = [r["value"] for r in rows if r.get("value") is not None]
    limit = None if th is None else th.get("floor", th.get("ceiling"))
    top = max(values + ([float(limit)] if limit is not None else []) + [1e-9]) * 1.12
    height = len(rows) * row_h + 26
    width = label_w + bar_w + 70
    p = [f'<svg class="bars" width="{width}" height="{height}" '
         f'viewBox="0 0 {width} {height}" role="img">']
    for i, r in enumerate(rows):
        y = i * row_h
        label = f"{r['node']} {r['subject']}".strip()
        p.append(f'<text x="{label_w - 8}" y="{y + 14}" text-anchor="end" font-size="11.5" fill="#374151">{_e(label)}</text>')
        if r.get("value") is None:
            p.append(f'<text x="{label_w + 4}" y="{y + 14}" font-size="11.5" fill="{HEAT_ERROR}">no value ({_e(r.get("status"))})</text>')
            continue
        w = max(1.0, bar_w * float(r["value"]) / top)
        fill = {"pass": "#34a853", "fail": "#e5484d", "error": "#f59e0b"}.get(str(r.get("status")), "#9ca3af")
        p.append(f'<g class="bar" data-status="{_e(r.get("status"))}"><title>{_e(label)}: {_num(r["value"])} {_e(unit)} '
                 f'({_e(r.get("status"))})</title><rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" '
                 f'rx="2" fill="{fill}"/><text x="{label_w + w + 5:.1f}" y="{y + 14}" font-size="11" '
                 f'fill="#111827">{_e(_num(r["value"]))}</text></g>')
    if limit is not None:
        x = label_w + bar_w * float(limit) / top
        kind = "floor" if th.get("floor") is not None else "ceiling"
        p.append(f'<line class="threshold" x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{len(rows) * row_h}" stroke="#111827" '
                 f'stroke-width="1.5" stroke-dasharray="5 3"/><text x="{x:.1f}" y="{len(rows) * row_h + 16}" '
                 f'text-anchor="middle" font-size="11" fill="#111827">{kind} {_e(_num(limit))} {_e(unit)}</text>')
    p.append("</svg>")
    return "".join(p)


def _html_bars(cert: dict) -> str:
    blocks = []
    for title, unit, rows, th in _bar_rows(cert):
        blocks.append(f'<div class="barchart"><h3>{_e(title)} <span class="note">({_e(unit)}; '
                      f'{_e(_threshold_text(th, unit))})</span></h3>{_bars_svg(rows, th, unit)}</div>')
    if not blocks:
        blocks.append('<p class="note">No per-node measurements with a value in this certificate.</p>')
    return '<section id="bars"><h2>Per-node measurements against thresholds</h2>' + "".join(blocks) + "</section>"


def _eo(f: dict) -> str:
    subj = f"{f.get('subject')}: " if f.get("subject") else ""
    return f"{subj}expected {_clean(f.get('expected'))}, observed {_clean(f.get('observed'))}"


def _html_matrix(cert: dict) -> str:
    nodes = sorted(cert.get("nodes") or {}, key=_natural)
    checks = _checks(cert)
    head = "".join(
        f'<th>{_e(n)}<br>{_pill(str(cert["nodes"][n].get("verdict")))}</th>' for n in nodes)
    rows = []
    group = None
    per_node = {n: _by_check(cert["nodes"][n]) for n in nodes}
    for check in checks:
        g = check.split(".", 1)[0]
        if g != group:
            group = g
            rows.append(f'<tr class="group"><th colspan="{len(nodes) + 1}">{_e(g)}</th></tr>')
        cells = []
        for n in nodes:
            fs = per_node[n].get(check, [])
            verdict = str(cert["nodes"][n].get("verdict"))
            if not fs:
                st = "unreachable" if verdict in ("unreachable", "error") else "none"
                cells.append(f'<td class="st-{st}" title="{_e(n)}: {_e(check)} not evaluated">—</td>')
                continue
            st = aggregate(f.get("status") for f in fs)
            bad = [f for f in fs if f.get("status") == st] if st in ("fail", "error") else []
            text = st if len(fs) == 1 else f"{st} {sum(1 for f in fs if f.get('status') == st)}/{len(fs)}"
            tip = "\n".join(_eo(f) for f in (bad or fs))
            detail = "".join(f'<div class="eo">{_e(_eo(f))}</div>' for f in bad[:2])
            if len(bad) > 2:
                detail += f'<div class="eo">… {len(bad) - 2} more</div>'
            cells.append(f'<td class="st-{st}" title="{_e(tip)}">{_e(text)}{detail}</td>')
        rows.append(f'<tr><th class="check">{_e(check)}</th>{"".join(cells)}</tr>')
    if not checks:
        rows.append(f'<tr><td colspan="{len(nodes) + 1}" class="st-none">no findings</td></tr>')
    return ('<section id="matrix"><h2>Checks × nodes</h2><p class="note">Hover a cell for every subject\'s expected and '
            'observed values; failing cells show them below.</p><table class="matrix"><thead><tr><th class="check">check</th>'
            + head + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></section>")


def _html_versions(cert: dict) -> str:
    per = (cert.get("versions") or {}).get("nodes") or {}
    if not per:
        return ""
    cols = ("driver", "nccl", "ofed")
    common = {c: Counter(str(v.get(c)) for v in per.values() if v.get(c) is not None).most_common(1) for c in cols}
    rows = []
    for n in sorted(per, key=_natural):
        tds = []
        for c in cols:
            val = per[n].get(c)
            drift = val is not None and common[c] and str(val) != common[c][0][0]
            tds.append(f'<td{" class=drift" if drift else ""}>{_e(val if val is not None else "—")}</td>')
        rows.append(f"<tr><th>{_e(n)}</th>{''.join(tds)}</tr>")
    return ('<section id="versions"><h2>Software versions</h2><table class="plain"><thead><tr><th>node</th>'
            '<th>driver</th><th>NCCL</th><th>OFED</th></tr></thead><tbody>' + "".join(rows)
            + '</tbody></table><p class="note">Highlighted: differs from the most common version.</p></section>')


def _html_thresholds(cert: dict) -> str:
    ths = cert.get("thresholds") or {}
    if not ths:
        return ""
    rows = []
    for probe, th in sorted(ths.items()):
        kind = "floor" if th.get("floor") is not None else "ceiling"
        rows.append(f"<tr><td><code>{_e(probe)}</code></td><td>{kind}</td><td>{_e(_num(th.get(kind)))}</td>"
                    f"<td>{_e(_unit(th.get('unit')))}</td><td>{_e(th.get('source'))}</td></tr>")
    return ('<section id="thresholds"><h2>Thresholds held to</h2><table class="plain"><thead><tr><th>probe</th>'
            '<th>kind</th><th>value</th><th>unit</th><th>source</th></tr></thead><tbody>' + "".join(rows)
            + "</tbody></table></section>")


def _html_link_evidence(cert: dict) -> str:
    """The node-to-node measurements that did not pass, each with its expected, observed and the
    tool's output (certificates before links carried evidence show what they have)."""
    bad = [lk for lk in cert.get("links") or [] if lk.get("status") != "pass"]
    if not bad:
        return ""
    blocks = []
    for lk in sorted(bad, key=lambda x: (_natural(x.get("a")), _natural(x.get("b")), str(x.get("probe")), _fabric(x))):
        fab = "all rails" if lk.get("fabric") is None else f"fabric {lk.get('fabric')}"
        subj = f" · {_e(lk.get('subject'))}" if lk.get("subject") else ""
        evidence = _clean(lk.get("evidence")) or "(no evidence recorded)"
        blocks.append(f'<details class="ev" open><summary>{_pill(str(lk.get("status")))} <code>{_e(lk.get("probe"))}</code> '
                      f'{_e(lk.get("a"))} → {_e(lk.get("b"))} · {_e(fab)} · round {_e(lk.get("round"))}{subj}</summary>'
                      f'<dl class="eo"><dt>expected</dt><dd>{_e(lk.get("expected") or "—")}</dd>'
                      f'<dt>observed</dt><dd>{_e(lk.get("observed") or "—")}</dd></dl><pre>{html.escape(evidence)}</pre></details>')
    return '<section id="link-evidence"><h2>Links that did not pass</h2>' + "".join(blocks) + "</section>"


def _html_slurm(cert: dict) -> str:
    acts = cert.get("slurm") or []
    if not acts:
        return ""
    rows = []
    for a in acts:
        ok = _pill("pass", "done") if a.get("ok") else _pill("error", "not done")
        rows.append(f"<tr><th>{_e(a.get('node'))}</th><td>{_e(a.get('slurm_node'))}</td><td>{_e(a.get('action'))}</td>"
                    f"<td>{_e(a.get('reason') or '—')}</td><td>{ok}</td><td>{_e(a.get('detail'))}</td></tr>")
    return ('<section id="slurm"><h2>Slurm (--drain slurm)</h2><table class="plain"><thead><tr><th>node</th>'
            '<th>Slurm node</th><th>action</th><th>reason</th><th></th><th>detail</th></tr></thead><tbody>'
            + "".join(rows) + "</tbody></table></section>")


def _html_evidence(cert: dict) -> str:
    blocks = []
    for n in sorted(cert.get("nodes") or {}, key=_natural):
        node = cert["nodes"][n]
        fs = node.get("findings") or []
        verdict = str(node.get("verdict"))
        c = Counter(str(f.get("status")) for f in fs)
        pills = "".join(_pill(st, f"{c[st]} {st}") for st in STATUS_ORDER if c.get(st))
        inner = []
        for f in sorted(fs, key=lambda f: (STATUS_ORDER.index(f.get("status")) if f.get("status") in STATUS_ORDER else 9)):
            subj = f" · {_e(f.get('subject'))}" if f.get("subject") else ""
            val = f" · {_e(_num(f['value']))} {_e(_unit(f.get('unit')))}" if isinstance(f.get("value"), int | float) else ""
            evidence = _clean(f.get("evidence")) or "(no evidence recorded)"
            opened = " open" if f.get("status") in ("fail", "error") else ""
            inner.append(f'<details class="ev"{opened}><summary>{_pill(str(f.get("status")))} <code>{_e(f.get("check"))}</code>'
                         f'{subj}{val}</summary><dl class="eo"><dt>expected</dt><dd>{_e(f.get("expected"))}</dd>'
                         f'<dt>observed</dt><dd>{_e(f.get("observed"))}</dd></dl><pre>{html.escape(evidence)}</pre></details>')
        if not fs:
            inner.append(f'<p class="note" style="margin-left:18px">No findings: the node was {_e(verdict)}.</p>')
        opened = " open" if verdict not in ("pass",) else ""
        blocks.append(f'<details class="node"{opened}><summary>{_e(n)} {_pill(verdict)} {pills}</summary>{"".join(inner)}</details>')
    return '<section id="evidence"><h2>Evidence</h2>' + "".join(blocks) + "</section>"


def render_html(cert: dict) -> str:
    title = f"clustercert — {_clean(cert.get('cluster'))} — {_clean(cert.get('verdict', '?')).upper()}"
    csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    body = "".join([
        _html_cards(cert), _html_localisation(cert), _html_heatmaps(cert), _html_bars(cert),
        _html_matrix(cert), _html_slurm(cert), _html_versions(cert), _html_thresholds(cert), _html_evidence(cert),
        _html_link_evidence(cert),
    ])
    v = (cert.get("versions") or {}).get("clustercert", "")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"
            f"{_html_header(cert)}<main>{body}<footer>clustercert {_e(v)} · "
            "check the signature with <code>clustercert verify certificate.json --key signing.pub</code>"
            "</footer></main></body></html>\n")


# ---- JUnit ----------------------------------------------------------------------------------

def render_junit(cert: dict) -> bytes:
    cluster = _clean(cert.get("cluster"))
    root = ET.Element("testsuites", name=f"clustercert {cluster}")
    totals = Counter()

    def suite(name: str) -> ET.Element:
        return ET.SubElement(root, "testsuite", name=name, hostname=cluster,
                             timestamp=_clean(cert.get("started")))

    def case(parent: ET.Element, tally: Counter, classname: str, name: str, status: str,
             message: str, text: str) -> None:
        tc = ET.SubElement(parent, "testcase", classname=_clean(classname), name=_clean(name), time="0")
        tally["tests"] += 1
        tag = {"fail": "failure", "error": "error", "skip": "skipped"}.get(status)
        if tag:
            el = ET.SubElement(tc, tag, message=_clean(message)[:1000])
            if tag != "skipped":
                el.set("type", status)
            el.text = _clean(text)
            tally[{"failure": "failures", "error": "errors", "skipped": "skipped"}[tag]] += 1
        elif text:
            ET.SubElement(tc, "system-out").text = _clean(text)

    nodes_suite, tally = suite("nodes"), Counter()
    for n in sorted(cert.get("nodes") or {}, key=_natural):
        node = cert["nodes"][n]
        by = _by_check(node)
        if not by and node.get("verdict") in ("unreachable", "error"):
            case(nodes_suite, tally, n, "node.status", "error", f"node {node.get('verdict')}",
                 f"{n} was {node.get('verdict')}: no check could run")
            continue
        for check, fs in by.items():
            st = aggregate(f.get("status") for f in fs)
            st = "pass" if st == "none" else st
            picked = [f for f in fs if f.get("status") == st] if st in ("fail", "error") else fs
            message = "; ".join(_eo(f) for f in picked[:3]) + (f" (+{len(picked) - 3} more)" if len(picked) > 3 else "")
            text = "\n\n".join(f"[{f.get('status')}] {_eo(f)}\n{_clean(f.get('evidence'))}".rstrip() for f in picked)
            case(nodes_suite, tally, n, check, st, message, text)
    links_suite, ltally = suite("links"), Counter()
    for link in sorted(cert.get("links") or [], key=lambda x: (_fabric(x), str(x.get("probe")),
                                                               _natural(x.get("a")), _natural(x.get("b")),
                                                               int(x.get("round", 1)))):
        th = _link_threshold(cert, link)
        unit = _unit(link.get("unit"))
        st = str(link.get("status"))
        name = f"{link.get('a')} <-> {link.get('b')} round {link.get('round')}"
        msg = f"{_val(link.get('value'), unit)}, {_threshold_text(th, unit)}"
        fab = "all_rails" if link.get("fabric") is None else f"fabric{link.get('fabric')}"
        case(links_suite, ltally, f"link.{fab}.{link.get('probe')}", name,
             st if st in ("fail", "error") else "pass", msg, msg)
    for el, t in ((nodes_suite, tally), (links_suite, ltally)):
        for k in ("tests", "failures", "errors", "skipped"):
            el.set(k, str(t[k]))
            totals[k] += t[k]
        el.set("time", "0")
    for k in ("tests", "failures", "errors", "skipped"):
        root.set(k, str(totals[k]))
    root.set("time", f"{_seconds(cert):.1f}")
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


# ---- Markdown -------------------------------------------------------------------------------

def _md(text) -> str:
    """One Markdown table cell / inline text: no newlines, pipes and backticks escaped."""
    s = _clean(text).replace("\r", " ").replace("\n", " ")
    return s.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`").replace("<", "&lt;")


def render_summary(cert: dict) -> str:
    c = counts(cert)
    verdict = str(cert.get("verdict", "?"))
    fp = _fingerprint(cert)
    out = [f"# clustercert certificate: {_md(cert.get('cluster'))} — **{verdict.upper()}**", ""]
    out.append(f"- started {_md(cert.get('started'))}, finished {_md(cert.get('finished'))} "
               f"({_duration(cert)}), {cert.get('rounds')} round(s)")
    v = cert.get("versions") or {}
    out.append(f"- clustercert {_md(v.get('clustercert'))}, ansible-core {_md(v.get('ansible-core'))}; "
               f"profiles: {_md(', '.join(sorted(cert.get('profiles') or {})) or '—')}")
    out.append(f"- signed by {fp}" if fp else "- unsigned")
    out += ["", "## Counts", "", "| | total | pass | fail | error | other |", "|---|---:|---:|---:|---:|---:|"]
    for key, title in (("nodes", "nodes"), ("checks", "node × check"), ("links", "links")):
        cc = c[key]
        other = sum(cc.values()) - cc["pass"] - cc["fail"] - cc["error"]
        extra = ", ".join(f"{k} {cc[k]}" for k in sorted(cc) if k not in ("pass", "fail", "error"))
        out.append(f"| {title} | {sum(cc.values())} | {cc['pass']} | {cc['fail']} | {cc['error']} | "
                   f"{other}{f' ({extra})' if extra else ''} |")
    out += ["", "## Failing nodes", ""]
    bad_nodes = [n for n in sorted(cert.get("nodes") or {}, key=_natural) if cert["nodes"][n].get("verdict") != "pass"]
    if not bad_nodes:
        out.append("None: every node passed.")
    for n in bad_nodes:
        node = cert["nodes"][n]
        out.append(f"- **{_md(n)}** — {_md(node.get('verdict'))}")
        shown = False
        for check, fs in _by_check(node).items():
            st = aggregate(f.get("status") for f in fs)
            if st in ("fail", "error"):
                shown = True
                worst = [f for f in fs if f.get("status") == st]
                out.append(f"  - `{_md(check)}` {st}: " + "; ".join(_md(_eo(f)) for f in worst[:3])
                           + (f" (+{len(worst) - 3} more)" if len(worst) > 3 else ""))
        if not shown:
            out.append("  - no check could run" if not node.get("findings") else "  - (no failing check recorded)")
    out += ["", "## Localisation", ""]
    loc = cert.get("localisation") or []
    if not loc:
        out.append("Nothing localised.")
    for item in loc:
        out.append(f"- {_md(item.get('kind'))}: **{_md(_loc_subject(item))}** — {_md(item.get('reason'))}")
    out += ["", "## Links", ""]
    links = cert.get("links") or []
    if not links:
        out.append("No link measurements.")
    else:
        out += ["| fabric | probe | a | b | round | value | threshold | status |", "|---:|---|---|---|---:|---:|---|---|"]
        for link in sorted(links, key=lambda x: (_fabric(x), str(x.get("probe")), _natural(x.get("a")),
                                                 _natural(x.get("b")), int(x.get("round", 1)))):
            th = _link_threshold(cert, link)
            unit = _unit(link.get("unit"))
            status = str(link.get("status"))
            fab = 'all' if link.get('fabric') is None else link.get('fabric')
            out.append(f"| {fab} | {_md(link.get('probe'))} | {_md(link.get('a'))} | {_md(link.get('b'))} | "
                       f"{link.get('round')} | {_val(link.get('value'), unit)} | {_md(_threshold_text(th, unit))} | "
                       f"{'**' + status + '**' if status != 'pass' else status} |")
        bad = [lk for lk in links if lk.get("status") != "pass" and lk.get("observed")]
        if bad:
            out.append("")
        for link in bad:
            out.append(f"- {_md(link.get('probe'))} {_md(link.get('a'))} → {_md(link.get('b'))} (round {link.get('round')}) "
                       f"{_md(link.get('status'))}: {_md(link.get('observed'))}")
    acts = cert.get("slurm") or []
    if acts:
        out += ["", "## Slurm (--drain slurm)", ""]
        for a in acts:
            what = a.get("action") if a.get("action") != "drain" else f"drain ({a.get('reason')})"
            out.append(f"- {_md(a.get('node'))} ({_md(a.get('slurm_node'))}): {_md(what)}"
                       f"{'' if a.get('ok') else ' — **not done**'}: {_md(a.get('detail'))}")
    return "\n".join(out) + "\n"


def write_reports(cert: dict, out_dir: Path) -> dict[str, Path]:
    """Write report.html, junit.xml and summary.md into ``out_dir``; returns {"html"|"junit"|"summary": path}."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"html": out_dir / "report.html", "junit": out_dir / "junit.xml", "summary": out_dir / "summary.md"}
    paths["html"].write_text(render_html(cert), encoding="utf-8")
    paths["junit"].write_bytes(render_junit(cert))
    paths["summary"].write_text(render_summary(cert), encoding="utf-8")
    return paths
