"""Parsers for kernel-module tools.

``lsmod`` (full output or ``lsmod | grep ...``; a header line and shell-prompt lines are skipped)::

    {"modules": {"nvidia_peermem": {"size_bytes": 16384, "use_count": 0, "used_by": []}, ...},
     "names": ["nvidia_fs", ...]}            # in output order

An empty ``lsmod | grep X`` (only prompt lines or nothing but whitespace after the header) gives
``modules == {}`` - a valid "not loaded" answer - but wholly empty input raises ParseError, and so
does text that contains no module lines and no prompt/header lines.

``modinfo``::

    {"filename": str|None, "name": str|None, "version": str|None, "vermagic": str|None,
     "srcversion": str|None, "license": str|None, "description": str|None,
     "depends": [str], "firmware": [str], "parm": [str], "alias_count": int,
     "fields": {field: str | [str]}}       # every field; repeated ones as lists

Text without a ``filename:`` line raises ParseError (``modinfo: ERROR: Module X not found.`` too -
collectors should treat that ParseError as "module absent").
"""

from __future__ import annotations

import re

from clustercert.parsers._nvutil import require_text
from clustercert.parsers.base import ParseError, register

_LSMOD_RE = re.compile(
    r"^(?P<name>[A-Za-z0-9_]+)\s+(?P<size>\d+)\s+(?P<count>-?\d+)(?:\s+(?P<users>\S+))?\s*$"
)
_PROMPT_RE = re.compile(r"^(\(.*?\)\s*)?\[[^\]]*\][#$]|^\S+@\S+[:~][^ ]*[#$]|^[#$] ")


@register("lsmod", "lsmod (or lsmod | grep): module name, size, use count, users")
def parse_lsmod(text: str) -> dict:
    kind = "lsmod"
    text = require_text(kind, text, "lsmod lines ('<module> <size> <used> [by]')")
    modules: dict[str, dict] = {}
    names: list[str] = []
    recognised = False
    for ln in text.split("\n"):
        s = ln.strip()
        if not s:
            continue
        if s.startswith("Module") and "Size" in s:
            recognised = True
            continue
        if _PROMPT_RE.match(s):
            recognised = True
            continue
        m = _LSMOD_RE.match(s)
        if not m:
            raise ParseError(kind, f"unexpected line, expected '<module> <size> <used> [by]': {s[:80]!r}")
        recognised = True
        users = [u for u in (m.group("users") or "").split(",") if u and u != "-"]
        modules[m.group("name")] = {
            "size_bytes": int(m.group("size")),
            "use_count": int(m.group("count")),
            "used_by": users,
        }
        names.append(m.group("name"))
    if not recognised:
        raise ParseError(kind, "expected lsmod output")
    return {"modules": modules, "names": names}


_MODINFO_RE = re.compile(r"^(?P<k>[a-z_][a-z0-9_]*):\s*(?P<v>.*?)\s*$")
_MULTI = {"alias", "firmware", "parm", "softdep", "import_ns"}


@register("modinfo", "modinfo: filename, version, vermagic, srcversion, depends, parameters")
def parse_modinfo(text: str) -> dict:
    kind = "modinfo"
    text = require_text(kind, text, "modinfo output ('filename: ...' and 'version: ...' lines)")
    fields: dict[str, str | list[str]] = {}
    for ln in text.split("\n"):
        if ln[:1] in (" ", "\t"):  # continuation of a multi-line signature field
            continue
        m = _MODINFO_RE.match(ln.strip())
        if not m:
            continue
        k, v = m.group("k"), m.group("v")
        if k in _MULTI:
            existing = fields.setdefault(k, [])
            if isinstance(existing, list):
                existing.append(v)
        elif k not in fields:
            fields[k] = v
    if "filename" not in fields:
        err = next((ln.strip() for ln in text.split("\n") if "ERROR" in ln), None)
        raise ParseError(kind, err or "expected 'filename:' line from modinfo")

    def one(k):
        v = fields.get(k)
        return v if isinstance(v, str) and v else None

    depends = one("depends")
    return {
        "filename": one("filename"),
        "name": one("name"),
        "version": one("version"),
        "vermagic": one("vermagic"),
        "srcversion": one("srcversion"),
        "license": one("license"),
        "description": one("description"),
        "depends": [d for d in (depends or "").split(",") if d],
        "firmware": list(fields.get("firmware", [])),
        "parm": list(fields.get("parm", [])),
        "alias_count": len(fields.get("alias", [])),
        "fields": fields,
    }
