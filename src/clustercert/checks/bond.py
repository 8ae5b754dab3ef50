"""The IPoIB bond: active-backup over the profile's two ports, both up, primary as configured."""

from __future__ import annotations

from clustercert.checks import Evidence, Finding, HostContext, judge, parsed

CHECK_IDS = ("ib.bond",)


def commands(ctx: HostContext) -> dict[str, tuple[str, float]]:
    b = ctx.profile.ib.bond
    if b is None:
        return {}
    # sysfs is the kernel's own view (and what the lab simulates); every kernel with bonding has it
    cmd = (f"grep -r . /sys/class/net/{b.name}/bonding/ /sys/class/net/*/bonding_slave/ 2>/dev/null; "
           f"test -d /sys/class/net/{b.name}/bonding")
    return {"bonding": (cmd, ctx.timeout_s)}


def evaluate(ev: Evidence, ctx: HostContext) -> list[Finding]:
    b = ctx.profile.ib.bond
    if b is None:
        return [Finding("ib.bond", "skip", "", "", "profile declares no bond (ib.bond is empty)")]
    res = ev.get("bonding")
    if res is not None and not res.timed_out and res.rc == 1 and not res.stdout.strip():
        return [Finding("ib.bond", "fail", b.name, f"{b.mode} over {', '.join(b.slaves)}", "bond does not exist")]
    dump, errs = parsed("bonding-sysfs", res, CHECK_IDS, ctx.timeout_s)
    if dump is None:
        return errs
    rec = (dump.get("bonds") or {}).get(b.name)
    if rec is None:
        return [Finding("ib.bond", "fail", b.name, f"{b.mode} over {', '.join(b.slaves)}", "bond does not exist", res.excerpt())]
    slaves = {s["name"]: s for s in rec.get("slaves", [])}
    problems = []
    if rec.get("mode") != b.mode:
        problems.append(f"mode {rec.get('mode')}")
    missing = [s for s in b.slaves if s not in slaves]
    if missing:
        problems.append("missing slave " + ", ".join(missing))
    extra = sorted(set(slaves) - set(b.slaves))
    if extra:
        problems.append("unexpected slave " + ", ".join(extra))
    down = [s for s in b.slaves if s in slaves and slaves[s].get("mii_status") != "up"]
    if down:
        problems.append("slave down " + ", ".join(down))
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
    expected = f"{b.mode}, slaves {'+'.join(b.slaves)} up, primary {b.primary} active, miimon {b.miimon_ms} ms, fail_over_mac {b.fail_over_mac}"
    observed = "; ".join(problems) if problems else f"{rec.get('mode')}, active {active}, both slaves up"
    return [judge("ib.bond", not problems, b.name, expected, observed, res.excerpt(800))]
