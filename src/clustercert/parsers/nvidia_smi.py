"""Parsers for ``nvidia-smi`` outputs.

Kinds
-----
``nvidia-smi-xml`` (``nvidia-smi -q -x``) and ``nvidia-smi-q`` (plain ``nvidia-smi -q``) both return::

    {"driver_version": str|None, "cuda_version": str|None, "attached_gpus": int|None,
     "gpu_count": int,                     # GPU sections actually present
     "gpus": [GPU, ...]}

with one GPU record per GPU section, in output order::

    {"index": int,                          # position in the output (0-based)
     "bus_id": "00000000:18:00.0",          # normalised: 8-hex domain, upper case
     "product_name", "uuid", "serial": str|None, "minor_number": int|None,
     "vbios_version": str|None,
     "persistence_mode": bool|None, "mig_mode_current": bool|None,
     "memory_total_mib", "memory_used_mib": int|None,
     "ecc_mode_current": bool|None,         # True = Enabled
     "ecc_errors": {"volatile": {counter: int|bool|None}, "aggregate": {...},
                    "volatile_correctable", "volatile_uncorrectable",
                    "aggregate_correctable", "aggregate_uncorrectable": int|None},
                    # sums over the SRAM/DRAM (or single/double bit) counters shown; None if all N/A
     "retired_pages": {"single_bit": int|None, "double_bit": int|None, "pending": bool|None},
     "remapped_rows": {"correctable": int|None, "uncorrectable": int|None,
                       "pending": bool|None, "failure": bool|None} | None,   # None: not supported
     "pcie": {"gen_current", "gen_max", "width_current", "width_max", "replay_count": int|None},
     "temperature_celsius": int|None, "power_draw_watts": float|None, "power_limit_watts": float|None,
     "clocks_event_reasons_active": [name, ...],   # e.g. ["gpu_idle", "hw_slowdown"]
     "utilization_gpu_percent": int|None,
     "fabric": {"state": str|None, "status": str|None} | None,
     "reset_required": bool|None,
     "process_count": int|None}

``nvidia-smi-q`` also returns ``"partial_display": bool``: True when fewer GPU sections are present than
the header's ``Attached GPUs`` announces and the output is complete all the same (``nvidia-smi -i N -q``,
``-q -d ...``), so ``gpu_count < attached_gpus`` is not a missing GPU.

Truncated input raises ParseError: for XML any malformed document; for ``-q`` text a header that
announces more GPUs than sections present when the output neither ends with a blank line (``-d``
displays, untouched output) nor has a complete last GPU section (its ``Processes`` entry, the last item
nvidia-smi prints per GPU, is present: a pasted ``nvidia-smi -i N -q`` whose trailing blank line was lost).

``nvidia-smi-csv`` (``--query-gpu=... --format=csv[,noheader][,nounits]``)::

    {"fields": [name, ...] | None,          # None when the output had no header line
     "units": {field: unit},                # from "[MiB]" style header suffixes
     "rows": [{field: value}] | [[str, ...]]}

Values of fields with a unit are numbers (the unit removed); other values are strings.
``[N/A]``, ``N/A``, ``[Not Supported]`` and any other bracketed placeholder become None.
Counters and counts are numbers too: ``index``, ``count``, ``pcie.link.gen.*``, ``pcie.link.width.*``,
``ecc.errors.*``, ``remapped_rows.(un)correctable``, ``retired_pages.sbe/dbe``, ``pcie.replay_counter*``
and ``temperature.*`` (Celsius, recorded in ``units``).

``nvidia-smi-table`` (default ``nvidia-smi``)::

    {"driver_version", "cuda_version": str|None, "smi_version": str|None,
     "gpus": [{"index", "name", "bus_id", "persistence_mode"/"driver_model", "display_active",
               "volatile_uncorrected_ecc": int|None, "fan_percent": int|None, "fan_error": bool,
               "temperature_celsius", "perf_state", "power_draw_watts", "power_cap_watts",
               "memory_used_mib", "memory_total_mib", "utilization_gpu_percent", "compute_mode",
               "mig_mode",
               "unavailable_fields": [key, ...]}],   # second-row fields that read N/A or "Not Supported"
     "mig_devices": [{"gpu", "gi_id", "ci_id", "mig_dev", "memory_used_mib", "memory_total_mib"}],
     "processes": [{"gpu", "gi_id", "ci_id", "pid", "type", "name", "memory_mib"}] | None,
     "warnings": [str]}

``processes`` is None when the processes table is missing (truncated output), [] for
"No running processes found". ``fan_error`` is True when the fan column shows ``ERR!``. Each cell of the
second GPU row is read on its own: Grace-Blackwell parts (GB10, GB200) print ``Not Supported`` for
Memory-Usage and ``N/A`` for the power cap, so those fields are None (and listed in
``unavailable_fields``) while temperature, perf state, power draw and utilisation are still read.

``nvidia-smi-topo`` (``nvidia-smi topo -m``; also ``topo -p2p r``)::

    {"devices": [{"name": "GPU0", "kind": "gpu"|"nic"|"other", "nic_name": "mlx5_0"|None}],
     "matrix": {row: {column: "X"|"NV18"|"PIX"|"PXB"|"PHB"|"NODE"|"SYS"|"OK"|...}},
     "affinity": {row: {"cpu_affinity": str|None, "numa_affinity": str|None, "gpu_numa_id": str|None}},
     "nic_legend": {"NIC0": "mlx5_0"},
     "header_complete": bool,   # False: the header was lost or lists fewer devices than there are rows
     "cut_rows": [row, ...],    # rows with fewer matrix cells than devices (lines cut by a terminal)
     "elided": bool}            # a '...' line stood for rows left out of the paste

The matrix is square with rows in column order, so when a paste cut the header (its leading whitespace,
the right-hand columns, or the whole line) the device list is taken from the row labels and NIC rows are
kept. A row cut short keeps the cells it has (the missing columns are absent from its ``matrix`` entry,
its affinity is None) and is listed in ``cut_rows``; with a complete header a short row is truncation and
raises ParseError. An error message instead of a matrix (e.g. ``ERROR: Option -m is missing its value``)
raises ParseError.

``nvidia-smi-topo-p2p`` (``nvidia-smi topo -p2p r|w|n|a|p``: read, write, NVLink, atomics, PCIe)::

    {"devices": ["GPU0", ...],
     "matrix": {row: {column: "X"|"OK"|"CNS"|"GNS"|"TNS"|"NS"|"DR"|"U"|None}},   # None: N/A
     "legend": {"OK": "Status Ok", ...},      # as printed (empty when the paste has no legend)
     "meaning": {code: str},                   # each code seen: printed legend, else nvidia-smi's own
     "pair_count": int, "ok_pairs": int,       # ordered GPU pairs (diagonal excluded)
     "not_ok": ["GPU0-GPU1", ...],             # pairs whose status is not OK
     "all_ok": bool|None,                      # None for a single GPU (no pairs)
     "header_complete": bool, "cut_rows": [row, ...], "elided": bool}

Rows a paste left out ('...') are absent: ``all_ok`` and the counts describe the rows present only.
The capability the matrix answers for is not printed by nvidia-smi (it is the command's argument).
A matrix with link types (``topo -m`` output) raises ParseError.

``nvidia-smi-nvlink`` (``nvidia-smi nvlink -s``)::

    {"gpus": [{"index", "name", "uuid",
               "status": "ok"|"all_links_inactive"|"not_supported"|"mig_unsupported"|"error",
               "message": str|None,
               "links": [{"link": int, "gbyte_per_s": float|None, "inactive": bool}]}]}

A GPU whose NVLinks are not usable is reported with its status and an empty ``links`` list; a
``<inactive>`` link has ``inactive: True`` and ``gbyte_per_s: None``.

``nvidia-smi-nvlink-errors`` (``nvidia-smi nvlink -e`` / ``--errorcounters``)::

    {"gpus": [{"index": int, "bus_id": str|None, "name": str|None, "uuid": str|None,
               "status": "ok"|"all_links_inactive"|"not_supported"|"mig_unsupported"|"error",
               "message": str|None,
               "links": [{"link": int, "counters": {"replay_errors": int|None, "recovery_errors": int|None,
                                                    "crc_errors": int|None, ...}}],
               "totals": {counter: int|None}}],   # sum over the GPU's links; None when any link's value
                                                  # is N/A or not an integer, and for BER ratios
     "counter_names": {"replay_errors": "Replay Errors", ...}}   # keys as printed

Counter keys are the printed names normalised (``Replay Errors`` -> ``replay_errors``, ``CRC Errors``,
Blackwell's ``Rx Errors``, ``Local link integrity Errors``, ``Effective BER``, ``FEC Errors - 3`` style
lines...). Values are int, float (BER) or None for ``N/A``. GPUs are headed ``GPU n: <name> (UUID: ..)``
or, on GB200-class drivers, ``GPU <bus id>``. ``nvlink -s`` speed lines raise ParseError.

``nvidia-smi-list`` (``nvidia-smi -L``)::

    {"gpus": [{"index", "name", "uuid", "mig_devices": [{"profile", "device", "uuid"}]}]}
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from clustercert.parsers._nvutil import (
    bus_id,
    clean,
    is_na,
    na,
    norm_key,
    number,
    require_text,
    split_columns,
    yes_no,
)
from clustercert.parsers.base import ParseError, register

# --------------------------------------------------------------------------------------------
# shared GPU-record builder (works on nested dicts built from XML or from -q text)
# --------------------------------------------------------------------------------------------


def _get(d, *path):
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _first(d, *paths):
    """First non-None value among several key paths (each a tuple)."""
    for path in paths:
        v = _get(d, *path)
        if v is not None and not (isinstance(v, str) and na(v) is None):
            return v
    return None


def _flatten(d, prefix=""):
    out = {}
    if not isinstance(d, dict):
        return out
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "_"))
        else:
            out[key] = v
    return out


def _ecc_counters(section) -> dict:
    out = {}
    for k, v in _flatten(section).items():
        if not isinstance(v, str):
            continue
        n = number(v)
        if n is not None:
            out[k] = n
        else:
            b = yes_no(v)
            out[k] = b  # Yes/No flags (e.g. sram_threshold_exceeded) or None for N/A
    return out


def _sum_counters(counters: dict, correctable: bool):
    vals = []
    for k, v in counters.items():
        if isinstance(v, bool):
            continue
        if correctable:
            hit = (k.endswith("correctable") and "uncorrectable" not in k) or k == "single_bit_total"
        else:
            hit = ("uncorrectable" in k) or k == "double_bit_total"
        if hit:
            vals.append(v)
    known = [v for v in vals if v is not None]
    return sum(known) if known else None


def _ecc_block(ecc: dict | None) -> dict:
    ecc = ecc if isinstance(ecc, dict) else {}
    vol = _ecc_counters(ecc.get("volatile"))
    agg = _ecc_counters(ecc.get("aggregate"))
    return {
        "volatile": vol,
        "aggregate": agg,
        "volatile_correctable": _sum_counters(vol, True),
        "volatile_uncorrectable": _sum_counters(vol, False),
        "aggregate_correctable": _sum_counters(agg, True),
        "aggregate_uncorrectable": _sum_counters(agg, False),
    }


def _int(v):
    n = number(v) if isinstance(v, str) else None
    return int(n) if n is not None else None


def _float(v):
    n = number(v) if isinstance(v, str) else None
    return float(n) if n is not None else None


def _reasons_active(section) -> list[str]:
    out = []
    if not isinstance(section, dict):
        return out
    for k, v in _flatten(section).items():
        if isinstance(v, str) and v.strip().lower() == "active":
            name = re.sub(r"^clocks_(event|throttle)_reason_", "", k)
            name = {"idle": "gpu_idle", "display_clock_setting": "display_clocks_setting"}.get(name, name)
            out.append(name)
    return out


def _gpu_from_xml_dict(g: dict, index: int, attr_id: str | None, processes: int | None) -> dict:
    pci = g.get("pci") if isinstance(g.get("pci"), dict) else {}
    link = _get(pci, "pci_gpu_link_info") or {}
    rr = g.get("remapped_rows")
    if isinstance(rr, dict):
        remapped = {
            "correctable": _int(rr.get("remapped_row_corr")),
            "uncorrectable": _int(rr.get("remapped_row_unc")),
            "pending": yes_no(rr.get("remapped_row_pending")),
            "failure": yes_no(rr.get("remapped_row_failure")),
        }
    else:
        remapped = None
    rp = g.get("retired_pages") if isinstance(g.get("retired_pages"), dict) else {}
    pend = [yes_no(rp.get("pending_blacklist")), yes_no(rp.get("pending_retirement"))]
    fabric = g.get("fabric")
    power = _first(
        g,
        ("gpu_power_readings", "power_draw"),
        ("gpu_power_readings", "instant_power_draw"),
        ("gpu_power_readings", "average_power_draw"),
        ("power_readings", "power_draw"),
        ("power_readings", "instant_power_draw"),
        ("power_readings", "average_power_draw"),
    )
    limit = _first(
        g,
        ("gpu_power_readings", "current_power_limit"),
        ("gpu_power_readings", "enforced_power_limit"),
        ("power_readings", "enforced_power_limit"),
        ("power_readings", "power_limit"),
        ("power_readings", "current_power_limit"),
    )
    reasons = g.get("clocks_event_reasons") or g.get("clocks_throttle_reasons")
    return {
        "index": index,
        "bus_id": bus_id(attr_id or _get(pci, "pci_bus_id")),
        "product_name": na(g.get("product_name")),
        "uuid": na(g.get("uuid")),
        "serial": na(g.get("serial")),
        "vbios_version": na(g.get("vbios_version")),
        "minor_number": _int(g.get("minor_number")),
        "persistence_mode": yes_no(g.get("persistence_mode")),
        "mig_mode_current": yes_no(_get(g, "mig_mode", "current_mig")),
        "memory_total_mib": _int(_get(g, "fb_memory_usage", "total")),
        "memory_used_mib": _int(_get(g, "fb_memory_usage", "used")),
        "ecc_mode_current": yes_no(_get(g, "ecc_mode", "current_ecc")),
        "ecc_errors": _ecc_block(g.get("ecc_errors")),
        "retired_pages": {
            "single_bit": _int(_get(rp, "multiple_single_bit_retirement", "retired_count")),
            "double_bit": _int(_get(rp, "double_bit_retirement", "retired_count")),
            "pending": True if True in pend else (False if False in pend else None),
        },
        "remapped_rows": remapped,
        "pcie": {
            "gen_current": _int(_get(link, "pcie_gen", "current_link_gen")),
            "gen_max": _int(_get(link, "pcie_gen", "max_link_gen")),
            "width_current": _int(_get(link, "link_widths", "current_link_width")),
            "width_max": _int(_get(link, "link_widths", "max_link_width")),
            "replay_count": _int(pci.get("replay_counter")),
        },
        "temperature_celsius": _int(_get(g, "temperature", "gpu_temp")),
        "power_draw_watts": _float(power),
        "power_limit_watts": _float(limit),
        "clocks_event_reasons_active": _reasons_active(reasons),
        "utilization_gpu_percent": _int(_get(g, "utilization", "gpu_util")),
        "fabric": (
            {"state": na(fabric.get("state")), "status": na(fabric.get("status"))}
            if isinstance(fabric, dict)
            else None
        ),
        "reset_required": yes_no(_get(g, "gpu_reset_status", "reset_required")),
        "process_count": processes,
    }


def _gpu_from_q_dict(g: dict, index: int, header_bus: str, processes: int | None) -> dict:
    pci = g.get("pci") if isinstance(g.get("pci"), dict) else {}
    link = _get(pci, "gpu_link_info") or {}
    rr = g.get("remapped_rows")
    if isinstance(rr, dict):
        remapped = {
            "correctable": _int(rr.get("correctable_error")),
            "uncorrectable": _int(rr.get("uncorrectable_error")),
            "pending": yes_no(rr.get("pending")),
            "failure": yes_no(rr.get("remapping_failure_occurred")),
        }
    else:
        remapped = None
    rp = g.get("retired_pages") if isinstance(g.get("retired_pages"), dict) else {}
    pend = [yes_no(rp.get("pending_page_blacklist")), yes_no(rp.get("pending_page_retirement"))]
    fabric = g.get("fabric")
    power = _first(
        g,
        ("gpu_power_readings", "power_draw"),
        ("gpu_power_readings", "instantaneous_power_draw"),
        ("gpu_power_readings", "average_power_draw"),
        ("power_readings", "power_draw"),
        ("power_readings", "instantaneous_power_draw"),
        ("power_readings", "average_power_draw"),
    )
    limit = _first(
        g,
        ("gpu_power_readings", "current_power_limit"),
        ("gpu_power_readings", "enforced_power_limit"),
        ("power_readings", "enforced_power_limit"),
        ("power_readings", "power_limit"),
        ("power_readings", "current_power_limit"),
    )
    reasons = g.get("clocks_event_reasons") or g.get("clocks_throttle_reasons")
    return {
        "index": index,
        "bus_id": bus_id(header_bus or pci.get("bus_id")),
        "product_name": na(g.get("product_name")),
        "uuid": na(g.get("gpu_uuid")),
        "serial": na(g.get("serial_number")),
        "vbios_version": na(g.get("vbios_version")),
        "minor_number": _int(g.get("minor_number")),
        "persistence_mode": yes_no(g.get("persistence_mode")),
        "mig_mode_current": yes_no(_get(g, "mig_mode", "current")),
        "memory_total_mib": _int(_get(g, "fb_memory_usage", "total")),
        "memory_used_mib": _int(_get(g, "fb_memory_usage", "used")),
        "ecc_mode_current": yes_no(_get(g, "ecc_mode", "current")),
        "ecc_errors": _ecc_block(g.get("ecc_errors")),
        "retired_pages": {
            "single_bit": _int(rp.get("single_bit_ecc")),
            "double_bit": _int(rp.get("double_bit_ecc")),
            "pending": True if True in pend else (False if False in pend else None),
        },
        "remapped_rows": remapped,
        "pcie": {
            "gen_current": _int(_get(link, "pcie_generation", "current")),
            "gen_max": _int(_get(link, "pcie_generation", "max")),
            "width_current": _int(_get(link, "link_width", "current")),
            "width_max": _int(_get(link, "link_width", "max")),
            "replay_count": _int(pci.get("replays_since_reset")),
        },
        "temperature_celsius": _int(_get(g, "temperature", "gpu_current_temp")),
        "power_draw_watts": _float(power),
        "power_limit_watts": _float(limit),
        "clocks_event_reasons_active": _reasons_active(reasons),
        "utilization_gpu_percent": _int(_get(g, "utilization", "gpu")),
        "fabric": (
            {"state": na(fabric.get("state")), "status": na(fabric.get("status"))}
            if isinstance(fabric, dict)
            else None
        ),
        "reset_required": yes_no(_get(g, "gpu_reset_status", "reset_required")),
        "process_count": processes,
    }


# --------------------------------------------------------------------------------------------
# nvidia-smi -q -x
# --------------------------------------------------------------------------------------------


def _el_to_dict(el: ET.Element):
    children = list(el)
    if not children:
        return (el.text or "").strip()
    out: dict = {}
    for c in children:
        if c.tag in out:  # repeated tags (supported clocks, process_info...) keep the first
            continue
        out[c.tag] = _el_to_dict(c)
    return out


@register(
    "nvidia-smi-xml", "nvidia-smi -q -x: driver, per-GPU identity, ECC, retired pages, remapped rows, PCIe"
)
def parse_xml(text: str) -> dict:
    kind = "nvidia-smi-xml"
    text = require_text(kind, text, "'<nvidia_smi_log>' XML document")
    start = text.find("<")
    if start < 0:
        raise ParseError(kind, "expected '<nvidia_smi_log>' root element, found no XML")
    try:
        root = ET.fromstring(text[start:].strip())
    except ET.ParseError as exc:
        raise ParseError(
            kind, f"malformed or truncated XML ({exc}); expected '<nvidia_smi_log>' document"
        ) from exc
    if root.tag != "nvidia_smi_log":
        raise ParseError(kind, f"expected '<nvidia_smi_log>' root element, got '<{root.tag}>'")
    gpus = []
    for i, gel in enumerate(root.findall("gpu")):
        procs_el = gel.find("processes")
        nproc = len(procs_el.findall("process_info")) if procs_el is not None else None
        gpus.append(_gpu_from_xml_dict(_el_to_dict(gel), i, gel.get("id"), nproc))
    attached = root.findtext("attached_gpus")
    return {
        "driver_version": na(root.findtext("driver_version")),
        "cuda_version": na(root.findtext("cuda_version")),
        "attached_gpus": _int(attached),
        "gpu_count": len(gpus),
        "gpus": gpus,
    }


# --------------------------------------------------------------------------------------------
# nvidia-smi -q (text)
# --------------------------------------------------------------------------------------------

_Q_GPU_RE = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_Q_KV_RE = re.compile(r"^(\s*)([^:]*?\S)\s*:\s?(.*)$")


def _q_block_to_dict(lines: list[str]) -> dict:
    root: dict = {}
    stack: list[tuple[int, dict]] = [(-1, root)]
    for line in lines:
        if not line.strip() or line.strip().startswith("["):
            continue
        indent = len(line) - len(line.lstrip(" \t"))
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        cur = stack[-1][1]
        m = _Q_KV_RE.match(line)
        if m:
            key = norm_key(m.group(2))
            if key not in cur:
                cur[key] = m.group(3).strip()
        else:
            key = norm_key(line)
            sect = cur.get(key)
            if not isinstance(sect, dict):
                sect = {}
                cur[key] = sect
            stack.append((indent, sect))
    return root


def _q_process_count(lines: list[str]) -> int | None:
    pids = 0
    seen = False
    for line in lines:
        s = line.strip()
        if re.match(r"^Processes\s*:\s*None\s*$", s):
            return 0
        if re.match(r"^Processes\s*$", s):
            seen = True
        if re.match(r"^Process ID\s*:", s):
            pids += 1
    return pids if seen else None


@register(
    "nvidia-smi-q", "nvidia-smi -q text: driver, per-GPU identity, ECC, retired pages, remapped rows, PCIe"
)
def parse_q(text: str) -> dict:
    kind = "nvidia-smi-q"
    text = require_text(kind, text, "'==============NVSMI LOG==============' report")
    lines = text.split("\n")
    header: dict[str, str] = {}
    blocks: list[tuple[str, list[str]]] = []
    cur: list[str] | None = None
    for line in lines:
        m = _Q_GPU_RE.match(line)
        if m:
            cur = []
            blocks.append((m.group(1), cur))
            continue
        if cur is not None and (line.startswith((" ", "\t")) or not line.strip()):
            cur.append(line)
            continue
        cur = None
        kv = _Q_KV_RE.match(line)
        if kv and not line.startswith((" ", "\t")):
            header[norm_key(kv.group(2))] = kv.group(3).strip()
    if not blocks and "driver_version" not in header:
        raise ParseError(kind, "expected 'Driver Version :' header or 'GPU 00000000:xx:xx.x' sections")
    attached = _int(header.get("attached_gpus"))
    partial = attached is not None and len(blocks) < attached
    if partial:
        ends_blank = re.search(r"\n[ \t]*\n[ \t\n]*$", text) is not None
        last_complete = bool(blocks) and _q_process_count(blocks[-1][1]) is not None
        if not (ends_blank or last_complete):
            raise ParseError(
                kind,
                f"truncated: header announces {attached} GPUs, {len(blocks)} section(s) present, the last "
                "section has no Processes entry and the report does not end with a blank line",
            )
    gpus = [
        _gpu_from_q_dict(_q_block_to_dict(blines), i, bid, _q_process_count(blines))
        for i, (bid, blines) in enumerate(blocks)
    ]
    return {
        "driver_version": na(header.get("driver_version")),
        "cuda_version": na(header.get("cuda_version")),
        "attached_gpus": attached,
        "gpu_count": len(gpus),
        "partial_display": partial,
        "gpus": gpus,
    }


# --------------------------------------------------------------------------------------------
# --query-gpu CSV
# --------------------------------------------------------------------------------------------

_CSV_FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*(?: \[[^\]]+\])?$")
_CSV_PLAIN_FIELDS = {"index", "name", "serial", "uuid", "count", "timestamp", "pstate"}
_CSV_NUMERIC_FIELDS = re.compile(
    r"^(index|count|pcie\.link\.(gen|width)\.[a-z]+|temperature\.[a-z_.]+|ecc\.errors\.[a-z_.]+"
    r"|remapped_rows\.(correctable|uncorrectable)|retired_pages\.(sbe|dbe|single_bit|double_bit)[a-z_.]*"
    r"|pcie\.replay_counter[a-z_.]*)$"
)


def _csv_split(line: str) -> list[str]:
    return [c.strip() for c in line.split(",")]


def _is_csv_header(cells: list[str]) -> bool:
    if not all(_CSV_FIELD_RE.match(c) for c in cells):
        return False
    return any(("." in c or "_" in c or c in _CSV_PLAIN_FIELDS) for c in cells)


def _csv_value(field: str, unit: str | None, raw: str):
    v = na(raw)
    if v is None:
        return None
    if unit is not None:
        n = number(v)
        return n if n is not None else v
    if _CSV_NUMERIC_FIELDS.match(field):
        n = number(v)
        return n if n is not None else v
    return v


def _csv_fields(header: list[str]) -> tuple[list[str], dict[str, str]]:
    """The field names of a CSV header and their units ('power.draw [W]' -> power.draw, W); temperatures
    print no unit: C."""
    fields: list[str] = []
    units: dict[str, str] = {}
    for c in header:
        m = re.match(r"^(.*?) \[([^\]]+)\]$", c)
        if m:
            fields.append(m.group(1))
            units[m.group(1)] = m.group(2)
        else:
            fields.append(c)
    for f in fields:
        if f.startswith("temperature.") and f not in units:
            units[f] = "C"
    return fields, units


@register("nvidia-smi-csv", "nvidia-smi --query-*=... --format=csv: rows keyed by field, units split out")
def parse_csv(text: str) -> dict:
    kind = "nvidia-smi-csv"
    text = require_text(kind, text, "CSV lines from nvidia-smi --format=csv")
    lines = [ln for ln in text.split("\n") if ln.strip() and ln.strip() != "[...]"]
    first = _csv_split(lines[0])
    if _is_csv_header(first):
        fields, units = _csv_fields(first)
        rows = []
        for ln in lines[1:]:
            cells = _csv_split(ln)
            if len(cells) != len(fields):
                raise ParseError(
                    kind,
                    f"row has {len(cells)} values, header has {len(fields)} fields (truncated?): {ln[:80]!r}",
                )
            rows.append(
                {f: _csv_value(f, None if f.startswith("temperature.") else units.get(f), c)
                 for f, c in zip(fields, cells, strict=True)}
            )
        return {"fields": fields, "units": units, "rows": rows}
    # no header: rows of strings, placeholders -> None
    width = len(first)
    rows_raw = []
    for ln in lines:
        cells = _csv_split(ln)
        if len(cells) != width:
            raise ParseError(kind, f"inconsistent column count ({len(cells)} vs {width}); expected CSV rows")
        rows_raw.append([na(c) for c in cells])
    if width < 2 and not any(re.match(r"^[\w.:\-% ]+$", r[0] or "") for r in rows_raw):
        raise ParseError(kind, "expected comma-separated nvidia-smi query output")
    return {"fields": None, "units": {}, "rows": rows_raw}


# --------------------------------------------------------------------------------------------
# default table
# --------------------------------------------------------------------------------------------

_TBL_HDR_RE = re.compile(
    r"NVIDIA-SMI\s+(?P<smi>\S+)\s+(?:Driver|KMD) Version:\s*(?P<drv>\S+)\s+CUDA(?: UMD)? "
    r"Version:\s*(?P<cuda>\S+)"
)
_TBL_GPU1_RE = re.compile(
    r"^\|\s*(?P<idx>\d+)\s+(?P<name>.+?)\s+(?P<pm>On|Off|WDDM|TCC|MCDM|N/A)\s*\|"
    r"\s*(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s+(?P<disp>\S+)\s*\|"
    r"\s*(?P<ecc>\S+)\s*\|"
)
# Second row of a GPU entry, one cell at a time: Grace-Blackwell parts (GB10, GB200) print
# "Not Supported" for Memory-Usage and "N/A" for the power cap, older ones a "used / total" pair.
_TBL_GPU2_RE = re.compile(r"^\|(?P<left>[^|]*)\|(?P<mid>[^|]*)\|(?P<right>[^|]*)\|\s*$")
_TBL_LEFT_RE = re.compile(
    r"^\s*(?P<fan>\S+?)\s+(?P<temp>\S+?)\s+(?P<perf>P\d+|N/A)\s+(?P<pwr>\S+)\s*/\s*(?P<cap>\S+)\s*$"
)
_TBL_MEM_RE = re.compile(r"^\s*(?P<used>\S+)\s*/\s*(?P<total>\S+)\s*$")
_TBL_RIGHT_RE = re.compile(r"^\s*(?P<util>\S+)\s+(?P<cm>.+?)\s*$")
_TBL_FAN_TEMP_RE = re.compile(r"^\|(?P<fan>ERR!|\S+)\s+(?P<temp>\S+)")
_TBL_GPU3_RE = re.compile(r"^\|\s*\|\s*\|\s*(?P<mig>\S.*?)\s*\|$")
_TBL_PROC_RE = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?P<gi>\S+)\s+(?P<ci>\S+)\s+(?P<pid>\d+)\s+(?P<type>C\+G|C|G|M|M\+C)\s+"
    r"(?P<name>.+?)\s+(?P<mem>\d+MiB|N/A)\s*\|$"
)
_TBL_MIG_RE = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?P<gi>\d+)\s+(?P<ci>\d+)\s+(?P<dev>\d+)\s*\|\s*(?P<used>\d+)MiB\s*/"
    r"\s*(?P<total>\d+)MiB"
)


def _mib(v: str):
    return number(v.replace("MiB", " MiB"), "MiB") if v else None


def _table_second_row(line: str) -> dict | None:
    """Fan/temp/perf/power, memory and utilisation cells of a GPU's second table row, or None when the
    line is not one. A cell that reads N/A or "Not Supported" gives None for its fields, listed in
    ``unavailable_fields``; a cell that cannot be read at all leaves the row unrecognised."""
    m = _TBL_GPU2_RE.match(line)
    if not m:
        return None
    left = _TBL_LEFT_RE.match(m.group("left"))
    right = _TBL_RIGHT_RE.match(m.group("right"))
    mid = m.group("mid").strip()
    mem = _TBL_MEM_RE.match(mid)
    if not left or not right or not (mem or is_na(mid)):
        return None
    fan = left.group("fan")
    out = {
        "fan_percent": _int(fan.rstrip("%")) if fan.endswith("%") else None,
        "fan_error": fan.upper().startswith("ERR"),
        "temperature_celsius": _int(left.group("temp").rstrip("C")),
        "perf_state": na(left.group("perf")),
        "power_draw_watts": _float(left.group("pwr").rstrip("W")),
        "power_cap_watts": _float(left.group("cap").rstrip("W")),
        "memory_used_mib": _mib(mem.group("used")) if mem else None,
        "memory_total_mib": _mib(mem.group("total")) if mem else None,
        "utilization_gpu_percent": _int(right.group("util").rstrip("%")),
        "compute_mode": na(right.group("cm")),
    }
    raw = {
        "fan_percent": fan,
        "temperature_celsius": left.group("temp"),
        "perf_state": left.group("perf"),
        "power_draw_watts": left.group("pwr"),
        "power_cap_watts": left.group("cap"),
        "memory_used_mib": mem.group("used") if mem else mid,
        "memory_total_mib": mem.group("total") if mem else mid,
        "utilization_gpu_percent": right.group("util"),
        "compute_mode": right.group("cm"),
    }
    out["unavailable_fields"] = [k for k, v in raw.items() if is_na(v)]
    return out


def _table_gpu(m1: re.Match) -> dict:
    """A GPU from its first table row (index, name, persistence, bus id, display, ECC); the second and
    third rows fill the rest."""
    pm = m1.group("pm")
    return {
        "index": int(m1.group("idx")),
        "name": m1.group("name").strip(),
        "bus_id": bus_id(m1.group("bus")),
        "persistence_mode": {"On": True, "Off": False}.get(pm),
        "driver_model": pm if pm in ("WDDM", "TCC", "MCDM") else None,
        "display_active": yes_no(m1.group("disp")),
        "volatile_uncorrected_ecc": _int(m1.group("ecc")),
        "fan_percent": None,
        "fan_error": False,
        "temperature_celsius": None,
        "perf_state": None,
        "power_draw_watts": None,
        "power_cap_watts": None,
        "memory_used_mib": None,
        "memory_total_mib": None,
        "utilization_gpu_percent": None,
        "compute_mode": None,
        "mig_mode": None,
        "unavailable_fields": [],
    }


class _GpuRows:
    """The GPU section: each GPU's three table rows, in order (first row, second row, MIG mode row)."""

    def __init__(self) -> None:
        self.gpus: list[dict] = []
        self.pending: dict | None = None
        self.stage = 0  # the row of the pending GPU read last

    def line(self, s: str) -> None:
        m1 = _TBL_GPU1_RE.match(s)
        if m1:
            self.pending = _table_gpu(m1)
            self.gpus.append(self.pending)
            self.stage = 1
            return
        if self.pending is None:
            return
        if self.stage == 1:
            second = _table_second_row(s)
            if second is not None:
                self.pending.update(second)
                self.stage = 2
        elif self.stage == 2:
            m3 = _TBL_GPU3_RE.match(s)
            if m3:
                self.pending["mig_mode"] = na(m3.group("mig"))
                self.stage = 0


