"""The simulated hardware of one lab node: the content of ``hw.json``.

``build()`` turns a profile (``profiles/<name>.yml`` as a dict) into the node's hardware state:
GPUs, NVSwitches, HCAs, healthy performance figures and health factors. Everything is
deterministic from (profile, node name, node index, spec): two builds give the same document.
The node-side simulator (``clustercert_lab/sim/labsim``) reads ``hw.json`` on every call, so a
fault that edits it (``faults.py``) shows up live in nvidia-smi, sysfs, perftest and friends.

Nothing here is real hardware: ``hw["simulated"]`` says so, and so does every tool's
``--version``-style output and /var/lib/clustercert-lab/README inside a node.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

SCHEMA = 1
HW_FILE = "hw.json"

# Healthy reference performance, per GPU model / HCA rate. Every figure names where it comes from
# (see /work/shared/notes/anchors.md "Healthy references" and the fixtures it was read from).
REFERENCES: dict[str, dict] = {
    "NVIDIA H100 80GB HBM3": {
        "nccl_allreduce_busbw_gbyte_per_s": {
            "value": 479.0,
            "source": "anchors.md: NCCL 8xH100 NVLS all_reduce busbw ~479 GB/s (p5 runs reach 487 GB/s)",
        },
        "nvbandwidth_h2d_gbyte_per_s": {
            "value": 53.0,
            "source": "anchors.md: PCIe Gen5 x16 H2D 51-55 GB/s",
        },
        "nvbandwidth_d2h_gbyte_per_s": {
            "value": 54.0,
            "source": "anchors.md: PCIe Gen5 x16 51-55 GB/s (D2H slightly above H2D, as in nvbandwidth "
                      "captures)",
        },
        "nvbandwidth_d2d_gbyte_per_s": {
            "value": 389.0,
            "source": "anchors.md: NVLink4 450 GB/s per direction per GPU; memcpy CE reaches ~87% of it",
        },
        "nvbandwidth_d2d_bidir_gbyte_per_s": {
            "value": 690.0,
            "source": "anchors.md: NVLink4 ~690 GB/s bidirectional memcpy (seed guide asks > 800 GB/s raw)",
        },
        "nvlink_link_gbyte_per_s": {
            "value": 26.562,
            "source": "fixture nvidia-smi nvlink -s on H100 (18 links x 26.562 GB/s)",
        },
        "nvlink_aggregate_gbyte_per_s": {
            "value": 840.0,
            "source": "lab assumption: 93% of the 900 GB/s NVIDIA quotes per H100 SXM GPU (18 NVLink4 links, "
                      "both directions), above the seed guide's 800; one link down of 18 leaves 793",
        },
    },
    "NVIDIA A100-SXM4-80GB": {
        "nccl_allreduce_busbw_gbyte_per_s": {"value": 232.0,
                                             "source": "anchors.md: 8xA100 all_reduce ~232 GB/s"},
        "nvbandwidth_h2d_gbyte_per_s": {"value": 26.0, "source": "anchors.md: PCIe Gen4 ~26 GB/s"},
        "nvbandwidth_d2h_gbyte_per_s": {"value": 26.0, "source": "anchors.md: PCIe Gen4 ~26 GB/s"},
        "nvbandwidth_d2d_gbyte_per_s": {"value": 260.0,
                                        "source": "AzNHC threshold 235 GB/s + margin (anchors)"},
        "nvbandwidth_d2d_bidir_gbyte_per_s": {"value": 480.0, "source": "NVLink3 300 GB/s per direction"},
        "nvlink_link_gbyte_per_s": {"value": 25.0,
                                    "source": "fixture nvidia-smi nvlink -s on A100 (12 x 25 GB/s)"},
        "nvlink_aggregate_gbyte_per_s": {"value": 560.0,
                                         "source": "lab assumption: 93% of the 600 GB/s NVIDIA quotes "
                                                   "per A100 SXM GPU (12 NVLink3 links, both directions)"},
    },
}
IB_REFERENCES: dict[int, dict] = {
    400: {
        "ib_write_bw_gbit_per_s": {
            "value": 392.3,
            "source": "anchors.md: NDR 400 Gb/s ib_write_bw 390-399.9 Gb/s; fixture cx7 NDR 392.34 Gb/s",
        },
        "ib_write_lat_usec": {"value": 1.02,
                              "source": "NDR RC write latency ~1 us (fixture ib_write_lat t_typical)"},
    },
    200: {
        "ib_write_bw_gbit_per_s": {"value": 196.0, "source": "anchors.md: HDR >= 180 Gb/s (AzNHC)"},
        "ib_write_lat_usec": {"value": 1.08, "source": "HDR RC write latency ~1.1 us"},
    },
}
IB_SPEED_NAME = {400: "NDR", 200: "HDR", 100: "EDR", 56: "FDR", 40: "QDR"}
IB_HCA_PART = {400: ("MT4129", "28.43.1014", "MT_0000000838"), 200: ("MT4123", "20.41.1000", "MT_0000000223")}
# the HCA's PCIe link (lspci) by rate: ConnectX-7 NDR on Gen5 x16, ConnectX-6 HDR on Gen4 x16
IB_HCA_PCIE = {400: (5, 16), 200: (4, 16)}
GPU_PCI = {
    "NVIDIA H100 80GB HBM3": {"device_id": "0x233010DE", "sub_id": "0x16C110DE", "vbios": "96.00.99.00.01",
                              "board_part": "692-2G520-0200-000", "gpu_part": "2330-885-A1", "power_w": 700,
                              "arch": "Hopper", "compute_cap": "9.0", "max_gr_mhz": 1980, "mem_mhz": 2619,
                              "nvswitch_device": "22a3", "nvlink_version": 4},
    "NVIDIA A100-SXM4-80GB": {"device_id": "0x20B210DE", "sub_id": "0x147F10DE", "vbios": "92.00.45.00.03",
                              "board_part": "692-2G506-0212-002", "gpu_part": "20B2-896-A1", "power_w": 400,
                              "arch": "Ampere", "compute_cap": "8.0", "max_gr_mhz": 1410, "mem_mhz": 1593,
                              "nvswitch_device": "1af1", "nvlink_version": 3},
}
# PCI bus numbers of an 8-GPU HGX board (as in the fixture default-table-8xh100: 19,3B,4C,5D,9B,BB,CB,DB)
GPU_BUSES = ["19", "3B", "4C", "5D", "9B", "BB", "CB", "DB", "1A", "3C", "4D", "5E", "9C", "BC", "CC", "DC"]
NVSWITCH_BUSES = ["05", "06", "07", "08", "09", "0A"]
HCA_BUSES = ["18", "2A", "3A", "5C", "9A", "AA", "BA", "DA"]

DEFAULT_HCAS = [
    {"name": "mlx5_0", "netdev": "ib0", "fabric": 0, "rate_gbit_per_s": 400, "port": 1},
    {"name": "mlx5_1", "netdev": "ib1", "fabric": 1, "rate_gbit_per_s": 400, "port": 1},
]


def _digest(*parts: object) -> str:
    return hashlib.sha256("/".join(str(p) for p in parts).encode()).hexdigest()


def gpu_uuid(node_name: str, index: int) -> str:
    h = _digest("gpu-uuid", node_name, index)
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def gpu_serial(node_name: str, index: int) -> str:
    return "1650" + str(int(_digest("gpu-serial", node_name, index)[:12], 16))[-9:].rjust(9, "0")


def board_serials(node_name: str) -> dict[str, str]:
    """The node's system, baseboard and chassis serial numbers and system UUID (dmidecode)."""
    h = _digest("board", node_name)
    return {"system_serial": f"LAB{int(h[0:10], 16) % 10**9:09d}",
            "baseboard_serial": f"LBB{int(h[10:20], 16) % 10**9:09d}",
            "chassis_serial": f"LCH{int(h[20:30], 16) % 10**9:09d}",
            "uuid": f"{h[32:40]}-{h[40:44]}-{h[44:48]}-{h[48:52]}-{h[52:64]}"}


