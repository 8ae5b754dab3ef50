"""The IPoIB bond: active-backup over the profile's two ports, both up, primary as configured; and every
802.3ad (LACP) bond on the node: each slave up and in the bond's active aggregator."""

from __future__ import annotations

import dataclasses

from clustercert.checks import Evidence, Finding, HostContext, error, judge, parsed
from clustercert.shell import q

CHECK_IDS = ("ib.bond", "net.bond_lacp")
# attributes every bonding directory has in files that are never empty (slaves, active_slave and primary
# are empty when there is none): a dump without one of them is incomplete (cut short, or unreadable),
# not a bond that is wrong
REQUIRED = {"mode": "mode", "mii_status": "mii_status",
            "mii_polling_interval_ms": "miimon", "fail_over_mac": "fail_over_mac"}


# every bond's /proc/net/bonding file, each after tail's "==> PATH <==" header; no output (exit 0) where the
# node has no bond at all (no bonding module, or no bond in it)
LACP_CMD = "set -- /proc/net/bonding/*; [ -e \"$1\" ] || exit 0; tail -v -n +1 -- \"$@\""


def commands(ctx: HostContext) -> dict[str, tuple[str, float]]:
    out = {"bonding_proc": (LACP_CMD, ctx.timeout_s)}
    b = ctx.profile.ib.bond
    if b is None:
        return out
    # sysfs is the kernel's own view (and what the lab simulates); every kernel with bonding has it.
    # The exit status is test -d's: 0 the bond exists, 1 it does not (deliberate: see evaluate).
    d = f"/sys/class/net/{q(b.name)}/bonding"
    cmd = f"grep -r . {d}/ /sys/class/net/*/bonding_slave/ 2>/dev/null; test -d {d}"
    return {**out, "bonding": (cmd, ctx.timeout_s)}


def evaluate(ev: Evidence, ctx: HostContext) -> list[Finding]:
    return _ib_bond(ev, ctx) + _lacp(ev, ctx)


def lacp_problems(rec: dict) -> tuple[list[str], str | None]:
    """(what is wrong, what could not be read) for one 802.3ad bond's record, from /proc/net/bonding
    (``bonding``) or sysfs (``bonding-sysfs``: its ``ad_aggregator`` is the active aggregator's id).
    A slave outside the active aggregator carries no traffic though the bond looks up."""
    active = rec.get("active_aggregator") or {}
    active_id = active.get("aggregator_id") if active else rec.get("ad_aggregator")
    slaves = rec.get("slaves") or []
    if rec.get("no_active_aggregator"):
        return ["no active aggregator (no LACP partner answered)"], None
    if active_id is None:
        return [], "no active aggregator id read"
    if not slaves:
        return ["no slave"], None
    unread = [s["name"] for s in slaves if s.get("aggregator_id") is None and s.get("mii_status") == "up"]
    if unread:
        return [], f"no aggregator id read for slave {', '.join(unread)}"
    problems = []
    down = [s["name"] for s in slaves if s.get("mii_status") not in (None, "up")]
    if down:
        problems.append("slave down " + ", ".join(down))
    outside = [
        f"{s['name']} in aggregator {s['aggregator_id']}"
        for s in slaves
        if s["name"] not in down and s.get("aggregator_id") is not None and s["aggregator_id"] != active_id
    ]
    if outside:
        problems.append(f"not in the active aggregator {active_id}: " + ", ".join(outside))
    ports = active.get("number_of_ports") if active else None
    inside = sum(1 for s in slaves if s.get("aggregator_id") == active_id)
    if ports is not None and not problems and ports != inside:
        problems.append(
            f"active aggregator {active_id} has {ports} ports, {inside} slaves say they are in it"
        )
    return problems, None


def _lacp(ev: Evidence, ctx: HostContext) -> list[Finding]:
    check = "net.bond_lacp"
    res = ev.get("bonding_proc")
    data, errs = parsed("bonding-files", res, (check,), ctx.timeout_s)
    if data is None:
        return errs
    bonds = {name: rec for name, rec in data["bonds"].items() if rec.get("mode") == "802.3ad"}
    if not bonds:
        others = ", ".join(f"{n} ({r.get('mode')})" for n, r in data["bonds"].items())
        return [Finding(check, "skip", "", "", "no 802.3ad bond on the node or in the profile"
                        + (f"; bonds: {others}" if others else ""))]
    out = []
    for name, rec in sorted(bonds.items()):
        problems, unread = lacp_problems(rec)
        if unread:
            out.append(error(check, f"incomplete /proc/net/bonding/{name}: {unread}", res, name))
            continue
        active = (rec.get("active_aggregator") or {}).get("aggregator_id")
        slaves = rec.get("slaves") or []
        observed = "; ".join(problems) if problems else (
            f"{len(slaves)} slaves up in active aggregator {active}: {', '.join(s['name'] for s in slaves)}")
        out.append(judge(check, not problems, name, "every slave up and in the active aggregator", observed,
                         res.excerpt(800)))
    return out