def _table_mig_device(s: str) -> dict | None:
    mm = _TBL_MIG_RE.match(s)
    if not mm:
        return None
    return {
        "gpu": int(mm.group("gpu")),
        "gi_id": int(mm.group("gi")),
        "ci_id": int(mm.group("ci")),
        "mig_dev": int(mm.group("dev")),
        "memory_used_mib": int(mm.group("used")),
        "memory_total_mib": int(mm.group("total")),
    }


def _table_process(s: str) -> dict | None:
    mp = _TBL_PROC_RE.match(s)
    if not mp:
        return None
    return {
        "gpu": int(mp.group("gpu")),
        "gi_id": _int(mp.group("gi")),
        "ci_id": _int(mp.group("ci")),
        "pid": int(mp.group("pid")),
        "type": mp.group("type"),
        "name": mp.group("name").strip(),
        "memory_mib": _mib(mp.group("mem")),
    }


@register("nvidia-smi-table", "default nvidia-smi table: driver/CUDA versions, per-GPU summary, processes")
def parse_table(text: str) -> dict:
    kind = "nvidia-smi-table"
    text = require_text(kind, text, "nvidia-smi table with 'NVIDIA-SMI ... Driver Version:' header")
    lines = text.split("\n")
    hdr = next((h for h in (_TBL_HDR_RE.search(ln) for ln in lines) if h), None)
    if hdr is None:
        raise ParseError(
            kind, "expected 'NVIDIA-SMI <ver>  Driver Version: <ver>  CUDA Version: <ver>' header"
        )
    gpu_rows = _GpuRows()
    mig_devices: list[dict] = []
    processes: list[dict] | None = None
    warnings: list[str] = []
    section = "gpus"
    for ln in lines:
        s = ln.rstrip()
        if s.startswith("| MIG devices:"):
            section = "mig"
        elif s.startswith("| Processes:"):
            section = "procs"
            processes = []
        elif s.upper().startswith("WARNING"):
            warnings.append(s)
        elif section == "gpus":
            gpu_rows.line(s)
        else:
            rows, row = ((mig_devices, _table_mig_device(s)) if section == "mig"
                         else (processes, _table_process(s)))
            if row is not None and rows is not None:
                rows.append(row)
    gpus = gpu_rows.gpus
    if not gpus and "No devices were found" not in text:
        raise ParseError(
            kind, "header found but no GPU rows; expected '|   0  <name> ... | <bus id> ...' rows"
        )
    return {
        "smi_version": hdr.group("smi"),
        "driver_version": hdr.group("drv"),
        "cuda_version": na(hdr.group("cuda")),
        "gpus": gpus,
        "mig_devices": mig_devices,
        "processes": processes,
        "warnings": warnings,
    }


