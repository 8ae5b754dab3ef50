"""Filters the roles use to skip a package transaction that has nothing to do.

An apt task whose packages are all installed at their pinned versions still costs a python-apt cache
load per host (2-3 s on four hosts, most of an idempotent bootstrap). Each role reads what dpkg has with
one read-only ``dpkg-query`` (``specs | clustercert_dpkg_query_argv``) and runs its apt task only where
``specs | clustercert_unmet_packages(dpkg_query_stdout)`` is not empty: apt runs, and reports, exactly
when a package is missing, at another version, or not cleanly installed. Anything this filter cannot
read (another operator than ``=``, an unreadable line) counts as unmet, so apt decides.
"""

from __future__ import annotations

import fnmatch
import re

DPKG_QUERY_FORMAT = r"${Package}\t${Version}\t${db:Status-Abbrev}\n"  # dpkg-query expands \t and \n
_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]*(:[a-z0-9-]+)?$")


def _installed(dpkg_query_stdout: str) -> dict[str, list[str]]:
    """package -> the versions dpkg lists as installed without error (status ``?i `` of db:Status-Abbrev:
    second letter ``i`` installed, third blank: no reinstall-required flag)."""
    out: dict[str, list[str]] = {}
    for line in (dpkg_query_stdout or "").splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        name, version, status = parts
        if len(status) >= 2 and status[1] == "i" and status[2:].strip() == "":
            out.setdefault(name, []).append(version)
    return out


def package_name(spec: str) -> str:
    """The package name of an apt spec (``name``, ``name=version``, ``name=version-*``, ``name:arch``)."""
    return str(spec).split("=", 1)[0].split(":", 1)[0]


def unmet_packages(specs, dpkg_query_stdout: str) -> list[str]:
    """The specs dpkg does not already satisfy: the package is not installed (cleanly), or no installed
    version matches the spec's version (a glob, as apt reads ``name=1.2*``)."""
    have = _installed(dpkg_query_stdout)
    unmet = []
    for spec in specs or []:
        spec = str(spec)
        name, sep, version = spec.partition("=")
        if not _NAME.match(name) or any(c in name for c in "<>!~"):
            unmet.append(spec)  # not a plain name: apt decides
            continue
        versions = have.get(name.split(":", 1)[0], [])
        if not versions or (sep and not any(fnmatch.fnmatchcase(v, version) for v in versions)):
            unmet.append(spec)
    return unmet


def unheld_packages(names, dpkg_query_stdout: str) -> list[str]:
    """The packages dpkg does not list on hold (desired state ``h``): the hold task loops over these only."""
    held = set()
    for line in (dpkg_query_stdout or "").splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[2][:1] == "h":
            held.add(parts[0])
    return [str(n) for n in names or [] if package_name(n) not in held]


def dpkg_query_argv(specs) -> list[str]:
    """The read-only dpkg-query that lists the specs' packages (installed or not) for the filters above."""
    return ["dpkg-query", "-W", "-f", DPKG_QUERY_FORMAT, *dict.fromkeys(package_name(s) for s in specs or [])]


def systemd_units(systemctl_show_stdout: str) -> dict[str, dict[str, str]]:
    """``systemctl show -p Id,LoadState,ActiveState,UnitFileState UNIT...`` read into Id -> properties
    (one block per unit, blocks separated by a blank line)."""
    units: dict[str, dict[str, str]] = {}
    for block in (systemctl_show_stdout or "").split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if props.get("Id"):
            units[props["Id"]] = props
    return units


class FilterModule:
    def filters(self):
        return {
            "clustercert_unmet_packages": unmet_packages,
            "clustercert_unheld_packages": unheld_packages,
            "clustercert_dpkg_query_argv": dpkg_query_argv,
            "clustercert_systemd_units": systemd_units,
        }