def hca_guid(node_name: str, hca: str) -> str:
    """A node GUID in sysfs notation (``58a2:e103:00xx:xxxx``), Mellanox OUI 58:a2:e1."""
    h = _digest("hca-guid", node_name, hca)
    return f"58a2:e103:00{h[0:2]}:{h[2:6]}"


def _get(d: dict | None, *keys: str, default=None):
    cur = d
    for k in keys:
        if not isinstance(cur, dict) or k not in cur or cur[k] is None:
            return default
        cur = cur[k]
    return cur


def _counters_zero() -> dict[str, int]:
    names = [
        "symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
        "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
        "port_xmit_constraint_errors", "port_rcv_constraint_errors", "local_link_integrity_errors",
        "excessive_buffer_overrun_errors", "VL15_dropped", "port_xmit_wait", "port_xmit_data",
        "port_rcv_data", "port_xmit_packets", "port_rcv_packets", "unicast_xmit_packets",
        "unicast_rcv_packets", "multicast_xmit_packets", "multicast_rcv_packets",
    ]
    return {n: 0 for n in names}


def build(profile: dict, node_name: str, node_index: int, spec: dict | None = None) -> dict:
    """The initial hw.json for one node (healthy; faults are applied later by faults.py)."""
    spec = spec or {}
    model = _get(profile, "gpu", "model", default="NVIDIA H100 80GB HBM3")
    refs = REFERENCES.get(model, REFERENCES["NVIDIA H100 80GB HBM3"])
    gpus = _gpus(profile, node_name, model, refs)
    hcas = _hcas(profile, node_name, node_index)
    _place_hcas(gpus, hcas)
    ib_rate = max((h["ports"][0]["rate_gbit_per_s"] for h in hcas), default=400)
    ib_refs = IB_REFERENCES.get(ib_rate, IB_REFERENCES[400])
    return {
        "schema": SCHEMA,
        "simulated": True,
        "note": "clustercert lab simulation: this node's GPUs, HCAs and their tools are simulated",
        "node": node_name,
        "index": int(node_index),
        "profile": profile.get("name", "lab"),
        "driver": _driver(profile),
        "board": {"manufacturer": "clustercert lab", "product": f"simulated HGX {model} node",
                  **board_serials(node_name)},
        "gpus": gpus,
        "nvswitches": _nvswitches(profile, model, len(gpus)),
        "hcas": hcas,
        "link_mbit": int(spec.get("link_mbit", 1000)),
        "performance": {k: dict(v) for k, v in {**refs, **ib_refs}.items()},
        "health": _health(hcas),
        "netdevs_down": [],
        "hanging_tools": [],
        "xid_events": [],
        "faults": [],
    }


