"""Fault injection for lab nodes: the FAULTS table, validate(), apply(), heal().

Hardware faults edit the node's hw.json (the simulated tools read it on every call and the
node's agent mirrors it into sysfs within a second). Configuration faults change the node the
way a person or an upgrade would, through NodeHandle.exec (``labsim fault apply``: edit limits,
remove the nvidia runtime, unload a module, stop time sync, apt-get install another version).
link_slow re-shapes the node's fabric link (NodeHandle.set_link_rate), storage_slow throttles its disk
writes (NodeHandle.set_io_limit); node_down powers it off.
Every kind has defaults; docs/lab-faults.md is the table a user reads.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass, field
from typing import Any

from clustercert.model.profile import load_profile
from clustercert_lab import hardware, packages

NODE_LABSIM = ["/usr/bin/python3", "/var/lib/clustercert-lab/labsim"]
IB_RATES = (10, 20, 40, 56, 100, 200, 400, 800)
SPEED_NAME = {800: "XDR", 400: "NDR", 200: "HDR", 100: "EDR", 56: "FDR", 40: "QDR", 20: "DDR", 10: "SDR"}
HANGABLE_TOOLS = ("nvidia-smi", "ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_write_lat", "ib_read_lat",
                  "ib_send_lat", "all_reduce_perf", "all_gather_perf", "nvbandwidth", "dcgmi", "nvidia-ctk",
                  "ibv_devinfo", "ibdev2netdev")
DRIFT_FAMILIES = {"libnccl2": "nccl", "libnccl-dev": "nccl", "nvidia-container-toolkit": "ctk",
                  "nvidia-container-toolkit-base": "ctk", "libnvidia-container-tools": "ctk",
                  "libnvidia-container1": "ctk"}
XID_TEXT = {
    13: "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
    31: "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f5f_4c000000.",
    43: "pid=4242, name=python3, Ch 00000010",
    45: "pid=4242, name=python3, Ch 00000010",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 2, "
        "subpartition 0.",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap row, reset gpu to activate.",
    74: "NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    92: "High single-bit ECC error rate.",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: SM (0x1). RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) "
         "(0x20800a4c 0x4).",
}


@dataclass(frozen=True)
class Param:
    name: str
    type: type
    default: Any
    choices: tuple | None = None


@dataclass(frozen=True)
class FaultKind:
    kind: str
    params: dict[str, Param] = field(default_factory=dict)
    check: str = ""
    hardware: bool = True
    changes: str = ""


def _p(*params: Param) -> dict[str, Param]:
    return {p.name: p for p in params}


GPU = Param("gpu", int, 0)
NVLINK_CRC_ADDED, NVLINK_REPLAY_ADDED = 1000, 150  # nvlink_crc_errors: above the profiles' ceilings of 100
# gpu_fabric_degraded: the NVML error string its fabric status shows (nvmlErrorString)
FABRIC_ERROR = "Timeout"
HCA = Param("hca", str, None)
PORT = Param("port", int, 1)

FAULTS: dict[str, FaultKind] = {f.kind: f for f in [
    FaultKind("gpu_missing", _p(Param("gpu", int, -1)), "gpu.count", True,
              "the GPU (default: the last one) disappears from nvidia-smi, nvbandwidth, nccl-tests"),
    FaultKind("gpu_ecc_uncorrectable", _p(GPU), "gpu.ecc", True,
              "+1 volatile and aggregate DRAM uncorrectable ECC error; Xid 48 in the kernel log"),
    FaultKind("gpu_row_remap_pending", _p(GPU), "gpu.row_remap", True,
              "remapped rows: uncorrectable +1, pending Yes; Xid 63 in the kernel log; dcgmi diag fails"),
    FaultKind("gpu_xid", _p(GPU, Param("xid", int, 79)), "gpu.xid", True,
              "an NVRM Xid event for the GPU in the node's kernel log (dmesg)"),
    FaultKind("gpu_pcie_degraded", _p(GPU), "gpu.pcie_link", True,
              "current PCIe link gen max-1 and width x8 (host<->GPU bandwidth / 4 in nvbandwidth)"),
    FaultKind("gpu_clock_throttle", _p(GPU), "gpu.throttle", True,
              "clocks event reasons HW Slowdown + HW Thermal Slowdown active, 92 C, graphics clock 1005 MHz"),
    FaultKind("nvlink_down", _p(GPU, Param("port", int, 0)), "gpu.nvlink", True,
              "NVLink link PORT of the GPU <inactive> (nvlink -s), NV17 in topo -m, lower D2D bandwidth"),
    FaultKind("driver_version_mismatch", _p(Param("version", str, None)), "driver.module_loaded", False,
              "apt-get installs the other driver version from the lab repo without a reboot: the loaded "
              "module stays, nvidia-smi reports 'Driver/library version mismatch' (the GPU checks then "
              "error)"),
    FaultKind("fabricmanager_stopped", {}, "gpu.fabricmanager", False,
              "systemctl stop nvidia-fabricmanager: GPU fabric state 'In Progress', CUDA apps fail "
              "'system not yet initialized'"),
    FaultKind("peermem_unloaded", {}, "rdma.peermem", False,
              "modprobe -r nvidia_peermem (applied once it is loaded if not yet)"),
    FaultKind("ib_port_down", _p(HCA, PORT), "ib.port_state", True,
              "port state DOWN / Polling in sysfs (ibstat), ibv_devinfo PORT_DOWN, its IPoIB netdev goes "
              "down"),
    FaultKind("ib_port_rate_degraded", _p(HCA, PORT, Param("rate", int, 200, IB_RATES)), "ib.port_rate", True,
              "port rate RATE Gb/s in sysfs/ibstat; ib_write_bw scales by RATE/rated"),
    FaultKind("ib_symbol_errors", _p(HCA, PORT), "ib.counters", True,
              "port counters symbol_error +1000, link_error_recovery +2"),
    FaultKind("bond_slave_down", _p(Param("slave", str, "ib0")), "ib.bond", True,
              "the slave's link goes down (ip link set SLAVE down inside the node): bond0 fails over, "
              "bonding_slave/mii_status down, link failure count +1"),
    FaultKind("link_slow", _p(Param("fabric", int, 0, (0, 1)), Param("factor", float, 0.3)), "probe.iperf3",
              True, "the node's fabric link is re-shaped (tc tbf) to link_mbit x FACTOR, both directions"),
    FaultKind("nccl_busbw_low", _p(Param("factor", float, 0.5)), "probe.nccl_allreduce", True,
              "all_reduce_perf bus bandwidth x FACTOR"),
    FaultKind("container_runtime_unconfigured", {}, "container.runtime", False,
              "the nvidia runtime is removed from the container runtime's config (containerd config.toml, "
              "docker daemon.json, crio drop-in) and the runtime restarted"),
    FaultKind("memlock_limited", {}, "tuning.memlock", False,
              "/etc/security/limits.d/zz-local-memlock.conf limits memlock to 64 KiB"),
    FaultKind("clock_unsynced", {}, "time.sync", False,
              "time synchronisation stopped and disabled (chrony/timesyncd/ntp), timedatectl set-ntp false"),
    FaultKind("node_down", {}, "unreachable", True, "the node is powered off (its systemd-nspawn stops)"),
    FaultKind("probe_hang", _p(Param("tool", str, "all_reduce_perf", HANGABLE_TOOLS)),
              "probe.nccl_allreduce", True,
              "the simulated TOOL never returns (until killed); the check or probe running TOOL (by default "
              "probe.nccl_allreduce) must report a timeout error"),
    FaultKind("package_drift",
              _p(Param("package", str, "libnccl2", tuple(DRIFT_FAMILIES)), Param("version", str, None)),
              "packages.pinned", False,
              "apt-get installs the other version of PACKAGE from the lab repo (as an unattended upgrade "
              "would)"),
    FaultKind("nvlink_crc_errors", _p(GPU, Param("port", int, 0)), "gpu.nvlink_errors", True,
              f"NVLink link PORT of the GPU counts +{NVLINK_CRC_ADDED} CRC errors and +{NVLINK_REPLAY_ADDED} "
              "replays (nvidia-smi nvlink -e, dcgmi nvlink -e)"),
    FaultKind("hca_moved", _p(HCA), "gpu.nic_affinity", True,
              "the HCA sits in a slot of the other CPU socket, under no GPU's PCIe switch (nvidia-smi topo "
              "-m: SYS to the GPU it should sit beside)"),
    FaultKind("pcie_device_missing", {}, "hw.pcie_manifest", True,
              "the node's last NVSwitch is gone from the PCIe bus (lspci lists one fewer)"),
    FaultKind("hca_firmware_odd", _p(HCA, Param("version", str, None)), "ib.firmware_uniform", True,
              "the HCA runs another firmware (sysfs fw_ver, ibv_devinfo); default: its minor version - 1"),
    FaultKind("gpu_vbios_odd", _p(GPU, Param("version", str, None)), "gpu.vbios_uniform", True,
              "the GPU runs another VBIOS (nvidia-smi); default: its last group + 1"),
    FaultKind("gpu_fabric_degraded", _p(GPU), "gpu.fabric_state", True,
              f"the GPU's NVLink fabric registration completes with status '{FABRIC_ERROR}' (nvidia-smi -q "
              "Fabric)"),
    FaultKind("gpu_swapped", _p(GPU), "hardware.gpu", True,
              "the GPU in that slot is another board: a new serial number and UUID (nvidia-smi, dcgmi)"),
    # issue 22
    FaultKind("gdr_disabled", {}, "probe.nccl_transport", True,
              "nvidia_peermem stays loaded but GPUDirect RDMA is not used (as with PCIe ACS on between GPU "
              "and NIC): ib_write_bw --use_cuda moves GPU memory through the CPU (bandwidth x 0.3), NCCL's "
              "connections of this node lose GDRDMA"),
    FaultKind("mount_missing", {}, "storage.mounts", False,
              "umount /shared inside the node (the shared mount jobs read data from is gone; its directory "
              "stays)"),
    FaultKind("storage_slow", _p(Param("mbyte_per_s", float, 2.0)), "probe.checkpoint_write", True,
              "the node's writes to the lab's disk are throttled to MBYTE_PER_S (its cgroup's blkio/io write "
              "limit): a checkpoint to /shared or /scratch writes that slowly"),
    # issue 33
    FaultKind("rank_slow", _p(Param("factor", float, 8.0)), "probe.ddp_step", True,
              "the node's CPU time is capped at 1/FACTOR of one CPU (its cgroup's cpu.cfs_quota_us over a 10 "
              "ms cpu.cfs_period_us, or cpu.max on cgroup v2): everything on the node, its DDP ranks too, "
              "runs at least FACTOR times slower"),
    FaultKind("nccl_one_host", {}, "probe.nccl_allreduce", True,
              "the simulated launch of an nccl-tests run across nodes that includes this node puts every "
              "rank on the run's first host (as a hostfile the launcher ignored, or nccl-tests built without "
              "MPI): its rank lines name one host, its figure is that host's NVLink one"),
    FaultKind("nccl_scale_slow", _p(Param("factor", float, 0.5)), "probe.nccl_cluster", True,
              "an nccl-tests run across more than two nodes that includes this node reaches FACTOR x its "
              "rails' figure (as an oversubscribed or slow spine does); a pair's run is not slowed"),
]}


# ---------------------------------------------------------------- validation

def _profile(hw: dict) -> dict:
    return load_profile(hw.get("profile", "lab")).model_dump()


def repo_versions(hw: dict) -> dict[str, dict[str, str]]:
    return packages.versions(_profile(hw))


def _convert(p: Param, value: Any) -> Any:
    if p.type is int:
        try:
            return int(str(value), 0)
        except ValueError:
            raise ValueError(f"{p.name}: expected an integer, got {value!r}") from None
    if p.type is float:
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"{p.name}: expected a number, got {value!r}") from None
    return str(value)


def validate(kind: str, params: dict, hw: dict, healing: bool = False) -> dict:
    """Normalised params for ``kind`` on the node described by ``hw``; ValueError('<param>: <reason>')."""
    if kind not in FAULTS:
        raise ValueError(f"kind: unknown fault kind {kind!r} (known: {', '.join(sorted(FAULTS))})")
    fk = FAULTS[kind]
    params = dict(params or {})
    for name in params:
        if name not in fk.params:
            known = ", ".join(fk.params) or "none"
            raise ValueError(f"{name}: not a parameter of {kind} (parameters: {known})")
    out: dict[str, Any] = {}
    for name, p in fk.params.items():
        out[name] = _convert(p, params[name]) if name in params else p.default
    _check_gpu(kind, out, hw.get("gpus", []))
    _check_hca(out, hw.get("hcas", []))
    _check_version(kind, out, hw, healing)
    _check_node_has(kind, out, hw)
    _check_range(kind, out)
    return out


def _check_gpu(kind: str, out: dict, gpus: list[dict]) -> None:
    """``gpu`` (-1: the last) is a GPU of the node; ``port``, for an NVLink fault, one of its links."""
    if "gpu" in out:
        if out["gpu"] == -1:
            out["gpu"] = len(gpus) - 1
        if not 0 <= out["gpu"] < len(gpus):
            raise ValueError(f"gpu: {out['gpu']} is not a GPU index of this node (0..{len(gpus) - 1})")
    if kind in ("nvlink_down", "nvlink_crc_errors"):
        links = gpus[out["gpu"]]["nvlink"]["links"]
        if not 0 <= out["port"] < links:
            raise ValueError(f"port: NVLink link {out['port']} does not exist (0..{links - 1})")


def _check_hca(out: dict, hcas: list[dict]) -> None:
    """``hca`` (None: the first) is an HCA of the node; ``port``, where given, one of its ports."""
    if "hca" not in out:
        return
    names = [h["name"] for h in hcas]
    if out["hca"] is None:
        out["hca"] = names[0] if names else None
    if out["hca"] not in names:
        raise ValueError(f"hca: {out['hca']!r} is not an HCA of this node (known: {', '.join(names)})")
    hca = next(h for h in hcas if h["name"] == out["hca"])
    ports = [pt["port"] for pt in hca["ports"]]
    if "port" in out and out["port"] not in ports:
        raise ValueError(f"port: {out['hca']} has no port {out['port']} (ports: {ports})")


def _check_version(kind: str, out: dict, hw: dict, healing: bool) -> None:
    """The version an odd-firmware/VBIOS or drift fault puts on the node (None: one that differs)."""
    if kind == "hca_firmware_odd":
        fw = next(h for h in hw.get("hcas", []) if h["name"] == out["hca"])["fw_ver"]
        if out["version"] is None:
            major, minor, *rest = fw.split(".")
            out["version"] = ".".join([major, str(int(minor) - 1 if int(minor) > 0 else 1), *rest])
        if out["version"] == fw and not healing:  # healing: the node runs the fault's version, as it should
            raise ValueError(f"version: {fw} is the firmware {out['hca']} runs already")
    elif kind == "gpu_vbios_odd":
        vbios = hw.get("gpus", [])[out["gpu"]]["vbios_version"]
        if out["version"] is None:
            head, _, last = vbios.rpartition(".")
            out["version"] = f"{head}.{(int(last, 16) + 1) % 256:02X}"
        if out["version"] == vbios and not healing:
            raise ValueError(f"version: {vbios} is the VBIOS GPU {out['gpu']} runs already")
    elif kind == "package_drift":
        _check_package_drift(out, hw)
    elif kind == "driver_version_mismatch":
        _check_driver_version(out, hw)


def _check_driver_version(out: dict, hw: dict) -> None:
    fam = repo_versions(hw)["driver"]
    if out["version"] is None:
        out["version"] = fam["alt"]
    if out["version"] not in fam.values():
        raise ValueError(f"version: {out['version']!r} is not a driver version in the lab repo "
                         f"(versions: {', '.join(fam.values())})")
    if out["version"] == fam["main"]:
        raise ValueError(f"version: {out['version']} is the profile's driver version (no mismatch)")


def _check_package_drift(out: dict, hw: dict) -> None:
    if out["package"] not in DRIFT_FAMILIES:
        raise ValueError(f"package: {out['package']!r} has no other version in the lab repo "
                         f"(choices: {', '.join(DRIFT_FAMILIES)})")
    fam = repo_versions(hw)[DRIFT_FAMILIES[out["package"]]]
    if out["version"] is None:
        out["version"] = fam["alt"]
    if out["version"] not in fam.values():
        raise ValueError(f"version: {out['version']!r} of {out['package']} is not in the lab repo "
                         f"(versions: {', '.join(fam.values())})")


def _check_node_has(kind: str, out: dict, hw: dict) -> None:
    """What the fault takes away or slows is on the node: an NVSwitch on the bus, a bond slave, a fabric."""
    hcas = hw.get("hcas", [])
    if kind == "pcie_device_missing" and not [s for s in hw.get("nvswitches", []) if s.get("on_bus", True)]:
        raise ValueError("kind: pcie_device_missing takes an NVSwitch off the bus: this node has none")
    if kind == "bond_slave_down":
        slaves = [pt.get("netdev") for h in hcas for pt in h["ports"] if pt.get("netdev")]
        if out["slave"] not in slaves:
            raise ValueError(f"slave: {out['slave']!r} is not a bond slave of this node "
                             f"(choices: {', '.join(slaves)})")
    if kind == "link_slow":
        fabrics = sorted({pt.get("fabric", 0) for h in hcas for pt in h["ports"]})
        if out["fabric"] not in fabrics:
            raise ValueError(f"fabric: {out['fabric']} is not a fabric of this node (choices: {fabrics})")


def _check_range(kind: str, out: dict) -> None:
    """A rate, factor, throughput, Xid or tool within what the fault takes."""
    if kind == "ib_port_rate_degraded" and out["rate"] not in IB_RATES:
        raise ValueError(f"rate: {out['rate']} is not an InfiniBand rate ({', '.join(map(str, IB_RATES))})")
    if kind == "rank_slow":
        if not 1 < out["factor"] <= 100:
            raise ValueError(f"factor: {out['factor']} must be in (1, 100] (how many times slower the node "
                             "runs)")
    elif "factor" in out and not 0 < out["factor"] <= 1:
        raise ValueError(f"factor: {out['factor']} must be in (0, 1]")
    if kind == "storage_slow" and not 0 < out["mbyte_per_s"] <= 100000:
        raise ValueError(f"mbyte_per_s: {out['mbyte_per_s']} must be in (0, 100000]")
    if kind == "gpu_xid" and not 1 <= out["xid"] <= 255:
        raise ValueError(f"xid: {out['xid']} is not an Xid number (1..255)")
    if kind == "probe_hang" and out["tool"] not in HANGABLE_TOOLS:
        raise ValueError(f"tool: {out['tool']!r} is not a simulated tool (choices: "
                         f"{', '.join(HANGABLE_TOOLS)})")


# ---------------------------------------------------------------- apply / heal

def _key(kind: str, params: dict) -> str:
    return kind + json.dumps(params, sort_keys=True)


def _gpu(hw: dict, i: int) -> dict:
    return next(g for g in hw["gpus"] if g["index"] == i)


def _port(hw: dict, hca: str, port: int) -> dict:
    h = next(h for h in hw["hcas"] if h["name"] == hca)
    return next(p for p in h["ports"] if p["port"] == port)


def _add_xid(hw: dict, gpu: int, xid: int, key: str) -> None:
    hw.setdefault("xid_events", []).append(
        {"gpu": gpu, "xid": xid, "message": XID_TEXT.get(xid, "Graphics Exception"), "time": time.time(),
         "fault": key})


def _apply_hw(hw: dict, kind: str, p: dict, key: str) -> None:
    """The fault ``kind`` put into the hardware description ``hw``; ``hw["fault_state"][key]``: what heal puts
    back."""
    saved = hw.setdefault("fault_state", {})
    if kind in _GPU_KINDS:
        _apply_gpu_fault(hw, kind, p, saved, key)
    elif kind in _LINK_KINDS:
        _apply_link_fault(hw, kind, p, saved, key)
    elif kind in _HEALTH_KINDS:
        _apply_health_fault(hw, kind, p, saved, key)
    else:
        _apply_evidence_fault(hw, kind, p, saved, key)


# the hardware faults by what they change: a GPU's state, an IB port or netdev, the simulated tools' health
_GPU_KINDS = frozenset({"gpu_missing", "gpu_ecc_uncorrectable", "gpu_row_remap_pending", "gpu_xid",
                        "gpu_pcie_degraded", "gpu_clock_throttle", "nvlink_down"})
_LINK_KINDS = frozenset({"ib_port_down", "ib_port_rate_degraded", "ib_symbol_errors", "bond_slave_down",
                         "link_slow"})
_HEALTH_KINDS = frozenset({"nccl_busbw_low", "probe_hang", "gdr_disabled", "storage_slow", "rank_slow",
                           "nccl_one_host", "nccl_scale_slow"})


def _apply_gpu_fault(hw: dict, kind: str, p: dict, saved: dict, key: str) -> None:
    if kind == "gpu_xid":
        _add_xid(hw, p["gpu"], p["xid"], key)
        return
    g = _gpu(hw, p["gpu"])
    if kind == "gpu_missing":
        g["present"] = False
    elif kind == "gpu_ecc_uncorrectable":
        saved[key] = copy.deepcopy(g["ecc"])
        g["ecc"]["volatile"]["dram_uncorrectable"] += 1
        g["ecc"]["aggregate"]["dram_uncorrectable"] += 1
        _add_xid(hw, p["gpu"], 48, key)
    elif kind == "gpu_row_remap_pending":
        saved[key] = copy.deepcopy(g["remapped_rows"])
        g["remapped_rows"]["uncorrectable"] += 1
        g["remapped_rows"]["pending"] = True
        _add_xid(hw, p["gpu"], 63, key)
    elif kind == "gpu_pcie_degraded":
        saved[key] = copy.deepcopy(g["pcie"])
        g["pcie"]["gen_current"] = max(1, g["pcie"]["gen_max"] - 1)
        g["pcie"]["width_current"] = min(8, g["pcie"]["width_max"])
    elif kind == "gpu_clock_throttle":
        saved[key] = {"throttle": g["throttle"], "temperature_c": g["temperature_c"],
                      "clocks": dict(g["clocks"])}
        g["throttle"] = ["hw_slowdown", "hw_thermal_slowdown"]
        g["temperature_c"] = 92
        g["clocks"]["graphics_mhz"] = g["clocks"]["sm_mhz"] = 1005
    elif kind == "nvlink_down" and p["port"] not in g["nvlink"]["down"]:
        g["nvlink"]["down"].append(p["port"])


def _apply_link_fault(hw: dict, kind: str, p: dict, saved: dict, key: str) -> None:
    if kind == "ib_port_down":
        pt = _port(hw, p["hca"], p["port"])
        saved[key] = {"state": pt["state"], "phys_state": pt["phys_state"]}
        pt["state"], pt["phys_state"] = "DOWN", "Polling"
    elif kind == "ib_port_rate_degraded":
        pt = _port(hw, p["hca"], p["port"])
        saved[key] = {"rate_gbit_per_s": pt["rate_gbit_per_s"], "speed": pt["speed"]}
        pt["rate_gbit_per_s"] = p["rate"]
        pt["speed"] = SPEED_NAME.get(p["rate"], pt["speed"])
    elif kind == "ib_symbol_errors":
        pt = _port(hw, p["hca"], p["port"])
        saved[key] = {"counters": dict(pt["counters"])}
        pt["counters"]["symbol_error"] += 1000
        pt["counters"]["link_error_recovery"] += 2
    elif kind == "bond_slave_down":
        nd = hw.setdefault("netdevs_down", [])
        if p["slave"] not in nd:
            nd.append(p["slave"])
    elif kind == "link_slow":
        hw["health"].setdefault("link_factor", {})[str(p["fabric"])] = p["factor"]


def _apply_health_fault(hw: dict, kind: str, p: dict, saved: dict, key: str) -> None:
    health = hw["health"]
    if kind == "nccl_busbw_low":
        saved[key] = {"nccl_factor": health.get("nccl_factor", 1.0)}
        health["nccl_factor"] = p["factor"]
    elif kind == "probe_hang":
        if p["tool"] not in hw["hanging_tools"]:
            hw["hanging_tools"].append(p["tool"])
    elif kind == "gdr_disabled":
        health["gdr"] = False
    elif kind == "storage_slow":
        health["io_write_bps"] = int(p["mbyte_per_s"] * 1e6)
    elif kind == "rank_slow":
        health["cpu_slow_factor"] = p["factor"]  # a record of the fault; the node's cgroup slows it
    elif kind == "nccl_one_host":
        health["nccl_one_host"] = True
    elif kind == "nccl_scale_slow":
        health["nccl_scale_factor"] = p["factor"]


def _apply_evidence_fault(hw: dict, kind: str, p: dict, saved: dict, key: str) -> None:
    """The faults of the hardware evidence checks (issue 21): NVLink error counters, an HCA's slot, an
    NVSwitch off the bus, odd firmware/VBIOS, a degraded fabric registration, a swapped GPU. ``saved[key]``:
    what heal puts back."""
    if kind == "nvlink_crc_errors":
        nv = _gpu(hw, p["gpu"])["nvlink"]
        saved[key] = {"errors": copy.deepcopy(nv.get("errors"))}
        link = nv.setdefault("errors", {}).setdefault(str(p["port"]), {"crc": 0, "replay": 0, "recovery": 0})
        link["crc"] = link.get("crc", 0) + NVLINK_CRC_ADDED
        link["replay"] = link.get("replay", 0) + NVLINK_REPLAY_ADDED
    elif kind == "hca_moved":
        h = next(h for h in hw["hcas"] if h["name"] == p["hca"])
        saved[key] = {k: h[k] for k in ("numa_node", "switch_gpu") if k in h}
        numas = sorted({g["numa_node"] for g in hw["gpus"]} | {h["numa_node"]})
        h["numa_node"] = next((n for n in numas if n != h["numa_node"]), h["numa_node"])
        h["switch_gpu"] = None
    elif kind == "pcie_device_missing":
        sw = [s for s in hw["nvswitches"] if s.get("on_bus", True)][-1]
        saved[key] = {"index": sw["index"], "had_flag": "on_bus" in sw}
        sw["on_bus"] = False
    elif kind == "hca_firmware_odd":
        h = next(h for h in hw["hcas"] if h["name"] == p["hca"])
        saved[key] = {"fw_ver": h["fw_ver"]}
        h["fw_ver"] = p["version"]
    elif kind == "gpu_vbios_odd":
        g = _gpu(hw, p["gpu"])
        saved[key] = {"vbios_version": g["vbios_version"]}
        g["vbios_version"] = p["version"]
    elif kind == "gpu_fabric_degraded":
        _gpu(hw, p["gpu"])["fabric_error"] = FABRIC_ERROR
    elif kind == "gpu_swapped":
        g = _gpu(hw, p["gpu"])
        saved[key] = {"uuid": g["uuid"], "serial": g["serial"]}
        g["uuid"] = hardware.gpu_uuid(f"{hw['node']}/swapped", p["gpu"])
        g["serial"] = hardware.gpu_serial(f"{hw['node']}/swapped", p["gpu"])


def _heal_evidence_fault(hw: dict, kind: str, p: dict, saved: dict | None) -> None:
    if kind == "nvlink_crc_errors" and saved:
        nv = _gpu(hw, p["gpu"])["nvlink"]
        if saved["errors"] is None:
            nv.pop("errors", None)
        else:
            nv["errors"] = saved["errors"]
    elif kind == "hca_moved" and saved:
        h = next(h for h in hw["hcas"] if h["name"] == p["hca"])
        h.pop("switch_gpu", None)
        h.update(saved)
    elif kind == "pcie_device_missing" and saved:
        sw = next(s for s in hw["nvswitches"] if s["index"] == saved["index"])
        if saved["had_flag"]:
            sw["on_bus"] = True
        else:
            sw.pop("on_bus", None)
    elif kind == "hca_firmware_odd" and saved:
        next(h for h in hw["hcas"] if h["name"] == p["hca"]).update(saved)
    elif kind == "gpu_vbios_odd" and saved:
        _gpu(hw, p["gpu"]).update(saved)
    elif kind == "gpu_fabric_degraded":
        _gpu(hw, p["gpu"]).pop("fabric_error", None)
    elif kind == "gpu_swapped" and saved:
        _gpu(hw, p["gpu"]).update(saved)


def _heal_hw(hw: dict, kind: str, p: dict, key: str) -> None:
    """The fault ``kind`` taken out of ``hw``: what _apply_hw saved put back."""
    saved = hw.setdefault("fault_state", {}).pop(key, None)
    hw["xid_events"] = [e for e in hw.get("xid_events", []) if e.get("fault") != key]
    if kind in _GPU_KINDS:
        _heal_gpu_fault(hw, kind, p, saved)
    elif kind in _LINK_KINDS:
        _heal_link_fault(hw, kind, p, saved)
    elif kind in _HEALTH_KINDS:
        _heal_health_fault(hw, kind, p, saved)
    else:
        _heal_evidence_fault(hw, kind, p, saved)


def _heal_gpu_fault(hw: dict, kind: str, p: dict, saved: dict | None) -> None:
    if kind == "gpu_xid":  # its event, gone already
        return
    g = _gpu(hw, p["gpu"])
    if kind == "gpu_missing":
        g["present"] = True
    elif kind == "nvlink_down":
        if p["port"] in g["nvlink"]["down"]:
            g["nvlink"]["down"].remove(p["port"])
    elif not saved:
        return
    elif kind == "gpu_ecc_uncorrectable":
        g["ecc"] = saved
    elif kind == "gpu_row_remap_pending":
        g["remapped_rows"] = saved
    elif kind == "gpu_pcie_degraded":
        g["pcie"] = saved
    elif kind == "gpu_clock_throttle":
        g.update(saved)


def _heal_link_fault(hw: dict, kind: str, p: dict, saved: dict | None) -> None:
    if kind in ("ib_port_down", "ib_port_rate_degraded", "ib_symbol_errors") and saved:
        _port(hw, p["hca"], p["port"]).update(saved)
    elif kind == "bond_slave_down":
        if p["slave"] in hw.get("netdevs_down", []):
            hw["netdevs_down"].remove(p["slave"])
    elif kind == "link_slow":
        hw["health"].get("link_factor", {}).pop(str(p["fabric"]), None)


# the health keys a fault sets, which its healing removes
_HEALTH_KEY = {"gdr_disabled": "gdr", "storage_slow": "io_write_bps", "rank_slow": "cpu_slow_factor",
               "nccl_one_host": "nccl_one_host", "nccl_scale_slow": "nccl_scale_factor"}


def _heal_health_fault(hw: dict, kind: str, p: dict, saved: dict | None) -> None:
    if kind == "nccl_busbw_low":
        if saved:
            hw["health"]["nccl_factor"] = saved["nccl_factor"]
    elif kind == "probe_hang":
        if p["tool"] in hw["hanging_tools"]:
            hw["hanging_tools"].remove(p["tool"])
    else:
        hw["health"].pop(_HEALTH_KEY[kind], None)


def _node_exec(node, argv: list[str], timeout: float = 900) -> str:
    r = node.exec(argv, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{node.name}: {' '.join(argv[2:5])} failed (exit {r.returncode}): "
                           f"{(r.stderr or r.stdout or '').strip()[-800:]}")
    return (r.stdout or "").strip()


APPLY_WAIT_S = 15.0  # how long a fault or heal waits for the node to show it


class NotApplied(RuntimeError):
    """The node did not show a fault (or its healing) in time."""


def _netdevs_settled(node, hw: dict) -> bool:
    """Every IPoIB netdev the hardware has down is down on the node (a bond slave: its bond saw it), and
    every other one is up (a bond slave: its bond saw that too)."""
    down = set(hw.get("netdevs_down", []))
    for h in hw.get("hcas", []):
        for p in h["ports"]:
            if p.get("netdev") and p["state"] != "ACTIVE":
                down.add(p["netdev"])
    netdevs = sorted({p["netdev"] for h in hw.get("hcas", []) for p in h["ports"] if p.get("netdev")})
    if not netdevs:
        return True
    checks = []
    for nd in netdevs:  # the administrative state the agent sets, and the bond's view of the slave
        up, mii = ("1", "up") if nd not in down else ("0", "down")
        checks.append(f"if [ -e /sys/class/net/{nd} ]; then [ $(ip -o link show {nd} | grep -c ',UP') = {up} "
                      f"] || exit 1; m=/sys/class/net/{nd}/bonding_slave/mii_status; [ ! -e $m ] || grep -qx "
                      f"{mii} $m || exit 1; fi")
    r = node.exec(["sh", "-c", "; ".join(checks)], timeout=10)
    return r.returncode == 0


def wait_applied(node, hw: dict, timeout: float = APPLY_WAIT_S) -> None:
    """Return once ``node`` shows ``hw`` (saved with hardware.save): its agent has brought that generation
    onto the node's sysfs and netdevs, and the netdevs (and their bond) have followed. NotApplied after
    ``timeout``. A node that is not running shows nothing: nothing to wait for."""
    if node.init_pid() is None:
        return
    gen = int(hw.get("generation", 0))
    deadline = time.monotonic() + timeout
    while True:
        if node.agent_applied() >= gen and _netdevs_settled(node, hw):
            return
        if time.monotonic() > deadline:
            raise NotApplied(f"{node.name}: the node did not show the change within {timeout:g} s "
                             f"(its agent applied generation {node.agent_applied()} of {gen})")
        time.sleep(0.05)


def apply(node, kind: str, params: dict) -> None:
    """Inject ``kind`` on ``node`` (a NodeHandle); returns once the node shows it."""
    hw = hardware.load(node.sim_dir)
    p = validate(kind, params, hw)
    key = _key(kind, p)
    if kind == "node_down":
        node.power_off()
        return
    if kind == "link_slow":
        node.set_link_rate(p["fabric"], hw.get("link_mbit", 1000) * p["factor"])
    if kind == "storage_slow":
        node.set_io_limit(int(p["mbyte_per_s"] * 1e6))
    if kind == "rank_slow":
        node.set_cpu_limit(p["factor"])
    if FAULTS[kind].hardware:
        _apply_hw(hw, kind, p, key)
        _record(hw, kind, p, True)
        hardware.save(node.sim_dir, hw)
        wait_applied(node, hw)
        return
    _record(hw, kind, p, True)
    hardware.save(node.sim_dir, hw)
    _node_exec(node, NODE_LABSIM + ["fault", "apply", kind, json.dumps(p)])


def heal(node, kind: str, params: dict) -> None:
    """Undo ``kind`` on ``node``; returns once the node shows it healed."""
    hw = hardware.load(node.sim_dir)
    p = validate(kind, params, hw, healing=True)
    key = _key(kind, p)
    if kind == "node_down":
        node.power_on()
        return
    if kind == "link_slow":
        node.set_link_rate(p["fabric"], float(hw.get("link_mbit", 1000)))
    if kind == "storage_slow":
        node.set_io_limit(None)
    if kind == "rank_slow":
        node.set_cpu_limit(None)
    if FAULTS[kind].hardware:
        _heal_hw(hw, kind, p, key)
        _record(hw, kind, p, False)
        hardware.save(node.sim_dir, hw)
        wait_applied(node, hw)
        return
    _node_exec(node, NODE_LABSIM + ["fault", "heal", kind, json.dumps(p)])
    _record(hw, kind, p, False)
    hardware.save(node.sim_dir, hw)


def _record(hw: dict, kind: str, p: dict, active: bool) -> None:
    faults = [f for f in hw.get("faults", []) if not (f["kind"] == kind and f["params"] == p)]
    if active:
        faults.append({"kind": kind, "params": p})
    hw["faults"] = faults
