"""The evaluators on real tool output: evidence + profile -> findings. A check that cannot run is error."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercert.checks import HostContext, all_check_ids, component, node_verdict, run_evaluations
from clustercert.checks import ib as ib_checks
from clustercert.model.evidence import CommandResult
from clustercert.model.profile import load_profile
from clustercert.parsers import parse

FIX = Path(__file__).parent / "fixtures"


def res(
    stdout: str = "", rc: int | None = 0, stderr: str = "", timed_out: bool = False, cmd: str = "cmd"
) -> CommandResult:
    return CommandResult(rc, stdout, stderr, timed_out, 0.1, cmd)


def by_check(findings, check):
    return [f for f in findings if f.check == check]


@pytest.fixture
def a100_single():
    # the A100 fixture is one GPU, ECC on, Gen4 x16, persistence off
    # (its gpudirect pairs name GPUs 0-7: a one-GPU override drops the section, or the profile is refused)
    return HostContext(
        "n1", load_profile("a100-sxm-8x-hdr", {"gpu": {"count": 1}, "gpudirect": None}), timeout_s=20
    )


def test_stable_check_ids_cover_the_issue_list():
    ids = all_check_ids()
    # 34, issue 21's six hardware checks, issue 22's storage.mounts/scratch, issue 36's net.bond_lacp
    assert len(ids) == len(set(ids)) == 43
    for cid in ("gpu.count", "gpu.row_remap", "driver.module_loaded", "rdma.peermem", "ib.bond", "ib.sm",
                "container.cdi", "tuning.memlock", "time.sync", "packages.pinned"):
        assert cid in ids


def test_gpu_findings_from_real_xml(a100_single):
    xml = (FIX / "nvidia-smi" / "q-x-a100-sxm4-80gb-mig-535.xml").read_text()
    ev = {
        "nvsmi_xml": res(xml),
        "nvsmi_nvlink": res("", rc=127, stderr="sh: nvidia-smi: not found"),
        "kernel_log": res(""),
        "svc_fabricmanager": res(
            "LoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\n"
        ),
        "svc_persistenced": res("ActiveState=active\n"),
    }
    fs = component("gpu").evaluate(ev, a100_single)
    (count,) = by_check(fs, "gpu.count")
    assert (count.status, count.observed, count.value) == ("pass", "1", 1)
    (model,) = by_check(fs, "gpu.model")
    assert model.status == "pass" and model.subject == "GPU0 00000000:01:00.0"
    (pcie,) = by_check(fs, "gpu.pcie_link")
    assert pcie.status == "pass" and pcie.observed == "Gen4 x16"
    # persistence mode is Disabled in this capture: that is a finding a user must see
    (pers,) = by_check(fs, "gpu.persistence")
    assert pers.status == "fail" and pers.observed == "Disabled"
    # this driver does not report row remapping: error, never a silent pass
    (rr,) = by_check(fs, "gpu.row_remap")
    assert rr.status == "error"
    # nvlink tool missing -> error naming the tool
    (nv,) = by_check(fs, "gpu.nvlink")
    assert nv.status == "error" and "tool not found" in nv.observed
    assert by_check(fs, "gpu.fabricmanager")[0].status == "pass"


def test_gpu_count_wrong_and_timeout(a100_single):
    xml = (FIX / "nvidia-smi" / "q-x-a100-sxm4-80gb-mig-535.xml").read_text()
    eight = HostContext("n1", load_profile("a100-sxm-8x-hdr"), timeout_s=20)
    fs = component("gpu").evaluate({"nvsmi_xml": res(xml)}, eight)
    (count,) = by_check(fs, "gpu.count")
    assert (count.status, count.expected, count.observed) == ("fail", "8", "1")
    hung = {"nvsmi_xml": res("", rc=None, timed_out=True, cmd="nvidia-smi -q -x")}
    fs = component("gpu").evaluate(hung, a100_single)
    for cid in ("gpu.count", "gpu.model", "gpu.ecc", "gpu.pcie_link"):
        (f,) = by_check(fs, cid)
        assert f.status == "error" and f.observed == "timed out after 20 s: nvidia-smi -q -x"
    assert node_verdict(fs) in ("error", "fail")
    assert not [f for f in fs if f.status == "pass" and f.check.startswith("gpu.count")]


def test_xid_critical_fails_and_names_the_gpu(a100_single):
    log = (FIX / "dmesg" / "xid79-fallen-off-bus-sxid20034-nvswitch-ltssm.txt").read_text()
    fs = component("gpu").evaluate({"kernel_log": res(log)}, a100_single)
    xid = by_check(fs, "gpu.xid")
    assert xid and all(f.status == "fail" for f in xid)
    assert any("79" in f.observed for f in xid)
    assert all(f.subject.startswith("GPU 0000") for f in xid)
    quiet = component("gpu").evaluate({"kernel_log": res("[ 1.0] usb 1-1: new device\n")}, a100_single)
    assert by_check(quiet, "gpu.xid")[0].status == "pass"


IB_SYSFS = """\
mlx5_0/fw_ver:28.39.1002
mlx5_0/ports/1/state:4: ACTIVE
mlx5_0/ports/1/phys_state:5: LinkUp
mlx5_0/ports/1/rate:400 Gb/sec (4X NDR)
mlx5_0/ports/1/link_layer:InfiniBand
mlx5_0/ports/1/sm_lid:0x1
mlx5_0/ports/1/counters/symbol_error:0
mlx5_0/ports/1/counters/link_downed:0
mlx5_1/fw_ver:28.39.1002
mlx5_1/ports/1/state:1: DOWN
mlx5_1/ports/1/phys_state:3: Disabled
mlx5_1/ports/1/rate:200 Gb/sec (4X HDR)
mlx5_1/ports/1/link_layer:InfiniBand
mlx5_1/ports/1/sm_lid:0x1
mlx5_1/ports/1/counters/symbol_error:17
mlx5_1/ports/1/counters/link_downed:0
"""


def test_ib_ports_rate_counters():
    ctx = HostContext("n1", load_profile("lab"), timeout_s=10)
    fs = component("ib").evaluate({"ib_sysfs": res(IB_SYSFS)}, ctx)
    st = {f.subject: f for f in by_check(fs, "ib.port_state")}
    assert st["mlx5_0/1"].status == "pass" and st["mlx5_1/1"].status == "fail"
    assert st["mlx5_1/1"].observed == "DOWN / Disabled"
    rate = {f.subject: f for f in by_check(fs, "ib.port_rate")}
    assert rate["mlx5_1/1"].status == "fail" and rate["mlx5_1/1"].value == 200
    cnt = {f.subject: f for f in by_check(fs, "ib.counters")}
    assert cnt["mlx5_0/1"].status == "pass" and cnt["mlx5_1/1"].status == "fail"
    assert "symbol_error 17" in cnt["mlx5_1/1"].observed


def test_cluster_rules_sm_and_firmware_left_to_its_uniform_check():
    prof = load_profile("lab")
    a = parse("sysfs-infiniband", IB_SYSFS)
    b = parse("sysfs-infiniband", IB_SYSFS.replace("28.39.1002", "28.40.1000"))
    c = parse("sysfs-infiniband", IB_SYSFS)
    out = ib_checks.cluster_findings({"a": a, "b": b, "c": c}, {"a": prof, "b": prof, "c": prof})
    # firmware across the nodes is ib.firmware_uniform's (tests/test_hardware_checks.py), not ib.firmware's
    assert out == {"a": [], "b": [], "c": []}
    d = parse("sysfs-infiniband", IB_SYSFS.replace("sm_lid:0x1", "sm_lid:0x7"))
    out = ib_checks.cluster_findings({"a": a, "d": d}, {"a": prof, "d": prof})
    assert {f.check for f in out["a"]} == {"ib.sm"}


BOND_OK = """\
/sys/class/net/bond0/bonding/mode:active-backup 1
/sys/class/net/bond0/bonding/slaves:ib0 ib1
/sys/class/net/bond0/bonding/active_slave:ib0
/sys/class/net/bond0/bonding/primary:ib0
/sys/class/net/bond0/bonding/mii_status:up
/sys/class/net/bond0/bonding/miimon:100
/sys/class/net/bond0/bonding/fail_over_mac:active 1
/sys/class/net/ib0/bonding_slave/state:active
/sys/class/net/ib0/bonding_slave/mii_status:up
/sys/class/net/ib0/bonding_slave/link_failure_count:0
/sys/class/net/ib1/bonding_slave/state:backup
/sys/class/net/ib1/bonding_slave/mii_status:up
/sys/class/net/ib1/bonding_slave/link_failure_count:0
"""


def test_bond_healthy_and_failed_over():
    ctx = HostContext("n1", load_profile("lab"), timeout_s=10)

    # the bond component also judges 802.3ad bonds (net.bond_lacp: tests/test_checks_bond_lacp.py)
    def ib_bond(ev, ctx):
        return by_check(component("bond").evaluate(ev, ctx), "ib.bond")

    (ok,) = ib_bond({"bonding": res(BOND_OK)}, ctx)
    assert ok.status == "pass", ok
    failed_over = BOND_OK.replace("active_slave:ib0", "active_slave:ib1").replace(
        "ib0/bonding_slave/mii_status:up", "ib0/bonding_slave/mii_status:down")
    (f,) = ib_bond({"bonding": res(failed_over)}, ctx)
    assert f.status == "fail" and "slave down ib0" in f.observed
    wrong_mode = BOND_OK.replace("mode:active-backup 1", "mode:balance-rr 0")
    (f,) = ib_bond({"bonding": res(wrong_mode)}, ctx)
    assert f.status == "fail" and "mode balance-rr" in f.observed
    (f,) = ib_bond({"bonding": res("", rc=1)}, ctx)
    assert f.status == "fail" and f.observed == "bond does not exist"
    (f,) = ib_bond({"bonding": res("", rc=None, timed_out=True, cmd="grep")}, ctx)
    assert f.status == "error"


def test_time_sync():
    ctx = HostContext("n1", load_profile("lab"), timeout_s=10)
    synced = ("Reference ID    : 0AFA0001 (10.250.0.1)\nStratum         : 9\n"
              "System time     : 0.000012000 seconds slow of NTP time\nLast offset     : -0.000003 seconds\n"
              "Leap status     : Normal\n")
    (f,) = component("time").evaluate({"chrony": res(synced)}, ctx)
    assert f.status == "pass" and f.value == pytest.approx(-0.012)
    unsynced = synced.replace("Normal", "Not synchronised")
    (f,) = component("time").evaluate({"chrony": res(unsynced)}, ctx)
    assert f.status == "fail"
    (f,) = component("time").evaluate({"chrony": res("506 Cannot talk to daemon\n", rc=1)}, ctx)
    assert f.status == "fail" and f.observed == "chronyd is not running"
    (f,) = component("time").evaluate({"chrony": res("", rc=127, stderr="sh: chronyc: not found")}, ctx)
    assert f.status == "error" and "tool not found" in f.observed


def test_evaluator_crash_is_an_error_not_a_pass(monkeypatch):
    ctx = HostContext("n1", load_profile("lab"), timeout_s=10)
    comp = component("time")
    broken = type(comp)(comp.name, comp.check_ids, comp.commands, lambda ev, ctx: 1 / 0)
    (f,) = run_evaluations({}, ctx, [broken])
    assert f.status == "error" and "ZeroDivisionError" in f.observed


def test_tuning_memlock_and_sysctl():
    ctx = HostContext("n1", load_profile("lab", {"tuning": {"memlock": "unlimited"}}), timeout_s=10)
    ev = {
        "memlock": res("unlimited\nDefaultLimitMEMLOCK=infinity\n"),
        "hugepages": res("0\n"),
        "sysctl": res(
            "net.ipv4.conf.all.arp_announce = 2\nnet.ipv4.conf.all.arp_ignore = 1\n"
            "net.ipv4.conf.all.rp_filter = 0\n"
        ),
    }
    fs = component("tuning").evaluate(ev, ctx)
    assert by_check(fs, "tuning.memlock")[0].status == "pass"
    sysctl = {f.subject: f.status for f in by_check(fs, "tuning.sysctl")}
    assert sysctl == {"net.ipv4.conf.all.arp_announce": "pass", "net.ipv4.conf.all.arp_ignore": "pass",
                      "net.ipv4.conf.all.rp_filter": "fail"}
    assert by_check(fs, "tuning.governor")[0].status == "skip"  # the lab profile says governor: none
    limited = dict(ev, memlock=res("65536\nDefaultLimitMEMLOCK=8388608\n"))
    assert by_check(component("tuning").evaluate(limited, ctx), "tuning.memlock")[0].status == "fail"
    capped = HostContext("n1", load_profile("lab"), timeout_s=10)  # the lab profile asks for 8192 KiB
    ok8m = dict(ev, memlock=res("8192\nDefaultLimitMEMLOCK=8388608\n"))
    assert by_check(component("tuning").evaluate(ok8m, capped), "tuning.memlock")[0].status == "pass"
