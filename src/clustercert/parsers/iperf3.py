"""iperf3 results: ``iperf3 -J`` JSON (kind ``iperf3-json``) and plain text (kind ``iperf3``).

Both kinds return the same shape::

    {"ok": bool,               # False when iperf3 reported an error, or the receiver got 0 bytes
     "error": str | None,      # iperf3's own error ("unable to connect to server: ...") or the 0-byte note
     "role": "client" | "server",
     "protocol": "TCP" | "UDP" | None,
     "num_streams": int | None,
     "duration_s": float | None,          # requested test length (JSON test_start.duration); text: sender
     seconds "remote_host": str | None, "remote_port": int | None,
     "version": "iperf 3.9" | None,
     "sender":   {"bytes": int, "seconds": float, "gbit_per_s": float, "retransmits": int | None} | None,
     "receiver": {"bytes": int, "seconds": float, "gbit_per_s": float} | None,
     "udp": {"jitter_ms": float, "lost_packets": int, "packets": int, "lost_percent": float} | None,
     "intervals": int,         # number of per-interval reports

``gbit_per_s`` is 10^9 bit/s. Text transfer sizes (``KBytes``/``MBytes``/``GBytes``) are 1024-based as
iperf3 prints them, so ``bytes`` from text output is approximate (3 significant digits); rates use the
decimal ``Kbits``/``Mbits``/``Gbits`` units iperf3 prints. With several streams the ``[SUM]`` lines are used.

     "leading_text": str | None,   # JSON only: what preceded the document ("^C" of an interrupted client,
                                   # a "warning: ..." line), None when the output starts with '{'
     "timestamped": bool}      # text only: lines carried a --timestamps prefix (JSON: always False)

An ``iperf3: error - ...`` line (text, also after the JSON document) or an ``"error"`` member (JSON)
gives ``ok: False`` with that message. Text run with ``--timestamps[=format]`` carries a date before
every line (``Wed May 14 11:21:02 2025 [  5] ...`` by default, any strftime format otherwise): the prefix
is skipped on each line. Text without any sender/receiver summary line and no error raises ParseError
(truncated run).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from clustercert.parsers._text import text_lines
from clustercert.parsers.base import ParseError, register


def _empty() -> dict:
    return {"ok": False, "error": None, "role": "client", "protocol": None, "num_streams": None,
            "duration_s": None, "remote_host": None, "remote_port": None, "version": None,
            "sender": None, "receiver": None, "udp": None, "intervals": 0, "leading_text": None,
            "timestamped": False}


def _gbit(bits_per_second: float) -> float:
    return round(float(bits_per_second) / 1e9, 9)


def _finish(rec: dict) -> dict:
    if rec["error"] is None and rec["receiver"] is not None and rec["receiver"]["bytes"] == 0:
        rec["error"] = "receiver reported 0 bytes received"
    rec["ok"] = rec["error"] is None and (rec["sender"] is not None or rec["receiver"] is not None)
    return rec


@register("iperf3-json", "iperf3 -J: sender/receiver throughput (gbit_per_s), retransmits, errors")
def parse_iperf3_json(text: str) -> dict:
    kind = "iperf3-json"
    text_lines(kind, text, "iperf3 -J JSON document")
    start_at = text.find("{")
    if start_at < 0:
        raise ParseError(kind, "expected a JSON object ('{') in iperf3 -J output")
    leading = text[:start_at].strip() or None  # "^C" of an interrupted client, a warning line
    try:
        doc, end_at = json.JSONDecoder().raw_decode(text[start_at:])  # tolerate trailing prompt lines
    except json.JSONDecodeError as exc:
        raise ParseError(
            kind, f"invalid JSON ({exc.msg} at line {exc.lineno}); expected iperf3 -J output"
        ) from exc
    if not isinstance(doc, dict) or not ({"start", "end"} <= doc.keys() or "error" in doc):
        raise ParseError(kind, "expected a JSON object with 'start' and 'end' (iperf3 -J output)")
    rec = _empty()
    rec["leading_text"] = leading
    start = doc.get("start") or {}
    end = doc.get("end") or {}
    rec["error"] = doc.get("error") or None
    if rec["error"] is None:  # iperf3 prints some failures after the document ("iperf3: error - ...")
        trailing = re.search(r"^iperf3?: (?:error|interrupt) - (.*)$", text[start_at + end_at:], re.MULTILINE)
        rec["error"] = trailing.group(1).strip() if trailing else None
    rec["version"] = start.get("version")
    rec["role"] = "server" if "accepted_connection" in start else "client"
    ts = start.get("test_start") or {}
    rec["protocol"] = ts.get("protocol")
    rec["num_streams"] = ts.get("num_streams")
    rec["duration_s"] = ts.get("duration")
    conn = start.get("connecting_to") or start.get("accepted_connection") or {}
    rec["remote_host"] = conn.get("host")
    rec["remote_port"] = conn.get("port")
    rec["intervals"] = len(doc.get("intervals") or [])
    sent = end.get("sum_sent")
    received = end.get("sum_received")
    if sent:
        rec["sender"] = {"bytes": int(sent["bytes"]), "seconds": float(sent["seconds"]),
                         "gbit_per_s": _gbit(sent["bits_per_second"]), "retransmits": sent.get("retransmits")}
    if received:
        rec["receiver"] = {"bytes": int(received["bytes"]), "seconds": float(received["seconds"]),
                           "gbit_per_s": _gbit(received["bits_per_second"])}
    udp_sum = end.get("sum")
    if udp_sum and "jitter_ms" in udp_sum:
        rec["udp"] = {
            "jitter_ms": float(udp_sum["jitter_ms"]),
            "lost_packets": int(udp_sum.get("lost_packets", 0)),
            "packets": int(udp_sum.get("packets", 0)),
            "lost_percent": float(udp_sum.get("lost_percent", 0)),
        }
        if rec["sender"] is None and rec["receiver"] is None:
            rec["receiver"] = {"bytes": int(udp_sum["bytes"]), "seconds": float(udp_sum["seconds"]),
                               "gbit_per_s": _gbit(udp_sum["bits_per_second"])}
    if rec["error"] is None and rec["sender"] is None and rec["receiver"] is None:
        raise ParseError(kind, "truncated: 'end' has no sum_sent/sum_received/sum and there is no 'error'")
    return _finish(rec)


# --------------------------------------------------------------------------- text

_BYTE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_BIT_UNITS = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_LINE_RE = re.compile(
    r"^\[\s*(?P<id>\d+|SUM)\]\s+(?P<start>[\d.]+)-(?P<end>[\d.]+)\s+sec\s+"
    r"(?P<xfer>[\d.]+)\s+(?P<xu>[KMGT]?)Bytes\s+(?P<rate>[\d.]+)\s+(?P<ru>[KMGT]?)(?P<rk>bits|Bytes)/sec"
    r"(?P<rest>.*)$"
)
# What starts an iperf3 line once a --timestamps prefix is skipped (the prefix format is the user's).
_START_RE = re.compile(
    r"\[\s*(?:\d+|SUM|ID)\]|iperf3?: |Connecting to host |Accepted connection from |Server listening on |"
    r"iperf 3\.|iperf Done\.|- - - |-{10,}"
)
# A --timestamps prefix holds a time of day, a date or epoch seconds (strftime format of the user's choice).
_STAMP_RE = re.compile(r"\d{1,2}:\d{2}|\d{4}-\d{1,2}-\d{1,2}|\d{1,2}/\d{1,2}/\d{2,4}|\b\d{9,}\b")
_UDP_RE = re.compile(r"(?P<jitter>[\d.]+)\s+ms\s+(?P<lost>\d+)/(?P<total>\d+)\s+\((?P<pct>[\d.e+-]+)%\)")


def _rate_gbit(value: str, prefix: str, unit: str) -> float:
    bits = float(value) * _BIT_UNITS[prefix] * (8 if unit == "Bytes" else 1)
    return round(bits / 1e9, 9)


@dataclass
class _TextScan:
    """What one pass over iperf3's text has seen: the record so far, the summary lines by
    ``sum|stream:sender|receiver``, the stream ids and iperf3's error lines."""

    rec: dict = field(default_factory=_empty)
    summaries: dict[str, dict] = field(default_factory=dict)
    stream_ids: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)


