"""Issue 21.3/21.4 on the node-side simulator, no lab: the simulated tools print the formats the new parsers
read (nvidia-smi nvlink -e and topo -p2p, dcgmi diag -j in the JSON layout of the installed DCGM version,
dcgmi nvlink, lspci -vv, dmidecode); four simulated nodes pass every hardware check and the cluster-wide ones,
and each new lab fault kind fails its check on its node only -- what the validators' lab fault matrix asserts
on real lab nodes (tests/validators/test_validate_lab.py), here with the commands run by /bin/sh against the
simulator as a node runs them."""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml
from test_sim_tools import PROFILE, Sim, _sim_bin, parse

from clustercert.checks import HostContext, component
from clustercert.checks import cluster as cluster_checks
from clustercert.checks import hardware as hw_checks
from clustercert.model.evidence import CommandResult
from clustercert.model.profile import load_profile
from clustercert_lab import faults, hardware

NODES = ("node01", "node02", "node03", "node04")
TOOLS = ("nvidia-smi", "lspci", "dmidecode", "dcgmi", "nvbandwidth")
FM_PID = "/run/nvidia-fabricmanager/nv-fabricmanager.pid"


def _start(s: Sim) -> Sim:
    s.driver_loaded()
    s.start_daemon("nv-fabricmanager", FM_PID)
    return s


@pytest.fixture(scope="module")
def lab4(tmp_path_factory):
    nodes = {name: _start(Sim(tmp_path_factory.mktemp(name), name, i)) for i, name in enumerate(NODES, 1)}
    yield nodes
    for s in nodes.values():
        s.close()


def evidence(s: Sim) -> dict[str, CommandResult]:
    """The hardware component's commands, run by /bin/sh as on a node: the simulated tools on PATH, sysfs
    under the simulator's root (written by one pass of the node's agent)."""
    s.ok("agent", "--once", "--no-mounts")
    env = s.env(PATH=f"{_sim_bin(s, *TOOLS)}:{os.environ['PATH']}")
    out = {}
    for key, (cmd, _t) in (
        component("hardware").commands(HostContext(s.hw["node"], load_profile("lab"))).items()
    ):
        cmd = cmd.replace("/sys/class/infiniband", str(s.root / "sys/class/infiniband"))
        p = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=60, env=env)
        out[key] = CommandResult(p.returncode, p.stdout, p.stderr, False, 0.1, cmd)
    return out


def judge(evs: dict[str, dict]) -> dict[str, list]:
    """Every node's hardware findings: its own, then the cluster-wide ones over all of them."""
    contexts = {n: HostContext(n, load_profile("lab")) for n in evs}
    out = {n: component("hardware").evaluate(ev, contexts[n]) for n, ev in evs.items()}
    for n, fs in cluster_checks.cluster_findings(evs, contexts).items():
        out[n] += fs
    return out


@pytest.fixture(scope="module")
def healthy(lab4):
    return {n: evidence(s) for n, s in lab4.items()}


def test_healthy_simulated_nodes_pass_every_hardware_check(healthy):
    found = judge(healthy)
    for node, fs in found.items():
        bad = [(f.check, f.subject, f.status, f.observed) for f in fs if f.status != "pass"]
        assert not bad, (node, bad)
        assert {f.check for f in fs} == set(hw_checks.CHECK_IDS), node
        nic = {f.subject: f.observed for f in fs if f.check == "gpu.nic_affinity"}
        assert nic == {"mlx5_0": "PIX to GPU0", "mlx5_1": "PIX to GPU4"}
    ident = hw_checks.identity(healthy["node02"])
    assert [g["serial"] for g in ident["gpus"]] == [hardware.gpu_serial("node02", i) for i in range(8)]
    assert [h["node_guid"] for h in ident["hcas"]] == [
        hardware.hca_guid("node02", h) for h in ("mlx5_0", "mlx5_1")
    ]
    assert ident["board"]["system_serial"] == hardware.board_serials("node02")["system_serial"]
    assert ident["nvswitch_count"] == 4 and ident["gpus"][0]["vbios"] == "96.00.99.00.01"