# --------------------------------------------------------------------------------------------
# topo -m
# --------------------------------------------------------------------------------------------

_AFFINITY_COLS = {
    "CPU Affinity": "cpu_affinity",
    "NUMA Affinity": "numa_affinity",
    "GPU NUMA ID": "gpu_numa_id",
}
# Cells of a topo matrix: link types (-m), P2P status codes (-p2p), "N/A".
_TOPO_CELL_RE = re.compile(r"^(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC|OK|CNS|GNS|TNS|NS|DR|U|N/A)$")
_TOPO_LABEL_RE = re.compile(r"^(?:GPU\d+|NIC\d+|mlx\d+_\w+|[a-z][a-z0-9]*_?[a-z]*\d+(?:_\d+)?)$")


def _device_kind(name: str) -> str:
    if re.match(r"^GPU\d+$", name):
        return "gpu"
    if re.match(r"^(NIC\d+|mlx\d+_\d+|mlx5_\d+|mlx5_bond_\d+|ib\w*)$", name):
        return "nic"
    return "other"


def _topo_cells(line: str) -> list[str]:
    if "\t" in line:
        return [c.strip() for c in line.split("\t")]
    return line.split()


def _topo_rows(kind: str, lines: list[str]) -> tuple[int, int, list[tuple[str, list[str]]], bool]:
    """(index of the first matrix row, index after the last, [(label, cells after the label)], elided) of
    the first block of rows; an elision line ('...', '[...]') inside the block is skipped and reported."""
    rows: list[tuple[str, list[str]]] = []
    first = -1
    last = -1
    elided = False
    for i, ln in enumerate(lines):
        if rows and ln.strip() in ("...", "[...]", "\u2026"):
            elided = True
            continue
        cells = _topo_cells(ln)
        while cells and cells[0] == "":
            cells = cells[1:]
        is_row = (
            len(cells) >= 2
            and _TOPO_LABEL_RE.match(cells[0]) is not None
            and _TOPO_CELL_RE.match(cells[1]) is not None
        )
        if is_row:
            if first < 0:
                first = i
            last = i
            rows.append((cells[0], cells[1:]))
        elif rows:
            break
    if not rows or not any("X" in cells for _, cells in rows):
        first_line = next((ln.strip() for ln in lines if ln.strip()), "")
        raise ParseError(kind, f"expected a topology matrix (rows 'GPU0  X ...'); got {first_line[:100]!r}")
    return first, last + 1, rows, elided