def _unstamped(rec: dict, ln: str) -> str:
    """``ln`` without a --timestamps prefix (a date/time before iperf3's own text); other leading text is
    left alone."""
    m = _START_RE.search(ln)
    if m and m.start() > 0 and _STAMP_RE.search(ln[: m.start()]):
        rec["timestamped"] = True
        return ln[m.start():]
    return ln


def _accepted(scan: _TextScan, m: re.Match) -> None:
    rec = scan.rec
    rec["role"] = "server"
    rec["remote_host"], rec["remote_port"] = m.group(1), int(m.group(2))
    scan.summaries.clear()  # a new session on the server: keep the last one only
    scan.stream_ids.clear()
    rec["intervals"] = 0


def _connecting(scan: _TextScan, m: re.Match) -> None:
    scan.rec["remote_host"], scan.rec["remote_port"] = m.group(1), int(m.group(2))


def _udp_header(scan: _TextScan, m: re.Match) -> None:
    scan.rec["protocol"] = "UDP"


def _error(scan: _TextScan, m: re.Match) -> None:
    scan.errors.append(m.group(1).strip())


def _listening(scan: _TextScan, m: re.Match) -> None:
    scan.rec["role"] = "server"


def _version(scan: _TextScan, m: re.Match) -> None:
    scan.rec["version"] = f"iperf {m.group(1)}"


