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


def _skipped(diff: Mapping) -> list[str]:
    """Ansible's "diff skipped" notes: a binary file, or one larger than the module would diff."""
    out = [
        f"diff skipped: {note}\n"
        for key, note in (
            ("dst_binary", "destination file appears to be binary"),
            ("src_binary", "source file appears to be binary"),
        )
        if key in diff
    ]
    out += [f"diff skipped: {which} file size is greater than {diff[key]}\n"
            for key, which in (("dst_larger", "destination"), ("src_larger", "source")) if key in diff]
    return out


def _side_lines(value) -> list[str]:
    """One side of a before/after diff as lines: a mapping as JSON, None as nothing, a last line without
    its newline marked as diff marks it."""
    text = _serialise(value) if isinstance(value, Mapping) else "" if value is None else str(value)
    lines = text.splitlines(True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


def _unified(diff: Mapping) -> list[str]:
    """The before/after unified diff with Ansible's headers and context, and a blank line after it."""
    before_header = f"before: {diff['before_header']}" if "before_header" in diff else "before"
    after_header = f"after: {diff['after_header']}" if "after_header" in diff else "after"
    lines = list(difflib.unified_diff(_side_lines(diff["before"]), _side_lines(diff["after"]),
                                      fromfile=before_header, tofile=after_header,
                                      fromfiledate="", tofiledate="", n=CONTEXT))
    return [*lines, "\n"] if lines else []


def render_diff(difflist) -> str:
    """One task result's diff (a mapping, or a list of them) as Ansible prints it."""
    if not isinstance(difflist, list):
        difflist = [difflist]
    out: list[str] = []
    for diff in difflist:
        if not isinstance(diff, Mapping):
            continue
        out += _skipped(diff)
        if "before" in diff and "after" in diff:
            out += _unified(diff)
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
