"""The catalogue of every check id and probe id: what each reads, what it holds the node to (per
profile, with the source of each figure), and which lab fault shows that it fails.

The ids are the ones the code emits: the checks' ``CHECK_IDS`` (clustercert.checks registry, with the
opt-in ``ib.bond_failover``) and the probes' ``probe.<name>`` findings (clustercert.probes). The lab
evidence is data kept here, in the product (which never imports clustercert_lab):
``Proof(fault, params, status, test)`` says that the lab fault kind ``fault`` (with ``params``) makes the
id come out ``status``, and which lab test shows it: the validators' fault matrix (VALIDATE_LAB: the
check the lab's own fault table, clustercert_lab/faults.py FAULTS, names for the kind, or one it
fails besides), the probes' fault matrix (PROBE_LAB: ids only a probe sees), or a named certify, probe
or failover lab test. An id no lab fault makes fail carries a ``note`` saying why. tests/test_catalogue.py
holds this table against the registry, the probe code, the lab's FAULTS, the fault matrices'
parametrisations and the named lab tests; docs/checks.md is ``clustercert checks --format markdown``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from clustercert import remote
from clustercert.checks import DISRUPTIVE, HostContext, component, components_for
from clustercert.checks import expand as checks_expand
from clustercert.checks.gpu import CRITICAL_XIDS
from clustercert.errors import InputError
from clustercert.model.profile import builtin_profiles, load_profile, profile_source
from clustercert.probes import commands as probe_cmds

VALIDATE_LAB = "tests/validators/test_validate_lab.py::test_fault_is_caught_on_its_node_only"
PROBE_LAB = "tests/validators/test_validate_lab.py::test_probe_fault_is_caught_on_its_node_only"
CERTIFY_LAB = "tests/certify/test_certify_lab.py"
NCCL_LAB = "tests/certify/test_nccl_pair_lab.py"
DRIFT_LAB = "tests/drift/test_drift_lab.py"
TRAINING_LAB = f"{CERTIFY_LAB}::test_training_faults_fail_their_checks_on_their_node_only"
DDP_LAB = f"{CERTIFY_LAB}::test_ddp_smoke_test_runs_real_pytorch_and_names_a_wrong_launch"
DDP_STEP_LAB = f"{CERTIFY_LAB}::test_rank_slow_is_a_straggler_on_its_node_only"


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
    proofs: tuple[Proof, ...] = ()
    note: str = ""              # why no lab fault makes it fail (required when no proof is a fail)
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


def _v(fault: str, **params) -> Proof:
    """A fault the validators' lab fault matrix (VALIDATE_LAB) shows failing this id on its node only: the kind's
    own check in the lab's fault table, or one the matrix asserts besides it (its ALSO_FAILS)."""
    return Proof(fault, params, "fail", VALIDATE_LAB)


def _p(fault: str, **params) -> Proof:
    """A fault that only a probe sees, which the probes' lab fault matrix (PROBE_LAB: `clustercert probe` on the
    bootstrapped lab) shows failing this id on its node only (its PROBE_FAULTS)."""
    return Proof(fault, params, "fail", PROBE_LAB)


