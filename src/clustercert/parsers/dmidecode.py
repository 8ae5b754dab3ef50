"""Parser for ``dmidecode`` output (``dmidecode -t system -t baseboard -t chassis``, or the whole table).

Kind ``dmidecode`` returns::

    {"version": "3.4" | None,                 # the '# dmidecode 3.4' line
     "smbios": "3.3.0" | None,                # 'SMBIOS 3.3.0 present.'
     "records": [{"handle": "0x0001", "type": 1, "name": "System Information",
                  "fields": {"Manufacturer": "Supermicro", ...}}],      # as printed
     "system": {"manufacturer", "product_name", "version", "serial_number", "uuid", "sku_number",
                "family"} | None,             # DMI type 1
     "baseboard": {"manufacturer", "product_name", "version", "serial_number", "asset_tag"} | None,  # type 2
     "chassis": {"manufacturer", "type", "version", "serial_number", "asset_tag"} | None}             # type 3

In ``system``, ``baseboard`` and ``chassis`` a value that is a vendor placeholder (``To be filled by O.E.M.``,
``Not Specified``, ``Default string``, ``System Serial Number``, ``0123456789``, ``None``, ``N/A``...) is
None: a placeholder every unfilled board carries identifies no board. ``records`` keeps the text as printed.
The first record of each type counts; a field's continuation lines (a list such as ``Characteristics:``,
indented one level deeper) are not kept. Input without a ``Handle 0x..., DMI type N, M bytes`` record --
dmidecode's own errors (``/dev/mem: Permission denied``, ``No SMBIOS nor DMI entry point found``) --
raises ParseError; ``dmidecode -s KEYWORD`` single values are not this kind.
"""

from __future__ import annotations

import re

from clustercert.parsers._nvutil import require_text
from clustercert.parsers.base import ParseError, register

_HANDLE_RE = re.compile(r"^Handle (0x[0-9A-Fa-f]+), DMI type (\d+), (\d+) bytes\s*$")
_FIELD_RE = re.compile(r"^\t([^\t:][^:]*?):\s?(.*)$")
_PLACEHOLDERS = {
    "to be filled by o.e.m.",
    "to be filled by oem",
    "not specified",
    "default string",
    "system serial number",
    "chassis serial number",
    "base board serial number",
    "system product name",
    "system manufacturer",
    "system version",
    "0123456789",
    "1234567890",
    "none",
    "n/a",
    "not applicable",
    "not available",
    "not present",
    "unknown",
    "oem",
    "o.e.m.",
    "serial number",
    "type1productconfigid",
    "empty",
    "invalid",
}
_KEYS = {
    1: (
        "system",
        {
            "Manufacturer": "manufacturer",
            "Product Name": "product_name",
            "Version": "version",
            "Serial Number": "serial_number",
            "UUID": "uuid",
            "SKU Number": "sku_number",
            "Family": "family",
        },
    ),
    2: (
        "baseboard",
        {
            "Manufacturer": "manufacturer",
            "Product Name": "product_name",
            "Version": "version",
            "Serial Number": "serial_number",
            "Asset Tag": "asset_tag",
        },
    ),
    3: (
        "chassis",
        {
            "Manufacturer": "manufacturer",
            "Type": "type",
            "Version": "version",
            "Serial Number": "serial_number",
            "Asset Tag": "asset_tag",
        },
    ),
}


def _value(text: str | None) -> str | None:
    """The value, or None for a vendor placeholder (and for an all-zero or all-F UUID/serial)."""
    if text is None:
        return None
    v = text.strip()
    if not v or v.lower() in _PLACEHOLDERS or re.fullmatch(r"[0Ff\-\s.]+", v) or re.fullmatch(r"[xX\s]+", v):
        return None
    return v


@register(
    "dmidecode",
    "dmidecode [-t system -t baseboard -t chassis]: SMBIOS records, system/board/chassis identity",
)
def parse_dmidecode(text: str) -> dict:
    kind = "dmidecode"
    text = require_text(kind, text, "dmidecode records ('Handle 0x0001, DMI type 1, 27 bytes')")
    version = smbios = None
    records: list[dict] = []
    cur: dict | None = None
    for line in text.split("\n"):
        s = line.rstrip()
        if m := re.match(r"^# dmidecode (\S+)", s):
            version = m.group(1)
            continue
        if m := re.match(r"^SMBIOS (\S+) present", s):
            smbios = m.group(1)
            continue
        if m := _HANDLE_RE.match(s):
            cur = {"handle": m.group(1), "type": int(m.group(2)), "name": None, "fields": {}}
            records.append(cur)
            continue
        if cur is not None and s:
            _record_line(cur, s)
    if not records:
        first = next((ln.strip() for ln in text.split("\n") if ln.strip() and not ln.startswith("#")), "")
        raise ParseError(kind, f"expected 'Handle 0x..., DMI type N, M bytes' records; got {first[:100]!r}")
    return {"version": version, "smbios": smbios, "records": records, **_summaries(records)}


def _record_line(cur: dict, s: str) -> None:
    """A line inside a record: its name (the first unindented line), or a 'Key: value' field."""
    if cur["name"] is None and not s.startswith("\t"):
        cur["name"] = s.strip()
    elif m := _FIELD_RE.match(s):
        cur["fields"].setdefault(m.group(1).strip(), m.group(2).strip())


def _summaries(records: list[dict]) -> dict:
    """System, baseboard and chassis: the first record of each type, its fields named."""
    out: dict = {"system": None, "baseboard": None, "chassis": None}
    for rec in records:
        if rec["type"] in _KEYS:
            name, keys = _KEYS[rec["type"]]
            if out[name] is None:
                out[name] = {key: _value(rec["fields"].get(label)) for label, key in keys.items()}
    return out
