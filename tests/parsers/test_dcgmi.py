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
    assert r["gpus"][2] == {
        "id": 2,
        "name": None,
        "bus_id": "00000000:CC:00.0",
        "uuid": "GPU-879a110e-54dc-22fe-9699-5babde1d450e",
    }
    assert r["nvswitch_count"] == 0 and r["nvswitch_ids"] == []
    with pytest.raises(ParseError):
        parse("dcgmi-discovery", "Error: unable to establish a connection to the specified host: localhost\n")


# --- issue 21.8: dcgmi diag -j (DCGM 3.x and 4.x layouts) normalised to the dcgmi-diag record


def test_diag_json_dcgm3_deployment_fail_and_warn_gcm(fixture_text):
    r = parse("dcgmi-diag-json", fixture_text("dcgmi/diag-j-dcgm3-deployment-fail-warn-gcm.json"))
    assert r["layout"] == "dcgm3" and r["ok"] is True and r["error"] is None
    assert r["overall"] == "fail" and len(r["tests"]) == 9
    tests = {t["key"]: t for t in r["tests"]}
    assert (
        tests["persistence_mode"]["result"] == "fail"
        and tests["persistence_mode"]["category"] == "deployment"
    )
    assert tests["environment_variables"]["result"] == "warn"
    assert tests["inforom"] == {
        "name": "Inforom",
        "key": "inforom",
        "category": "deployment",
        "result": "pass",
        "gpus": {},
        "all_gpus": True,
        "messages": [],
    }


def test_diag_json_nvvs_per_gpu_results_dcgm_teststrings(fixture_text):
    r = parse(
        "dcgmi-diag-json", fixture_text("dcgmi/diag-j-nvvs-per-gpu-4gpu-skip-pass-dcgm-teststrings.json")
    )
    assert r["layout"] == "dcgm3" and r["dcgm_version"] == "1.7" and r["overall"] == "fail"
    tests = {t["key"]: t for t in r["tests"]}
    sm = tests["sm_stress"]
    assert sm["category"] == "stress" and sm["result"] == "fail"
    assert sm["gpus"] == {"0": "fail", "1": "pass", "2": "fail", "3": "fail"}
    warn = next(m for m in sm["messages"] if m["level"] == "warning")
    assert (
        warn["gpu"] == "0"
        and warn["error_id"] == 50
        and warn["text"].startswith("Max stress level of 2128.7")
    )
    assert tests["diagnostic"]["result"] == "skip" and "diagnostic" in r["skipped"]
    assert tests["memory"]["gpus"]["0"] == "skip"  # a GPU the test skipped is never reported as passed
    assert tests["pcie"]["messages"][0] == {
        "level": "info",
        "text": "GPU 0 GPU to Host bandwidth:\t\t13.08 GB/s",
        "gpu": "0",
        "error_id": None,
    }


def test_diag_json_dcgm4_entities_and_summary(fixture_text):
    r = parse("dcgmi-diag-json", fixture_text("dcgmi/diag-j-dcgm4-memory-fail-pcie-skip-constructed.json"))
    assert r["layout"] == "dcgm4" and r["overall"] == "fail"
    assert (r["dcgm_version"], r["driver_version"], r["gpu_device_ids"]) == (
        "4.4.1",
        "570.172.08",
        ["2330", "2330"],
    )
    tests = {t["key"]: t for t in r["tests"]}
    mem = tests["memory"]
    assert mem["result"] == "fail" and mem["gpus"] == {"0": "pass", "1": "fail"}
    # the summary repeats the entity's warning: reported once
    assert [m["text"][:23] for m in mem["messages"] if m["level"] == "warning"] == ["GPU 1 had uncorrectable"]
    assert tests["pcie"]["gpus"]["1"] == "skip" and tests["software"]["gpus"] == {"0": "pass", "1": "pass"}