CHECKS: tuple[Entry, ...] = (
    # ---- gpu -----------------------------------------------------------------------------------------
    Entry("gpu.count", "gpu", "nvidia-smi lists the profile's number of GPUs", ("nvsmi_xml",), ("gpu.count",),
          proofs=(_v("gpu_missing"),)),
    Entry("gpu.model", "gpu", "every GPU's product name is the profile's model", ("nvsmi_xml",), ("gpu.model",),
          note="the lab's simulated GPUs always carry the profile's model name; no fault kind renames one"),
    Entry("gpu.memory", "gpu", "every GPU's total memory is the profile's, within the tolerance", ("nvsmi_xml",),
          ("gpu.memory_mib", "gpu.memory_tolerance_mib"),
          note="the lab's simulated GPUs always report the profile's memory size; no fault kind changes it"),
    Entry("gpu.ecc", "gpu", "ECC enabled, no volatile uncorrectable error, corrected SRAM/DRAM counts under the "
          "thresholds", ("nvsmi_xml",), thresholds=("ecc_sram_corrected", "ecc_dram_corrected"),
          proofs=(_v("gpu_ecc_uncorrectable"),)),
    Entry("gpu.row_remap", "gpu", "no pending row remap and no remap failure", ("nvsmi_xml",),
          proofs=(_v("gpu_row_remap_pending"),)),
    Entry("gpu.retired_pages", "gpu", "retired pages (single + double bit) at most the threshold, none pending; "
          "skip where the architecture remaps rows instead", ("nvsmi_xml",), ("gpu.architecture",),
          ("retired_pages",),
          note="the lab simulates Hopper GPUs, which report row remapping instead of page retirement: the check "
               "is skip on lab nodes"),
    Entry("gpu.xid", "gpu", f"no critical Xid ({_ranges(CRITICAL_XIDS)}) in the kernel log", ("kernel_log",),
          proofs=(_v("gpu_xid"),)),
    Entry("gpu.pcie_link", "gpu", "every GPU's current PCIe link is at least the profile's generation and width",
          ("nvsmi_xml",), ("gpu.pcie_gen", "gpu.pcie_width"), proofs=(_v("gpu_pcie_degraded"),)),
    Entry("gpu.throttle", "gpu", "no hardware or thermal slowdown among the active clock event reasons",
          ("nvsmi_xml",), proofs=(_v("gpu_clock_throttle"),)),
    Entry("gpu.nvlink", "gpu", "every GPU has the profile's number of active NVLinks; an nvlink -s that prints "
          "nothing fails each GPU nvidia-smi -q -x lists (skip without NVLink)",
          ("nvsmi_nvlink", "nvsmi_xml"), ("gpu.nvlink_links_per_gpu",), proofs=(_v("nvlink_down"),)),
    Entry("gpu.persistence", "gpu", "persistence mode is Enabled on every GPU", ("nvsmi_xml",),
          note="no lab fault kind turns persistence mode off"),
    Entry("gpu.fabricmanager", "gpu", "nvidia-fabricmanager is active (running) on NVSwitch systems (skip "
          "without NVSwitch)", ("svc_fabricmanager",), ("gpu.nvswitch",), proofs=(_v("fabricmanager_stopped"),)),
    # ---- driver --------------------------------------------------------------------------------------
    Entry("driver.version", "driver", "the driver nvidia-smi reports is the profile's exact version",
          ("nvsmi_xml",), ("driver.version",),
          note="driver_version_mismatch installs another driver without a reboot: nvidia-smi then fails "
               "('Driver/library version mismatch'), so this check is an error there, not a fail; the lab proves "
               "the mismatch with driver.module_loaded"),
    Entry("driver.module_loaded", "driver", "the loaded nvidia module is the installed one (no reboot pending)",
          ("driver_loaded", "driver_installed"), proofs=(_v("driver_version_mismatch"),)),
    Entry("cuda.version", "driver", "the CUDA version the driver supports is at least the profile's",
          ("nvsmi_xml",), ("cuda.version",),
          note="the CUDA version follows the driver; no lab fault kind lowers it on its own"),
    Entry("nccl.version", "driver", "the libnccl2 package is the profile's NCCL version", ("nccl_pkg",),
          ("nccl.version",), proofs=(_v("package_drift"),)),
    # ---- rdma ----------------------------------------------------------------------------------------
    Entry("ofed.version", "rdma", "the RDMA stack is the profile's source and version (DOCA-OFED, MLNX_OFED or "
          "the distribution's rdma-core)", ("ofed_info", "doca_pkg", "rdma_core_pkg"), ("ofed.source", "ofed.version"),
          note="the lab's repository carries one DOCA-OFED version; no fault kind installs another"),
    Entry("rdma.peermem", "rdma", "the nvidia_peermem module is loaded (GPUDirect RDMA)", ("lsmod",),
          proofs=(_v("peermem_unloaded"),)),
    # ---- ib ------------------------------------------------------------------------------------------
    Entry("ib.port_state", "ib", "every profile HCA port and every compute rail's is ACTIVE / LinkUp",
          ("ib_sysfs", "nvsmi_topo"), ("ib.hcas[].name", "ib.hcas[].port", "hardware.rails.port"),
          proofs=(_v("ib_port_down"),)),
    Entry("ib.port_rate", "ib", "every profile HCA port and every compute rail's runs at its rated speed",
          ("ib_sysfs", "nvsmi_topo"), ("ib.hcas[].rate_gbit_per_s", "hardware.rails.rate_gbit_per_s"),
          proofs=(_v("ib_port_rate_degraded"),)),
    Entry("ib.firmware", "ib", "one firmware version on every HCA of a node (across the nodes of the profile: "
          "ib.firmware_uniform)", ("ib_sysfs",), proofs=(_v("hca_firmware_odd"),)),
    Entry("ib.counters", "ib", "symbol_error and link_downed at most the profile's limits on every port",
          ("ib_sysfs",), ("ib.max_symbol_errors", "ib.max_link_downed"), proofs=(_v("ib_symbol_errors"),)),
    Entry("ib.ipoib", "ib", "every HCA's IPoIB netdev exists and is UP, LOWER_UP", ("ip_link",),
          ("ib.hcas[].netdev",), proofs=(_v("ib_port_down"),)),
    Entry("ib.sm", "ib", "a subnet manager answers on every port (SM LID != 0), and one master SM per fabric "
          "across the nodes", ("ib_sysfs",), ("subnet_manager.mode",),
          note="the lab's fabrics always answer with one SM; no fault kind removes or duplicates it"),
    Entry("nccl.config", "ib", "/etc/nccl.conf sets NCCL_IB_HCA to the node's compute rails (discovered from "
          "topo -m and sysfs, or the profile's hardware.nic_gpu), in GPU order", ("nccl_conf", "nvsmi_topo", "ib_sysfs"),
          ("hardware.rails", "hardware.nic_gpu"), note="no lab fault kind edits /etc/nccl.conf (tests/drift edits it by hand)"),
    # ---- bond ----------------------------------------------------------------------------------------
    Entry("ib.bond", "bond", "the IPoIB bond exists with the profile's mode, slaves, primary, miimon and "
          "fail_over_mac, every slave up (skip without a bond)", ("bonding",),
          ("ib.bond.name", "ib.bond.mode", "ib.bond.slaves", "ib.bond.primary", "ib.bond.miimon_ms",
           "ib.bond.fail_over_mac"), proofs=(_v("bond_slave_down"),)),
    Entry("net.bond_lacp", "bond", "every 802.3ad (LACP) bond on the node has an active aggregator and every "
          "slave up and in it (/proc/net/bonding: each slave's Aggregator ID is the Active Aggregator Info's); "
          "skip without an 802.3ad bond", ("bonding_proc",),
          note="the lab's bonds are active-backup IPoIB bonds and it simulates no LACP partner (a switch) that "
               "an 802.3ad bond could aggregate with; real /proc/net/bonding samples of a slave outside the "
               "active aggregator and of a bond with none fail it in tests/test_checks_bond_lacp.py"),
    Entry("ib.bond_failover", "bond", "with the active slave taken down, the other takes over within miimon x 3 "
          "ms, a peer answers over the bond meanwhile, and the primary comes back (validate --disruptive only)",
          ("bond_failover",), ("ib.bond.miimon_ms", "ib.bond.primary"),
          proofs=(Proof("bond_slave_down", {"slave": "ib1"}, "fail",
                        "tests/validators/test_failover_lab.py::test_backup_slave_down_fails_that_node_only"),),
          disruptive=True),
    # ---- container -----------------------------------------------------------------------------------
    Entry("container.runtime", "container", "the profile's container runtime has the nvidia runtime configured",
          ("runtime_config",), ("container.runtime",), proofs=(_v("container_runtime_unconfigured"),)),
    Entry("container.cdi", "container", "a CDI spec for the GPUs exists and was generated after the driver was "
          "installed", ("cdi_stat",), note="no lab fault kind removes or ages the CDI spec"),
    # ---- tuning --------------------------------------------------------------------------------------
    Entry("tuning.memlock", "tuning", "a fresh login's memlock limit and systemd's DefaultLimitMEMLOCK are the "
          "profile's", ("memlock",), ("tuning.memlock",), proofs=(_v("memlock_limited"),)),
    Entry("tuning.sysctl", "tuning", "every sysctl the profile sets has its value (skip when it sets none)",
          ("sysctl",), ("tuning.sysctl",), note="no lab fault kind changes a sysctl"),
    Entry("tuning.hugepages", "tuning", "vm.nr_hugepages is at least the profile's 2 MiB huge pages",
          ("hugepages",), ("tuning.hugepages_2m",),
          note="no lab fault kind lowers vm.nr_hugepages (the lab profile asks for none)"),
    Entry("tuning.governor", "tuning", "every CPU's cpufreq governor is the profile's (skip for none)",
          ("governor",), ("tuning.governor",),
          note="lab nodes have no cpufreq of their own (the lab profile's governor is none: skip)"),
    # ---- time ----------------------------------------------------------------------------------------
    Entry("time.sync", "time", "chrony is synchronised with |offset| at most the profile's maximum", ("chrony",),
          ("tuning.time_max_offset_ms",), proofs=(_v("clock_unsynced"),)),
    # ---- packages ------------------------------------------------------------------------------------
    Entry("packages.pinned", "packages", "every package the bootstrap pinned is installed at its pinned "
          "version and held", ("pins", "pkg_versions", "pkg_holds"), proofs=(_v("package_drift"),)),
    # ---- hardware ------------------------------------------------------------------------------------
    Entry("gpu.nvlink_errors", "hardware", "every GPU's NVLink CRC, replay and recovery errors (all its links) at "
          "most the thresholds: since the counters were reset, and in drift since the baseline run (skip without "
          "NVLink)", ("nvsmi_nvlink_errors",), ("gpu.nvlink_links_per_gpu",),
          ("nvlink_crc_errors", "nvlink_replay_errors", "nvlink_recovery_errors"), proofs=(_v("nvlink_crc_errors"),)),
    Entry("gpu.nic_affinity", "hardware", "the node's compute rails: discovered from nvidia-smi topo -m and sysfs "
          "(hardware.rails: count, rate, PIX/PXB to a GPU of their own), or each HCA the profile names "
          "(hardware.nic_gpu) PIX or PXB to its GPU; a node whose GPU->NIC mapping differs from its peers' fails "
          "(skip without compute rails)", ("nvsmi_topo", "ib_sysfs"),
          ("hardware.rails", "hardware.nic_gpu", "hardware.source"), proofs=(_v("hca_moved"),)),
    Entry("hw.pcie_manifest", "hardware", "the profile's GPUs, HCAs and NVSwitches are on the PCIe bus (lspci), the "
          "GPUs at the profile's link generation and width, the HCAs at theirs where the profile gives them",
          ("lspci",), ("gpu.count", "gpu.pcie_gen", "gpu.pcie_width", "ib.hcas[].name", "hardware.nvswitch_count",
                       "hardware.hca_pcie_gen", "hardware.hca_pcie_width"),
          proofs=(_v("pcie_device_missing"), _v("gpu_pcie_degraded"))),
    Entry("gpu.fabric_state", "hardware", "NVSwitch systems: every GPU's NVLink fabric state is Completed with status "
          "Success (skip without NVSwitch)", ("nvsmi_xml",), ("gpu.nvswitch",), proofs=(_v("gpu_fabric_degraded"),)),
    Entry("ib.firmware_uniform", "hardware", "cluster-wide, after the per-node checks: each HCA runs the same firmware "
          "on every node of the profile; the odd one out is named on its node (skip with firmware_uniform: false)",
          ("hca_identity",), ("firmware_uniform",), proofs=(_v("hca_firmware_odd"),)),
    Entry("gpu.vbios_uniform", "hardware", "cluster-wide, after the per-node checks: every GPU runs the same VBIOS "
          "across the nodes of the profile; the odd GPU is named on its node (skip with firmware_uniform: false)",
          ("nvsmi_xml",), ("firmware_uniform",), proofs=(_v("gpu_vbios_odd"),)),
    # ---- storage (issue 22) ----------------------------------------------------------------------------
    Entry("storage.mounts", "storage", "every mount the profile requires is mounted, of one of its filesystem types, "
          "with its options and at least its free space (skip without a storage section)", ("findmnt",),
          ("storage.mounts[].path", "storage.mounts[].fstype", "storage.mounts[].options",
           "storage.mounts[].min_free_gib"), proofs=(_v("mount_missing"), Proof("mount_missing", {}, "fail", TRAINING_LAB))),
    Entry("storage.scratch", "storage", "the node-local scratch is mounted with its filesystem and free space, on the "
          "profile's number of NVMe devices (skip without a scratch)", ("findmnt", "lsblk"),
          ("storage.scratch.mount", "storage.scratch.fstype", "storage.scratch.nvme_devices",
           "storage.scratch.min_free_gib"),
          note="the lab's scratch is a host directory bound into each node and the lab has no NVMe devices; no fault "
               "kind unmounts the scratch (mount_missing takes the shared mount away, storage.mounts)"),
)

