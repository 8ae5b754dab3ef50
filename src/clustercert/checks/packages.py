"""Pinned packages: each package the bootstrap pinned is installed at its version and held.

The bootstrap records what it pinned on the node (/etc/clustercert/pinned-packages, NAME=VERSION-GLOB
per line, the exact specs it installed), so the check needs no distribution knowledge of its own.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from clustercert.checks import Evidence, Finding, HostContext, error, judge, why_not

CHECK_IDS = ("packages.pinned",)
RECORD = "/etc/clustercert/pinned-packages"


def commands(ctx: HostContext) -> dict[str, tuple[str, float]]:
    t = ctx.timeout_s
    return {
        "pins": (f"cat {RECORD}", t),
        "pkg_versions": (
            "dpkg-query -W -f='${Package}\\t${Version}\\t${db:Status-Abbrev}\\n' 2>/dev/null "
            "|| rpm -qa --qf '%{NAME}\\t%{VERSION}-%{RELEASE}\\tii\\n'",
            t,
        ),
        "pkg_holds": (
            "apt-mark showhold 2>/dev/null || sed -n 's/^\\([^#].*\\)-[^-]*:.*/\\1/p' /etc/dnf/plugins/"
            "versionlock.list",
            t,
        ),
    }


def parse_record(text: str) -> dict[str, str]:
    pins = {}
    for line in text.splitlines():
        s = line.strip()
        if s and not s.startswith("#") and "=" in s:
            name, glob = s.split("=", 1)
            pins[name.strip()] = glob.strip()
    return pins


def evaluate(ev: Evidence, ctx: HostContext) -> list[Finding]:
    rec = ev.get("pins")
    if rec is not None and not rec.timed_out and rec.rc not in (0, None) and "No such file" in rec.stderr:
        return [Finding("packages.pinned", "fail", RECORD, "packages pinned by clustercert bootstrap",
                        "no pin record: the node was not bootstrapped")]
    reason = (
        why_not(rec, ctx.timeout_s)
        or why_not(ev.get("pkg_versions"), ctx.timeout_s)
        or why_not(ev.get("pkg_holds"), ctx.timeout_s)
    )
    if reason:
        return [error("packages.pinned", reason)]
    pins = parse_record(rec.stdout)
    if not pins:
        return [
            Finding(
                "packages.pinned",
                "error",
                RECORD,
                "pinned packages",
                "the pin record lists no package",
                rec.excerpt(),
            )
        ]
    installed = {}
    for line in ev["pkg_versions"].stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[2].strip().startswith(("ii", "hi")):
            installed[parts[0]] = parts[1]
    held = {h.strip() for h in ev["pkg_holds"].stdout.splitlines() if h.strip()}
    out = []
    for pkg, glob in sorted(pins.items()):
        got = installed.get(pkg)
        good = got is not None and fnmatchcase(got, glob) and pkg in held
        obs = (got or "not installed") + ("" if pkg in held or not got else ", not held")
        out.append(judge("packages.pinned", good, pkg, f"{glob}, held", obs))
    return out
