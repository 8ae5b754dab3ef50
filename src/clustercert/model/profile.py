"""Profiles: what a node class must be, and the thresholds it is held to.

A profile is a YAML file (built-in ones live in ``clustercert/profiles/``). Every key is validated:
unknown keys are errors, so a typo cannot silently disable a check. A site picks a profile per
inventory group (``clustercert_profile``) and may override any key with
``clustercert_profile_overrides`` (deep-merged, then validated again).
"""

from __future__ import annotations

import copy
import functools
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from clustercert.errors import InputError
from clustercert.model import names
from clustercert.model.plain import (
    DcgmDiagRules,
    IBRules,
    ProfileRules,
    StorageRules,
    ThresholdRules,
)
from clustercert.model.strict_yaml import load_yaml_file

BUILTIN_DIR = Path(__file__).resolve().parent.parent / "profiles"  # clustercert/profiles/
PROFILE_ENTRY_POINTS = "clustercert.profiles"  # profiles installed distributions declare (installed_profiles)

# Numbers: never a boolean (YAML's yes/true would read as 1), never NaN or infinite.
Num = Annotated[float, Strict(), Field(allow_inf_nan=False)]
# Names that reach remote commands (issue 19.2a): validated by clustercert.model.names at load time.
IfName = Annotated[str, AfterValidator(lambda v: names.validate("ifname", v))]
HcaName = Annotated[str, AfterValidator(lambda v: names.validate("hca", v))]
SysctlKey = Annotated[str, AfterValidator(lambda v: names.validate("sysctl_key", v))]
KernelArg = Annotated[str, AfterValidator(lambda v: names.validate("kernel_arg", v))]
Version = Annotated[str, AfterValidator(lambda v: names.validate("version", v))]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GPU(_Strict):
    count: StrictInt = Field(ge=1, le=64)  # a GPU node class has GPUs: 0 is a typo, not a node class
    model: str
    memory_mib: StrictInt = Field(ge=0)
    memory_tolerance_mib: StrictInt = Field(default=1024, ge=0)
    architecture: str
    pcie_gen: StrictInt = Field(ge=1, le=7)
    pcie_width: StrictInt = Field(ge=1, le=32)
    nvlink_links_per_gpu: StrictInt = Field(ge=0, le=36)
    nvswitch: StrictBool


class Driver(_Strict):
    branch: str = Field(pattern=r"^\d{3}$")
    version: str = Field(pattern=r"^\d{3}\.\d+(\.\d+)?$")
    modules: Literal["open", "proprietary"]

    @model_validator(mode="after")
    def _branch_matches(self) -> Driver:
        if not self.version.startswith(self.branch + "."):
            raise ValueError(f"version {self.version} is not on branch {self.branch}")
        return self


class Cuda(_Strict):
    version: str = Field(pattern=r"^\d+\.\d+$")


class Nccl(_Strict):
    version: str = Field(pattern=r"^\d+\.\d+\.\d+$")


class Ofed(_Strict):
    source: Literal["doca", "mlnx", "inbox"]
    # the distribution's own RDMA stack (source: inbox) has no release of ours to pin: "distribution"
    version: Literal["distribution"] | Version

    @model_validator(mode="after")
    def _distribution_is_inbox(self) -> Ofed:
        if self.version == "distribution" and self.source != "inbox":
            raise ValueError(f"version 'distribution' is for source: inbox, not {self.source}")
        return self


class Container(_Strict):
    runtime: Literal["docker", "containerd", "crio"]


class HCA(_Strict):
    name: HcaName
    port: StrictInt = Field(default=1, ge=1, le=2)
    netdev: IfName
    fabric: StrictInt = Field(ge=0, le=15)
    rate_gbit_per_s: StrictInt = Field(gt=0, le=3200)
    role: Literal["compute", "storage"]


