"""Parsers for NVIDIA ``nvbandwidth`` output (text and ``-j`` JSON).

Both kinds return::

    {"version": str|None, "driver_version": str|None, "cuda_runtime_version": str|None,
     "error": str|None,                       # tool-level error (JSON "error" field / text error line)
     "testcases": [
        {"name": "device_to_device_memcpy_read_ce",
         "status": "passed"|"waived"|"error"|"not_found"|"running",
         "message": str|None,                 # waiver / error text
         "matrices": [
            {"description": "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
             "label": None|"read1"|"read2"|"total",   # bidirectional tests print several matrices
             "unit": "gbyte_per_s"|"nsec",            # nsec for the latency testcases
             "columns": [0, 1, ...],
             "rows": {"0": [float|None, ...]},        # in `unit`; None for N/A (diagonal)
             "sum_gbyte_per_s": float|None}],         # SUM line (text) / "sum" (JSON)
         "sum_gbyte_per_s": float|None,       # of the last/"total" matrix; from its SUM line, or the sum
                                              # of its cells when the output has no SUM line (old versions)
         "min_gbyte_per_s": float|None,       # over non-None, positive cells of that matrix
         "max_gbyte_per_s": float|None}]}

Every testcase also carries ``"name_inferred": bool`` (see waived testcases below).

Text: a ``Running <name>.`` block that ends with ``Waived: ...`` / ``Error: ...`` gets that status and
message; one that has a matrix is ``passed``; one with neither a matrix nor a status is ``error`` with
message "no result (output truncated?)" so truncation never looks healthy.

Waived testcases print no ``Running`` line: nvbandwidth v0.4 and later print a bare ``Waived:`` line in
place of the whole testcase, v0.2 printed ``Waiving <name>.``. Each becomes its own testcase with status
``waived`` and no matrices (never merged into the testcase before it). A bare ``Waived:`` does not name
its testcase: ``name`` is None, unless the output is a full run (no ``-t``) whose sequence of testcases
matches nvbandwidth's own testcase order for v0.4, v0.5-v0.6 or v0.7-v0.8 position by position, in which
case the name is taken from that order and ``name_inferred`` is True.
Input without any ``Running <name>.`` block, ``Waived`` line (text) or ``nvbandwidth`` object (JSON)
raises ParseError.
"""

from __future__ import annotations

import json
import re

from clustercert.parsers._nvutil import require_text
from clustercert.parsers.base import ParseError, register

_RUN_RE = re.compile(r"^Running (\S+?)\.?\s*$")
_DESC_RE = re.compile(r"^(memcpy|memory latency|.*bandwidth \(GB/s\)).*$")
_SUM_RE = re.compile(r"^SUM (\S+) ([\d.]+)\s*$")
_STATUS_RE = re.compile(r"^(Waived|Error|ERROR|Not Found|Passed):\s*(.*)$")
_LABEL_RE = re.compile(r"\) (Read1|Read2|Write1|Write2|Total) bandwidth", re.IGNORECASE)
_WAIVED_RE = re.compile(r"^Waived:\s*(.*)$")
_WAIVING_RE = re.compile(r"^Waiving (\S+?)\.?\s*$")  # nvbandwidth v0.2

# nvbandwidth's testcase order (createTestcases() in nvbandwidth.cpp) for a full run, by release.
_CE = ["host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "host_to_device_bidirectional_memcpy_ce",
       "device_to_host_bidirectional_memcpy_ce", "device_to_device_memcpy_read_ce",
       "device_to_device_memcpy_write_ce", "device_to_device_bidirectional_memcpy_read_ce",
       "device_to_device_bidirectional_memcpy_write_ce", "all_to_host_memcpy_ce",
       "all_to_host_bidirectional_memcpy_ce", "host_to_all_memcpy_ce", "host_to_all_bidirectional_memcpy_ce",
       "all_to_one_write_ce", "all_to_one_read_ce", "one_to_all_write_ce", "one_to_all_read_ce"]
_SM_HEAD = ["host_to_device_memcpy_sm", "device_to_host_memcpy_sm"]
_SM_BIDIR = ["host_to_device_bidirectional_memcpy_sm", "device_to_host_bidirectional_memcpy_sm"]
_SM_TAIL = ["device_to_device_memcpy_read_sm", "device_to_device_memcpy_write_sm",
            "device_to_device_bidirectional_memcpy_read_sm", "device_to_device_bidirectional_memcpy_write_sm",
            "all_to_host_memcpy_sm", "all_to_host_bidirectional_memcpy_sm", "host_to_all_memcpy_sm",
            "host_to_all_bidirectional_memcpy_sm", "all_to_one_write_sm", "all_to_one_read_sm",
            "one_to_all_write_sm", "one_to_all_read_sm"]
