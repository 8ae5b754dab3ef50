"""The catalogue of every check id and probe id: what each reads, what it holds the node to (per
profile, with the source of each figure), and which lab fault shows that it fails.

The ids are the ones the code emits: the checks' ``CHECK_IDS`` (clustercert.checks registry, with the
opt-in ``ib.bond_failover``) and the probes' ``probe.<name>`` findings (clustercert.probes). The lab
evidence is not the product's: the simulated lab, a distribution of its own (clustercert-lab), ships it as
data its tests' metadata generates (scripts/lab_proofs.py: each lab test's ``pytest.mark.proves`` and the
fault matrices' lists) and declares it through the entry point group ``clustercert.proofs``; the product reads
that file and never imports clustercert_lab (lab_proofs). ``Proof(fault, params, status, test)`` says that the
lab fault kind ``fault`` (with ``params``) makes the id come out ``status``, and which lab test shows it.
Without the lab installed every id is still listed, with no proof. An id no lab fault makes fail carries a
``note`` saying why. tests/test_catalogue.py holds the ids against the registry and the probe code, and the
lab's proofs against its FAULTS and the lab tests they name; docs/checks.md is ``clustercert checks --format
markdown``.
"""

from __future__ import annotations

import functools
import json
import shlex
from dataclasses import dataclass, field
from importlib import metadata

from clustercert import remote
from clustercert.checks import DISRUPTIVE, HostContext, component, components_for
from clustercert.checks import expand as checks_expand
from clustercert.checks.gpu import CRITICAL_XIDS
from clustercert.errors import InputError
from clustercert.model.profile import builtin_profiles, installed_file, load_profile, profile_origin
from clustercert.probes import commands as probe_cmds

PROOF_ENTRY_POINTS = "clustercert.proofs"  # lab proofs installed distributions declare (lab_proofs)
PROOFS_SCHEMA = "clustercert.lab-proofs/v1"


@dataclass(frozen=True)
class Proof:
    fault: str                                  # a lab fault kind (clustercert lab fault NODE KIND)
    params: dict = field(default_factory=dict)  # its parameters (KEY=VALUE), where not the defaults
    status: str = "fail"                        # what the id reports on the faulty node: fail, or error
    test: str = ""                              # the lab test that shows it (file::test)

    def text(self) -> str:
        params = " ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.fault}{' ' + params if params else ''} -> {self.status}"


@dataclass(frozen=True)
class Entry:
    id: str
    component: str              # the validate component (--checks/--skip name it), or "probe"
    what: str                   # what passes, in words
    reads: tuple[str, ...]      # checks: evidence keys of the component's commands(); probes: command lines
    profile_keys: tuple[str, ...] = ()   # profile values it is judged against (dotted; [] maps over a list)
    thresholds: tuple[str, ...] = ()     # profile thresholds (each carries its source)
    # why no lab fault makes it fail (tests/test_catalogue.py: required when no lab proof
    note: str = ""
                                # is a fail)
    disruptive: bool = False    # validate --disruptive only

    @property
    def kind(self) -> str:
        return "probe" if self.id.startswith("probe.") else "check"


def _ranges(numbers) -> str:
    """{48, 56, 57, 58} -> '48, 56-58'."""
    out, run = [], []
    for n in sorted(numbers):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
        run = [n]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
    return ", ".join(out)


