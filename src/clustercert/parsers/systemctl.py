"""Parser for ``systemctl status UNIT`` output.

Kind ``systemctl-status`` returns::

    {"unit": "nvidia-fabricmanager.service"|None, "description": str|None,
     "load_state": "loaded"|"not-found"|"masked"|"error"|None,
     "unit_file": str|None,                 # path in 'Loaded: loaded (/usr/lib/...; enabled; ...)'
     "unit_file_state": "enabled"|"disabled"|"static"|"masked"|...|None,
     "vendor_preset": str|None,
     "active_state": "active"|"inactive"|"failed"|"activating"|"deactivating"|"reloading"|None,
     "sub_state": "running"|"exited"|"dead"|"failed"|...|None,
     "since": str|None,                     # 'since Tue 2025-03-25 02:10:15 UTC'
     "main_pid": int|None, "main_process": str|None,
     "main_pid_exit": str|None,             # 'code=exited, status=0/SUCCESS' when Main PID has exited
     "running": bool,                       # active_state == "active" and sub_state == "running"
     "job_failed": bool,                    # 'Job for X failed because ...' (systemctl start output)
     "error": str|None,                     # that message, or 'Unit X could not be found.'
     "journal": [str]}                      # trailing journal lines

``systemctl start`` failures (``Job for X failed ...``) and ``Unit X could not be found.`` are parsed
into records with ``job_failed``/``load_state: "not-found"`` and ``error`` set (never healthy-looking);
text with none of the status markers raises ParseError.
"""

from __future__ import annotations

import re

from clustercert.parsers._nvutil import require_text
from clustercert.parsers.base import ParseError, register

_HEAD_RE = re.compile(r"^[●○×*↻\s]*(?P<unit>\S+\.(?:service|socket|target|timer|mount|path|scope|slice|device))(?:\s+-\s+(?P<desc>.*))?$")
_FIELD_RE = re.compile(r"^\s*(?P<k>Loaded|Active|Main PID|TriggeredBy|Docs|Process|Tasks|Memory|CPU|CGroup|Status):\s*(?P<v>.*)$")
_JOB_RE = re.compile(r"^Job for (?P<unit>\S+) failed")
_NOTFOUND_RE = re.compile(r"^Unit (?P<unit>\S+) could not be found")
_JOURNAL_RE = re.compile(r"^(?:[A-Z][a-z]{2}|\S+月)\s+\d+\s+\d\d:\d\d:\d\d\s+\S+\s+\S+")


def _empty() -> dict:
    return {
        "unit": None,
        "description": None,
        "load_state": None,
        "unit_file": None,
        "unit_file_state": None,
        "vendor_preset": None,
        "active_state": None,
        "sub_state": None,
        "since": None,
        "main_pid": None,
        "main_process": None,
        "main_pid_exit": None,
        "running": False,
        "job_failed": False,
        "error": None,
        "journal": [],
    }


@register("systemctl-status", "systemctl status UNIT: load/unit-file state, active/sub state, main PID")
def parse_status(text: str) -> dict:
    kind = "systemctl-status"
    text = require_text(kind, text, "systemctl status output ('● unit - description', 'Loaded:', 'Active:')")
    out = _empty()
    seen = False
    lines = text.split("\n")
    for ln in lines:
        s = ln.rstrip()
        if not s.strip():
            continue
        m = _JOB_RE.match(s.strip())
        if m:
            out["unit"] = m.group("unit")
            out["job_failed"] = True
            out["error"] = s.strip()
            seen = True
            continue
        m = _NOTFOUND_RE.match(s.strip())
        if m:
            out["unit"] = m.group("unit").rstrip(".")
            out["load_state"] = "not-found"
            out["error"] = s.strip()
            seen = True
            continue
        if out["unit"] is None:
            m = _HEAD_RE.match(s)
            if m:
                out["unit"] = m.group("unit")
                out["description"] = (m.group("desc") or "").strip() or None
                seen = True
                continue
        m = _FIELD_RE.match(s)
        if m:
            k, v = m.group("k"), m.group("v").strip()
            if k == "Loaded":
                seen = True
                lm = re.match(r"^(?P<state>[\w-]+)(?:\s+\((?P<inner>[^)]*)\))?", v)
                if lm:
                    out["load_state"] = lm.group("state")
                    parts = [p.strip() for p in (lm.group("inner") or "").split(";")]
                    if parts and parts[0]:
                        out["unit_file"] = parts[0]
                    if len(parts) > 1 and parts[1]:
                        out["unit_file_state"] = parts[1]
                    for p in parts[2:]:
                        pm = re.match(r"^(?:vendor )?preset:\s*(\S+)", p)
                        if pm:
                            out["vendor_preset"] = pm.group(1)
            elif k == "Active":
                seen = True
                am = re.match(r"^(?P<a>[\w-]+)(?:\s+\((?P<sub>[^)]*)\))?(?:\s+since\s+(?P<since>[^;]+))?", v)
                if am:
                    out["active_state"] = am.group("a")
                    out["sub_state"] = am.group("sub")
                    out["since"] = (am.group("since") or "").strip() or None
            elif k == "Main PID":
                pm = re.match(r"^(?P<pid>\d+)\s+\((?P<proc>[^)]*)\)", v)
                if pm:
                    out["main_pid"] = int(pm.group("pid"))
                    proc = pm.group("proc")
                    if proc.startswith("code="):
                        out["main_pid_exit"] = proc
                    else:
                        out["main_process"] = proc
            continue
        if _JOURNAL_RE.match(s):
            out["journal"].append(s)
    if not seen:
        raise ParseError(kind, "expected systemctl status output ('Loaded:'/'Active:' lines) or a 'Job for ... failed' message")
    out["running"] = out["active_state"] == "active" and out["sub_state"] == "running"
    return out
