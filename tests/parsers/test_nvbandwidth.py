"""Tests for clustercert.parsers.nvbandwidth (text and -j JSON)."""

from __future__ import annotations

import json

import pytest

from clustercert.parsers import ParseError, parse

# Hand-written in the layout of nvbandwidth v0.x output (header, N/A diagonal, SUM lines, a waived test).
SYNTHETIC = """nvbandwidth Version: v0.7
Built from Git version: v0.7

CUDA Runtime Version: 12040
CUDA Driver Version: 12040
Driver Version: 550.54.15

Device 0: NVIDIA H100 80GB HBM3 (00000000:19:00)
Device 1: NVIDIA H100 80GB HBM3 (00000000:3b:00)

Running device_to_device_memcpy_read_ce.
memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)
           0         1
 0       N/A    389.10
 1    388.70       N/A

SUM device_to_device_memcpy_read_ce 777.80

Running host_device_latency_sm.
Waived: Test requires at least 2 NUMA nodes

Running device_to_device_bidirectional_memcpy_read_ce.
memcpy CE GPU(row) <-> GPU(column) Read1 bandwidth (GB/s)
           0         1
 0       N/A    370.00
 1    371.00       N/A

SUM device_to_device_bidirectional_memcpy_read_ce_read1 741.00

memcpy CE GPU(row) <-> GPU(column) Total bandwidth (GB/s)
           0         1
 0       N/A    740.00
 1    742.00       N/A

SUM device_to_device_bidirectional_memcpy_read_ce_total 1482.00

Running all_to_host_memcpy_ce.
"""


def test_readme_h2d_excerpt(fixture_text):
    r = parse("nvbandwidth", fixture_text("nvbandwidth/h2d-memcpy-ce-8gpu-readme-excerpt.txt"))
    (tc,) = r["testcases"]
    assert tc["name"] == "host_to_device_memcpy_ce" and tc["status"] == "passed"
    (m,) = tc["matrices"]
    assert m["description"] == "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)"
    assert m["columns"] == list(range(8))
    assert m["rows"]["0"][4] == pytest.approx(26.19)
    assert tc["min_gbyte_per_s"] == pytest.approx(25.94) and tc["max_gbyte_per_s"] == pytest.approx(26.19)
    assert tc["sum_gbyte_per_s"] == pytest.approx(208.05)  # no SUM line in the excerpt: computed


def test_readme_bidir_excerpt(fixture_text):
    r = parse("nvbandwidth", fixture_text("nvbandwidth/h2d-bidir-memcpy-ce-8gpu-readme-excerpt.txt"))
    tc = r["testcases"][0]
    assert tc["name"] == "host_to_device_bidirectional_memcpy_ce"
    assert tc["matrices"][0]["rows"]["0"][3] == pytest.approx(19.59)


def test_synthetic_full_output():
    r = parse("nvbandwidth", SYNTHETIC)
    assert r["version"] == "v0.7" and r["driver_version"] == "550.54.15"
    by = {t["name"]: t for t in r["testcases"]}
    d2d = by["device_to_device_memcpy_read_ce"]
    assert d2d["status"] == "passed" and d2d["sum_gbyte_per_s"] == pytest.approx(777.80)
    assert d2d["matrices"][0]["rows"]["0"] == [None, pytest.approx(389.10)]
    waived = by["host_device_latency_sm"]
    assert waived["status"] == "waived" and waived["message"] == "Test requires at least 2 NUMA nodes"
    bidir = by["device_to_device_bidirectional_memcpy_read_ce"]
    assert [m["label"] for m in bidir["matrices"]] == ["read1", "total"]
    assert bidir["matrices"][0]["sum_gbyte_per_s"] == pytest.approx(741.0)
    assert bidir["sum_gbyte_per_s"] == pytest.approx(1482.0)  # from the Total matrix
    truncated = by["all_to_host_memcpy_ce"]
    assert truncated["status"] == "error" and "truncated" in truncated["message"]


def test_text_errors():
    with pytest.raises(ParseError, match="empty"):
        parse("nvbandwidth", "")
    with pytest.raises(ParseError, match="Running"):
        parse("nvbandwidth", "nvbandwidth Version: v0.7\nCUDA error: no CUDA-capable device is detected\n")
    with pytest.raises(ParseError, match="row 1 has 1 values"):
        parse(
            "nvbandwidth",
            "Running x_ce.\nmemcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)\n   0   1\n 0  1.0  2.0\n"
            " 1  3.0\n",
        )


