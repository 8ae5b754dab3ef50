"""Mounts and block devices: ``findmnt -J -l -b -o TARGET,SOURCE,FSTYPE,OPTIONS,AVAIL`` (``findmnt-json``) and
``lsblk -J -d -b -o NAME,TYPE,TRAN,SIZE,MODEL`` (``lsblk-json``).

``findmnt-json``::

    {"mounts": [{"target": "/shared", "source": "/dev/vda[/srv/shared]", "fstype": "ext4",
                 "options": ["rw", "relatime"], "avail_bytes": int | None}]}

``lsblk-json``::

    {"devices": [{"name": "nvme0n1", "type": "disk", "transport": "nvme" | None, "size_bytes": int | None,
                  "model": str | None, "nvme": bool}]}    # nvme: the transport says so, or the name does

Sizes come as numbers (-b); older util-linux prints them as strings, which are read as numbers too. Text that
is not such a JSON document raises ParseError.
"""

from __future__ import annotations

import json

from clustercert.parsers.base import ParseError, register


def _doc(kind: str, text: str, key: str) -> list:
    if not isinstance(text, str) or not text.strip():
        raise ParseError(kind, "empty input")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(kind, f"not JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
        raise ParseError(kind, f"no {key!r} list in the document")
    return doc[key]


def _int(value) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@register(
    "findmnt-json",
    "findmnt -J -l -b -o TARGET,SOURCE,FSTYPE,OPTIONS,AVAIL: every mount, its type, options, free bytes",
)
def parse_findmnt(text: str) -> dict:
    out = []
    for fs in _doc("findmnt-json", text, "filesystems"):
        if not isinstance(fs, dict) or not fs.get("target"):
            continue
        out.append({"target": str(fs["target"]), "source": fs.get("source"), "fstype": fs.get("fstype"),
                    "options": [o for o in str(fs.get("options") or "").split(",") if o],
                    "avail_bytes": _int(fs.get("avail"))})
    return {"mounts": out}


@register("lsblk-json", "lsblk -J -d -b -o NAME,TYPE,TRAN,SIZE,MODEL: the block devices, NVMe ones marked")
def parse_lsblk(text: str) -> dict:
    out = []
    for d in _doc("lsblk-json", text, "blockdevices"):
        if not isinstance(d, dict) or not d.get("name"):
            continue
        name, tran = str(d["name"]), d.get("tran")
        out.append({"name": name, "type": d.get("type"), "transport": tran, "size_bytes": _int(d.get("size")),
                    "model": (d.get("model") or "").strip() or None,
                    "nvme": tran == "nvme" or name.startswith("nvme")})
    return {"devices": out}
