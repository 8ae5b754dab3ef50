"""Hardware: NVLink error counters, where each compute HCA sits beside its GPU, the PCIe device manifest, the
NVLink fabric state, and the node's hardware identity (what the certificate records and drift compares).

Evidence: ``nvidia-smi -q -x`` (as the gpu component), ``nvidia-smi nvlink -e``, ``nvidia-smi topo -m``,
``lspci -vv`` of the NVIDIA and Mellanox functions, the HCAs' identity in sysfs and dmidecode's
system/baseboard/chassis records. The cluster-wide checks (``ib.firmware_uniform``, ``gpu.vbios_uniform``) are
this component's ids -- it collects their evidence -- but are judged over every node at once by
clustercert.checks.cluster; ``evaluate`` here emits the per-node ones. A value that reads N/A or Not
Supported is an error, never a pass.
"""

from __future__ import annotations

import json

from clustercert.checks import Evidence, Finding, HostContext, error, judge, parsed, printed_nothing
from clustercert.checks import rails as rails_mod
from clustercert.checks.ib import SYSFS_CMD

CHECK_IDS = ("gpu.nvlink_errors", "gpu.nic_affinity", "hw.pcie_manifest", "gpu.fabric_state",
             "ib.firmware_uniform", "gpu.vbios_uniform")
CLUSTER_CHECK_IDS = ("ib.firmware_uniform", "gpu.vbios_uniform")
NODE_CHECK_IDS = tuple(c for c in CHECK_IDS if c not in CLUSTER_CHECK_IDS)

HCA_IDENTITY_CMD = (
    "cd /sys/class/infiniband && grep -r . */fw_ver */node_guid */board_id */hca_type 2>/dev/null; "
    'test -n "$(ls)"'
)
# the NVIDIA (GPUs, NVSwitches) and Mellanox (HCAs) functions with their Express capability (-vv; needs root)
LSPCI_CMD = "lspci -D -nn -vv -d 10de: && lspci -D -nn -vv -d 15b3:"
DMI_CMD = "dmidecode -t system -t baseboard -t chassis"

# PCIe generation -> link speed in GT/s (what lspci prints)
GEN_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0, 7: 128.0}
# nvidia-smi topo -m: a NIC under the same PCIe switch as the GPU (not through a host bridge)
SAME_SWITCH = ("PIX", "PXB")
# NVLink error counters judged per GPU: our name -> (the profile threshold, the nvlink -e counter keys'
# prefix)
NVLINK_COUNTERS = {"crc": ("nvlink_crc_errors", "crc"), "replay": ("nvlink_replay_errors", "replay"),
                   "recovery": ("nvlink_recovery_errors", "recovery")}


def commands(ctx: HostContext) -> dict[str, tuple[str, float]]:
    t = ctx.timeout_s
    return {
        "nvsmi_xml": ("nvidia-smi -q -x", t),
        "nvsmi_nvlink_errors": ("nvidia-smi nvlink -e", t),
        "nvsmi_topo": (rails_mod.TOPO_CMD, t),
        "ib_sysfs": (SYSFS_CMD, t),  # the rails' rate and link layer (the ib component reads it too)
        "lspci": (LSPCI_CMD, t),
        "hca_identity": (HCA_IDENTITY_CMD, t),
        "dmi": (DMI_CMD, t),
    }


def evaluate(ev: Evidence, ctx: HostContext) -> list[Finding]:
    return (
        nvlink_errors(ev.get("nvsmi_nvlink_errors"), ctx)
        + nic_affinity(ev.get("nvsmi_topo"), ctx, ev.get("ib_sysfs"))
        + pcie_manifest(ev.get("lspci"), ctx)
        + fabric_state(ev.get("nvsmi_xml"), ctx)
    )


def _skip(check: str, subject: str, why: str) -> Finding:
    return Finding(check, "skip", subject, "", why)


# ---- gpu.nvlink_errors ---------------------------------------------------------------------------------

def _counter(g: dict, prefix: str) -> tuple[int | None, bool]:
    """(the GPU's total of the counters whose key starts with ``prefix`` -- CRC: crc_errors, or
    crc_flit_errors
    + crc_data_errors --, whether the output has such a counter at all). None when a link reads N/A."""
    keys = [k for k in (g.get("totals") or {}) if k.startswith(prefix) and not k.endswith("ber")]
    if not keys:
        return None, False
    vals = [g["totals"][k] for k in keys]
    if any(not isinstance(v, int) for v in vals):
        return None, True
    return sum(vals), True


