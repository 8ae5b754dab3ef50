"""perftest (ib_write_bw, ib_read_bw, ib_send_bw, ib_*_lat) and ibv_*_pingpong text output.

``--out_json`` is known to emit invalid JSON, so the text table is parsed. Client and server output are
both accepted (the server prints the ``* Waiting for client to connect... *`` banner first).

Units: ``--report_gbits`` tables are in Gb/sec (10^9 bit/s). Without it, perftest reports
``MB/sec`` (older releases) or ``MiB/sec`` (newer) and both mean 2^20 bytes/s (perftest divides by
0x100000), so ``gbit_per_s = value * 1048576 * 8 / 1e9``. The reported value and unit are kept.

Record::

    {"ok": bool,                      # False on any error line, or when no result table was printed
     "error": str | None,             # first error line
     "errors": [str], "warnings": [str],   # warnings: "Conflicting CPU frequency ...", "Warning: ..."
     "tool": "ib_write_bw" | "ib_send_lat" | "ibv_rc_pingpong" | None,   # None for bare table excerpts
     "test": "bw" | "lat" | "pingpong" | None, "verb": "write" | "read" | "send" | "atomic" | None,
     "title": "RDMA_Write BW Test" | None,
     "role": "client" | "server" | None,  # server when the waiting banner is present
     "waiting_for_client": bool,          # server banner seen but no result table
     "bidirectional": bool,               # "Bidirectional" in the test title
     "device": "mlx5_0" | None, "link_type": "IB" | "Ethernet" | None, "transport_type": str | None,
     "connection_type": "RC" | None, "gid_index": int | None, "mtu_bytes": int | None,
     "num_qps": int | None, "rdma_cm": bool | None,
     "settings": {"Dual-port": "OFF", ...},   # every "key : value" pair of the banner, verbatim
     "report_unit": "Gb/sec" | "MiB/sec" | "MB/sec" | "usec" | None,
     "rows": [...],
     # convenience: bw tests -> the row with the largest message size; lat -> the smallest
     "bytes": int | None, "bw_avg_gbit_per_s": float | None, "bw_peak_gbit_per_s": float | None,
     "t_typical_usec": float | None, "t_avg_usec": float | None}

BW rows: ``{"bytes", "iterations", "bw_peak_gbit_per_s", "bw_avg_gbit_per_s", "bw_peak_reported",
"bw_avg_reported", "msg_rate_mpps"}``. Lat rows: ``{"bytes", "iterations", "t_min_usec", "t_max_usec",
"t_typical_usec", "t_avg_usec", "t_stdev_usec", "t_p99_usec", "t_p99_9_usec", "tps_average"}`` (None where
the column is absent). Pingpong rows: ``{"bytes", "seconds", "bw_gbit_per_s", "iterations",
"usec_per_iter"}``.

Error output (``Couldn't connect``, ``Unable to init``, ``Failed to ...``, ``Completion with error``) is
parsed into ``ok: False`` with the message; rows printed before the failure are kept. Input with neither
a perftest banner, a result table nor a recognised error raises ParseError; so does a result table
header with no rows and no error (truncated).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from clustercert.parsers._text import text_lines
from clustercert.parsers.base import ParseError, register

_MIB_TO_GBIT = 1048576 * 8 / 1e9

_TITLE_RE = re.compile(
    r"^\s*(?P<verb>RDMA_Write|RDMA_Read|Send|Atomic)\b(?P<mid>.*?)\b(?P<kind>BW|Latency)\s+Test\s*$"
)
_KV_RE = re.compile(r"([A-Za-z][\w*.() -]*?)\s*:\s*(\S+)")
_COLS = [
    (re.compile(r"#bytes"), "bytes"),
    (re.compile(r"#iterations"), "iterations"),
    (re.compile(r"BW peak\[([^\]]+)\]"), "bw_peak"),
    (re.compile(r"BW average\[([^\]]+)\]"), "bw_avg"),
    (re.compile(r"MsgRate\[Mpps\]"), "msg_rate_mpps"),
    (re.compile(r"t_min\[usec\]"), "t_min_usec"),
    (re.compile(r"t_max\[usec\]"), "t_max_usec"),
    (re.compile(r"t_typical\[usec\]"), "t_typical_usec"),
    (re.compile(r"t_avg\[usec\]"), "t_avg_usec"),
    (re.compile(r"t_stdev\[usec\]"), "t_stdev_usec"),
    (re.compile(r"99\.9% percentile\[usec\]"), "t_p99_9_usec"),
    (re.compile(r"(?<![.\d])99% percentile\[usec\]"), "t_p99_usec"),
    (re.compile(r"tps average"), "tps_average"),
]
_LAT_KEYS = ("t_min_usec", "t_max_usec", "t_typical_usec", "t_avg_usec", "t_stdev_usec", "t_p99_usec",
             "t_p99_9_usec", "tps_average")
_ERR_RE = re.compile(
    r"couldn't|could not|unable to|failed|completion with error|\berror\b|timed out|refused|no such device",
    re.I,
)
# Error-only output (no banner, no table) must carry one of perftest's own messages to be accepted.
_OWN_ERR_RE = re.compile(
    r"^(?:\w+: )?(Couldn't|Unable to|Failed to|Failed status|Completion with error|No IB devices found|"
    r"IB device \S+ not found|Port number \d+ .*not|ethernet_\w+:)"
)
_VERBS = {"RDMA_Write": "write", "RDMA_Read": "read", "Send": "send", "Atomic": "atomic"}
_PP_BW_RE = re.compile(r"^(\d+) bytes in ([\d.]+) seconds = ([\d.]+) Mbit/sec$")
_PP_LAT_RE = re.compile(r"^(\d+) iters in ([\d.]+) seconds = ([\d.]+) usec/iter$")
_PP_START_RE = re.compile(r"'(ibv_\w+_pingpong)'")


def _header_columns(line: str) -> tuple[list[str], str | None]:
    found: list[tuple[int, str]] = []
    unit = None
    for rx, name in _COLS:
        m = rx.search(line)
        if m:
            found.append((m.start(), name))
            if name in ("bw_peak", "bw_avg"):
                unit = m.group(1)
    found.sort()
    return [name for _, name in found], unit


def _to_gbit(value: float, unit: str) -> float:
    u = unit.lower()
    if u in ("gb/sec", "gbit/sec", "gb/s"):
        return float(value)
    if u in ("mb/sec", "mib/sec"):
        return round(value * _MIB_TO_GBIT, 6)
    raise ValueError(f"unknown bandwidth unit {unit!r}")


def _settings(lines: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for ln in lines:
        for m in _KV_RE.finditer(ln):
            out.setdefault(m.group(1).strip(), m.group(2))
    return out


def _int_prefix(value: str | None) -> int | None:
    if value is None:
        return None
    m = re.match(r"(\d+)", value)
    return int(m.group(1)) if m else None


@dataclass
class _Scan:
    """What one pass over perftest's output has seen so far."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    title: str | None = None
    verb: str | None = None
    test: str | None = None
    bidir: bool = False
    banner: bool = False  # the server's "Waiting for client to connect" banner
    banner_lines: list[str] = field(default_factory=list)
    in_banner: bool = False
    columns: list[str] | None = None
    unit: str | None = None
    rows: list[dict] = field(default_factory=list)
    pp_tool: str | None = None
    pp_device: str | None = None
    pp_row: dict = field(default_factory=dict)