_SLOW0 = {"fabric": 0, "factor": 0.3}
_LOCALISED = f"{CERTIFY_LAB}::test_slow_link_and_missing_gpu_are_localised"
_THREE = f"{CERTIFY_LAB}::test_three_faults_on_six_nodes_localised_in_two_rounds_within_twice_the_healthy_time"
_BW_NOTE = "(and not below the outlier ratio x the cluster median of the same probe)"


def _probe_commands() -> dict[str, tuple[str, ...]]:
    c = probe_cmds
    return {
        "ib_write_bw_loopback": (c.perftest_cmd("ib_write_bw", "HCA", 1, c.PERFTEST_PORT, 5),
                                 c.perftest_cmd("ib_write_bw", "HCA", 1, c.PERFTEST_PORT, 5, "localhost")),
        "ib_write_bw": (c.perftest_cmd("ib_write_bw", "HCA", 1, c.PERFTEST_PORT, 5),
                        c.perftest_cmd("ib_write_bw", "HCA", 1, c.PERFTEST_PORT, 5, "PEER")),
        "ib_write_lat": (c.perftest_cmd("ib_write_lat", "HCA", 1, c.PERFTEST_PORT + 200, 5),
                         c.perftest_cmd("ib_write_lat", "HCA", 1, c.PERFTEST_PORT + 200, 5, "PEER")),
        "iperf3": (c.iperf3_server_cmd("PEER_IPOIB", c.IPERF_PORT), c.iperf3_client_cmd("PEER_IPOIB", "OWN_IPOIB",
                                                                                          c.IPERF_PORT, 5)),
        "nccl_allreduce": (c.nccl_1node_cmd(8), "mpirun ... all_reduce_perf across the pair (or an srun step)"),
        "nccl_cluster": (c.nccl_cluster_mpirun_cmd(["NODE1", "NODE2", "NODE3"], 8, "TAG"),
                         c.nccl_cluster_mpirun_cmd(["NODE1", "NODE2", "NODE3"], 8, "TAG",
                                                   {"NCCL_IB_HCA": "=HCAS_OF_ONE_FABRIC"}),
                         "or one srun step over the nodes (--backend slurm, or Slurm can place it now)"),
        "gpu_util_under_load": (c.util_sampler_cmd(), "beside all_reduce_perf on one node"),
        "nvbandwidth": (c.nvbandwidth_cmd(),),
        "dcgmi_diag": ("dcgmi diag -r LEVEL -j (DCGM 3.x and later, as the node's `dcgmi --version` says; "
                       "dcgmi diag -r LEVEL, the text table, before)",),
        "pairs": ("the pair probes' results, through localisation",),
        "ib_write_bw_gdr": (c.gdr_perftest_cmd("HCA", 1, c.GDR_PORT, 5, 0, 0),
                            c.gdr_perftest_cmd("HCA", 1, c.GDR_PORT, 5, 0, 0, "localhost (loopback) or PEER"),
                            c.topo_cmd()),
        "nccl_transport": ("the pair NCCL run (mpirun or srun) with " + c.NCCL_DEBUG_ENV + ": its Channel ... via NET/... "
                           "lines per node",),
        "nvlink_aggregate": (c.nvbandwidth_cmd(c.NVLINK_TESTS, base=False),),
        "checkpoint_write": (c.checkpoint_cmd("PATH", "NODE", 1024, 5),),
        "ddp_allreduce": ("torchrun --nnodes=2 --nproc_per_node=RANKS --node_rank=0|1 --master_addr=FIRST_NODE "
                          "--master_port=FREE_PORT --no_python python3 -c <clustercert.remote.ddp_smoke> (over ssh from "
                          "the first node, or one srun step)",),
    }