def nvlink_counters(g: dict) -> dict[str, int | None]:
    """A parsed ``nvidia-smi-nvlink-errors`` GPU's totals as {crc, replay, recovery}: None for a counter that
    is missing or reads N/A on any link."""
    return {name: _counter(g, prefix)[0] for name, (_t, prefix) in NVLINK_COUNTERS.items()}


def _bad_links(g: dict) -> str:
    parts = []
    for link in g.get("links") or []:
        nz = {k: v for k, v in link["counters"].items() if isinstance(v, int) and v > 0}
        if nz:
            parts.append(f"link {link['link']}: " + ", ".join(f"{k} {v}" for k, v in sorted(nz.items())))
    return "; ".join(parts)


def nvlink_errors(res, ctx: HostContext) -> list[Finding]:
    """Per GPU: its CRC, replay and recovery errors over all links at most the profile's ceilings -- since the
    counters were reset (driver load, GPU reset), or in drift since the baseline run (ctx.nvlink_baseline, by
    GPU UUID; a counter below its baseline value was reset meanwhile and is read whole). A GPU whose counters
    are not readable or read N/A is an error, and so is an ``nvlink -e`` that printed nothing (no counter to
    read: what that means for the links is gpu.nvlink's to say)."""
    check = "gpu.nvlink_errors"
    p = ctx.profile
    if p.gpu.nvlink_links_per_gpu == 0:
        return [_skip(check, "node", "profile expects no NVLink (gpu.nvlink_links_per_gpu: 0)")]
    limits = {name: p.thresholds[t] for name, (t, _pre) in NVLINK_COUNTERS.items() if t in p.thresholds}
    if not limits:
        return [_skip(check, "node", "profile sets no NVLink error threshold (thresholds.nvlink_crc_errors, "
                                     "nvlink_replay_errors, nvlink_recovery_errors)")]
    expected = ", ".join(f"{name} <= {limits[name].max:g}" for name in limits)
    if (silent := printed_nothing(res)) is not None:  # exit 0, nothing printed (NVLink not shown)
        return [Finding(check, "error", "node", expected,
                        "no NVLink counters to read (nvidia-smi nvlink -e printed nothing)", silent)]
    rec, errs = parsed("nvidia-smi-nvlink-errors", res, (check,), ctx.timeout_s)
    if rec is None:
        return errs
    out = []
    for g in rec["gpus"]:
        subject = f"GPU{g['index']}"
        if g.get("status") != "ok" or not g.get("links"):
            out.append(
                Finding(
                    check,
                    "error",
                    subject,
                    expected,
                    f"NVLink error counters not readable: {g.get('message') or 'no link counters'}",
                    res.excerpt(),
                )
            )
            continue
        now = nvlink_counters(g)
        unread = [name for name in limits if now[name] is None]
        if unread:
            why = (
                "N/A or Not Supported on a link"
                if _counter(g, NVLINK_COUNTERS[unread[0]][1])[1]
                else "not in the output"
            )
            out.append(Finding(check, "error", subject, expected,
                               f"{', '.join(unread)} errors {why}: not judged", res.excerpt()))
            continue
        base = ctx.nvlink_baseline.get(g.get("uuid") or "")
        if base and all(now[k] >= base.get(k, 0) for k in limits):
            shown = {k: now[k] - base.get(k, 0) for k in limits}
            since = "since the baseline run"
        else:
            shown = {k: now[k] for k in limits}
            since = "since the counters were reset" + (" (after the baseline run)" if base else "")
        bad = [k for k in limits if shown[k] > limits[k].max]
        links = _bad_links(g)
        observed = (
            ", ".join(f"{k} {shown[k]}" for k in limits) + f" {since}" + (f" ({links})" if links else "")
        )
        evidence = json.dumps(
            {"uuid": g.get("uuid"), "counters": {k: now[k] for k in limits}}, sort_keys=True
        )
        out.append(Finding(check, "fail" if bad else "pass", subject, expected, observed, evidence,
                           shown.get("crc", shown[next(iter(shown))]), "count"))
    if not out:
        out.append(Finding(check, "error", "node", expected, "no GPU in nvlink -e output", res.excerpt()))
    return out