def _banner_marker(scan: _Scan, ln: str) -> bool:
    if "Waiting for client to connect" in ln:
        scan.banner = True
        return True
    if set(ln) <= {"*"} or set(ln) <= {"-"}:
        scan.in_banner = False
        return True
    return False


def _title_line(scan: _Scan, ln: str) -> bool:
    m = _TITLE_RE.match(ln)
    if not m:
        return False
    scan.title = ln
    scan.verb = _VERBS[m.group("verb")]
    scan.test = "bw" if m.group("kind") == "BW" else "lat"
    scan.bidir = "bidirectional" in m.group("mid").lower()
    scan.in_banner = True
    return True


def _table_header(scan: _Scan, ln: str) -> bool:
    if not ln.startswith("#bytes"):
        return False
    scan.columns, scan.unit = _header_columns(ln)
    if "bytes" not in scan.columns or "iterations" not in scan.columns:
        raise ParseError("perftest", f"unrecognised result table header: {ln!r}")
    if scan.test is None:
        scan.test = "bw" if "bw_avg" in scan.columns else "lat"
    scan.in_banner = False
    return True


def _warning_line(scan: _Scan, ln: str) -> bool:
    if ln.startswith("Conflicting CPU frequency") or ln.lower().startswith("warning"):
        scan.warnings.append(ln)
        return True
    return False