CHECKS: tuple[Entry, ...] = (
    # ---- gpu -----------------------------------------------------------------------------------------
    Entry(
        "gpu.count", "gpu", "nvidia-smi lists the profile's number of GPUs", ("nvsmi_xml",), ("gpu.count",)
    ),
    Entry(
        "gpu.model",
        "gpu",
        "every GPU's product name is the profile's model",
        ("nvsmi_xml",),
        ("gpu.model",),
        note="the lab's simulated GPUs always carry the profile's model name; no fault kind renames one",
    ),
    Entry(
        "gpu.memory",
        "gpu",
        "every GPU's total memory is the profile's, within the tolerance",
        ("nvsmi_xml",),
        ("gpu.memory_mib", "gpu.memory_tolerance_mib"),
        note="the lab's simulated GPUs always report the profile's memory size; no fault kind changes it",
    ),
    Entry(
        "gpu.ecc",
        "gpu",
        "ECC enabled, no volatile uncorrectable error, corrected SRAM/DRAM counts under the thresholds",
        ("nvsmi_xml",),
        thresholds=("ecc_sram_corrected", "ecc_dram_corrected"),
    ),
    Entry("gpu.row_remap", "gpu", "no pending row remap and no remap failure", ("nvsmi_xml",)),
    Entry(
        "gpu.retired_pages",
        "gpu",
        "retired pages (single + double bit) at most the threshold, none "
        "pending; skip where the architecture remaps rows instead",
        ("nvsmi_xml",),
        ("gpu.architecture",),
        ("retired_pages",),
        note="the lab simulates Hopper GPUs, which report row remapping instead of page retirement: the "
        "check is skip on lab nodes",
    ),
    Entry("gpu.xid", "gpu", f"no critical Xid ({_ranges(CRITICAL_XIDS)}) in the kernel log", ("kernel_log",)),
    Entry(
        "gpu.pcie_link",
        "gpu",
        "every GPU's current PCIe link is at least the profile's generation and width",
        ("nvsmi_xml",),
        ("gpu.pcie_gen", "gpu.pcie_width"),
    ),
    Entry(
        "gpu.throttle",
        "gpu",
        "no hardware or thermal slowdown among the active clock event reasons",
        ("nvsmi_xml",),
    ),
    Entry(
        "gpu.nvlink",
        "gpu",
        "every GPU has the profile's number of active NVLinks; an nvlink -s that "
        "prints nothing fails each GPU nvidia-smi -q -x lists (skip without NVLink)",
        ("nvsmi_nvlink", "nvsmi_xml"),
        ("gpu.nvlink_links_per_gpu",),
    ),
    Entry(
        "gpu.persistence",
        "gpu",
        "persistence mode is Enabled on every GPU",
        ("nvsmi_xml",),
        note="no lab fault kind turns persistence mode off",
    ),
    Entry(
        "gpu.fabricmanager",
        "gpu",
        "nvidia-fabricmanager is active (running) on NVSwitch systems (skip without NVSwitch)",
        ("svc_fabricmanager",),
        ("gpu.nvswitch",),
    ),
    # ---- driver --------------------------------------------------------------------------------------
    Entry(
        "driver.version",
        "driver",
        "the driver nvidia-smi reports is the profile's exact version",
        ("nvsmi_xml",),
        ("driver.version",),
        note="driver_version_mismatch installs another driver without a reboot: nvidia-smi then fails "
        "('Driver/library version mismatch'), so this check is an error there, not a fail; the lab "
        "proves the mismatch with driver.module_loaded",
    ),
    Entry(
        "driver.module_loaded",
        "driver",
        "the loaded nvidia module is the installed one (no reboot pending)",
        ("driver_loaded", "driver_installed"),
    ),
    Entry(
        "cuda.version",
        "driver",
        "the CUDA version the driver supports is at least the profile's",
        ("nvsmi_xml",),
        ("cuda.version",),
        note="the CUDA version follows the driver; no lab fault kind lowers it on its own",
    ),
    Entry(
        "nccl.version",
        "driver",
        "the libnccl2 package is the profile's NCCL version",
        ("nccl_pkg",),
        ("nccl.version",),
    ),
    # ---- rdma ----------------------------------------------------------------------------------------
    Entry(
        "ofed.version",
        "rdma",
        "the RDMA stack is the profile's source and version (DOCA-OFED, MLNX_OFED "
        "or the distribution's "
        "rdma-core)",
        ("ofed_info", "doca_pkg", "rdma_core_pkg"),
        ("ofed.source", "ofed.version"),
        note="the lab's repository carries one DOCA-OFED version; no fault kind installs another",
    ),
    Entry("rdma.peermem", "rdma", "the nvidia_peermem module is loaded (GPUDirect RDMA)", ("lsmod",)),
    # ---- ib ------------------------------------------------------------------------------------------
    Entry(
        "ib.port_state",
        "ib",
        "every profile HCA port and every compute rail's is ACTIVE / LinkUp",
        ("ib_sysfs", "nvsmi_topo"),
        ("ib.hcas[].name", "ib.hcas[].port", "hardware.rails.port"),
    ),
    Entry(
        "ib.port_rate",
        "ib",
        "every profile HCA port and every compute rail's runs at its rated speed",
        ("ib_sysfs", "nvsmi_topo"),
        ("ib.hcas[].rate_gbit_per_s", "hardware.rails.rate_gbit_per_s"),
    ),
    Entry(
        "ib.firmware",
        "ib",
        "one firmware version on every HCA of a node (across the nodes of the profile: ib.firmware_uniform)",
        ("ib_sysfs",),
    ),
    Entry(
        "ib.counters",
        "ib",
        "symbol_error and link_downed at most the profile's limits on every port",
        ("ib_sysfs",),
        ("ib.max_symbol_errors", "ib.max_link_downed"),
    ),
    Entry(
        "ib.ipoib",
        "ib",
        "every HCA's IPoIB netdev exists and is UP, LOWER_UP",
        ("ip_link",),
        ("ib.hcas[].netdev",),
    ),
    Entry(
        "ib.sm",
        "ib",
        "a subnet manager answers on every port (SM LID != 0), and one master SM per fabric across the nodes",
        ("ib_sysfs",),
        ("subnet_manager.mode",),
        note="the lab's fabrics always answer with one SM; no fault kind removes or duplicates it",
    ),
    Entry(
        "nccl.config",
        "ib",
        "/etc/nccl.conf sets NCCL_IB_HCA to the node's compute rails (discovered from "
        "topo -m and sysfs, or the profile's hardware.nic_gpu), in GPU order",
        ("nccl_conf", "nvsmi_topo", "ib_sysfs"),
        ("hardware.rails", "hardware.nic_gpu"),
        note="no lab fault kind edits /etc/nccl.conf (tests/drift edits it by hand)",
    ),
    # ---- bond ----------------------------------------------------------------------------------------
    Entry(
        "ib.bond",
        "bond",
        "the IPoIB bond exists with the profile's mode, slaves, primary, miimon and "
        "fail_over_mac, every slave up (skip without a bond)",
        ("bonding",),
        (
            "ib.bond.name",
            "ib.bond.mode",
            "ib.bond.slaves",
            "ib.bond.primary",
            "ib.bond.miimon_ms",
            "ib.bond.fail_over_mac",
        ),
    ),
    Entry(
        "net.bond_lacp",
        "bond",
        "every 802.3ad (LACP) bond on the node has an active aggregator and every "
        "slave up and in it (/proc/net/bonding: each slave's Aggregator ID is the Active Aggregator "
        "Info's); skip without an 802.3ad bond",
        ("bonding_proc",),
        note="the lab's bonds are active-backup IPoIB bonds and it simulates no LACP partner (a switch) "
        "that an 802.3ad bond could aggregate with; real /proc/net/bonding samples of a slave outside "
        "the active aggregator and of a bond with none fail it in tests/test_checks_bond_lacp.py",
    ),
    Entry(
        "ib.bond_failover",
        "bond",
        "with the active slave taken down, the other takes over within miimon "
        "x 3 ms, a peer answers over the bond meanwhile, and the primary comes back (validate --disruptive "
        "only)",
        ("bond_failover",),
        ("ib.bond.miimon_ms", "ib.bond.primary"),
        disruptive=True,
    ),
    # ---- container -----------------------------------------------------------------------------------
    Entry(
        "container.runtime",
        "container",
        "the profile's container runtime has the nvidia runtime configured",
        ("runtime_config",),
        ("container.runtime",),
    ),
    Entry(
        "container.cdi",
        "container",
        "a CDI spec for the GPUs exists and was generated after the driver was installed",
        ("cdi_stat",),
        note="no lab fault kind removes or ages the CDI spec",
    ),
    # ---- tuning --------------------------------------------------------------------------------------
    Entry(
        "tuning.memlock",
        "tuning",
        "a fresh login's memlock limit and systemd's DefaultLimitMEMLOCK are the profile's",
        ("memlock",),
        ("tuning.memlock",),
    ),
    Entry(
        "tuning.sysctl",
        "tuning",
        "every sysctl the profile sets has its value (skip when it sets none)",
        ("sysctl",),
        ("tuning.sysctl",),
        note="no lab fault kind changes a sysctl",
    ),
    Entry(
        "tuning.hugepages",
        "tuning",
        "vm.nr_hugepages is at least the profile's 2 MiB huge pages",
        ("hugepages",),
        ("tuning.hugepages_2m",),
        note="no lab fault kind lowers vm.nr_hugepages (the lab profile asks for none)",
    ),
    Entry(
        "tuning.governor",
        "tuning",
        "every CPU's cpufreq governor is the profile's (skip for none)",
        ("governor",),
        ("tuning.governor",),
        note="lab nodes have no cpufreq of their own (the lab profile's governor is none: skip)",
    ),
    # ---- time ----------------------------------------------------------------------------------------
    Entry(
        "time.sync",
        "time",
        "chrony is synchronised with |offset| at most the profile's maximum",
        ("chrony",),
        ("tuning.time_max_offset_ms",),
    ),
    # ---- packages ------------------------------------------------------------------------------------
    Entry(
        "packages.pinned",
        "packages",
        "every package the bootstrap pinned is installed at its pinned version and held",
        ("pins", "pkg_versions", "pkg_holds"),
    ),
    # ---- hardware ------------------------------------------------------------------------------------
    Entry(
        "gpu.nvlink_errors",
        "hardware",
        "every GPU's NVLink CRC, replay and recovery errors (all its "
        "links) at most the thresholds: since the counters were reset, and in drift since the baseline run "
        "(skip without NVLink)",
        ("nvsmi_nvlink_errors",),
        ("gpu.nvlink_links_per_gpu",),
        ("nvlink_crc_errors", "nvlink_replay_errors", "nvlink_recovery_errors"),
    ),
    Entry(
        "gpu.nic_affinity",
        "hardware",
        "the node's compute rails: discovered from nvidia-smi topo -m and "
        "sysfs (hardware.rails: count, rate, PIX/PXB to a GPU of their own), or each HCA the profile names "
        "(hardware.nic_gpu) PIX or PXB to its GPU; a node whose GPU->NIC mapping differs from its peers' "
        "fails (skip without compute rails)",
        ("nvsmi_topo", "ib_sysfs"),
        ("hardware.rails", "hardware.nic_gpu", "hardware.source"),
    ),
    Entry(
        "hw.pcie_manifest",
        "hardware",
        "the profile's GPUs, HCAs and NVSwitches are on the PCIe bus "
        "(lspci), the GPUs at the profile's link generation and width, the HCAs at theirs where the "
        "profile gives them",
        ("lspci",),
        (
            "gpu.count",
            "gpu.pcie_gen",
            "gpu.pcie_width",
            "ib.hcas[].name",
            "hardware.nvswitch_count",
            "hardware.hca_pcie_gen",
            "hardware.hca_pcie_width",
        ),
    ),
    Entry(
        "gpu.fabric_state",
        "hardware",
        "NVSwitch systems: every GPU's NVLink fabric state is Completed "
        "with status Success (skip without NVSwitch)",
        ("nvsmi_xml",),
        ("gpu.nvswitch",),
    ),
    Entry(
        "ib.firmware_uniform",
        "hardware",
        "cluster-wide, after the per-node checks: each HCA runs the "
        "same firmware on every node of the profile; the odd one out is named on its node (skip with "
        "firmware_uniform: false)",
        ("hca_identity",),
        ("firmware_uniform",),
    ),
    Entry(
        "gpu.vbios_uniform",
        "hardware",
        "cluster-wide, after the per-node checks: every GPU runs the same "
        "VBIOS across the nodes of the profile; the odd GPU is named on its node (skip with "
        "firmware_uniform: false)",
        ("nvsmi_xml",),
        ("firmware_uniform",),
    ),
    # ---- storage (issue 22) ----------------------------------------------------------------------------
    Entry(
        "storage.mounts",
        "storage",
        "every mount the profile requires is mounted, of one of its "
        "filesystem types, with its options and at least its free space (skip without a storage "
        "section)",
        ("findmnt",),
        (
            "storage.mounts[].path",
            "storage.mounts[].fstype",
            "storage.mounts[].options",
            "storage.mounts[].min_free_gib",
        ),
    ),
    Entry(
        "storage.scratch",
        "storage",
        "the node-local scratch is mounted with its filesystem and free "
        "space, on the profile's number of NVMe devices (skip without a scratch)",
        ("findmnt", "lsblk"),
        (
            "storage.scratch.mount",
            "storage.scratch.fstype",
            "storage.scratch.nvme_devices",
            "storage.scratch.min_free_gib",
        ),
        note="the lab's scratch is a host directory bound into each node and the lab has no NVMe devices; "
        "no fault kind unmounts the scratch (mount_missing takes the shared mount away, "
        "storage.mounts)",
    ),
)

