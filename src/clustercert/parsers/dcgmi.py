"""Parsers for DCGM's ``dcgmi`` CLI.

``dcgmi-diag`` (text table of ``dcgmi diag -r N``, DCGM 2.x-4.x layouts)::

    {"ok": bool,                    # False when dcgmi printed an error instead of a table
     "error": str|None,             # the 'Error: ...' lines joined, when ok is False
     "overall": "pass"|"fail"|"warn"|"skip"|"error",
     "dcgm_version": str|None, "driver_version": str|None, "gpu_device_ids": [str],
     "tests": [{"name": "Persistence Mode"|"pcie"|...,  # as printed
                "key": "persistence_mode"|"pcie"|...,   # normalised name
                "category": "deployment"|"hardware"|"integration"|"stress"|...,
                "result": "pass"|"fail"|"warn"|"skip",  # worst over the per-GPU results
                "gpus": {"0": "pass", ...},              # per GPU where shown ("GPU0: Pass",
                                                         #  "Fail - GPU: 0", "Pass - GPUs: 1, 2")
                "all_gpus": bool,                        # "Pass - All"
                "messages": [{"level": "warning"|"error"|"info", "text": str}]}],
     "messages": [{"category", "level", "text"}],       # Warning/Error rows not under a test
     "skipped": [key, ...],                              # tests whose result is skip
     "table_count": int}            # dcgmi sometimes prints the table twice; the last one is used

A skipped test is ``skip`` (never ``pass``). ``overall`` is ``error`` for an error output or an
Error row, ``fail`` if any test failed, ``warn`` if any warned, ``skip`` if any test was skipped
(a run whose hardware/stress tests were skipped is not a pass), else ``pass``. Wrapped cell text is re-joined. Text without a diagnostic table and without an
``Error:`` line raises ParseError.

``dcgmi-discovery`` (``dcgmi discovery -l``)::

    {"gpu_count": int|None,          # from 'N GPUs found.'
     "gpus": [{"id": int, "name": str|None, "bus_id": str|None, "uuid": str|None}],
                                     # name None for '<<<NULL>>>'
     "nvswitch_count": int|None, "nvswitch_ids": [int],
     "connectx_count": int|None, "cpu_count": int|None}
"""

from __future__ import annotations

import re

from clustercert.parsers._nvutil import bus_id, na, norm_key, require_text
from clustercert.parsers.base import ParseError, register

_SECTION_RE = re.compile(r"^[|+]-+\s+(?P<name>[A-Za-z][A-Za-z ]*?)\s+-+\+")
_RESULT_RE = re.compile(r"^(?P<res>Pass|Fail|Warn|Skip|Error)(?:\s*-\s*(?P<who>.*))?$", re.IGNORECASE)
_GPU_RES_RE = re.compile(r"^GPU\s*(?P<gpu>\d+)\s*:\s*(?P<res>Pass|Fail|Warn|Skip|Error)\b", re.IGNORECASE)
_SEVERITY = {"fail": 4, "error": 4, "warn": 3, "pass": 2, "skip": 1}
_MSG_ROWS = {"warning": "warning", "error": "error", "info": "info"}


def _cells(line: str) -> tuple[str, str] | None:
    if not line.startswith("|"):
        return None
    parts = line.split("|")
    if len(parts) < 3:
        return None
    left = parts[1].strip()
    right = "|".join(parts[2:-1]) if line.rstrip().endswith("|") else "|".join(parts[2:])
    return left, right


def _chunk(right: str, closed: bool) -> str:
    # cells are ' ' + fixed-width text + pad; keep interior spaces so wrapped words re-join exactly
    body = right[1:] if right.startswith(" ") else right
    if closed and body.endswith("  "):
        body = body[:-2] if len(body) > 2 else body
    return body


def _join(chunks: list[str]) -> str:
    return re.sub(r"\s+", " ", "".join(chunks)).strip()


def _result_gpus(value: str) -> tuple[str, dict[str, str], bool] | None:
    m = _RESULT_RE.match(value.strip())
    if not m:
        return None
    res = m.group("res").lower()
    who = (m.group("who") or "").strip()
    if who.lower() == "all":
        return res, {}, True
    gpus = {g: res for g in re.findall(r"\d+", who)} if who else {}
    return res, gpus, False


def _worst(results: list[str]) -> str:
    if not results:
        return "skip"
    worst = max(results, key=lambda r: _SEVERITY.get(r, 0))
    if worst == "error":
        return "fail"
    return worst


