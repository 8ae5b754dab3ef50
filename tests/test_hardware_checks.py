"""Issue 21.3/21.5: the hardware component's checks (gpu.nvlink_errors, gpu.nic_affinity, hw.pcie_manifest,
gpu.fabric_state), the cluster-wide ones (ib.firmware_uniform, gpu.vbios_uniform), the node's hardware
identity and drift's hardware items, on real and constructed tool output. A value that reads N/A or Not
Supported is never a pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clustercert.checks import HostContext, component, node_verdict
from clustercert.checks import cluster as cluster_checks
from clustercert.checks import hardware as hw_checks
from clustercert.checks.drift import hardware_items
from clustercert.model.evidence import CommandResult
from clustercert.model.profile import load_profile

FIX = Path(__file__).parent / "fixtures"


def res(stdout: str = "", rc: int | None = 0, stderr: str = "", timed_out: bool = False) -> CommandResult:
    return CommandResult(rc, stdout, stderr, timed_out, 0.1, "cmd")


def ctx(profile: str = "lab", overrides: dict | None = None, name: str = "n1", **kw) -> HostContext:
    return HostContext(name, load_profile(profile, overrides), timeout_s=10, **kw)


def of(findings, check):
    return [f for f in findings if f.check == check]


# ---- gpu.nvlink_errors -----------------------------------------------------------------------------------

def nvlink_e(counts: dict[int, dict[int, tuple]], uuid: str = "GPU-aaaa") -> str:
    """nvidia-smi nvlink -e text: {gpu: {link: (replay, recovery, crc)}} (a value may be 'N/A')."""
    out = []
    for g, links in counts.items():
        out.append(f"GPU {g}: NVIDIA H100 80GB HBM3 (UUID: {uuid}-{g})")
        for link, (rep, rec, crc) in links.items():
            out += [f"\t Link {link}: Replay Errors: {rep}", f"\t Link {link}: Recovery Errors: {rec}",
                    f"\t Link {link}: CRC Errors: {crc}"]
    return "\n".join(out) + "\n"


def test_nvlink_errors_judge_each_gpu_against_the_thresholds():
    text = nvlink_e({0: {0: (0, 0, 0), 1: (0, 0, 0)}, 1: {0: (60, 0, 40), 1: (50, 0, 70)}, 2: {0: (0, 1, 0)}})
    fs = hw_checks.nvlink_errors(res(text), ctx())
    by = {f.subject: f for f in fs}
    assert by["GPU0"].status == "pass" and by["GPU0"].observed.startswith(
        "crc 0, replay 0, recovery 0 since the counters"
    )
    # CRC 110 and replay 110 over the GPU's links: both above 100
    assert by["GPU1"].status == "fail" and "crc 110, replay 110" in by["GPU1"].observed
    assert "link 0: crc_errors 40, replay_errors 60" in by["GPU1"].observed and by["GPU1"].value == 110
    assert by["GPU2"].status == "fail" and "recovery 1" in by["GPU2"].observed  # recovery: none tolerated
    assert json.loads(by["GPU1"].evidence) == {"uuid": "GPU-aaaa-1", "counters": {"crc": 110, "replay": 110,
                                                                                  "recovery": 0}}


def test_nvlink_errors_na_inactive_and_missing_counters_are_errors_never_passes():
    fix = (FIX / "nvidia-smi" / "nvlink-e-h100-replay-crc-constructed.txt").read_text()
    by = {f.subject: f for f in hw_checks.nvlink_errors(res(fix), ctx())}
    assert by["GPU0"].status == "fail"  # replay 17, recovery 1, CRC 412 on link 2
    assert by["GPU1"].status == "error" and "crc errors N/A or Not Supported on a link" in by["GPU1"].observed
    for unread in ("Not Supported", "[Not Supported]", "N/A"):  # one link unreadable: the GPU is not judged
        fs = hw_checks.nvlink_errors(res(nvlink_e({0: {0: (0, 0, unread), 1: (0, 0, 0)}})), ctx())
        assert [f.status for f in fs] == ["error"], (unread, fs)
    assert by["GPU2"].status == "error" and "all links are inactive" in by["GPU2"].observed.lower()
    gb200 = (FIX / "nvidia-smi" / "nvlink-e-gb200-extended-counters-constructed.txt").read_text()
    fs = hw_checks.nvlink_errors(res(gb200), ctx())
    assert fs and all(f.status == "error" and "not in the output" in f.observed for f in fs)
    for bad in (
        res("", rc=127, stderr="sh: nvidia-smi: not found"),
        res(timed_out=True, rc=None),
        res("garbage\n"),
    ):
        (f,) = hw_checks.nvlink_errors(bad, ctx())
        assert f.status == "error"
    (skip,) = hw_checks.nvlink_errors(res(""), ctx(overrides={"gpu": {"nvlink_links_per_gpu": 0}}))
    assert skip.status == "skip" and "profile" in skip.observed


def test_nvlink_errors_in_drift_count_what_was_added_since_the_baseline():
    base_text = nvlink_e({0: {0: (90, 0, 95)}})
    (base,) = hw_checks.nvlink_errors(res(base_text), ctx())
    assert base.status == "pass"
    stored = [{"node": "n1", "check_id": "gpu.nvlink_errors", "evidence": base.evidence},
              {"node": "n1", "check_id": "gpu.count", "evidence": "8"},
              {"node": "n2", "check_id": "gpu.nvlink_errors", "evidence": "not json"}]
    baseline = hw_checks.nvlink_baseline(stored)
    assert baseline == {"n1": {"GPU-aaaa-0": {"crc": 95, "replay": 90, "recovery": 0}}}
    # 150 CRC now: +55 since the baseline passes, although 150 is above the ceiling
    now = nvlink_e({0: {0: (100, 0, 150)}})
    (f,) = hw_checks.nvlink_errors(res(now), ctx(nvlink_baseline=baseline["n1"]))
    assert f.status == "pass" and f.observed.startswith(
        "crc 55, replay 10, recovery 0 since the baseline run"
    )
    (f,) = hw_checks.nvlink_errors(
        res(nvlink_e({0: {0: (100, 1, 300)}})), ctx(nvlink_baseline=baseline["n1"])
    )
    assert f.status == "fail" and "crc 205" in f.observed and "recovery 1" in f.observed
    # counters below the baseline's were reset meanwhile (driver reload): read whole
    (f,) = hw_checks.nvlink_errors(res(nvlink_e({0: {0: (0, 0, 120)}})), ctx(nvlink_baseline=baseline["n1"]))
    assert f.status == "fail" and "since the counters were reset (after the baseline run)" in f.observed
    # another GPU (a swapped one) has no baseline: read whole
    (f,) = hw_checks.nvlink_errors(res(nvlink_e({0: {0: (0, 0, 0)}}, uuid="GPU-bbbb")),
                                   ctx(nvlink_baseline=baseline["n1"]))
    assert f.status == "pass" and "since the counters were reset" in f.observed


# ---- gpu.nic_affinity ------------------------------------------------------------------------------------

TOPO_12NIC = (FIX / "nvidia-smi" / "topo-mp-8xH100-12NIC-nic-legend-tabs.txt").read_text()


def test_nic_affinity_reads_the_profile_mapping_against_topo():
    # a site that names mlx5_N beside GPU N (hardware.nic_gpu: fixed names); on this Dell box mlx5_0..2 share
    # GPU0's switch (without fixed names the rails are discovered: tests/test_rails.py)
    old = {f"mlx5_{i}": i for i in range(8)}
    fs = hw_checks.nic_affinity(res(TOPO_12NIC), ctx("h100-sxm-8x-ndr", {"hardware": {"nic_gpu": old}}))
    by = {f.subject: f for f in fs}
    assert set(by) == {f"mlx5_{i}" for i in range(8)}
    assert by["mlx5_0"].status == "pass" and by["mlx5_0"].observed == "PIX to GPU0"
    assert by["mlx5_1"].status == "fail" and by["mlx5_1"].observed == "NODE to GPU1 (same switch as: GPU0)"
    assert by["mlx5_6"].status == "fail" and by["mlx5_6"].observed == "NODE to GPU6 (same switch as: GPU4)"
    # the box's own mapping (what topo -m shows PIX) passes: a site overrides hardware.nic_gpu
    dell = {"mlx5_0": 0, "mlx5_3": 1, "mlx5_4": 2, "mlx5_5": 3, "mlx5_6": 4}
    fs = hw_checks.nic_affinity(res(TOPO_12NIC), ctx("h100-sxm-8x-ndr", {"hardware": {"nic_gpu": dell}}))
    assert [f.status for f in fs] == ["pass"] * 5


def test_nic_affinity_unknown_nic_na_cell_no_mapping_and_bad_output():
    prof = ctx("h100-sxm-8x-ndr", {"hardware": {"nic_gpu": {"mlx5_0": 0}}})
    na = TOPO_12NIC.replace("GPU0\t X \tNODE\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\tPIX",
                            "GPU0\t X \tNODE\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\tN/A")
    na = na.replace("NIC0\tPIX\tNODE", "NIC0\tN/A\tNODE")
    (f,) = hw_checks.nic_affinity(res(na), prof)
    assert f.status == "error" and "N/A" in f.observed
    gone = TOPO_12NIC.replace("  NIC0: mlx5_0\n", "  NIC0: mlx5_99\n")
    (f,) = hw_checks.nic_affinity(res(gone), prof)
    assert f.status == "fail" and "not in nvidia-smi topo -m" in f.observed
    for bad in (res("ERROR: Option -m is missing its value\n", rc=255), res("", rc=127)):
        (f,) = hw_checks.nic_affinity(bad, prof)
        assert f.status == "error"
    (f,) = hw_checks.nic_affinity(res(TOPO_12NIC), ctx("h100-sxm-8x-ndr", {"gpudirect": None,
                                                                          "hardware": {"rails": None}}))
    assert f.status == "skip" and "profile" in f.observed


def test_profile_mapping_is_replaced_whole_and_a_gpu_beyond_the_count_is_an_error():
    # a site that lowers gpu.count (or replaces ib.hcas) keeps loading; the mapping is replaced whole
    p = load_profile("a100-sxm-8x-hdr", {"gpu": {"count": 1}})
    assert p.hardware is not None and p.hardware.rails.count == 8
    assert load_profile("lab", {"hardware": {"nic_gpu": {"mlx5_1": 3}}}).hardware.nic_gpu == {"mlx5_1": 3}
    assert load_profile("lab", {"hardware": {"nvswitch_count": 2}}).hardware.nic_gpu == {
        "mlx5_0": 0,
        "mlx5_1": 4,
    }
    # ... and gpu.nic_affinity says the mapping names a GPU the profile does not have: an error, never a pass
    fs = hw_checks.nic_affinity(res(TOPO_12NIC), ctx("h100-sxm-8x-ndr", {"gpu": {"count": 1}, "hardware": {
        "nic_gpu": {"mlx5_0": 0, "mlx5_3": 1}}}))
    by = {f.subject: f for f in fs}
    assert by["mlx5_0"].status == "pass"
    assert by["mlx5_3"].status == "error" and "gpu.count is 1" in by["mlx5_3"].observed
    for name in ("lab", "h100-sxm-8x-ndr", "a100-sxm-8x-hdr"):
        hw = load_profile(name).hardware
        assert hw is not None and (hw.nic_gpu or hw.rails) and hw.nvswitch_count and len(hw.source) > 40


# ---- hw.pcie_manifest ------------------------------------------------------------------------------------

def lspci_vv(gpus=8, gpu_sta=("32", 16), hcas=2, nvswitches=4, hca_sta=("32", 16), no_caps=False) -> str:
    def dev(addr, cls, name, ids, sta, cap=("32", 16)):
        lines = [f"0000:{addr} {cls}: {name} [{ids}] (rev a1)", f"\tSubsystem: {name}", "\tNUMA node: 0"]
        if no_caps:
            lines.append("\tCapabilities: <access denied>")
        else:
            down_s = " (downgraded)" if float(sta[0]) < float(cap[0]) else ""
            down_w = " (downgraded)" if sta[1] < cap[1] else ""
            lines += ["\tCapabilities: [60] Express (v2) Endpoint, MSI 00",
                      f"\t\tLnkCap:\tPort #0, Speed {cap[0]}GT/s, Width x{cap[1]}, ASPM not supported",
                      f"\t\tLnkSta:\tSpeed {sta[0]}GT/s{down_s}, Width x{sta[1]}{down_w}"]
        return lines + ["\tKernel driver in use: nvidia", ""]
    out = []
    buses = ["19", "3b", "4c", "5d", "9b", "bb", "cb", "db"]
    for i in range(gpus):
        out += dev(
            f"{buses[i]}:00.0",
            "3D controller [0302]",
            "NVIDIA Corporation GH100 [H100 SXM5 80GB]",
            "10de:2330",
            gpu_sta if i == 0 else ("32", 16),
        )
    for i in range(nvswitches):
        out += dev(
            f"0{5 + i}:00.0", "Bridge [0680]", "NVIDIA Corporation Device", "10de:22a3", ("16", 2), ("16", 2)
        )
    for i, b in enumerate(["18", "2a"][:hcas]):
        out += dev(
            f"{b}:00.0",
            "Infiniband controller [0207]",
            "Mellanox Technologies MT2910 Family [ConnectX-7]",
            "15b3:1021",
            hca_sta if i == 0 else ("32", 16),
        )
    return "\n".join(out)


def test_pcie_manifest_counts_and_links():
    fs = hw_checks.pcie_manifest(res(lspci_vv()), ctx())
    assert {f.status for f in fs} == {"pass"}
    assert {f.subject for f in fs} >= {
        "GPUs",
        "HCAs",
        "NVSwitches",
        "GPU0 00000000:19:00.0",
        "HCA 00000000:18:00.0",
    }
    by = {f.subject: f for f in hw_checks.pcie_manifest(res(lspci_vv(gpu_sta=("16", 8))), ctx())}
    assert by["GPU0 00000000:19:00.0"].status == "fail"
    assert by["GPU0 00000000:19:00.0"].observed == "16 GT/s x8 (downgraded)"
    by = {f.subject: f for f in hw_checks.pcie_manifest(res(lspci_vv(nvswitches=3, gpus=7)), ctx())}
    assert by["NVSwitches"].status == "fail" and by["NVSwitches"].observed == "3 on the PCIe bus"
    assert by["GPUs"].status == "fail" and by["GPUs"].value == 7
    by = {f.subject: f for f in hw_checks.pcie_manifest(res(lspci_vv(hcas=1, hca_sta=("16", 16))), ctx())}
    assert by["HCAs"].status == "fail" and by["HCA 00000000:18:00.0"].status == "fail"


def test_pcie_manifest_unreadable_links_are_errors_and_virtual_functions_no_hcas():
    fs = hw_checks.pcie_manifest(res(lspci_vv(no_caps=True)), ctx())
    links = [f for f in fs if f.subject.startswith(("GPU0 ", "HCA "))]
    assert links and all(f.status == "error" and "not readable" in f.observed for f in links)
    a100 = (FIX / "lspci" / "lspci-nn-hgx-a100-gpus-nvswitch.txt").read_text()
    by = {f.subject: f for f in hw_checks.pcie_manifest(res(a100), ctx("a100-sxm-8x-hdr"))}
    assert by["GPUs"].status == "pass" and by["NVSwitches"].status == "pass"  # 8 A100s, 6 NVSwitches
    assert by["HCAs"].status == "fail" and by["HCAs"].value == 0  # ConnectX-6 virtual functions are no HCAs
    # lspci -nn: no -vv
    assert all(f.status == "error" for s, f in by.items() if s.startswith("GPU") and s != "GPUs")
    (f,) = [f for f in hw_checks.pcie_manifest(res("", rc=127, stderr="lspci: not found"), ctx())]
    assert f.status == "error" and "tool not found" in f.observed
    # no NVIDIA or Mellanox function at all
    empty = {f.subject: f for f in hw_checks.pcie_manifest(res(""), ctx())}
    assert empty["GPUs"].status == "fail" and empty["GPUs"].value == 0


# ---- gpu.fabric_state ------------------------------------------------------------------------------------

def smi_xml(fabric: list[tuple[str, str] | None], vbios: str = "96.00.99.00.01", serial: str = "1650") -> str:
    gpus = []
    for i, fab in enumerate(fabric):
        f = "" if fab is None else f"<fabric><state>{fab[0]}</state><status>{fab[1]}</status></fabric>"
        gpus.append(
            f'<gpu id="00000000:{0x19 + i:02X}:00.0"><product_name>NVIDIA H100 80GB HBM3</product_name>'
            f"<serial>{serial}{i}</serial><uuid>GPU-{i:04d}</uuid><vbios_version>{vbios}</vbios_version>{f}</gpu>"
        )
    return (
        f'<?xml version="1.0" ?><nvidia_smi_log><driver_version>570.172.08</driver_version>{"".join(gpus)}</'
        'nvidia_smi_log>'
    )


def test_fabric_state_completed_success_passes_anything_else_does_not():
    # a Completed registration with an NVML error status fails; "Unknown Error" is nvidia-smi's placeholder
    # for a value it could not read (as N/A): an error
    xml = smi_xml([("Completed", "Success"), ("In Progress", "N/A"), ("Completed", "Timeout"),
                   ("Completed", "N/A"), ("N/A", "N/A"), ("Not Supported", "Not Supported"), None,
                   ("Completed", "Unknown Error")])
    got = [(f.subject.split()[0], f.status) for f in hw_checks.fabric_state(res(xml), ctx())]
    assert got == [("GPU0", "pass"), ("GPU1", "fail"), ("GPU2", "fail"), ("GPU3", "error"), ("GPU4", "error"),
                   ("GPU5", "error"), ("GPU6", "error"), ("GPU7", "error")]
    (f,) = hw_checks.fabric_state(
        res(xml), ctx(overrides={"gpu": {"nvswitch": False}, "hardware": {"nvswitch_count": 0}})
    )
    assert f.status == "skip" and "profile" in f.observed
    (f,) = hw_checks.fabric_state(res("", rc=18, stderr="Failed to initialize NVML"), ctx())
    assert f.status == "error"


def test_vbios_version_is_parsed_from_xml_and_q_text():
    from clustercert.parsers import parse

    rec = parse("nvidia-smi-xml", smi_xml([("Completed", "Success")], vbios="96.00.74.00.1C"))
    assert rec["gpus"][0]["vbios_version"] == "96.00.74.00.1C"
    q = parse("nvidia-smi-q", (FIX / "nvidia-smi" / "q-h100-590-idle.txt").read_text())
    assert q["gpus"][0]["vbios_version"] and "." in q["gpus"][0]["vbios_version"]


# ---- the component as a whole ---------------------------------------------------------------------------

def test_component_commands_and_every_per_node_check_reports():
    comp = component("hardware")
    cmds = comp.commands(ctx())
    assert set(cmds) == {
        "nvsmi_xml",
        "nvsmi_nvlink_errors",
        "nvsmi_topo",
        "lspci",
        "hca_identity",
        "dmi",
        "ib_sysfs",
    }
    assert cmds["lspci"][0].startswith("lspci -D -nn -vv -d 10de:") and cmds["dmi"][0].startswith(
        "dmidecode -t system"
    )
    fs = comp.evaluate({}, ctx())  # nothing collected: every per-node check is an error, none passes
    assert {f.check for f in fs} == set(hw_checks.NODE_CHECK_IDS)
    assert {f.status for f in fs} == {"error"} and node_verdict(fs) == "error"


# ---- the cluster-wide checks -----------------------------------------------------------------------------

def ib_identity(fw0: str = "28.43.1014", fw1: str = "28.43.1014", guid: str = "58a2:e103:0001:0001") -> str:
    return (f"mlx5_0/fw_ver:{fw0}\nmlx5_0/node_guid:{guid}\nmlx5_0/board_id:MT_0000000838\n"
            f"mlx5_1/fw_ver:{fw1}\nmlx5_1/node_guid:{guid[:-1]}2\nmlx5_1/board_id:MT_0000000838\n")


def cluster(evs: dict[str, dict], overrides: dict | None = None) -> dict:
    contexts = {n: ctx(overrides=overrides, name=n) for n in evs}
    return cluster_checks.cluster_findings(evs, contexts)


def test_firmware_uniform_names_the_odd_one_out_on_its_node_only():
    evs = {n: {"hca_identity": res(ib_identity())} for n in ("a", "b", "c", "d")}
    evs["c"] = {"hca_identity": res(ib_identity(fw0="28.42.1014"))}
    out = cluster(evs)
    for n in ("a", "b", "d"):
        (f,) = of(out[n], "ib.firmware_uniform")
        assert f.status == "pass" and "as on the other 3 node(s)" in f.observed
    (f,) = of(out["c"], "ib.firmware_uniform")
    assert (f.status, f.subject, f.observed) == ("fail", "mlx5_0", "28.42.1014")
    assert f.expected.startswith("28.43.1014 (as on 3 of the profile's parts)")


def test_firmware_uniform_ties_single_nodes_na_and_bad_evidence():
    two = {
        "a": {"hca_identity": res(ib_identity())},
        "b": {"hca_identity": res(ib_identity(fw0="28.42.1014"))},
    }
    out = cluster(two)
    assert [f.status for f in of(out["a"], "ib.firmware_uniform")] == ["error"]  # no majority: not told which
    assert "no majority" in of(out["b"], "ib.firmware_uniform")[0].observed
    (f,) = of(cluster({"a": {"hca_identity": res(ib_identity())}})["a"], "ib.firmware_uniform")
    assert f.status == "skip" and "profile lab" in f.observed
    (f,) = of(cluster(two, {"firmware_uniform": False})["b"], "ib.firmware_uniform")
    assert f.status == "skip" and "firmware_uniform: false" in f.observed
    evs = {n: {"hca_identity": res(ib_identity())} for n in ("a", "b", "c")}
    evs["b"] = {"hca_identity": res(ib_identity().replace("mlx5_1/fw_ver:28.43.1014\n", ""))}
    evs["c"] = {"hca_identity": res("", rc=1, stderr="grep: no such file")}
    out = cluster(evs)
    assert [f.status for f in of(out["b"], "ib.firmware_uniform")] == ["error"]  # mlx5_1 reads no version
    assert [f.status for f in of(out["c"], "ib.firmware_uniform")] == ["error"]
    assert [f.status for f in of(out["a"], "ib.firmware_uniform")] == ["pass"]


def test_vbios_uniform_names_the_odd_gpu():
    xml = smi_xml([("Completed", "Success")] * 8)
    evs = {n: {"nvsmi_xml": res(xml)} for n in ("a", "b", "c")}
    odd = xml.replace(
        "<vbios_version>96.00.99.00.01</vbios_version>", "<vbios_version>96.00.99.00.02</vbios_version>", 1
    )
    evs["b"] = {"nvsmi_xml": res(odd)}
    out = cluster(evs)
    assert [f.status for f in of(out["a"], "gpu.vbios_uniform")] == ["pass"]
    (f,) = of(out["b"], "gpu.vbios_uniform")
    assert (f.status, f.subject, f.observed) == ("fail", "GPU0 00000000:19:00.0", "96.00.99.00.02")
    na = xml.replace("<vbios_version>96.00.99.00.01</vbios_version>", "<vbios_version>N/A</vbios_version>", 1)
    evs["c"] = {"nvsmi_xml": res(na)}
    (f,) = of(cluster(evs)["c"], "gpu.vbios_uniform")
    assert f.status == "error" and "N/A" in f.observed


def test_an_evaluator_bug_is_an_error_on_every_node(monkeypatch):
    monkeypatch.setattr(cluster_checks, "_uniform", lambda *a, **k: 1 / 0)
    out = cluster({"a": {}, "b": {}})
    assert {f.status for fs in out.values() for f in fs} == {"error"}


# ---- identity and drift -----------------------------------------------------------------------------------

DMI = """# dmidecode 3.4
Getting SMBIOS data from sysfs.
SMBIOS 3.5.0 present.

