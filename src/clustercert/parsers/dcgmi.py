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
(a run whose hardware/stress tests were skipped is not a pass), else ``pass``. Wrapped cell text is re-joined.
Text without a diagnostic table and without an ``Error:`` line raises ParseError.

``dcgmi-diag-json`` (``dcgmi diag -j``, DCGM 3.x ``"DCGM GPU Diagnostic"`` and 4.x ``"DCGM Diagnostic"``
layouts): the ``dcgmi-diag`` record above, so the same evaluator reads either, plus
``"layout": "dcgm3"|"dcgm4"``; messages also carry ``gpu`` and ``error_id``. See parse_diag_json.

``dcgmi-nvlink`` (``dcgmi nvlink -e -g N`` as tree table or ``-j`` JSON, and ``dcgmi nvlink --link-status``)::

    {"mode": "link_status"|"error_counts",
     "gpus": [{"gpu_id", "links": [{"link", "state": "up"|"down"|"disabled"|"not_supported"}]}],
     "nvswitches": [{"physical_id", "links": [...]}], "down_links": ["gpu0:link3", ...],
     "error_counts": {"gpu_id", "links": [{"link", "counters": {"crc_flit_error": int|None, ...}}],
                      "totals": {counter: int|None}, "detail": {counter: int|float|None}} | None}

See parse_dcgmi_nvlink.

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
from clustercert.parsers._text import leading_json
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


class _DiagTable:
    """One pass over a dcgmi diag table: the metadata rows, the tests (a row with a name in the left cell)
    with their per-GPU results and messages, and messages outside any test (``loose``)."""

    def __init__(self) -> None:
        self.meta: dict[str, str] = {}
        self.tests: list[dict] = []
        self.loose: list[dict] = []
        self.category: str | None = None
        self.cur_test: dict | None = None
        self.cur_msg: dict | None = None
        self.msg_chunks: list[str] = []

    def flush_msg(self) -> None:
        if self.cur_msg is not None:
            self.cur_msg["text"] = _join(self.msg_chunks)
        self.cur_msg = None
        self.msg_chunks = []

    def line(self, s: str) -> None:
        sm = _SECTION_RE.match(s)
        if sm:
            self.flush_msg()
            self.category = norm_key(sm.group("name"))
            self.cur_test = None
            return
        cells = _cells(s)
        if cells is None:
            return
        left, right = cells
        if left in ("Diagnostic",) or set(left) <= {"=", "-", "+"} and left:
            return
        if left:
            self.flush_msg()
            self.labelled(left, right, s)
        elif self.cur_msg is not None:  # continuation row (empty left cell)
            self.msg_chunks.append(_chunk(right, s.endswith("|")))
        elif self.cur_test is not None and right.strip():
            self.more_results(right.strip())

    def labelled(self, left: str, right: str, s: str) -> None:
        """A row with a left cell: metadata, a message (Info/Warning/Error...) or a new test."""
        value = right.strip()
        if self.category == "metadata":
            self.meta[norm_key(left)] = value
            return
        level = _MSG_ROWS.get(left.lower())
        if level is not None:
            self.cur_msg = {"level": level, "text": ""}
            self.msg_chunks = [_chunk(right, s.endswith("|"))]
            if self.cur_test is not None:
                self.cur_test["messages"].append(self.cur_msg)
            else:
                self.cur_msg["category"] = self.category
                self.loose.append(self.cur_msg)
            return
        self.cur_test = {"name": left, "key": norm_key(left), "category": self.category, "result": None,
                         "gpus": {}, "all_gpus": False, "messages": [], "_results": []}
        self.tests.append(self.cur_test)
        rg = _result_gpus(value)
        if rg:
            res, gpus, all_gpus = rg
            self.cur_test["_results"].append(res)
            self.cur_test["gpus"].update(gpus)
            self.cur_test["all_gpus"] = all_gpus

    def more_results(self, value: str) -> None:
        """A continuation row of a test: one GPU's result, or a result for a list of GPUs."""
        test = self.cur_test
        gm = _GPU_RES_RE.match(value)
        if gm:
            test["gpus"][gm.group("gpu")] = gm.group("res").lower()
            test["_results"].append(gm.group("res").lower())
            return
        rg = _result_gpus(value)
        if rg:
            res, gpus, all_gpus = rg
            test["_results"].append(res)
            test["gpus"].update(gpus)
            test["all_gpus"] = test["all_gpus"] or all_gpus


