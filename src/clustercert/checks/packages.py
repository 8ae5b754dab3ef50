"""Pinned packages: each package of the versions manifest installed at its version and held."""

from __future__ import annotations

import shlex

from clustercert.checks import Evidence, Finding, HostContext, error, judge, why_not

CHECK_IDS = ("packages.pinned",)


def commands(ctx: HostContext) -> dict[str, tuple[str, float]]:
    if not ctx.pins:
        return {}
    names = " ".join(shlex.quote(p) for p in sorted(ctx.pins))
    return {
        "pkg_versions": (f"dpkg-query -W -f='${{Package}}\\t${{Version}}\\t${{db:Status-Abbrev}}\\n' {names} 2>/dev/null; true", ctx.timeout_s),
        "pkg_holds": ("apt-mark showhold 2>/dev/null || dnf -q versionlock list 2>/dev/null", ctx.timeout_s),
    }


def evaluate(ev: Evidence, ctx: HostContext) -> list[Finding]:
    if not ctx.pins:
        return [Finding("packages.pinned", "error", "", "a versions manifest", "no pinned packages known for this host")]
    res, holds = ev.get("pkg_versions"), ev.get("pkg_holds")
    reason = why_not(res, ctx.timeout_s) or why_not(holds, ctx.timeout_s)
    if reason:
        return [error("packages.pinned", reason, res)]
    installed = {}
    for line in res.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[2].strip().startswith("ii"):
            installed[parts[0]] = parts[1]
    held = {h.strip() for h in holds.stdout.splitlines() if h.strip()}
    out = []
    for pkg, want in sorted(ctx.pins.items()):
        got = installed.get(pkg)
        good = got == want and pkg in held
        obs = f"{got or 'not installed'}" + ("" if pkg in held or not got else ", not held")
        out.append(judge("packages.pinned", good, pkg, f"{want}, held", obs))
    return out