def _driver(profile: dict) -> dict:
    return {
        "branch": str(_get(profile, "driver", "branch", default="570")),
        "version": str(_get(profile, "driver", "version", default="570.172.08")),
        "modules": _get(profile, "driver", "modules", default="open"),
        "cuda": str(_get(profile, "cuda", "version", default="12.8")),
    }


def _has_nvswitch(profile: dict) -> bool:
    return bool(_get(profile, "gpu", "nvswitch", default=True))


def _gpus(profile: dict, node_name: str, model: str, refs: dict) -> list[dict]:
    """The node's GPUs as nvidia-smi shows them: identity, PCIe, NVLink, memory, ECC, clocks, power."""
    count = int(_get(profile, "gpu", "count", default=8))
    numa_split = count // 2 if count > 1 else 1
    return [_gpu(profile, node_name, model, refs, i, numa_node=0 if i < numa_split else 1)
            for i in range(count)]


def _gpu(profile: dict, node_name: str, model: str, refs: dict, i: int, numa_node: int) -> dict:
    pci = GPU_PCI.get(model, GPU_PCI["NVIDIA H100 80GB HBM3"])
    seed = int(_digest("gpu-vary", node_name, i)[:8], 16)
    bus = GPU_BUSES[i % len(GPU_BUSES)]
    pcie_gen = int(_get(profile, "gpu", "pcie_gen", default=5))
    pcie_width = int(_get(profile, "gpu", "pcie_width", default=16))
    return {
        "index": i,
        "present": True,
        "name": model,
        "bus_id": f"00000000:{bus}:00.0",
        "pci_device_id": pci["device_id"],
        "pci_sub_system_id": pci["sub_id"],
        "uuid": gpu_uuid(node_name, i),
        "serial": gpu_serial(node_name, i),
        "minor_number": i,
        "module_id": i + 1,
        "board_id": f"0x{bus.lower()}00",
        "vbios_version": pci["vbios"],
        "board_part_number": pci["board_part"],
        "gpu_part_number": pci["gpu_part"],
        "architecture": pci["arch"],
        "compute_cap": pci["compute_cap"],
        "numa_node": numa_node,
        "memory": {"total_mib": int(_get(profile, "gpu", "memory_mib", default=81559)), "reserved_mib": 551,
                   "used_mib": 1},
        "pcie": {"gen_max": pcie_gen, "gen_current": pcie_gen, "width_max": pcie_width,
                 "width_current": pcie_width, "replays": 0},
        "nvlink": {"links": int(_get(profile, "gpu", "nvlink_links_per_gpu", default=18)),
                   "speed_gbyte_per_s": refs["nvlink_link_gbyte_per_s"]["value"], "down": [],
                   # link -> {crc, replay, recovery} counters (nvidia-smi nvlink -e); absent: 0
                   "errors": {}},
        "ecc": {"mode": "Enabled", "volatile": _ecc_zero(), "aggregate": _ecc_zero()},
        "retired_pages": {"single_bit": 0, "double_bit": 0, "pending": False},
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False,
                          "histogram_max": 2560},
        "temperature_c": 27 + seed % 8,
        "memory_temperature_c": 36 + seed % 6,
        "power_draw_w": round(66.0 + (seed % 900) / 100.0, 2),
        "power_limit_w": pci["power_w"],
        "clocks": {"graphics_mhz": 345, "sm_mhz": 345, "memory_mhz": pci["mem_mhz"], "video_mhz": 765,
                   "max_graphics_mhz": pci["max_gr_mhz"], "max_memory_mhz": pci["mem_mhz"]},
        "throttle": [],
        "fabric_state": "Completed" if _has_nvswitch(profile) else "N/A",
    }


