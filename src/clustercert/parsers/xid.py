"""Parser for NVIDIA Xid / NVSwitch SXid events in kernel logs.

Kind ``xid`` accepts any kernel-log flavour: ``dmesg``, ``dmesg -T``, ``dmesg --time-format iso``
(``kern  :warn  : 2025-...``), ``journalctl -k``, syslog (``Mon DD HH:MM:SS host kernel: ...``) and
raw ``/dev/kmsg`` records (``6,3973,227996636,-;...``). Lines that are not Xid/SXid reports are
ignored, so a log without any Xid gives an empty ``events`` list (a valid, healthy result). Only
empty input raises ParseError.

Returned shape::

    {"events": [
        {"source": "gpu"|"nvswitch",        # NVRM Xid vs nvidia-nvswitchN SXid
         "xid": int,                        # the Xid / SXid number
         "pci": "0000:9b:00",               # as printed
         "bus_id": "00000000:9B:00.0",      # normalised like nvidia-smi's bus id
         "device": "nvidia-nvswitch1"|None, # NVSwitch device name for SXids
         "pid": int|None, "process": str|None,   # None for pid='<unknown>' / absent
         "message": str,                    # text after the number (and pid/name)
         "caused_by_xid": int|None,         # "... caused by previous Xid 149"
         "timestamp": str|None,             # wall-clock stamp as printed (dmesg -T, iso, syslog)
         "uptime_s": float|None,            # seconds since boot ([ 3742.84] or /dev/kmsg usec)
         "line": int}],                     # 1-based line number in the input
     "xid_counts": {"79": 1, ...},          # events per Xid number (string keys, JSON-friendly)
     "gpus_with_xid": ["00000000:9B:00.0", ...],   # sorted bus ids of GPUs (not NVSwitches) with Xids
     "gpu_uuids": {"00000000:9B:00.0": "GPU-..."},  # from 'NVRM: GPU at PCI:...: GPU-...' lines
     "fallen_off_bus": bool}                # 'GPU has fallen off the bus' seen
"""

from __future__ import annotations

import re

from clustercert.parsers._nvutil import bus_id, require_text
from clustercert.parsers.base import register

_XID_RE = re.compile(
    r"(?P<src>NVRM|nvidia-nvswitch\d*):\s+(?P<kind>S?Xid)\s+\(PCI:(?P<pci>[0-9A-Fa-f:.]+)\):\s*(?P<num>\d+),?\s*(?P<rest>.*)$"
)
_PID_RE = re.compile(r"^pid=(?P<pid>'?<unknown>'?|\d+),\s*")
_NAME_RE = re.compile(r"^name=(?P<name><unknown>|[^,]*),\s*")
_CAUSED_RE = re.compile(r"caused by previous Xid (\d+)")
_UUID_RE = re.compile(r"NVRM: GPU at PCI:(?P<pci>[0-9A-Fa-f:.]+): (?P<uuid>GPU-[0-9a-fA-F-]+)")

_TS_BRACKET_MONO = re.compile(r"^\s*\[\s*(\d+\.\d+)\]")
_TS_BRACKET_WALL = re.compile(r"^\s*\[([A-Z][a-z]{2} [A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d \d{4})\]")
_TS_ISO = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[,.]\d+)?(?:[+-]\d\d:?\d\d|Z)?)")
_TS_SYSLOG = re.compile(r"^(\S+ +\d+ \d\d:\d\d:\d\d)\s")
_TS_KMSG = re.compile(r"^\d+,\d+,(\d+),[^;]*;")


def _timestamps(prefix: str) -> tuple[str | None, float | None]:
    m = _TS_KMSG.match(prefix)
    if m:
        return None, int(m.group(1)) / 1e6
    m = _TS_BRACKET_WALL.match(prefix)
    if m:
        return m.group(1), None
    m = _TS_BRACKET_MONO.match(prefix)
    if m:
        return None, float(m.group(1))
    m = _TS_ISO.search(prefix)
    if m:
        return m.group(1), None
    m = _TS_SYSLOG.match(prefix)
    if m:
        return m.group(1), None
    return None, None


@register("xid", "kernel log (dmesg/journalctl/syslog/kmsg): NVIDIA Xid and NVSwitch SXid events")
def parse_xid(text: str) -> dict:
    kind = "xid"
    text = require_text(kind, text, "kernel log text (dmesg, journalctl -k, syslog or /dev/kmsg)")
    events: list[dict] = []
    uuids: dict[str, str] = {}
    fallen = False
    for lineno, line in enumerate(text.split("\n"), start=1):
        if "fallen off the bus" in line:
            fallen = True
        um = _UUID_RE.search(line)
        if um:
            uuids[bus_id(um.group("pci"))] = um.group("uuid")
            continue
        m = _XID_RE.search(line)
        if not m:
            continue
        rest = m.group("rest").strip()
        pid = None
        process = None
        pm = _PID_RE.match(rest)
        if pm:
            if pm.group("pid").isdigit():
                pid = int(pm.group("pid"))
            rest = rest[pm.end() :]
        nm = _NAME_RE.match(rest)
        if nm:
            if nm.group("name") != "<unknown>":
                process = nm.group("name")
            rest = rest[nm.end() :]
        cm = _CAUSED_RE.search(rest)
        ts, up = _timestamps(line[: m.start()])
        src = m.group("src")
        events.append(
            {
                "source": "nvswitch" if m.group("kind") == "SXid" else "gpu",
                "xid": int(m.group("num")),
                "pci": m.group("pci"),
                "bus_id": bus_id(m.group("pci")),
                "device": src if src != "NVRM" else None,
                "pid": pid,
                "process": process,
                "message": rest.strip(),
                "caused_by_xid": int(cm.group(1)) if cm else None,
                "timestamp": ts,
                "uptime_s": up,
                "line": lineno,
            }
        )
    counts: dict[str, int] = {}
    for e in events:
        counts[str(e["xid"])] = counts.get(str(e["xid"]), 0) + 1
    gpus = sorted({e["bus_id"] for e in events if e["source"] == "gpu"})
    return {
        "events": events,
        "xid_counts": counts,
        "gpus_with_xid": gpus,
        "gpu_uuids": uuids,
        "fallen_off_bus": fallen,
    }
