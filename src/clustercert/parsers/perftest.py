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
the column is absent). Pingpong rows: ``{"bytes", "seconds", "bw_gbit_per_s", "iterations", "usec_per_iter"}``.

Error output (``Couldn't connect``, ``Unable to init``, ``Failed to ...``, ``Completion with error``) is
parsed into ``ok: False`` with the message; rows printed before the failure are kept. Input with neither
a perftest banner, a result table nor a recognised error raises ParseError; so does a result table
header with no rows and no error (truncated).
"""

from __future__ import annotations

import re

from clustercert.parsers._util_b import text_lines
from clustercert.parsers.base import ParseError, register

_MIB_TO_GBIT = 1048576 * 8 / 1e9

_TITLE_RE = re.compile(r"^\s*(?P<verb>RDMA_Write|RDMA_Read|Send|Atomic)\b(?P<mid>.*?)\b(?P<kind>BW|Latency)\s+Test\s*$")
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


@register("perftest", "perftest ib_*_bw / ib_*_lat and ibv_*_pingpong text output (client or server)")
def parse_perftest(text: str) -> dict:
    kind = "perftest"
    lines = text_lines(kind, text, "perftest output (banner and '#bytes' result table)")
    errors: list[str] = []
    warnings: list[str] = []
    title = None
    verb = None
    test = None
    bidir = False
    banner = False
    banner_lines: list[str] = []
    in_banner = False
    columns: list[str] | None = None
    unit = None
    rows: list[dict] = []
    pp_tool = None
    pp_device = None
    pp_row: dict = {}

    for raw in lines:
        ln = raw.strip()
        if not ln:
            continue
        if "Waiting for client to connect" in ln:
            banner = True
            continue
        if set(ln) <= {"*"} or set(ln) <= {"-"}:
            in_banner = False
            continue
        m = _TITLE_RE.match(ln)
        if m:
            title = ln
            verb = _VERBS[m.group("verb")]
            test = "bw" if m.group("kind") == "BW" else "lat"
            bidir = "bidirectional" in m.group("mid").lower()
            in_banner = True
            continue
        if ln.startswith("#bytes"):
            columns, unit = _header_columns(ln)
            if "bytes" not in columns or "iterations" not in columns:
                raise ParseError(kind, f"unrecognised result table header: {ln!r}")
            if test is None:
                test = "bw" if "bw_avg" in columns else "lat"
            in_banner = False
            continue
        if ln.startswith("Conflicting CPU frequency") or ln.lower().startswith("warning"):
            warnings.append(ln)
            continue
        m = _PP_START_RE.search(ln)
        if m and ln.startswith("Starting"):
            pp_tool = m.group(1)
            dm = re.search(r"\bfor (\S+)", ln)
            pp_device = dm.group(1) if dm else None
            continue
        m = _PP_BW_RE.match(ln)
        if m:
            pp_row.update(bytes=int(m.group(1)), seconds=float(m.group(2)),
                          bw_gbit_per_s=round(float(m.group(3)) / 1000, 6))
            continue
        m = _PP_LAT_RE.match(ln)
        if m:
            pp_row.update(iterations=int(m.group(1)), usec_per_iter=float(m.group(3)))
            continue
        if columns is not None and re.match(r"^\d+\s+\d+\s", ln):
            values = ln.split()
            if len(values) != len(columns):
                raise ParseError(kind, f"result row has {len(values)} fields, header has {len(columns)}: {ln!r}")
            row_raw = dict(zip(columns, values, strict=True))
            row: dict = {"bytes": int(row_raw["bytes"]), "iterations": int(row_raw["iterations"])}
            if test == "bw":
                peak, avg = float(row_raw["bw_peak"]), float(row_raw["bw_avg"])
                row.update(
                    bw_peak_gbit_per_s=_to_gbit(peak, unit or ""),
                    bw_avg_gbit_per_s=_to_gbit(avg, unit or ""),
                    bw_peak_reported=peak,
                    bw_avg_reported=avg,
                    msg_rate_mpps=float(row_raw["msg_rate_mpps"]) if "msg_rate_mpps" in row_raw else None,
                )
            else:
                for key in _LAT_KEYS:
                    row[key] = float(row_raw[key]) if key in row_raw else None
            rows.append(row)
            continue
        if in_banner:
            banner_lines.append(ln)
            continue
        if _ERR_RE.search(ln):
            errors.append(ln)

    settings = _settings(banner_lines)
    if pp_row:
        if "bytes" not in pp_row or "iterations" not in pp_row:
            raise ParseError(kind, "truncated ibv_*_pingpong output: expected both 'bytes in' and 'iters in' lines")
        test = "pingpong"
        rows = [{"bytes": pp_row["bytes"], "seconds": pp_row["seconds"], "bw_gbit_per_s": pp_row["bw_gbit_per_s"],
                 "iterations": pp_row["iterations"], "usec_per_iter": pp_row["usec_per_iter"]}]

    if not rows and not errors and not banner:
        if columns is not None:
            raise ParseError(kind, "truncated: result table header without rows")
        raise ParseError(kind, "expected a perftest banner, a '#bytes #iterations' result table or an error")
    if not rows and not banner and title is None and not any(_OWN_ERR_RE.match(e) for e in errors):
        raise ParseError(kind, "no perftest banner, result table or perftest error message found")

    waiting = banner and not rows and not errors
    if waiting:
        errors.append("server waiting for client to connect; no result table")
    role = "server" if banner else ("client" if title or pp_tool else None)
    if test == "pingpong":
        tool = pp_tool or "ibv_rc_pingpong"
    elif verb and test:
        tool = f"ib_{verb}_{test}"
    else:
        tool = None

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

    rdma_cm = settings.get("rdma_cm QPs")
    gid = settings.get("GID index")
    return {
        "ok": not errors and bool(rows),
        "error": errors[0] if errors else None,
        "errors": errors,
        "warnings": warnings,
        "tool": tool,
        "test": test,
        "verb": verb,
        "title": title,
        "role": role,
        "waiting_for_client": waiting,
        "bidirectional": bidir,
        "device": settings.get("Device") or pp_device,
        "link_type": settings.get("Link type"),
        "transport_type": settings.get("Transport type"),
        "connection_type": settings.get("Connection type"),
        "gid_index": int(gid) if gid and gid.isdigit() else None,
        "mtu_bytes": _int_prefix(settings.get("Mtu")),
        "num_qps": _int_prefix(settings.get("Number of qps")),
        "rdma_cm": None if rdma_cm is None else rdma_cm.upper() == "ON",
        "settings": settings,
        "report_unit": unit if test == "bw" else ("usec" if test == "lat" else None),
        "rows": rows,
        **summary,
    }


