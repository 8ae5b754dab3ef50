"""GPU checks from ``nvidia-smi -q -x``, ``nvidia-smi nvlink -s``, the kernel log and the GPU services."""

from __future__ import annotations

from clustercert.checks import (
    Evidence,
    Finding,
    HostContext,
    error,
    judge,
    ok,
    parsed,
    printed_nothing,
    why_not,
)

CHECK_IDS = (
    "gpu.count", "gpu.model", "gpu.memory", "gpu.ecc", "gpu.row_remap", "gpu.retired_pages", "gpu.xid",
    "gpu.pcie_link", "gpu.throttle", "gpu.nvlink", "gpu.persistence", "gpu.fabricmanager",
)
XML_CHECKS = ("gpu.count", "gpu.model", "gpu.memory", "gpu.ecc", "gpu.row_remap", "gpu.retired_pages",
              "gpu.pcie_link", "gpu.throttle", "gpu.persistence")

# Xids that mean the GPU needs attention (AzNHC's critical set, see the profile notes / anchors).
CRITICAL_XIDS = {48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120}
# Clock-event reasons that mean the GPU is being slowed down by something other than idling or a cap.
BAD_CLOCK_REASONS = {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown"}

SERVICE_PROPS = "systemctl show -p LoadState -p ActiveState -p SubState -p UnitFileState"


def commands(ctx: HostContext) -> dict[str, tuple[str, float]]:
    t = ctx.timeout_s
    return {
        "nvsmi_xml": ("nvidia-smi -q -x", t),
        "nvsmi_nvlink": ("nvidia-smi nvlink -s", t),
        "kernel_log": ("dmesg 2>/dev/null || journalctl -k -q --no-pager -o short-iso", t),
        "svc_fabricmanager": (f"{SERVICE_PROPS} nvidia-fabricmanager", t),
        "svc_persistenced": (f"{SERVICE_PROPS} nvidia-persistenced", t),
    }


def _gpu_subject(g: dict) -> str:
    return f"GPU{g['index']} {g.get('bus_id') or ''}".strip()


def service_state(text: str) -> dict:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def evaluate(ev: Evidence, ctx: HostContext) -> list[Finding]:
    p = ctx.profile.gpu
    out: list[Finding] = []
    rec, errs = parsed("nvidia-smi-xml", ev.get("nvsmi_xml"), XML_CHECKS, ctx.timeout_s)
    out += errs
    if rec is not None:
        gpus = rec["gpus"]
        excerpt = "; ".join(f"{_gpu_subject(g)} {g.get('product_name')}" for g in gpus)
        out.append(
            judge("gpu.count", len(gpus) == p.count, "node", p.count, len(gpus), excerpt, len(gpus), "gpus")
        )
        for g in gpus:
            s = _gpu_subject(g)
            out.append(
                judge("gpu.model", g.get("product_name") == p.model, s, p.model, g.get("product_name"))
            )
            mem = g.get("memory_total_mib")
            out.append(
                judge(
                    "gpu.memory",
                    mem is not None and abs(mem - p.memory_mib) <= p.memory_tolerance_mib,
                    s,
                    f"{p.memory_mib} MiB ± {p.memory_tolerance_mib}",
                    f"{mem} MiB",
                    value=mem,
                    unit="mib",
                )
            )
            out.append(_ecc(g, s, ctx))
            out.append(_row_remap(g, s))
            out.append(_retired(g, s, ctx))
            out.append(_pcie(g, s, ctx))
            reasons = set(g.get("clocks_event_reasons_active") or [])
            bad = sorted(reasons & BAD_CLOCK_REASONS)
            out.append(
                judge(
                    "gpu.throttle",
                    not bad,
                    s,
                    "no hardware/thermal slowdown",
                    ", ".join(bad) or "none",
                    "active clock event reasons: " + (", ".join(sorted(reasons)) or "none"),
                )
            )
            out.append(
                judge(
                    "gpu.persistence",
                    g.get("persistence_mode") is True,
                    s,
                    "Enabled",
                    {True: "Enabled", False: "Disabled"}.get(g.get("persistence_mode"), "not reported"),
                )
            )
    out += _xid(ev.get("kernel_log"), ctx)
    out += _nvlink(ev.get("nvsmi_nvlink"), ctx, rec["gpus"] if rec is not None else None)
    out += _fabricmanager(ev.get("svc_fabricmanager"), ctx)
    return out


def _ecc(g: dict, s: str, ctx: HostContext) -> Finding:
    e = g.get("ecc_errors") or {}
    if g.get("ecc_mode_current") is not True:
        return Finding(
            "gpu.ecc",
            "fail",
            s,
            "ECC enabled",
            "ECC disabled" if g.get("ecc_mode_current") is False else "ECC mode not reported",
        )
    unc = e.get("volatile_uncorrectable")
    if unc is None:
        return Finding("gpu.ecc", "error", s, "volatile uncorrectable = 0", "ECC counters not reported")
    if unc > 0:
        return Finding(
            "gpu.ecc",
            "fail",
            s,
            "volatile uncorrectable = 0",
            f"volatile uncorrectable = {unc}",
            value=unc,
            unit="count",
        )
    vol = e.get("volatile") or {}
    th = ctx.profile.thresholds
    for mem, key in (("sram", "ecc_sram_corrected"), ("dram", "ecc_dram_corrected")):
        n = vol.get(f"{mem}_correctable")
        if isinstance(n, int | float) and key in th and th[key].max is not None and n > th[key].max:
            return Finding(
                "gpu.ecc",
                "fail",
                s,
                f"{mem.upper()} corrected <= {th[key].max:g} ({th[key].source})",
                f"{mem.upper()} corrected = {n}",
                value=n,
                unit="count",
            )
    return ok("gpu.ecc", s, "ECC enabled, volatile uncorrectable = 0", "ECC enabled, 0 uncorrectable")


def _row_remap(g: dict, s: str) -> Finding:
    rr = g.get("remapped_rows")
    if rr is None:
        return Finding(
            "gpu.row_remap",
            "error",
            s,
            "no pending remap, no remap failure",
            "row remapping not reported by nvidia-smi",
        )
    bad = [k for k in ("pending", "failure") if rr.get(k)]
    return judge("gpu.row_remap", not bad, s, "pending: No, failure: No",
                 f"pending: {'Yes' if rr.get('pending') else 'No'}, failure: "
                 f"{'Yes' if rr.get('failure') else 'No'}",
                 f"correctable rows {rr.get('correctable')}, uncorrectable rows {rr.get('uncorrectable')}")


def _retired(g: dict, s: str, ctx: HostContext) -> Finding:
    rp = g.get("retired_pages") or {}
    sb, db = rp.get("single_bit"), rp.get("double_bit")
    if sb is None and db is None and rp.get("pending") is None:
        if ctx.profile.gpu.architecture in ("ampere", "hopper", "blackwell"):
            return Finding(
                "gpu.retired_pages",
                "skip",
                s,
                "",
                f"page retirement is replaced by row remapping on {ctx.profile.gpu.architecture} (profile "
                "gpu.architecture)",
            )
        return Finding(
            "gpu.retired_pages", "error", s, "retired pages reported", "not reported by nvidia-smi"
        )
    total = (sb or 0) + (db or 0)
    th = ctx.profile.thresholds.get("retired_pages")
    limit = th.max if th and th.max is not None else 10
    good = total <= limit and not rp.get("pending")
    return judge(
        "gpu.retired_pages",
        good,
        s,
        f"<= {limit:g}, none pending",
        f"{total} retired, pending: {rp.get('pending')}",
        value=total,
        unit="count",
    )


def _pcie(g: dict, s: str, ctx: HostContext) -> Finding:
    p = ctx.profile.gpu
    pc = g.get("pcie") or {}
    gen, width = pc.get("gen_current"), pc.get("width_current")
    gen_max = pc.get("gen_max")
    if gen is None or width is None:
        return Finding(
            "gpu.pcie_link", "error", s, f"Gen{p.pcie_gen} x{p.pcie_width}", "PCIe link not reported"
        )
    good = width >= p.pcie_width and gen >= p.pcie_gen
    return judge("gpu.pcie_link", good, s, f"Gen{p.pcie_gen} x{p.pcie_width}", f"Gen{gen} x{width}",
                 f"current Gen{gen} x{width}, max Gen{gen_max} x{pc.get('width_max')}")


def _xid(res, ctx: HostContext) -> list[Finding]:
    rec, errs = parsed("xid", res, ("gpu.xid",), ctx.timeout_s)
    if rec is None:
        # an empty kernel log is a valid, Xid-free log
        if res is not None and res.ok and not res.stdout.strip():
            return [ok("gpu.xid", "node", "no critical Xid", "no Xid in the kernel log")]
        return errs
    crit = [e for e in rec["events"] if e["source"] == "gpu" and e["xid"] in CRITICAL_XIDS]
    if not crit:
        seen = ", ".join(f"Xid {k} x{v}" for k, v in sorted(rec["xid_counts"].items())) or "none"
        return [ok("gpu.xid", "node", "no critical Xid", f"critical: none (all Xids: {seen})")]
    out = []
    by_gpu: dict[str, list[dict]] = {}
    for e in crit:
        by_gpu.setdefault(e["bus_id"], []).append(e)
    lines = res.stdout.splitlines()
    for bus, events in sorted(by_gpu.items()):
        xids = sorted({e["xid"] for e in events})
        ev_lines = "\n".join(lines[e["line"] - 1] for e in events[:5] if 0 < e["line"] <= len(lines))
        out.append(Finding("gpu.xid", "fail", f"GPU {bus}", "no critical Xid",
                           "Xid " + ", ".join(map(str, xids)), ev_lines))
    return out


NVLINK_SILENT = "no NVLink link reported (nvidia-smi nvlink -s printed nothing)"


def _nvlink(res, ctx: HostContext, gpus: list[dict] | None = None) -> list[Finding]:
    """Per GPU: the profile's number of active NVLinks in ``nvidia-smi nvlink -s``. ``gpus``: the GPUs
    ``nvidia-smi -q -x`` lists (None when it did not run or parse). An ``nvlink -s`` that exits 0 and prints
    nothing (a GPU whose NVLinks the driver does not show, e.g. in a VM) is a measured answer: each listed GPU
    fails with no link reported. Without the GPU list that answer is not judged (error), as a non-zero exit or
    a timeout is not."""
    want = ctx.profile.gpu.nvlink_links_per_gpu
    if want == 0:
        return [
            Finding(
                "gpu.nvlink", "skip", "node", "", "profile expects no NVLink (gpu.nvlink_links_per_gpu: 0)"
            )
        ]
    if (evidence := printed_nothing(res)) is not None:
        if not gpus:
            return [Finding("gpu.nvlink", "error", "node", f"{want} active links per GPU",
                            f"{NVLINK_SILENT}; nvidia-smi -q -x listed no GPU to judge", evidence)]
        return [
            Finding(
                "gpu.nvlink",
                "fail",
                f"GPU{g['index']}",
                f"{want} active links",
                NVLINK_SILENT,
                (
                    f"{evidence}; nvidia-smi -q -x lists {_gpu_subject(g)} "
                    f"{g.get('product_name') or ''}"
                ).rstrip(),
            )
            for g in gpus
        ]
    rec, errs = parsed("nvidia-smi-nvlink", res, ("gpu.nvlink",), ctx.timeout_s)
    if rec is None:
        return errs
    out = []
    for g in rec["gpus"]:
        links = g.get("links") or []
        inactive = [lk["link"] for lk in links if lk.get("inactive")]
        active = len(links) - len(inactive)
        good = g.get("status") in ("ok", None) and active == want
        obs = f"{active}/{len(links)} links active" + (
            f"; inactive: {', '.join(map(str, inactive))}" if inactive else ""
        )
        out.append(judge("gpu.nvlink", good, f"GPU{g['index']}", f"{want} active links", obs))
    if not out:
        out.append(
            Finding(
                "gpu.nvlink",
                "error",
                "node",
                f"{want} links per GPU",
                "no GPU in nvlink output",
                res.excerpt(),
            )
        )
    return out


def _fabricmanager(res, ctx: HostContext) -> list[Finding]:
    if not ctx.profile.gpu.nvswitch:
        return [
            Finding(
                "gpu.fabricmanager",
                "skip",
                "nvidia-fabricmanager",
                "",
                "profile has no NVSwitch (gpu.nvswitch: false)",
            )
        ]
    reason = why_not(res, ctx.timeout_s)
    if reason:
        return [error("gpu.fabricmanager", reason, res, "nvidia-fabricmanager")]
    st = service_state(res.stdout)
    good = st.get("ActiveState") == "active" and st.get("SubState") == "running"
    return [judge("gpu.fabricmanager", good, "nvidia-fabricmanager", "active (running), enabled",
                  f"{st.get('ActiveState', '?')} ({st.get('SubState', '?')}), {st.get('UnitFileState', '?')}",
                  res.stdout.strip())]
