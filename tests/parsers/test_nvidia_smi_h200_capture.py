"""The nvidia-smi parsers (and the Xid parser) on the project's own capture of a lent cloud VM with one NVIDIA
H200, driver 580.159.04, CUDA 13.0 (tests/fixtures/SOURCES.md, "Captured for this project on a lent H200"):
each file through the kind registered for its command, asserting what a user reading the output would see."""

from __future__ import annotations

import json

import pytest

from clustercert.parsers import ParseError, parse

NAME = "NVIDIA H200"
BUS = "00000000:00:06.0"
UUID = "GPU-56556682-419c-21c8-df0c-4a8d211f0207"


def _gpu_record(g: dict) -> None:
    """What -q -x and -q agree on for this GPU."""
    assert (g["index"], g["bus_id"], g["product_name"], g["uuid"]) == (0, BUS, NAME, UUID)
    assert g["serial"] == "1653824016982" and g["minor_number"] == 0
    assert g["vbios_version"] == "96.00.A5.00.1A"
    assert g["persistence_mode"] is True and g["mig_mode_current"] is False
    assert (g["memory_total_mib"], g["memory_used_mib"]) == (143771, 0)
    assert g["ecc_mode_current"] is True
    e = g["ecc_errors"]
    assert e["volatile"] == {
        "sram_correctable": 0,
        "sram_uncorrectable_parity": 0,
        "sram_uncorrectable_secded": 0,
        "dram_correctable": 0,
        "dram_uncorrectable": 0,
    }
    assert e["aggregate"]["sram_threshold_exceeded"] is False
    assert (e["volatile_correctable"], e["volatile_uncorrectable"]) == (0, 0)
    assert (e["aggregate_correctable"], e["aggregate_uncorrectable"]) == (0, 0)
    # Hopper: page retirement reads N/A, row remapping is reported
    assert g["retired_pages"] == {"single_bit": None, "double_bit": None, "pending": None}
    assert g["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert g["pcie"] == {
        "gen_current": 5,
        "gen_max": 5,
        "width_current": 16,
        "width_max": 16,
        "replay_count": 0,
    }
    assert g["temperature_celsius"] == 43 and g["power_limit_watts"] == pytest.approx(700.0)
    assert g["clocks_event_reasons_active"] == ["gpu_idle"]
    assert g["utilization_gpu_percent"] == 0 and g["process_count"] == 0
    # no NVSwitch fabric visible in the VM: state and status read N/A
    assert g["fabric"] == {"state": None, "status": None}
    assert g["reset_required"] is None


def test_xml_h200(fixture_text):
    r = parse("nvidia-smi-xml", fixture_text("nvidia-smi/q-x-h200-580.159.04-vm.xml"))
    assert (r["driver_version"], r["cuda_version"], r["attached_gpus"], r["gpu_count"]) == (
        "580.159.04",
        "13.0",
        1,
        1,
    )
    (g,) = r["gpus"]
    _gpu_record(g)
    assert g["power_draw_watts"] == pytest.approx(81.42)
    json.dumps(r)


def test_q_text_h200_says_what_the_xml_says(fixture_text):
    r = parse("nvidia-smi-q", fixture_text("nvidia-smi/q-h200-580.159.04-vm.txt"))
    assert (r["driver_version"], r["cuda_version"], r["attached_gpus"], r["gpu_count"]) == (
        "580.159.04",
        "13.0",
        1,
        1,
    )
    assert r["partial_display"] is False
    (g,) = r["gpus"]
    _gpu_record(g)
    assert g["power_draw_watts"] == pytest.approx(80.71)  # the text report was read a moment later
    xml = parse("nvidia-smi-xml", fixture_text("nvidia-smi/q-x-h200-580.159.04-vm.xml"))["gpus"][0]
    differ = {k for k in g if g[k] != xml[k]}
    assert differ == {"power_draw_watts"}