_BW_NOTE = "(and not below the outlier ratio x the cluster median of the same probe)"


def _probe_commands() -> dict[str, tuple[str, ...]]:
    c = probe_cmds
    return {
        "ib_write_bw_loopback": (
            c.perftest_cmd("ib_write_bw", "HCA", 1, c.PERFTEST_PORT, 5),
            c.perftest_cmd("ib_write_bw", "HCA", 1, c.PERFTEST_PORT, 5, "localhost"),
        ),
        "ib_write_bw": (
            c.perftest_cmd("ib_write_bw", "HCA", 1, c.PERFTEST_PORT, 5),
            c.perftest_cmd("ib_write_bw", "HCA", 1, c.PERFTEST_PORT, 5, "PEER"),
        ),
        "ib_write_lat": (
            c.perftest_cmd("ib_write_lat", "HCA", 1, c.PERFTEST_PORT + 200, 5),
            c.perftest_cmd("ib_write_lat", "HCA", 1, c.PERFTEST_PORT + 200, 5, "PEER"),
        ),
        "iperf3": (
            c.iperf3_server_cmd("PEER_IPOIB", c.IPERF_PORT),
            c.iperf3_client_cmd("PEER_IPOIB", "OWN_IPOIB", c.IPERF_PORT, 5),
        ),
        "nccl_allreduce": (
            c.nccl_1node_cmd(8),
            "mpirun ... all_reduce_perf across the pair (or an srun step)",
        ),
        "nccl_cluster": (
            c.nccl_cluster_mpirun_cmd(["NODE1", "NODE2", "NODE3"], 8, "TAG"),
            c.nccl_cluster_mpirun_cmd(
                ["NODE1", "NODE2", "NODE3"], 8, "TAG", {"NCCL_IB_HCA": "=HCAS_OF_ONE_FABRIC"}
            ),
            "or one srun step over the nodes (--backend slurm, or Slurm can place it now)",
        ),
        "gpu_util_under_load": (c.util_sampler_cmd(), "beside all_reduce_perf on one node"),
        "nvbandwidth": (c.nvbandwidth_cmd(),),
        "dcgmi_diag": (
            "dcgmi diag -r LEVEL -j (DCGM 3.x and later, as the node's `dcgmi --version` says; "
            "dcgmi diag -r LEVEL, the text table, before)",
        ),
        "pairs": ("the pair probes' results, through localisation",),
        "ib_write_bw_gdr": (
            c.gdr_perftest_cmd("HCA", 1, c.GDR_PORT, 5, 0, 0),
            c.gdr_perftest_cmd("HCA", 1, c.GDR_PORT, 5, 0, 0, "localhost (loopback) or PEER"),
            c.topo_cmd(),
        ),
        "nccl_transport": (
            "the pair NCCL run (mpirun or srun) with " + c.NCCL_DEBUG_ENV + ": its Channel "
            "... via NET/... lines per node",
        ),
        "nvlink_aggregate": (c.nvbandwidth_cmd(c.NVLINK_TESTS, base=False),),
        "checkpoint_write": (c.checkpoint_cmd("PATH", "NODE", 1024, 5),),
        "ddp_allreduce": (
            "torchrun --nnodes=2 --nproc_per_node=RANKS --node_rank=0|1 "
            "--master_addr=FIRST_NODE --master_port=FREE_PORT --no_python python3 -c "
            "<clustercert.remote.ddp_smoke> (over ssh from the first node, or one srun step)",
        ),
    }