def _topo_header(lines: list[str], before: int) -> list[str] | None:
    """Column names of the header above the matrix: the nearest line naming GPU0, wrapped continuation
    lines (a narrow terminal) joined; None when no header survived the paste."""
    def columns(line: str) -> list[str]:
        out: list[str] = []
        for c in split_columns(line):
            words = c.split()
            # "GPU0 GPU1" (single-space hand-typed or reflowed headers) are two columns; "CPU Affinity" one
            out += words if words and all(_TOPO_LABEL_RE.match(w) for w in words) else ([c] if c else [])
        return out

    for i in range(before - 1, -1, -1):
        cols = columns(lines[i])
        if "GPU0" in cols:
            for cont in lines[i + 1: before]:
                cols += columns(cont)
            return cols
    return None


def _topo_columns(header: list[str]) -> tuple[list[str], list[str]]:
    """A topo header's device columns, and the affinity columns from the first of them on."""
    head_devices: list[str] = []
    extra: list[str] = []
    for c in header:
        if c in _AFFINITY_COLS or extra:
            extra.append(c)
        elif not c.startswith("$"):
            head_devices.append(c)
    return head_devices, extra


def _parse_matrix(kind: str, text: str) -> dict:
    lines = text.split("\n")
    first, end, rows, elided = _topo_rows(kind, lines)
    header = _topo_header(lines, first) or []
    head_devices, extra = _topo_columns(header)
    labels = [label for label, _ in rows]
    # the matrix is square and its rows come in column order: when the header lost columns (cut by
    # the paste or the terminal), the row labels name them
    header_complete = bool(head_devices) and all(label in head_devices for label in labels)
    devices = head_devices if header_complete else labels
    matrix: dict[str, dict[str, str]] = {}
    affinity: dict[str, dict[str, str | None]] = {}
    cut_rows: list[str] = []
    for label, cells in rows:
        n = 0
        while n < len(cells) and n < len(devices) and _TOPO_CELL_RE.match(cells[n]):
            n += 1
        if n < len(devices):
            if header_complete and n < len(cells):
                raise ParseError(
                    kind, f"row {label!r}: cell {cells[n]!r} is not a link type (expected {len(devices)})"
                )
            cut_rows.append(label)
        matrix[label] = dict(zip(devices[:n], cells[:n], strict=True))
        rest = [c for c in cells[n:] if c]
        aff = {_AFFINITY_COLS.get(c, norm_key(c)): None for c in extra}
        if n == len(devices):
            for col, val in zip(extra, rest, strict=False):
                aff[_AFFINITY_COLS.get(col, norm_key(col))] = na(val)
        affinity[label] = aff
    if header_complete and cut_rows:
        raise ParseError(kind, f"row(s) {', '.join(cut_rows)} have fewer cells than the header's "
                               f"{len(devices)} columns (truncated?)")
    return {"devices": devices, "matrix": matrix, "affinity": affinity, "header_complete": header_complete,
            "cut_rows": cut_rows, "elided": elided, "end": end}


