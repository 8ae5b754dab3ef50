"""Tests for clustercert.parsers.nvidia_smi (xml, q, csv, table, topo, nvlink, list)."""

from __future__ import annotations

import json

import pytest

from clustercert.parsers import ParseError, parse

# ----------------------------------------------------------------------------- nvidia-smi -q -x


def test_xml_a100_mig(fixture_text):
    r = parse("nvidia-smi-xml", fixture_text("nvidia-smi/q-x-a100-sxm4-80gb-mig-535.xml"))
    assert r["driver_version"] == "535.54.03"
    assert r["cuda_version"] == "12.2"
    assert r["attached_gpus"] == 4  # excerpt: header says 4, one <gpu> element kept
    assert r["gpu_count"] == 1
    g = r["gpus"][0]
    assert g["bus_id"] == "00000000:01:00.0"
    assert g["product_name"] == "NVIDIA A100-SXM4-80GB"
    assert g["uuid"] == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert g["serial"] == "1650522003820"
    assert g["mig_mode_current"] is True
    assert g["persistence_mode"] is False
    assert g["memory_total_mib"] == 81920
    assert g["ecc_mode_current"] is True
    assert g["ecc_errors"]["volatile"]["dram_uncorrectable"] == 0
    assert g["ecc_errors"]["aggregate_uncorrectable"] == 0
    assert g["remapped_rows"] is None  # <remapped_rows>N/A</remapped_rows>
    assert g["retired_pages"] == {"single_bit": None, "double_bit": None, "pending": None}
    assert g["pcie"] == {
        "gen_current": 4,
        "gen_max": 4,
        "width_current": 16,
        "width_max": 16,
        "replay_count": 0,
    }
    assert g["temperature_celsius"] == 27
    assert g["power_draw_watts"] == pytest.approx(67.03)
    assert g["power_limit_watts"] == pytest.approx(500.0)
    assert g["utilization_gpu_percent"] is None  # N/A in MIG mode
    assert g["fabric"] == {"state": None, "status": None}
    assert g["reset_required"] is False
    assert g["clocks_event_reasons_active"] == []
    json.dumps(r)


