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

_HEAD_RE = re.compile(
    r"^[●○×*↻\s]*(?P<unit>\S+\.(?:service|socket|target|timer|mount|path|scope|slice|device))(?:\s+-\s+(?P<desc>.*))?$"
)
_FIELD_RE = re.compile(
    r"^\s*(?P<k>Loaded|Active|Main PID|TriggeredBy|Docs|Process|Tasks|Memory|CPU|CGroup|Status):\s*(?P<v>.*)$"
)
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


def _loaded(out: dict, v: str) -> None:
    """'Loaded: loaded (/usr/lib/systemd/system/x.service; enabled; preset: enabled)'."""
    lm = re.match(r"^(?P<state>[\w-]+)(?:\s+\((?P<inner>[^)]*)\))?", v)
    if not lm:
        return
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


def _active(out: dict, v: str) -> None:
    """'Active: active (running) since Tue 2025-03-25 02:10:15 UTC; 1 day ago'."""
    am = re.match(r"^(?P<a>[\w-]+)(?:\s+\((?P<sub>[^)]*)\))?(?:\s+since\s+(?P<since>[^;]+))?", v)
    if am:
        out["active_state"] = am.group("a")
        out["sub_state"] = am.group("sub")
        out["since"] = (am.group("since") or "").strip() or None


def _main_pid(out: dict, v: str) -> None:
    """'Main PID: 1234 (nv-fabricmanage)', or '(code=exited, status=0/SUCCESS)' once it has exited."""
    pm = re.match(r"^(?P<pid>\d+)\s+\((?P<proc>[^)]*)\)", v)
    if pm:
        out["main_pid"] = int(pm.group("pid"))
        proc = pm.group("proc")
        if proc.startswith("code="):
            out["main_pid_exit"] = proc
        else:
            out["main_process"] = proc


def _message_line(out: dict, line: str) -> bool:
    """systemctl's 'Job for X failed ...' and 'Unit X could not be found.' messages."""
    m = _JOB_RE.match(line)
    if m:
        out["unit"] = m.group("unit")
        out["job_failed"] = True
        out["error"] = line
        return True
    m = _NOTFOUND_RE.match(line)
    if m:
        out["unit"] = m.group("unit").rstrip(".")
        out["load_state"] = "not-found"
        out["error"] = line
        return True
    return False


def _head_line(out: dict, s: str) -> bool:
    """The '● unit - description' line (the first one only)."""
    m = _HEAD_RE.match(s) if out["unit"] is None else None
    if m:
        out["unit"] = m.group("unit")
        out["description"] = (m.group("desc") or "").strip() or None
    return m is not None


# the fields read (the others are recognised and skipped); True: the field marks status output
_FIELDS = {"Loaded": (_loaded, True), "Active": (_active, True), "Main PID": (_main_pid, False)}


@register("systemctl-status", "systemctl status UNIT: load/unit-file state, active/sub state, main PID")
def parse_status(text: str) -> dict:
    kind = "systemctl-status"
    text = require_text(kind, text, "systemctl status output ('● unit - description', 'Loaded:', 'Active:')")
    out = _empty()
    seen = False
    for ln in text.split("\n"):
        s = ln.rstrip()
        if not s.strip():
            continue
        if _message_line(out, s.strip()) or _head_line(out, s):
            seen = True
            continue
        m = _FIELD_RE.match(s)
        if m:
            read, marks = _FIELDS.get(m.group("k"), (None, False))
            if read is not None:
                read(out, m.group("v").strip())
            seen = seen or marks
        elif _JOURNAL_RE.match(s):
            out["journal"].append(s)
    if not seen:
        raise ParseError(
            kind,
            "expected systemctl status output ('Loaded:'/'Active:' lines) or a 'Job for ... failed' message",
        )
    out["running"] = out["active_state"] == "active" and out["sub_state"] == "running"
    return out