@register(
    "nvidia-smi-topo", "nvidia-smi topo -m: device list, link-type matrix, CPU/NUMA affinity, NIC legend"
)
def parse_topo(text: str) -> dict:
    kind = "nvidia-smi-topo"
    text = require_text(kind, text, "nvidia-smi topo -m matrix with a 'GPU0' header")
    m = _parse_matrix(kind, text)
    legend: dict[str, str] = {}
    in_legend = False
    for ln in text.split("\n"):
        if ln.strip() == "NIC Legend:":
            in_legend = True
            continue
        if in_legend:
            lm = re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", ln)
            if lm:
                legend[lm.group(1)] = lm.group(2)
    dev_list = [
        {"name": d, "kind": _device_kind(d), "nic_name": legend.get(d, d if d.startswith("mlx") else None)}
        for d in m["devices"]
    ]
    return {"devices": dev_list, "matrix": m["matrix"], "affinity": m["affinity"], "nic_legend": legend,
            "header_complete": m["header_complete"], "cut_rows": m["cut_rows"], "elided": m["elided"]}


# nvidia-smi's P2P status legend (topo -p2p), used when a paste lost the printed legend.
_P2P_LEGEND = {
    "X": "Self",
    "OK": "Status Ok",
    "CNS": "Chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "Topology not supported",
    "NS": "Not supported",
    "DR": "Disabled by regkey",
    "U": "Unknown",
}