class Bond(_Strict):
    name: IfName = "bond0"
    mode: Literal["active-backup"] = "active-backup"
    slaves: tuple[IfName, IfName]
    primary: IfName
    miimon_ms: StrictInt = Field(default=100, ge=1, le=10000)
    fail_over_mac: Literal["none", "active", "follow"] = "active"

    @model_validator(mode="after")
    def _primary_is_slave(self) -> Bond:
        if self.primary not in self.slaves:
            raise ValueError(f"primary {self.primary!r} is not one of the slaves {list(self.slaves)}")
        if self.slaves[0] == self.slaves[1]:
            raise ValueError("the two bond slaves must differ")
        return self


class IB(IBRules, _Strict):
    link_layer: Literal["InfiniBand", "Ethernet"] = "InfiniBand"
    hcas: tuple[HCA, ...]
    bond: Bond | None = None
    max_symbol_errors: StrictInt = Field(default=0, ge=0)
    max_link_downed: StrictInt = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> IB:
        names = [h.name for h in self.hcas]
        if len(set(names)) != len(names):
            raise ValueError("HCA names must be unique")
        netdevs = {h.netdev for h in self.hcas}
        if self.bond:
            for s in self.bond.slaves:
                if s not in netdevs:
                    raise ValueError(f"bond slave {s!r} is not the netdev of any HCA")
        return self


class SubnetManager(_Strict):
    mode: Literal["host", "switch"]
    redundant: StrictBool = True


class Tuning(_Strict):
    memlock: Literal["unlimited"] | Annotated[StrictInt, Field(ge=0)] = "unlimited"
    nofile: StrictInt = Field(default=1048576, ge=1024)
    hugepages_2m: StrictInt = Field(default=0, ge=0)
    governor: Literal["performance", "powersave", "schedutil", "ondemand", "none"] = "performance"
    sysctl: dict[SysctlKey, str] = Field(default_factory=dict)
    kernel_cmdline: tuple[KernelArg, ...] = ()
    time_max_offset_ms: Num = Field(default=100.0, gt=0)

    @field_validator("sysctl")
    @classmethod
    def _sysctl_values(cls, value: dict[str, str]) -> dict[str, str]:
        for key, val in value.items():
            reason = names.check_sysctl_value(val)
            if reason:
                raise ValueError(f"{key}: {reason}")
        return value


class Threshold(ThresholdRules, _Strict):  # floor: ThresholdRules
    """A limit with its source. Either ``min``/``max`` directly, or ``rated`` x ``ratio`` (a floor)."""

    unit: str
    source: str = Field(min_length=5)
    min: Num | None = Field(default=None, ge=0)
    max: Num | None = Field(default=None, ge=0)
    rated: Num | None = Field(default=None, gt=0)
    ratio: Num | None = Field(default=None, gt=0, le=1.5)

    @model_validator(mode="after")
    def _one_form(self) -> Threshold:
        has_rated = self.rated is not None or self.ratio is not None
        if has_rated and (self.rated is None or self.ratio is None):
            raise ValueError("rated and ratio go together")
        if not has_rated and self.min is None and self.max is None:
            raise ValueError("give min, max, or rated and ratio")
        if has_rated and self.min is not None:
            raise ValueError("give either min or rated x ratio, not both")
        floor = self.floor
        if floor is not None and self.max is not None and floor > self.max:
            raise ValueError(f"the floor {floor:g} is above the ceiling max {self.max:g}: nothing could pass")
        return self


class DcgmDiag(DcgmDiagRules, _Strict):  # limit_s: DcgmDiagRules
    """``dcgmi diag -r LEVEL`` on every node during certify. Level 0 turns it off (a skip finding
    says so). A diagnostic legitimately runs for minutes, so it has its own time limit instead of the
    probes' ``--probe-timeout``."""

    level: StrictInt = Field(ge=0, le=4)
    source: str = Field(min_length=5)
    timeout_s: Num | None = Field(default=None, gt=0)


class Rails(_Strict):
    """The node's compute rails as the profile states them: how many, at what rate (on the profile's
    ib.link_layer), how near their GPU (``affinity``: PIX -- behind the same PCIe switch --, or PXB: PIX or
    PXB), on which fabric and HCA port -- never their names: those are discovered per node from
    ``nvidia-smi topo -m`` and sysfs (clustercert.checks.rails.select) and recorded in the certificate."""

    count: StrictInt = Field(ge=1, le=64)
    rate_gbit_per_s: StrictInt = Field(gt=0, le=3200)
    affinity: Literal["PIX", "PXB"]
    fabric: StrictInt = Field(default=0, ge=0, le=15)
    port: StrictInt = Field(default=1, ge=1, le=2)
    source: str = Field(min_length=5)