def _ecc_zero() -> dict[str, int]:
    return {"sram_correctable": 0, "sram_uncorrectable_parity": 0, "sram_uncorrectable_secded": 0,
            "dram_correctable": 0, "dram_uncorrectable": 0}


def _nvswitches(profile: dict, model: str, gpu_count: int) -> list[dict]:
    if not _has_nvswitch(profile):
        return []
    device = GPU_PCI.get(model, GPU_PCI["NVIDIA H100 80GB HBM3"])["nvswitch_device"]
    return [{"index": s, "bus_id": f"00000000:{NVSWITCH_BUSES[s]}:00.0", "device_id": device, "on_bus": True}
            for s in range(4 if gpu_count >= 8 else 0)]


def _place_hcas(gpus: list[dict], hcas: list[dict]) -> None:
    """Each HCA's PCIe switch: the one of the first GPU of its NUMA node no HCA took before it
    (``switch_gpu``; None: a switch of its own). nvidia-smi topo -m shows the HCA PIX to that GPU."""
    taken: set[int] = set()
    for h in hcas:
        cand = [g["index"] for g in gpus if g["numa_node"] == h["numa_node"] and g["index"] not in taken]
        h["switch_gpu"] = cand[0] if cand else None
        if cand:
            taken.add(cand[0])


def _hcas(profile: dict, node_name: str, node_index: int) -> list[dict]:
    """The node's HCAs as ibstat, ibv_devinfo and sysfs show them, one port each."""
    hca_list = _get(profile, "ib", "hcas", default=None) or DEFAULT_HCAS
    link_layer = _get(profile, "ib", "link_layer", default="InfiniBand")
    return [_hca(h, n, node_name, node_index, link_layer,
                 numa_node=0 if n < max(1, len(hca_list) // 2) else 1)
            for n, h in enumerate(hca_list)]


def _hca(h: dict, n: int, node_name: str, node_index: int, link_layer: str, numa_node: int) -> dict:
    rate = int(h.get("rate_gbit_per_s", 400))
    part, fw, board = IB_HCA_PART.get(rate, IB_HCA_PART[400])
    guid = hca_guid(node_name, h["name"])
    return {
        "name": h["name"],
        "hca_type": part,
        "vendor_part_id": part[2:],
        "fw_ver": fw,
        "hw_rev": "0x0",
        "board_id": board,
        "node_guid": guid,
        "sys_image_guid": guid,
        "bus_id": f"0000:{HCA_BUSES[n % len(HCA_BUSES)].lower()}:00.0",
        "numa_node": numa_node,
        "pcie": {"gen": IB_HCA_PCIE.get(rate, (5, 16))[0], "width": IB_HCA_PCIE.get(rate, (5, 16))[1]},
        "ports": [{
            "port": int(h.get("port", 1)),
            "state": "ACTIVE",
            "phys_state": "LinkUp",
            "rate_gbit_per_s": rate,
            "rated_gbit_per_s": rate,
            "width": "4X",
            "speed": IB_SPEED_NAME.get(rate, "NDR"),
            "link_layer": link_layer,
            "lid": 2 * node_index + n + 1 if node_index else n + 1,
            "sm_lid": 1,
            "netdev": h.get("netdev", f"ib{n}"),
            "fabric": int(h.get("fabric", n)),
            "counters": _counters_zero(),
        }],
    }


def _health(hcas: list[dict]) -> dict:
    """Every health factor at 1.0 (faults lower them)."""
    return {
        "node_factor": 1.0,
        "nccl_factor": 1.0,
        "fabric_factor": {"0": 1.0, "1": 1.0},
        "hca_factor": {h["name"]: 1.0 for h in hcas},
        "link_factor": {},
    }


def load(sim_dir: Path) -> dict:
    return json.loads((Path(sim_dir) / HW_FILE).read_text())


def save(sim_dir: Path, hw: dict) -> None:
    """Atomic write: readers inside the node never see a half-written file. Each save is a new
    ``generation``: the node's agent says which one it has applied (faults.wait_applied)."""
    hw["generation"] = int(hw.get("generation", 0)) + 1
    sim_dir = Path(sim_dir)
    sim_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".hw.", dir=sim_dir)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(hw, f, indent=1, sort_keys=True)
            f.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, sim_dir / HW_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