def _probes() -> tuple[Entry, ...]:
    cmd = _probe_commands()
    return (
        Entry(
            "probe.ib_write_bw_loopback",
            "probe",
            f"ib_write_bw loopback on each compute HCA reaches the floor {_BW_NOTE}",
            cmd["ib_write_bw_loopback"],
            thresholds=("ib_write_bw_loopback", "outlier_ratio"),
        ),
        Entry(
            "probe.nccl_allreduce",
            "probe",
            f"NCCL all_reduce bus bandwidth on one node and across each pair reaches its floor {_BW_NOTE}",
            cmd["nccl_allreduce"],
            thresholds=("nccl_allreduce_1node", "nccl_allreduce_pair", "outlier_ratio"),
        ),
        Entry(
            "probe.nccl_cluster",
            "probe",
            "after the pair rounds, one all_reduce across every node they "
            "cleared (N nodes x G GPUs ranks, the pair run's launcher) runs on every one of them with G "
            "ranks each, and its bus bandwidth reaches the scaling floor x the median pair busbw (its "
            "scaling efficiency); where the compute rails span several fabrics, one run per fabric as well "
            "(NCCL_IB_HCA set to that fabric's HCAs), against the median pair busbw x the fabric's share "
            "of the rated rails (unless --nccl-cluster all-rails); a finding of the cluster (the "
            "certificate's cluster_findings), skip with fewer than 3 cleared nodes",
            cmd["nccl_cluster"],
            ("ib.hcas[].fabric", "ib.hcas[].rate_gbit_per_s"),
            ("nccl_allreduce_cluster",),
        ),
        Entry(
            "probe.gpu_util_under_load",
            "probe",
            "every GPU's utilisation while NCCL runs on the node reaches the floor",
            cmd["gpu_util_under_load"],
            thresholds=("gpu_util_under_load",),
            note="the simulated GPUs are always busy under load (a missing GPU stops the load: error)",
        ),
        *(
            Entry(
                f"probe.{name}",
                "probe",
                f"nvbandwidth {name.removeprefix('nvbandwidth_')} per GPU reaches the floor {_BW_NOTE}",
                cmd["nvbandwidth"],
                thresholds=(name, "outlier_ratio"),
                note=""
                if name != "nvbandwidth_d2d"
                else "nvlink_down takes one of a GPU's 18 NVLinks down: the simulated D2D bandwidth falls by "
                "1/18 (389 -> 367 GB/s), above the lab profile's floor (335) and 90% of the cluster median, "
                "so it passes (the fault fails gpu.nvlink, and the simulated 1-node all_reduce falls to 452 "
                "GB/s, below its 460 floor); it takes three links of one GPU down (three nvlink_down faults: "
                "324 GB/s) to fail it, which no lab test does",
            )
            for name in ("nvbandwidth_h2d", "nvbandwidth_d2h", "nvbandwidth_d2d")
        ),
        Entry(
            "probe.dcgmi_diag",
            "probe",
            "dcgmi diag at the profile's level passes every test (skip without dcgm_diag)",
            cmd["dcgmi_diag"],
            ("dcgm_diag.level",),
        ),
        Entry(
            "probe.ib_write_bw",
            "probe",
            f"ib_write_bw from each node to its partner on every compute rail reaches the floor {_BW_NOTE}",
            cmd["ib_write_bw"],
            thresholds=("ib_write_bw_pair", "outlier_ratio"),
        ),
        Entry(
            "probe.ib_write_lat",
            "probe",
            "ib_write_lat 99th percentile to the partner on every compute rail is under the ceiling",
            cmd["ib_write_lat"],
            thresholds=("ib_write_lat_p99",),
        ),
        Entry(
            "probe.iperf3",
            "probe",
            f"iperf3 over IPoIB to the partner on every fabric reaches the floor {_BW_NOTE}",
            cmd["iperf3"],
            thresholds=("iperf3_ipoib", "outlier_ratio"),
        ),
        Entry(
            "probe.pairs",
            "probe",
            "localisation puts no pair failure on the node (fail: the node is to "
            "blame; error: one of two ends, not told which)",
            cmd["pairs"],
        ),
        # ---- issue 22: what a training job needs
        # -------------------------------------------------------------
        Entry(
            "probe.ib_write_bw_gdr",
            "probe",
            "ib_write_bw from GPU memory (--use_cuda, pinned to the "
            "pair's NUMA node) reaches its floor for each GPU-rail pair of the node (its compute rails), "
            "in loopback and to the partner, and topo -m shows each pair's NIC behind its GPU's PCIe "
            f"switch {_BW_NOTE}",
            cmd["ib_write_bw_gdr"],
            ("gpudirect.source", "hardware.rails"),
            ("ib_write_bw_gdr_loopback", "ib_write_bw_gdr_pair", "outlier_ratio"),
        ),
        Entry(
            "probe.nccl_transport",
            "probe",
            "the pair NCCL run's connections use NCCL's InfiniBand "
            "transport with GDRDMA on each end's compute rails (NET/Socket, or IB without GDRDMA there, "
            "fails with the lines that show "
            "it)",
            cmd["nccl_transport"],
            ("gpudirect.source", "hardware.rails"),
        ),
        Entry(
            "probe.nvlink_aggregate",
            "probe",
            "every GPU's NVLink bandwidth as nvbandwidth's copy "
            "engines move it, all peers writing into it (all_to_one_write_ce) plus it writing into all "
            "peers (one_to_all_write_ce), reaches the floor: 0.9 x what a healthy GPU of the profile "
            "measures so, well below the line rate NVIDIA quotes (H100: 900 GB/s, which copies never "
            f"reach) {_BW_NOTE}",
            cmd["nvlink_aggregate"],
            thresholds=("nvlink_aggregate", "outlier_ratio"),
        ),
        Entry(
            "probe.checkpoint_write",
            "probe",
            "fio writes a checkpoint-sized file with direct I/O to "
            "every storage path the profile lists and reads it back, each at least its floor (skip without "
            "a storage section)",
            cmd["checkpoint_write"],
            ("storage.checkpoint_size_mib", "storage.mounts[].path", "storage.scratch.mount"),
            ("checkpoint_write", "checkpoint_read"),
        ),
        Entry(
            "probe.ddp_allreduce",
            "probe",
            "torchrun across each pair of nodes (the profile's launcher, "
            "backend and ranks per node) starts every rank, torch.distributed's world size, ranks and "
            "local ranks are the profile's, and all_reduce gives the right sum on every rank (value: the "
            "median step, ms)",
            cmd["ddp_allreduce"],
            ("ddp.backend", "ddp.launcher", "ddp.ranks_per_node", "ddp.package"),
            note="no lab fault kind breaks PyTorch; the lab test "
            "test_ddp_smoke_test_runs_real_pytorch_and_names_a_wrong_launch launches it with a wrong "
            "--nproc_per_node (clustercert_ddp_nproc_per_node) and asserts the fail that names the "
            "mismatch",
        ),
        Entry(
            "probe.ddp_step",
            "probe",
            "the same torchrun launch trains: DistributedDataParallel on a "
            "small MLP the probe builds (forward, backward with the gradient buckets all-reduced, SGD step;"
            " bf16 on a GPU that supports it), the replicas' parameters equal after the steps, and no "
            "rank's median forward pass is more than ddp.straggler_ratio x the median of the other node's "
            "ranks (a straggler is the finding of its node alone; a node whose ranks did not all report "
            "their steps, or a launch that timed out, is an error)",
            cmd["ddp_allreduce"],
            ("ddp.steps", "ddp.width", "ddp.depth", "ddp.batch", "ddp.straggler_ratio"),
        ),
    )


