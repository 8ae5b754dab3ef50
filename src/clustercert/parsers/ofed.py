"""``ofed_info -s``: which RDMA driver stack is installed, and its version.

Record::

    {"ok": bool,                  # False when the output says ofed_info is missing
     "installed": bool,
     "package": "MLNX_OFED_LINUX" | "OFED-internal" | "DOCA-OFED" | ... | None,
     "flavour": "mlnx" | "mlnx-en" | "doca" | "ofed-internal" | "<package lower-cased>" | None,
     "version": "24.10-1.1.4.0" | None,
     "error": str | None}

Examples: ``MLNX_OFED_LINUX-24.10-1.1.4.0:`` -> flavour ``mlnx``, version ``24.10-1.1.4.0``;
``OFED-internal-5.0-1.0.0.0:`` -> flavour ``ofed-internal``, version ``5.0-1.0.0.0``.
``ofed_info: command not found`` gives ``ok: False, installed: False``; anything else raises ParseError.
"""

from __future__ import annotations

import re

from clustercert.parsers._text import text_lines
from clustercert.parsers.base import ParseError, register

_LINE_RE = re.compile(
    r"^(?P<package>[A-Za-z][A-Za-z_]*(?:-[A-Za-z][A-Za-z_]*)*)-(?P<version>\d[\w.]*(?:-[\w.]+)*):?$"
)
_FLAVOURS = [
    (re.compile(r"^MLNX_OFED", re.I), "mlnx"),
    (re.compile(r"^MLNX_EN", re.I), "mlnx-en"),
    (re.compile(r"^DOCA", re.I), "doca"),
    (re.compile(r"^OFED-internal$", re.I), "ofed-internal"),
]


@register("ofed-info", "ofed_info -s: driver stack flavour (MLNX_OFED / DOCA / OFED) and version")
def parse_ofed_info(text: str) -> dict:
    kind = "ofed-info"
    lines = [
        ln.strip() for ln in text_lines(kind, text, "ofed_info -s output ('MLNX_OFED_LINUX-<version>:')")
    ]
    for ln in lines:
        if not ln:
            continue
        if re.search(r"ofed_info.*(command not found|No such file)", ln):
            return {
                "ok": False,
                "installed": False,
                "package": None,
                "flavour": None,
                "version": None,
                "error": ln,
            }
        m = _LINE_RE.match(ln)
        if not m:
            break  # ofed_info -s prints exactly one line; the first non-empty one must match
        package = m.group("package")
        flavour = next((name for rx, name in _FLAVOURS if rx.search(package)), package.lower())
        return {"ok": True, "installed": True, "package": package, "flavour": flavour,
                "version": m.group("version"), "error": None}
    raise ParseError(kind, "expected '<PACKAGE>-<version>:' (e.g. 'MLNX_OFED_LINUX-24.10-1.1.4.0:')")