class Hardware(_Strict):
    """What the node's PCIe tree holds and where its compute HCAs sit, with where those figures come from:
    ``hw.pcie_manifest`` (lspci: the profile's GPUs and HCAs, ``nvswitch_count`` NVSwitches, HCAs at
    ``hca_pcie_gen`` x ``hca_pcie_width`` where given) and the compute rails: ``rails`` states them (count,
    rate, affinity; their names are discovered per node), or a site that wants fixed names gives ``nic_gpu``
    ({hca: GPU index}; its rails are those -- whatever ``rails.count`` says --, each held to topo -m by
    ``gpu.nic_affinity``, at ``rails.affinity`` where given). A site override
    replaces ``nic_gpu`` whole (WHOLE_MAPPINGS). The mapping is not checked against ``gpu.count`` here -- a
    site that lowers it keeps loading -- : ``gpu.nic_affinity`` reports an entry naming a GPU the profile does
    not have as an error."""

    source: str = Field(min_length=5)
    nvswitch_count: StrictInt = Field(default=0, ge=0, le=64)
    hca_pcie_gen: StrictInt | None = Field(default=None, ge=1, le=7)
    hca_pcie_width: StrictInt | None = Field(default=None, ge=1, le=32)
    rails: Rails | None = None
    nic_gpu: dict[HcaName, Annotated[StrictInt, Field(ge=0, le=63)]] = Field(default_factory=dict)


# ---- issue 22: GPUDirect RDMA, the DDP smoke test, storage ---------------------------------------

LAUNCH_WORD_RE = r"^[A-Za-z0-9_./=+:-]+$"   # a word of the launcher's command line (torchrun; python3 -m ...)
ENV_NAME_RE = r"^[A-Z_][A-Z0-9_]{0,63}$"
ENV_VALUE_RE = r"^[A-Za-z0-9_.,:/+=@^%-]{1,256}$"
FSTYPE_RE = r"^[a-z0-9][a-z0-9_.+-]{0,31}$"
MOUNT_OPTION_RE = r"^[a-z0-9_][a-z0-9_=.,:-]{0,63}$"
RemotePath = Annotated[str, AfterValidator(lambda v: names.validate("remote_path", v))]


class GpuDirect(_Strict):
    """GPUDirect RDMA on the node's compute rails: probe.ib_write_bw_gdr measures each GPU-rail pair
    (ib_write_bw --use_cuda, pinned with numactl to the GPU's NUMA node) and probe.nccl_transport expects
    NCCL's IB transport with GDRDMA on the rails. The pairs are the node's rails (hardware.rails, discovered
    per node from nvidia-smi topo -m and sysfs; or hardware.nic_gpu)."""

    source: str = Field(min_length=5)


class Ddp(_Strict):
    """The DDP smoke test (probe.ddp_allreduce): the site's PyTorch launched as its users launch it,
    torchrun across two nodes with one process per GPU."""

    backend: Literal["nccl", "gloo"]
    launcher: tuple[Annotated[str, Field(pattern=LAUNCH_WORD_RE)], ...] = ("torchrun",)
    python: Annotated[str, AfterValidator(lambda v: names.validate("interpreter", v))] = "python3"
    # the site's PyTorch package, installed by the nccl_tools role (None: the site installs PyTorch itself)
    package: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9+.-]{0,63}$")] | None = None
    # processes per node; None: one per GPU (gpu.count). A CPU backend (gloo) may start fewer.
    ranks_per_node: StrictInt | None = Field(default=None, ge=1, le=64)
    steps: StrictInt = Field(default=10, ge=1, le=1000)
    tensor_mib: Num = Field(default=16, gt=0, le=4096)
    env: dict[Annotated[str, Field(pattern=ENV_NAME_RE)], Annotated[str, Field(pattern=ENV_VALUE_RE)]] = \
        Field(default_factory=dict)
    timeout_s: Num = Field(default=300, gt=0, le=7200)
    source: str = Field(min_length=5)
    # probe.ddp_step: the DistributedDataParallel steps' model (an MLP the probe builds: width x depth, batch
    # rows per rank) and the straggler rule, a rank whose median forward pass takes more than
    # straggler_ratio x the median of the other node's ranks
    width: StrictInt = Field(default=1024, ge=8, le=16384)
    depth: StrictInt = Field(default=4, ge=1, le=64)
    batch: StrictInt = Field(default=256, ge=1, le=65536)
    straggler_ratio: Num = Field(default=1.5, gt=1, le=100)
    straggler_source: str = Field(default="clustercert default: a rank 1.5x slower than its partner node's "
                                  "median (profile ddp.straggler_ratio)", min_length=5)