def _parse_table(lines: list[str]) -> dict:
    table = _DiagTable()
    for line in lines:
        table.line(line.rstrip())
    table.flush_msg()
    for t in table.tests:
        results = t.pop("_results")
        t["result"] = _worst(results)
    return {"meta": table.meta, "tests": table.tests, "messages": table.loose}


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


def _discovery_gpu_cell(cur: dict, right: str) -> None:
    """The right-hand cell of a GPU's row in dcgmi discovery's table: its name, PCI bus id or UUID."""
    if right.startswith("Name:"):
        cur["name"] = na(right.split(":", 1)[1])
    elif right.startswith("PCI Bus ID:"):
        cur["bus_id"] = bus_id(right.split(":", 1)[1].strip())
    elif right.startswith("Device UUID:"):
        cur["uuid"] = na(right.split(":", 1)[1])


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
            key = {
                "gpus": "gpu_count",
                "nvswitches": "nvswitch_count",
                "connectx": "connectx_count",
                "cpus": "cpu_count",
            }[section]
            out[key] = n
            cur = None
            continue
        if not s.startswith("|"):
            continue
        parts = [p.strip() for p in s.strip("|").split("|")]
        if section == "gpus" and len(parts) >= 2:
            if parts[0].isdigit():
                cur = {"id": int(parts[0]), "name": None, "bus_id": None, "uuid": None}
                out["gpus"].append(cur)
            if cur is not None:
                _discovery_gpu_cell(cur, parts[1])
        elif section == "nvswitches" and parts and parts[0].isdigit():
            out["nvswitch_ids"].append(int(parts[0]))
    if out["gpu_count"] is None and not out["gpus"]:
        raise ParseError(kind, "expected 'N GPUs found.' and a GPU table")
    return out


# --------------------------------------------------------------------------------------------
# dcgmi diag -j (JSON): DCGM 3.x ("DCGM GPU Diagnostic") and 4.x ("DCGM Diagnostic") layouts
# --------------------------------------------------------------------------------------------

_JSON_RESULTS = {"pass": "pass", "fail": "fail", "warn": "warn", "warning": "warn", "skip": "skip",
                 "not run": "skip", "error": "error"}


def _json_doc(kind: str, text: str, expected: str) -> dict:
    return leading_json(kind, text, expected)[0]


def _json_result(status) -> str:
    # an unknown status is never a pass
    return _JSON_RESULTS.get(str(status).strip().lower(), "error")


def _json_messages(entry: dict, gpu: str | None) -> list[dict]:
    out = []
    for w in entry.get("warnings") or []:
        # DCGM 3.x level-one tests put the text under "warnings", the others "warning"
        if isinstance(w, dict):
            text = w.get("warning") if isinstance(w.get("warning"), str) else w.get("warnings")
            out.append({"level": "warning", "text": str(text or "").strip(), "gpu": gpu,
                        "error_id": w.get("error_id")})
        else:
            out.append({"level": "warning", "text": str(w).strip(), "gpu": gpu, "error_id": None})
    info = entry.get("info")
    for i in [info] if isinstance(info, str) else (info or []):
        out.append({"level": "info", "text": str(i).strip(), "gpu": gpu, "error_id": None})
    return out


def _json_gpu_ids(result: dict) -> list[str]:
    if str(result.get("entity_group", "GPU")).upper() != "GPU" and "entity_id" in result:
        return []
    for key in ("entity_id", "gpu_id", "gpu_ids"):
        if key in result and result[key] is not None:
            return re.findall(r"\d+", str(result[key]))
    return []


