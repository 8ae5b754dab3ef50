"""Host tuning the anchors leave out: memlock, sysctls, hugepages, CPU governor."""

from __future__ import annotations

from clustercert.checks import Evidence, Finding, HostContext, error, judge, why_not

CHECK_IDS = ("tuning.memlock", "tuning.sysctl", "tuning.hugepages", "tuning.governor")


def commands(ctx: HostContext) -> dict[str, tuple[str, float]]:
    t = ctx.timeout_s
    cmds = {
        # a fresh PAM login of an ordinary user (what a job gets: pam_limits applies limits.d; the SSH
        # session we run in may be a reused connection with older limits); services get systemd's default
        "memlock": ("{ runuser -l nobody -s /bin/sh -c 'ulimit -l' || su -l nobody -s /bin/sh -c 'ulimit -l'; } 2>/dev/null; "
                    "systemctl show -p DefaultLimitMEMLOCK", t),
        "hugepages": ("cat /proc/sys/vm/nr_hugepages", t),
        "governor": ("cat /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor", t),
    }
    keys = sorted(ctx.profile.tuning.sysctl)
    if keys:
        cmds["sysctl"] = ("sysctl " + " ".join(keys), t)
    return cmds


def evaluate(ev: Evidence, ctx: HostContext) -> list[Finding]:
    tun = ctx.profile.tuning
    out: list[Finding] = []
    res = ev.get("memlock")
    reason = why_not(res, ctx.timeout_s)
    if reason:
        out.append(error("tuning.memlock", reason, res))
    else:
        lines = [x.strip() for x in res.stdout.splitlines() if x.strip()]
        login = lines[0] if lines else ""
        default = next((x.split("=", 1)[1] for x in lines if x.startswith("DefaultLimitMEMLOCK=")), "")
        want = "unlimited" if tun.memlock == "unlimited" else str(tun.memlock)
        want_sd = "infinity" if tun.memlock == "unlimited" else str(int(tun.memlock) * 1024)
        good = login == want and default == want_sd
        out.append(judge("tuning.memlock", good, "memlock", f"login {want}, systemd DefaultLimitMEMLOCK={want_sd}",
                         f"login {login or '?'}, systemd {default or '?'}"))
    res = ev.get("sysctl")
    if tun.sysctl:
        reason = why_not(res, ctx.timeout_s)
        if reason:
            out.append(error("tuning.sysctl", reason, res))
        else:
            got = {}
            for line in res.stdout.splitlines():
                k, sep, v = line.partition("=")
                if sep:
                    got[k.strip()] = v.strip()
            for key, want in sorted(tun.sysctl.items()):
                out.append(judge("tuning.sysctl", got.get(key) == str(want), key, want, got.get(key, "not set")))
    else:
        out.append(Finding("tuning.sysctl", "skip", "", "", "profile sets no sysctls (tuning.sysctl is empty)"))
    res = ev.get("hugepages")
    reason = why_not(res, ctx.timeout_s)
    if reason:
        out.append(error("tuning.hugepages", reason, res))
    else:
        n = res.stdout.strip()
        good = n.isdigit() and int(n) >= tun.hugepages_2m
        out.append(judge("tuning.hugepages", good, "vm.nr_hugepages", f">= {tun.hugepages_2m}", n,
                         value=int(n) if n.isdigit() else None, unit="pages"))
    if tun.governor == "none":
        out.append(Finding("tuning.governor", "skip", "", "", "profile does not manage the CPU governor (tuning.governor: none)"))
    else:
        res = ev.get("governor")
        reason = why_not(res, ctx.timeout_s)
        if reason:
            out.append(error("tuning.governor", f"cpufreq not readable ({reason})", res))
        else:
            govs = sorted({x.strip() for x in res.stdout.splitlines() if x.strip()})
            out.append(judge("tuning.governor", govs == [tun.governor], "cpufreq", tun.governor, ", ".join(govs)))
    return out
