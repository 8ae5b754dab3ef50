"""Private helpers shared by the NVIDIA-stack parsers (nvidia_smi, xid, nvbandwidth, dcgmi, lspci,
container, kmod, systemctl). Pure functions, no I/O."""

from __future__ import annotations

import re

from clustercert.parsers.base import ParseError

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

# Values nvidia-smi (and friends) print when a field has no value.
_NA_VALUES = {
    "n/a",
    "[n/a]",
    "na",
    "none",
    "not supported",
    "[not supported]",
    "unknown",
    "[unknown error]",
    "unknown error",
    "(null)",
    "<<<null>>>",
    "",
}


def clean(text: str) -> str:
    """Normalise line endings (CRLF/CR -> LF) and strip ANSI escape sequences."""
    if text is None:
        return ""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _ANSI_RE.sub("", text)


def require_text(kind: str, text: str, expected: str) -> str:
    """Return the cleaned text or raise ParseError when it is empty."""
    if not isinstance(text, str):
        raise ParseError(kind, f"expected text, got {type(text).__name__}")
    cleaned = clean(text)
    if not cleaned.strip():
        raise ParseError(kind, f"empty input; expected {expected}")
    return cleaned


def is_na(value: str | None) -> bool:
    if value is None:
        return True
    v = value.strip().lower()
    if v in _NA_VALUES:
        return True
    # "[Requested functionality has been deprecated]", "[GPU requires reset]", ...
    return v.startswith("[") and v.endswith("]")


def na(value: str | None) -> str | None:
    """The stripped value, or None for N/A-like placeholders."""
    if is_na(value):
        return None
    return value.strip()


_NUM_RE = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*([A-Za-z%/()]*)\s*$")


def number(value: str | None, unit: str | None = None) -> int | float | None:
    """Parse '81559 MiB', '69.85 W', '41 C', '16x', '0 %' into a number.

    Returns None for N/A-like values. If ``unit`` is given, the value must carry that unit or none.
    Non-numeric values (e.g. 'Requested functionality has been deprecated') give None.
    """
    v = na(value)
    if v is None:
        return None
    m = _NUM_RE.match(v)
    if not m:
        return None
    num, suffix = m.group(1), m.group(2)
    if unit is not None and suffix and suffix.lower() != unit.lower():
        return None
    if "." in num:
        return float(num)
    return int(num)


def yes_no(value: str | None) -> bool | None:
    v = na(value)
    if v is None:
        return None
    low = v.lower()
    if low in ("yes", "true", "enabled", "on", "active"):
        return True
    if low in ("no", "false", "disabled", "off", "not active", "inactive"):
        return False
    return None


_BUS_RE = re.compile(
    r"^(?:(?P<dom>[0-9A-Fa-f]{1,8}):)?(?P<bus>[0-9A-Fa-f]{1,2}):(?P<dev>[0-9A-Fa-f]{1,"
    r"2})(?:\.(?P<fn>[0-7]))?$"
)


def bus_id(value: str | None) -> str | None:
    """Normalise a PCI address to nvidia-smi's form '00000000:18:00.0' (8-hex-digit domain, upper case).

    Accepts '0000:18:00.0', '18:00.0', '00000000:18:00.0' and the kernel's Xid form '0000:18:00'
    (function defaults to 0). Returns None for N/A; the input unchanged if it is not an address.
    """
    v = na(value)
    if v is None:
        return None
    m = _BUS_RE.match(v.strip())
    if not m:
        return v
    dom = int(m.group("dom") or "0", 16)
    bus = int(m.group("bus"), 16)
    dev = int(m.group("dev"), 16)
    fn = int(m.group("fn") or "0")
    return f"{dom:08X}:{bus:02X}:{dev:02X}.{fn}"


def norm_key(key: str) -> str:
    """'SRAM Uncorrectable SEC-DED' -> 'sram_uncorrectable_secded', 'GPU T.Limit Temp' ->
    'gpu_tlimit_temp'."""
    k = key.strip().lower().replace("-", "").replace(".", "")
    k = re.sub(r"[^a-z0-9]+", "_", k)
    return k.strip("_")


def split_columns(line: str) -> list[str]:
    """Split a table row on tabs if any, else on runs of 2+ spaces."""
    if "\t" in line:
        return [c.strip() for c in line.split("\t")]
    return [c.strip() for c in re.split(r"\s{2,}", line.strip())]