def _json_test(category: str, t: dict) -> dict:
    name = str(t.get("name") or "")
    test = {"name": name, "key": norm_key(name), "category": norm_key(category), "result": None, "gpus": {},
            "all_gpus": False, "messages": []}
    results: list[str] = []
    seen: set[tuple] = set()
    for r in t.get("results") or []:
        if not isinstance(r, dict):
            continue
        res = _json_result(r.get("status"))
        ids = _json_gpu_ids(r)
        for g in ids:
            test["gpus"][g] = res
        if not ids and str(r.get("entity_group", "GPU")).upper() == "GPU":
            test["all_gpus"] = True
        results.append(res)
        for m in _json_messages(r, ids[0] if len(ids) == 1 else None):
            seen.add((m["text"], m["error_id"]))
            test["messages"].append(m)
    summary = t.get("test_summary")
    if isinstance(summary, dict):  # DCGM 4.x: the overall result and messages tied to no entity
        results.append(_json_result(summary.get("status")))
        for m in _json_messages(summary, None):
            if (m["text"], m["error_id"]) not in seen:
                test["messages"].append(m)
    test["result"] = _worst(results)
    return test


@register(
    "dcgmi-diag-json", "dcgmi diag -j (DCGM 3.x and 4.x JSON): per-test result, per-GPU results, messages"
)
def parse_diag_json(text: str) -> dict:
    """``dcgmi-diag-json``: the ``dcgmi-diag`` record (see above) from ``dcgmi diag -j`` output.

    DCGM 3.x writes ``{"DCGM GPU Diagnostic": {"test_categories": [...]}, "version", "Driver Version
    Detected", "GPU Device IDs"}`` with per-result ``gpu_id``/``gpu_ids``; DCGM 4.x writes
    ``{"DCGM Diagnostic": {"test_categories": [...]}, "entity_groups", "metadata": {"version", "Driver
    Version Detected"}}`` with per-result ``entity_group``/``entity_id`` and a ``test_summary`` per test.
    Both give the same record as the text table, plus ``"layout": "dcgm3"|"dcgm4"``: ``tests[].result``
    is the worst of the per-GPU results and the summary (an unknown status counts as a failure, "Not Run"
    as skip); ``messages`` carry ``level`` ("warning" for DCGM's ``warnings``, "info" for ``info``),
    ``text``, ``gpu`` and ``error_id``. A ``runtime_error`` gives ``ok: False`` and overall ``error``.
    Input without either top-level key raises ParseError. ``table_count`` is 1 (one document).
    """
    kind = "dcgmi-diag-json"
    text = require_text(kind, text, "dcgmi diag -j JSON document")
    doc = _json_doc(kind, text, "a 'DCGM Diagnostic' or 'DCGM GPU Diagnostic' JSON object")
    if isinstance(doc.get("DCGM Diagnostic"), dict):
        layout, body = "dcgm4", doc["DCGM Diagnostic"]
    elif isinstance(doc.get("DCGM GPU Diagnostic"), dict):
        layout, body = "dcgm3", doc["DCGM GPU Diagnostic"]
    else:
        raise ParseError(
            kind, "expected a 'DCGM Diagnostic' (DCGM 4.x) or 'DCGM GPU Diagnostic' (3.x) object"
        )
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    tests = [
        _json_test(str(cat.get("category") or ""), t)
        for cat in body.get("test_categories") or [] if isinstance(cat, dict)
        for t in cat.get("tests") or [] if isinstance(t, dict)
    ]
    error = body.get("runtime_error") or doc.get("runtime_error") or None
    if not tests and not error:
        raise ParseError(kind, "no test_categories with tests and no runtime_error (truncated?)")
    results = [t["result"] for t in tests]
    if error:
        overall = "error"
    elif "fail" in results:
        overall = "fail"
    elif "warn" in results:
        overall = "warn"
    elif "skip" in results:
        overall = "skip"
    else:
        overall = "pass"
    if layout == "dcgm4":
        ids = [str(e.get("device_id")) for g in doc.get("entity_groups") or [] if isinstance(g, dict)
               and str(g.get("entity_group", "")).upper() == "GPU" for e in g.get("entities") or []
               if isinstance(e, dict) and e.get("device_id") is not None]
    else:
        ids = [str(x) for x in doc.get("GPU Device IDs") or []]
    version = meta.get("version") or doc.get("version") or body.get("version")
    return {
        "ok": not error,
        "error": str(error) if error else None,
        "overall": overall,
        "dcgm_version": na(str(version)) if version is not None else None,
        "driver_version": na(meta.get("Driver Version Detected") or doc.get("Driver Version Detected")),
        "gpu_device_ids": ids,
        "tests": tests,
        "messages": [],
        "skipped": [t["key"] for t in tests if t["result"] == "skip"],
        "table_count": 1,
        "layout": layout,
    }