FsTypes = tuple[Annotated[str, Field(pattern=FSTYPE_RE)], ...]


def _fstypes(value):
    return (value,) if isinstance(value, str) else value


class Mount(_Strict):
    """A filesystem the jobs read data from or write checkpoints to."""

    path: RemotePath
    fstype: Annotated[FsTypes, Field(min_length=1)]   # any of these (a site may accept nfs4 or lustre)
    options: tuple[Annotated[str, Field(pattern=MOUNT_OPTION_RE)], ...] = ("rw",)
    min_free_gib: Num = Field(default=0, ge=0)
    checkpoint: StrictBool = True   # probe.checkpoint_write writes and reads back a checkpoint here

    @field_validator("fstype", mode="before")
    @classmethod
    def _one_or_many(cls, value):
        return _fstypes(value)


class Scratch(_Strict):
    """Node-local NVMe scratch: the devices and the filesystem on them."""

    mount: RemotePath
    fstype: Annotated[FsTypes, Field(min_length=1)]
    nvme_devices: StrictInt = Field(ge=0, le=64)
    min_free_gib: Num = Field(default=0, ge=0)
    checkpoint: StrictBool = True

    @field_validator("fstype", mode="before")
    @classmethod
    def _one_or_many(cls, value):
        return _fstypes(value)


class Storage(StorageRules, _Strict):  # checkpoint_paths: StorageRules
    mounts: tuple[Mount, ...] = ()
    scratch: Scratch | None = None
    checkpoint_size_mib: StrictInt = Field(default=1024, ge=1, le=1048576)
    source: str = Field(min_length=5)


class Profile(ProfileRules, _Strict):  # ddp_ranks: ProfileRules
    name: str
    description: str
    gpu: GPU
    driver: Driver
    cuda: Cuda
    nccl: Nccl
    ofed: Ofed
    container: Container
    ib: IB
    subnet_manager: SubnetManager
    tuning: Tuning = Tuning()
    firmware_uniform: StrictBool = True
    drift_tolerance: Num = Field(default=0.10, gt=0, lt=1)
    dcgm_diag: DcgmDiag | None = None
    gpudirect: GpuDirect | None = None
    ddp: Ddp | None = None
    storage: Storage | None = None
    thresholds: dict[str, Threshold]
    hardware: Hardware | None = None

    @model_validator(mode="after")
    def _known_thresholds(self) -> Profile:
        unknown = sorted(set(self.thresholds) - set(KNOWN_THRESHOLDS))
        if unknown:
            raise ValueError(
                f"unknown threshold {unknown[0]!r} (known: {', '.join(sorted(KNOWN_THRESHOLDS))})"
            )
        return self

    @model_validator(mode="after")
    def _gpudirect_and_ddp(self) -> Profile:
        hw = self.hardware
        if self.gpudirect is not None and (hw is None or (not hw.nic_gpu and hw.rails is None)):
            raise ValueError(
                "gpudirect: the profile has no compute rails (hardware.rails or hardware.nic_gpu)"
            )
        if (
            self.ddp is not None
            and self.ddp.backend == "nccl"
            and (self.ddp.ranks_per_node or 0) > self.gpu.count
        ):
            raise ValueError(f"ddp.ranks_per_node {self.ddp.ranks_per_node} is more than the node's "
                             f"{self.gpu.count} GPUs (nccl: one process per GPU)")
        return self


