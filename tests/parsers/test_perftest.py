"""Tests for clustercert.parsers.perftest."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercert.parsers import ParseError, parse

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def fx(name: str) -> str:
    return (FIXTURES / "perftest" / name).read_text()


def test_write_bw_sweep_roce_gbits():
    rec = parse("perftest", fx("ib_write_bw-a-report_gbits-use_cuda-roce-client.txt"))
    assert rec["ok"] is True and rec["error"] is None
    assert (rec["tool"], rec["test"], rec["verb"], rec["role"]) == ("ib_write_bw", "bw", "write", "client")
    assert (rec["device"], rec["link_type"], rec["gid_index"], rec["mtu_bytes"]) == (
        "mlx5_0",
        "Ethernet",
        5,
        1024,
    )
    assert rec["rdma_cm"] is False and rec["bidirectional"] is False
    assert rec["report_unit"] == "Gb/sec"
    assert len(rec["rows"]) == 23
    assert rec["rows"][0] == {
        "bytes": 2, "iterations": 5000, "bw_peak_gbit_per_s": 0.11, "bw_avg_gbit_per_s": 0.11,
        "bw_peak_reported": 0.11, "bw_avg_reported": 0.11, "msg_rate_mpps": 6.897101,
    }
    row_64k = next(r for r in rec["rows"] if r["bytes"] == 65536)
    assert row_64k["bw_avg_gbit_per_s"] == 92.38
    assert (rec["bytes"], rec["bw_avg_gbit_per_s"], rec["bw_peak_gbit_per_s"]) == (8388608, 92.39, 92.39)
    assert rec["settings"]["CQ Moderation"] == "100"


def test_write_bw_rdma_cm_with_cpu_warning():
    rec = parse("perftest", fx("ib_write_bw-R-x3-roce-cx5-client-cpufreq-warning.txt"))
    assert rec["ok"] is True
    assert rec["rdma_cm"] is True and rec["gid_index"] == 3 and rec["mtu_bytes"] == 4096
    assert rec["settings"]["Data ex. method"] == "rdma_cm"
    assert rec["warnings"] == [
        "Conflicting CPU frequency values detected: 1200.535000 != 1251.336000. CPU Frequency is not max."
    ]
    assert rec["rows"] == [{"bytes": 65536, "iterations": 5000, "bw_peak_gbit_per_s": 92.42,
                            "bw_avg_gbit_per_s": 92.4, "bw_peak_reported": 92.42, "bw_avg_reported": 92.4,
                            "msg_rate_mpps": 0.17623}]


def test_read_bw_table_excerpt_without_banner():
    rec = parse("perftest", fx("ib_read_bw-a-report_gbits-client-result-excerpt.txt"))
    assert rec["ok"] is True and rec["tool"] is None and rec["test"] == "bw" and rec["role"] is None
    assert rec["rows"][0]["bw_avg_gbit_per_s"] == 0.045291
    assert rec["bw_avg_gbit_per_s"] == 197.48 and rec["bytes"] == 8388608


def test_read_lat_percentiles():
    rec = parse("perftest", fx("ib_read_lat-client-result-percentiles-excerpt.txt"))
    assert rec["test"] == "lat" and rec["report_unit"] == "usec"
    (row,) = rec["rows"]
    assert row == {"bytes": 2, "iterations": 1000, "t_min_usec": 5.35, "t_max_usec": 11.78,
                   "t_typical_usec": 5.49, "t_avg_usec": 5.5, "t_stdev_usec": 0.18, "t_p99_usec": 5.74,
                   "t_p99_9_usec": 11.78, "tps_average": None}
    assert rec["t_typical_usec"] == 5.49


# Written for this project: MiB/sec report (no --report_gbits), tabs, bidirectional title, server banner.
SEND_BW_MIB_BIDIR_SERVER = """
************************************
* Waiting for client to connect... *
************************************
---------------------------------------------------------------------------------------
                    Send Bidirectional BW Test
 Dual-port       : OFF\t\tDevice         : mlx5_3
 Number of qps   : 2\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 RX depth        : 512
 CQ Moderation   : 1
 Mtu             : 4096[B]
 Link type       : IB
 Max inline data : 0[B]
 rdma_cm QPs\t : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
 local address: LID 0x11 QPN 0x0101 PSN 0x123456
 remote address: LID 0x12 QPN 0x0102 PSN 0x654321
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]
 4096       1000             20000.00            10000.00\t\t   2.560000
 65536      1000             46000.00            45000.00\t\t   0.720000