def test_diag_json_runtime_error_unknown_status_and_refusals():
    err = parse("dcgmi-diag-json", '{"DCGM Diagnostic": {"version": "4.4.1", "runtime_error": '
                                   '"Error: unable to load plugins"}}')
    assert (
        err["ok"] is False and err["overall"] == "error" and err["error"] == "Error: unable to load plugins"
    )
    odd = parse("dcgmi-diag-json", '{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", '
                                   '"tests": [{"name": "GPU Memory", "results": [{"gpu_id": "0", "status": '
                                   '"Weird"}]}]}]}}')
    assert odd["tests"][0]["gpus"] == {"0": "error"} and odd["tests"][0]["result"] == "fail"
    with pytest.raises(ParseError, match="DCGM Diagnostic"):
        parse("dcgmi-diag-json", '{"nvbandwidth": {}}')
    with pytest.raises(ParseError, match="truncated"):
        parse("dcgmi-diag-json", '{"DCGM Diagnostic": {"test_categories": [')
    with pytest.raises(ParseError, match="no '\\{'"):
        parse("dcgmi-diag-json", "Successfully ran diagnostic for group.\n")


# --- issue 21.11: dcgmi nvlink -e -g N and dcgmi nvlink --link-status


def test_dcgmi_nvlink_link_status_all_up(fixture_text):
    r = parse("dcgmi-nvlink", fixture_text("dcgmi/nvlink-s-link-status-8xh100-all-up-dcgm-exporter-576.txt"))
    assert r["mode"] == "link_status" and r["error_counts"] is None
    assert [g["gpu_id"] for g in r["gpus"]] == list(range(8))
    assert len(r["gpus"][7]["links"]) == 18 and {lk["state"] for g in r["gpus"] for lk in g["links"]} == {
        "up"
    }
    assert r["down_links"] == [] and r["nvswitches"] == []


def test_dcgmi_nvlink_link_status_all_down(fixture_text):
    r = parse("dcgmi-nvlink", fixture_text("dcgmi/nvlink-link-status-2gpu-all-down-dcgm-198.txt"))
    assert (
        len(r["down_links"]) == 36
        and r["down_links"][0] == "gpu0:link0"
        and r["down_links"][-1] == "gpu1:link17"
    )
    assert r["gpus"][1]["links"][5] == {"link": 5, "state": "down"}


def test_dcgmi_nvlink_error_counts_json_gcm(fixture_text):
    r = parse("dcgmi-nvlink", fixture_text("dcgmi/nvlink-e-g0-j-crc-data-error-gcm.json"))
    ec = r["error_counts"]
    assert r["mode"] == "error_counts" and ec["gpu_id"] == 0 and len(ec["links"]) == 2
    assert ec["links"][0]["counters"] == {"crc_data_error": 12, "crc_flit_error": 0, "recovery_error": 0,
                                         "replay_error": 0}
    assert ec["totals"] == {"crc_data_error": 12, "crc_flit_error": 0, "recovery_error": 0, "replay_error": 0}


def test_dcgmi_nvlink_error_counts_tree(fixture_text):
    text = fixture_text("dcgmi/nvlink-e-g0-error-counts-tree-constructed.txt")
    ec = parse("dcgmi-nvlink", text)["error_counts"]
    assert ec["gpu_id"] == 0 and [lk["link"] for lk in ec["links"]] == [0, 1, 2, 3]
    assert ec["links"][2]["counters"] == {"crc_flit_error": 3, "crc_data_error": 0, "replay_error": 41,
                                         "recovery_error": 0}
    assert ec["totals"]["replay_error"] == 41 and ec["detail"] == {}
    unreadable = parse("dcgmi-nvlink", text.replace("| -> Replay Error             | 41  ",
                                                    "| -> Replay Error             | N/A "))
    assert unreadable["error_counts"]["links"][2]["counters"]["replay_error"] is None
    assert unreadable["error_counts"]["totals"]["replay_error"] is None
    with pytest.raises(ParseError, match="NvLink Link Status"):
        parse("dcgmi-nvlink", fixture_text("dcgmi/discovery-l-4xh100-name-null-dcgm3.1.7.txt"))