@register(
    "nvidia-smi-topo-p2p", "nvidia-smi topo -p2p r|w|n|a|p: per GPU pair P2P status (OK/CNS/GNS/TNS/NS/...)"
)
def parse_topo_p2p(text: str) -> dict:
    """See the module docstring (``nvidia-smi-topo-p2p``)."""
    kind = "nvidia-smi-topo-p2p"
    text = require_text(kind, text, "nvidia-smi topo -p2p matrix ('GPU0  X  OK ...')")
    m = _parse_matrix(kind, text)
    lines = text.split("\n")
    legend: dict[str, str] = {}
    for ln in lines[m["end"]:]:
        lm = re.match(r"^\s*([A-Z]{1,4})\s+=\s+(.+?)\s*$", ln)
        if lm:
            legend[lm.group(1)] = lm.group(2)
    codes = {c for row in m["matrix"].values() for c in row.values()}
    if codes - set(_P2P_LEGEND) - {"N/A"}:
        raise ParseError(
            kind, f"not a P2P status matrix: cells {sorted(codes - set(_P2P_LEGEND))} (topo -m output?)"
        )
    meaning = {**_P2P_LEGEND, **legend}
    pairs = [(a, b, c) for a, row in m["matrix"].items() for b, c in row.items() if a != b]
    statuses = [c for _, _, c in pairs]
    return {
        "devices": m["devices"],
        "matrix": {
            a: {b: (None if c == "N/A" else c) for b, c in row.items()} for a, row in m["matrix"].items()
        },
        "legend": legend,
        "meaning": {c: meaning.get(c) for c in sorted(codes - {"N/A"})},
        "pair_count": len(pairs),
        "ok_pairs": statuses.count("OK"),
        "not_ok": sorted({f"{a}-{b}" for a, b, c in pairs if c != "OK"}),
        "all_ok": (all(c == "OK" for c in statuses) if pairs else None),
        "header_complete": m["header_complete"],
        "cut_rows": m["cut_rows"],
        "elided": m["elided"],
    }


