"""Host tuning the anchors leave out: memlock, sysctls, hugepages, CPU governor."""

from __future__ import annotations

from clustercert.checks import Evidence, Finding, HostContext, error, judge, why_not
from clustercert.shell import join

CHECK_IDS = ("tuning.memlock", "tuning.sysctl", "tuning.hugepages", "tuning.governor")


def unreadable_key(key: str) -> str | None:
    """Why ``key`` is never handed to sysctl, or None. Quoting keeps a key one word, but sysctl itself
    WRITES an argument that holds '=' (``sysctl kernel.x=1``, even without -w), and '..' (outside
    /proc/sys) or a control character (a newline) is no sysctl name: such a key is not read, and its
    finding is an error."""
    if not key or "=" in key or ".." in key or not key.isprintable():
        return f"not a sysctl key: {key!r} (not read on the node)"
    return None


def commands(ctx: HostContext) -> dict[str, tuple[str, float]]:
    t = ctx.timeout_s
    cmds = {
        # a fresh PAM login of an ordinary user (what a job gets: pam_limits applies limits.d; the SSH
        # session we run in may be a reused connection with older limits); services get systemd's default
        "memlock": ("{ runuser -l nobody -s /bin/sh -c 'ulimit -l' || su -l nobody -s /bin/sh -c 'ulimit -l';"
                    " } 2>/dev/null; systemctl show -p DefaultLimitMEMLOCK", t),
        "hugepages": ("cat /proc/sys/vm/nr_hugepages", t),
        "governor": ("cat /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor", t),
    }
    keys = sorted(k for k in ctx.profile.tuning.sysctl if unreadable_key(k) is None)
    if keys:
        # `--`: a key with a leading '-' is a key, never an option; each key one quoted word
        cmds["sysctl"] = ("sysctl -- " + join(keys), t)
    return cmds


def evaluate(ev: Evidence, ctx: HostContext) -> list[Finding]:
    tun = ctx.profile.tuning
    out: list[Finding] = [_memlock(ev.get("memlock"), ctx)]
    out += _sysctl(ev.get("sysctl"), ctx)
    res = ev.get("hugepages")
    reason = why_not(res, ctx.timeout_s)
    n = res.stdout.strip() if res is not None else ""
    if reason:
        out.append(error("tuning.hugepages", reason, res))
    elif not n.isdigit():
        out.append(
            error("tuning.hugepages", f"unreadable vm.nr_hugepages: {n[:80]!r}", res, "vm.nr_hugepages")
        )
    else:
        out.append(
            judge(
                "tuning.hugepages",
                int(n) >= tun.hugepages_2m,
                "vm.nr_hugepages",
                f">= {tun.hugepages_2m}",
                n,
                value=int(n),
                unit="pages",
            )
        )
    if tun.governor == "none":
        out.append(
            Finding(
                "tuning.governor",
                "skip",
                "",
                "",
                "profile does not manage the CPU governor (tuning.governor: none)",
            )
        )
    else:
        res = ev.get("governor")
        reason = why_not(res, ctx.timeout_s)
        govs = sorted({x.strip() for x in res.stdout.splitlines() if x.strip()}) if res is not None else []
        if reason:
            out.append(error("tuning.governor", f"cpufreq not readable ({reason})", res))
        elif not govs:
            out.append(
                error("tuning.governor", "cpufreq not readable (no scaling_governor printed)", res, "cpufreq")
            )
        else:
            out.append(
                judge("tuning.governor", govs == [tun.governor], "cpufreq", tun.governor, ", ".join(govs))
            )
    return out


def _memlock(res, ctx: HostContext) -> Finding:
    tun = ctx.profile.tuning
    want = "unlimited" if tun.memlock == "unlimited" else str(tun.memlock)
    want_sd = "infinity" if tun.memlock == "unlimited" else str(int(tun.memlock) * 1024)
    expected = f"login {want}, systemd DefaultLimitMEMLOCK={want_sd}"
    # the exit status is systemctl's; runuser/su print nothing when both fail (2>/dev/null): that shows as
    # a missing login line below
    reason = why_not(res, ctx.timeout_s)
    if reason:
        return error("tuning.memlock", reason, res)
    lines = [x.strip() for x in res.stdout.splitlines() if x.strip()]
    login = next((x for x in lines if not x.startswith("DefaultLimitMEMLOCK=")), "")
    default = next((x.split("=", 1)[1] for x in lines if x.startswith("DefaultLimitMEMLOCK=")), "")
    if not (login == "unlimited" or login.isdigit()):
        why = (
            f"unreadable login limit {login[:80]!r}"
            if login
            else "no login limit printed (runuser and su both failed)"
        )
        return error("tuning.memlock", f"memlock of a fresh login not read: {why}", res, "memlock")
    if not default:
        return error("tuning.memlock", "systemd DefaultLimitMEMLOCK not printed", res, "memlock")
    return judge("tuning.memlock", login == want and default == want_sd, "memlock", expected,
                 f"login {login}, systemd {default}")


def _sysctl(res, ctx: HostContext) -> list[Finding]:
    tun = ctx.profile.tuning
    if not tun.sysctl:
        return [Finding("tuning.sysctl", "skip", "", "", "profile sets no sysctls (tuning.sysctl is empty)")]
    out = []
    bad = {k: why for k in tun.sysctl if (why := unreadable_key(k))}
    for key in sorted(bad):
        out.append(error("tuning.sysctl", bad[key], subject=key))
    if len(bad) == len(tun.sysctl):
        return out
    reason = why_not(res, ctx.timeout_s)
    if reason:  # sysctl exits non-zero when any key cannot be read: its message names the key
        return out + [error("tuning.sysctl", reason, res)]
    got = {}
    for line in res.stdout.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            got[k.strip()] = v.strip()
    for key, want in sorted(tun.sysctl.items()):
        if key in bad:
            continue
        if key not in got:  # sysctl said nothing of a key it was asked, yet exited 0: incomplete output
            out.append(error("tuning.sysctl", f"sysctl printed no value for {key}", res, key))
        else:
            out.append(judge("tuning.sysctl", got[key] == str(want), key, want, got[key]))
    return out