def test_q_d_page_retirement_row_remapper_h200(fixture_text):
    r = parse("nvidia-smi-q", fixture_text("nvidia-smi/q-d-page_retirement-row_remapper-h200-580-vm.txt"))
    assert (r["driver_version"], r["attached_gpus"], r["gpu_count"], r["partial_display"]) == (
        "580.159.04",
        1,
        1,
        False,
    )
    (g,) = r["gpus"]
    assert g["bus_id"] == BUS and g["product_name"] is None  # a -d display: only the sections asked for
    assert g["retired_pages"] == {"single_bit": None, "double_bit": None, "pending": None}
    assert g["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}


def test_table_h200(fixture_text):
    r = parse("nvidia-smi-table", fixture_text("nvidia-smi/default-table-h200-580.159.04-vm.txt"))
    assert (r["smi_version"], r["driver_version"], r["cuda_version"]) == ("580.159.04", "580.159.04", "13.0")
    (g,) = r["gpus"]
    assert (g["index"], g["name"], g["bus_id"]) == (0, NAME, BUS)
    assert (
        g["persistence_mode"] is True and g["display_active"] is False and g["volatile_uncorrected_ecc"] == 0
    )
    assert (g["memory_used_mib"], g["memory_total_mib"]) == (0, 143771)
    assert (g["temperature_celsius"], g["perf_state"]) == (43, "P0")
    assert (g["power_draw_watts"], g["power_cap_watts"]) == (80.0, 700.0)
    assert (g["utilization_gpu_percent"], g["compute_mode"], g["mig_mode"]) == (0, "Default", "Disabled")
    assert g["fan_percent"] is None and g["fan_error"] is False and g["unavailable_fields"] == ["fan_percent"]
    assert r["processes"] == [] and r["mig_devices"] == [] and r["warnings"] == []


def test_list_h200(fixture_text):
    r = parse("nvidia-smi-list", fixture_text("nvidia-smi/L-h200-580-vm.txt"))
    assert r["gpus"] == [{"index": 0, "name": NAME, "uuid": UUID, "mig_devices": []}]


def test_topo_m_single_gpu_with_ansi_header(fixture_text):
    text = fixture_text("nvidia-smi/topo-m-h200-580-vm-1gpu-ansi-header.txt")
    assert "\x1b[4m" in text  # underlined header, although the capture's stdout was a file
    r = parse("nvidia-smi-topo", text)
    assert r["devices"] == [{"name": "GPU0", "kind": "gpu", "nic_name": None}]
    assert r["matrix"] == {"GPU0": {"GPU0": "X"}} and r["nic_legend"] == {}
    assert r["affinity"]["GPU0"] == {"cpu_affinity": "0-15", "numa_affinity": "0", "gpu_numa_id": None}
    assert r["header_complete"] is True and r["cut_rows"] == [] and r["elided"] is False


def test_topo_p2p_n_single_gpu_has_no_pair(fixture_text):
    r = parse("nvidia-smi-topo-p2p", fixture_text("nvidia-smi/topo-p2p-n-h200-580-vm-1gpu-ansi-header.txt"))
    assert r["devices"] == ["GPU0"] and r["matrix"] == {"GPU0": {"GPU0": "X"}}
    assert (r["pair_count"], r["ok_pairs"], r["not_ok"], r["all_ok"]) == (0, 0, [], None)
    assert r["legend"]["CNS"] == "Chipset not supported" and r["meaning"] == {"X": "Self"}
    assert r["header_complete"] is True


def test_nvlink_s_and_e_printed_nothing(fixture_text):
    """`nvidia-smi nvlink -s` and `-e` printed nothing (exit status 0) in the VM: the parsers refuse empty
    input; the checks (gpu.nvlink, gpu.nvlink_errors) say what the silence means
    (tests/test_h200_capture_checks.py)."""
    for kind, name in (("nvidia-smi-nvlink", "nvlink-s-h200-580-vm-empty.txt"),
                       ("nvidia-smi-nvlink-errors", "nvlink-e-h200-580-vm-empty.txt")):
        text = fixture_text(f"nvidia-smi/{name}")
        assert text == ""
        with pytest.raises(ParseError, match="empty input"):
            parse(kind, text)


def test_query_gpu_csv_keeps_the_header_name_driver_580_prints(fixture_text):
    """Asked for clocks_throttle_reasons.active, driver 580 names the column clocks_event_reasons.active: the
    parser keys values by the header as printed (it maps no names; nothing reads that field from CSV)."""
    r = parse(
        "nvidia-smi-csv", fixture_text("nvidia-smi/query-gpu-csv-h200-580-vm-clocks-event-reasons-header.csv")
    )
    assert (
        "clocks_event_reasons.active" in r["fields"] and "clocks_throttle_reasons.active" not in r["fields"]
    )
    assert r["units"] == {"memory.total": "MiB", "power.limit": "W", "temperature.gpu": "C"}
    (row,) = r["rows"]
    assert row == {
        "index": 0,
        "name": NAME,
        "uuid": UUID,
        "pci.bus_id": BUS,
        "driver_version": "580.159.04",
        "vbios_version": "96.00.A5.00.1A",
        "memory.total": 143771,
        "ecc.mode.current": "Enabled",
        "ecc.errors.uncorrected.volatile.total": 0,
        "retired_pages.pending": None,
        "remapped_rows.pending": "No",
        "remapped_rows.failure": "No",
        "clocks_event_reasons.active": "0x0000000000000001",
        "power.limit": 700.0,
        "temperature.gpu": 43,
        "persistence_mode": "Enabled",
        "mig.mode.current": "Disabled",
    }


def test_query_remapped_rows_csv(fixture_text):
    r = parse("nvidia-smi-csv", fixture_text("nvidia-smi/query-remapped-rows-csv-h200-580-vm.csv"))
    assert r["rows"] == [{"gpu_bus_id": BUS, "remapped_rows.correctable": 0, "remapped_rows.uncorrectable": 0,
                          "remapped_rows.pending": "No", "remapped_rows.failure": "No"}]


def test_query_retired_pages_csv_rows_without_an_address_are_no_retired_page(fixture_text):
    """With no page retired, driver 580 still prints one row per cause, address [N/A]: the rows are kept and
    the address is None (a reader counting retired pages must count rows with an address)."""
    r = parse("nvidia-smi-csv", fixture_text("nvidia-smi/query-retired-pages-csv-h200-580-vm-na.csv"))
    assert [(x["gpu_uuid"], x["retired_pages.address"], x["retired_pages.cause"]) for x in r["rows"]] == [
        (UUID, None, "Single Bit ECC"), (UUID, None, "Double Bit ECC")]


def test_xid_nvrm_lines_without_xid(fixture_text):
    text = fixture_text("dmesg/nvrm-h200-580-no-xid.txt")
    assert text.count("NVRM:") == 3
    r = parse("xid", text)
    assert r == {
        "events": [],
        "xid_counts": {},
        "gpus_with_xid": [],
        "gpu_uuids": {},
        "fallen_off_bus": False,
    }
