"""Time synchronisation: ``chronyc tracking`` (``-n`` or not).

``chronyc-tracking``::

    {"reference_id": "0A FA 00 01" | "0AFA0001", "reference_name": "10.250.0.1" | None,
     "stratum": int, "system_time_offset_s": float,   # signed: positive = local clock is fast
     "last_offset_s": float | None, "rms_offset_s": float | None,
     "leap_status": "Normal" | "Not synchronised" | "Insert second" | "Delete second",
     "synchronised": bool}                           # leap status is not "Not synchronised" and stratum < 16

Input without ``Reference ID`` and ``Leap status`` lines raises ParseError (e.g. chronyc's
``506 Cannot talk to daemon``).
"""

from __future__ import annotations

import re

from clustercert.parsers.base import ParseError, register

_LINE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z ()]*?)\s*:\s*(?P<value>.*)$")
_SECONDS = re.compile(r"([+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s+seconds(?:\s+(fast|slow))?", re.I)


def _seconds(value: str | None) -> float | None:
    if not value:
        return None
    m = _SECONDS.search(value)
    if not m:
        return None
    v = float(m.group(1))
    return -v if (m.group(2) or "").lower() == "slow" else v


@register("chronyc-tracking", "chronyc tracking: reference, stratum, clock offset, leap status")
def parse_chronyc_tracking(text: str) -> dict:
    kind = "chronyc-tracking"
    fields: dict[str, str] = {}
    for line in text.replace("\r", "").splitlines():
        m = _LINE.match(line.strip())
        if m:
            fields[m.group("key").strip()] = m.group("value").strip()
    if "Reference ID" not in fields or "Leap status" not in fields:
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        raise ParseError(
            kind,
            "expected 'Reference ID' and 'Leap status' lines"
            + (f", got {first[:80]!r}" if first else ", got empty input"),
        )
    ref = fields["Reference ID"]
    m = re.match(r"^(?P<id>[0-9A-Fa-f ]+?)\s*(?:\((?P<name>[^)]*)\))?$", ref)
    try:
        stratum = int(fields.get("Stratum", "16"))
    except ValueError:
        raise ParseError(kind, f"stratum is not a number: {fields.get('Stratum')!r}") from None
    offset = _seconds(fields.get("System time"))
    if offset is None:
        raise ParseError(
            kind,
            f"expected 'System time : N seconds fast|slow of NTP time', got {fields.get('System time')!r}",
        )
    leap = fields["Leap status"]
    return {
        "reference_id": (m.group("id").strip() if m else ref),
        "reference_name": (m.group("name") or None) if m else None,
        "stratum": stratum,
        "system_time_offset_s": offset,
        "last_offset_s": _seconds(fields.get("Last offset")),
        "rms_offset_s": _seconds(fields.get("RMS offset")),
        "leap_status": leap,
        "synchronised": leap.lower() != "not synchronised" and stratum < 16,
    }
