"""What the three reports share: text cleaning, number and unit formatting, aggregation of findings,
thresholds, the link groupings and the words that say how a value stands against its threshold.

Pure functions over the certificate dict (see clustercert.record.certificate for its shape)."""

from __future__ import annotations

import base64
import math
import re
from collections import Counter, defaultdict
from datetime import datetime

from clustercert.probes.catalog import PAIR_THRESHOLD
from clustercert.record.certificate import fingerprint

STATUS_ORDER = ("fail", "error", "pass", "skip")
UNIT_LABEL = {"gbit_per_s": "Gb/s", "gbyte_per_s": "GB/s", "usec": "µs", "percent": "%", "ms": "ms"}
PROBE_LABEL = {
    "ib_write_bw": "ib_write_bw (RDMA write bandwidth)",
    "ib_write_lat": "ib_write_lat (RDMA write latency)",
    "iperf3": "iperf3 (TCP over IPoIB)",
    "nccl_allreduce": "NCCL all_reduce bus bandwidth",
    # issue 22: what a training job needs
    "ib_write_bw_gdr": "ib_write_bw --use_cuda (GPUDirect RDMA bandwidth)",
    "nccl_transport": "NCCL transport (NET/IB with GDRDMA)",
    "ddp_allreduce": "DDP smoke test (torchrun all_reduce step)",
    "ddp_step": "DDP training steps (stragglers)",
}

# Above this many nodes the checks x nodes table, the per-node bars, the versions table, the evidence
# and the Markdown link table show the nodes (links) that did not pass, with a count of the others.
COLLAPSE_NODES = 64
# Up to this many nodes a round's pairs are drawn as a compact pairs x channels matrix; above, as lists.
COMPACT_PAIRS_NODES = 32

HEAT_MISSING = "#e9ebef"
HEAT_ERROR = "#5b6170"

_CTRL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def clean(text) -> str:
    """Text safe for XML 1.0 and readable in HTML: control characters shown as \\xNN."""
    s = "" if text is None else str(text)
    return _CTRL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else "\ufffd", s)


def natural(name) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(name))]


def num(v) -> str:
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


def unit_label(u) -> str:
    return UNIT_LABEL.get(u or "", u or "")


def val(v, unit: str) -> str:
    return "no value" if v is None else f"{num(v)} {unit}".rstrip()


# ---- aggregation --------------------------------------------------------------------------------

def aggregate(statuses) -> str:
    """One status for several findings of a check on a node: fail > error > pass > skip."""
    s = set(statuses)
    if not s:
        return "none"
    for st in ("fail", "error", "pass"):
        if st in s:
            return st
    return "skip"


def node_names(cert: dict) -> list[str]:
    """Every node the certificate names: its nodes and both ends of its links."""
    names = set(cert.get("nodes") or {})
    for link in cert.get("links") or []:
        names.update((link.get("a"), link.get("b")))
    names.discard(None)
    return sorted(names, key=natural)


def check_ids(cert: dict) -> list[str]:
    """Check ids in the order the evaluators produced them (first appearance across nodes)."""
    seen: dict[str, None] = {}
    for name in sorted(cert.get("nodes") or {}, key=natural):
        for f in cert["nodes"][name].get("findings") or []:
            seen.setdefault(str(f.get("check")), None)
    return list(seen)