# --------------------------------------------------------------------------------------------
# nvlink -s and -L
# --------------------------------------------------------------------------------------------

_GPU_LINE_RE = re.compile(r"^GPU (?P<idx>\d+): (?P<name>.+?) \(UUID: (?P<uuid>[^)]+)\)\s*$")
_LINK_RE = re.compile(r"^\s*Link (?P<link>\d+):\s*(?P<val>.+?)\s*$")


@register("nvidia-smi-nvlink", "nvidia-smi nvlink -s: per-GPU per-link speed (GB/s) and inactive links")
def parse_nvlink(text: str) -> dict:
    kind = "nvidia-smi-nvlink"
    text = require_text(kind, text, "'GPU n: <name> (UUID: ...)' lines followed by 'Link n: <speed> GB/s'")
    gpus: list[dict] = []
    cur = None
    for ln in text.split("\n"):
        m = _GPU_LINE_RE.match(ln)
        if m:
            cur = {
                "index": int(m.group("idx")),
                "name": m.group("name"),
                "uuid": m.group("uuid"),
                "status": "ok",
                "message": None,
                "links": [],
            }
            gpus.append(cur)
            continue
        if cur is None or not ln.strip() or ln.strip() == "[...]":
            continue
        lm = _LINK_RE.match(ln)
        if lm:
            val = lm.group("val")
            if "inactive" in val.lower():
                cur["links"].append({"link": int(lm.group("link")), "gbyte_per_s": None, "inactive": True})
                continue
            sm = re.match(r"^([\d.]+)\s*GB/s$", val)
            if not sm:
                # e.g. 'Link 0: Replay Errors: 0' (nvlink -e) is not this kind
                raise ParseError(kind, f"expected 'Link n: <speed> GB/s' or '<inactive>', got {ln.strip()!r}")
            cur["links"].append(
                {"link": int(lm.group("link")), "gbyte_per_s": float(sm.group(1)), "inactive": False}
            )
            continue
        _gpu_status_line(cur, ln.strip())
    if not gpus:
        raise ParseError(kind, "expected 'GPU n: <name> (UUID: GPU-...)' lines")
    return {"gpus": gpus}