# --------------------------------------------------------------------------------------------
# dcgmi nvlink: -e -g N (error counts, tree or -j JSON) and --link-status
# --------------------------------------------------------------------------------------------

_LINK_STATE = {"U": "up", "D": "down", "X": "disabled", "_": "not_supported"}
_TREE_ROW_RE = re.compile(r"^\|\s*(?P<arrow>->\s*)?(?P<label>[^|]*?)\s*\|\s*(?P<value>[^|]*?)\s*\|\s*$")


def _link_status(kind: str, lines: list[str]) -> dict:
    out = {"gpus": [], "nvswitches": []}
    section = None
    cur = None
    for ln in lines:
        s = ln.strip()
        if s in ("GPUs:", "NvSwitches:"):
            section = "gpus" if s == "GPUs:" else "nvswitches"
            cur = None
            continue
        m = re.match(r"^(gpuId|physicalId) (\d+):$", s)
        if m and section:
            cur = {"gpu_id" if section == "gpus" else "physical_id": int(m.group(2)), "links": []}
            out[section].append(cur)
            continue
        if cur is not None and s and re.fullmatch(r"[UDX_](?: [UDX_])*", s):
            cur["links"] = [{"link": i, "state": _LINK_STATE[c]} for i, c in enumerate(s.split())]
            continue
        if (
            cur is not None
            and s
            and not s.startswith(("Link Entities:", "Key:"))
            and not re.match(r"^\d+:", s)
        ):
            if section and not s.startswith("No "):
                raise ParseError(kind, f"unexpected line in link status: {s!r}")
    down = [
        f"{'gpu' if 'gpu_id' in e else 'nvswitch'}{e.get('gpu_id', e.get('physical_id'))}:link{link['link']}"
        for sec in ("gpus", "nvswitches")
        for e in out[sec]
        for link in e["links"]
        if link["state"] in ("down", "disabled")
    ]
    return {**out, "down_links": down}


def _count(v) -> int | float | None:
    s = str(v).strip() if v is not None else ""
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    if re.fullmatch(r"-?\d+\.\d*(?:[eE][-+]?\d+)?|-?\d+[eE][-+]?\d+", s):
        return float(s)
    return None  # N/A, blank, anything unreadable


def _error_counts_from_sections(gpu_id: int | None, sections: dict[str, dict[str, object]]) -> dict:
    links, detail = [], {}
    for label, children in sections.items():
        counters = {norm_key(k): _count(v) for k, v in children.items()}
        m = re.match(r"^Link (\d+)$", label)
        if m:
            links.append({"link": int(m.group(1)), "counters": counters})
        else:  # Blackwell: one "Error Detail" section for the whole GPU
            detail.update(counters)
    keys = sorted({k for link in links for k in link["counters"]})
    totals = {}
    for k in keys:
        vals = [link["counters"].get(k) for link in links]
        totals[k] = sum(vals) if all(isinstance(v, int) for v in vals) else None
    return {"gpu_id": gpu_id, "links": links, "totals": totals, "detail": detail}