def test_the_lab_s_topology_and_sysfs_discover_the_rails_its_profile_names(healthy):
    """The lab profile names its rails (hardware.nic_gpu); discovery (clustercert.checks.rails) over the
    simulated nvidia-smi topo -m and /sys/class/infiniband finds the same ones, each GPU's NUMA node with
    it."""
    from clustercert.checks import rails

    found = load_profile(
        "lab",
        {
            "hardware": {
                "nic_gpu": {},
                "rails": {
                    "count": 2,
                    "rate_gbit_per_s": 400,
                    "affinity": "PIX",
                    "source": "lab: the simulated HGX H100 board",
                },
            }
        },
    )
    for node, ev in healthy.items():
        nr = rails.of_evidence(found, ev["nvsmi_topo"], ev["ib_sysfs"])
        assert nr.problems == (), (node, nr.problems)
        assert [(r.gpu, r.hca, r.numa) for r in nr.rails] == [(0, "mlx5_0", 0), (4, "mlx5_1", 1)]
        named = rails.of_evidence(load_profile("lab"), ev["nvsmi_topo"], ev["ib_sysfs"])
        assert named.names == nr.names and [r.numa for r in named.rails] == [0, 1]


# fault kind -> (its parameters, the check that must fail, the failing subjects on the faulty node)
FAULT_CASES = {
    "nvlink_crc_errors": ({"gpu": "0", "port": "2"}, "gpu.nvlink_errors", {"GPU0"}),
    "hca_moved": ({}, "gpu.nic_affinity", {"mlx5_0"}),
    "pcie_device_missing": ({}, "hw.pcie_manifest", {"NVSwitches"}),
    "gpu_pcie_degraded": ({}, "hw.pcie_manifest", {"GPU0 00000000:19:00.0"}),
    "hca_firmware_odd": ({}, "ib.firmware_uniform", {"mlx5_0"}),
    "gpu_vbios_odd": ({}, "gpu.vbios_uniform", {"GPU0 00000000:19:00.0"}),
    "gpu_fabric_degraded": ({}, "gpu.fabric_state", {"GPU0 00000000:19:00.0"}),
}


@pytest.mark.parametrize("kind", sorted(FAULT_CASES))
def test_each_new_fault_fails_its_check_on_its_node_only(lab4, healthy, kind):
    params, check, subjects = FAULT_CASES[kind]
    assert faults.FAULTS[kind].check in (check, "gpu.pcie_link")
    s = lab4["node02"]
    saved = hardware.load(s.sim)
    p = faults.validate(kind, params, saved)
    hw = hardware.load(s.sim)
    faults._apply_hw(hw, kind, p, faults._key(kind, p))
    hardware.save(s.sim, hw)
    try:
        found = judge(dict(healthy, node02=evidence(s)))
    finally:
        hardware.save(s.sim, saved)
        s.ok("agent", "--once", "--no-mounts")
    failing = {(f.check, f.subject) for f in found["node02"] if f.status == "fail"}
    assert {sub for c, sub in failing if c == check} == subjects, failing
    # on the lab, ib.firmware (the ib component, not judged here) fails the node too
    if kind == "hca_firmware_odd":
        assert failing == {(check, "mlx5_0")}
    for node in ("node01", "node03", "node04"):
        assert not [f for f in found[node] if f.status in ("fail", "error")], (node, kind)


def test_a_swapped_gpu_changes_only_its_identity(lab4, healthy):
    s = lab4["node03"]
    saved = hardware.load(s.sim)
    hw = hardware.load(s.sim)
    p = faults.validate("gpu_swapped", {"gpu": "5"}, hw)
    faults._apply_hw(hw, "gpu_swapped", p, faults._key("gpu_swapped", p))
    hardware.save(s.sim, hw)
    try:
        now = evidence(s)
    finally:
        hardware.save(s.sim, saved)
    found = judge(dict(healthy, node03=now))
    # a healthy part passes everything
    assert not [f for fs in found.values() for f in fs if f.status != "pass"]
    (change,) = hw_checks.identity_changes(hw_checks.identity(healthy["node03"]), hw_checks.identity(now))
    assert (change["part"], change["name"], change["change"]) == ("gpu", "GPU5 00000000:BB:00.0", "swapped")
    assert hardware.gpu_serial("node03/swapped", 5) in change["after"]


# ---- the formats ----------------------------------------------------------------------------------------

@pytest.fixture
def node(tmp_path):
    s = _start(Sim(tmp_path))
    yield s
    s.close()