def check_threshold_units(profile: Profile) -> tuple[str, str] | None:
    """(key, reason) for the first threshold whose unit is not the one its probe reports, or whose bound
    lies outside the sane range for that unit (an ib_write_bw floor of 400000 Gb/s or 0.0004 Gb/s is a
    unit mistake, and would make every node fail or pass); None when all are sane."""
    for tname, t in sorted(profile.thresholds.items()):
        unit, lo, hi = THRESHOLD_UNITS[tname]
        if t.unit != unit:
            return (
                f"thresholds.{tname}.unit",
                f"unknown unit {t.unit!r} for {tname} (its probe reports {unit})",
            )
        for label, value in (
            ("min", t.min),
            ("max", t.max),
            ("rated", t.rated),
            ("floor (rated x ratio)", t.floor),
        ):
            if value is None or (
                value == 0 and (label in ("min", "floor (rated x ratio)") or unit == "count")
            ):
                continue
            if not lo <= value <= hi:
                key = (
                    f"thresholds.{tname}.{label.split()[0]}"
                    if label != "floor (rated x ratio)"
                    else f"thresholds.{tname}"
                )
                return key, (f"{label} {value:g} {unit} is outside the sane range {lo:g}..{hi:g} {unit} "
                             f"for {tname} (wrong unit magnitude?)")
    return None


# Threshold names and what they bound. Probes and validators look thresholds up by these names.
KNOWN_THRESHOLDS = {
    "ib_write_bw_loopback": "ib_write_bw loopback per compute rail (floor)",
    "ib_write_bw_pair": "ib_write_bw node-to-node per rail (floor)",
    "ib_write_lat_p99": "ib_write_lat node-to-node 99th percentile (ceiling)",
    "nccl_allreduce_1node": "NCCL all_reduce busbw on one node at the largest size (floor)",
    "nccl_allreduce_pair": "NCCL all_reduce busbw across a pair of nodes (floor)",
    "nccl_allreduce_cluster": "NCCL all_reduce busbw across every node the pair rounds cleared, as a "
    "fraction of the median pair busbw (scaling efficiency floor; per rail group: "
    "of that x the group's share of the rated rail bandwidth)",
    "nvbandwidth_h2d": "nvbandwidth host-to-device per GPU (floor)",
    "nvbandwidth_d2h": "nvbandwidth device-to-host per GPU (floor)",
    "nvbandwidth_d2d": "nvbandwidth device-to-device read per GPU (floor)",
    "iperf3_ipoib": "iperf3 over IPoIB per fabric (floor)",
    "gpu_util_under_load": "GPU utilisation sampled during the NCCL run (floor)",
    "ecc_sram_corrected": "SRAM correctable ECC errors (ceiling)",
    "ecc_dram_corrected": "DRAM correctable ECC errors (ceiling)",
    "retired_pages": "retired pages per GPU (ceiling)",
    "nvlink_crc_errors": "NVLink CRC errors per GPU, all links (ceiling; since the counters were reset, or "
    "since the baseline run in drift)",
    "nvlink_replay_errors": "NVLink replay errors per GPU, all links (ceiling; as nvlink_crc_errors)",
    "nvlink_recovery_errors": "NVLink recovery errors per GPU, all links (ceiling; as nvlink_crc_errors)",
    "ib_write_bw_gdr_loopback": "ib_write_bw --use_cuda loopback per GPU-rail pair (hardware.rails) (floor)",
    "ib_write_bw_gdr_pair": "ib_write_bw --use_cuda node-to-node per GPU-NIC pair, GPU memory at both ends "
                            "(floor)",
    "nvlink_aggregate": "per-GPU NVLink bandwidth, both directions summed (nvbandwidth all_to_one + "
                        "one_to_all) (floor)",
    "checkpoint_write": "fio direct-I/O write of a checkpoint-sized file per storage path (floor)",
    "checkpoint_read": "fio direct-I/O read-back of the checkpoint per storage path (floor)",
    "outlier_ratio": "cluster-relative rule: below this fraction of the median of the same bandwidth probe "
    "fails (latency and GPU utilisation are held to their absolute bounds only)",
}


