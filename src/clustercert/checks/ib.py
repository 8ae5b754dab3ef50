"""InfiniBand: port state and rate, error counters, IPoIB netdevs, subnet manager, firmware, NCCL rails.

Ports are read from sysfs (/sys/class/infiniband), the source ibstat itself reads.
"""

from __future__ import annotations

import json

from clustercert.checks import Evidence, Finding, HostContext, error, judge, parsed, why_not
from clustercert.checks import rails as rails_mod

CHECK_IDS = (
    "ib.port_state",
    "ib.port_rate",
    "ib.firmware",
    "ib.counters",
    "ib.ipoib",
    "ib.sm",
    "nccl.config",
)
SYSFS_CHECKS = ("ib.port_state", "ib.port_rate", "ib.firmware", "ib.counters", "ib.sm")
SYSFS_CMD = (
    "cd /sys/class/infiniband && grep -r . */fw_ver */ports/*/state */ports/*/phys_state */ports/*/rate "
    "*/ports/*/link_layer */ports/*/sm_lid */ports/*/lid */ports/*/counters/ 2>/dev/null; test -n \"$(ls)\""
)


def commands(ctx: HostContext) -> dict[str, tuple[str, float]]:
    t = ctx.timeout_s
    return {
        "ib_sysfs": (SYSFS_CMD, t),
        "ip_link": ("ip -j link show", t),
        "ip_addr": ("ip -j addr show", t),
        "nccl_conf": ("cat /etc/nccl.conf", t),
        "nvsmi_topo": (rails_mod.TOPO_CMD, t),  # the compute rails' names (clustercert.checks.rails)
    }


class _Port:
    """A port the checks read: an HCA of ib.hcas, or a compute rail the node's discovery found."""

    def __init__(self, name: str, port: int, rate_gbit_per_s: int) -> None:
        self.name, self.port, self.rate_gbit_per_s = name, port, rate_gbit_per_s


def ports_checked(ctx: HostContext, nr: rails_mod.NodeRails) -> list:
    """ib.hcas, then the discovered compute rails the profile does not name (at hardware.rails' rate)."""
    named = {h.name for h in ctx.profile.ib.hcas}
    spec = ctx.profile.hardware.rails if ctx.profile.hardware is not None else None
    extra = [_Port(r.hca, r.port, spec.rate_gbit_per_s) for r in (nr.rails or ())
             if r.hca not in named and spec is not None]
    return [*ctx.profile.ib.hcas, *extra]


def evaluate(ev: Evidence, ctx: HostContext) -> list[Finding]:
    out: list[Finding] = []
    nr = rails_mod.of_evidence(ctx.profile, ev.get("nvsmi_topo"), ev.get("ib_sysfs"), ctx.timeout_s)
    checked = ports_checked(ctx, nr)
    rec, errs = parsed("sysfs-infiniband", ev.get("ib_sysfs"), SYSFS_CHECKS, ctx.timeout_s)
    out += errs
    if rec is not None:
        hcas = rec.get("hcas", {})
        for h in checked:
            subject = f"{h.name}/{h.port}"
            port = (hcas.get(h.name, {}).get("ports") or {}).get(str(h.port))
            if port is None:
                for c in ("ib.port_state", "ib.port_rate", "ib.counters"):
                    out.append(
                        Finding(
                            c, "fail", subject, "port present", "HCA port not found in /sys/class/infiniband"
                        )
                    )
                continue
            state, phys = port.get("state"), port.get("phys_state")
            out.append(
                judge(
                    "ib.port_state",
                    state == "ACTIVE" and phys == "LinkUp",
                    subject,
                    "ACTIVE / LinkUp",
                    f"{state} / {phys}",
                )
            )
            rate = port.get("rate_gbit_per_s")
            out.append(judge("ib.port_rate", rate == h.rate_gbit_per_s, subject, f"{h.rate_gbit_per_s} Gb/s",
                             f"{rate} Gb/s ({port.get('rate_label')})", value=rate, unit="gbit_per_s"))
            out.append(_counters(port.get("counters") or {}, subject, ctx))
        fws = {h.name: (hcas.get(h.name) or {}).get("fw_ver") for h in checked}
        distinct = {v for v in fws.values() if v}
        # uniformity across the nodes is ib.firmware_uniform's (clustercert.checks.cluster); here: one per
        # node
        out.append(judge("ib.firmware", all(fws.values()) and len(distinct) <= 1, "node",
                         "one firmware version on every HCA", ", ".join(sorted(distinct)) or "not reported",
                         json.dumps(fws)))
        out.append(_sm_local(hcas, checked))
    out += _ipoib(ev, ctx)
    out += _nccl_conf(ev.get("nccl_conf"), ctx, nr)
    return out


