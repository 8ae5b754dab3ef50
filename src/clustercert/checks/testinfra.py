"""Glue for the testinfra modules in validators/: collect through testinfra's ``host``, evaluate with
the same pure checks the CLI uses, and turn findings into pytest outcomes."""

from __future__ import annotations

import shlex
import time

import pytest

from clustercert.checks import Finding, HostContext, run_evaluations
from clustercert.checks import component as load_component
from clustercert.model.evidence import CommandResult

_CACHE: dict[tuple[str, str], list[Finding]] = {}


def run_command(host, cmd: str, timeout: float) -> CommandResult:
    """One command through testinfra, killed after ``timeout`` seconds (coreutils timeout on the node)."""
    wrapped = f"timeout -s KILL {int(max(1, timeout))} /bin/sh -c {shlex.quote(cmd)}"
    t0 = time.monotonic()
    out = host.run(wrapped)
    secs = round(time.monotonic() - t0, 3)
    timed_out = out.rc in (124, 137)
    return CommandResult(None if timed_out else out.rc, out.stdout, out.stderr, timed_out, secs, cmd)


def findings_for(host, ctx: HostContext, component_name: str) -> list[Finding]:
    key = (ctx.name, component_name)
    if key not in _CACHE:
        comp = load_component(component_name)
        ev = {name: run_command(host, cmd, t) for name, (cmd, t) in comp.commands(ctx).items()}
        _CACHE[key] = run_evaluations(ev, ctx, [comp])
    return _CACHE[key]


def assert_check(host, ctx: HostContext, component_name: str, check: str) -> None:
    fs = [f for f in findings_for(host, ctx, component_name) if f.check == check]
    assert fs, f"{check}: the evaluator produced no finding"
    bad = [f for f in fs if f.status in ("fail", "error")]
    if bad:
        lines = [f"{f.status}: {f.subject} expected {f.expected!r}, observed {f.observed!r}" for f in bad]
        pytest.fail(f"{check} on {ctx.name}:\n  " + "\n  ".join(lines), pytrace=False)
    if all(f.status == "skip" for f in fs):
        pytest.skip(f"{check}: {fs[0].observed}")