---------------------------------------------------------------------------------------
"""


def test_send_bw_mib_units_bidirectional_server():
    rec = parse("perftest", SEND_BW_MIB_BIDIR_SERVER)
    assert (rec["tool"], rec["role"], rec["bidirectional"], rec["num_qps"]) == (
        "ib_send_bw",
        "server",
        True,
        2,
    )
    assert rec["device"] == "mlx5_3" and rec["report_unit"] == "MiB/sec"
    big = rec["rows"][1]
    # 45000 MiB/s = 45000 * 2^20 * 8 bit/s = 377.487360 Gbit/s
    assert big["bw_avg_gbit_per_s"] == pytest.approx(377.48736)
    assert big["bw_avg_reported"] == 45000.0
    assert rec["bw_avg_gbit_per_s"] == pytest.approx(377.48736)
    assert rec["rows"][0]["bw_peak_gbit_per_s"] == pytest.approx(167.77216)


def test_completion_error_is_not_ok():
    rec = parse("perftest", fx("ib_write_bw-bidir-use_cuda-completion-error-status4-syndrom-0x51.txt"))
    assert rec["ok"] is False
    assert rec["error"] == "Completion with error at client"
    assert "Failed status 4: wr_id 0 syndrom 0x51" in rec["errors"]
    assert rec["rows"] == []


def test_rdma_cm_errors_client_and_server():
    client = parse("perftest", fx("ib_write_bw-rdma_cm-client-error-failed-modify-qp-rts.txt"))
    assert client["ok"] is False and client["error"] == "Failed to modify QP to RTS"
    server = parse("perftest", fx("ib_write_bw-rdma_cm-server-error-couldnt-read-remote-address.txt"))
    assert server["ok"] is False
    assert server["errors"] == [
        "ethernet_read_keys: Couldn't read remote address",
        "Unable to read to socket/rdma_cm",
        "Failed to exchange data between server and clients",
    ]


def test_couldnt_connect_client():
    text = ("---------------------------------------------------------------------------------------\n"
            "Couldn't connect to 10.0.0.7:18515\n"
            "Unable to open file descriptor for socket connection Unable to init the socket connection\n")
    rec = parse("perftest", text)
    assert rec["ok"] is False and rec["error"] == "Couldn't connect to 10.0.0.7:18515"


def test_server_waiting_banner_only_is_not_ok():
    rec = parse("perftest", fx("ib_write_bw-server-waiting-banner.txt"))
    assert rec["ok"] is False and rec["waiting_for_client"] is True and rec["role"] == "server"
    assert rec["rows"] == []


def test_rc_pingpong():
    rec = parse("perftest", fx("ibv_rc_pingpong-client-excerpt.txt"))
    assert (rec["ok"], rec["tool"], rec["test"], rec["device"]) == (
        True,
        "ibv_rc_pingpong",
        "pingpong",
        "mlx5_0",
    )
    assert rec["rows"] == [{"bytes": 8192000, "seconds": 0.01, "bw_gbit_per_s": 7.64357,
                            "iterations": 1000, "usec_per_iter": 8.57}]


def test_parse_errors():
    with pytest.raises(ParseError, match="empty"):
        parse("perftest", "\n\n")
    header_only = fx("ib_write_bw-a-report_gbits-use_cuda-roce-client.txt")
    header_only = header_only[: header_only.index(" 2          5000")]
    with pytest.raises(ParseError, match="truncated"):
        parse("perftest", header_only)
    with pytest.raises(ParseError, match="perftest"):
        parse("perftest", (FIXTURES / "ibstat" / "ibstat-9x-mt4126-a100-hdr-all-active.txt").read_text())
    with pytest.raises(ParseError, match="perftest"):
        # another tool's failure text is not accepted as a perftest error record
        parse("perftest", "gpu-1-1: Test CUDA failure common.cu:1304 'CUDA-capable device(s) is/are busy'\n")
    with pytest.raises(ParseError, match="fields"):
        parse("perftest", " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
                          " 65536      5000             92.42\n")


# --- issue 21.9: perftest --out_json files

from clustercert.parsers.perftest import apply_report_unit  # noqa: E402


def test_out_json_pre_2024_unquoted_latency_issue216(fixture_text):
    r = parse("perftest-json", fixture_text("perftest/ib_write_lat-out_json-old-unquoted-rxe-issue216.json"))
    assert r["standard_json"] is False and r["ok"] is True
    assert (r["tool"], r["test"], r["verb"], r["title"]) == (
        "ib_write_lat",
        "lat",
        "write",
        "RDMA_Write_Latency_Test",
    )
    assert (r["device"], r["link_type"], r["mtu_bytes"], r["gid_index"], r["rdma_cm"]) == (
        "rxe0",
        "Ethernet",
        1024,
        1,
        False,
    )
    (row,) = r["rows"]
    assert row == {
        "bytes": 128,
        "iterations": 5000,
        "t_min_usec": 2.37,
        "t_max_usec": 5.39,
        "t_typical_usec": 2.42,
        "t_avg_usec": 2.42,
        "t_stdev_usec": 0.05,
        "t_p99_usec": 2.47,
        "t_p99_9_usec": 4.03,
        "tps_average": None,
    }
    assert (r["bytes"], r["t_typical_usec"], r["t_avg_usec"]) == (128, 2.42, 2.42)
    assert r["settings"]["TX_depth"] == 1


def test_out_json_bandwidth_unit_is_not_guessed(fixture_text):
    r = parse(
        "perftest-json", fixture_text("perftest/ib_write_bw-out_json-report_gbits-cx7-constructed.json")
    )
    assert r["standard_json"] is True and r["ok"] is True and r["tool"] == "ib_write_bw"
    assert (r["bw_avg_reported"], r["bw_peak_reported"]) == (392.34, 392.61)
    assert (
        r["report_unit"] is None
        and r["bw_avg_gbit_per_s"] is None
        and r["rows"][0]["bw_avg_gbit_per_s"] is None
    )
    assert r["rows"][0]["msg_rate_mpps"] == 0.748329 and r["bytes"] == 65536
    gbits = apply_report_unit(r, "Gb/sec")
    assert gbits["bw_avg_gbit_per_s"] == 392.34 and gbits["report_unit"] == "Gb/sec"
    assert apply_report_unit(r, "MiB/sec")["bw_avg_gbit_per_s"] == round(392.34 * 1048576 * 8 / 1e9, 6)
    assert r["bw_avg_gbit_per_s"] is None  # the original record is left as it was
    with pytest.raises(ValueError):
        apply_report_unit(r, "furlongs")


def test_out_json_text_value_and_refusals(fixture_text):
    text = fixture_text("perftest/ib_write_bw-out_json-report_gbits-cx7-constructed.json")
    broken = parse("perftest-json", text.replace('"BW_average": 392.34', '"BW_average": "-nan"'))
    assert (
        broken["ok"] is False
        and broken["bw_avg_reported"] is None
        and broken["error"].startswith("no readable")
    )
    with pytest.raises(ParseError, match="test_info"):
        parse("perftest-json", '{"results": {"BW_average": 1.0}}')
    old = fixture_text("perftest/ib_write_lat-out_json-old-unquoted-rxe-issue216.json")
    with pytest.raises(ParseError, match="truncated"):
        parse("perftest-json", old[: old.index("t_max")])
    with pytest.raises(ParseError, match="unreadable line"):
        parse("perftest-json", old[:300])
    with pytest.raises(ParseError, match="--out_json"):
        parse("perftest-json", fixture_text("perftest/ib_write_bw-server-waiting-banner.txt"))


def _without_banner_and_tx_depth(name: str) -> str:
    """A real client capture turned into what the server prints when its 'Waiting for client' banner is
    missing: perftest prints 'TX depth' only on the client (perftest_parameters.c, ctx_print_test_info:
    `if (machine == CLIENT || duplex)`), the rest of the header (local/remote address) on both."""
    text = (FIXTURES / "perftest" / name).read_text()
    return "".join(ln for ln in text.splitlines(keepends=True) if "TX depth" not in ln)


def test_server_result_without_waiting_banner_is_server():
    text = _without_banner_and_tx_depth("ib_write_bw-a-report_gbits-use_cuda-roce-client.txt")
    assert "Waiting for client" not in text and "remote address" in text
    rec = parse("perftest", text)
    assert rec["role"] == "server" and rec["rows"]


def test_client_capture_stays_client():
    text = (FIXTURES / "perftest" / "ib_write_bw-a-report_gbits-use_cuda-roce-client.txt").read_text()
    assert parse("perftest", text)["role"] == "client"
    # near-variant: extra spaces/tabs around the header's key/value separator
    assert (
        parse("perftest", text.replace(" TX depth        : 128", "\tTX depth   :\t128 "))["role"] == "client"
    )