def _counters(counters: dict, subject: str, ctx: HostContext) -> Finding:
    prof = ctx.profile.ib
    sym = counters.get("symbol_error")
    downed = counters.get("link_downed")
    if sym is None or downed is None:
        return Finding(
            "ib.counters", "error", subject, "symbol_error and link_downed readable", "counters not reported"
        )
    good = sym <= prof.max_symbol_errors and downed <= prof.max_link_downed
    return judge("ib.counters", good, subject,
                 f"symbol_error <= {prof.max_symbol_errors}, link_downed <= {prof.max_link_downed}",
                 f"symbol_error {sym}, link_downed {downed}",
                 ", ".join(f"{k}={v}" for k, v in sorted(counters.items()) if v),
                 value=sym, unit="count")


def _sm_local(hcas: dict, checked: list) -> Finding:
    """Every port sees a subnet manager (non-zero SM LID); one master per fabric is cluster_findings()'s."""
    seen = {}
    for h in checked:
        port = (hcas.get(h.name, {}).get("ports") or {}).get(str(h.port)) or {}
        seen[f"{h.name}/{h.port}"] = port.get("sm_lid")
    missing = [k for k, v in seen.items() if not v]
    return judge(
        "ib.sm",
        not missing,
        "node",
        "an SM answers on every port (SM LID != 0)",
        "no SM on " + ", ".join(missing) if missing else "SM LIDs " + json.dumps(seen),
        json.dumps(seen),
    )


def _ipoib(ev: Evidence, ctx: HostContext) -> list[Finding]:
    res = ev.get("ip_link")
    reason = why_not(res, ctx.timeout_s)
    if reason:
        return [error("ib.ipoib", reason, res)]
    try:
        links = {li["ifname"]: li for li in json.loads(res.stdout)}
    except (json.JSONDecodeError, KeyError, TypeError):
        return [error("ib.ipoib", "unparseable `ip -j link` output", res)]
    out = []
    for h in ctx.profile.ib.hcas:
        li = links.get(h.netdev)
        if li is None:
            out.append(
                Finding("ib.ipoib", "fail", h.netdev, f"IPoIB netdev of {h.name} present and up", "missing")
            )
            continue
        flags = li.get("flags") or []
        up = "UP" in flags and "LOWER_UP" in flags
        master = li.get("master")
        out.append(
            judge(
                "ib.ipoib",
                up,
                h.netdev,
                "UP, LOWER_UP",
                ",".join(flags) + (f" (slave of {master})" if master else ""),
                f"{h.netdev} of {h.name}: operstate {li.get('operstate')}, mtu {li.get('mtu')}",
            )
        )
    return out


def _nccl_conf(res, ctx: HostContext, nr: rails_mod.NodeRails) -> list[Finding]:
    """/etc/nccl.conf names the node's compute rails exactly (NCCL_IB_HCA==...), the rails as this node's
    discovery finds them (or hardware.nic_gpu names them), in GPU order: what the ib_redundancy role
    writes."""
    if nr.source != "none" and nr.names is None:
        return [Finding("nccl.config", "error", "/etc/nccl.conf", "NCCL_IB_HCA= the node's compute rails",
                        "the node's compute rails are unknown: " + "; ".join(nr.problems))]
    want = "=" + ",".join(nr.names or [])
    if res is not None and not res.timed_out and res.rc not in (0, None) and "No such file" in res.stderr:
        return [Finding("nccl.config", "fail", "/etc/nccl.conf", f"NCCL_IB_HCA={want}", "file missing")]
    reason = why_not(res, ctx.timeout_s)
    if reason:
        return [error("nccl.config", reason, res, "/etc/nccl.conf")]
    conf = {}
    for line in res.stdout.splitlines():
        s = line.strip()
        if s and not s.startswith("#") and "=" in s:
            k, v = s.split("=", 1)
            conf[k.strip()] = v.strip()
    got = conf.get("NCCL_IB_HCA")
    return [
        judge(
            "nccl.config",
            got == want,
            "/etc/nccl.conf",
            f"NCCL_IB_HCA={want}",
            f"NCCL_IB_HCA={got}" if got else "NCCL_IB_HCA not set",
            res.stdout.strip()[:400],
        )
    ]


def cluster_findings(
    per_node_sysfs: dict[str, dict], profiles: dict[str, object]
) -> dict[str, list[Finding]]:
    """Cross-node rule: one SM (LID) per fabric. (Firmware across the nodes of a profile is
    ib.firmware_uniform's, clustercert.checks.cluster.)"""
    out: dict[str, list[Finding]] = {n: [] for n in per_node_sysfs}
    # one master SM per fabric: every node's ports on a fabric report the same SM LID
    fabric_lids: dict[int, dict[str, set]] = {}
    for node, rec in per_node_sysfs.items():
        for h in profiles[node].ib.hcas:
            port = (rec.get("hcas", {}).get(h.name, {}).get("ports") or {}).get(str(h.port)) or {}
            if port.get("sm_lid"):
                fabric_lids.setdefault(h.fabric, {}).setdefault(node, set()).add(port["sm_lid"])
    for fabric, nodes in fabric_lids.items():
        all_lids = set().union(*nodes.values())
        if len(all_lids) > 1:
            for node in nodes:
                out[node].append(Finding("ib.sm", "fail", f"fabric {fabric}", "one master SM per fabric",
                                         f"SM LIDs seen on the fabric: {sorted(all_lids)}"))
    return out



