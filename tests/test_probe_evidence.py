"""Issue 21.4: dcgmi diag runs with -j where the node's DCGM prints JSON (3.x/4.x layouts) and the text table
before; a test dcgmi skipped on some GPUs and passed on the others is no pass; an nvbandwidth testcase waived
without a name is matched to the -t order and reported as waived, not missing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from clustercert.model.evidence import CommandResult
from clustercert.model.profile import load_profile
from clustercert.probes.catalog import NVBW_TESTS
from clustercert.probes.commands import dcgmi_diag_cmd, nvbandwidth_cmd
from clustercert.probes.evaluate import eval_dcgmi_diag, eval_nvbandwidth, nvbw_testcases

FIX = Path(__file__).parent / "fixtures"
DIAG = load_profile("lab").dcgm_diag


def res(stdout: str = "", rc: int | None = 0, stderr: str = "", timed_out: bool = False) -> CommandResult:
    return CommandResult(rc, stdout, stderr, timed_out, 1.0, "dcgmi diag -r 2 -j")


# ---- dcgmi diag -j -----------------------------------------------------------------------------------------

def test_dcgm4_json_a_test_skipped_on_one_gpu_and_passed_on_the_other_is_no_pass():
    text = (FIX / "dcgmi" / "diag-j-dcgm4-memory-fail-pcie-skip-constructed.json").read_text()
    ms = {m.subject: m for m in eval_dcgmi_diag("n1", DIAG, res(text, rc=226), 900)}
    assert set(ms) == {"memory", "pcie"}  # software passed on both GPUs
    assert ms["memory"].status == "fail" and ms["memory"].observed.startswith("fail on GPU 1: ")
    assert "GPU 1 had uncorrectable memory errors" in ms["memory"].observed
    # the summary says Pass: GPU 1 was skipped all the same
    assert ms["pcie"].status == "error"
    assert ms["pcie"].observed.startswith("skipped by dcgmi on GPU 1 (passed on GPU 0): a test of level 2")
    assert all(m.expected.startswith("every test of `dcgmi diag -r 2` passes") for m in ms.values())


def test_dcgm3_json_layouts_fail_warn_and_per_gpu_skips():
    gcm = (FIX / "dcgmi" / "diag-j-dcgm3-deployment-fail-warn-gcm.json").read_text()
    ms = {m.subject: m.status for m in eval_dcgmi_diag("n1", DIAG, res(gcm, rc=226), 900)}
    assert ms == {"Persistence Mode": "fail", "Environment Variables": "fail"}
    nvvs = (FIX / "dcgmi" / "diag-j-nvvs-per-gpu-4gpu-skip-pass-dcgm-teststrings.json").read_text()
    ms = {m.subject: m for m in eval_dcgmi_diag("n1", DIAG, res(nvvs, rc=226), 900)}
    # memory: SKIP on GPU 0, PASS on 1-3 -- the worst of them reads "pass"; the per-GPU results say otherwise
    assert (
        ms["memory"].status == "error"
        and "skipped by dcgmi on GPU 0 (passed on GPU 1, 2, 3)" in ms["memory"].observed
    )
    assert (
        ms["diagnostic"].status == "error"
        and "skipped by dcgmi on GPU 0, 1, 2, 3" in ms["diagnostic"].observed
    )
    assert all(m.status != "pass" for m in ms.values())


def test_text_layout_per_gpu_skip_is_no_pass_either():
    table = (FIX / "dcgmi" / "diag-r2-dcgm4.4.2-per-gpu-format-pass.txt").read_text()
    lines = table.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("| pcie"))
    lines.insert(at + 2, lines[at + 1].replace("GPU0: Pass", "GPU1: Skip"))  # a second GPU, skipped
    two = "\n".join(lines)
    (m,) = eval_dcgmi_diag("n1", DIAG, res(two), 900)
    assert (m.subject, m.status) == (
        "pcie",
        "error",
    ) and "skipped by dcgmi on GPU 1 (passed on GPU 0)" in m.observed
    (m,) = eval_dcgmi_diag("n1", DIAG, res(table), 900)
    assert m.status == "pass"


def test_a_json_error_document_or_a_connection_error_is_an_error():
    err = '{"DCGM GPU Diagnostic": {"runtime_error": "Unable to create the diagnostic group"}}'
    (m,) = eval_dcgmi_diag("n1", DIAG, res(err, rc=255), 900)
    assert m.status == "error" and "Unable to create" in m.observed
    conn = "Error: unable to establish a connection to the specified host: localhost\n"
    (m,) = eval_dcgmi_diag("n1", DIAG, res(conn, rc=255), 900)
    assert m.status == "error" and "connection" in m.observed
    (m,) = eval_dcgmi_diag("n1", DIAG, res('{"DCGM Diagnostic": {"test_categ', rc=0), 900)
    assert m.status == "error" and "unparseable" in m.observed


@pytest.mark.parametrize("version, json_expected", [("3.3.9", True), ("4.4.1", True), ("10.0.1", True),
                                                    ("2.4.7", False), ("1.7.2", False), (None, False)])
def test_the_node_s_dcgmi_version_chooses_json_or_text(tmp_path, version, json_expected):
    """dcgmi_diag_cmd run by /bin/sh with a dcgmi that says VERSION (None: prints nothing, as a broken
    one)."""
    fake = tmp_path / "dcgmi"
    say = f'echo "dcgmi  version: {version}"' if version else "true"
    fake.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then {say}; exit 0; fi\necho "ARGS: $*"\n')
    fake.chmod(0o755)
    p = subprocess.run(["/bin/sh", "-c", dcgmi_diag_cmd(2)], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}"))
    assert p.returncode == 0
    assert p.stdout.strip() == ("ARGS: diag -r 2 -j" if json_expected else "ARGS: diag -r 2")


# ---- nvbandwidth: waived testcases --------------------------------------------------------------------

def nvbw_text(d2d: str) -> str:
    head = ["nvbandwidth Version: v0.7", "", "Device 0: NVIDIA H100 80GB HBM3 (00000000:19:00)", ""]
    h2d = ["Running host_to_device_memcpy_ce.", "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
           "           0", " 0     53.00", "", "SUM host_to_device_memcpy_ce 53.00", ""]
    d2h = ["Running device_to_host_memcpy_ce.", "memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)",
           "           0", " 0     54.00", "", "SUM device_to_host_memcpy_ce 54.00", ""]
    return "\n".join(head + h2d + d2h + d2d.split("\n")) + "\n"


def test_a_bare_waived_line_is_matched_to_the_t_order_and_skipped_on_a_one_gpu_node():
    assert nvbandwidth_cmd() == "nvbandwidth " + " ".join(f"-t {t}" for t in NVBW_TESTS.values())
    one = load_profile("lab", {"gpu": {"count": 1}, "hardware": {"nic_gpu": {"mlx5_0": 0, "mlx5_1": 0}}})
    out = eval_nvbandwidth(
        "n1", one, CommandResult(0, nvbw_text("Waived:"), "", False, 1.0, "nvbandwidth"), 60
    )
    by = {m.probe: m for m in out}
    assert by["nvbandwidth_h2d"].status == "pass" and by["nvbandwidth_d2h"].status == "pass"
    d2d = by["nvbandwidth_d2d"]
    assert d2d.status == "skip" and d2d.subject == "device_to_device_memcpy_read_ce"
    assert "waived by nvbandwidth (unnamed `Waived:` line, matched to the -t order)" in d2d.observed
    assert "profile gpu.count is 1" in d2d.observed and "missing" not in d2d.observed
    # a node the profile gives 8 GPUs should have run it: an error, never a pass
    eight = load_profile("lab")
    by = {
        m.probe: m
        for m in eval_nvbandwidth(
            "n1", eight, CommandResult(0, nvbw_text("Waived:"), "", False, 1.0, "nvbandwidth"), 60
        )
    }
    assert (
        by["nvbandwidth_d2d"].status == "error"
        and "although the profile has 8 GPUs" in by["nvbandwidth_d2d"].observed
    )


def test_a_named_waived_testcase_and_an_unmatched_one():
    from clustercert.parsers import parse

    named = nvbw_text("Running device_to_device_memcpy_read_ce.\nWaived: no peer access")
    rec = parse("nvbandwidth", named)
    assert (
        nvbw_testcases(rec, list(NVBW_TESTS.values()))["device_to_device_memcpy_read_ce"]["status"]
        == "waived"
    )
    one = load_profile("lab", {"gpu": {"count": 1}, "hardware": {"nic_gpu": {"mlx5_0": 0, "mlx5_1": 0}}})
    (d2d,) = [m for m in eval_nvbandwidth("n1", one, CommandResult(0, named, "", False, 1.0, "x"), 60)
              if m.probe == "nvbandwidth_d2d"]
    assert d2d.status == "skip" and "waived by nvbandwidth: no peer access" in d2d.observed
    # two bare waivers where one testcase is missing: positions cannot be told, nothing is matched
    rec = parse("nvbandwidth", nvbw_text("Waived:\n\nWaived:"))
    assert "device_to_device_memcpy_read_ce" not in nvbw_testcases(rec, list(NVBW_TESTS.values()))
    (d2d,) = [
        m
        for m in eval_nvbandwidth(
            "n1", one, CommandResult(0, nvbw_text("Waived:\n\nWaived:"), "", False, 1.0, "x"), 60
        )
        if m.probe == "nvbandwidth_d2d"
    ]
    assert d2d.status == "error" and "missing" in d2d.observed