def _pingpong_line(scan: _Scan, ln: str) -> bool:
    m = _PP_START_RE.search(ln)
    if m and ln.startswith("Starting"):
        scan.pp_tool = m.group(1)
        dm = re.search(r"\bfor (\S+)", ln)
        scan.pp_device = dm.group(1) if dm else None
        return True
    m = _PP_BW_RE.match(ln)
    if m:
        scan.pp_row.update(bytes=int(m.group(1)), seconds=float(m.group(2)),
                           bw_gbit_per_s=round(float(m.group(3)) / 1000, 6))
        return True
    m = _PP_LAT_RE.match(ln)
    if m:
        scan.pp_row.update(iterations=int(m.group(1)), usec_per_iter=float(m.group(3)))
        return True
    return False


def _result_row(scan: _Scan, ln: str) -> bool:
    if scan.columns is None or not re.match(r"^\d+\s+\d+\s", ln):
        return False
    values = ln.split()
    if len(values) != len(scan.columns):
        raise ParseError("perftest",
                         f"result row has {len(values)} fields, header has {len(scan.columns)}: {ln!r}")
    row_raw = dict(zip(scan.columns, values, strict=True))
    row: dict = {"bytes": int(row_raw["bytes"]), "iterations": int(row_raw["iterations"])}
    if scan.test == "bw":
        peak, avg = float(row_raw["bw_peak"]), float(row_raw["bw_avg"])
        row.update(
            bw_peak_gbit_per_s=_to_gbit(peak, scan.unit or ""),
            bw_avg_gbit_per_s=_to_gbit(avg, scan.unit or ""),
            bw_peak_reported=peak,
            bw_avg_reported=avg,
            msg_rate_mpps=float(row_raw["msg_rate_mpps"]) if "msg_rate_mpps" in row_raw else None,
        )
    else:
        for key in _LAT_KEYS:
            row[key] = float(row_raw[key]) if key in row_raw else None
    scan.rows.append(row)
    return True


# Tried in this order on every non-blank line; a line none of them claims is banner text or an error.
_LINE_HANDLERS = (_banner_marker, _title_line, _table_header, _warning_line, _pingpong_line, _result_row)


def _scan(lines: list[str]) -> _Scan:
    scan = _Scan()
    for raw in lines:
        ln = raw.strip()
        if not ln or any(handler(scan, ln) for handler in _LINE_HANDLERS):
            continue
        if scan.in_banner:
            scan.banner_lines.append(ln)
        elif _ERR_RE.search(ln):
            scan.errors.append(ln)
    return scan


def _take_pingpong(scan: _Scan) -> None:
    """ibv_*_pingpong prints one 'bytes in' and one 'iters in' line: make them the single result row."""
    pp = scan.pp_row
    if not pp:
        return
    if "bytes" not in pp or "iterations" not in pp:
        raise ParseError("perftest",
                         "truncated ibv_*_pingpong output: expected both 'bytes in' and 'iters in' lines")
    scan.test = "pingpong"
    scan.rows = [{"bytes": pp["bytes"], "seconds": pp["seconds"], "bw_gbit_per_s": pp["bw_gbit_per_s"],
                  "iterations": pp["iterations"], "usec_per_iter": pp["usec_per_iter"]}]


def _require_perftest(scan: _Scan) -> None:
    """Refuse input that is not perftest output at all, or a result table cut off before its rows."""
    if not scan.rows and not scan.errors and not scan.banner:
        if scan.columns is not None:
            raise ParseError("perftest", "truncated: result table header without rows")
        raise ParseError("perftest",
                         "expected a perftest banner, a '#bytes #iterations' result table or an error")
    if (not scan.rows and not scan.banner and scan.title is None
            and not any(_OWN_ERR_RE.match(e) for e in scan.errors)):
        raise ParseError("perftest", "no perftest banner, result table or perftest error message found")


def _role(scan: _Scan, settings: dict[str, str]) -> str | None:
    role = "server" if scan.banner else ("client" if scan.title or scan.pp_tool else None)
    if role == "client" and not scan.bidir and "Connection type" in settings and "TX depth" not in settings:
        # perftest prints "TX depth" only on the client (or with -b); a server whose "Waiting for
        # client" banner was cut off still prints the rest of the header (local/remote address too).
        role = "server"
    return role