PROBES: tuple[Entry, ...] = _probes()
ENTRIES: tuple[Entry, ...] = CHECKS + PROBES
BY_ID: dict[str, Entry] = {e.id: e for e in ENTRIES}
# --checks/--skip name validator checks: a probe id there is refused with where it runs
PROBE_REFUSALS = {
    e.id: "is a probe, not a validator check (run it with `clustercert probe --probes` or `certify`)"
    for e in PROBES
}
# node verdicts (not check ids) a lab proof may name
VERDICTS = ("unreachable",)
# what drift's items name besides check ids (docs/nightly-drift.md)
DRIFT_ITEM_IDS = {
    "node.reachable": "the node answered at the baseline and does not now",
    "probe.link": "a pair link (both ends cleared elsewhere) fell below the baseline's median "
    "by more than the profile's drift tolerance",
    "hardware.gpu": "a GPU slot (PCI bus id) holds another GPU (serial, UUID) than at the "
    "baseline, or none, or a new one (item kind hardware)",
    "hardware.hca": "an HCA has another node GUID than at the baseline, or is gone or new (kind hardware)",
    "hardware.board": "the system, baseboard or chassis serial (dmidecode) differs from the "
    "baseline's (kind hardware)",
    "hardware.nvswitch": "fewer or more NVSwitches on the PCIe bus than at the baseline (kind hardware)",
}


