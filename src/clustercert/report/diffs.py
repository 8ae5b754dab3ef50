"""``--diff``: the differences a run's changed tasks reported (ansible-runner's ``event_data.res.diff``),
printed as ansible-playbook's default callback prints them (CallbackBase._get_diff, without colour):
``--- before: PATH`` / ``+++ after: PATH`` unified diffs with Ansible's 3 lines of context, a structure
(a mapping) serialised as JSON, the "diff skipped" notes, and a module's ``prepared`` text."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping

CONTEXT = 3  # ansible.cfg's [diff] context default


def _serialise(value) -> str:
    return json.dumps(value, sort_keys=True, indent=4, separators=(",", ": "), default=str) + "\n"


def render_diff(difflist) -> str:
    """One task result's diff (a mapping, or a list of them) as Ansible prints it."""
    if not isinstance(difflist, list):
        difflist = [difflist]
    out: list[str] = []
    for diff in difflist:
        if not isinstance(diff, Mapping):
            continue
        for key, note in (("dst_binary", "destination file appears to be binary"),
                          ("src_binary", "source file appears to be binary")):
            if key in diff:
                out.append(f"diff skipped: {note}\n")
        for key, which in (("dst_larger", "destination"), ("src_larger", "source")):
            if key in diff:
                out.append(f"diff skipped: {which} file size is greater than {diff[key]}\n")
        if "before" in diff and "after" in diff:
            sides = {}
            for x in ("before", "after"):
                v = diff[x]
                sides[x] = _serialise(v) if isinstance(v, Mapping) else "" if v is None else str(v)
            before_header = f"before: {diff['before_header']}" if "before_header" in diff else "before"
            after_header = f"after: {diff['after_header']}" if "after_header" in diff else "after"
            before, after = sides["before"].splitlines(True), sides["after"].splitlines(True)
            if before and not before[-1].endswith("\n"):
                before[-1] += "\n\\ No newline at end of file\n"
            if after and not after[-1].endswith("\n"):
                after[-1] += "\n\\ No newline at end of file\n"
            lines = list(difflib.unified_diff(before, after, fromfile=before_header, tofile=after_header,
                                              fromfiledate="", tofiledate="", n=CONTEXT))
            out.extend(lines)
            if lines:
                out.append("\n")
        if "prepared" in diff:
            out.append(str(diff["prepared"]))
    return "".join(out)


def render_changes(changes: list[dict], check: bool) -> str:
    """Every change that carries a diff, under its task and host as ansible-playbook shows them
    (``TASK [role : name]``, the diff, ``changed: [host]``); "" when none does."""
    blocks = []
    for c in changes:
        text = render_diff(c.get("diff")) if c.get("diff") else ""
        if not text:
            continue
        task = f"{c['role']} : {c['task']}" if c.get("role") else c["task"]
        blocks.append(f"TASK [{task}]\n{text}changed: [{c['host']}]\n")
    return "\n".join(blocks)