def _ib_bond_unread(rec: dict, b, slaves: dict[str, dict]) -> str | None:
    """What the bonding dump lacks to judge the bond (a required attribute, a slave's mii_status), or None."""
    missing_attrs = [attr for key, attr in REQUIRED.items() if rec.get(key) is None]
    if missing_attrs:
        return f"incomplete bonding dump: no {', '.join(missing_attrs)} read for {b.name}"
    unread = [s for s in b.slaves if s in slaves and slaves[s].get("mii_status") is None]
    if unread:
        return f"incomplete bonding dump: no mii_status read for slave {', '.join(unread)}"
    return None


def _slave_problems(b, slaves: dict[str, dict]) -> tuple[list[str], list[str]]:
    """The slaves missing, unexpected and down; and those down."""
    problems = []
    missing = [s for s in b.slaves if s not in slaves]
    if missing:
        problems.append("missing slave " + ", ".join(missing))
    extra = sorted(set(slaves) - set(b.slaves))
    if extra:
        problems.append("unexpected slave " + ", ".join(extra))
    down = [s for s in b.slaves if s in slaves and slaves[s].get("mii_status") != "up"]
    if down:
        problems.append("slave down " + ", ".join(down))
    return problems, down


def _ib_bond_problems(rec: dict, b, slaves: dict[str, dict]) -> list[str]:
    """Where the bond differs from the profile's: mode, slaves, primary, miimon, fail_over_mac, the active
    slave."""
    problems = [f"mode {rec.get('mode')}"] if rec.get("mode") != b.mode else []
    slave_problems, down = _slave_problems(b, slaves)
    problems += slave_problems
    if rec.get("primary_slave") != b.primary:
        problems.append(f"primary {rec.get('primary_slave')}")
    if rec.get("mii_polling_interval_ms") != b.miimon_ms:
        problems.append(f"miimon {rec.get('mii_polling_interval_ms')} ms")
    if (rec.get("fail_over_mac") or "none") != b.fail_over_mac:
        problems.append(f"fail_over_mac {rec.get('fail_over_mac') or 'none'}")
    active = rec.get("currently_active_slave")
    if active not in b.slaves:
        problems.append(f"active slave {active}")
    elif b.primary not in down and active != b.primary:
        problems.append(f"active slave {active} while primary {b.primary} is up")
    return problems


def _ib_bond(ev: Evidence, ctx: HostContext) -> list[Finding]:
    b = ctx.profile.ib.bond
    if b is None:
        return [Finding("ib.bond", "skip", "", "", "profile declares no bond (ib.bond is empty)")]
    res = ev.get("bonding")
    # exit status 1 is `test -d`'s answer "no such bond directory" (other bonds' slaves may still be
    # printed): a finding about the node, not a command that failed; any other non-zero status is an error
    if res is not None and not res.timed_out and res.rc == 1:
        return [
            Finding(
                "ib.bond",
                "fail",
                b.name,
                f"{b.mode} over {', '.join(b.slaves)}",
                "bond does not exist",
                res.excerpt(),
            )
        ]
    dump, errs = parsed("bonding-sysfs", res, ("ib.bond",), ctx.timeout_s)
    if dump is None:
        return [dataclasses.replace(f, subject=b.name) for f in errs]
    rec = (dump.get("bonds") or {}).get(b.name)
    if rec is None:  # test -d said it exists, yet grep printed nothing of it
        return [
            error(
                "ib.bond",
                f"incomplete bonding dump: nothing read from /sys/class/net/{b.name}/bonding",
                res,
                b.name,
            )
        ]
    slaves = {s["name"]: s for s in rec.get("slaves", [])}
    unread = _ib_bond_unread(rec, b, slaves)
    if unread:
        return [error("ib.bond", unread, res, b.name)]
    problems = _ib_bond_problems(rec, b, slaves)
    expected = (
        f"{b.mode}, slaves {'+'.join(b.slaves)} up, primary {b.primary} active, miimon {b.miimon_ms} ms, "
        f"fail_over_mac {b.fail_over_mac}"
    )
    observed = "; ".join(problems) if problems else (
        f"{rec.get('mode')}, active {rec.get('currently_active_slave')}, both slaves up")
    return [judge("ib.bond", not problems, b.name, expected, observed, res.excerpt(800))]