# ---- the lab's proofs: data an installed lab declares -----------------------------------------------------

@functools.cache
def lab_proofs() -> dict[str, tuple[Proof, ...]] | None:
    """{id: its lab proofs} for the ids, node verdicts (VERDICTS) and drift items (DRIFT_ITEM_IDS) an
    installed distribution's proof files name; None when none declares one (the lab, clustercert-lab, is not
    installed).

    A distribution declares a file by an entry point of the group ``clustercert.proofs`` (name: the file's
    stem, value: its directory as a dotted name: clustercert-lab's ``lab = "clustercert_lab.proofs"`` is
    clustercert_lab/proofs/lab.json, which scripts/lab_proofs.py writes from the lab tests' metadata). The
    entry point is never loaded: the file is read as data (clustercert.model.profile.installed_file). A file
    that is not a proofs document is bad input: exit 2 naming it."""
    found = False
    out: dict[str, list[Proof]] = {}
    for ep in sorted(metadata.entry_points(group=PROOF_ENTRY_POINTS), key=lambda e: e.name):
        path = installed_file(ep, f"{ep.name}.json")
        if path is None:
            continue
        found = True
        for ident, proof in _read_proofs(path):
            out.setdefault(ident, []).append(proof)
    return {i: tuple(ps) for i, ps in out.items()} if found else None


def _read_proofs(path) -> list[tuple[str, Proof]]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(str(path), None, f"cannot read the lab proofs: {exc}") from None
    if (
        not isinstance(doc, dict)
        or doc.get("schema") != PROOFS_SCHEMA
        or not isinstance(doc.get("proofs"), dict)
    ):
        raise InputError(str(path), "schema", f"not a lab proofs document ({PROOFS_SCHEMA})")
    out = []
    for ident, proofs in doc["proofs"].items():
        for p in proofs if isinstance(proofs, list) else [None]:
            ok = (
                isinstance(p, dict)
                and set(p) == {"fault", "params", "status", "test"}
                and all(isinstance(p[k], str) for k in ("fault", "status", "test"))
                and isinstance(p["params"], dict)
            )
            if not ok:
                raise InputError(str(path), f"proofs.{ident}", "each proof is {fault, params, status, test}")
            out.append((ident, Proof(p["fault"], p["params"], p["status"], p["test"])))
    return out