_LATENCY = ["host_device_latency_sm", "device_to_device_latency_sm"]
_FULL_RUN_ORDERS = [
    _CE + _SM_HEAD + _SM_TAIL,                                            # v0.4
    _CE + _SM_HEAD + _SM_TAIL + _LATENCY,                                 # v0.5, v0.6
    _CE + _SM_HEAD + _SM_BIDIR + _SM_TAIL + _LATENCY + ["device_local_copy"],  # v0.7, v0.8
]


def _infer_waived_names(tcs: list[dict]) -> None:
    """Name bare ``Waived:`` testcases when the run is a full run in a known release's order."""
    if all(tc["name"] is not None for tc in tcs):
        return
    for order in _FULL_RUN_ORDERS:
        if len(order) != len(tcs):
            continue
        if all(tc["name"] is None or tc["name"] == name for tc, name in zip(tcs, order, strict=True)):
            for tc, name in zip(tcs, order, strict=True):
                if tc["name"] is None:
                    tc["name"], tc["name_inferred"] = name, True
            return


def _cell(v: str):
    v = v.strip()
    if v.upper() == "N/A" or not v:
        return None
    try:
        return float(v)
    except ValueError:
        return None


def _stats(tc: dict) -> None:
    mats = tc["matrices"]
    if not mats:
        tc.update({"sum_gbyte_per_s": None, "min_gbyte_per_s": None, "max_gbyte_per_s": None})
        return
    m = next((x for x in mats if x["label"] == "total"), mats[-1])
    if m["unit"] != "gbyte_per_s":
        tc.update({"sum_gbyte_per_s": None, "min_gbyte_per_s": None, "max_gbyte_per_s": None})
        return
    vals = [v for row in m["rows"].values() for v in row if v is not None and v > 0]
    s = m["sum_gbyte_per_s"]
    if s is None and vals:
        s = round(sum(vals), 2)
    tc["sum_gbyte_per_s"] = s
    tc["min_gbyte_per_s"] = min(vals) if vals else None
    tc["max_gbyte_per_s"] = max(vals) if vals else None


def _label(desc: str):
    m = _LABEL_RE.search(desc)
    return m.group(1).lower() if m else None


_VERSION_LINES = (("nvbandwidth Version:", "version"), ("Driver Version:", "driver_version"),
                  ("CUDA Runtime Version:", "cuda_runtime_version"))


def _testcase(name: str | None, status: str, message: str | None = None) -> dict:
    return {"name": name, "status": status, "message": message, "matrices": [], "name_inferred": False}


def _testcase_start(cur: dict | None, line: str) -> dict | None:
    """The testcase a 'Running X.', 'Waived' or 'Waiving X' line starts; None for any other line."""
    m = _RUN_RE.match(line)
    if m:
        return _testcase(m.group(1), "running")
    m = _WAIVED_RE.match(line)
    if m and (cur is None or cur["status"] != "running" or cur["matrices"]):
        # a waived testcase prints no Running line: it is a testcase of its own, not the previous one's status
        return _testcase(None, "waived", m.group(1).strip() or None)
    m = _WAIVING_RE.match(line)
    if m:
        return _testcase(m.group(1), "waived")
    return None


def _take_sum(cur: dict, value: float) -> None:
    """A 'SUM' line: the sum of the last matrix of the testcase that has none yet."""
    target = next((mm for mm in reversed(cur["matrices"]) if mm["sum_gbyte_per_s"] is None), None)
    if target is not None:
        target["sum_gbyte_per_s"] = value


def _new_matrix(line: str) -> dict:
    return {"description": line, "label": _label(line), "unit": "nsec" if "(ns)" in line else "gbyte_per_s",
            "columns": None, "rows": {}, "sum_gbyte_per_s": None}


def _matrix_line(kind: str, cur: dict, mat: dict, line: str) -> None:
    """A line under a matrix's description: its column header, or a row of values."""
    cells = line.split()
    if mat["columns"] is None and all(c.isdigit() for c in cells):
        mat["columns"] = [int(c) for c in cells]
    elif mat["columns"] is not None and cells[0].isdigit():
        vals = [_cell(c) for c in cells[1:]]
        if len(vals) != len(mat["columns"]):
            raise ParseError(
                kind,
                f"{cur['name']}: row {cells[0]} has {len(vals)} values for {len(mat['columns'])} columns",
            )
        mat["rows"][cells[0]] = vals