def nvlink_baseline(findings: list[dict]) -> dict[str, dict[str, dict[str, int]]]:
    """From a baseline run's stored findings: per node, per GPU UUID, the NVLink error counters its
    gpu.nvlink_errors finding recorded (what drift judges the increase against)."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for f in findings:
        if f.get("check_id", f.get("check")) != "gpu.nvlink_errors":
            continue
        try:
            ev = json.loads(f.get("evidence") or "")
        except ValueError:
            continue
        if isinstance(ev, dict) and ev.get("uuid") and isinstance(ev.get("counters"), dict):
            counters = {k: v for k, v in ev["counters"].items() if isinstance(v, int)}
            out.setdefault(f["node"], {})[ev["uuid"]] = counters
    return out


# ---- gpu.nic_affinity ------------------------------------------------------------------------------------

def nic_affinity(res, ctx: HostContext, sysfs_res=None) -> list[Finding]:
    """The node's compute rails (clustercert.checks.rails). Fixed names (hardware.nic_gpu): each HCA is PIX or
    PXB (hardware.rails.affinity where given) to its GPU in ``nvidia-smi topo -m``: under the same PCIe
    switch, so GPUDirect RDMA does not cross a host bridge. Discovered (hardware.rails): one pass per rail
    found (GPU, HCA, topo -m cell), or a fail naming what discovery found against the profile's count;
    evidence that did not run or parse is an error. A node whose mapping differs from its peers' is validate's
    finding (clustercert.checks.run: rails.peer_differences)."""
    check = "gpu.nic_affinity"
    hw = ctx.profile.hardware
    if not rails_mod.wanted(ctx.profile):
        return [_skip(check, "node", "profile has no compute rails (hardware.rails, hardware.nic_gpu)")]
    rec, errs = parsed("nvidia-smi-topo", res, (check,), ctx.timeout_s)
    if rec is None:
        return errs
    if not hw.nic_gpu:
        return _discovered(check, ctx, rec, sysfs_res)
    allowed = rails_mod.ALLOWED[hw.rails.affinity] if hw.rails is not None else SAME_SWITCH
    labels = {}
    for d in rec["devices"]:
        if d["kind"] == "nic":
            labels[d.get("nic_name") or d["name"]] = d["name"]
    out = []
    for hca, gpu in sorted(hw.nic_gpu.items()):
        expected = f"{' or '.join(allowed)} to GPU{gpu}: the same PCIe switch (profile hardware.nic_gpu)"
        label = labels.get(hca)
        if label is None:
            out.append(
                Finding(
                    check,
                    "fail",
                    hca,
                    expected,
                    "not in nvidia-smi topo -m (no NIC of that name)",
                    ", ".join(f"{v}: {k}" for k, v in sorted(labels.items())),
                )
            )
            continue
        g = f"GPU{gpu}"
        # a site lowered gpu.count and kept the mapping: the profile is wrong
        if gpu >= ctx.profile.gpu.count:
            out.append(Finding(check, "error", hca, expected, f"the profile maps {hca} to {g}, but its "
                               f"gpu.count is {ctx.profile.gpu.count}: fix hardware.nic_gpu"))
            continue
        rel = (rec["matrix"].get(g) or {}).get(label) or (rec["matrix"].get(label) or {}).get(g)
        row = rec["matrix"].get(label) or {}
        evidence = f"{label} ({hca}): " + " ".join(f"{k} {v}" for k, v in row.items() if k.startswith("GPU"))
        if rel is None or rel == "N/A":
            out.append(Finding(check, "error", hca, expected, f"no {g}/{label} cell in the matrix "
                               f"({'N/A' if rel else 'row or column missing'})", evidence))
            continue
        near = sorted(k for k, v in row.items() if k.startswith("GPU") and v in SAME_SWITCH)
        out.append(judge(check, rel in allowed, hca, expected,
                         f"{rel} to {g}" + ("" if rel in allowed else
                                            f" (same switch as: {', '.join(near) or 'no GPU'})"), evidence))
    return out


def _discovered(check: str, ctx: HostContext, topo: dict, sysfs_res) -> list[Finding]:
    spec = ctx.profile.hardware.rails
    sysfs, errs = parsed("sysfs-infiniband", sysfs_res, (check,), ctx.timeout_s)
    if sysfs is None:
        return [Finding(check, "error", "rails", f"{spec.count} rails discovered", f"rails not discovered: "
                        f"/sys/class/infiniband not read ({errs[0].observed})", errs[0].evidence)]
    nr = rails_mod.node_rails(ctx.profile, topo, sysfs)
    want = (f"{spec.count} {spec.rate_gbit_per_s} Gb/s {ctx.profile.ib.link_layer} rails, each "
            f"{' or '.join(rails_mod.ALLOWED[spec.affinity])} to its own GPU (profile hardware.rails)")
    shown = ", ".join(f"GPU{r.gpu} {r.hca} ({r.link})" for r in nr.found) or "none"
    if nr.problems:
        return [Finding(check, "fail", "rails", want, "; ".join(nr.problems), f"found: {shown}")]
    return [Finding(check, "pass", r.hca, f"{' or '.join(rails_mod.ALLOWED[spec.affinity])} to a GPU, "
                    f"{spec.rate_gbit_per_s} Gb/s {ctx.profile.ib.link_layer} (discovered: hardware.rails)",
                    f"{r.link} to GPU{r.gpu}" + (f", NUMA node {r.numa}" if r.numa is not None else ""),
                    f"rails: {shown}") for r in nr.found]


# ---- hw.pcie_manifest ----------------------------------------------------------------------------------

def _vendor(d: dict) -> str | None:
    vd = d.get("vendor_device")
    if vd:
        return vd.split(":")[0].lower()
    desc = d.get("description") or ""
    return "10de" if desc.startswith("NVIDIA") else "15b3" if desc.startswith("Mellanox") else None


def pci_devices(rec: dict, link_layer: str = "InfiniBand") -> dict[str, list[dict]]:
    """A parsed ``lspci`` record's GPUs, HCAs (physical functions of the link layer's class) and NVSwitches,
    each in bus order."""
    hca_class = (
        ("0207", "Infiniband controller") if link_layer == "InfiniBand" else ("0200", "Ethernet controller")
    )
    out: dict[str, list[dict]] = {"gpus": [], "hcas": [], "nvswitches": []}
    for d in sorted(rec["devices"], key=lambda d: d["bus_id"] or ""):
        v, cls, cid = _vendor(d), d.get("class") or "", d.get("class_id")
        if v == "10de" and (cid in ("0302", "0300") or cls in ("3D controller", "VGA compatible controller")):
            out["gpus"].append(d)
        elif v == "10de" and (cid == "0680" or cls == "Bridge"):
            out["nvswitches"].append(d)
        elif v == "15b3" and (cid == hca_class[0] or cls == hca_class[1]) \
                and "virtual function" not in (d.get("description") or "").lower():
            out["hcas"].append(d)
    return out


def _link(check: str, subject: str, d: dict, gen: int, width: int, evidence: str) -> Finding:
    expected = f"Gen{gen} ({GEN_GTS[gen]:g} GT/s) x{width} or better"
    lk = d.get("link")
    if not lk or lk.get("sta_speed_gt_s") is None or lk.get("sta_width") is None:
        return Finding(check, "error", subject, expected, "PCIe link status not readable (lspci -vv shows "
                       "the Express capability to root only)", evidence)
    speed, w = lk["sta_speed_gt_s"], lk["sta_width"]
    return judge(check, speed >= GEN_GTS[gen] and w >= width, subject, expected,
                 f"{speed:g} GT/s x{w}" + (" (downgraded)" if lk.get("downgraded") else ""),
                 f"LnkCap {lk.get('cap_speed_gt_s')} GT/s x{lk.get('cap_width')}, LnkSta {speed:g} GT/s x{w}")


def pcie_manifest(res, ctx: HostContext) -> list[Finding]:
    """The profile's GPUs, HCAs and NVSwitches are on the PCIe bus (lspci), the GPUs at the profile's link
    generation and width and the HCAs at hardware.hca_pcie_gen/width where the profile gives them."""
    check = "hw.pcie_manifest"
    p = ctx.profile
    rec, errs = parsed("lspci", res, (check,), ctx.timeout_s)
    if rec is None:
        if res is not None and res.ok and not res.stdout.strip():  # no NVIDIA or Mellanox function at all
            rec = {"devices": []}
        else:
            return errs
    devs = pci_devices(rec, p.ib.link_layer)
    hw = p.hardware
    out = []
    buses = {k: ", ".join(d["address"] for d in v) or "none" for k, v in devs.items()}
    n = len(devs["gpus"])
    out.append(judge(check, n == p.gpu.count, "GPUs", f"{p.gpu.count} NVIDIA GPUs (profile gpu.count)",
                     f"{n} on the PCIe bus", buses["gpus"], n, "devices"))
    for i, d in enumerate(devs["gpus"]):
        out.append(
            _link(check, f"GPU{i} {d['bus_id']}", d, p.gpu.pcie_gen, p.gpu.pcie_width, d["description"])
        )
    n = len(devs["hcas"])
    want = len({h.name for h in p.ib.hcas} | set(hw.nic_gpu if hw is not None else ()))
    want += hw.rails.count if hw is not None and hw.rails is not None and not hw.nic_gpu else 0
    out.append(judge(check, n >= want, "HCAs", f"at least {want} {p.ib.link_layer} HCA functions (profile "
                     "ib.hcas and compute rails)",
                     f"{n} on the PCIe bus", buses["hcas"], n, "devices"))
    if hw is not None and hw.hca_pcie_gen and hw.hca_pcie_width:
        for d in devs["hcas"]:
            out.append(
                _link(check, f"HCA {d['bus_id']}", d, hw.hca_pcie_gen, hw.hca_pcie_width, d["description"])
            )
    n = len(devs["nvswitches"])
    if not p.gpu.nvswitch:
        return out
    if hw is not None and hw.nvswitch_count:
        out.append(
            judge(
                check,
                n == hw.nvswitch_count,
                "NVSwitches",
                f"{hw.nvswitch_count} NVSwitches (profile hardware.nvswitch_count)",
                f"{n} on the PCIe bus",
                buses["nvswitches"],
                n,
                "devices",
            )
        )
    else:
        out.append(
            judge(
                check,
                n >= 1,
                "NVSwitches",
                "at least one NVSwitch (profile gpu.nvswitch; hardware.nvswitch_count not set)",
                f"{n} on the PCIe bus",
                buses["nvswitches"],
                n,
                "devices",
            )
        )
    return out


# ---- gpu.fabric_state ----------------------------------------------------------------------------------

def fabric_state(res, ctx: HostContext) -> list[Finding]:
    """NVSwitch systems: every GPU's NVLink fabric registration (nvidia-smi -q: Fabric State / Status) is
    Completed / Success. In Progress or Not Started, or a Completed registration with an error status, fails;
    a state or status that reads N/A (or Not Supported) is an error."""
    check = "gpu.fabric_state"
    if not ctx.profile.gpu.nvswitch:
        return [_skip(check, "node", "profile has no NVSwitch (gpu.nvswitch: false)")]
    rec, errs = parsed("nvidia-smi-xml", res, (check,), ctx.timeout_s)
    if rec is None:
        return errs
    out = []
    expected = "state Completed, status Success"
    for g in rec["gpus"]:
        subject = f"GPU{g['index']} {g.get('bus_id') or ''}".strip()
        fab = g.get("fabric")
        if fab is None:
            out.append(Finding(check, "error", subject, expected, "no fabric section in nvidia-smi -q -x"))
            continue
        state, status = fab.get("state"), fab.get("status")
        shown = f"state {state or 'N/A'}, status {status or 'N/A'}"
        if state is None:
            out.append(Finding(check, "error", subject, expected, f"{shown}: the state is not reported"))
        elif state != "Completed":
            out.append(Finding(check, "fail", subject, expected, shown))
        elif status is None:
            out.append(Finding(check, "error", subject, expected, f"{shown}: the status is not reported"))
        else:
            out.append(judge(check, status == "Success", subject, expected, shown))
    if not out:
        out.append(error(check, "no GPU in nvidia-smi -q -x", res, "node"))
    return out


# ---- hardware identity -------------------------------------------------------------------------------

def _try(kind: str, res) -> dict | None:
    if res is None or not res.ok:
        return None
    rec, _ = parsed(kind, res, ())
    return rec


def identity(ev: Evidence, link_layer: str = "InfiniBand") -> dict | None:
    """What the node's evidence says it is made of -- the certificate's per-node ``hardware``::

        {"board": {"system_manufacturer", "system_product", "system_serial", "system_uuid",
        "baseboard_serial",
                   "chassis_serial"} | None,
         "gpus": [{"index", "bus_id", "serial", "uuid", "vbios"}] | None,
         "hcas": [{"name", "node_guid", "fw_ver", "board_id"}] | None,
         "nvswitch_count": int | None}

    A part whose evidence did not run or did not parse is None (unknown, not absent); None when nothing is
    known at all."""
    out: dict = {"board": None, "gpus": None, "hcas": None, "nvswitch_count": None}
    if (rec := _try("nvidia-smi-xml", ev.get("nvsmi_xml"))) is not None:
        out["gpus"] = [
            {
                "index": g["index"],
                "bus_id": g.get("bus_id"),
                "serial": g.get("serial"),
                "uuid": g.get("uuid"),
                "vbios": g.get("vbios_version"),
            }
            for g in rec["gpus"]
        ]
    if (rec := _try("sysfs-infiniband", ev.get("hca_identity"))) is not None:
        out["hcas"] = [{"name": name, "node_guid": h.get("node_guid"), "fw_ver": h.get("fw_ver"),
                        "board_id": h.get("board_id")} for name, h in sorted(rec["hcas"].items())]
    if (rec := _try("dmidecode", ev.get("dmi"))) is not None:
        s, b, c = rec.get("system") or {}, rec.get("baseboard") or {}, rec.get("chassis") or {}
        out["board"] = {"system_manufacturer": s.get("manufacturer"), "system_product": s.get("product_name"),
                        "system_serial": s.get("serial_number"), "system_uuid": s.get("uuid"),
                        "baseboard_serial": b.get("serial_number"), "chassis_serial": c.get("serial_number")}
    res = ev.get("lspci")
    if res is not None and res.ok:
        rec = _try("lspci", res) if res.stdout.strip() else {"devices": []}
        if rec is not None:
            out["nvswitch_count"] = len(pci_devices(rec, link_layer)["nvswitches"])
    return out if any(v is not None for v in out.values()) else None


BOARD_KEYS = ("system_serial", "baseboard_serial", "chassis_serial")


def _matched_changes(part: str, old: dict, new: dict, label, text, ident) -> list[dict]:
    """Parts matched by key (``old``/``new``: key -> part): missing, added, or swapped where ``ident``
    differs. ``label(key, part)`` names a part, ``text(part)`` says what identifies it."""
    out: list[dict] = []
    for key in sorted(old.keys() | new.keys(), key=str):
        o, n = old.get(key), new.get(key)
        name = label(key, n or o)
        if n is None:
            out.append({"part": part, "name": name, "change": "missing", "before": text(o),
                        "after": "missing"})
        elif o is None:
            out.append({"part": part, "name": name, "change": "added", "before": "none", "after": text(n)})
        elif ident(o) != ident(n):
            out.append({"part": part, "name": name, "change": "swapped", "before": text(o), "after": text(n)})
    return out


def _both(before: dict, after: dict, key: str) -> bool:
    return before.get(key) is not None and after.get(key) is not None


def identity_changes(before: dict, after: dict) -> list[dict]:
    """Every part swapped, gone or new from ``before`` to ``after`` (two ``identity`` records of one node), as
    {"part": gpu|hca|board|nvswitch, "name", "change": swapped|missing|added|changed, "before", "after"}. GPUs
    are matched by PCI bus id (their slot), HCAs by name; a part kind unknown on either side is not compared.
    Firmware is not a part: its change is the state checks' (ib.firmware, the uniform checks)."""
    out: list[dict] = []
    if _both(before, after, "gpus"):
        out += _matched_changes("gpu", {g["bus_id"]: g for g in before["gpus"]},
                                {g["bus_id"]: g for g in after["gpus"]},
                                lambda bus, g: f"GPU{g['index']} {bus}",
                                lambda g: f"serial {g.get('serial')}, UUID {g.get('uuid')}",
                                lambda g: (g.get("serial"), g.get("uuid")))
    if _both(before, after, "hcas"):
        out += _matched_changes("hca", {h["name"]: h for h in before["hcas"]},
                                {h["name"]: h for h in after["hcas"]},
                                lambda name, h: name, lambda h: f"GUID {h.get('node_guid')}",
                                lambda h: h.get("node_guid"))
    if _both(before, after, "board"):
        for key in BOARD_KEYS:
            o, n = before["board"].get(key), after["board"].get(key)
            if o != n:
                out.append(
                    {
                        "part": "board",
                        "name": key.replace("_", " "),
                        "change": "swapped",
                        "before": str(o),
                        "after": str(n),
                    }
                )
    o, n = before.get("nvswitch_count"), after.get("nvswitch_count")
    if o is not None and n is not None and o != n:
        out.append({"part": "nvswitch", "name": "NVSwitches", "change": "missing" if n < o else "added",
                    "before": f"{o} NVSwitches", "after": f"{n} NVSwitches"})
    return out