def _tool(scan: _Scan) -> str | None:
    if scan.test == "pingpong":
        return scan.pp_tool or "ibv_rc_pingpong"
    if scan.verb and scan.test:
        return f"ib_{scan.verb}_{scan.test}"
    return None


def _summary(rows: list[dict], test: str | None) -> dict:
    """bw tests: the row with the largest message size; lat: the smallest; pingpong: its one row."""
    summary = {"bytes": None, "bw_avg_gbit_per_s": None, "bw_peak_gbit_per_s": None,
               "t_typical_usec": None, "t_avg_usec": None}
    if rows and test == "bw":
        top = max(rows, key=lambda r: r["bytes"])
        summary.update(bytes=top["bytes"], bw_avg_gbit_per_s=top["bw_avg_gbit_per_s"],
                       bw_peak_gbit_per_s=top["bw_peak_gbit_per_s"])
    elif rows and test == "lat":
        low = min(rows, key=lambda r: r["bytes"])
        summary.update(bytes=low["bytes"], t_typical_usec=low["t_typical_usec"], t_avg_usec=low["t_avg_usec"])
    elif rows and test == "pingpong":
        summary.update(bytes=rows[0]["bytes"], bw_avg_gbit_per_s=rows[0]["bw_gbit_per_s"])
    return summary


def _banner_fields(settings: dict[str, str]) -> dict:
    """The typed fields read from the banner's "key : value" pairs."""
    rdma_cm = settings.get("rdma_cm QPs")
    gid = settings.get("GID index")
    return {
        "link_type": settings.get("Link type"),
        "transport_type": settings.get("Transport type"),
        "connection_type": settings.get("Connection type"),
        "gid_index": int(gid) if gid and gid.isdigit() else None,
        "mtu_bytes": _int_prefix(settings.get("Mtu")),
        "num_qps": _int_prefix(settings.get("Number of qps")),
        "rdma_cm": None if rdma_cm is None else rdma_cm.upper() == "ON",
    }


@register("perftest", "perftest ib_*_bw / ib_*_lat and ibv_*_pingpong text output (client or server)")
def parse_perftest(text: str) -> dict:
    lines = text_lines("perftest", text, "perftest output (banner and '#bytes' result table)")
    scan = _scan(lines)
    settings = _settings(scan.banner_lines)
    _take_pingpong(scan)
    _require_perftest(scan)
    waiting = scan.banner and not scan.rows and not scan.errors
    if waiting:
        scan.errors.append("server waiting for client to connect; no result table")
    test = scan.test
    return {
        "ok": not scan.errors and bool(scan.rows),
        "error": scan.errors[0] if scan.errors else None,
        "errors": scan.errors,
        "warnings": scan.warnings,
        "tool": _tool(scan),
        "test": test,
        "verb": scan.verb,
        "title": scan.title,
        "role": _role(scan, settings),
        "waiting_for_client": waiting,
        "bidirectional": scan.bidir,
        "device": settings.get("Device") or scan.pp_device,
        **_banner_fields(settings),
        "settings": settings,
        "report_unit": scan.unit if test == "bw" else ("usec" if test == "lat" else None),
        "rows": scan.rows,
        **_summary(scan.rows, test),
    }




# --------------------------------------------------------------------------------------------
# --out_json file
# --------------------------------------------------------------------------------------------

_JSON_LINE_RE = re.compile(r'^\s*"?(?P<key>[^":{}]+?)"?\s*:\s*(?P<val>.*?)\s*,?\s*$')
_JSON_TEST_RE = re.compile(
    r"^(?P<verb>RDMA_Write|RDMA_Read|Send|Atomic)_(?P<mid>.*?)_?(?P<kind>BW|Latency)_(?:.*_)?Test$"
)
_JSON_LAT = {
    "t_min": "t_min_usec",
    "t_max": "t_max_usec",
    "t_typical": "t_typical_usec",
    "t_avg": "t_avg_usec",
    "t_stdev": "t_stdev_usec",
    "percentile_99": "t_p99_usec",
    "percentile_99.9": "t_p99_9_usec",
    "tps_average": "tps_average",
}


