"""nccl-tests (all_reduce_perf, all_gather_perf, sendrecv_perf, ...) text output.

Accepts plain output and launcher-prefixed output (``mpirun --tag-output`` ``[1,0]<stdout>:``,
``srun -l`` ``0: ``), CRLF, elided rows (``...``), NCCL_DEBUG INFO/WARN lines interleaved anywhere
(INFO ignored, WARN collected in ``warnings``), the current table (``redop root ... #wrong``) and the
old one (``error`` column with floats, with or without ``redop``), and rows without a redop (alltoall,
sendrecv) under either header.

Record::

    {"ok": bool,              # rows present, no failure lines, no row with wrong > 0, and
                              # "Out of bounds values" not FAILED
     "complete": bool,        # both "# Out of bounds values" and "# Avg bus bandwidth" lines seen
     "errors": [str],         # "Test NCCL failure ...", "Test CUDA failure ...", "NCCL failure", mpirun/srun
                              # launch failures, "Out of bounds values : 4 FAILED", rows with #wrong > 0
     "warnings": [str],       # NCCL WARN lines
     "test": "all_reduce_perf" | None,   # from "# Collective test starting:" when printed
     "nccl_tests_version": "2.17.8" | None, "nccl_version": "2.16.2+cuda11.6" | None,
     "header": {"nThread": 1, "nGpus": 1, "minBytes": 8, "maxBytes": 134217728, "step": "2(factor)",
                "warmup_iters": 5, "iters": 20, "agg_iters": 1, "validation": 1, "graph": 0} | None,
     "devices": [{"rank": 0, "group": 0 | None, "pid": 66421, "host": "gpu-1-1", "device": 0,
                  "bus_id": "0009:01:00", "name": "NVIDIA GH200 120GB"}],
     "table_format": "wrong" | "error",  # current (#wrong int / N/A) or old (error float) column
     "rows": [{"size_bytes": 8, "count": 2, "type": "float", "redop": "sum" | None, "root": -1 | None,
               "out_of_place": {"time_usec": 17.49, "algbw_gbyte_per_s": 0.0, "busbw_gbyte_per_s": 0.0,
                                "wrong": 0 | None, "error": float | None},
               "in_place": {...same keys...}}],
     "elided": bool,          # a "..." line stood for omitted rows
     "out_of_bounds_values": int | None, "out_of_bounds_ok": bool | None,
     "avg_busbw_gbyte_per_s": float | None,
     "max_size_bytes": int | None,
     "busbw_at_max_size_gbyte_per_s": float | None,    # out-of-place busbw of the largest size
     "data_checked": bool | None}   # False: every #wrong / error cell read N/A (run with -c 0)

``wrong`` is None when the column reads N/A (check disabled, ``-c 0``) and in old-format tables; ``error``
(old format) is None when that column reads N/A, as older releases print it with the check disabled.
``data_checked`` is False when every check cell of the table read N/A (nothing was verified), True when at
least one was a number, None without rows.
Failure output (errors but no rows) is parsed into ``ok: False``; input with no nccl-tests header, rows
or recognised failure raises ParseError, as does a header without any result row (truncated).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clustercert.parsers._text import text_lines
from clustercert.parsers.base import ParseError, register

_PREFIX_RE = re.compile(r"^(?:\[\d+,\d+\]<(?:stdout|stderr)>:|\d+:\s)")
_DEBUG_RE = re.compile(r"^\S+:\d+:\d+ \[\d+\] NCCL (INFO|WARN|TRACE|ABORT)\b ?(.*)$")
_HDR_RE = re.compile(r"^#\s*nThread\s+\d+")
_DEV_RE = re.compile(
    r"^#\s*Rank\s+(\d+)(?:\s+Group\s+(\d+))?\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]+)\]\s+(.*)$"
)
_FAIL_RE = re.compile(
    r"(Test (?:NCCL|CUDA) failure|NCCL failure|Test failure|NCCL error|"
    r"There are not enough slots available|mpirun noticed that process|mpirun has exited|"
    r"Primary job\s+terminated|srun: error:|ORTE was unable|PRTE has lost communication|"
    r"Segmentation fault|Aborted \(core dumped\))"
)
_INT_RE = re.compile(r"^-?\d+$")


def _header(line: str) -> dict:
    body = line.lstrip("#").strip()
    out: dict = {}
    for key in ("nThread", "nGpus", "minBytes", "maxBytes"):
        m = re.search(rf"\b{key}\s+(\d+)", body)
        out[key] = int(m.group(1)) if m else None
    m = re.search(r"step:\s*(\S+)", body)
    out["step"] = m.group(1) if m else None
    for label, key in (
        ("warmup iters", "warmup_iters"),
        ("agg iters", "agg_iters"),
        ("validation", "validation"),
        ("graph", "graph"),
    ):
        m = re.search(rf"{label}:\s*(\d+)", body)
        out[key] = int(m.group(1)) if m else None
    m = re.search(r"(?<!warmup )(?<!agg )iters:\s*(\d+)", body)
    out["iters"] = int(m.group(1)) if m else None
    return out


def _table_columns(line: str) -> list[str] | None:
    tokens = line.lstrip("#").split()
    if tokens[:2] != ["size", "count"]:
        return None
    return tokens


def _placement(values: list[str], style: str) -> dict:
    time_s, algbw, busbw, check = values
    rec = {"time_usec": float(time_s), "algbw_gbyte_per_s": float(algbw), "busbw_gbyte_per_s": float(busbw),
           "wrong": None, "error": None}
    if style == "wrong":
        rec["wrong"] = int(check) if _INT_RE.match(check) else None
        if rec["wrong"] is None and check != "N/A":
            raise ValueError(f"#wrong column is neither an integer nor N/A: {check!r}")
    elif check != "N/A":  # old releases print N/A in the error column when the check is off (-c 0)
        rec["error"] = float(check)
    return rec


def _row(tokens: list[str], columns: list[str] | None) -> tuple[dict, str] | None:
    """One result row. Its layout is read from the row itself: the last 8 fields are the out-of-place
    and in-place (time, algbw, busbw, check) cells; between the type and them, a redop (a name) and a
    root (an integer), either or both absent. alltoall, sendrecv and the old tests print no redop, and
    some releases' alltoall rows leave it out under a table header that names one."""
    n = len(tokens)
    lead = n - 8
    if lead not in (3, 4, 5) or not (_INT_RE.match(tokens[0]) and _INT_RE.match(tokens[1])):
        return None
    mid = tokens[3:lead]
    names = [t for t in mid if not _INT_RE.match(t)]
    roots = [t for t in mid if _INT_RE.match(t)]
    if len(names) > 1 or len(roots) > 1 or (names and mid[0] != names[0]):
        return None
    checks = (tokens[lead + 3], tokens[lead + 7])
    if columns is not None and ("#wrong" in columns or "error" in columns):
        style = "wrong" if "#wrong" in columns else "error"
    else:  # no header seen (excerpt): integer / N/A cells are #wrong, floats the old error column
        style = "wrong" if all(_INT_RE.match(c) or c == "N/A" for c in checks) else "error"
    try:
        row = {
            "size_bytes": int(tokens[0]),
            "count": int(tokens[1]),
            "type": tokens[2],
            "redop": names[0] if names else None,
            "root": int(roots[0]) if roots else None,
            "out_of_place": _placement(tokens[lead:lead + 4], style),
            "in_place": _placement(tokens[lead + 4:lead + 8], style),
        }
    except ValueError:
        return None
    return row, style