# iperf3's lines around its reports, each with what it sets; tried in this order
_SESSION_LINES = (
    (re.compile(r"^iperf3?: (?:error|interrupt) - (.*)$"), _error),
    (re.compile(r"^Server listening on"), _listening),
    (re.compile(r"^Connecting to host (\S+), port (\d+)"), _connecting),
    (re.compile(r"^Accepted connection from (\S+), port (\d+)"), _accepted),
    (re.compile(r"^iperf (3\.\S+)$"), _version),
    (re.compile(r"^\[ ID\].*(?:Jitter|Total Datagrams)"), _udp_header),
)


def _session_line(scan: _TextScan, ln: str) -> bool:
    for rx, take in _SESSION_LINES:
        m = rx.match(ln)
        if m:
            take(scan, m)
            return True
    return False


def _summary_entry(m: re.Match, role: str, protocol: str | None) -> dict:
    rest = m.group("rest")
    entry = {
        "bytes": int(float(m.group("xfer")) * _BYTE_UNITS[m.group("xu")]),
        "seconds": round(float(m.group("end")) - float(m.group("start")), 6),
        "gbit_per_s": _rate_gbit(m.group("rate"), m.group("ru"), m.group("rk")),
    }
    if role == "sender":
        tokens = rest.split()
        entry["retransmits"] = (
            int(tokens[0]) if tokens and tokens[0].isdigit() and protocol != "UDP" else None
        )
    um = _UDP_RE.search(rest)
    if um:
        entry["_udp"] = {"jitter_ms": float(um.group("jitter")), "lost_packets": int(um.group("lost")),
                         "packets": int(um.group("total")), "lost_percent": float(um.group("pct"))}
    return entry


def _report_line(scan: _TextScan, m: re.Match) -> None:
    """A '[ ID] start-end sec ...' line: an interval report, or a sender/receiver summary."""
    rest = m.group("rest").rstrip()
    role = "sender" if rest.endswith("sender") else ("receiver" if rest.endswith("receiver") else None)
    stream = m.group("id") != "SUM"
    if stream:
        scan.stream_ids.add(m.group("id"))
    if role is None:
        if stream:
            scan.rec["intervals"] += 1
        return
    entry = _summary_entry(m, role, scan.rec["protocol"])
    if "_udp" in entry:
        scan.rec["protocol"] = "UDP"
    key = f"{'stream' if stream else 'sum'}:{role}"
    if not stream or key not in scan.summaries:
        scan.summaries[key] = entry


def _take_summaries(rec: dict, summaries: dict[str, dict]) -> None:
    """Sender and receiver from the [SUM] lines, else the (one) stream's; UDP figures the receiver's."""
    for role in ("sender", "receiver"):
        entry = summaries.get(f"sum:{role}") or summaries.get(f"stream:{role}")
        if entry is None:
            continue
        udp = entry.pop("_udp", None)
        if udp and (rec["udp"] is None or role == "receiver"):
            rec["udp"] = udp
        rec[role] = entry


@register("iperf3", "iperf3 text output (client or server): sender/receiver summary, errors")
def parse_iperf3_text(text: str) -> dict:
    kind = "iperf3"
    scan = _TextScan()
    rec = scan.rec
    for raw in text_lines(kind, text, "iperf3 text output ('[ ID] Interval ...' reports)"):
        ln = _unstamped(rec, raw.strip())
        if _session_line(scan, ln):
            continue
        m = _LINE_RE.match(ln)
        if m:
            _report_line(scan, m)
    _take_summaries(rec, scan.summaries)
    errors = scan.errors
    if errors:
        rec["error"] = errors[0]
    if rec["sender"] is None and rec["receiver"] is None and not errors:
        raise ParseError(
            kind, "no sender/receiver summary line and no 'iperf3: error' line (truncated or not iperf3)"
        )
    rec["protocol"] = rec["protocol"] or ("TCP" if (rec["sender"] or rec["receiver"]) else None)
    rec["num_streams"] = len(scan.stream_ids) or None
    if rec["sender"] is not None:
        rec["duration_s"] = rec["sender"]["seconds"]
    return _finish(rec)
