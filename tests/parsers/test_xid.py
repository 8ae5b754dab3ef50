"""Tests for clustercert.parsers.xid (Xid/SXid events from kernel logs)."""

from __future__ import annotations

import pytest

from clustercert.parsers import ParseError, parse


def test_dmesg_T_xid119(fixture_text):
    r = parse("xid", fixture_text("dmesg/dmesg-T-xid-119-gsp-rpc-timeout-h100.txt"))
    assert r["xid_counts"] == {"119": 5}
    assert r["gpus_with_xid"] == ["00000000:9B:00.0"]
    assert r["gpu_uuids"] == {"00000000:9B:00.0": "GPU-509665ad-b600-ac93-3616-d754b23d636d"}
    e = r["events"][0]
    assert e["source"] == "gpu" and e["xid"] == 119 and e["pci"] == "0000:9b:00"
    assert e["pid"] == 2024380 and e["process"] == "nvidia-smi"
    assert e["timestamp"] == "Sun Feb 23 16:24:18 2025" and e["uptime_s"] is None
    assert e["message"].startswith("Timeout after 6s of waiting for RPC response from GPU4 GSP!")
    assert r["events"][-1]["process"] == "gpud"
    assert r["fallen_off_bus"] is False


def test_iso_timestamps_unknown_pid(fixture_text):
    r = parse("xid", fixture_text("dmesg/dmesg-decode-iso-xid13-warp-exceptions-xid43.txt"))
    assert r["xid_counts"] == {"13": 16, "43": 1}
    first = r["events"][0]
    assert first["pid"] is None and first["process"] is None  # pid='<unknown>', name=<unknown>
    assert first["timestamp"] == "2025-01-21T04:41:44,283302+00:00"
    last = r["events"][-1]
    assert last["xid"] == 43 and last["pid"] == 2924364 and last["process"] == "pt_main_thread"
    assert last["message"] == "Ch 00000008"
    assert last["line"] == 17


def test_fallen_off_bus_and_nvswitch_sxid(fixture_text):
    r = parse("xid", fixture_text("dmesg/xid79-fallen-off-bus-sxid20034-nvswitch-ltssm.txt"))
    assert r["fallen_off_bus"] is True
    assert r["xid_counts"] == {"79": 1, "20034": 8}
    assert r["gpus_with_xid"] == ["00000000:91:00.0"]  # NVSwitches are not GPUs
    x79 = r["events"][0]
    assert x79["xid"] == 79 and x79["uptime_s"] == pytest.approx(6781741.548779)
    sx = r["events"][1]
    assert sx["source"] == "nvswitch" and sx["device"] == "nvidia-nvswitch1"
    assert sx["bus_id"] == "00000000:06:00.0" and sx["message"] == "Fatal, Link 48 LTSSM Fault Up"


def test_caused_by_previous_xid_syslog(fixture_text):
    r = parse("xid", fixture_text("dmesg/xid45-caused-by-xid145-149-blackwell-syslog-excerpt.txt"))
    assert len(r["events"]) == 7
    assert r["events"][0]["caused_by_xid"] == 149 and r["events"][1]["caused_by_xid"] == 145
    assert r["gpus_with_xid"] == [
        "00000000:97:00.0",
        "00000000:BA:00.0",
        "00000000:DC:00.0",
        "00000000:ED:00.0",
    ]


def test_kmsg_lines_multi_domain(fixture_text):
    r = parse("xid", fixture_text("dmesg/kmsg-xid149-145-94-lines.txt"))
    assert [e["xid"] for e in r["events"]] == [149, 149, 145, 94]
    assert r["events"][0]["bus_id"] == "00000019:01:00.0"
    assert r["events"][3]["message"] == "Contained ECC error" and r["events"][3]["pid"] == 1234


def test_other_formats(fixture_text):
    r = parse("xid", fixture_text("dmesg/xid-31-48-sm-exception.txt"))
    assert [(e["xid"], e["bus_id"]) for e in r["events"]] == [
        (31, "0000000D:00:00.0"),
        (48, "0000000D:00:00.0"),
    ]
    r = parse("xid", fixture_text("dmesg/dmesg-ctime-peermem-invalid-context-xid13-xid109.txt"))
    assert r["xid_counts"] == {"13": 3, "109": 1}
    kmsg = (
        "4,1201,6781741548779,-;NVRM: Xid (PCI:0000:ca:00): 79, pid='<unknown>', name=<unknown>, GPU has "
        "fallen off the bus.\n"
    )
    e = parse("xid", kmsg)["events"][0]
    assert e["uptime_s"] == pytest.approx(6781741.548779) and e["xid"] == 79


def test_logs_without_xid_are_valid_and_empty(fixture_text):
    for rel in ("dmesg/dev-kmsg-raw-nvidia-peermem.txt", "syslog/ib-link-noflap-syslog.txt"):
        r = parse("xid", fixture_text(rel))
        assert r["events"] == [] and r["xid_counts"] == {} and r["gpus_with_xid"] == []


def test_crlf(fixture_text):
    text = fixture_text("dmesg/xid-31-48-sm-exception.txt").replace("\n", "\r\n")
    assert (
        parse("xid", text)["events"][1]["message"]
        == "Graphics SM Global Exception on (GPC 2, TPC 2, SM 1): Multiple Warp Errors"
    )


def test_empty_raises():
    with pytest.raises(ParseError, match="empty"):
        parse("xid", "")
    with pytest.raises(ParseError):
        parse("xid", " \n\t\n")