def _probes() -> tuple[Entry, ...]:
    cmd = _probe_commands()
    return (
        Entry("probe.ib_write_bw_loopback", "probe", f"ib_write_bw loopback on each compute HCA reaches the floor "
              f"{_BW_NOTE}", cmd["ib_write_bw_loopback"], thresholds=("ib_write_bw_loopback", "outlier_ratio"),
              proofs=(_p("ib_port_rate_degraded"),
                      Proof("probe_hang", {"tool": "ib_write_bw"}, "error",
                            f"{CERTIFY_LAB}::test_hung_probe_is_a_timed_error_and_leaves_nothing"))),
        Entry("probe.nccl_allreduce", "probe", f"NCCL all_reduce bus bandwidth on one node and across each pair "
              f"reaches its floor {_BW_NOTE}", cmd["nccl_allreduce"],
              thresholds=("nccl_allreduce_1node", "nccl_allreduce_pair", "outlier_ratio"),
              proofs=(_p("nccl_busbw_low", factor=0.5),
                      Proof("link_slow", _SLOW0, "fail", f"{NCCL_LAB}::test_a_slow_link_on_either_end_fails_the_pair"),
                      Proof("probe_hang", {"tool": "all_reduce_perf"}, "error",
                            f"{NCCL_LAB}::test_a_hung_rank_is_a_timed_error_and_leaves_no_process"),
                      Proof("nccl_one_host", {}, "error",
                            f"{NCCL_LAB}::test_nccl_one_host_makes_the_pairs_of_its_node_an_error_never_a_pass"))),
        Entry("probe.nccl_cluster", "probe", "after the pair rounds, one all_reduce across every node they cleared "
              "(N nodes x G GPUs ranks, the pair run's launcher) runs on every one of them with G ranks each, and its "
              "bus bandwidth reaches the scaling floor x the median pair busbw (its scaling efficiency); where the "
              "compute rails span several fabrics, one run per fabric as well (NCCL_IB_HCA set to that fabric's "
              "HCAs), against the median pair busbw x the fabric's share of the rated rails; a finding of the cluster "
              "(the certificate's cluster_findings), skip with fewer than 3 cleared nodes", cmd["nccl_cluster"],
              ("ib.hcas[].fabric", "ib.hcas[].rate_gbit_per_s"), ("nccl_allreduce_cluster",),
              proofs=(Proof("nccl_scale_slow", {}, "fail",
                            f"{NCCL_LAB}::test_the_cluster_run_scales_and_a_slow_spine_fails_it_while_pairs_pass"),)),
        Entry("probe.gpu_util_under_load", "probe", "every GPU's utilisation while NCCL runs on the node reaches the "
              "floor", cmd["gpu_util_under_load"], thresholds=("gpu_util_under_load",),
              proofs=(Proof("gpu_missing", {}, "error", _LOCALISED),),
              note="the simulated GPUs are always busy under load (a missing GPU stops the load: error)"),
        *(Entry(f"probe.{name}", "probe", f"nvbandwidth {name.removeprefix('nvbandwidth_')} per GPU reaches the floor "
                f"{_BW_NOTE}", cmd["nvbandwidth"], thresholds=(name, "outlier_ratio"),
                proofs=() if name == "nvbandwidth_d2d" else (_p("gpu_pcie_degraded"),),
                note="" if name != "nvbandwidth_d2d" else
                "nvlink_down takes one of a GPU's 18 NVLinks down: the simulated D2D bandwidth falls by 1/18 (389 -> "
                "367 GB/s), above the lab profile's floor (335) and 90% of the cluster median, so it passes (the "
                "fault fails gpu.nvlink, and the simulated 1-node all_reduce falls to 452 GB/s, below its 460 "
                "floor); it takes three links of one GPU down (three nvlink_down faults: 324 GB/s) to fail it, "
                "which no lab test does")
          for name in ("nvbandwidth_h2d", "nvbandwidth_d2h", "nvbandwidth_d2d")),
        Entry("probe.dcgmi_diag", "probe", "dcgmi diag at the profile's level passes every test (skip without "
              "dcgm_diag)", cmd["dcgmi_diag"], ("dcgm_diag.level",),
              proofs=(Proof("gpu_row_remap_pending", {}, "fail", _LOCALISED),)),
        Entry("probe.ib_write_bw", "probe", f"ib_write_bw from each node to its partner on every compute rail reaches "
              f"the floor {_BW_NOTE}", cmd["ib_write_bw"], thresholds=("ib_write_bw_pair", "outlier_ratio"),
              proofs=(Proof("link_slow", _SLOW0, "fail", _LOCALISED),)),
        Entry("probe.ib_write_lat", "probe", "ib_write_lat 99th percentile to the partner on every compute rail is "
              "under the ceiling", cmd["ib_write_lat"], thresholds=("ib_write_lat_p99",),
              proofs=(Proof("link_slow", _SLOW0, "fail", _LOCALISED),)),
        Entry("probe.iperf3", "probe", f"iperf3 over IPoIB to the partner on every fabric reaches the floor {_BW_NOTE}",
              cmd["iperf3"], thresholds=("iperf3_ipoib", "outlier_ratio"),
              proofs=(Proof("link_slow", _SLOW0, "fail", _LOCALISED),
                      Proof("bond_slave_down", {"slave": "ib1"}, "error", _THREE))),
        Entry("probe.pairs", "probe", "localisation puts no pair failure on the node (fail: the node is to blame; "
              "error: one of two ends, not told which)", cmd["pairs"],
              proofs=(Proof("link_slow", _SLOW0, "fail", _THREE),)),
        # ---- issue 22: what a training job needs -------------------------------------------------------------
        Entry("probe.ib_write_bw_gdr", "probe", "ib_write_bw from GPU memory (--use_cuda, pinned to the pair's NUMA node) "
              "reaches its floor for each GPU-rail pair of the node (its compute rails), in loopback and to the partner, "
              f"and topo -m shows each pair's NIC behind its GPU's PCIe switch {_BW_NOTE}", cmd["ib_write_bw_gdr"],
              ("gpudirect.source", "hardware.rails"),
              ("ib_write_bw_gdr_loopback", "ib_write_bw_gdr_pair", "outlier_ratio"),
              proofs=(Proof("gdr_disabled", {}, "fail", TRAINING_LAB),)),
        Entry("probe.nccl_transport", "probe", "the pair NCCL run's connections use NCCL's InfiniBand transport with "
              "GDRDMA on each end's compute rails (NET/Socket, or IB without "
              "GDRDMA there, fails with the lines that show it)", cmd["nccl_transport"], ("gpudirect.source", "hardware.rails"),
              proofs=(Proof("gdr_disabled", {}, "fail", TRAINING_LAB),)),
        Entry("probe.nvlink_aggregate", "probe", "every GPU's NVLink bandwidth as nvbandwidth's copy engines move it, "
              "all peers writing into it (all_to_one_write_ce) plus it writing into all peers (one_to_all_write_ce), "
              "reaches the floor: 0.9 x what a healthy GPU of the profile measures so, well below the line rate NVIDIA "
              f"quotes (H100: 900 GB/s, which copies never reach) {_BW_NOTE}", cmd["nvlink_aggregate"],
              thresholds=("nvlink_aggregate", "outlier_ratio"),
              proofs=(Proof("nvlink_down", {}, "fail", TRAINING_LAB),)),
        Entry("probe.checkpoint_write", "probe", "fio writes a checkpoint-sized file with direct I/O to every storage "
              "path the profile lists and reads it back, each at least its floor (skip without a storage section)",
              cmd["checkpoint_write"], ("storage.checkpoint_size_mib", "storage.mounts[].path", "storage.scratch.mount"),
              ("checkpoint_write", "checkpoint_read"), proofs=(Proof("storage_slow", {}, "fail", TRAINING_LAB),)),
        Entry("probe.ddp_allreduce", "probe", "torchrun across each pair of nodes (the profile's launcher, backend and "
              "ranks per node) starts every rank, torch.distributed's world size, ranks and local ranks are the "
              "profile's, and all_reduce gives the right sum on every rank (value: the median step, ms)",
              cmd["ddp_allreduce"], ("ddp.backend", "ddp.launcher", "ddp.ranks_per_node", "ddp.package"),
              note="no lab fault kind breaks PyTorch; the lab test " + DDP_LAB.partition("::")[2] + " launches it with "
                   "a wrong --nproc_per_node (clustercert_ddp_nproc_per_node) and asserts the fail that names the "
                   "mismatch"),
        Entry("probe.ddp_step", "probe", "the same torchrun launch trains: DistributedDataParallel on a small MLP "
              "the probe builds (forward, backward with the gradient buckets all-reduced, SGD step; bf16 on a GPU "
              "that supports it), the replicas' parameters equal after the steps, and no rank's median forward "
              "pass is more than ddp.straggler_ratio x the median of the other node's ranks (a straggler is the "
              "finding of its node alone; a node whose ranks did not all report their steps, or a launch that "
              "timed out, is an error)", cmd["ddp_allreduce"],
              ("ddp.steps", "ddp.width", "ddp.depth", "ddp.batch", "ddp.straggler_ratio"),
              proofs=(Proof("rank_slow", {}, "fail", DDP_STEP_LAB),)),
    )