def _loose_json(kind: str, text: str) -> tuple[dict, bool]:
    """The document and whether it was standard JSON. perftest before 2024 wrote keys and string values
    unquoted with trailing commas (linux-rdma/perftest#216), and its QoS report still writes ``sl: n``:
    read such files line by line (two levels: test_info and results)."""
    start = text.find("{")
    if start < 0:
        raise ParseError(kind, "expected perftest's --out_json document ('{ \"test_info\": ...')")
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
        if isinstance(doc, dict):
            return doc, True
    except json.JSONDecodeError:
        pass
    root: dict = {}
    stack = [root]
    for raw in text[start:].split("\n")[1:]:
        s = raw.strip()
        if not s:
            continue
        if s.startswith("}"):
            if len(stack) == 1:
                return root, False
            stack.pop()
            continue
        m = _JSON_LINE_RE.match(s)
        if not m:
            raise ParseError(kind, f"unreadable line in perftest JSON: {s!r}")
        key, val = m.group("key").strip(), m.group("val")
        if val == "{":
            child: dict = {}
            stack[-1][key] = child
            stack.append(child)
        else:
            stack[-1][key] = _loose_value(val)
    raise ParseError(kind, "truncated perftest JSON: the document is not closed")


def _loose_value(val: str):
    v = val.strip()
    if len(v) >= 2 and v[0] == v[-1] == '"':
        return v[1:-1]
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


def _json_num(value) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    return None  # missing, or a string perftest printed instead of a number


def apply_report_unit(rec: dict, unit: str) -> dict:
    """A copy of a ``perftest-json`` record with the bandwidth in Gb/s filled in, for a caller who knows
    the unit perftest reported in (``"Gb/sec"`` with --report_gbits, ``"MiB/sec"``/``"MB/sec"`` without):
    the file does not say. Raises ValueError for an unknown unit."""
    out = {**rec, "rows": [dict(r) for r in rec["rows"]], "report_unit": unit}
    for row in out["rows"]:
        for key in ("bw_peak", "bw_avg"):
            reported = row.get(f"{key}_reported")
            row[f"{key}_gbit_per_s"] = _to_gbit(reported, unit) if reported is not None else None
    if out["test"] == "bw" and out["rows"]:
        out["bw_avg_gbit_per_s"] = out["rows"][0]["bw_avg_gbit_per_s"]
        out["bw_peak_gbit_per_s"] = out["rows"][0]["bw_peak_gbit_per_s"]
    return out