def _error_count_json(kind: str, text: str) -> tuple[int | None, dict[str, dict[str, object]]]:
    """``dcgmi nvlink -e -j``: (the GPU its header names, {link section: {counter: value}})."""
    doc = _json_doc(kind, text, "dcgmi nvlink -j JSON")
    header = [str(h) for h in doc.get("header") or []]
    body = doc.get("body")
    if "NVLINK Error Counts" not in header or not isinstance(body, dict):
        raise ParseError(
            kind, "expected a JSON object with header ['NVLINK Error Counts', 'GPU n'] and a body"
        )
    sections = {label: {k: (v.get("value") if isinstance(v, dict) else v)
                        for k, v in (sec.get("children") or {}).items()}
                for label, sec in body.items() if isinstance(sec, dict)}
    gpu = next((int(m.group(1)) for h in header if (m := re.match(r"^GPU (\d+)$", h))), None)
    return gpu, sections


def _error_count_tree(kind: str, text: str) -> tuple[int | None, dict[str, dict[str, object]]]:
    """``dcgmi nvlink -e`` tree table: (the GPU of its '| GPU n |' row, {link section: {counter: value}})."""
    gpu = None
    sections: dict[str, dict[str, object]] = {}
    current = None
    for ln in text.split("\n"):
        m = _TREE_ROW_RE.match(ln.rstrip())
        if not m:
            hm = re.match(r"^\|\s*GPU (\d+)\s*\|$", ln.strip())
            if hm:
                gpu = int(hm.group(1))
            continue
        label, value = m.group("label"), m.group("value")
        if m.group("arrow"):
            if current is None:
                raise ParseError(kind, f"counter row before any 'Link n' section: {ln.strip()!r}")
            sections[current][label] = value
        elif label:
            current = label
            sections.setdefault(label, {})
    if not sections:
        raise ParseError(kind, "'NVLINK Error Counts' header without link rows (truncated?)")
    return gpu, sections


@register("dcgmi-nvlink", "dcgmi nvlink -e -g N (error counts, text or -j) and dcgmi nvlink --link-status")
def parse_dcgmi_nvlink(text: str) -> dict:
    """``dcgmi-nvlink``: one kind for both ``dcgmi nvlink`` outputs::

        {"mode": "link_status" | "error_counts",
         # link_status (``--link-status`` / ``-s``), else [] :
         "gpus": [{"gpu_id": int, "links": [{"link": int, "state": "up"|"down"|"disabled"|"not_supported"}]}],
         "nvswitches": [{"physical_id": int, "links": [...]}],
         "down_links": ["gpu0:link3", ...],          # down or disabled
         # error_counts (``-e -g N``, tree table or ``-j`` JSON), else None :
         "error_counts": {"gpu_id": int | None,
                          "links": [{"link": int, "counters": {"crc_flit_error": int|None, "crc_data_error",
                                                               "replay_error", "recovery_error", ...}}],
                          "totals": {counter: int | None},     # None when any link's value is unreadable
                          "detail": {counter: int|float|None}}}   # Blackwell's per-GPU "Error Detail"

    Link states come from the ``U D X _`` key dcgmi prints. Counter keys are the printed names
    normalised; a value that is not a number is None. Text that is neither shape raises ParseError.
    """
    kind = "dcgmi-nvlink"
    text = require_text(kind, text, "'NvLink Link Status' or 'NVLINK Error Counts' output of dcgmi nvlink")
    base = {"mode": None, "gpus": [], "nvswitches": [], "down_links": [], "error_counts": None}
    if "NvLink Link Status" in text:
        return {**base, "mode": "link_status", **_link_status(kind, text.split("\n"))}
    if text.lstrip().startswith("{") or "NVLINK Error Counts" not in text and "{" in text:
        gpu, sections = _error_count_json(kind, text)
    elif "NVLINK Error Counts" not in text:
        raise ParseError(kind, "expected 'NvLink Link Status' or 'NVLINK Error Counts' (dcgmi nvlink output)")
    else:
        gpu, sections = _error_count_tree(kind, text)
    return {**base, "mode": "error_counts", "error_counts": _error_counts_from_sections(gpu, sections)}