PROBES: tuple[Entry, ...] = _probes()
ENTRIES: tuple[Entry, ...] = CHECKS + PROBES
BY_ID: dict[str, Entry] = {e.id: e for e in ENTRIES}
# --checks/--skip name validator checks: a probe id there is refused with where it runs
PROBE_REFUSALS = {e.id: "is a probe, not a validator check (run it with `clustercert probe --probes` or `certify`)"
                  for e in PROBES}
# node verdicts a lab fault proves (not check ids): verdict -> proofs
VERDICT_PROOFS = {"unreachable": (Proof("node_down", {}, "unreachable",
                                        "tests/validators/test_validate_lab.py::test_node_down_is_unreachable_and_others_complete"),)}
# what drift's items name besides check ids (docs/nightly-drift.md)
DRIFT_ITEM_IDS = {"node.reachable": "the node answered at the baseline and does not now",
                  "probe.link": "a pair link (both ends cleared elsewhere) fell below the baseline's median by more "
                                "than the profile's drift tolerance",
                  "hardware.gpu": "a GPU slot (PCI bus id) holds another GPU (serial, UUID) than at the baseline, or "
                                  "none, or a new one (item kind hardware)",
                  "hardware.hca": "an HCA has another node GUID than at the baseline, or is gone or new (kind hardware)",
                  "hardware.board": "the system, baseboard or chassis serial (dmidecode) differs from the baseline's "
                                    "(kind hardware)",
                  "hardware.nvswitch": "fewer or more NVSwitches on the PCIe bus than at the baseline (kind hardware)"}