def proofs_of(ident: str) -> tuple[Proof, ...]:
    """The lab proofs of an id, a node verdict or a drift item (none without the lab)."""
    return (lab_proofs() or {}).get(ident, ())


def check_entries(disruptive: bool = True) -> list[Entry]:
    return [e for e in CHECKS if disruptive or not e.disruptive]


# ---- choosing ids: validate --checks / --skip --------------------------------------------------------

def expand(flag: str, text: str | None) -> set[str] | None:
    """``--checks``/``--skip`` LIST (check ids and component names, comma separated) -> the check ids it
    names; None for an absent flag. Unknown ids, and probe ids, are bad input: one line naming the flag and
    the id (clustercert.checks.expand)."""
    return checks_expand(flag, text, PROBE_REFUSALS)


def select(checks: str | None, skip: str | None, disruptive: bool = False) -> tuple[list[str], set[str]]:
    """``--checks``/``--skip`` (check ids and component names) -> (the components to run, in order; the check
    ids to report). The disruptive test (ib.bond_failover) is in only with ``disruptive``. Bad input -- an
    unknown id, a selection that leaves nothing, the failover test named without --disruptive, --disruptive
    without it -- is an InputError naming the flag, before anything runs."""
    chosen = expand("--checks", checks)
    skipped = expand("--skip", skip) or set()
    failover = {e.id for e in CHECKS if e.disruptive}
    named = {x.strip() for x in (checks or "").split(",")} & failover
    if named and not disruptive:
        raise InputError("--checks", sorted(named)[0], "runs only with --disruptive (it takes each node's "
                                                       "active bond slave down for a moment)")
    ids = (chosen if chosen is not None else {e.id for e in CHECKS}) - skipped
    if not disruptive:
        ids -= failover
    if not ids:
        raise InputError("--skip" if skip else "--checks", skip or checks, "leaves no check to run")
    if disruptive and not ids & failover:
        why = "is skipped (--skip)" if failover & skipped else f"is not in --checks {checks}: add bond"
        raise InputError(
            "--disruptive", None, f"the disruptive test belongs to {', '.join(DISRUPTIVE)} and {why}"
        )
    return components_for(ids), ids


# ---- per profile: what each entry is held to ---------------------------------------------------------

def _lookup(data, path: str):
    """The value at dotted ``path`` in ``data``; ``name[]`` maps over a list (the result is then a list)."""
    cur, many = [data], False
    for part in path.split("."):
        key = part.removesuffix("[]")
        nxt = []
        for c in cur:
            v = c.get(key) if isinstance(c, dict) else None
            if part.endswith("[]"):
                nxt.extend(v or [])
                many = True
            else:
                nxt.append(v)
        cur = nxt
    return cur if many else cur[0]


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def _threshold_text(t) -> str:
    if t.floor is not None:
        return f">= {_num(t.floor)} {t.unit}"
    return f"<= {_num(t.max)} {t.unit}"


def expectations(entry: Entry, profile, source: str) -> list[dict]:
    """What ``entry`` holds a node of ``profile`` to: [{"key", "value", "source"}]."""
    data = profile.model_dump()
    out = []
    for key in entry.profile_keys:
        value = _lookup(data, key)
        out.append({"key": key, "value": value, "source": source})
    for name in entry.thresholds:
        t = profile.thresholds.get(name)
        if t is None:
            out.append({"key": f"thresholds.{name}", "value": None,
                        "source": f"not set in profile {profile.name}: not judged"})
        else:
            out.append({"key": f"thresholds.{name}", "value": _threshold_text(t), "source": t.source})
    return out


def _reads(entry: Entry, profile) -> list[dict]:
    if entry.kind == "probe":
        return [{"evidence": entry.id.removeprefix("probe."), "command": cmd} for cmd in entry.reads]
    module = "bond_failover" if entry.disruptive else entry.component
    cmds = component(module).commands(HostContext("NODE", profile))
    out = []
    for key in entry.reads:
        if key in cmds:
            out.append({"evidence": key, "command": _short(cmds[key][0])})
    return out


def _short(cmd: str, limit: int = 240) -> str:
    """One line of ``cmd``; a program sent inline (python3 -c '<source>') is named, not quoted."""
    for name in remote.PROGRAMS:
        src = remote.source(name)
        cmd = cmd.replace(shlex.quote(src), f"<clustercert.remote.{name}>").replace(
            src, f"<clustercert.remote.{name}>"
        )
    one = " ".join(cmd.split())
    return one if len(one) <= limit else one[:limit - 1] + "…"


def load_profiles(names: list[str] | None) -> list[tuple[object, str]]:
    """(Profile, its file) for each name (a known name or a path); every known profile by default (the
    product's own and those installed distributions declare: the lab's, where it is installed)."""
    out = []
    known = builtin_profiles()
    for name in names or known:
        prof = load_profile(name)  # InputError (exit 2) for an unknown name or a bad file
        out.append((prof, profile_origin(name) if name in known else name))
    return out