def test_nvlink_error_counters_and_p2p_matrix(node):
    rec = parse("nvidia-smi-nvlink-errors", node.ok("nvidia-smi", "nvlink", "-e"))
    assert len(rec["gpus"]) == 8 and rec["gpus"][0]["totals"] == {"crc_errors": 0, "recovery_errors": 0,
                                                                  "replay_errors": 0}
    assert len(rec["gpus"][0]["links"]) == 18
    node.fault("nvlink_crc_errors", gpu="1", port="4")
    node.fault("nvlink_down", gpu="1", port="0")
    rec = parse("nvidia-smi-nvlink-errors", node.ok("nvidia-smi", "nvlink", "--errorcounters", "-i", "1"))
    (g,) = rec["gpus"]
    assert g["totals"]["crc_errors"] == faults.NVLINK_CRC_ADDED and g["totals"]["replay_errors"] == 150
    assert [lk["link"] for lk in g["links"]][:2] == [1, 2]  # the link that is down reports no counters
    for cap in ("r", "w", "n", "a", "p"):
        p2p = parse("nvidia-smi-topo-p2p", node.ok("nvidia-smi", "topo", "-p2p", cap))
        assert p2p["pair_count"] == 56 and p2p["devices"] == [f"GPU{i}" for i in range(8)]
        assert p2p["all_ok"] is (cap != "p"), cap  # PCIe-only P2P across the two sockets: CNS
    assert node.run("nvidia-smi", "topo", "-p2p", "x").returncode == 2


@pytest.mark.parametrize("version, layout", [("3.3.9", "dcgm3"), ("4.4.1", "dcgm4")])
def test_dcgmi_diag_json_in_the_installed_version_s_layout(node, version, layout):
    from clustercert.probes.evaluate import eval_dcgmi_diag

    node.start_daemon("nvidia-persistenced", "/run/nvidia-persistenced/nvidia-persistenced.pid")
    node.start_daemon("nv-hostengine", "/run/nvidia-dcgm/nv-hostengine.pid")
    env = {"CLUSTERCERT_LAB_DCGM_VERSION": version}
    assert f"version: {version}" in node.ok("dcgmi", "--version", **env)
    diag = load_profile("lab").dcgm_diag
    for level in (1, 2, 3):
        r = node.run("dcgmi", "diag", "-r", str(level), "-j", **env)
        rec = parse("dcgmi-diag-json", r.stdout)
        assert r.returncode == 0 and rec["layout"] == layout and rec["dcgm_version"] == version
        text = parse("dcgmi-diag", node.ok("dcgmi", "diag", "-r", str(level), **env))
        assert [t["result"] for t in text["tests"] if t["result"] != "pass"] == [
            t["result"] for t in rec["tests"] if t["result"] != "pass"
        ]  # EUD skipped at level 3, the rest passes
    node.fault("gpu_row_remap_pending", gpu="3")
    r = node.run("dcgmi", "diag", "-r", "2", "-j", **env)
    assert r.returncode == 226
    ms = eval_dcgmi_diag("n1", diag, CommandResult(r.returncode, r.stdout, r.stderr, False, 1.0, "x"), 60)
    failed = {m.subject for m in ms if m.status == "fail"}
    assert failed == (
        {"Page Retirement/Row Remap", "GPU Memory"} if layout == "dcgm3" else {"software", "memory"}
    )
    assert all("3" in m.observed for m in ms if m.status == "fail")


def test_the_probe_command_picks_json_on_the_lab_s_dcgm(node):
    from clustercert.probes.commands import dcgmi_diag_cmd
    from clustercert.probes.evaluate import eval_dcgmi_diag

    node.start_daemon("nvidia-persistenced", "/run/nvidia-persistenced/nvidia-persistenced.pid")
    node.start_daemon("nv-hostengine", "/run/nvidia-dcgm/nv-hostengine.pid")
    env = node.env(PATH=f"{_sim_bin(node, 'dcgmi')}:{os.environ['PATH']}")
    for version, json_out in (("3.3.9", True), ("2.4.7", False)):
        p = subprocess.run(["/bin/sh", "-c", dcgmi_diag_cmd(2)], capture_output=True, text=True, timeout=60,
                           env=dict(env, CLUSTERCERT_LAB_DCGM_VERSION=version))
        assert p.stdout.lstrip().startswith("{") is json_out, version
        (m,) = eval_dcgmi_diag("n1", load_profile("lab").dcgm_diag,
                               CommandResult(p.returncode, p.stdout, p.stderr, False, 1.0, "x"), 60)
        assert m.status == "pass", (version, m.observed)