# drift items a lab fault proves: item -> proofs (status: the item's kind)
DRIFT_PROOFS = {"hardware.gpu": (Proof("gpu_swapped", {}, "hardware",
                                       f"{DRIFT_LAB}::test_four_tamperings_classified_then_fixed"),)}


def check_entries(disruptive: bool = True) -> list[Entry]:
    return [e for e in CHECKS if disruptive or not e.disruptive]


# ---- choosing ids: validate --checks / --skip --------------------------------------------------------

def expand(flag: str, text: str | None) -> set[str] | None:
    """``--checks``/``--skip`` LIST (check ids and component names, comma separated) -> the check ids it
    names; None for an absent flag. Unknown ids, and probe ids, are bad input: one line naming the flag and the id
    (clustercert.checks.expand)."""
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
        raise InputError("--checks", sorted(named)[0], "runs only with --disruptive (it takes each node's active "
                                                       "bond slave down for a moment)")
    ids = (chosen if chosen is not None else {e.id for e in CHECKS}) - skipped
    if not disruptive:
        ids -= failover
    if not ids:
        raise InputError("--skip" if skip else "--checks", skip or checks, "leaves no check to run")
    if disruptive and not ids & failover:
        why = "is skipped (--skip)" if failover & skipped else f"is not in --checks {checks}: add bond"
        raise InputError("--disruptive", None, f"the disruptive test belongs to {', '.join(DISRUPTIVE)} and {why}")
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
        cmd = cmd.replace(shlex.quote(src), f"<clustercert.remote.{name}>").replace(src, f"<clustercert.remote.{name}>")
    one = " ".join(cmd.split())
    return one if len(one) <= limit else one[:limit - 1] + "…"