def _json_doc():
    # layout of nvbandwidth -j (keys per json_output.cpp), values made up for the test
    return {
        "nvbandwidth": {
            "CUDA Runtime Version": 12040,
            "Driver Version": "550.54.15",
            "git_version": "v0.7",
            "version": "v0.7",
            "testcases": [
                {
                    "name": "host_to_device_memcpy_ce",
                    "status": "Passed",
                    "bandwidth_description": "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
                    "bandwidth_matrix": [["55.59", "55.61"]],
                    "sum": 111.2,
                },
                {"name": "device_to_device_memcpy_read_ce", "status": "Waived"},
                {"name": "host_device_latency_sm", "status": "Error", "error": "CUDA_ERROR_OUT_OF_MEMORY"},
            ],
        }
    }


def test_json():
    r = parse("nvbandwidth-json", json.dumps(_json_doc(), indent=2))
    assert r["driver_version"] == "550.54.15" and r["cuda_runtime_version"] == "12040"
    h2d, waived, err = r["testcases"]
    assert h2d["status"] == "passed" and h2d["sum_gbyte_per_s"] == pytest.approx(111.2)
    assert h2d["matrices"][0]["rows"]["0"] == [pytest.approx(55.59), pytest.approx(55.61)]
    assert h2d["min_gbyte_per_s"] == pytest.approx(55.59)
    assert waived["status"] == "waived" and waived["matrices"] == []
    assert err["status"] == "error" and err["message"] == "CUDA_ERROR_OUT_OF_MEMORY"


def test_json_errors():
    text = json.dumps(_json_doc())
    with pytest.raises(ParseError, match="truncated"):
        parse("nvbandwidth-json", text[:-20])
    with pytest.raises(ParseError, match="nvbandwidth"):
        parse("nvbandwidth-json", '{"other": 1}')
    with pytest.raises(ParseError, match="empty"):
        parse("nvbandwidth-json", "")
    doc = {"nvbandwidth": {"error": "cuInit failed", "testcases": []}}
    assert parse("nvbandwidth-json", json.dumps(doc))["error"] == "cuInit failed"


# --- issue 21.4: waived testcases print no Running line


def test_full_run_with_bare_waived_lines_superbench(fixture_text):
    r = parse("nvbandwidth", fixture_text("nvbandwidth/nvbandwidth-v0.6-gh200-waived-superbench.txt"))
    assert r["version"] == "v0.6" and r["driver_version"] == "550.54.15"
    tcs = {tc["name"]: tc for tc in r["testcases"]}
    assert len(r["testcases"]) == 32 and len(tcs) == 32
    waived = [tc for tc in r["testcases"] if tc["status"] == "waived"]
    assert len(waived) == 17 and all(tc["name_inferred"] and tc["matrices"] == [] for tc in waived)
    for name in ("device_to_device_memcpy_read_ce", "one_to_all_read_sm", "device_to_device_latency_sm"):
        assert tcs[name]["status"] == "waived" and tcs[name]["sum_gbyte_per_s"] is None
    # the testcase printed just before the Waived lines keeps its own status and values
    d2h_bidir = tcs["device_to_host_bidirectional_memcpy_ce"]
    assert d2h_bidir["status"] == "passed" and d2h_bidir["name_inferred"] is False
    assert d2h_bidir["sum_gbyte_per_s"] == 187.26 and d2h_bidir["matrices"][0]["rows"]["0"] == [187.26]
    assert tcs["host_to_device_memcpy_ce"]["sum_gbyte_per_s"] == 1985.6
    assert tcs["host_device_latency_sm"]["matrices"][0]["unit"] == "nsec"


def test_v02_waiving_line_names_its_testcase_issue13(fixture_text):
    r = parse(
        "nvbandwidth", fixture_text("nvbandwidth/nvbandwidth-v0.2-2xrtx2080ti-waiving-d2d-write-issue13.txt")
    )
    assert r["version"] == "v0.2" and r["driver_version"] == "525.125.06"
    (tc,) = r["testcases"]
    assert tc == {
        "name": "device_to_device_memcpy_write_ce",
        "status": "waived",
        "message": None,
        "matrices": [],
        "name_inferred": False,
        "sum_gbyte_per_s": None,
        "min_gbyte_per_s": None,
        "max_gbyte_per_s": None,
    }


def test_waived_in_a_subset_run_stays_unnamed(fixture_text):
    # `nvbandwidth -t h2d -t d2d_read` on one GPU: the d2d testcase is a bare "Waived:" line
    text = fixture_text("nvbandwidth/h2d-memcpy-ce-8gpu-readme-excerpt.txt") + "\nWaived: \n"
    r = parse("nvbandwidth", text)
    assert [(tc["name"], tc["status"]) for tc in r["testcases"]] == [
        ("host_to_device_memcpy_ce", "passed"), (None, "waived")]
    assert r["testcases"][1]["name_inferred"] is False and r["testcases"][1]["matrices"] == []