def _testcase_line(kind: str, cur: dict, mat: dict | None, line: str) -> dict | None:
    """A line inside a testcase; returns the matrix open after it (None: none)."""
    m = _SUM_RE.match(line)
    if m:
        _take_sum(cur, float(m.group(2)))
        return None
    m = _STATUS_RE.match(line)
    if m:
        cur["status"] = m.group(1).lower().replace(" ", "_")
        cur["message"] = m.group(2).strip() or None
        return None
    if line.startswith("COEFFICIENT_OF_VARIATION"):
        return mat
    if "(GB/s)" in line or _DESC_RE.match(line):
        mat = _new_matrix(line)
        cur["matrices"].append(mat)
        return mat
    if mat is not None:
        _matrix_line(kind, cur, mat, line)
    return mat


def _settle(tcs: list[dict]) -> None:
    """A testcase still running at the end passed when it printed data, else is an error (truncated)."""
    for tc in tcs:
        if tc["status"] == "running":
            if any(m["rows"] for m in tc["matrices"]):
                tc["status"] = "passed"
            else:
                tc["status"] = "error"
                tc["message"] = "no result (output truncated?)"
        _stats(tc)


@register("nvbandwidth", "nvbandwidth text output: per-testcase GB/s matrices, SUM, status")
def parse_text(text: str) -> dict:
    kind = "nvbandwidth"
    text = require_text(kind, text, "nvbandwidth output with 'Running <testcase>.' blocks")
    out = {
        "version": None,
        "driver_version": None,
        "cuda_runtime_version": None,
        "error": None,
        "testcases": [],
    }
    tcs: list[dict] = out["testcases"]
    cur: dict | None = None
    mat: dict | None = None
    for raw in text.split("\n"):
        line = raw.strip()
        if not line or line == "[...]":
            mat = None if not line else mat
            continue
        version = next((key for prefix, key in _VERSION_LINES if line.startswith(prefix)), None)
        if version is not None:
            out[version] = line.split(":", 1)[1].strip()
            continue
        started = _testcase_start(cur, line)
        if started is not None:
            cur, mat = started, None
            tcs.append(cur)
        elif cur is not None:
            mat = _testcase_line(kind, cur, mat, line)
    if not tcs:
        raise ParseError(kind, "expected at least one 'Running <testcase>.' block or 'Waived' line")
    _infer_waived_names(tcs)
    _settle(tcs)
    return out


_JSON_STATUS = {
    "passed": "passed",
    "waived": "waived",
    "error": "error",
    "not found": "not_found",
    "running": "running",
}


@register("nvbandwidth-json", "nvbandwidth -j JSON: per-testcase GB/s matrix, sum, status")
def parse_json(text: str) -> dict:
    kind = "nvbandwidth-json"
    text = require_text(kind, text, "JSON object with an 'nvbandwidth' key")
    start = text.find("{")
    if start < 0:
        raise ParseError(kind, "expected JSON object with an 'nvbandwidth' key, found no '{'")
    try:
        doc = json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise ParseError(
            kind, f"malformed or truncated JSON ({exc}); expected nvbandwidth -j output"
        ) from exc
    nvb = doc.get("nvbandwidth") if isinstance(doc, dict) else None
    if not isinstance(nvb, dict):
        raise ParseError(kind, "expected top-level 'nvbandwidth' object")
    crv = nvb.get("CUDA Runtime Version")
    out = {
        "version": nvb.get("version") or nvb.get("git_version"),
        "driver_version": nvb.get("Driver Version"),
        "cuda_runtime_version": str(crv) if crv is not None else None,
        "error": nvb.get("error"),
        "testcases": [],
    }
    for t in nvb.get("testcases") or []:
        status = _JSON_STATUS.get(str(t.get("status", "")).lower(), "error")
        matrices = []
        raw = t.get("bandwidth_matrix")
        if isinstance(raw, list) and raw:
            rows = {str(i): [_cell(str(v)) for v in r] for i, r in enumerate(raw)}
            ncol = max(len(r) for r in raw)
            s = t.get("sum")
            desc = t.get("bandwidth_description") or ""
            matrices.append(
                {
                    "description": desc,
                    "label": _label(desc),
                    "unit": "nsec" if "(ns)" in desc else "gbyte_per_s",
                    "columns": list(range(ncol)),
                    "rows": rows,
                    "sum_gbyte_per_s": float(s) if isinstance(s, int | float) else None,
                }
            )
        tc = {"name": t.get("name"), "status": status, "message": t.get("error"), "matrices": matrices,
              "name_inferred": False}
        if status == "passed" and not matrices:
            tc["status"] = "error"
            tc["message"] = tc["message"] or "status Passed but no bandwidth_matrix"
        _stats(tc)
        out["testcases"].append(tc)
    if not out["testcases"] and not out["error"]:
        raise ParseError(kind, "no 'testcases' and no 'error' in nvbandwidth JSON")
    return out