def _parse_table(lines: list[str]) -> dict:
    meta: dict[str, str] = {}
    tests: list[dict] = []
    loose: list[dict] = []
    category = None
    cur_test: dict | None = None
    cur_msg: dict | None = None
    msg_chunks: list[str] = []

    def flush_msg():
        nonlocal cur_msg, msg_chunks
        if cur_msg is not None:
            cur_msg["text"] = _join(msg_chunks)
        cur_msg = None
        msg_chunks = []

    for line in lines:
        s = line.rstrip()
        sm = _SECTION_RE.match(s)
        if sm:
            flush_msg()
            category = norm_key(sm.group("name"))
            cur_test = None
            continue
        cells = _cells(s)
        if cells is None:
            continue
        left, right = cells
        value = right.strip()
        if left in ("Diagnostic",) or set(left) <= {"=", "-", "+"} and left:
            continue
        if category == "metadata" and left:
            flush_msg()
            meta[norm_key(left)] = value
            continue
        if left:
            flush_msg()
            level = _MSG_ROWS.get(left.lower())
            if level is not None:
                cur_msg = {"level": level, "text": ""}
                msg_chunks = [_chunk(right, s.endswith("|"))]
                if cur_test is not None:
                    cur_test["messages"].append(cur_msg)
                else:
                    cur_msg["category"] = category
                    loose.append(cur_msg)
                continue
            rg = _result_gpus(value)
            cur_test = {
                "name": left,
                "key": norm_key(left),
                "category": category,
                "result": None,
                "gpus": {},
                "all_gpus": False,
                "messages": [],
                "_results": [],
            }
            tests.append(cur_test)
            if rg:
                res, gpus, all_gpus = rg
                cur_test["_results"].append(res)
                cur_test["gpus"].update(gpus)
                cur_test["all_gpus"] = all_gpus
            continue
        # continuation row (empty left cell)
        if cur_msg is not None:
            msg_chunks.append(_chunk(right, s.endswith("|")))
            continue
        if cur_test is not None and value:
            gm = _GPU_RES_RE.match(value)
            if gm:
                cur_test["gpus"][gm.group("gpu")] = gm.group("res").lower()
                cur_test["_results"].append(gm.group("res").lower())
                continue
            rg = _result_gpus(value)
            if rg:
                res, gpus, all_gpus = rg
                cur_test["_results"].append(res)
                cur_test["gpus"].update(gpus)
                cur_test["all_gpus"] = cur_test["all_gpus"] or all_gpus
    flush_msg()
    for t in tests:
        results = t.pop("_results")
        t["result"] = _worst(results)
    return {"meta": meta, "tests": tests, "messages": loose}


@register("dcgmi-diag", "dcgmi diag -r N table: per-test Pass/Fail/Warn/Skip, per-GPU results, messages")
def parse_diag(text: str) -> dict:
    kind = "dcgmi-diag"
    text = require_text(kind, text, "dcgmi diag result table ('| Diagnostic | Result |')")
    lines = text.split("\n")
    errors = [ln.strip() for ln in lines if re.match(r"^\s*Error:", ln)]
    starts = [i for i, ln in enumerate(lines) if re.match(r"^\|\s*Diagnostic\s*\|\s*Result\s*\|", ln)]
    if not starts:
        # excerpts may start at a section row; accept a table made only of section/rows
        if any(_SECTION_RE.match(ln) for ln in lines):
            starts = [0]
    if not starts:
        if errors:
            return {
                "ok": False,
                "error": " ".join(e.split(":", 1)[1].strip() for e in errors),
                "overall": "error",
                "dcgm_version": None,
                "driver_version": None,
                "gpu_device_ids": [],
                "tests": [],
                "messages": [],
                "skipped": [],
                "table_count": 0,
            }
        raise ParseError(kind, "expected a '| Diagnostic | Result |' table or an 'Error:' line")
    parsed = _parse_table(lines[starts[-1] :])
    tests = parsed["tests"]
    loose = parsed["messages"]
    meta = parsed["meta"]
    if not tests and not loose:
        raise ParseError(kind, "diagnostic table has no test rows (truncated?)")
    results = [t["result"] for t in tests]
    if errors or any(m["level"] == "error" for m in loose):
        overall = "error"
    elif "fail" in results:
        overall = "fail"
    elif "warn" in results or any(m["level"] == "warning" for m in loose):
        overall = "warn"
    elif "skip" in results:
        overall = "skip"
    else:
        overall = "pass"
    ids = meta.get("gpu_device_ids_detected")
    return {
        "ok": not errors,
        "error": " ".join(e.split(":", 1)[1].strip() for e in errors) or None,
        "overall": overall,
        "dcgm_version": na(meta.get("dcgm_version")),
        "driver_version": na(meta.get("driver_version_detected")),
        "gpu_device_ids": [x.strip() for x in ids.split(",") if x.strip()] if ids else [],
        "tests": tests,
        "messages": loose,
        "skipped": [t["key"] for t in tests if t["result"] == "skip"],
        "table_count": len(starts),
    }


_FOUND_RE = re.compile(r"^(\d+) (GPUs|NvSwitches|ConnectX|CPUs) found", re.IGNORECASE)


@register("dcgmi-discovery", "dcgmi discovery -l: GPUs (id, name, bus id, uuid), NVSwitches, ConnectX, CPUs")
def parse_discovery(text: str) -> dict:
    kind = "dcgmi-discovery"
    text = require_text(kind, text, "'N GPUs found.' followed by a device table")
    out = {
        "gpu_count": None,
        "gpus": [],
        "nvswitch_count": None,
        "nvswitch_ids": [],
        "connectx_count": None,
        "cpu_count": None,
    }
    section = None
    cur = None
    for line in text.split("\n"):
        s = line.strip()
        m = _FOUND_RE.match(s)
        if m:
            n = int(m.group(1))
            section = m.group(2).lower()
            key = {"gpus": "gpu_count", "nvswitches": "nvswitch_count", "connectx": "connectx_count", "cpus": "cpu_count"}[
                section
            ]
            out[key] = n
            cur = None
            continue
        if not s.startswith("|"):
            continue
        parts = [p.strip() for p in s.strip("|").split("|")]
        if section == "gpus" and len(parts) >= 2:
            left, right = parts[0], parts[1]
            if left.isdigit():
                cur = {"id": int(left), "name": None, "bus_id": None, "uuid": None}
                out["gpus"].append(cur)
            if cur is None:
                continue
            if right.startswith("Name:"):
                cur["name"] = na(right.split(":", 1)[1])
            elif right.startswith("PCI Bus ID:"):
                cur["bus_id"] = bus_id(right.split(":", 1)[1].strip())
            elif right.startswith("Device UUID:"):
                cur["uuid"] = na(right.split(":", 1)[1])
        elif section == "nvswitches" and parts and parts[0].isdigit():
            out["nvswitch_ids"].append(int(parts[0]))
    if out["gpu_count"] is None and not out["gpus"]:
        raise ParseError(kind, "expected 'N GPUs found.' and a GPU table")
    return out