@dataclass
class _Scan:
    """What one pass over nccl-tests' output has seen so far."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)
    devices: list[dict] = field(default_factory=list)
    header: dict | None = None
    columns: list[str] | None = None
    table_format: str | None = None
    elided: bool = False
    test: str | None = None
    tests_version: str | None = None
    nccl_version: str | None = None
    oob_values: int | None = None
    oob_ok: bool | None = None
    avg_busbw: float | None = None
    seen_marker: bool = False  # a '# nThread' header or a table header: this is nccl-tests output


def _debug_line(scan: _Scan, ln: str) -> bool:
    m = _DEBUG_RE.match(ln)
    if not m:
        return False
    if m.group(1) in ("WARN", "ABORT"):
        scan.warnings.append(ln)
    vm = re.match(r"NCCL version (\S+)", m.group(2))
    if vm and scan.nccl_version is None:
        scan.nccl_version = vm.group(1)
    return True


def _fail_line(scan: _Scan, ln: str) -> bool:
    if _FAIL_RE.search(ln):
        scan.errors.append(ln)
        return True
    return False


def _device(scan: _Scan, m: re.Match) -> None:
    scan.devices.append({"rank": int(m.group(1)), "group": int(m.group(2)) if m.group(2) else None,
                         "pid": int(m.group(3)), "host": m.group(4), "device": int(m.group(5)),
                         "bus_id": m.group(6), "name": m.group(7).strip()})


def _tests_version(scan: _Scan, m: re.Match) -> None:
    scan.tests_version = m.group(1)


def _collective(scan: _Scan, m: re.Match) -> None:
    scan.test = m.group(1)


def _out_of_bounds(scan: _Scan, m: re.Match) -> None:
    scan.oob_values, scan.oob_ok = int(m.group(1)), m.group(2) == "OK"
    if not scan.oob_ok:
        scan.errors.append(f"Out of bounds values : {scan.oob_values} FAILED")


def _avg_busbw(scan: _Scan, m: re.Match) -> None:
    scan.avg_busbw = float(m.group(1))


# The '#' lines nccl-tests prints around its table, each with what it sets; tried in this order.
_COMMENT_LINES = (
    (_DEV_RE, _device),
    (re.compile(r"^#\s*nccl-tests version (\S+)"), _tests_version),
    (re.compile(r"^#\s*Collective test starting:\s*(\S+)"), _collective),
    (re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)"), _out_of_bounds),
    (re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([\d.]+)"), _avg_busbw),
)


def _comment_line(scan: _Scan, ln: str) -> bool:
    if not ln.startswith("#"):
        return False
    if _HDR_RE.match(ln):
        scan.header = _header(ln)
        scan.seen_marker = True
        return True
    for rx, take in _COMMENT_LINES:
        m = rx.match(ln)
        if m:
            take(scan, m)
            return True
    cols = _table_columns(ln)
    if cols is not None:
        scan.columns = cols
        scan.seen_marker = True
    return True


def _version_line(scan: _Scan, ln: str) -> bool:
    m = re.match(r"^NCCL version (\S+)", ln)
    if m:
        scan.nccl_version = m.group(1)
        return True
    return False


def _elision(scan: _Scan, ln: str) -> bool:
    if ln in ("...", "…") or set(ln) <= {"."}:
        scan.elided = True
        return True
    return False


# Tried in this order on every non-blank line; a line none of them claims may be a result row.
_LINE_HANDLERS = (_debug_line, _fail_line, _comment_line, _version_line, _elision)


def _scan(lines: list[str]) -> _Scan:
    scan = _Scan()
    for raw in lines:
        ln = _PREFIX_RE.sub("", raw, count=1).strip()
        if not ln or any(handler(scan, ln) for handler in _LINE_HANDLERS):
            continue
        parsed = _row(ln.split(), scan.columns)
        if parsed is not None:
            row, style = parsed
            scan.table_format = scan.table_format or style
            scan.rows.append(row)
    return scan


def _wrong_cells(rows: list[dict]) -> list[str]:
    """One error per out-of-place / in-place cell whose #wrong count is above zero."""
    return [f"{row['size_bytes']} bytes {place.replace('_', '-')}: #wrong {row[place]['wrong']}"
            for row in rows for place in ("out_of_place", "in_place") if row[place]["wrong"]]


