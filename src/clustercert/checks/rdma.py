"""RDMA stack: OFED/DOCA flavour and version, and nvidia-peermem (GPUDirect RDMA)."""

from __future__ import annotations

from clustercert.checks import Evidence, Finding, HostContext, error, judge, parsed, why_not

CHECK_IDS = ("ofed.version", "rdma.peermem")


def commands(ctx: HostContext) -> dict[str, tuple[str, float]]:
    t = ctx.timeout_s
    cmds = {"lsmod": ("lsmod", t)}
    if ctx.profile.ofed.source == "inbox":
        cmds["rdma_core_pkg"] = (
            "dpkg-query -W -f='${Version}' rdma-core 2>/dev/null || rpm -q --qf '%{VERSION}' rdma-core",
            t,
        )
    else:
        cmds["ofed_info"] = ("ofed_info -s", t)
    if ctx.profile.ofed.source == "doca":
        # DOCA-OFED's ofed_info names its internal OFED build; the DOCA release is the package's version
        cmds["doca_pkg"] = (
            "dpkg-query -W -f='${Version}' doca-ofed 2>/dev/null || rpm -q --qf '%{VERSION}' doca-ofed",
            t,
        )
    return cmds


def evaluate(ev: Evidence, ctx: HostContext) -> list[Finding]:
    o = ctx.profile.ofed
    out: list[Finding] = []
    if o.source == "inbox":
        res = ev.get("rdma_core_pkg")
        reason = why_not(res, ctx.timeout_s)
        if reason:
            out.append(error("ofed.version", reason, res, "rdma-core"))
        else:
            v = res.stdout.strip()
            out.append(judge("ofed.version", v.startswith(o.version), "rdma-core (inbox)", o.version, v))
    else:
        rec, errs = parsed("ofed-info", ev.get("ofed_info"), ("ofed.version",), ctx.timeout_s)
        out += errs
        if rec is not None and o.source == "doca":
            pkg = ev.get("doca_pkg")
            reason = why_not(pkg, ctx.timeout_s)
            if reason:
                out.append(
                    error(
                        "ofed.version",
                        f"doca-ofed not installed or not queryable ({reason})",
                        pkg,
                        "doca-ofed",
                    )
                )
            else:
                v = pkg.stdout.strip()
                good = rec.get("installed", True) and v.startswith(o.version)
                out.append(
                    judge(
                        "ofed.version",
                        good,
                        "doca-ofed",
                        f"DOCA {o.version}",
                        f"DOCA {v} ({rec.get('package')}-{rec.get('version')})",
                        ev["ofed_info"].stdout.strip()[:200],
                    )
                )
        elif rec is not None:
            flavour, version = rec.get("flavour"), rec.get("version") or ""
            good = rec.get("installed", True) and flavour == o.source and version.startswith(o.version)
            out.append(
                judge(
                    "ofed.version",
                    good,
                    "OFED",
                    f"{o.source} {o.version}",
                    f"{flavour} {version}".strip(),
                    ev["ofed_info"].stdout.strip()[:200],
                )
            )
    rec, errs = parsed("lsmod", ev.get("lsmod"), ("rdma.peermem",), ctx.timeout_s)
    out += errs
    if rec is not None:
        names = set(rec.get("modules", {}))
        out.append(
            judge(
                "rdma.peermem",
                "nvidia_peermem" in names,
                "nvidia_peermem",
                "module loaded",
                "loaded" if "nvidia_peermem" in names else "not loaded",
                "nvidia modules: " + (", ".join(sorted(n for n in names if n.startswith("nv"))) or "none"),
            )
        )
    return out