def load_profiles(names: list[str] | None) -> list[tuple[object, str]]:
    """(Profile, its file) for each name (built-in name or path); every built-in profile by default."""
    out = []
    for name in names or builtin_profiles():
        prof = load_profile(name)  # InputError (exit 2) for an unknown name or a bad file
        src = profile_source(name)
        shown = f"profiles/{src.name}" if name in builtin_profiles() else str(src)
        out.append((prof, shown))
    return out


def document(profile_names: list[str] | None = None) -> dict:
    """The catalogue as `clustercert checks --format json` prints it (without the envelope)."""
    profiles = load_profiles(profile_names)
    entries = []
    for e in ENTRIES:
        entries.append({
            "id": e.id,
            "kind": e.kind,
            "component": e.component,
            "what": e.what,
            "disruptive": e.disruptive,
            "profiles": {p.name: {"reads": _reads(e, p), "expects": expectations(e, p, src)} for p, src in profiles},
            "lab": {
                "proofs": [{"fault": p.fault, "params": p.params, "status": p.status, "test": p.test or None}
                           for p in e.proofs],
                "fails_in_lab": any(p.status == "fail" for p in e.proofs),
                "note": e.note or None,
            },
        })
    return {"profiles": [p.name for p, _ in profiles], "entries": entries,
            "verdicts": {v: [{"fault": p.fault, "params": p.params, "status": p.status, "test": p.test}
                             for p in ps] for v, ps in VERDICT_PROOFS.items()},
            "drift_items": dict(DRIFT_ITEM_IDS),
            "drift_proofs": {i: [{"fault": p.fault, "params": p.params, "status": p.status, "test": p.test}
                                 for p in ps] for i, ps in DRIFT_PROOFS.items()}}