Handle 0x0001, DMI type 1, 27 bytes
System Information
\tManufacturer: Supermicro
\tProduct Name: SYS-821GE-TNHR
\tVersion: 0123456789
\tSerial Number: S4220613X3A0123
\tUUID: 3a0b1c2d-0000-1111-2222-3c4d5e6f7a8b
\tWake-up Type: Power Switch
\tSKU Number: To be filled by O.E.M.
\tFamily: Family

Handle 0x0002, DMI type 2, 15 bytes
Base Board Information
\tManufacturer: Supermicro
\tProduct Name: X13DEG-OAD
\tVersion: 1.01
\tSerial Number: OM23AS001234
\tAsset Tag: To be filled by O.E.M.
\tFeatures:
\t\tBoard is a hosting board

Handle 0x0003, DMI type 3, 22 bytes
Chassis Information
\tManufacturer: Supermicro
\tType: Other
\tLock: Not Present
\tVersion: 0123456789
\tSerial Number: C8170AM39A01234
\tAsset Tag: To be filled by O.E.M.
"""


def test_dmidecode_parser_keeps_identities_and_drops_placeholders():
    from clustercert.parsers import ParseError, parse

    rec = parse("dmidecode", DMI)  # constructed in dmidecode 3.4's layout
    assert rec["version"] == "3.4" and rec["smbios"] == "3.5.0" and len(rec["records"]) == 3
    assert rec["system"]["serial_number"] == "S4220613X3A0123" and rec["system"]["version"] is None
    assert rec["system"]["sku_number"] is None and rec["baseboard"]["serial_number"] == "OM23AS001234"
    assert rec["chassis"]["serial_number"] == "C8170AM39A01234" and rec["chassis"]["asset_tag"] is None
    assert rec["records"][1]["fields"]["Features"] == ""  # a list's continuation lines are not kept
    for bad in (
        "",
        "# dmidecode 3.4\n/dev/mem: Permission denied\n",
        "No SMBIOS nor DMI entry point found, sorry.\n",
    ):
        with pytest.raises(ParseError):
            parse("dmidecode", bad)


def full_evidence(serial: str = "1650", guid: str = "58a2:e103:0001:0001", nvswitches: int = 4) -> dict:
    return {"nvsmi_xml": res(smi_xml([("Completed", "Success")] * 8, serial=serial)),
            "hca_identity": res(ib_identity(guid=guid)), "dmi": res(DMI),
            "lspci": res(lspci_vv(nvswitches=nvswitches))}


def test_identity_records_every_part_and_unknown_parts_as_none():
    ident = hw_checks.identity(full_evidence())
    assert [g["serial"] for g in ident["gpus"]] == [f"1650{i}" for i in range(8)]
    assert ident["gpus"][0] == {
        "index": 0,
        "bus_id": "00000000:19:00.0",
        "serial": "16500",
        "uuid": "GPU-0000",
        "vbios": "96.00.99.00.01",
    }
    assert ident["hcas"][0] == {"name": "mlx5_0", "node_guid": "58a2:e103:0001:0001", "fw_ver": "28.43.1014",
                                "board_id": "MT_0000000838"}
    assert (
        ident["board"]["system_serial"] == "S4220613X3A0123"
        and ident["board"]["chassis_serial"] == "C8170AM39A01234"
    )
    assert ident["nvswitch_count"] == 4
    partial = hw_checks.identity({"nvsmi_xml": res("", rc=9), "dmi": res(DMI)})
    assert partial["gpus"] is None and partial["hcas"] is None and partial["board"] is not None
    assert hw_checks.identity({}) is None


def test_identity_changes_name_the_part():
    before = hw_checks.identity(full_evidence())
    assert hw_checks.identity_changes(before, before) == []
    swapped = hw_checks.identity(full_evidence())
    swapped["gpus"][3] = dict(swapped["gpus"][3], serial="1999", uuid="GPU-new")
    swapped["gpus"].pop(5)
    swapped["hcas"][1] = dict(swapped["hcas"][1], node_guid="58a2:e103:00ff:ffff", fw_ver="28.99.1000")
    swapped["board"] = dict(swapped["board"], chassis_serial="C000")
    swapped["nvswitch_count"] = 3
    ch = {(c["part"], c["name"], c["change"]) for c in hw_checks.identity_changes(before, swapped)}
    assert ch == {("gpu", "GPU3 00000000:1C:00.0", "swapped"), ("gpu", "GPU5 00000000:1E:00.0", "missing"),
                  ("hca", "mlx5_1", "swapped"), ("board", "chassis serial", "swapped"),
                  ("nvswitch", "NVSwitches", "missing")}
    # firmware alone is no part change; an unknown side is not compared
    fw = hw_checks.identity(full_evidence())
    fw["hcas"][0]["fw_ver"] = "28.42.1014"
    assert hw_checks.identity_changes(before, fw) == []
    assert hw_checks.identity_changes(before, dict(before, gpus=None, board=None)) == []


def test_drift_hardware_items_on_the_changed_node_only():
    base = {n: hw_checks.identity(full_evidence()) for n in ("a", "b", "c")}
    now = {"a": hw_checks.identity(full_evidence()), "b": hw_checks.identity(full_evidence(serial="1777")),
           "c": None, "d": hw_checks.identity(full_evidence())}
    items = hardware_items(now, base)
    # every GPU of b; c unknown, d has no baseline
    assert {i.node for i in items} == {"b"} and len(items) == 8
    i = items[0]
    assert (i.kind, i.check, i.detail) == ("hardware", "hardware.gpu", "GPU0 00000000:19:00.0: swapped")
    assert i.before == "serial 16500, UUID GPU-0000" and i.after == "serial 17770, UUID GPU-0000"
    assert i.to_json()["kind"] == "hardware"