_GPU_BUS_LINE_RE = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_LINK_COUNTER_RE = re.compile(r"^\s*Link (?P<link>\d+):\s*(?P<name>[A-Za-z][^:]*?)\s*:\s*(?P<val>\S.*?)\s*$")
_NUM_VALUE_RE = re.compile(r"^[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?$")


def _counter_value(raw: str) -> int | float | None:
    v = raw.strip()
    if v.isdecimal():  # the common case: what the regular expressions below make an int
        return int(v)
    if is_na(v) or not _NUM_VALUE_RE.match(v):
        return None
    return int(v) if re.match(r"^[-+]?\d+$", v) else float(v)


def _gpu_status_line(cur: dict, msg: str) -> None:
    low = msg.lower()
    if "all links are inactive" in low:
        cur["status"] = "all_links_inactive"
    elif "mig mode" in low:
        cur["status"] = "mig_unsupported"
    elif "does not have or support nvlink" in low or "not supported" in low:
        cur["status"] = "not_supported"
    else:
        cur["status"] = "error"
    cur["message"] = msg


def _gpu_other_line(kind: str, cur: dict, ln: str) -> None:
    """A line under a GPU that is no counter: its status message (links inactive, MIG, not supported);
    a 'Link n:' line of another form (nvlink -s) is an error."""
    s = ln.strip()
    if not s or s in ("[...]", "..."):
        return
    if re.match(r"^\s*Link \d+:", ln):
        hint = " (nvlink -s output)" if re.search(r"GB/s|<inactive>", s) else ""
        raise ParseError(kind, f"expected 'Link n: <Counter>: <value>', got {s!r}{hint}")
    _gpu_status_line(cur, s)


def _link_counter(gpu: dict, links: dict[int, dict], link: int, key: str, value: str) -> None:
    """One 'Link n: <Counter>: <value>' line onto the GPU's entry for link n (made on its first counter)."""
    entry = links.get(link)
    if entry is None:
        entry = links[link] = {"link": link, "counters": {}}
        gpu["links"].append(entry)
    entry["counters"][key] = _counter_value(value)


@register(
    "nvidia-smi-nvlink-errors",
    "nvidia-smi nvlink -e: per-GPU per-link error counters (replay, recovery, CRC...)",
)
def parse_nvlink_errors(text: str) -> dict:
    """See the module docstring (``nvidia-smi-nvlink-errors``)."""
    kind = "nvidia-smi-nvlink-errors"
    text = require_text(
        kind, text, "'GPU n: <name> (UUID: ...)' lines followed by 'Link n: <Counter>: <value>'"
    )
    gpus: list[dict] = []
    names: dict[str, str] = {}
    cur: dict | None = None
    links: dict[int, dict] = {}

    def start(entry: dict) -> dict:
        nonlocal links
        links = {}
        entry.update({"status": "ok", "message": None, "links": [], "totals": {}})
        gpus.append(entry)
        return entry

    keys: dict[str, str] = {}  # a counter's name as printed -> norm_key's (a few names, on every link)
    for ln in text.split("\n"):
        # a counter line first (most lines): neither GPU heading below begins with white space and 'Link n:'
        lm = _LINK_COUNTER_RE.match(ln) if cur is not None else None
        if lm:
            key = keys.get(lm.group("name"))
            if key is None:
                key = keys[lm.group("name")] = norm_key(lm.group("name"))
                names.setdefault(key, lm.group("name"))
            _link_counter(cur, links, int(lm.group("link")), key, lm.group("val"))
            continue
        m = _GPU_LINE_RE.match(ln)
        if m:
            cur = start(
                {
                    "index": int(m.group("idx")),
                    "bus_id": None,
                    "name": m.group("name"),
                    "uuid": m.group("uuid"),
                }
            )
            continue
        m = _GPU_BUS_LINE_RE.match(ln.strip())
        if m:  # GB200-class drivers head each GPU with its bus id
            cur = start({"index": len(gpus), "bus_id": bus_id(m.group("bus")), "name": None, "uuid": None})
            continue
        if cur is not None:
            _gpu_other_line(kind, cur, ln)
    if not gpus:
        raise ParseError(kind, "expected 'GPU n: <name> (UUID: GPU-...)' or 'GPU <bus id>' lines")
    for g in gpus:
        g["totals"] = _nvlink_totals(g["links"])
    return {"gpus": gpus, "counter_names": names}


def _nvlink_totals(links: list[dict]) -> dict:
    """Each counter summed over a GPU's links: only integer counters every link reported; BER ratios are
    not summed (None)."""
    totals = {}
    for k in sorted({k for link in links for k in link["counters"]}):
        vals = [link["counters"].get(k) for link in links]
        ok = all(isinstance(v, int) for v in vals)
        totals[k] = sum(vals) if ok and not k.endswith("ber") else None
    return totals


_MIG_LINE_RE = re.compile(r"^\s+MIG (?P<profile>\S+)\s+Device\s+(?P<dev>\d+): \(UUID: (?P<uuid>[^)]+)\)\s*$")


@register("nvidia-smi-list", "nvidia-smi -L: GPU index, name, UUID and MIG devices")
def parse_list(text: str) -> dict:
    kind = "nvidia-smi-list"
    text = require_text(kind, text, "'GPU n: <name> (UUID: GPU-...)' lines")
    gpus: list[dict] = []
    for ln in clean(text).split("\n"):
        m = _GPU_LINE_RE.match(ln)
        if m:
            gpus.append(
                {
                    "index": int(m.group("idx")),
                    "name": m.group("name"),
                    "uuid": m.group("uuid"),
                    "mig_devices": [],
                }
            )
            continue
        mm = _MIG_LINE_RE.match(ln)
        if mm and gpus:
            gpus[-1]["mig_devices"].append(
                {"profile": mm.group("profile"), "device": int(mm.group("dev")), "uuid": mm.group("uuid")}
            )
    if not gpus:
        raise ParseError(kind, "expected 'GPU n: <name> (UUID: GPU-...)' lines")
    return {"gpus": gpus}
