"""Tests for clustercert.parsers.nccl_tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercert.parsers import ParseError, parse

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def fx(name: str) -> str:
    return (FIXTURES / "nccl-tests" / name).read_bytes().decode()  # keep CRLF as captured


def row_at(rec: dict, size: int) -> dict:
    return next(r for r in rec["rows"] if r["size_bytes"] == size)


def test_wrong_nonzero_and_out_of_bounds_failed():
    rec = parse("nccl-tests", fx("all_reduce_perf-2node-GH200-slingshot-wrong-96-32-FAILED.txt"))
    assert rec["ok"] is False and rec["complete"] is True
    assert (rec["test"], rec["nccl_tests_version"]) == ("all_reduce_perf", "2.17.8")
    assert rec["header"]["nGpus"] == 1 and rec["header"]["maxBytes"] == 134217728
    assert rec["header"]["warmup_iters"] == 1 and rec["header"]["iters"] == 20
    assert [(d["rank"], d["host"], d["bus_id"]) for d in rec["devices"]] == [
        (0, "gpu-1-1", "0009:01:00"), (1, "gpu-1-7", "0009:01:00")]
    assert rec["devices"][0]["name"] == "NVIDIA GH200 120GB"
    bad = row_at(rec, 1048576)
    assert bad["out_of_place"]["wrong"] == 96 and bad["in_place"]["wrong"] == 32
    assert (rec["out_of_bounds_values"], rec["out_of_bounds_ok"]) == (4, False)
    assert "Out of bounds values : 4 FAILED" in rec["errors"]
    assert "1048576 bytes out-of-place: #wrong 96" in rec["errors"]
    assert rec["avg_busbw_gbyte_per_s"] == 4.79995
    assert (rec["max_size_bytes"], rec["busbw_at_max_size_gbyte_per_s"]) == (134217728, 22.87)
    assert len(rec["rows"]) == 25


def test_cuda_busy_failure_has_no_rows():
    rec = parse("nccl-tests", fx("all_reduce_perf-2node-GH200-exclusive-process-cuda-busy-failure.txt"))
    assert rec["ok"] is False and rec["rows"] == []
    assert len(rec["devices"]) == 8
    assert rec["errors"][0] == (
        "gpu-1-1: Test CUDA failure common.cu:1304 'CUDA-capable device(s) is/are busy or unavailable'")
    assert rec["busbw_at_max_size_gbyte_per_s"] is None


def test_wrong_not_available_when_check_disabled():
    rec = parse("nccl-tests", fx("all_reduce_perf-wrong-NA-check-disabled-aks-ndr.txt"))
    assert rec["ok"] is True and rec["table_format"] == "wrong"
    first = rec["rows"][0]
    assert first == {
        "size_bytes": 8, "count": 2, "type": "float", "redop": "sum", "root": -1,
        "out_of_place": {"time_usec": 99.09, "algbw_gbyte_per_s": 0.0, "busbw_gbyte_per_s": 0.0,
                         "wrong": None, "error": None},
        "in_place": {"time_usec": 36.48, "algbw_gbyte_per_s": 0.0, "busbw_gbyte_per_s": 0.0,
                     "wrong": None, "error": None},
    }
    assert (rec["max_size_bytes"], rec["busbw_at_max_size_gbyte_per_s"]) == (8589934592, 187.22)
    assert row_at(rec, 8589934592)["in_place"]["busbw_gbyte_per_s"] == 187.05
    assert rec["avg_busbw_gbyte_per_s"] == 56.3994


def test_ipoib_slow_run_parses_low_busbw():
    rec = parse("nccl-tests", fx("all_reduce_perf-wrong-NA-ipoib-tcp-slow.txt"))
    assert rec["ok"] is True  # slow is for the validator to judge, not the parser
    assert rec["busbw_at_max_size_gbyte_per_s"] == 3.15
    assert rec["avg_busbw_gbyte_per_s"] == 1.38997


def test_old_format_error_column_crlf():
    rec = parse("nccl-tests", fx("all_reduce_perf-old-format-2x-dgx-a100-k8s.txt"))
    assert "\r" in fx("all_reduce_perf-old-format-2x-dgx-a100-k8s.txt")
    assert rec["table_format"] == "error" and rec["ok"] is True
    r = row_at(rec, 4294967296)
    assert r["redop"] == "sum" and r["root"] is None
    assert r["out_of_place"] == {
        "time_usec": 42715.0,
        "algbw_gbyte_per_s": 100.55,
        "busbw_gbyte_per_s": 188.53,
        "wrong": None,
        "error": 5e-07,
    }
    assert rec["busbw_at_max_size_gbyte_per_s"] == 188.53
    assert rec["avg_busbw_gbyte_per_s"] == 53.7098


def test_old_format_four_nodes():
    rec = parse("nccl-tests", fx("all_reduce_perf-old-format-4x-dgx-a100-ib.txt"))
    assert len(rec["rows"]) == 13
    assert row_at(rec, 1048576)["out_of_place"]["busbw_gbyte_per_s"] == 15.02
    assert rec["busbw_at_max_size_gbyte_per_s"] == 191.05


# Written for this project: launcher prefixes, NCCL_DEBUG lines interleaved, a WARN, elided rows.
PREFIXED = """[1,0]<stdout>:# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
[1,0]<stdout>:#
[1,0]<stdout>:# Using devices
[1,0]<stdout>:#  Rank  0 Group  0 Pid  4242 on node-a device  0 [0x18] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank  1 Group  0 Pid  4242 on node-a device  1 [0x2a] NVIDIA H100 80GB HBM3
node-a:4242:4300 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
node-a:4242:4300 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB ; OOB ens3:10.1.0.5<0>
node-a:4242:4301 [1] NCCL WARN NET/IB : Got async event : port error
[1,0]<stdout>:#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
[1,0]<stdout>:#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
[1,0]<stdout>:           8             2     float     sum      -1    30.01    0.00    0.00      0    29.80    0.00    0.00      0
[1,0]<stdout>:...
[1,0]<stdout>:  8589934592    2147483648     float     sum      -1    43000  199.77  349.60      0    42990  199.81  349.67      0
[1,0]<stdout>:# Out of bounds values : 0 OK
[1,0]<stdout>:# Avg bus bandwidth    : 120.5
"""  # noqa: E501


def test_prefixed_output_with_debug_lines_and_warn():
    rec = parse("nccl-tests", PREFIXED)
    assert rec["ok"] is True and rec["complete"] is True and rec["elided"] is True
    assert rec["nccl_version"] == "2.21.5+cuda12.4"
    assert rec["warnings"] == ["node-a:4242:4301 [1] NCCL WARN NET/IB : Got async event : port error"]
    assert rec["header"]["nGpus"] == 8
    assert [d["bus_id"] for d in rec["devices"]] == ["0x18", "0x2a"]
    assert len(rec["rows"]) == 2
    assert rec["busbw_at_max_size_gbyte_per_s"] == 349.6
    srun = "\n".join(
        "0: " + ln.split(":", 1)[1] if ln.startswith("[1,0]") else ln for ln in PREFIXED.splitlines()
    )
    assert parse("nccl-tests", srun)["busbw_at_max_size_gbyte_per_s"] == 349.6


def test_nccl_failure_line():
    text = ("# nThread 1 nGpus 1 minBytes 8 maxBytes 128 step: 2(factor) warmup iters: 5 iters: 20 agg "
            "iters: 1 validation: 1 graph: 0\n"
            "node-b: Test NCCL failure common.cu:958 'remote process exited or there was a network error / "
            "'\n .. node-b pid 7: Test failure common.cu:842\n")
    rec = parse("nccl-tests", text)
    assert rec["ok"] is False
    assert rec["errors"][0].startswith("node-b: Test NCCL failure common.cu:958")
    assert rec["header"]["maxBytes"] == 128


def test_parse_errors():
    with pytest.raises(ParseError, match="empty"):
        parse("nccl-tests", "")
    with pytest.raises(ParseError, match="nThread"):
        parse("nccl-tests", (FIXTURES / "ibstat" / "ibstat-9x-mt4126-a100-hdr-all-active.txt").read_text())
    full = fx("all_reduce_perf-2node-GH200-slingshot-wrong-96-32-FAILED.txt")
    truncated = full[: full.index("           8             2")]
    with pytest.raises(ParseError, match="truncated"):
        parse("nccl-tests", truncated)


# --- issue 21.1: older releases print N/A in the float error column when the check is off (-c 0)


def test_old_format_error_na_with_redop_deepops():
    rec = parse("nccl-tests", fx("all_reduce_perf-old-error-NA-dgx2-ib-deepops.txt"))
    assert rec["ok"] is True and rec["complete"] is True and rec["table_format"] == "error"
    assert rec["data_checked"] is False
    assert len(rec["rows"]) == 31
    top = row_at(rec, 8589934592)
    assert top["redop"] == "sum" and top["root"] is None
    assert top["out_of_place"] == {
        "time_usec": 210583.0,
        "algbw_gbyte_per_s": 40.79,
        "busbw_gbyte_per_s": 81.53,
        "wrong": None,
        "error": None,
    }
    assert top["in_place"]["busbw_gbyte_per_s"] == 81.57 and top["in_place"]["error"] is None
    assert (rec["max_size_bytes"], rec["busbw_at_max_size_gbyte_per_s"]) == (8589934592, 81.53)
    assert rec["avg_busbw_gbyte_per_s"] == 16.2513 and rec["out_of_bounds_ok"] is True


def test_old_format_error_na_without_redop_and_info_line_superbench():
    rec = parse("nccl-tests", fx("all_gather_perf-old-error-NA-no-redop-8xa100-superbench.txt"))
    assert rec["ok"] is True and rec["table_format"] == "error" and rec["data_checked"] is False
    assert rec["header"]["nGpus"] == 8 and rec["header"]["validation"] == 0
    assert len(rec["devices"]) == 8 and rec["devices"][0]["name"] == "A100-SXM4-40GB"
    assert len(rec["rows"]) == 34 and rec["rows"][0]["redop"] is None
    r = row_at(rec, 1048576)
    assert r["out_of_place"]["busbw_gbyte_per_s"] == 12.58 and r["out_of_place"]["error"] is None
    assert (rec["max_size_bytes"], rec["busbw_at_max_size_gbyte_per_s"]) == (8589934592, 223.39)
    assert rec["avg_busbw_gbyte_per_s"] == 58.2651


def test_old_format_error_na_with_redop_superbench():
    rec = parse("nccl-tests", fx("all_reduce_perf-old-error-NA-8xa100-superbench.txt"))
    assert rec["ok"] is True and rec["complete"] is True
    assert row_at(rec, 4294967296)["in_place"]["busbw_gbyte_per_s"] == 234.5
    assert rec["busbw_at_max_size_gbyte_per_s"] == 235.26 and rec["avg_busbw_gbyte_per_s"] == 68.4048


def test_old_format_numeric_error_is_still_checked():
    rec = parse("nccl-tests", fx("all_reduce_perf-old-format-2x-dgx-a100-k8s.txt"))
    assert rec["data_checked"] is True
    assert (
        parse("nccl-tests", fx("all_reduce_perf-wrong-NA-check-disabled-aks-ndr.txt"))["data_checked"]
        is False
    )
    assert (
        parse("nccl-tests", fx("all_reduce_perf-2node-GH200-slingshot-wrong-96-32-FAILED.txt"))[
            "data_checked"
        ]
        is True
    )


def test_old_format_garbage_error_cell_is_not_a_row():
    text = fx("all_reduce_perf-old-error-NA-dgx2-ib-deepops.txt").replace(
        "210583   40.79   81.53    N/A", "210583   40.79   81.53    ???")
    rec = parse("nccl-tests", text)
    assert 8589934592 not in [r["size_bytes"] for r in rec["rows"]]
    assert rec["max_size_bytes"] == 4294967296


# alltoall_perf: no real alltoall output is copyable (none in the shared fixtures), so these samples
# are written from the format: nccl-tests' alltoall rows print no redop (the root, where printed, is -1),
# under the current table header (which may still name a redop column) or without any header (excerpt).
_A2A_ROWS = """\
     1048576         32768     float      -1    45.10   23.25   20.34      0    44.90   23.35   20.43      0
     2097152         65536     float      -1    70.20   29.87   26.14      0    69.80   30.05   26.29      0
     4194304        131072     float      -1    120.5   34.81   30.46      0    119.9   34.98   30.61      3
"""
_A2A_HEAD = """\
# Collective test starting: alltoall_perf
# nThread 1 nGpus 8 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 \
validation: 1 graph: 0
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""  # noqa: E501
_A2A_TAIL = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 25.7117\n#\n"


@pytest.mark.parametrize("text", [_A2A_HEAD + _A2A_ROWS + _A2A_TAIL,
                                  _A2A_HEAD.replace("redop    root", "        root") + _A2A_ROWS + _A2A_TAIL,
                                  "".join("0: " + ln + "\n" for ln in _A2A_ROWS.splitlines())])
def test_alltoall_rows_without_redop_are_read_not_refused_as_truncated(text):
    rec = parse("nccl-tests", text)
    assert len(rec["rows"]) == 3 and rec["table_format"] == "wrong"
    top = row_at(rec, 4194304)
    assert (top["redop"], top["root"], top["type"]) == (None, -1, "float")
    assert top["out_of_place"]["busbw_gbyte_per_s"] == 30.46 and top["out_of_place"]["wrong"] == 0
    assert top["in_place"]["wrong"] == 3 and rec["ok"] is False  # the in-place #wrong is still checked
    assert rec["busbw_at_max_size_gbyte_per_s"] == 30.46