def test_dcgmi_nvlink_status_and_error_counts(node):
    node.start_daemon("nv-hostengine", "/run/nvidia-dcgm/nv-hostengine.pid")
    node.fault("nvlink_down", gpu="2", port="7")
    st = parse("dcgmi-nvlink", node.ok("dcgmi", "nvlink", "--link-status"))
    assert st["mode"] == "link_status" and len(st["gpus"]) == 8 and st["down_links"] == ["gpu2:link7"]
    node.fault("nvlink_crc_errors", gpu="0", port="3")
    for args in (("-e", "-g", "0"), ("-e", "-g", "0", "-j")):
        rec = parse("dcgmi-nvlink", node.ok("dcgmi", "nvlink", *args))
        ec = rec["error_counts"]
        assert rec["mode"] == "error_counts" and ec["gpu_id"] == 0 and len(ec["links"]) == 18
        assert (
            ec["totals"]["crc_flit_error"] == faults.NVLINK_CRC_ADDED and ec["totals"]["replay_error"] == 150
        )
    assert node.run("dcgmi", "nvlink", "-e", "-g", "9").returncode == 255


def test_lspci_and_dmidecode(node):
    rec = parse("lspci", node.ok("lspci", "-D", "-nn", "-vv"))
    devs = hw_checks.pci_devices(rec)
    assert [len(devs[k]) for k in ("gpus", "nvswitches", "hcas")] == [8, 4, 2]
    assert devs["gpus"][0]["link"] == {
        "cap_speed_gt_s": 32.0,
        "cap_width": 16,
        "sta_speed_gt_s": 32.0,
        "sta_width": 16,
        "speed_downgraded": False,
        "width_downgraded": False,
        "downgraded": False,
    }
    assert devs["hcas"][0]["vendor_device"] == "15b3:1021" and devs["hcas"][0]["bus_id"] == "00000000:18:00.0"
    node.fault("gpu_pcie_degraded")
    gpu0 = hw_checks.pci_devices(parse("lspci", node.ok("lspci", "-D", "-nn", "-vv", "-d", "10de:2330")))[
        "gpus"
    ][0]
    assert (gpu0["link"]["sta_speed_gt_s"], gpu0["link"]["sta_width"], gpu0["link"]["downgraded"]) == (
        16.0,
        8,
        True,
    )
    assert node.ok("lspci", "-d", "*:*:0604") == ""  # no bridges: the ACS unit of the tuning role finds none
    plain = node.ok("lspci").splitlines()
    assert plain[0].startswith("05:00.0 Bridge: NVIDIA Corporation Device") and len(plain) == 14
    dmi = parse("dmidecode", node.ok("dmidecode", "-t", "system", "-t", "baseboard", "-t", "chassis"))
    serials = hardware.board_serials("node01")
    assert (
        dmi["system"]["serial_number"] == serials["system_serial"]
        and dmi["system"]["uuid"] == serials["uuid"]
    )
    assert dmi["chassis"]["serial_number"] == serials["chassis_serial"] and len(dmi["records"]) == 3
    assert node.ok("dmidecode", "-s", "system-serial-number").strip() == serials["system_serial"]
    assert node.run("dmidecode", "-s", "bogus").returncode == 2


def test_nvbandwidth_waives_device_to_device_on_a_one_gpu_node(tmp_path):
    from clustercert.probes.commands import nvbandwidth_cmd
    from clustercert.probes.evaluate import eval_nvbandwidth

    s = Sim(tmp_path)
    prof = yaml.safe_load(PROFILE.read_text())
    prof["gpu"]["count"] = 1
    hardware.save(s.sim, hardware.build(prof, "node01", 1, {}))
    s.driver_loaded()
    env = s.env(PATH=f"{_sim_bin(s, 'nvbandwidth')}:{os.environ['PATH']}")
    p = subprocess.run(
        ["/bin/sh", "-c", nvbandwidth_cmd()], capture_output=True, text=True, timeout=60, env=env
    )
    assert p.returncode == 0 and "\nWaived:\n" in p.stdout
    one = load_profile("lab", {"gpu": {"count": 1}, "hardware": {"nic_gpu": {"mlx5_0": 0, "mlx5_1": 0}}})
    by = {
        m.probe: m
        for m in eval_nvbandwidth("node01", one, CommandResult(0, p.stdout, "", False, 1.0, "x"), 60)
    }
    assert by["nvbandwidth_h2d"].status == "pass" and by["nvbandwidth_d2h"].status == "pass"
    assert (
        by["nvbandwidth_d2d"].status == "skip" and "matched to the -t order" in by["nvbandwidth_d2d"].observed
    )
