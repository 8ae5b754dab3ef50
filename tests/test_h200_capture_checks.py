"""The gpu, driver and hardware checks on the captured H200 VM (tests/fixtures/SOURCES.md, "Captured for this
project on a lent H200"): one NVIDIA H200, driver 580.159.04, no NVLink visible, a container without
systemctl, lspci or modinfo. node-check ran there with the built-in profile h100-sxm-8x-ndr (`--checks
gpu,driver,hardware`); fed the captured outputs, the checks give what it printed, except the two NVLink checks
this change words anew: gpu.nvlink now fails per GPU (nvlink -s printed nothing) where the run said "error:
unparseable ... empty input", and gpu.nvlink_errors stays an error, worded "no NVLink counters to read".

Evidence not in tests/fixtures is what node-check's output shows of it: the commands that were not found (exit
127, the shell's message), modinfo's exit status 1 without output, and the libnccl2 version it printed. The
kernel log is the captured ``dmesg | grep -E 'NVRM|Xid'`` (node-check read the whole dmesg; it found no Xid
either)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from clustercert.checks import Finding, HostContext, component, node_verdict, run_evaluations
from clustercert.checks.gpu import NVLINK_SILENT
from clustercert.model.evidence import CommandResult
from clustercert.model.profile import load_profile
from clustercert.report.catalogue import CHECKS

FIX = Path(__file__).parent / "fixtures"
COMPONENTS = ("gpu", "driver", "hardware")
GPU0 = "GPU0 00000000:00:06.0"
NOT_FOUND = "/bin/sh: 1: {}: not found\n"

# What node-check printed on the VM (its JSON findings: check, status, subject, observed), in its order, less
# the two NVLink checks.
REAL_RUN = [
    ("gpu.count", "fail", "node", "1"),
    ("gpu.model", "fail", GPU0, "NVIDIA H200"),
    ("gpu.memory", "fail", GPU0, "143771 MiB"),
    ("gpu.ecc", "pass", GPU0, "ECC enabled, 0 uncorrectable"),
    ("gpu.row_remap", "pass", GPU0, "pending: No, failure: No"),
    (
        "gpu.retired_pages",
        "skip",
        GPU0,
        "page retirement is replaced by row remapping on hopper (profile gpu.architecture)",
    ),
    ("gpu.pcie_link", "pass", GPU0, "Gen5 x16"),
    ("gpu.throttle", "pass", GPU0, "none"),
    ("gpu.persistence", "pass", GPU0, "Enabled"),
    ("gpu.xid", "pass", "node", "critical: none (all Xids: none)"),
    (
        "gpu.fabricmanager",
        "error",
        "nvidia-fabricmanager",
        "tool not found: systemctl show -p LoadState -p ActiveState -p SubState -p UnitFileState "
        "nvidia-fabricmanager",
    ),
    ("driver.version", "fail", "nvidia driver", "580.159.04"),
    ("cuda.version", "pass", "driver CUDA version", "13.0"),
    (
        "driver.module_loaded",
        "error",
        "nvidia module",
        "exit status 1: modinfo -F version nvidia 2>/dev/null || { dpkg-query -W -f='${Version}\\n' "
        "nvidia-kernel-open-dkms nvidia-kernel-dkms 2>/dev/null || rpm -q --qf '%{VERSION}\\n' "
        "kmod-nvidia-open-dkms kmod-nvidia-latest-dkms 2>/dev/null; } | grep -m1 .",
    ),
    ("nccl.version", "fail", "libnccl2", "2.28.3-1+cuda13.0"),
    *[
        ("gpu.nic_affinity", "fail", f"mlx5_{i}", "not in nvidia-smi topo -m (no NIC of that name)")
        for i in range(8)
    ],
    (
        "hw.pcie_manifest",
        "error",
        "",
        "tool not found: lspci -D -nn -vv -d 10de: && lspci -D -nn -vv -d 15b3:",
    ),
    ("gpu.fabric_state", "error", GPU0, "state N/A, status N/A: the state is not reported"),
]


def _fixture(rel: str) -> str:
    return (FIX / rel).read_bytes().decode("utf-8")


@pytest.fixture(scope="module")
def ctx() -> HostContext:
    # the run was made when the profile named its rails mlx5_0..7 beside GPUs 0..7; since issue 33.4 it
    # discovers them, and a site that names them says so in hardware.nic_gpu: that is what reproduces the run
    old = {f"mlx5_{i}": i for i in range(8)}
    return HostContext("vm", load_profile("h100-sxm-8x-ndr", {"hardware": {"nic_gpu": old}}), timeout_s=30)


@pytest.fixture(scope="module")
def evidence(ctx) -> dict[str, CommandResult]:
    """Each evidence key of the three components with what its command gave on the VM."""
    captured = {
        "nvsmi_xml": (0, _fixture("nvidia-smi/q-x-h200-580.159.04-vm.xml"), ""),
        "nvsmi_nvlink": (0, _fixture("nvidia-smi/nvlink-s-h200-580-vm-empty.txt"), ""),
        "nvsmi_nvlink_errors": (0, _fixture("nvidia-smi/nvlink-e-h200-580-vm-empty.txt"), ""),
        "nvsmi_topo": (0, _fixture("nvidia-smi/topo-m-h200-580-vm-1gpu-ansi-header.txt"), ""),
        "kernel_log": (0, _fixture("dmesg/nvrm-h200-580-no-xid.txt"), ""),
        "svc_fabricmanager": (127, "", NOT_FOUND.format("systemctl")),
        "svc_persistenced": (127, "", NOT_FOUND.format("systemctl")),
        "lspci": (127, "", NOT_FOUND.format("lspci")),
        # node-check's error names the modinfo command, so `cat /sys/module/nvidia/version` ran; its output
        # was not captured: the loaded module is 580.159.04 (/proc/driver/nvidia/version on the VM)
        "driver_loaded": (0, "580.159.04\n", ""),
        "driver_installed": (1, "", ""),
        "nccl_pkg": (0, "2.28.3-1+cuda13.0", ""),
        # the rails' discovery reads the HCAs' sysfs (the hardware component since issue 33.4); the VM has no
        # HCA (its topo -m shows no NIC): the command's cd fails, as dash says it
        "ib_sysfs": (2, "", "/bin/sh: 1: cd: can't cd to /sys/class/infiniband\n"),
    }
    ev = {}
    for name in COMPONENTS:
        for key, (cmd, _t) in component(name).commands(ctx).items():
            # the node's identity (certificate, drift), judged by no check here
            if key in ("hca_identity", "dmi"):
                continue
            rc, out, err = captured[key]
            ev[key] = CommandResult(rc, out, err, False, 0.1, cmd)
    return ev


def _run(ev, ctx) -> list[Finding]:
    return run_evaluations(ev, ctx, [component(n) for n in COMPONENTS])


def test_checks_on_the_captured_h200_give_what_node_check_printed(evidence, ctx):
    fs = _run(evidence, ctx)
    rest = [
        (f.check, f.status, f.subject, f.observed)
        for f in fs
        if f.check not in ("gpu.nvlink", "gpu.nvlink_errors")
    ]
    assert rest == REAL_RUN
    by = {f.check: f for f in fs}
    assert (by["gpu.count"].expected, by["gpu.model"].expected) == ("8", "NVIDIA H100 80GB HBM3")
    assert by["gpu.memory"].expected == "81559 MiB ± 1024" and by["gpu.memory"].value == 143771
    assert by["gpu.pcie_link"].evidence == "current Gen5 x16, max Gen5 x16"
    assert by["gpu.throttle"].evidence == "active clock event reasons: gpu_idle"
    assert node_verdict(fs) == "fail"


def test_nvlink_silent_on_the_captured_h200(evidence, ctx):
    """nvlink -s printed nothing with exit status 0 and -q -x lists GPU0: gpu.nvlink fails for GPU0 (the
    profile expects 18 links); nvlink -e printed nothing: gpu.nvlink_errors cannot judge a counter (error)."""
    fs = _run(evidence, ctx)
    (nv,) = [f for f in fs if f.check == "gpu.nvlink"]
    assert (nv.status, nv.subject, nv.expected) == ("fail", "GPU0", "18 active links")
    assert nv.observed == NVLINK_SILENT == "no NVLink link reported (nvidia-smi nvlink -s printed nothing)"
    assert nv.evidence == ("nvidia-smi nvlink -s: exit status 0, no output; "
                           f"nvidia-smi -q -x lists {GPU0} NVIDIA H200")
    (ne,) = [f for f in fs if f.check == "gpu.nvlink_errors"]
    assert (ne.status, ne.subject) == ("error", "node")
    assert ne.observed == "no NVLink counters to read (nvidia-smi nvlink -e printed nothing)"


def test_no_check_passes_on_evidence_it_did_not_get(evidence, ctx):
    """In the captured run the checks whose command failed are errors; and with any one evidence key not
    collected, failing (exit 127), timed out or empty, no check that reads it (report/catalogue.py) passes."""
    fs = _run(evidence, ctx)
    missing = {k for k, r in evidence.items() if not r.ok}
    reads = {e.id: set(e.reads) for e in CHECKS if e.component in COMPONENTS}
    for f in fs:
        if reads[f.check] & missing and not reads[f.check] - missing:
            assert f.status == "error", f
    assert {f.check for f in fs if f.status == "pass"} == {"gpu.ecc", "gpu.row_remap", "gpu.pcie_link",
                                                            "gpu.throttle", "gpu.persistence", "gpu.xid",
                                                            "cuda.version"}
    for key, r in evidence.items():
        for bad in (None, replace(r, rc=127, stdout="", stderr="sh: x: not found"),
                    replace(r, rc=None, stdout="", timed_out=True), replace(r, rc=0, stdout="")):
            ev = dict(evidence)
            if bad is None:
                del ev[key]
            else:
                ev[key] = bad
            passed = [f for f in _run(ev, ctx) if f.status == "pass" and key in reads[f.check]]
            # an empty kernel log is a valid, Xid-free log (gpu.xid's own rule)
            passed = [f for f in passed if not (f.check == "gpu.xid" and bad is not None and bad.ok)]
            assert not passed, (key, bad, passed)


def test_nvlink_silent_without_the_gpu_list_or_with_a_failed_command_is_an_error(evidence, ctx):
    ev = dict(evidence)
    ev["nvsmi_xml"] = replace(ev["nvsmi_xml"], rc=None, stdout="", timed_out=True)
    (nv,) = [f for f in component("gpu").evaluate(ev, ctx) if f.check == "gpu.nvlink"]
    assert (nv.status, nv.subject) == ("error", "node")
    assert nv.observed == f"{NVLINK_SILENT}; nvidia-smi -q -x listed no GPU to judge"
    for bad, why in (
        (
            replace(evidence["nvsmi_nvlink"], rc=3, stderr="Unable to determine the device handle\n"),
            "exit status 3: nvidia-smi nvlink -s: Unable to determine the device handle",
        ),
        (
            replace(evidence["nvsmi_nvlink"], rc=None, timed_out=True),
            "timed out after 30 s: nvidia-smi nvlink -s",
        ),
    ):
        ev = dict(evidence, nvsmi_nvlink=bad)
        (nv,) = [f for f in component("gpu").evaluate(ev, ctx) if f.check == "gpu.nvlink"]
        assert (nv.status, nv.observed) == ("error", why)
    ev = dict(evidence, nvsmi_nvlink_errors=replace(evidence["nvsmi_nvlink_errors"], rc=None, timed_out=True))
    (ne,) = [f for f in component("hardware").evaluate(ev, ctx) if f.check == "gpu.nvlink_errors"]
    assert (ne.status, ne.observed) == ("error", "timed out after 30 s: nvidia-smi nvlink -e")


def test_nvlink_silent_is_a_skip_where_the_profile_expects_no_nvlink(evidence):
    no_nvlink = HostContext(
        "vm", load_profile("h100-sxm-8x-ndr", {"gpu": {"nvlink_links_per_gpu": 0}}), timeout_s=30
    )
    fs = _run(evidence, no_nvlink)
    assert [f.status for f in fs if f.check in ("gpu.nvlink", "gpu.nvlink_errors")] == ["skip", "skip"]
