"""Fault table, validation and the hardware side of apply/heal (no lab needed)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from clustercert_lab import faults, hardware

ROOT = Path(__file__).resolve().parents[2]
KINDS = {
    "gpu_missing",
    "gpu_ecc_uncorrectable",
    "gpu_row_remap_pending",
    "gpu_xid",
    "gpu_pcie_degraded",
    "gpu_clock_throttle",
    "nvlink_down",
    "driver_version_mismatch",
    "fabricmanager_stopped",
    "peermem_unloaded",
    "ib_port_down",
    "ib_port_rate_degraded",
    "ib_symbol_errors",
    "bond_slave_down",
    "link_slow",
    "nccl_busbw_low",
    "container_runtime_unconfigured",
    "memlock_limited",
    "clock_unsynced",
    "node_down",
    "probe_hang",
    "package_drift",
    "nvlink_crc_errors",
    "hca_moved",
    "pcie_device_missing",
    "hca_firmware_odd",
    "gpu_vbios_odd",
    "gpu_fabric_degraded",
    "gpu_swapped",
    "gdr_disabled",
    "mount_missing",
    "storage_slow",
    "rank_slow",
    "nccl_one_host",
    "nccl_scale_slow",
}
PARAM_NAMES = {"gpu", "hca", "port", "fabric", "slave", "factor", "rate", "xid", "package", "version", "tool",
               "mbyte_per_s"}


def _hw() -> dict:
    return hardware.build(
        yaml.safe_load((ROOT / "clustercert-lab/src/clustercert_lab/profiles/lab.yml").read_text()),
        "node01",
        1,
        {},
    )


@pytest.fixture
def hw():
    return _hw()


class FakeNode:
    """Only what hardware faults touch: the sim dir, and the link/power calls recorded."""

    def __init__(self, sim_dir: Path):
        self.name = "node01"
        self.sim_dir = sim_dir
        self.calls: list[tuple] = []

    def set_link_rate(self, fabric, mbit):
        self.calls.append(("set_link_rate", fabric, mbit))

    def set_io_limit(self, write_bps):
        self.calls.append(("set_io_limit", write_bps))

    def set_cpu_limit(self, factor):
        self.calls.append(("set_cpu_limit", factor))

    def init_pid(self):
        return None  # not running: nothing shows a change, nothing to wait for

    def power_off(self):
        self.calls.append(("power_off",))

    def power_on(self):
        self.calls.append(("power_on",))

    def exec(self, argv, timeout=60, input=None):
        raise AssertionError(f"a hardware fault must not exec in the node: {argv}")


def test_all_kinds_with_check_and_known_parameter_names():
    assert set(faults.FAULTS) == KINDS
    for k, f in faults.FAULTS.items():
        assert f.kind == k and f.check and f.changes
        assert set(f.params) <= PARAM_NAMES, k


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_defaults_validate(kind, hw):
    p = faults.validate(kind, {}, hw)
    assert set(p) == set(faults.FAULTS[kind].params)
    assert all(v is not None for v in p.values())
    assert faults.validate(kind, p, hw) == p  # normalised params validate to themselves


def test_default_values(hw):
    assert faults.validate("gpu_missing", {}, hw) == {"gpu": 7}
    assert faults.validate("ib_port_down", {}, hw) == {"hca": "mlx5_0", "port": 1}
    assert faults.validate("package_drift", {}, hw) == {"package": "libnccl2", "version": "2.27.3-1+cuda12.8"}
    assert faults.validate("driver_version_mismatch", {}, hw) == {"version": "570.158.01-1"}
    assert faults.validate("link_slow", {"factor": "0.25"}, hw) == {"fabric": 0, "factor": 0.25}
    assert faults.validate("hca_firmware_odd", {}, hw) == {"hca": "mlx5_0", "version": "28.42.1014"}
    assert faults.validate("gpu_vbios_odd", {"gpu": "2"}, hw) == {"gpu": 2, "version": "96.00.99.00.02"}
    assert faults.validate("nvlink_crc_errors", {}, hw) == {"gpu": 0, "port": 0}
    assert faults.validate("hca_moved", {"hca": "mlx5_1"}, hw) == {"hca": "mlx5_1"}


@pytest.mark.parametrize(
    "kind,params,message",
    [
        ("gpu_missing", {"gpu": "8"}, "gpu: 8 is not a GPU index of this node (0..7)"),
        ("gpu_xid", {"gpu": "x"}, "gpu: expected an integer, got 'x'"),
        (
            "ib_port_down",
            {"hca": "mlx5_9"},
            "hca: 'mlx5_9' is not an HCA of this node (known: mlx5_0, mlx5_1)",
        ),
        ("ib_port_down", {"port": "2"}, "port: mlx5_0 has no port 2 (ports: [1])"),
        ("ib_port_rate_degraded", {"rate": "300"}, "rate: 300 is not an InfiniBand rate"),
        ("bond_slave_down", {"slave": "eth0"}, "slave: 'eth0' is not a bond slave of this node"),
        ("link_slow", {"factor": "1.5"}, "factor: 1.5 must be in (0, 1]"),
        ("link_slow", {"fabric": "2"}, "fabric: 2 is not a fabric of this node"),
        ("nvlink_down", {"port": "18"}, "port: NVLink link 18 does not exist (0..17)"),
        ("probe_hang", {"tool": "iperf3"}, "tool: 'iperf3' is not a simulated tool"),
        ("package_drift", {"package": "bash"}, "package: 'bash' has no other version in the lab repo"),
        ("package_drift", {"version": "9.9"}, "version: '9.9' of libnccl2 is not in the lab repo"),
        (
            "driver_version_mismatch",
            {"version": "570.172.08-1"},
            "version: 570.172.08-1 is the profile's driver version",
        ),
        ("memlock_limited", {"gpu": "1"}, "gpu: not a parameter of memlock_limited (parameters: none)"),
        ("storage_slow", {"mbyte_per_s": "0"}, "mbyte_per_s: 0.0 must be in (0, 100000]"),
        ("nope", {}, "kind: unknown fault kind 'nope'"),
        ("nvlink_crc_errors", {"port": "18"}, "port: NVLink link 18 does not exist (0..17)"),
        (
            "hca_firmware_odd",
            {"version": "28.43.1014"},
            "version: 28.43.1014 is the firmware mlx5_0 runs already",
        ),
        (
            "gpu_vbios_odd",
            {"version": "96.00.99.00.01"},
            "version: 96.00.99.00.01 is the VBIOS GPU 0 runs already",
        ),
        ("hca_moved", {"port": "1"}, "port: not a parameter of hca_moved (parameters: hca)"),
    ],
)
def test_bad_params(kind, params, message, hw):
    with pytest.raises(ValueError) as e:
        faults.validate(kind, params, hw)
    assert str(e.value).startswith(message)


@pytest.mark.parametrize("kind", sorted(k for k, f in faults.FAULTS.items() if f.hardware))
def test_hardware_fault_changes_hw_and_heal_restores_it(kind, hw, tmp_path):
    hardware.save(tmp_path, hw)
    node = FakeNode(tmp_path)
    p = faults.validate(kind, {}, hw)
    faults.apply(node, kind, p)
    after = hardware.load(tmp_path)
    if kind == "node_down":
        assert node.calls == [("power_off",)]
    else:
        assert after != hw
        assert {"kind": kind, "params": p} in after["faults"]
    faults.heal(node, kind, p)
    healed = hardware.load(tmp_path)
    healed.pop("fault_state", None)
    # each save is a generation the node's agent acknowledges (powering off saves nothing)
    assert healed.pop("generation") == hw.pop("generation") + (0 if kind == "node_down" else 2)
    assert healed == hw
    if kind == "link_slow":
        assert node.calls == [("set_link_rate", 0, 300.0), ("set_link_rate", 0, 1000.0)]
    if kind == "storage_slow":  # the node's disk writes, throttled and released
        assert node.calls == [("set_io_limit", 2000000), ("set_io_limit", None)]
        assert after["health"]["io_write_bps"] == 2000000
    if kind == "gdr_disabled":
        assert after["health"]["gdr"] is False
    if kind == "rank_slow":  # the node's CPU capped and released
        assert node.calls == [("set_cpu_limit", 8.0), ("set_cpu_limit", None)]


def test_two_faults_of_one_kind_heal_independently(hw, tmp_path):
    hardware.save(tmp_path, hw)
    node = FakeNode(tmp_path)
    faults.apply(node, "gpu_missing", {"gpu": 2})
    faults.apply(node, "gpu_missing", {"gpu": 5})
    faults.heal(node, "gpu_missing", {"gpu": 2})
    cur = hardware.load(tmp_path)
    assert [g["index"] for g in cur["gpus"] if not g["present"]] == [5]


def test_specific_hardware_effects(hw, tmp_path):
    hardware.save(tmp_path, hw)
    node = FakeNode(tmp_path)
    faults.apply(node, "ib_port_rate_degraded", {"hca": "mlx5_1", "rate": "100"})
    faults.apply(node, "gpu_xid", {"gpu": "3", "xid": "119"})
    faults.apply(node, "probe_hang", {"tool": "ib_write_bw"})
    cur = hardware.load(tmp_path)
    port = cur["hcas"][1]["ports"][0]
    assert (port["rate_gbit_per_s"], port["speed"]) == (100, "EDR")
    assert [(e["gpu"], e["xid"]) for e in cur["xid_events"]] == [(3, 119)]
    assert cur["hanging_tools"] == ["ib_write_bw"]


def test_evidence_faults_change_what_their_checks_read(hw, tmp_path):
    hardware.save(tmp_path, hw)
    node = FakeNode(tmp_path)
    for kind, params in (
        ("nvlink_crc_errors", {"gpu": "1", "port": "3"}),
        ("hca_moved", {}),
        ("pcie_device_missing", {}),
        ("hca_firmware_odd", {"hca": "mlx5_1"}),
        ("gpu_vbios_odd", {}),
        ("gpu_fabric_degraded", {"gpu": "2"}),
        ("gpu_swapped", {"gpu": "4"}),
    ):
        faults.apply(node, kind, params)
    cur = hardware.load(tmp_path)
    assert cur["gpus"][1]["nvlink"]["errors"] == {"3": {"crc": 1000, "replay": 150, "recovery": 0}}
    assert (cur["hcas"][0]["numa_node"], cur["hcas"][0]["switch_gpu"]) == (1, None)
    assert [s.get("on_bus", True) for s in cur["nvswitches"]] == [True, True, True, False]
    assert cur["hcas"][1]["fw_ver"] == "28.42.1014" and cur["gpus"][0]["vbios_version"] == "96.00.99.00.02"
    assert cur["gpus"][2]["fabric_error"] == faults.FABRIC_ERROR
    assert cur["gpus"][4]["serial"] == hardware.gpu_serial("node01/swapped", 4) != hw["gpus"][4]["serial"]
    with pytest.raises(ValueError, match="this node has none"):
        faults.validate("pcie_device_missing", {}, dict(hw, nvswitches=[]))


def test_docs_table_has_one_row_per_kind_with_its_check():
    text = (ROOT / "docs/lab-faults.md").read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([a-z_]+)` \|.*$", text, re.M)}
    assert set(rows) == KINDS
    for kind, f in faults.FAULTS.items():
        if f.check != "unreachable":
            assert f"`{f.check}`" in rows[kind], kind
        assert f.hardware or "configuration" in rows[kind], kind


def test_node_dict_copy_is_untouched(hw, tmp_path):
    before = copy.deepcopy(hw)
    faults.validate("gpu_missing", {}, hw)
    assert hw == before


class AckingNode(FakeNode):
    """A running node whose agent applies hw.json generations ``lag`` seconds after they are written,
    and whose netdevs follow (``settled``)."""

    def __init__(self, sim_dir: Path, lag: float, settled: bool = True):
        super().__init__(sim_dir)
        self.lag, self.settled, self.seen = lag, settled, {}

    def init_pid(self):
        return 4242

    def agent_applied(self) -> int:
        import time as _t

        gen = hardware.load(self.sim_dir).get("generation", 0)
        first = self.seen.setdefault(gen, _t.monotonic())
        return gen if _t.monotonic() - first >= self.lag else gen - 1

    def exec(self, argv, timeout=60):
        import subprocess as _sp

        self.calls.append(("exec", argv[-1]))
        return _sp.CompletedProcess(argv, 0 if self.settled else 1, "", "")


def test_a_fault_returns_once_the_agent_applied_it_and_the_netdevs_followed(tmp_path):
    import time as _t

    node = AckingNode(tmp_path, lag=0.3)
    hardware.save(tmp_path, _hw())
    t0 = _t.monotonic()
    faults.apply(node, "bond_slave_down", {"slave": "ib0"})
    took = _t.monotonic() - t0
    assert 0.3 <= took < 2, took  # it waited for the agent, no longer
    checks = [c[1] for c in node.calls if c[0] == "exec"]
    assert checks and "ip -o link show ib0 | grep -c ',UP') = 0" in checks[-1]  # ib0 must be down
    assert "ib1 | grep -c ',UP') = 1" in checks[-1]
    faults.heal(node, "bond_slave_down", {"slave": "ib0"})
    assert "ip -o link show ib0 | grep -c ',UP') = 1" in [c[1] for c in node.calls if c[0] == "exec"][-1]


def test_a_fault_the_node_never_shows_is_an_error(tmp_path, monkeypatch):
    node = AckingNode(tmp_path, lag=0.0, settled=False)
    hardware.save(tmp_path, _hw())
    monkeypatch.setattr(faults, "APPLY_WAIT_S", 0.3)
    with pytest.raises(faults.NotApplied, match="did not show the change"):
        faults.wait_applied(node, hardware.load(tmp_path), timeout=0.3)


def test_node_storage_fstab_binds_and_io_limit(tmp_path, monkeypatch):
    """Issue 22: a node's shared mount is an /etc/fstab bind from the staging path nspawn binds the lab's
    shared directory at (so mount_missing can unmount it inside the node and its heal mount it again);
    storage_slow writes the node's write limit into its blkio cgroup and every cgroup below it, and lifts
    it."""
    from clustercert_lab import node

    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/fstab").write_text("# UNCONFIGURED FSTAB FOR BASE SYSTEM")
    node.write_storage(root)
    node.write_storage(root)  # once only
    text = (root / "etc/fstab").read_text()
    assert text.count(node.FSTAB_LINE) == 1 and text.startswith("# UNCONFIGURED FSTAB FOR BASE SYSTEM\n")
    assert (root / "shared").is_dir() and (root / node.SHARED_STAGING.lstrip("/")).is_dir()
    h = node.NodeHandle(tmp_path / "lab", "node01", 1)
    argv = node.nspawn_argv(h, {"uuid": "00000000-0000-0000-0000-000000000000"})
    assert (
        f"--bind={h.shared_dir}:{node.SHARED_STAGING}" in argv and f"--bind={h.scratch_dir}:/scratch" in argv
    )
    assert h.shared_dir == tmp_path / "lab/storage/shared"

    cg = tmp_path / "cgroup"
    d = cg / "blkio" / node.CGROUP_NAME / "node01"
    (d / "payload").mkdir(parents=True)
    for x in (d, d / "payload"):
        (x / "blkio.throttle.write_bps_device").write_text("")
    (cg / "blkio" / "cgroup.procs").write_text("")
    monkeypatch.setattr(node, "CGROUP_ROOT", cg)
    assert node.apply_io_limit("node01", "254:0", 2000000) == 2
    assert [(x / "blkio.throttle.write_bps_device").read_text() for x in (d, d / "payload")] == [
        "254:0 2000000"
    ] * 2
    node.apply_io_limit("node01", "254:0", None)
    assert (d / "blkio.throttle.write_bps_device").read_text() == "254:0 0"
    assert node.storage_device(tmp_path).count(":") == 1
    # a host whose cgroups cannot throttle the node (no blkio or io controller there): the fault says so
    monkeypatch.setattr(node, "CGROUP_ROOT", tmp_path / "no-cgroups")
    h.state_dir.mkdir(parents=True, exist_ok=True)
    from clustercert_lab.errors import LabError

    with pytest.raises(LabError, match="no blkio/io cgroup of the node took a write limit"):
        h.set_io_limit(2000000)
    h.set_io_limit(None)  # lifting a limit nothing holds is not an error