def by_check(node: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for f in node.get("findings") or []:
        out[str(f.get("check"))].append(f)
    return out


def counts(cert: dict) -> dict:
    nodes = Counter(str(n.get("verdict")) for n in (cert.get("nodes") or {}).values())
    checks: Counter = Counter()
    for node in (cert.get("nodes") or {}).values():
        for fs in by_check(node).values():
            checks[aggregate(f.get("status") for f in fs)] += 1
    links = Counter(str(link.get("status")) for link in cert.get("links") or [])
    return {"nodes": nodes, "checks": checks, "links": links}


def eo(f: dict) -> str:
    """A finding's "subject: expected X, observed Y"."""
    subj = f"{f.get('subject')}: " if f.get("subject") else ""
    return f"{subj}expected {clean(f.get('expected'))}, observed {clean(f.get('observed'))}"


# ---- thresholds -----------------------------------------------------------------------------------

def threshold_for(cert: dict, key: str) -> dict | None:
    """The certificate's threshold ``key`` (a profile threshold's name; a link's probe name is mapped
    through the probe catalog for certificates whose links do not name theirs)."""
    ths = cert.get("thresholds") or {}
    th = ths.get(key) if key in ths else ths.get(PAIR_THRESHOLD.get(key, key))
    if isinstance(th, dict) and (th.get("floor") is not None or th.get("ceiling") is not None):
        return th
    return None


def link_threshold(cert: dict, link: dict) -> dict | None:
    """The threshold a link's ``threshold`` member names (its probe's, for older certificates)."""
    return threshold_for(cert, str(link.get("threshold") or link.get("probe")))


def threshold_text(th: dict | None, unit: str) -> str:
    if not th:
        return "no threshold recorded: coloured by status"
    if th.get("floor") is not None:
        return f"floor {num(th['floor'])} {unit}"
    return f"ceiling {num(th['ceiling'])} {unit}"


def standing(value, status: str | None, th: dict | None, unit: str, observed=None) -> str:
    """How a measured value stands, in words: "212.4 Gb/s, below the floor of 320 Gb/s",
    "3.45 µs, above the ceiling of 2 µs", "no value: timed out after 22 s"."""
    if value is None:
        why = clean(observed).strip()
        return f"no value: {why}" if why else "no value"
    text, short = val(value, unit), False
    if th is None:
        words = f"{text}, no threshold recorded"
    elif th.get("floor") is not None:
        short = value < float(th["floor"])
        words = (
            f"{text}, {'below' if short else 'at or above'} the floor of {num(th['floor'])} {unit}".rstrip()
        )
    else:
        short = value > float(th["ceiling"])
        words = (
            f"{text}, {'above' if short else 'within'} the ceiling of {num(th['ceiling'])} {unit}".rstrip()
        )
    why = clean(observed).strip()
    if status in ("fail", "error") and not short and why:
        words += f"; {status}: {why}"  # judged by something else: the outlier rule against the median, ...
    return words


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
    """Fill colour of a measured cell. Greens at or above the threshold (darker = more headroom, up to
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


def text_on(fill: str) -> str:
    r, g, b = (int(fill[i:i + 2], 16) for i in (1, 3, 5))
    return "#111827" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#ffffff"


# ---- links ----------------------------------------------------------------------------------------

def fabric_of(link: dict) -> int:
    """A link's fabric; -1 for a probe over every rail at once (NCCL across two nodes has none)."""
    f = link.get("fabric", 0)
    return -1 if f is None else int(f)


def fabric_title(fabric: int) -> str:
    return "All rails" if fabric < 0 else f"Fabric {fabric}"


def channel_title(fabric: int, probe: str) -> str:
    return f"{fabric_title(fabric)} · {PROBE_LABEL.get(probe, probe)}"


def _channel_rank(key: tuple[int, str]) -> tuple:
    rank = {p: i for i, p in enumerate(PROBE_LABEL)}
    fabric, probe = key
    return rank.get(probe, 99), probe, fabric  # one probe's fabrics side by side


def link_groups(cert: dict) -> dict[tuple[int, str], list[dict]]:
    """The links per channel (fabric, probe), in the order the reports show channels."""
    groups: dict[tuple[int, str], list[dict]] = defaultdict(list)
    for link in cert.get("links") or []:
        groups[(fabric_of(link), str(link.get("probe")))].append(link)
    return dict(sorted(groups.items(), key=lambda kv: _channel_rank(kv[0])))


def link_order(link: dict) -> tuple:
    return (
        fabric_of(link),
        str(link.get("probe")),
        natural(link.get("a")),
        natural(link.get("b")),
        int(link.get("round") or 1),
    )


def worse(a: dict, b: dict, th: dict | None) -> dict:
    """The worse of two measurements of one pair on one channel."""
    rank = {"error": 0, "fail": 1, "pass": 2}
    ra, rb = rank.get(a.get("status"), 0), rank.get(b.get("status"), 0)
    if ra != rb:
        return a if ra < rb else b
    va, vb = a.get("value"), b.get("value")
    if va is None or vb is None:
        return a if va is None else b
    if th and th.get("ceiling") is not None and th.get("floor") is None:
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
        last = max(int(e.get("round") or 1) for e in entries)
        shown = None
        for e in entries:
            if int(e.get("round") or 1) == last:
                shown = e if shown is None else worse(shown, e, th)
        out[pair] = (shown, sorted(entries, key=lambda e: int(e.get("round") or 1)))
    return out


def loc_subject(item: dict) -> str:
    """What a localisation finding names: a node, or a link (a dict, a pair, or "a<->b")."""
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
    return str(link).replace("<->", " ↔ ")


# ---- the certificate's times -----------------------------------------------------------------------

def fingerprint_of(cert: dict) -> str | None:
    sig = cert.get("signature") or {}
    try:
        return fingerprint(base64.b64decode(sig["public_key"], validate=True))
    except Exception:  # unsigned, or a key that is not one: the report just does not name a signer
        return None


def _times(cert: dict) -> tuple[datetime, datetime] | None:
    try:
        return (datetime.fromisoformat(str(cert["started"]).replace("Z", "+00:00")),
                datetime.fromisoformat(str(cert["finished"]).replace("Z", "+00:00")))
    except (KeyError, ValueError):
        return None


def seconds(cert: dict) -> float:
    """Seconds from the certificate's start to its finish (0 when either is missing)."""
    t = _times(cert)
    return max((t[1] - t[0]).total_seconds(), 0.0) if t else 0.0


def duration(cert: dict) -> str:
    if _times(cert) is None:
        return ""
    h, rem = divmod(int(seconds(cert)), 3600)
    m, s = divmod(rem, 60)
    return f"{h}h {m:02d}m {s:02d}s" if h else f"{m}m {s:02d}s"


# ---- what did not pass: the table every report opens with --------------------------------------------

_NODE_RANK = {"fail": 0, "error": 1, "unreachable": 2}


def not_passing(nodes: dict) -> list[dict]:
    """The nodes that did not pass, each with why: ``nodes`` is the certificate's ``nodes`` (name ->
    verdict, findings as dicts, detail). Per node {"node", "verdict", "check", "why", "more"}: the first
    finding with the node's verdict (fail, else error) in the evaluators' order, its "subject: expected X,
    observed Y" (an error: what it observed), and how many other checks did not pass either; an unreachable
    node's reason is its detail. Failing nodes first, then erroring, then unreachable; by name within each."""
    rows = []
    for name, node in nodes.items():
        verdict = str(node.get("verdict"))
        if verdict == "pass":
            continue
        findings = node.get("findings") or []
        if verdict == "unreachable":
            rows.append({"node": name, "verdict": verdict, "check": "", "more": 0,
                         "why": clean(node.get("detail")) or "unreachable"})
            continue
        want = verdict if verdict in ("fail", "error") else "fail"
        first = next((f for f in findings if f.get("status") == want), None) or \
            next((f for f in findings if f.get("status") in ("fail", "error")), None)
        bad_checks = {str(f.get("check")) for f in findings if f.get("status") in ("fail", "error")}
        if first is None:
            rows.append({"node": name, "verdict": verdict, "check": "", "more": 0,
                         "why": clean(node.get("detail")) or "no check could run"})
            continue
        if first.get("status") == "error":
            subj = f"{first.get('subject')}: " if first.get("subject") else ""
            why = subj + (clean(first.get("observed")) or "could not run")
        else:
            why = eo(first)
        rows.append({"node": name, "verdict": verdict, "check": str(first.get("check")), "why": why,
                     "more": len(bad_checks - {str(first.get("check"))})})
    rows.sort(key=lambda r: (_NODE_RANK.get(r["verdict"], 1), natural(r["node"])))
    return rows


def more_text(n: int) -> str:
    return f"+{n} more failing check{'s' if n != 1 else ''}" if n else ""


def not_passing_title(cert_nodes: dict, rows: list[dict]) -> str:
    """"Did not pass: 2 of 8 nodes (1 fail, 1 unreachable)" or "Every node passed (8 nodes)"."""
    total = len(cert_nodes)
    if not rows:
        return f"Every node passed ({total} node{'s' if total != 1 else ''})"
    c = Counter(r["verdict"] for r in rows)
    parts = ", ".join(f"{c[v]} {v}" for v in sorted(c, key=lambda v: _NODE_RANK.get(v, 1)))
    return f"Did not pass: {len(rows)} of {total} node{'s' if total != 1 else ''} ({parts})"