@register(
    "nccl-tests", "nccl-tests *_perf output: per-size algbw/busbw (out-of-place and in-place), #wrong, avg"
)
def parse_nccl_tests(text: str) -> dict:
    kind = "nccl-tests"
    scan = _scan(text_lines(kind, text, "nccl-tests output ('# nThread ...' header and result table)"))
    rows, errors = scan.rows, scan.errors
    if not rows and not errors:
        if scan.seen_marker:
            raise ParseError(kind, "truncated: nccl-tests header/table header present but no result rows")
        raise ParseError(
            kind, "expected nccl-tests output: '# nThread ...' header or '#  size  count ...' table"
        )
    errors.extend(_wrong_cells(rows))

    top = max(rows, key=lambda r: r["size_bytes"]) if rows else None
    checks = [r[p][k] for r in rows for p in ("out_of_place", "in_place") for k in ("wrong", "error")]
    return {
        "ok": bool(rows) and not errors and scan.oob_ok is not False,
        "complete": scan.oob_values is not None and scan.avg_busbw is not None,
        "errors": errors,
        "warnings": scan.warnings,
        "test": scan.test,
        "nccl_tests_version": scan.tests_version,
        "nccl_version": scan.nccl_version,
        "header": scan.header,
        "devices": scan.devices,
        "table_format": scan.table_format,
        "rows": rows,
        "elided": scan.elided,
        "out_of_bounds_values": scan.oob_values,
        "out_of_bounds_ok": scan.oob_ok,
        "avg_busbw_gbyte_per_s": scan.avg_busbw,
        "max_size_bytes": top["size_bytes"] if top else None,
        "busbw_at_max_size_gbyte_per_s": top["out_of_place"]["busbw_gbyte_per_s"] if top else None,
        "data_checked": any(c is not None for c in checks) if rows else None,
    }