# ---- docs/checks.md ---------------------------------------------------------------------------------

def _md(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def value_text(v) -> str:
    if isinstance(v, list):
        return ", ".join(str(x) for x in v) if v else "[]"
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in v.items()) if v else "{}"
    return "—" if v is None else str(v)


def markdown(doc: dict) -> str:
    """docs/checks.md: generated by `clustercert checks --format markdown` (tests/test_catalogue.py keeps it so)."""
    lines = [
        "# Checks and probes",
        "",
        "<!-- generated by `clustercert checks --format markdown > docs/checks.md`; do not edit by hand -->",
        "",
        "Every id clustercert reports, what it reads on the node, what it holds the node to in each built-in "
        f"profile ({', '.join(f'`{p}`' for p in doc['profiles'])}) with the source of each figure, and the "
        "lab fault that shows it failing (`clustercert lab fault NODE KIND [KEY=VALUE]`, docs/lab-faults.md). "
        "`clustercert validate --checks` and `--skip` take these ids and the component names; "
        "`clustercert checks --format json` is the same table for programs.",
        "",
    ]
    by_comp: dict[str, list[dict]] = {}
    for e in doc["entries"]:
        by_comp.setdefault(e["component"], []).append(e)
    for comp, entries in by_comp.items():
        title = "Probes (`certify`, `probe`, `drift --probes`)" if comp == "probe" else f"Component `{comp}`"
        lines += [f"## {title}", ""]
        for e in entries:
            lines.append(f"### `{e['id']}`" + (" (validate --disruptive only)" if e["disruptive"] else ""))
            lines += ["", _md(e["what"]) + ".", ""]
            first = next(iter(e["profiles"].values()))
            reads = "; ".join(f"`{_md(r['command'])}`" for r in first["reads"])
            lines.append(f"- reads: {reads or '—'}")
            for pname, p in e["profiles"].items():
                if p["expects"]:
                    exp = "; ".join(f"`{x['key']}` {_md(value_text(x['value']))} ({_md(x['source'])})" for x in p["expects"])
                    lines.append(f"- `{pname}`: {exp}")
            proofs = e["lab"]["proofs"]
            if proofs:
                shown = "; ".join(
                    f"`{p['fault']}{' ' + ' '.join(f'{k}={v}' for k, v in p['params'].items()) if p['params'] else ''}`"
                    f" → {p['status']}" + (f" ({p['test']})" if p["test"] else "") for p in proofs)
                lines.append(f"- lab: {shown}")
            if e["lab"]["note"]:
                lines.append(f"- {'also' if e['lab']['fails_in_lab'] else 'no lab fault makes it fail'}: "
                             f"{_md(e['lab']['note'])}")
            lines.append("")
    lines += ["## Node verdicts and drift items", ""]
    for verdict, proofs in doc["verdicts"].items():
        shown = "; ".join(f"`{p['fault']}` ({p['test']})" for p in proofs)
        lines.append(f"- verdict `{verdict}`: lab {shown}")
    for item, what in doc["drift_items"].items():
        proofs = doc.get("drift_proofs", {}).get(item) or []
        shown = "; ".join(f"`{p['fault']}` → {p['status']} ({p['test']})" for p in proofs)
        lines.append(f"- drift item `{item}`: {what}" + (f"; lab: {shown}" if shown else ""))
    return "\n".join(lines) + "\n"
