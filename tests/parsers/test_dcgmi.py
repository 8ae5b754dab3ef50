"""Tests for clustercert.parsers.dcgmi (diag table, discovery)."""

from __future__ import annotations

import pytest

from clustercert.parsers import ParseError, parse


def _tests(r):
    return {t["key"]: t for t in r["tests"]}


def test_r1_deployment_failures(fixture_text):
    r = parse("dcgmi-diag", fixture_text("dcgmi/diag-r1-deployment-failures.txt"))
    assert r["ok"] is True and r["overall"] == "fail"
    t = _tests(r)
    assert t["blacklist"]["result"] == "pass" and t["blacklist"]["category"] == "deployment"
    assert t["persistence_mode"]["result"] == "fail"
    assert [k for k, v in t.items() if v["result"] == "fail"] == [
        "persistence_mode", "environment_variables", "page_retirement", "graphics_processes", "inforom",
    ]


def test_r1_pass(fixture_text):
    r = parse("dcgmi-diag", fixture_text("dcgmi/diag-r1-pass-deployment-only.txt"))
    assert r["overall"] == "pass" and len(r["tests"]) == 9
    assert all(t["result"] == "pass" for t in r["tests"])


def test_dcgm4_per_gpu_layout(fixture_text):
    r = parse("dcgmi-diag", fixture_text("dcgmi/diag-r2-dcgm4.4.2-per-gpu-format-pass.txt"))
    assert r["dcgm_version"] == "4.4.2" and r["driver_version"] == "580.105.08"
    assert r["gpu_device_ids"] == ["2237"]
    t = _tests(r)
    assert set(t) == {"software", "memory", "pcie"}
    assert t["pcie"]["gpus"] == {"0": "pass"} and t["pcie"]["category"] == "integration"
    assert r["overall"] == "pass"


def test_pcie_fail_with_wrapped_warning(fixture_text):
    r = parse("dcgmi-diag", fixture_text("dcgmi/diag-r2-dcgm4.4.1-v100-pcie-fail-internal-error-excerpt.txt"))
    assert r["overall"] == "fail"
    assert r["gpu_device_ids"] == ["1db1"] * 4
    pcie = _tests(r)["pcie"]
    assert pcie["result"] == "fail"
    (msg,) = pcie["messages"]
    assert msg["level"] == "warning"
    assert msg["text"] == (
        "There was an internal error during the test: 'A child process (2378806) exited with non-zero "
        "status 1' Check DCGM and system logs for errors. Reset GPU. Restart DCGM. Rerun diagnostics."
    )


def test_error_output_is_explicit(fixture_text):
    r = parse("dcgmi-diag", fixture_text("dcgmi/diag-r3-dcgm4-error-cannot-load-plugins.txt"))
    assert r["ok"] is False and r["overall"] == "error" and r["tests"] == []
    assert "Return: (-30)" in r["error"] and "Cannot load plugins" in r["error"]


SKIP_TABLE = """Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
+-----  Integration  -------+------------------------------------------------+
| PCIe                      | Skip - All                                     |
+-----  Hardware  ----------+------------------------------------------------+
| GPU Memory                | Pass - GPUs: 1, 2, 3                           |
|                           | Fail - GPU: 0                                  |
| Warning                   | GPU 0 Thermal violations totaling 13.3 second  |
|                           | s started at 9.7 seconds into the test.        |
+---------------------------+------------------------------------------------+
"""


def test_skip_is_not_pass_and_mixed_gpu_results():
    r = parse("dcgmi-diag", SKIP_TABLE)
    t = _tests(r)
    assert t["pcie"]["result"] == "skip" and t["pcie"]["all_gpus"] is True
    assert t["gpu_memory"]["gpus"] == {"0": "fail", "1": "pass", "2": "pass", "3": "pass"}
    assert t["gpu_memory"]["result"] == "fail"
    assert t["gpu_memory"]["messages"][0]["text"] == (
        "GPU 0 Thermal violations totaling 13.3 seconds started at 9.7 seconds into the test."
    )
    assert r["overall"] == "fail"
    only_skip = SKIP_TABLE.split("+-----  Hardware")[0] + "+---------------------------+----+\n"
    r2 = parse("dcgmi-diag", only_skip)
    assert r2["overall"] == "skip" and r2["skipped"] == ["pcie"]


def test_diag_errors(fixture_text):
    with pytest.raises(ParseError, match="empty"):
        parse("dcgmi-diag", "")
    with pytest.raises(ParseError, match="Diagnostic"):
        parse("dcgmi-diag", fixture_text("dcgmi/discovery-l-4xh100-name-null-dcgm3.1.7.txt"))
    with pytest.raises(ParseError, match="truncated"):
        parse("dcgmi-diag", "+----+\n| Diagnostic                | Result     |\n+====+\n")


def test_discovery_null_names(fixture_text):
    r = parse("dcgmi-discovery", fixture_text("dcgmi/discovery-l-4xh100-name-null-dcgm3.1.7.txt"))
    assert r["gpu_count"] == 4 and len(r["gpus"]) == 4
    assert r["gpus"][2] == {"id": 2, "name": None, "bus_id": "00000000:CC:00.0", "uuid": "GPU-879a110e-54dc-22fe-9699-5babde1d450e"}
    assert r["nvswitch_count"] == 0 and r["nvswitch_ids"] == []
    with pytest.raises(ParseError):
        parse("dcgmi-discovery", "Error: unable to establish a connection to the specified host: localhost\n")
