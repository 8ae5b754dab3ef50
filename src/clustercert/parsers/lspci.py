"""Parser for ``lspci`` output (plain, ``-D``, ``-nn``, ``-vv``/``-vvv``, several devices).

Kind ``lspci`` returns::

    {"devices": [
        {"address": "0000:17:03.0",           # as printed (domain present with -D)
         "bus_id": "00000000:17:03.0",        # normalised like nvidia-smi's bus id
         "class": "PCI bridge", "class_id": "0604"|None,     # class_id with -nn
         "description": "Broadcom / LSI PEX890xx PCIe Gen 5 Switch",
         "vendor_device": "10de:2330"|None,   # with -nn
         "rev": "b0"|None,
         "driver": "pcieport"|None,           # 'Kernel driver in use' (-k / -v)
         "numa_node": int|None,
         "link": None | {                     # from the Express capability (-vv)
             "cap_speed_gt_s": 32.0, "cap_width": 16,
             "sta_speed_gt_s": 16.0, "sta_width": 16,
             "speed_downgraded": bool, "width_downgraded": bool,
             "downgraded": bool}}]}           # either of the two

``*_downgraded`` comes from lspci's own ``(downgraded)``/``(ok)`` annotation on LnkSta when present
(pciutils >= 3.6); for older output without annotations it is computed as LnkSta < LnkCap.
Text with no device header line (``BB:DD.F <class>: <description>``) raises ParseError.
"""

from __future__ import annotations

import re

from clustercert.parsers._nvutil import bus_id, require_text
from clustercert.parsers.base import ParseError, register

_DEV_RE = re.compile(
    r"^(?P<addr>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+"
    r"(?P<class>[^:\[]+?)(?:\s+\[(?P<class_id>[0-9a-fA-F]{4})\])?:\s+(?P<desc>.*)$"
)
_VENDEV_RE = re.compile(r"\s\[(?P<vd>[0-9a-fA-F]{4}:[0-9a-fA-F]{4})\]")
_REV_RE = re.compile(r"\s\(rev (?P<rev>[0-9a-fA-F]+)\)")
_PROGIF_RE = re.compile(r"\s\(prog-if [^)]*\)")
_LNKCAP_RE = re.compile(
    r"LnkCap:\s.*?Speed\s+(?P<speed>[\d.]+)GT/s(?:\s*\([^)]*\))?,\s*Width\s+x(?P<width>\d+)"
)
_LNKSTA_RE = re.compile(
    r"LnkSta:\s.*?Speed\s+(?P<speed>[\d.]+)GT/s(?:\s*\((?P<sflag>[^)]*)\))?,"
    r"\s*Width\s+x(?P<width>\d+)(?:\s*\((?P<wflag>[^)]*)\))?"
)


def _flag(text: str | None, sta, cap) -> bool:
    if text:
        return "downgraded" in text.lower()
    if sta is None or cap is None:
        return False
    return sta < cap


def _device(m: re.Match) -> dict:
    """A device from its 'BB:DD.F <class>: <description>' line; its indented lines fill the rest."""
    desc = m.group("desc")
    vd = _VENDEV_RE.search(desc)
    rev = _REV_RE.search(desc)
    return {
        "address": m.group("addr"),
        "bus_id": bus_id(m.group("addr")),
        "class": m.group("class").strip(),
        "class_id": m.group("class_id"),
        "description": _PROGIF_RE.sub("", _REV_RE.sub("", _VENDEV_RE.sub("", desc))).strip(),
        "vendor_device": vd.group("vd") if vd else None,
        "rev": rev.group("rev") if rev else None,
        "driver": None,
        "numa_node": None,
        "link": None,
        "_link": {},
    }


def _detail(cur: dict, s: str) -> None:
    """An indented line of a device: its driver, NUMA node, or PCIe LnkCap / LnkSta."""
    link = cur["_link"]
    if s.startswith("Kernel driver in use:"):
        cur["driver"] = s.split(":", 1)[1].strip()
    elif s.startswith("NUMA node:"):
        v = s.split(":", 1)[1].strip()
        cur["numa_node"] = int(v) if v.lstrip("-").isdigit() else None
    elif s.startswith("LnkCap:") and (m := _LNKCAP_RE.search(s)):
        link["cap_speed_gt_s"] = float(m.group("speed"))
        link["cap_width"] = int(m.group("width"))
    elif s.startswith("LnkSta:") and (m := _LNKSTA_RE.search(s)):
        link["sta_speed_gt_s"] = float(m.group("speed"))
        link["sta_width"] = int(m.group("width"))
        link["_sflag"] = m.group("sflag")
        link["_wflag"] = m.group("wflag")


def _link_record(lk: dict) -> dict | None:
    """The device's PCIe link (capability, status, downgrades); None when lspci printed neither LnkCap nor
    LnkSta."""
    if "sta_speed_gt_s" not in lk and "cap_speed_gt_s" not in lk:
        return None
    cs, cw = lk.get("cap_speed_gt_s"), lk.get("cap_width")
    ss, sw = lk.get("sta_speed_gt_s"), lk.get("sta_width")
    sd = _flag(lk.get("_sflag"), ss, cs)
    wd = _flag(lk.get("_wflag"), sw, cw)
    return {
        "cap_speed_gt_s": cs,
        "cap_width": cw,
        "sta_speed_gt_s": ss,
        "sta_width": sw,
        "speed_downgraded": sd,
        "width_downgraded": wd,
        "downgraded": sd or wd,
    }


@register(
    "lspci", "lspci [-D] [-nn] [-vv]: devices, class, ids, PCIe LnkCap/LnkSta speed & width, downgrades"
)
def parse_lspci(text: str) -> dict:
    kind = "lspci"
    text = require_text(kind, text, "lspci output ('BB:DD.F <class>: <description>' lines)")
    devices: list[dict] = []
    cur: dict | None = None
    for line in text.split("\n"):
        if not line.strip():
            continue
        if not line.startswith((" ", "\t")):
            m = _DEV_RE.match(line.strip())
            if m:
                cur = _device(m)
                devices.append(cur)
        elif cur is not None:
            _detail(cur, line.strip())
    if not devices:
        first = next((ln.strip() for ln in text.split("\n") if ln.strip()), "")
        raise ParseError(
            kind, f"expected lspci device lines ('BB:DD.F <class>: <description>'); got {first[:80]!r}"
        )
    for d in devices:
        link = _link_record(d.pop("_link"))
        if link is not None:
            d["link"] = link
    return {"devices": devices}