# threshold -> (the unit its probe reports, the smallest and largest sane non-zero bound in that unit)
THRESHOLD_UNITS: dict[str, tuple[str, float, float]] = {
    "ib_write_bw_loopback": ("gbit_per_s", 1.0, 3200.0),
    "ib_write_bw_pair": ("gbit_per_s", 1.0, 3200.0),
    "ib_write_lat_p99": ("usec", 0.05, 10000.0),
    "nccl_allreduce_1node": ("gbyte_per_s", 0.1, 10000.0),
    "nccl_allreduce_pair": ("gbyte_per_s", 0.1, 10000.0),
    "nccl_allreduce_cluster": ("ratio", 0.01, 1.0),
    "nvbandwidth_h2d": ("gbyte_per_s", 0.1, 10000.0),
    "nvbandwidth_d2h": ("gbyte_per_s", 0.1, 10000.0),
    "nvbandwidth_d2d": ("gbyte_per_s", 0.1, 100000.0),
    "iperf3_ipoib": ("gbit_per_s", 0.001, 3200.0),
    "gpu_util_under_load": ("percent", 1.0, 100.0),
    "ecc_sram_corrected": ("count", 1.0, 1e12),
    "ecc_dram_corrected": ("count", 1.0, 1e12),
    "retired_pages": ("count", 1.0, 1e6),
    "nvlink_crc_errors": ("count", 1.0, 1e12),
    "nvlink_replay_errors": ("count", 1.0, 1e12),
    "nvlink_recovery_errors": ("count", 1.0, 1e12),
    "ib_write_bw_gdr_loopback": ("gbit_per_s", 1.0, 3200.0),
    "ib_write_bw_gdr_pair": ("gbit_per_s", 1.0, 3200.0),
    "nvlink_aggregate": ("gbyte_per_s", 0.1, 100000.0),
    "checkpoint_write": ("gbyte_per_s", 0.001, 10000.0),
    "checkpoint_read": ("gbyte_per_s", 0.001, 10000.0),
    "outlier_ratio": ("ratio", 0.01, 1.0),
}
assert set(THRESHOLD_UNITS) == set(KNOWN_THRESHOLDS)


# mappings a site override replaces whole rather than merges key by key: their keys are the site's own names
# (hardware.nic_gpu: a box whose compute HCAs are named otherwise gives its whole GPU->NIC mapping)
WHOLE_MAPPINGS = {("hardware", "nic_gpu")}


def deep_merge(base: dict, override: dict, _path: tuple[str, ...] = ()) -> dict:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and (*_path, key) not in WHOLE_MAPPINGS:
            out[key] = deep_merge(out[key], value, (*_path, key))
        else:
            out[key] = copy.deepcopy(value)
    return out


@functools.cache
def installed_profiles() -> dict[str, tuple[str, Path]]:
    """The profiles installed distributions declare (the lab's ``lab``, say): {name: (distribution, file)}.

    A distribution declares a profile by an entry point of the group ``clustercert.profiles`` whose name is
    the profile's and whose value is the directory that holds ``NAME.yml`` as a dotted name (clustercert-lab:
    ``lab = "clustercert_lab.profiles"``). The entry point is never loaded, nothing of it is imported: the
    file is read from the distribution's files, or, for an editable install (which lists none of them), from
    the directories on sys.path (where its package directory is). A
    name the product's own directory holds is the product's; a declared file that is not there is not a
    profile. Read once per process (what is installed does not change under a run)."""
    out: dict[str, tuple[str, Path]] = {}
    for ep in sorted(metadata.entry_points(group=PROFILE_ENTRY_POINTS), key=lambda e: e.name):
        if ep.name in out or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", ep.name):
            continue
        path = installed_file(ep, f"{ep.name}.yml")
        if path is not None:
            out[ep.name] = (ep.dist.name if ep.dist else "?", path)
    return out