def test_xml_dual_a5000_v13_two_gpus_in_order(fixture_text):
    r = parse("nvidia-smi-xml", fixture_text("nvidia-smi/q-x-dual-rtx-a5000-590-v13.xml"))
    assert r["driver_version"] == "590.44.01" and r["cuda_version"] == "13.1"
    assert r["gpu_count"] == 2 == r["attached_gpus"]
    assert [g["index"] for g in r["gpus"]] == [0, 1]
    assert [g["bus_id"] for g in r["gpus"]] == ["00000000:81:00.0", "00000000:C1:00.0"]
    g1 = r["gpus"][1]
    assert g1["uuid"] == "GPU-12345678-aaaa-bbbb-cccc-0123456789cd"
    assert g1["power_draw_watts"] == pytest.approx(13.59)  # v13: instant_power_draw
    assert g1["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert g1["ecc_mode_current"] is False
    assert g1["ecc_errors"]["volatile_uncorrectable"] is None  # all counters N/A
    assert g1["clocks_event_reasons_active"] == ["gpu_idle"]
    assert g1["process_count"] == 1


def test_xml_old_throttle_reasons_and_single_double_bit_ecc(fixture_text):
    r = parse("nvidia-smi-xml", fixture_text("nvidia-smi/q-x-quadro-p400-418.xml"))
    g = r["gpus"][0]
    assert g["product_name"] == "Quadro P400"
    assert g["bus_id"] == "00000000:43:00.0"
    assert g["clocks_event_reasons_active"] == ["gpu_idle"]  # from <clocks_throttle_reasons>
    assert "single_bit_total" in g["ecc_errors"]["volatile"]
    assert g["ecc_errors"]["volatile"]["double_bit_total"] is None
    assert g["power_draw_watts"] is None
    assert g["pcie"]["gen_max"] == 3 and g["pcie"]["gen_current"] == 1


def test_xml_t4_retired_pages_counts(fixture_text):
    g = parse("nvidia-smi-xml", fixture_text("nvidia-smi/q-x-tesla-t4-515.xml"))["gpus"][0]
    assert g["bus_id"] == "00000000:00:1E.0"
    assert g["retired_pages"] == {"single_bit": 0, "double_bit": 0, "pending": False}
    assert g["ecc_mode_current"] is True
    assert g["ecc_errors"]["aggregate_correctable"] == 0


def test_xml_blackwell_v13(fixture_text):
    g = parse("nvidia-smi-xml", fixture_text("nvidia-smi/q-x-rtx-pro6000-blackwell-590-v13.xml"))["gpus"][0]
    assert g["product_name"] == "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
    assert g["memory_total_mib"] == 97887 and g["memory_used_mib"] == 65720
    assert g["power_draw_watts"] == pytest.approx(3.99)
    assert g["pcie"]["gen_current"] == 1 and g["pcie"]["gen_max"] == 4
    assert g["process_count"] == 1


def test_xml_partial_v10_without_header(fixture_text):
    r = parse("nvidia-smi-xml", fixture_text("nvidia-smi/q-x-gtx-1070ti-v10-partial.xml"))
    assert r["driver_version"] is None and r["attached_gpus"] is None
    g = r["gpus"][0]
    assert g["product_name"] == "GeForce GTX 1070 Ti"
    assert g["memory_total_mib"] == 4096
    assert g["temperature_celsius"] == 39
    assert g["pcie"]["width_current"] == 16 and g["pcie"]["gen_max"] is None


def test_xml_errors(fixture_text):
    with pytest.raises(ParseError, match="empty"):
        parse("nvidia-smi-xml", "  \n")
    text = fixture_text("nvidia-smi/q-x-tesla-t4-515.xml")
    with pytest.raises(ParseError, match="truncated"):
        parse("nvidia-smi-xml", text[: len(text) // 2])
    with pytest.raises(ParseError, match="nvidia_smi_log"):
        parse("nvidia-smi-xml", "<?xml version='1.0'?><other/>")
    with pytest.raises(ParseError):
        parse("nvidia-smi-xml", fixture_text("nvidia-smi/q-h100-590-idle.txt"))


# ----------------------------------------------------------------------------- nvidia-smi -q


def test_q_h100(fixture_text):
    r = parse("nvidia-smi-q", fixture_text("nvidia-smi/q-h100-590-idle.txt"))
    assert r["driver_version"] == "590.48.01" and r["cuda_version"] == "13.1"
    assert r["attached_gpus"] == 1 == r["gpu_count"]
    g = r["gpus"][0]
    assert g["bus_id"] == "00000000:00:09.0"
    assert g["product_name"] == "NVIDIA H100 80GB HBM3"
    assert g["memory_total_mib"] == 81559
    assert g["ecc_errors"]["volatile"]["sram_uncorrectable_secded"] == 0
    assert g["ecc_errors"]["aggregate"]["sram_threshold_exceeded"] is False
    assert g["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert g["pcie"] == {
        "gen_current": 5,
        "gen_max": 5,
        "width_current": 16,
        "width_max": 16,
        "replay_count": 9,
    }
    assert g["temperature_celsius"] == 41
    assert g["power_draw_watts"] == pytest.approx(69.62)  # instantaneous
    assert g["clocks_event_reasons_active"] == ["gpu_idle"]
    assert g["fabric"] == {"state": "Completed", "status": "Success"}
    assert g["process_count"] == 0


def test_q_crlf_is_equivalent(fixture_text):
    text = fixture_text("nvidia-smi/q-h100-590-idle.txt")
    assert parse("nvidia-smi-q", text.replace("\n", "\r\n")) == parse("nvidia-smi-q", text)


def test_q_8x4090_and_nested_reasons(fixture_text):
    r = parse("nvidia-smi-q", fixture_text("nvidia-smi/q-8xrtx4090-535.154.05-gpud.txt"))
    assert r["driver_version"] == "535.154.05"
    assert r["gpu_count"] == 8
    assert r["gpus"][5]["bus_id"] == "00000000:A1:00.0"
    assert r["gpus"][3]["ecc_mode_current"] is False
    assert r["gpus"][3]["pcie"]["gen_max"] == 4


def test_q_retired_pages_display(fixture_text):
    r = parse("nvidia-smi-q", fixture_text("nvidia-smi/q-d-page_retirement-8gpu-535-retired-pages.txt"))
    assert r["gpu_count"] == 8
    gpus = {g["bus_id"]: g["retired_pages"] for g in r["gpus"]}
    assert gpus["00000002:00:00.0"] == {"single_bit": 2, "double_bit": 61, "pending": True}
    assert gpus["00000001:00:00.0"] == {"single_bit": 60, "double_bit": 5, "pending": False}
    assert gpus["00000003:00:00.0"] == {"single_bit": 0, "double_bit": 0, "pending": False}


def test_q_fabric_in_progress_excerpt_wrapped(fixture_text):
    excerpt = fixture_text("nvidia-smi/q-fabric-state-in-progress-excerpt.txt")
    body = "\n".join("    " + ln for ln in excerpt.splitlines())
    text = "Driver Version : 535.00\nAttached GPUs : 1\nGPU 00000000:18:00.0\n" + body + "\n\n"
    g = parse("nvidia-smi-q", text)["gpus"][0]
    assert g["bus_id"] == "00000000:18:00.0"
    assert g["fabric"] == {"state": "In Progress", "status": None}


def test_q_windows_processes(fixture_text):
    g = parse("nvidia-smi-q", fixture_text("nvidia-smi/q-rtx2080s-591-windows-idle.txt"))["gpus"][0]
    assert g["bus_id"] == "00000000:0C:00.0"
    assert g["product_name"] == "NVIDIA GeForce RTX 2080 SUPER"
    assert g["process_count"] == 10


def test_q_truncated_invalid_raises(fixture_text):
    with pytest.raises(ParseError, match="truncated: header announces 8 GPUs, 1 section"):
        parse("nvidia-smi-q", fixture_text("nvidia-smi/q-8xh100-535.183.01-truncated-invalid-gpud.txt"))


def test_q_errors(fixture_text):
    with pytest.raises(ParseError, match="empty"):
        parse("nvidia-smi-q", "")
    with pytest.raises(ParseError, match="Driver Version"):
        parse("nvidia-smi-q", fixture_text("nvidia-smi/topo-m-h100-590.txt"))
    with pytest.raises(ParseError):
        parse(
            "nvidia-smi-q", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
        )


# ----------------------------------------------------------------------------- --query-gpu csv


def test_csv_allfields_header_units(fixture_text):
    r = parse("nvidia-smi-csv", fixture_text("nvidia-smi/query-gpu-csv-allfields-h100-590-idle.csv"))
    assert len(r["fields"]) == 212
    assert r["units"]["memory.total"] == "MiB"
    assert r["units"]["power.draw"] == "W"
    assert r["units"]["temperature.gpu"] == "C"
    (row,) = r["rows"]
    assert row["index"] == 0
    assert row["pci.bus_id"] == "00000000:00:09.0"
    assert row["name"] == "NVIDIA H100 80GB HBM3"
    assert row["memory.total"] == 81559
    assert row["power.draw"] == pytest.approx(69.85)
    assert row["temperature.gpu"] == 41
    assert row["pcie.link.gen.current"] == 5 and row["pcie.link.width.max"] == 16
    assert row["ecc.errors.uncorrected.volatile.total"] == 0
    assert row["remapped_rows.pending"] == "No"
    assert row["pcie.link.gen.hostmax"] is None  # [N/A]
    assert row["display_mode"] is None  # [Requested functionality has been deprecated]
    assert row["fan.speed"] is None


def test_csv_retired_pages(fixture_text):
    r = parse("nvidia-smi-csv", fixture_text("nvidia-smi/query-retired-pages-csv-h100-590.csv"))
    assert r["fields"][-1] == "retired_pages.cause"
    assert [row["retired_pages.cause"] for row in r["rows"]] == ["Single Bit ECC", "Double Bit ECC"]
    assert r["rows"][0]["retired_pages.address"] is None


def test_csv_nounits_and_noheader():
    text = "index, memory.used [MiB], power.draw [W]\n0, 12, 71.50\n1, [N/A], [Not Supported]\n"
    r = parse("nvidia-smi-csv", text)
    assert r["rows"][0] == {"index": 0, "memory.used": 12, "power.draw": 71.5}
    assert r["rows"][1] == {"index": 1, "memory.used": None, "power.draw": None}
    r2 = parse(
        "nvidia-smi-csv",
        "NVIDIA H100 80GB HBM3, 00000000:04:00.0, 96.00.89.00.01\n"
        "NVIDIA H100 80GB HBM3, N/A, 96.00.89.00.01\n",
    )
    assert r2["fields"] is None
    assert r2["rows"][1] == ["NVIDIA H100 80GB HBM3", None, "96.00.89.00.01"]


def test_csv_errors():
    with pytest.raises(ParseError, match="empty"):
        parse("nvidia-smi-csv", "\n\n")
    with pytest.raises(ParseError, match="truncated"):
        parse("nvidia-smi-csv", "index, name, pci.bus_id\n0, NVIDIA H100\n")


# ----------------------------------------------------------------------------- default table


def test_table_8xh100(fixture_text):
    r = parse("nvidia-smi-table", fixture_text("nvidia-smi/default-table-8xh100-550.90.07-gpud.txt"))
    assert r["driver_version"] == "550.90.07" and r["cuda_version"] == "12.4"
    assert len(r["gpus"]) == 8
    g = r["gpus"][4]
    assert g["index"] == 4 and g["bus_id"] == "00000000:9B:00.0"
    assert g["name"] == "NVIDIA H100 80GB HBM3"
    assert g["memory_used_mib"] == 1 and g["memory_total_mib"] == 81559
    assert g["temperature_celsius"] == 27 and g["power_draw_watts"] == 73.0 and g["power_cap_watts"] == 700.0
    assert g["utilization_gpu_percent"] == 0 and g["volatile_uncorrected_ecc"] == 0
    assert g["mig_mode"] == "Disabled"
    assert r["processes"] == []


def test_table_mig_with_processes(fixture_text):
    r = parse("nvidia-smi-table", fixture_text("nvidia-smi/default-table-h100-mig-590-load.txt"))
    assert r["gpus"][0]["mig_mode"] == "Enabled"
    assert r["gpus"][0]["utilization_gpu_percent"] is None
    assert [m["gi_id"] for m in r["mig_devices"]] == [2, 3, 9, 10]
    assert r["mig_devices"][0]["memory_total_mib"] == 40448
    assert [p["pid"] for p in r["processes"]] == [21180, 21181, 21198]
    assert r["processes"][2] == {
        "gpu": 0,
        "gi_id": 2,
        "ci_id": 0,
        "pid": 21198,
        "type": "C",
        "name": "./gpu_burn",
        "memory_mib": 7484,
    }


def test_table_old_format_and_variants(fixture_text):
    t4 = parse("nvidia-smi-table", fixture_text("nvidia-smi/default-table-tesla-t4-535-oldformat.txt"))
    assert t4["gpus"][0]["name"] == "Tesla T4" and t4["gpus"][0]["memory_total_mib"] == 15109
    assert t4["gpus"][0]["power_cap_watts"] == 70.0
    p100 = parse("nvidia-smi-table", fixture_text("nvidia-smi/default-table-p100-470-inforom-corrupted.txt"))
    assert p100["warnings"] == ["WARNING: infoROM is corrupted at gpu 0000:0B:00.0"]
    fan = parse(
        "nvidia-smi-table", fixture_text("nvidia-smi/default-table-rtx4090-525-fan-err-truncated.txt")
    )
    assert fan["gpus"][0]["fan_error"] is True and fan["gpus"][0]["fan_percent"] is None
    assert fan["gpus"][0]["compute_mode"] == "E. Process"
    assert fan["processes"] is None  # processes table missing: unknown, not "none running"
    win = parse("nvidia-smi-table", fixture_text("nvidia-smi/default-table-rtx2080s-610-windows-load.txt"))
    assert win["driver_version"] == "610.62" and win["cuda_version"] == "13.3"  # KMD / CUDA UMD header
    assert win["gpus"][0]["driver_model"] == "WDDM" and win["gpus"][0]["fan_percent"] == 38
    assert len(win["processes"]) == 21 and win["processes"][0]["type"] == "C+G"


def test_table_errors(fixture_text):
    with pytest.raises(ParseError, match="empty"):
        parse("nvidia-smi-table", "")
    with pytest.raises(ParseError, match="Driver Version"):
        parse(
            "nvidia-smi-table",
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
        )
    with pytest.raises(ParseError):
        parse("nvidia-smi-table", fixture_text("nvidia-smi/q-h100-590-idle.txt"))


# ----------------------------------------------------------------------------- topo -m


def test_topo_12_nics_with_legend(fixture_text):
    r = parse("nvidia-smi-topo", fixture_text("nvidia-smi/topo-mp-8xH100-12NIC-nic-legend-tabs.txt"))
    names = [d["name"] for d in r["devices"]]
    assert names[:8] == [f"GPU{i}" for i in range(8)] and names[8:] == [f"NIC{i}" for i in range(12)]
    nic11 = r["devices"][-1]
    assert nic11 == {"name": "NIC11", "kind": "nic", "nic_name": "mlx5_11"}
    assert r["matrix"]["GPU0"]["NIC0"] == "PIX"
    assert r["matrix"]["GPU0"]["GPU4"] == "SYS"
    assert r["matrix"]["GPU7"]["NIC11"] == "PIX"
    assert r["matrix"]["GPU3"]["GPU3"] == "X"
    assert r["affinity"]["GPU4"] == {
        "cpu_affinity": "1,3,5,7,9,11",
        "numa_affinity": "1",
        "gpu_numa_id": None,
    }
    assert r["affinity"]["NIC0"] == {"cpu_affinity": None, "numa_affinity": None, "gpu_numa_id": None}
    assert r["nic_legend"]["NIC3"] == "mlx5_3"


def test_topo_single_gpu_ansi_and_spaces_variant(fixture_text):
    text = fixture_text("nvidia-smi/topo-m-h100-590.txt")
    assert "\x1b[4m" in text  # the real output underlines the header
    r = parse("nvidia-smi-topo", text)
    assert r["matrix"] == {"GPU0": {"GPU0": "X"}}
    assert r["affinity"]["GPU0"]["cpu_affinity"] == "0-19"
    spaced = fixture_text("nvidia-smi/topo-mp-8xH100-12NIC-nic-legend-tabs.txt").replace("\t", "    ")
    r2 = parse("nvidia-smi-topo", spaced)
    assert r2["matrix"]["GPU5"]["NIC9"] == "PIX"
    assert r2["affinity"]["GPU5"]["cpu_affinity"] == "1,3,5,7,9,11"


def test_topo_nvlink_matrix():
    text = (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNV18\t0-63\t0\t\tN/A\n"
        "GPU1\tNV18\t X \t0-63\t0\t\tN/A\n"
    )
    r = parse("nvidia-smi-topo", text)
    assert r["matrix"]["GPU0"]["GPU1"] == "NV18" == r["matrix"]["GPU1"]["GPU0"]


def test_topo_errors(fixture_text):
    with pytest.raises(ParseError, match="Option -m is missing"):
        parse("nvidia-smi-topo", fixture_text("nvidia-smi/topo-m-rtx2080s-591-windows-error.txt"))
    with pytest.raises(ParseError, match="empty"):
        parse("nvidia-smi-topo", "")
    with pytest.raises(ParseError, match="truncated"):
        parse("nvidia-smi-topo", "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \n")


# ----------------------------------------------------------------------------- nvlink -s / -L


def test_nvlink_8xa100(fixture_text):
    r = parse("nvidia-smi-nvlink", fixture_text("nvidia-smi/nvlink-s-8xa100-sxm4-80gb-gpud.txt"))
    assert len(r["gpus"]) == 8
    assert all(len(g["links"]) == 12 and g["status"] == "ok" for g in r["gpus"])
    assert r["gpus"][5]["uuid"] == "GPU-375df896-019b-a009-42e5-ce9ed21bd8cc"
    assert r["gpus"][0]["links"][11] == {"link": 11, "gbyte_per_s": 25.0, "inactive": False}


def test_nvlink_h100_tabs(fixture_text):
    g = parse("nvidia-smi-nvlink", fixture_text("nvidia-smi/nvlink-s-h100-590.txt"))["gpus"][0]
    assert len(g["links"]) == 18
    assert g["links"][17]["gbyte_per_s"] == pytest.approx(26.562)


def test_nvlink_failure_states(fixture_text):
    inactive = parse(
        "nvidia-smi-nvlink", fixture_text("nvidia-smi/nvlink-s-a100-sxm4-80gb-all-links-inactive.txt")
    )
    g = inactive["gpus"][0]
    assert g["index"] == 6 and g["status"] == "all_links_inactive" and g["links"] == []
    mig = parse("nvidia-smi-nvlink", fixture_text("nvidia-smi/nvlink-s-h100-mig-590.txt"))["gpus"][0]
    assert mig["status"] == "mig_unsupported"
    l40s = parse("nvidia-smi-nvlink", fixture_text("nvidia-smi/nvlink-s-l40s-595.txt"))["gpus"][0]
    assert l40s["status"] == "not_supported" and l40s["message"] == "Device does not have or support Nvlink"


def test_nvlink_inactive_link():
    text = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n"
    links = parse("nvidia-smi-nvlink", text)["gpus"][0]["links"]
    assert links[1] == {"link": 1, "gbyte_per_s": None, "inactive": True}
    assert links[0]["inactive"] is False


def test_nvlink_errors():
    with pytest.raises(ParseError, match="empty"):
        parse("nvidia-smi-nvlink", "")
    with pytest.raises(ParseError, match="GPU n"):
        parse("nvidia-smi-nvlink", "Failed to initialize NVML: Driver/library version mismatch\n")
    with pytest.raises(ParseError, match="Link n"):
        parse("nvidia-smi-nvlink", "GPU 0: X (UUID: GPU-1)\n         Link 0: Replay Errors: 0\n")


def test_list_mig(fixture_text):
    r = parse("nvidia-smi-list", fixture_text("nvidia-smi/L-h100-mig-590.txt"))
    (g,) = r["gpus"]
    assert g["name"] == "NVIDIA H100 80GB HBM3"
    assert [m["profile"] for m in g["mig_devices"]] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert g["mig_devices"][1]["uuid"] == "MIG-00000001-0000-0000-0000-000000000001"
    with pytest.raises(ParseError):
        parse("nvidia-smi-list", "No devices were found\n")


# --- issue 21.5: `nvidia-smi -i N -q`: one GPU section under "Attached GPUs : 8"


def test_q_single_gpu_section_of_eight_h100(fixture_text):
    r = parse(
        "nvidia-smi-q",
        fixture_text("nvidia-smi/q-i1-8xh100-535.161.08-one-section-from-gpud-constructed.txt"),
    )
    assert (r["attached_gpus"], r["gpu_count"], r["partial_display"]) == (8, 1, True)
    assert r["driver_version"] == "535.161.08" and r["cuda_version"] == "12.2"
    (g,) = r["gpus"]
    assert g["bus_id"] == "00000000:3B:00.0" and g["product_name"] == "NVIDIA H100 80GB HBM3"
    assert (g["temperature_celsius"], g["power_draw_watts"], g["memory_total_mib"]) == (29, 69.52, 81559)
    assert g["process_count"] == 0 and g["fabric"] == {"state": "Completed", "status": "Success"}


def test_q_single_gpu_section_of_eight_rtx4090_with_process(fixture_text):
    r = parse(
        "nvidia-smi-q",
        fixture_text("nvidia-smi/q-i2-8xrtx4090-535.154.05-one-section-from-gpud-constructed.txt"),
    )
    assert (r["attached_gpus"], r["gpu_count"], r["partial_display"]) == (8, 1, True)
    (g,) = r["gpus"]
    assert g["bus_id"] == "00000000:41:00.0" and g["product_name"] == "NVIDIA GeForce RTX 4090"
    assert g["process_count"] == 1 and g["memory_total_mib"] == 24564 and g["power_draw_watts"] == 8.84


def test_q_single_section_cut_before_processes_is_still_truncated(fixture_text):
    text = fixture_text("nvidia-smi/q-i1-8xh100-535.161.08-one-section-from-gpud-constructed.txt")
    with pytest.raises(ParseError, match="truncated"):
        parse("nvidia-smi-q", text[: text.index("    Fabric")])
    # the same cut with nvidia-smi's trailing blank line kept is a complete -d style display
    assert parse("nvidia-smi-q", text[: text.index("    Fabric")] + "\n")["partial_display"] is True
    full = parse("nvidia-smi-q", fixture_text("nvidia-smi/q-8xrtx4090-535.154.05-gpud.txt"))
    assert full["partial_display"] is False and full["gpu_count"] == 8


# --- issue 21.6: default table on Grace-Blackwell parts: Memory-Usage "Not Supported", power cap N/A

GB10_EXPECTED = {
    "fan_percent": None,
    "perf_state": "P8",
    "power_cap_watts": None,
    "memory_used_mib": None,
    "memory_total_mib": None,
    "utilization_gpu_percent": 0,
    "compute_mode": "Default",
    "unavailable_fields": ["fan_percent", "power_cap_watts", "memory_used_mib", "memory_total_mib"],
}


@pytest.mark.parametrize(
    ("name", "driver", "temp", "watts"),
    [
        (
            "default-table-gb10-580.126.09-memory-not-supported-arctictraining-pr345.txt",
            "580.126.09",
            36,
            3.0,
        ),
        (
            "default-table-gb10-580.95.05-memory-not-supported-k8s-device-plugin-1482-excerpt.txt",
            "580.95.05",
            40,
            4.0,
        ),
    ],
)
def test_table_gb10_reads_what_is_there(fixture_text, name, driver, temp, watts):
    r = parse("nvidia-smi-table", fixture_text(f"nvidia-smi/{name}"))
    assert r["driver_version"] == driver and r["cuda_version"] == "13.0"
    (g,) = r["gpus"]
    assert (g["name"], g["bus_id"]) == ("NVIDIA GB10", "0000000F:01:00.0")
    assert (g["temperature_celsius"], g["power_draw_watts"]) == (temp, watts)
    assert g["volatile_uncorrected_ecc"] is None and g["mig_mode"] is None
    assert {k: g[k] for k in GB10_EXPECTED} == GB10_EXPECTED
    assert r["processes"] is None  # the pasted excerpts end before the Processes table


def test_table_not_supported_centred_and_unreadable_cell(fixture_text):
    text = fixture_text(
        "nvidia-smi/default-table-gb10-580.126.09-memory-not-supported-arctictraining-pr345.txt"
    )
    centred = text.replace("| Not Supported          |", "|      Not Supported     |")
    (g,) = parse("nvidia-smi-table", centred)["gpus"]
    assert g["memory_total_mib"] is None and g["temperature_celsius"] == 36
    garbled = text.replace("| Not Supported          |", "| lots of memory         |")
    (g,) = parse("nvidia-smi-table", garbled)["gpus"]
    # an unreadable row is not turned into values: the whole second row stays unread
    assert (
        g["temperature_celsius"] is None and g["memory_total_mib"] is None and g["power_draw_watts"] is None
    )


def test_table_regular_row_lists_only_the_na_fan(fixture_text):
    r = parse("nvidia-smi-table", fixture_text("nvidia-smi/default-table-8xh100-550.90.07-gpud.txt"))
    g = r["gpus"][0]
    assert (
        g["unavailable_fields"] == ["fan_percent"]
        and g["memory_total_mib"] == 81559
        and g["power_cap_watts"] == 700.0
    )


# --- issue 21.7: topo -m pasted with its header cut: NIC rows are kept


def test_topo_real_pastes_with_nics_stelline(fixture_text):
    r = parse("nvidia-smi-topo", fixture_text("nvidia-smi/topo-m-4xrtx6000ada-4nic-stelline.txt"))
    assert [d["name"] for d in r["devices"]] == [
        "GPU0",
        "GPU1",
        "GPU2",
        "GPU3",
        "NIC0",
        "NIC1",
        "NIC2",
        "NIC3",
    ]
    assert r["header_complete"] is True and r["cut_rows"] == [] and r["elided"] is False
    assert r["matrix"]["NIC3"] == {"GPU0": "SYS", "GPU1": "SYS", "GPU2": "NODE", "GPU3": "NODE",
                                   "NIC0": "SYS", "NIC1": "SYS", "NIC2": "PIX", "NIC3": "X"}
    assert r["affinity"]["GPU2"] == {"cpu_affinity": "32-63", "numa_affinity": "1", "gpu_numa_id": None}
    assert r["nic_legend"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1", "NIC2": "mlx5_2", "NIC3": "mlx5_3"}
    r2 = parse("nvidia-smi-topo", fixture_text("nvidia-smi/topo-m-2gpu-2nic-prompt-line-stelline.txt"))
    assert r2["matrix"]["GPU0"] == {"GPU0": "X", "GPU1": "PHB", "NIC0": "NODE", "NIC1": "NODE"}
    assert r2["matrix"]["NIC1"]["NIC0"] == "PIX" and r2["devices"][3]["nic_name"] == "mlx5_1"


def test_topo_header_without_leading_whitespace(fixture_text):
    text = fixture_text(
        "nvidia-smi/topo-m-4xrtx6000ada-4nic-header-leading-space-cut-from-stelline-constructed.txt"
    )
    assert text.startswith("GPU0")
    r = parse("nvidia-smi-topo", text)
    assert len(r["devices"]) == 8 and r["header_complete"] is True
    assert r["matrix"]["NIC0"]["NIC1"] == "PIX" and r["matrix"]["GPU3"]["NIC3"] == "NODE"
    assert r["affinity"]["GPU3"]["cpu_affinity"] == "32-63"


def test_topo_lines_cut_by_terminal_width_keeps_nic_rows(fixture_text):
    r = parse("nvidia-smi-topo",
              fixture_text("nvidia-smi/"
                           "topo-mp-8xH100-12NIC-lines-cut-at-96-columns-from-deepep397-constructed.txt"))
    names = [d["name"] for d in r["devices"]]
    assert names == [f"GPU{i}" for i in range(8)] + [f"NIC{i}" for i in range(12)]  # from the row labels
    assert r["header_complete"] is False and len(r["cut_rows"]) == 20
    # what survived the cut is read, what was cut is absent (never guessed)
    assert r["matrix"]["NIC11"] == {
        "GPU0": "SYS",
        "GPU1": "SYS",
        "GPU2": "SYS",
        "GPU3": "SYS",
        "GPU4": "NODE",
        "GPU5": "NODE",
        "GPU6": "NODE",
        "GPU7": "PIX",
        "NIC0": "SYS",
        "NIC1": "SYS",
        "NIC2": "SYS",
    }
    assert "NIC11" not in r["matrix"]["GPU7"] and r["matrix"]["GPU0"]["NIC0"] == "PIX"
    assert r["affinity"]["GPU0"] == {}
    assert r["devices"][-1] == {"name": "NIC11", "kind": "nic", "nic_name": "mlx5_11"}


def test_topo_short_row_under_complete_header_is_truncation(fixture_text):
    text = fixture_text("nvidia-smi/topo-m-4xrtx6000ada-4nic-stelline.txt").replace(
        "NIC3    SYS     SYS     NODE    NODE    SYS     SYS     PIX      X", "NIC3    SYS     SYS")
    with pytest.raises(ParseError, match="fewer cells"):
        parse("nvidia-smi-topo", text)


# --- issue 21.12: topo -p2p r|w|n|a matrices

def test_topo_p2p_field_report_all_ns_elided_gpud(fixture_text):
    r = parse(
        "nvidia-smi-topo-p2p", fixture_text("nvidia-smi/topo-p2p-n-8xh100-all-NS-elided-gpud-comment.txt")
    )
    assert r["devices"] == [f"GPU{i}" for i in range(8)] and r["elided"] is True
    assert set(r["matrix"]) == {"GPU0", "GPU7"}
    assert r["matrix"]["GPU7"]["GPU0"] == "NS" and r["matrix"]["GPU7"]["GPU7"] == "X"
    assert r["all_ok"] is False and r["ok_pairs"] == 0 and r["pair_count"] == 14
    assert r["meaning"] == {"NS": "Not supported", "X": "Self"} and r["legend"] == {}


def test_topo_p2p_two_gpus_ok_gpud(fixture_text):
    r = parse("nvidia-smi-topo-p2p", fixture_text("nvidia-smi/topo-p2p-n-2gpu-ok-gpud-comment.txt"))
    assert r["matrix"] == {"GPU0": {"GPU0": "X", "GPU1": "OK"}, "GPU1": {"GPU0": "OK", "GPU1": "X"}}
    assert (r["all_ok"], r["ok_pairs"], r["not_ok"]) == (True, 2, [])


def test_topo_p2p_cns_with_printed_legend(fixture_text):
    r = parse(
        "nvidia-smi-topo-p2p",
        fixture_text("nvidia-smi/topo-p2p-r-4gpu-cns-across-root-ports-constructed.txt"),
    )
    assert r["matrix"]["GPU0"] == {"GPU0": "X", "GPU1": "OK", "GPU2": "CNS", "GPU3": "CNS"}
    assert r["legend"]["TNS"] == "Topology not supported" and r["meaning"]["CNS"] == "Chipset not supported"
    assert (
        r["ok_pairs"] == 4 and r["pair_count"] == 12 and "GPU3-GPU1" in r["not_ok"] and r["all_ok"] is False
    )


def test_topo_p2p_single_gpu_and_refusals(fixture_text):
    r = parse("nvidia-smi-topo-p2p", "\tGPU0\n GPU0\tX\t\n\nLegend:\n\n  X    = Self\n")
    assert r["all_ok"] is None and r["pair_count"] == 0
    na_cell = parse("nvidia-smi-topo-p2p", "\tGPU0\tGPU1\n GPU0\tX\tN/A\n GPU1\tN/A\tX\n")
    assert na_cell["matrix"]["GPU0"]["GPU1"] is None and na_cell["all_ok"] is False
    with pytest.raises(ParseError, match="not a P2P status matrix"):
        parse("nvidia-smi-topo-p2p", fixture_text("nvidia-smi/topo-m-4xrtx6000ada-4nic-stelline.txt"))
    with pytest.raises(ParseError, match="Option -m is missing"):
        parse("nvidia-smi-topo-p2p", fixture_text("nvidia-smi/topo-m-rtx2080s-591-windows-error.txt"))


# --- issue 21.10: nvidia-smi nvlink -e error counters (constructed fixtures: no copyable capture found)


def test_nvlink_errors_classic_counters(fixture_text):
    r = parse("nvidia-smi-nvlink-errors", fixture_text("nvidia-smi/nvlink-e-h100-replay-crc-constructed.txt"))
    g0, g1, g2 = r["gpus"]
    assert (g0["index"], g0["name"], g0["uuid"]) == (
        0,
        "NVIDIA H100 80GB HBM3",
        "GPU-5e7a3c1d-0b4f-4c8e-9d2a-71f0c3b5e812",
    )
    assert g0["links"][2] == {
        "link": 2,
        "counters": {"replay_errors": 17, "recovery_errors": 1, "crc_errors": 412},
    }
    assert g0["totals"] == {"crc_errors": 412, "recovery_errors": 1, "replay_errors": 17}
    # an N/A counter is None, and a total over it is not a good number
    assert g1["links"][1]["counters"]["crc_errors"] is None and g1["totals"]["crc_errors"] is None
    assert g1["totals"]["replay_errors"] == 0
    assert g2["status"] == "all_links_inactive" and g2["links"] == []
    assert r["counter_names"]["crc_errors"] == "CRC Errors"


def test_nvlink_errors_gb200_bus_id_headers_and_ber(fixture_text):
    r = parse(
        "nvidia-smi-nvlink-errors",
        fixture_text("nvidia-smi/nvlink-e-gb200-extended-counters-constructed.txt"),
    )
    (g,) = r["gpus"]
    assert g["bus_id"] == "00000008:01:00.0" and g["name"] is None and len(g["links"]) == 2
    link1 = g["links"][1]["counters"]
    assert (
        link1["rx_errors"] == 2 and link1["local_link_integrity_errors"] == 1 and link1["symbol_errors"] == 37
    )
    assert link1["effective_ber"] == 2.0e-13 and link1["symbol_ber"] is None
    assert link1["fec_errors_0"] == 3104 and r["counter_names"]["fec_errors_0"] == "FEC Errors - 0"
    assert g["totals"]["effective_errors"] == 5 and g["totals"]["effective_ber"] is None


def test_nvlink_errors_and_status_outputs_are_not_confused(fixture_text):
    with pytest.raises(ParseError, match="nvlink -s output"):
        parse("nvidia-smi-nvlink-errors", fixture_text("nvidia-smi/nvlink-s-h100-590.txt"))
    with pytest.raises(ParseError, match="Replay Errors"):
        parse("nvidia-smi-nvlink", fixture_text("nvidia-smi/nvlink-e-h100-replay-crc-constructed.txt"))
    r = parse("nvidia-smi-nvlink-errors", fixture_text("nvidia-smi/nvlink-s-l40s-595.txt"))
    assert r["gpus"][0]["status"] == "not_supported" and r["gpus"][0]["links"] == []