def document(profile_names: list[str] | None = None) -> dict:
    """The catalogue as `clustercert checks --format json` prints it (without the envelope)."""
    profiles = load_profiles(profile_names)
    lab = lab_proofs()

    def shown(proofs: tuple[Proof, ...]) -> list[dict]:
        return [{"fault": p.fault, "params": p.params, "status": p.status, "test": p.test} for p in proofs]

    entries = []
    for e in ENTRIES:
        entries.append(
            {
                "id": e.id,
                "kind": e.kind,
                "component": e.component,
                "what": e.what,
                "disruptive": e.disruptive,
                "profiles": {
                    p.name: {"reads": _reads(e, p), "expects": expectations(e, p, src)} for p, src in profiles
                },
                "lab": {
                    "proofs": shown(proofs_of(e.id)),
                    "fails_in_lab": any(p.status == "fail" for p in proofs_of(e.id)),
                    "note": e.note or None,
                },
            }
        )
    return {"profiles": [p.name for p, _ in profiles], "entries": entries,
            "lab_installed": lab is not None,
            "verdicts": {v: shown(proofs_of(v)) for v in VERDICTS if proofs_of(v)},
            "drift_items": dict(DRIFT_ITEM_IDS),
            "drift_proofs": {i: shown(proofs_of(i)) for i in DRIFT_ITEM_IDS if proofs_of(i)}}


# ---- docs/checks.md ---------------------------------------------------------------------------------

def _md(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def value_text(v) -> str:
    if isinstance(v, list):
        return ", ".join(str(x) for x in v) if v else "[]"
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in v.items()) if v else "{}"
    return "—" if v is None else str(v)


def _markdown_entry(e: dict, installed: bool) -> list[str]:
    """One id's section of docs/checks.md: what passes, what it reads, each profile's figures, its lab
    proofs."""
    lines: list[str] = []
    lines.append(f"### `{e['id']}`" + (" (validate --disruptive only)" if e["disruptive"] else ""))
    lines += ["", _md(e["what"]) + ".", ""]
    first = next(iter(e["profiles"].values()))
    reads = "; ".join(f"`{_md(r['command'])}`" for r in first["reads"])
    lines.append(f"- reads: {reads or '—'}")
    for pname, p in e["profiles"].items():
        if p["expects"]:
            exp = "; ".join(
                f"`{x['key']}` {_md(value_text(x['value']))} ({_md(x['source'])})"
                for x in p["expects"]
            )
            lines.append(f"- `{pname}`: {exp}")
    proofs = e["lab"]["proofs"]
    if proofs:
        shown = "; ".join(
            f"`{p['fault']}"
            f"{' ' + ' '.join(f'{k}={v}' for k, v in p['params'].items()) if p['params'] else ''}"
            f"` → {p['status']}"
            + (f" ({p['test']})" if p["test"] else "")
            for p in proofs
        )
        lines.append(f"- lab: {shown}")
    if e["lab"]["note"] and installed:
        lines.append(f"- {'also' if e['lab']['fails_in_lab'] else 'no lab fault makes it fail'}: "
                     f"{_md(e['lab']['note'])}")
    lines.append("")
    return lines


def markdown(doc: dict) -> str:
    """docs/checks.md: generated by `clustercert checks --format markdown` (tests/test_catalogue.py keeps it
    so)."""
    lines = [
        "# Checks and probes",
        "",
        "<!-- generated by `clustercert checks --format markdown > docs/checks.md`; do not edit by hand -->",
        "",
        "Every id clustercert reports, what it reads on the node, what it holds the node to in each known "
        f"profile ({', '.join(f'`{p}`' for p in doc['profiles'])}) with the source of each figure, and the "
        "lab fault that shows it failing (`clustercert lab fault NODE KIND [KEY=VALUE]`, docs/lab-faults.md;"
        " the lab test that shows it declares it: `pytest.mark.proves`, scripts/lab_proofs.py). "
        "`clustercert validate --checks` and `--skip` take these ids and the component names; `clustercert "
        "checks --format json` is the same table for programs.",
        "",
    ]
    installed = doc.get("lab_installed", True)
    if not installed:
        lines += [
            "The simulated lab (the distribution clustercert-lab) is not installed: "
            "no lab proofs are listed.",
            "",
        ]
    by_comp: dict[str, list[dict]] = {}
    for e in doc["entries"]:
        by_comp.setdefault(e["component"], []).append(e)
    for comp, entries in by_comp.items():
        title = "Probes (`certify`, `probe`, `drift --probes`)" if comp == "probe" else f"Component `{comp}`"
        lines += [f"## {title}", ""]
        for e in entries:
            lines += _markdown_entry(e, installed)
    lines += ["## Node verdicts and drift items", ""]
    for verdict, proofs in doc["verdicts"].items():
        shown = "; ".join(f"`{p['fault']}` ({p['test']})" for p in proofs)
        lines.append(f"- verdict `{verdict}`: lab {shown}")
    for item, what in doc["drift_items"].items():
        proofs = doc.get("drift_proofs", {}).get(item) or []
        shown = "; ".join(f"`{p['fault']}` → {p['status']} ({p['test']})" for p in proofs)
        lines.append(f"- drift item `{item}`: {what}" + (f"; lab: {shown}" if shown else ""))
    return "\n".join(lines) + "\n"