def installed_file(ep: metadata.EntryPoint, filename: str) -> Path | None:
    """``filename`` in the directory entry point ``ep`` names (``pkg.sub``: pkg/sub/), in its distribution."""
    parts = ep.value.strip().split(".")
    if not all(p.isidentifier() for p in parts):
        return None
    rel = "/".join([*parts, filename])
    for f in (ep.dist.files or []) if ep.dist else []:
        if f.as_posix() == rel:
            located = Path(ep.dist.locate_file(f))
            return located if located.is_file() else None
    for entry in sys.path:  # an editable install: its package directory is on sys.path (a .pth line)
        located = Path(entry, *parts, filename) if entry else None
        if located is not None and located.is_file():
            return located
    return None


def builtin_profiles() -> list[str]:
    """Every profile known by name: the product's own (clustercert/profiles/) and those installed
    distributions declare (installed_profiles)."""
    return sorted({p.stem for p in BUILTIN_DIR.glob("*.yml")} | set(installed_profiles()))


def profile_source(name_or_path: str) -> Path:
    """Resolve a profile name (the product's own, else one an installed distribution declares) or a path to a
    YAML file."""
    if name_or_path.endswith((".yml", ".yaml")) or "/" in name_or_path:
        return Path(name_or_path)
    own = BUILTIN_DIR / f"{name_or_path}.yml"
    if own.is_file():
        return own
    installed = installed_profiles().get(name_or_path)
    return installed[1] if installed else own


def profile_origin(name: str) -> str:
    """Where a profile known by name comes from, as a listing shows it: ``profiles/NAME.yml`` (the product's),
    ``DISTRIBUTION: PACKAGE/…/NAME.yml`` (an installed distribution's)."""
    if (BUILTIN_DIR / f"{name}.yml").is_file():
        return f"profiles/{name}.yml"
    dist, path = installed_profiles()[name]
    return f"{dist}: {'/'.join(path.parts[-3:])}"


def format_validation_error(exc: ValidationError) -> tuple[str, str]:
    """First error of a pydantic ValidationError as (dotted key, reason)."""
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err.get("loc", ()) if p not in ("__root__", "[key]"))
    reason = err.get("msg", "invalid value")
    if isinstance(err.get("input"), bool) and err.get("type") in ("float_type", "int_type", "string_type"):
        reason = (
            f"expected {'text' if err['type'] == 'string_type' else 'a number'}, got a boolean "
            f"({err['input']})"
        )
    elif err.get("type") == "extra_forbidden":
        reason = "unknown key"
    elif err.get("type") == "missing":
        reason = "required key is missing"
    if reason.startswith("Value error, "):
        reason = reason[len("Value error, "):]
    return key, reason


def load_profile_data(name_or_path: str, *, referenced_from: str | None = None) -> tuple[dict, Path]:
    path = profile_source(name_or_path)
    if not path.is_file():
        where = referenced_from or str(path)
        raise InputError(
            where,
            "clustercert_profile",
            f"unknown profile {name_or_path!r} (built-in: {', '.join(builtin_profiles())})",
        )
    data = load_yaml_file(path)
    if not isinstance(data, dict):
        raise InputError(str(path), None, "a profile must be a YAML mapping")
    return data, path


def validate_profile(data: dict, source: str, key_prefix: str = "") -> Profile:
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        key, reason = format_validation_error(exc)
        raise InputError(source, f"{key_prefix}{key}", reason) from None
    bad = check_threshold_units(profile)
    if bad:
        raise InputError(source, f"{key_prefix}{bad[0]}", bad[1])
    return profile


def load_profile(
    name_or_path: str, overrides: dict | None = None, *, overrides_source: str | None = None
) -> Profile:
    """Load and validate a profile, optionally deep-merging site overrides first."""
    data, path = load_profile_data(name_or_path)
    base = validate_profile(data, str(path))
    if not overrides:
        return base
    merged = deep_merge(data, overrides)
    return validate_profile(
        merged, overrides_source or str(path), key_prefix="clustercert_profile_overrides."
    )