@register("perftest-json", "perftest --out_json file (ib_*_bw / ib_*_lat), standard or pre-2024 unquoted")
def parse_perftest_json(text: str) -> dict:
    """``perftest-json``: the file ``--out_json`` writes, normalised to the ``perftest`` record's keys::

        {"ok": bool, "error": str | None, "errors": [str], "warnings": [str],
         "tool": "ib_write_bw" | ..., "test": "bw" | "lat", "verb": "write" | "read" | "send" | "atomic",
         "title": "RDMA_Write_BW_Test", "role": None, "waiting_for_client": False, "bidirectional": bool,
         "device", "link_type", "transport_type", "connection_type", "gid_index", "mtu_bytes", "num_qps",
         "rdma_cm", "settings": {test_info, verbatim},
         "report_unit": None,        # the file does not say which unit BW_* are in
         "rows": [one row, the perftest row keys], "bytes", "bw_avg_gbit_per_s", "bw_peak_gbit_per_s",
         "t_typical_usec", "t_avg_usec",
         "bw_avg_reported": float | None, "bw_peak_reported": float | None,   # as written, unit unknown
         "cpu_util_percent": float | None, "standard_json": bool}

    perftest writes BW_peak/BW_average in the unit of its text table (Gb/sec with --report_gbits, MiB/sec
    otherwise) without naming it, so ``bw_*_gbit_per_s`` are None here: a number of unknown unit is not
    turned into Gb/s. ``apply_report_unit(record, "Gb/sec")`` fills them for a caller that knows the
    command line. Latencies are in usec. A value perftest wrote as text where a number belongs is None.
    ``ok`` is False (with ``error``) when the results hold no readable bandwidth or latency. Files of
    perftest before 2024 (unquoted keys and strings, trailing commas) are read too (``standard_json``
    False). Input without a ``test_info``/``results`` object raises ParseError.
    """
    kind = "perftest-json"
    text_lines(kind, text, "perftest --out_json document")
    doc, standard = _loose_json(kind, text)
    info = doc.get("test_info")
    results = doc.get("results")
    if not isinstance(info, dict) or not isinstance(results, dict):
        raise ParseError(kind, "expected 'test_info' and 'results' objects (perftest --out_json)")
    title = str(info.get("test") or "")
    m = _JSON_TEST_RE.match(title)
    verb = _VERBS.get(m.group("verb")) if m else None
    test = ("bw" if m.group("kind") == "BW" else "lat") if m else ("bw" if "BW_average" in results else "lat")
    row: dict = {
        "bytes": int(results["MsgSize"]) if isinstance(results.get("MsgSize"), int) else None,
        "iterations": int(results["n_iterations"]) if isinstance(results.get("n_iterations"), int) else None,
    }
    if test == "bw":
        row.update(bw_peak_gbit_per_s=None, bw_avg_gbit_per_s=None,
                   bw_peak_reported=_json_num(results.get("BW_peak")),
                   bw_avg_reported=_json_num(results.get("BW_average", results.get("bw_avg"))),
                   msg_rate_mpps=_json_num(results.get("MsgRate")))
        readable = row["bw_avg_reported"] is not None
    else:
        for src, key in _JSON_LAT.items():
            row[key] = _json_num(results.get(src))
        readable = row["t_avg_usec"] is not None or row["t_typical_usec"] is not None
    error = None if readable else "no readable bandwidth or latency in the results"
    gid, mtu, qps = info.get("GID_index"), info.get("Mtu"), info.get("Number_of_qps")
    rdma_cm = info.get("rdma_cm_QPs")
    return {
        "ok": readable,
        "error": error,
        "errors": [error] if error else [],
        "warnings": [str(v) for k, v in info.items() if str(k).upper().startswith("WARNING")],
        "tool": f"ib_{verb}_{test}" if verb else None,
        "test": test,
        "verb": verb,
        "title": title or None,
        "role": None,
        "waiting_for_client": False,
        "bidirectional": bool(m and "Bidirectional" in m.group("mid")),
        "device": info.get("Device"),
        "link_type": info.get("Link_type"),
        "transport_type": info.get("Transport_type"),
        "connection_type": info.get("Connection_type"),
        "gid_index": gid if isinstance(gid, int) else None,
        "mtu_bytes": mtu if isinstance(mtu, int) else None,
        "num_qps": qps if isinstance(qps, int) else None,
        "rdma_cm": None if rdma_cm is None else str(rdma_cm).upper() == "ON",
        "settings": info,
        "report_unit": None,
        "rows": [row],
        "bytes": row["bytes"],
        "bw_avg_gbit_per_s": None,
        "bw_peak_gbit_per_s": None,
        "t_typical_usec": row.get("t_typical_usec"),
        "t_avg_usec": row.get("t_avg_usec"),
        "bw_avg_reported": row.get("bw_avg_reported"),
        "bw_peak_reported": row.get("bw_peak_reported"),
        "cpu_util_percent": _json_num(results.get("CPU_util")),
        "standard_json": standard,
    }


_LONG_OPT_RE = re.compile(r"(?:^|\s|,)(--[A-Za-z][\w-]*)")


@register("perftest-help", "perftest's usage text (ib_write_bw --help): the long options this build takes")
def parse_perftest_help(text: str) -> dict:
    """``ib_write_bw --help``: perftest prints ``Usage:`` then its options, the GPU ones only where it was
    built with them (``--use_cuda=<cuda device id>`` where cuda_memory_supported(): a build configured
    with CUDA). Record: ``{"options": [--long, ...], "use_cuda": bool}``. Text without ``Usage:`` and
    ``Options:`` raises ParseError."""
    kind = "perftest-help"
    lines = list(text_lines(kind, text, "perftest's --help output"))
    if not any(ln.strip() == "Usage:" for ln in lines) or not any(ln.strip() == "Options:" for ln in lines):
        raise ParseError(kind, "no 'Usage:' and 'Options:' lines (not perftest's usage text)")
    opts = []
    for ln in lines:
        m = _LONG_OPT_RE.search(ln)
        if m and ln.lstrip().startswith(("-", m.group(1))) and m.group(1) not in opts:
            opts.append(m.group(1))
    return {"options": opts, "use_cuda": "--use_cuda" in opts}
