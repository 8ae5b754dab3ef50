"""Storage the jobs read data from and write checkpoints to: the profile's required mounts (mounted, of
their filesystem type, with their options, with free space) and the node's NVMe scratch (its devices,
its mount and filesystem). Whether a checkpoint can be written fast enough is the probe
probe.checkpoint_write (clustercert.probes.workload)."""

from __future__ import annotations

from clustercert.checks import Evidence, Finding, HostContext, error, judge, parsed

CHECK_IDS = ("storage.mounts", "storage.scratch")
GIB = 1 << 30


def commands(ctx: HostContext) -> dict[str, tuple[str, float]]:
    st = ctx.profile.storage
    if st is None or not (st.mounts or st.scratch):
        return {}
    cmds = {"findmnt": ("findmnt -J -l -b -o TARGET,SOURCE,FSTYPE,OPTIONS,AVAIL", ctx.timeout_s)}
    if st.scratch is not None:
        cmds["lsblk"] = ("lsblk -J -d -b -o NAME,TYPE,TRAN,SIZE,MODEL", ctx.timeout_s)
    return cmds


def _mount(
    check: str, path: str, fstypes, options, min_free_gib: float, mounts: dict, ev_text: str
) -> Finding:
    want = (f"mounted, {' or '.join(fstypes)}, options {','.join(options) or '-'}"
            + (f", >= {min_free_gib:g} GiB free" if min_free_gib else ""))
    m = mounts.get(path.rstrip("/") or "/")
    if m is None:
        return Finding(check, "fail", path, want, f"{path} is not a mount point (not mounted)", ev_text)
    problems = []
    if m["fstype"] not in fstypes:
        problems.append(f"filesystem {m['fstype']}")
    missing = [o for o in options if o not in m["options"]]
    if missing:
        problems.append(f"options {','.join(m['options'])} lack {','.join(missing)}")
    free = m["avail_bytes"]
    if min_free_gib and (free is None or free < min_free_gib * GIB):
        problems.append("free space unknown" if free is None else f"{free / GIB:.1f} GiB free")
    seen = f"{m['fstype']} from {m['source']}, {','.join(m['options'])}" + (
        f", {free / GIB:.1f} GiB free" if free is not None else "")
    value = round(free / GIB, 3) if free is not None else None
    return Finding(
        check,
        "fail" if problems else "pass",
        path,
        want,
        ("; ".join(problems) + f" ({seen})") if problems else seen,
        ev_text,
        value,
        "GiB" if value is not None else None,
    )


def evaluate(ev: Evidence, ctx: HostContext) -> list[Finding]:
    st = ctx.profile.storage
    why = "the profile has no storage section (a site adds its mounts and scratch there)"
    if st is None:
        return [Finding(c, "skip", "", "", why) for c in CHECK_IDS]
    out: list[Finding] = []
    rec, errs = parsed("findmnt-json", ev.get("findmnt"), CHECK_IDS, ctx.timeout_s)
    if rec is None:
        return errs if (st.mounts or st.scratch) else [Finding(c, "skip", "", "", why) for c in CHECK_IDS]
    mounts = {m["target"].rstrip("/") or "/": m for m in rec["mounts"]}
    text = "\n".join(
        f"{m['target']} {m['fstype']} {','.join(m['options'])}"
        for m in rec["mounts"]
        if any(
            m["target"] == p for p in [x.path for x in st.mounts] + ([st.scratch.mount] if st.scratch else [])
        )
    )
    if not st.mounts:
        out.append(Finding("storage.mounts", "skip", "", "", "the profile's storage section lists no mounts"))
    for mt in st.mounts:
        out.append(_mount("storage.mounts", mt.path, mt.fstype, mt.options, mt.min_free_gib, mounts, text))
    sc = st.scratch
    if sc is None:
        out.append(Finding("storage.scratch", "skip", "", "", "the profile's storage section has no scratch"))
        return out
    out.append(_mount("storage.scratch", sc.mount, sc.fstype, (), sc.min_free_gib, mounts, text))
    blk, errs = parsed("lsblk-json", ev.get("lsblk"), ("storage.scratch",), ctx.timeout_s)
    if blk is None:
        return out + [error("storage.scratch", f.observed, ev.get("lsblk"), "NVMe devices") for f in errs]
    nvme = [d["name"] for d in blk["devices"] if d["nvme"] and d["type"] in (None, "disk")]
    out.append(
        judge(
            "storage.scratch",
            len(nvme) == sc.nvme_devices,
            "NVMe devices",
            f"{sc.nvme_devices} NVMe devices",
            f"{len(nvme)} NVMe device{'s' if len(nvme) != 1 else ''}"
            + (f" ({', '.join(nvme)})" if nvme else ""),
            ", ".join(f"{d['name']} {d['transport'] or '-'}" for d in blk["devices"]),
            len(nvme),
            "devices",
        )
    )
    return out
