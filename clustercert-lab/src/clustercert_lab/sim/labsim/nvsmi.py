"""Simulated ``nvidia-smi`` (driver branch 570 output formats), values from hw.json."""

from __future__ import annotations

import time

from . import common

NA = "N/A"


def _now() -> time.struct_time:
    return time.localtime()


def _escape(text: str) -> str:
    """XML text: html.escape(text, quote=False) (the html package imports re and its entity table;
    xml.sax.saxutils urllib and email: most of this tool's start-up)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _ctime(t: time.struct_time) -> str:
    return time.strftime("%a %b ", t) + str(t.tm_mday) + time.strftime(" %H:%M:%S %Y", t)


def _bus_short(bus_id: str) -> str:
    return bus_id  # nvidia-smi prints the 8-digit domain form everywhere in these outputs


def _used_mib(g: dict) -> int:
    return int(g["memory"]["used_mib"])


def _perf_state(g: dict) -> str:
    return "P0"


def _gpu_util(g: dict) -> int:
    """utilization.gpu: the share of the last sample period a kernel ran. A GPU claimed by a running
    simulated workload (all_reduce_perf) is busy the whole time, any other is idle."""
    return 100 if g["index"] in common.busy_gpus() else 0


def _active_links(g: dict) -> int:
    return g["nvlink"]["links"] - len(set(g["nvlink"].get("down", [])))


# ---------------------------------------------------------------- default table (nvidia-smi)

def table(hw: dict, gpus: list[dict]) -> str:
    t = _now()
    drv = common.loaded_driver_version() or hw["driver"]["version"]
    cuda = hw["driver"]["cuda"]
    pm = "On" if common.persistence_on() else "Off"
    border = "+" + "-" * 89 + "+"
    sep = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    lines = [_ctime(t) + "       ", border,
             f"| NVIDIA-SMI {drv:<22} Driver Version: {drv:<14} CUDA Version: {cuda:<9}|",
             "|" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+",
             "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
             "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
             "|                                         |                        |               MIG M. |",
             "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|"]
    for g in gpus:
        vol = g["ecc"]["volatile"]
        ecc = str(vol["dram_uncorrectable"] + vol["sram_uncorrectable_secded"]
                  + vol["sram_uncorrectable_parity"])
        name = g["name"]
        if len(name) > 29:
            name = name[:26] + "..."
        lines.append(f"|{g['index']:>4}  {name:<29}{pm:>4}  |{_bus_short(g['bus_id']):>19} {'Off':<3} "
                     f"|{ecc:>21} |")
        pw = str(int(round(g["power_draw_w"])))
        lines.append(f"| N/A   {g['temperature_c']:>2}C    {_perf_state(g):<2}{pw:>15}W "
                     f"/{g['power_limit_w']:>5}W "
                     f"|{_used_mib(g):>8}MiB / {g['memory']['total_mib']:>6}MiB "
                     f"|{_gpu_util(g):>7}%{'Default':>13} |")
        lines.append("|" + " " * 41 + "|" + " " * 24 + "|" + f"{'Disabled':>21} |")
        lines.append(sep)
    lines += ["", border,
              "| Processes:                                                                              |",
              "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |",
              "|        ID   ID                                                               Usage      |",
              "|" + "=" * 89 + "|",
              "|  No running processes found                                                             |",
              border]
    return "\n".join(lines) + "\n"


def list_gpus(gpus: list[dict]) -> str:
    return "".join(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})\n" for g in gpus)


# ---------------------------------------------------------------- nvidia-smi -q (text)

def _throttle_map(g: dict) -> tuple[list[tuple[str, str, int]], set[str]]:
    active = set(g.get("throttle", []))
    return [
        ("Idle", "gpu_idle", 1), ("Applications Clocks Setting", "applications_clocks_setting", 1),
        ("SW Power Cap", "sw_power_cap", 1), ("HW Slowdown", "hw_slowdown", 1),
        ("HW Thermal Slowdown", "hw_thermal_slowdown", 2),
        ("HW Power Brake Slowdown", "hw_power_brake_slowdown", 2),
        ("Sync Boost", "sync_boost", 1), ("SW Thermal Slowdown", "sw_thermal_slowdown", 1),
        ("Display Clock Setting", "display_clocks_setting", 1),
    ], active


def _yn(b: bool) -> str:
    return "Yes" if b else "No"


def _clock_events(g: dict) -> list[tuple[str, str, int, bool]]:
    """(label, key, -q indent level, active) of every clocks event reason; hw_slowdown is on with any HW
    slowdown, gpu_idle when nothing else is."""
    names, active = _throttle_map(g)
    hw_slow = bool(active & {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})
    return [(label, key, lvl,
             key in active or (key == "hw_slowdown" and hw_slow) or (key == "gpu_idle" and not active))
            for label, key, lvl in names]


class _TextLog:
    """``nvidia-smi -q`` lines: ``key : value`` with four spaces an indent level, blank lines, headings."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str, str | None]] = []

    def kv(self, level: int, key: str, value=None) -> None:
        self.rows.append((level, key, None if value is None else str(value)))

    def blank(self) -> None:
        self.rows.append((-1, "", None))

    def heading(self, text: str) -> None:
        self.rows.append((-2, text, None))

    def text(self) -> str:
        out = ["", "==============NVSMI LOG==============", ""]
        for level, key, value in self.rows:
            if level == -1:
                out.append("")
                continue
            if level == -2:
                out.append(key)
                continue
            text = "    " * level + key
            out.append(text if value is None else f"{text:<42}: {value}")
        return "\n".join(out) + "\n"


def q_text(hw: dict, gpus: list[dict]) -> str:
    drv = common.loaded_driver_version() or hw["driver"]["version"]
    pm = "Enabled" if common.persistence_on() else "Disabled"
    log = _TextLog()
    log.kv(0, "Timestamp", _ctime(_now()))
    log.kv(0, "Driver Version", drv)
    log.kv(0, "CUDA Version", hw["driver"]["cuda"])
    log.blank()
    log.kv(0, "Attached GPUs", len(gpus))
    for g in gpus:
        log.heading("GPU " + g["bus_id"])
        _text_identity(log, g, drv, pm)
        _text_pci(log, g)
        _text_performance(log, g)
        _text_memory(log, g)
        _text_pages(log, g)
        _text_power(log, g)
        _text_clocks(log, g)
        _text_fabric(log, hw, g)
        log.blank()
    return log.text()


def _text_identity(log: _TextLog, g: dict, drv: str, pm: str) -> None:
    """Product, modes, serial and UUID, board and part numbers, reset status, GSP firmware."""
    kv = log.kv
    kv(1, "Product Name", g["name"])
    kv(1, "Product Brand", "NVIDIA")
    kv(1, "Product Architecture", g["architecture"])
    kv(1, "Display Mode", "Disabled")
    kv(1, "Display Active", "Disabled")
    kv(1, "Persistence Mode", pm)
    kv(1, "Addressing Mode", "None")
    kv(1, "MIG Mode")
    kv(2, "Current", "Disabled")
    kv(2, "Pending", "Disabled")
    kv(1, "Accounting Mode", "Disabled")
    kv(1, "Accounting Mode Buffer Size", 4000)
    kv(1, "Driver Model")
    kv(2, "Current", NA)
    kv(2, "Pending", NA)
    kv(1, "Serial Number", g["serial"])
    kv(1, "GPU UUID", g["uuid"])
    kv(1, "Minor Number", g["minor_number"])
    kv(1, "VBIOS Version", g["vbios_version"])
    kv(1, "MultiGPU Board", "No")
    kv(1, "Board ID", g["board_id"])
    kv(1, "Board Part Number", g["board_part_number"])
    kv(1, "GPU Part Number", g["gpu_part_number"])
    kv(1, "FRU Part Number", NA)
    kv(1, "Module ID", g["module_id"])
    kv(1, "GPU Reset Status")
    kv(2, "Reset Required", "No")
    kv(2, "Drain and Reset Recommended", "No")
    kv(1, "GSP Firmware Version", drv)


def _text_pci(log: _TextLog, g: dict) -> None:
    """PCI: bus, ids, link generation and width, replays."""
    kv = log.kv
    kv(1, "PCI")
    bus = g["bus_id"].split(":")
    kv(2, "Bus", "0x" + bus[1])
    kv(2, "Device", "0x00")
    kv(2, "Domain", "0x0000")
    kv(2, "Device Id", g["pci_device_id"])
    kv(2, "Bus Id", g["bus_id"])
    kv(2, "Sub System Id", g["pci_sub_system_id"])
    kv(2, "GPU Link Info")
    kv(3, "PCIe Generation")
    p = g["pcie"]
    kv(4, "Max", p["gen_max"])
    kv(4, "Current", p["gen_current"])
    kv(4, "Device Current", p["gen_current"])
    kv(4, "Device Max", p["gen_max"])
    kv(4, "Host Max", p["gen_max"])
    kv(3, "Link Width")
    kv(4, "Max", f"{p['width_max']}x")
    kv(4, "Current", f"{p['width_current']}x")
    kv(2, "Replays Since Reset", p.get("replays", 0))
    kv(2, "Replay Number Rollovers", 0)


def _text_performance(log: _TextLog, g: dict) -> None:
    """Fan, performance state and the clocks event reasons (throttling)."""
    log.kv(1, "Fan Speed", NA)
    log.kv(1, "Performance State", _perf_state(g))
    log.kv(1, "Clocks Event Reasons")
    for label, _key, lvl, on in _clock_events(g):
        log.kv(lvl + 1 if lvl == 2 else 2, label, "Active" if on else "Not Active")


def _text_memory(log: _TextLog, g: dict) -> None:
    """Framebuffer use, compute mode, utilisation, ECC mode and error counters."""
    kv = log.kv
    kv(1, "FB Memory Usage")
    m = g["memory"]
    kv(2, "Total", f"{m['total_mib']} MiB")
    kv(2, "Reserved", f"{m['reserved_mib']} MiB")
    kv(2, "Used", f"{m['used_mib']} MiB")
    kv(2, "Free", f"{m['total_mib'] - m['reserved_mib'] - m['used_mib']} MiB")
    kv(1, "Compute Mode", "Default")
    kv(1, "Utilization")
    kv(2, "Gpu", f"{_gpu_util(g)} %")
    kv(2, "Memory", "0 %")
    kv(1, "ECC Mode")
    kv(2, "Current", g["ecc"]["mode"])
    kv(2, "Pending", g["ecc"]["mode"])
    kv(1, "ECC Errors")
    for scope, label in (("volatile", "Volatile"), ("aggregate", "Aggregate")):
        e = g["ecc"][scope]
        kv(2, label)
        kv(3, "SRAM Correctable", e["sram_correctable"])
        kv(3, "SRAM Uncorrectable Parity", e["sram_uncorrectable_parity"])
        kv(3, "SRAM Uncorrectable SEC-DED", e["sram_uncorrectable_secded"])
        kv(3, "DRAM Correctable", e["dram_correctable"])
        kv(3, "DRAM Uncorrectable", e["dram_uncorrectable"])
        if scope == "aggregate":
            kv(3, "SRAM Threshold Exceeded", "No")


def _text_pages(log: _TextLog, g: dict) -> None:
    """Retired pages and remapped rows."""
    kv = log.kv
    kv(1, "Retired Pages")
    kv(2, "Single Bit ECC", NA)
    kv(2, "Double Bit ECC", NA)
    kv(2, "Pending Page Blacklist", NA)
    rr = g["remapped_rows"]
    kv(1, "Remapped Rows")
    kv(2, "Correctable Error", rr["correctable"])
    kv(2, "Uncorrectable Error", rr["uncorrectable"])
    kv(2, "Pending", _yn(rr["pending"]))
    kv(2, "Remapping Failure Occurred", _yn(rr["failure"]))
    kv(2, "Bank Remap Availability Histogram")
    used = rr["correctable"] + rr["uncorrectable"]
    kv(3, "Max", f"{rr['histogram_max'] - used} bank(s)")
    kv(3, "High", f"{used} bank(s)")
    kv(3, "Partial", "0 bank(s)")
    kv(3, "Low", "0 bank(s)")
    kv(3, "None", "0 bank(s)")


def _text_power(log: _TextLog, g: dict) -> None:
    """Temperatures and power readings."""
    kv = log.kv
    kv(1, "Temperature")
    kv(2, "GPU Current Temp", f"{g['temperature_c']} C")
    kv(2, "GPU T.Limit Temp", f"{max(0, 87 - g['temperature_c'])} C")
    kv(2, "Memory Current Temp", f"{g['memory_temperature_c']} C")
    kv(1, "GPU Power Readings")
    kv(2, "Power Draw", f"{g['power_draw_w']:.2f} W")
    kv(2, "Current Power Limit", f"{g['power_limit_w']:.2f} W")
    kv(2, "Requested Power Limit", f"{g['power_limit_w']:.2f} W")
    kv(2, "Default Power Limit", f"{g['power_limit_w']:.2f} W")
    kv(2, "Min Power Limit", "200.00 W")
    kv(2, "Max Power Limit", f"{g['power_limit_w']:.2f} W")


def _text_clocks(log: _TextLog, g: dict) -> None:
    """Current and maximum clocks."""
    kv = log.kv
    c = g["clocks"]
    kv(1, "Clocks")
    kv(2, "Graphics", f"{c['graphics_mhz']} MHz")
    kv(2, "SM", f"{c['sm_mhz']} MHz")
    kv(2, "Memory", f"{c['memory_mhz']} MHz")
    kv(2, "Video", f"{c['video_mhz']} MHz")
    kv(1, "Max Clocks")
    kv(2, "Graphics", f"{c['max_graphics_mhz']} MHz")
    kv(2, "SM", f"{c['max_graphics_mhz']} MHz")
    kv(2, "Memory", f"{c['max_memory_mhz']} MHz")
    kv(2, "Video", "1545 MHz")


def _text_fabric(log: _TextLog, hw: dict, g: dict) -> None:
    """The NVLink fabric's state (fabric manager) and the processes."""
    fs = common.fabric_state(hw, g)
    log.kv(1, "Fabric")
    log.kv(2, "State", fs)
    log.kv(2, "Status", common.fabric_status(hw, g, fs))
    log.kv(1, "Processes", "None")


# ---------------------------------------------------------------- nvidia-smi -q -x (XML, DTD v12)

class _XmlLog:
    """``nvidia-smi -q -x`` lines: one element a line, a tab an indent level."""

    def __init__(self) -> None:
        self.lines: list[str] = ['<?xml version="1.0" ?>',
                                 '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">',
                                 "<nvidia_smi_log>"]

    def el(self, depth: int, tag: str, value=None, attrs: str = "") -> None:
        """``<tag>value</tag>``, or an opening ``<tag>`` when there is no value."""
        ind = "\t" * depth
        if value is None:
            self.lines.append(f"{ind}<{tag}{attrs}>")
        else:
            self.lines.append(f"{ind}<{tag}{attrs}>{_escape(str(value))}</{tag}>")

    def close(self, depth: int, tag: str) -> None:
        self.lines.append("\t" * depth + f"</{tag}>")

    def text(self) -> str:
        return "\n".join([*self.lines, "</nvidia_smi_log>"]) + "\n"


def q_xml(hw: dict, gpus: list[dict]) -> str:
    drv = common.loaded_driver_version() or hw["driver"]["version"]
    pm = "Enabled" if common.persistence_on() else "Disabled"
    x = _XmlLog()
    x.el(1, "timestamp", _ctime(_now()))
    x.el(1, "driver_version", drv)
    x.el(1, "cuda_version", hw["driver"]["cuda"])
    x.el(1, "attached_gpus", len(gpus))
    for g in gpus:
        x.el(1, "gpu", attrs=f' id="{g["bus_id"]}"')
        _xml_identity(x, g, drv, pm)
        _xml_pci(x, g)
        _xml_performance(x, g)
        _xml_memory(x, g)
        _xml_pages(x, g)
        _xml_power(x, g)
        _xml_clocks(x, g)
        _xml_fabric(x, hw, g)
        x.close(1, "gpu")
        x.lines.append("")
    return x.text()


def _xml_identity(x: _XmlLog, g: dict, drv: str, pm: str) -> None:
    """Product, modes, serial and UUID, board and part numbers, platform, reset status, GSP firmware."""
    el, close = x.el, x.close
    el(2, "product_name", g["name"])
    el(2, "product_brand", "NVIDIA")
    el(2, "product_architecture", g["architecture"])
    el(2, "display_mode", "Disabled")
    el(2, "display_active", "Disabled")
    el(2, "persistence_mode", pm)
    el(2, "addressing_mode", "None")
    el(2, "mig_mode")
    el(3, "current_mig", "Disabled")
    el(3, "pending_mig", "Disabled")
    close(2, "mig_mode")
    el(2, "mig_devices")
    x.lines.append("\t\t\tNone")
    close(2, "mig_devices")
    el(2, "accounting_mode", "Disabled")
    el(2, "accounting_mode_buffer_size", 4000)
    el(2, "driver_model")
    el(3, "current_dm", NA)
    el(3, "pending_dm", NA)
    close(2, "driver_model")
    el(2, "serial", g["serial"])
    el(2, "uuid", g["uuid"])
    el(2, "minor_number", g["minor_number"])
    el(2, "vbios_version", g["vbios_version"])
    el(2, "multigpu_board", "No")
    el(2, "board_id", g["board_id"])
    el(2, "board_part_number", g["board_part_number"])
    el(2, "gpu_part_number", g["gpu_part_number"])
    el(2, "gpu_fru_part_number", NA)
    el(2, "platformInfo")
    for k in ("chassis_serial_number", "slot_number", "tray_index", "host_id", "peer_type"):
        el(3, k, NA)
    el(3, "module_id", g["module_id"])
    el(3, "gpu_fabric_guid", NA)
    close(2, "platformInfo")
    el(2, "gpu_reset_status")
    el(3, "reset_required", "No")
    el(3, "drain_and_reset_recommended", "No")
    close(2, "gpu_reset_status")
    el(2, "gpu_recovery_action", "None")
    el(2, "gsp_firmware_version", drv)


def _xml_pci(x: _XmlLog, g: dict) -> None:
    """pci: bus, ids, link generation and width, replays."""
    el, close = x.el, x.close
    bus = g["bus_id"].split(":")
    p = g["pcie"]
    el(2, "pci")
    el(3, "pci_bus", bus[1])
    el(3, "pci_device", "00")
    el(3, "pci_domain", "0000")
    el(3, "pci_base_class", 3)
    el(3, "pci_sub_class", 2)
    el(3, "pci_device_id", g["pci_device_id"][2:])
    el(3, "pci_bus_id", g["bus_id"])
    el(3, "pci_sub_system_id", g["pci_sub_system_id"][2:])
    el(3, "pci_gpu_link_info")
    el(4, "pcie_gen")
    el(5, "max_link_gen", p["gen_max"])
    el(5, "current_link_gen", p["gen_current"])
    el(5, "device_current_link_gen", p["gen_current"])
    el(5, "max_device_link_gen", p["gen_max"])
    el(5, "max_host_link_gen", p["gen_max"])
    close(4, "pcie_gen")
    el(4, "link_widths")
    el(5, "max_link_width", f"{p['width_max']}x")
    el(5, "current_link_width", f"{p['width_current']}x")
    close(4, "link_widths")
    close(3, "pci_gpu_link_info")
    el(3, "replay_counter", p.get("replays", 0))
    el(3, "replay_rollover_counter", 0)
    close(2, "pci")


def _xml_performance(x: _XmlLog, g: dict) -> None:
    """Fan, performance state and the clocks event reasons (throttling)."""
    x.el(2, "fan_speed", NA)
    x.el(2, "performance_state", _perf_state(g))
    x.el(2, "clocks_event_reasons")
    for _label, key, _lvl, on in _clock_events(g):
        x.el(3, f"clocks_event_reason_{key}", "Active" if on else "Not Active")
    x.close(2, "clocks_event_reasons")


def _xml_memory(x: _XmlLog, g: dict) -> None:
    """Framebuffer use, compute mode, utilisation, ECC mode and error counters."""
    el, close = x.el, x.close
    m = g["memory"]
    el(2, "fb_memory_usage")
    el(3, "total", f"{m['total_mib']} MiB")
    el(3, "reserved", f"{m['reserved_mib']} MiB")
    el(3, "used", f"{m['used_mib']} MiB")
    el(3, "free", f"{m['total_mib'] - m['reserved_mib'] - m['used_mib']} MiB")
    close(2, "fb_memory_usage")
    el(2, "compute_mode", "Default")
    el(2, "utilization")
    el(3, "gpu_util", f"{_gpu_util(g)} %")
    el(3, "memory_util", "0 %")
    close(2, "utilization")
    el(2, "ecc_mode")
    el(3, "current_ecc", g["ecc"]["mode"])
    el(3, "pending_ecc", g["ecc"]["mode"])
    close(2, "ecc_mode")
    el(2, "ecc_errors")
    for scope in ("volatile", "aggregate"):
        e = g["ecc"][scope]
        el(3, scope)
        el(4, "sram_correctable", e["sram_correctable"])
        el(4, "sram_uncorrectable_parity", e["sram_uncorrectable_parity"])
        el(4, "sram_uncorrectable_secded", e["sram_uncorrectable_secded"])
        el(4, "dram_correctable", e["dram_correctable"])
        el(4, "dram_uncorrectable", e["dram_uncorrectable"])
        if scope == "aggregate":
            el(4, "sram_threshold_exceeded", "No")
        close(3, scope)
    close(2, "ecc_errors")


def _xml_pages(x: _XmlLog, g: dict) -> None:
    """Retired pages and remapped rows."""
    el, close = x.el, x.close
    el(2, "retired_pages")
    el(3, "multiple_single_bit_retirement")
    el(4, "retired_count", NA)
    el(4, "retired_pagelist", NA)
    close(3, "multiple_single_bit_retirement")
    el(3, "double_bit_retirement")
    el(4, "retired_count", NA)
    el(4, "retired_pagelist", NA)
    close(3, "double_bit_retirement")
    el(3, "pending_blacklist", NA)
    el(3, "pending_retirement", NA)
    close(2, "retired_pages")
    rr = g["remapped_rows"]
    used = rr["correctable"] + rr["uncorrectable"]
    el(2, "remapped_rows")
    el(3, "remapped_row_corr", rr["correctable"])
    el(3, "remapped_row_unc", rr["uncorrectable"])
    el(3, "remapped_row_pending", _yn(rr["pending"]))
    el(3, "remapped_row_failure", _yn(rr["failure"]))
    el(3, "row_remapper_histogram")
    el(4, "row_remapper_histogram_max", f"{rr['histogram_max'] - used} bank(s)")
    el(4, "row_remapper_histogram_high", f"{used} bank(s)")
    el(4, "row_remapper_histogram_partial", "0 bank(s)")
    el(4, "row_remapper_histogram_low", "0 bank(s)")
    el(4, "row_remapper_histogram_none", "0 bank(s)")
    close(3, "row_remapper_histogram")
    close(2, "remapped_rows")


def _xml_power(x: _XmlLog, g: dict) -> None:
    """Temperatures and power readings."""
    el, close = x.el, x.close
    el(2, "temperature")
    el(3, "gpu_temp", f"{g['temperature_c']} C")
    el(3, "gpu_temp_tlimit", f"{max(0, 87 - g['temperature_c'])} C")
    el(3, "memory_temp", f"{g['memory_temperature_c']} C")
    close(2, "temperature")
    el(2, "gpu_power_readings")
    el(3, "power_state", _perf_state(g))
    el(3, "average_power_draw", f"{g['power_draw_w']:.2f} W")
    el(3, "instant_power_draw", f"{g['power_draw_w']:.2f} W")
    el(3, "current_power_limit", f"{g['power_limit_w']:.2f} W")
    el(3, "default_power_limit", f"{g['power_limit_w']:.2f} W")
    el(3, "max_power_limit", f"{g['power_limit_w']:.2f} W")
    close(2, "gpu_power_readings")


def _xml_clocks(x: _XmlLog, g: dict) -> None:
    """Current and maximum clocks."""
    el, close = x.el, x.close
    c = g["clocks"]
    el(2, "clocks")
    el(3, "graphics_clock", f"{c['graphics_mhz']} MHz")
    el(3, "sm_clock", f"{c['sm_mhz']} MHz")
    el(3, "mem_clock", f"{c['memory_mhz']} MHz")
    el(3, "video_clock", f"{c['video_mhz']} MHz")
    close(2, "clocks")
    el(2, "max_clocks")
    el(3, "graphics_clock", f"{c['max_graphics_mhz']} MHz")
    el(3, "sm_clock", f"{c['max_graphics_mhz']} MHz")
    el(3, "mem_clock", f"{c['max_memory_mhz']} MHz")
    el(3, "video_clock", "1545 MHz")
    close(2, "max_clocks")


def _xml_fabric(x: _XmlLog, hw: dict, g: dict) -> None:
    """The NVLink fabric's state (fabric manager) and the process lists."""
    el, close = x.el, x.close
    fs = common.fabric_state(hw, g)
    el(2, "fabric")
    el(3, "state", fs)
    el(3, "status", common.fabric_status(hw, g, fs))
    el(3, "cliqueId", 0 if fs == "Completed" else NA)
    el(3, "clusterUuid", NA)
    close(2, "fabric")
    el(2, "processes")
    close(2, "processes")
    el(2, "accounted_processes")
    close(2, "accounted_processes")


# ---------------------------------------------------------------- --query-gpu=... --format=csv

ALIASES = {
    "gpu_name": "name", "gpu_bus_id": "pci.bus_id", "gpu_serial": "serial", "gpu_uuid": "uuid",
    "persistence_mode": "persistence_mode", "clocks_throttle_reasons.active": "clocks_event_reasons.active",
    "clocks.gr": "clocks.current.graphics", "clocks.sm": "clocks.current.sm",
    "clocks.mem": "clocks.current.memory",
    "clocks.max.gr": "clocks.max.graphics", "clocks.max.mem": "clocks.max.memory", "pcie.link.gen.gpucurrent":
    "pcie.link.gen.gpucurrent", "temperature.memory": "temperature.memory",
    "utilization.gpu": "utilization.gpu",
    "ecc.errors.uncorrected.volatile.total": "ecc.errors.uncorrected.volatile.total",
    "power.draw": "power.draw", "memory.total": "memory.total", "memory.used": "memory.used",
    "memory.free": "memory.free", "power.limit": "power.limit", "driver_version": "driver_version",
    "vbios_version": "vbios_version", "compute_cap": "compute_cap", "pstate": "pstate",
}

_THROTTLE_BITS = {"gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4,
                  "hw_slowdown": 0x8,
                  "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
                  "hw_power_brake_slowdown": 0x80, "display_clocks_setting": 0x100}


def _fields(hw: dict, g: dict, count: int) -> dict[str, tuple[str, str]]:
    """canonical field -> (unit shown in the header ('' if none), value with unit)."""
    drv = common.loaded_driver_version() or hw["driver"]["version"]
    e = g["ecc"]
    p = g["pcie"]
    c = g["clocks"]
    m = g["memory"]
    rr = g["remapped_rows"]
    active = set(g.get("throttle", []))
    if active & {"hw_thermal_slowdown", "hw_power_brake_slowdown"}:
        active.add("hw_slowdown")
    mask = sum(_THROTTLE_BITS[a] for a in active if a in _THROTTLE_BITS) or 0x1
    unc_v = e["volatile"]["dram_uncorrectable"] + e["volatile"]["sram_uncorrectable_parity"] + \
        e["volatile"]["sram_uncorrectable_secded"]
    unc_a = e["aggregate"]["dram_uncorrectable"] + e["aggregate"]["sram_uncorrectable_parity"] + \
        e["aggregate"]["sram_uncorrectable_secded"]
    fs = common.fabric_state(hw, g)
    f: dict[str, tuple[str, str]] = {
        "timestamp": ("", time.strftime("%Y/%m/%d %H:%M:%S.000")),
        "driver_version": ("", drv),
        "count": ("", str(count)),
        "name": ("", g["name"]),
        "serial": ("", g["serial"]),
        "uuid": ("", g["uuid"]),
        "pci.bus_id": ("", g["bus_id"]),
        "pci.domain": ("", "0x0000"),
        "pci.bus": ("", "0x" + g["bus_id"].split(":")[1]),
        "pci.device": ("", "0x00"),
        "pci.device_id": ("", g["pci_device_id"]),
        "pci.sub_device_id": ("", g["pci_sub_system_id"]),
        "pcie.link.gen.current": ("", str(p["gen_current"])),
        "pcie.link.gen.gpucurrent": ("", str(p["gen_current"])),
        "pcie.link.gen.max": ("", str(p["gen_max"])),
        "pcie.link.gen.gpumax": ("", str(p["gen_max"])),
        "pcie.link.gen.hostmax": ("", str(p["gen_max"])),
        "pcie.link.width.current": ("", str(p["width_current"])),
        "pcie.link.width.max": ("", str(p["width_max"])),
        "index": ("", str(g["index"])),
        "display_mode": ("", "Disabled"),
        "display_active": ("", "Disabled"),
        "persistence_mode": ("", "Enabled" if common.persistence_on() else "Disabled"),
        "vbios_version": ("", g["vbios_version"]),
        "fan.speed": ("%", "[N/A]"),
        "pstate": ("", _perf_state(g)),
        "clocks_event_reasons.supported": ("", "0x00000000000001FF"),
        "clocks_event_reasons.active": ("", f"0x{mask:016X}"),
        "memory.total": ("MiB", f"{m['total_mib']} MiB"),
        "memory.reserved": ("MiB", f"{m['reserved_mib']} MiB"),
        "memory.used": ("MiB", f"{m['used_mib']} MiB"),
        "memory.free": ("MiB", f"{m['total_mib'] - m['reserved_mib'] - m['used_mib']} MiB"),
        "compute_mode": ("", "Default"),
        "compute_cap": ("", g["compute_cap"]),
        "utilization.gpu": ("%", f"{_gpu_util(g)} %"),
        "utilization.memory": ("%", "0 %"),
        "ecc.mode.current": ("", g["ecc"]["mode"]),
        "ecc.mode.pending": ("", g["ecc"]["mode"]),
        "ecc.errors.corrected.volatile.total": ("", str(e["volatile"]["dram_correctable"]
                                                        + e["volatile"]["sram_correctable"])),
        "ecc.errors.corrected.aggregate.total": ("", str(e["aggregate"]["dram_correctable"]
                                                         + e["aggregate"]["sram_correctable"])),
        "ecc.errors.uncorrected.volatile.total": ("", str(unc_v)),
        "ecc.errors.uncorrected.aggregate.total": ("", str(unc_a)),
        "ecc.errors.uncorrected.volatile.dram": ("", str(e["volatile"]["dram_uncorrectable"])),
        "ecc.errors.uncorrected.aggregate.dram": ("", str(e["aggregate"]["dram_uncorrectable"])),
        "ecc.errors.corrected.volatile.dram": ("", str(e["volatile"]["dram_correctable"])),
        "ecc.errors.corrected.aggregate.dram": ("", str(e["aggregate"]["dram_correctable"])),
        "retired_pages.single_bit_ecc.count": ("", "[N/A]"),
        "retired_pages.double_bit.count": ("", "[N/A]"),
        "retired_pages.pending": ("", "[N/A]"),
        "remapped_rows.correctable": ("", str(rr["correctable"])),
        "remapped_rows.uncorrectable": ("", str(rr["uncorrectable"])),
        "remapped_rows.pending": ("", _yn(rr["pending"])),
        "remapped_rows.failure": ("", _yn(rr["failure"])),
        "temperature.gpu": ("", str(g["temperature_c"])),
        "temperature.memory": ("", str(g["memory_temperature_c"])),
        "power.draw": ("W", f"{g['power_draw_w']:.2f} W"),
        "power.limit": ("W", f"{g['power_limit_w']:.2f} W"),
        "enforced.power.limit": ("W", f"{g['power_limit_w']:.2f} W"),
        "clocks.current.graphics": ("MHz", f"{c['graphics_mhz']} MHz"),
        "clocks.current.sm": ("MHz", f"{c['sm_mhz']} MHz"),
        "clocks.current.memory": ("MHz", f"{c['memory_mhz']} MHz"),
        "clocks.max.graphics": ("MHz", f"{c['max_graphics_mhz']} MHz"),
        "clocks.max.sm": ("MHz", f"{c['max_graphics_mhz']} MHz"),
        "clocks.max.memory": ("MHz", f"{c['max_memory_mhz']} MHz"),
        "mig.mode.current": ("", "Disabled"),
        "fabric.state": ("", fs),
        "fabric.status": ("", common.fabric_status(hw, g, fs)),
    }
    for k, bit in _THROTTLE_BITS.items():
        f[f"clocks_event_reasons.{k}"] = ("", "Active" if mask & bit else "Not Active")
        f[f"clocks_throttle_reasons.{k}"] = f[f"clocks_event_reasons.{k}"]
    return f


def query_gpu(hw: dict, gpus: list[dict], fields: list[str], fmt: set[str]) -> tuple[int, str]:
    sample = _fields(hw, gpus[0], len(gpus)) if gpus else _fields(hw, hw["gpus"][0], 0)
    canon = []
    for name in fields:
        c = ALIASES.get(name, name)
        if c not in sample:
            return 2, f'Field "{name}" is not a valid field to query.\n\n'
        canon.append(c)
    lines = []
    nounits = "nounits" in fmt
    if "noheader" not in fmt:
        hdr = []
        for c in canon:
            unit = sample[c][0]
            hdr.append(c if (not unit) else f"{c} [{unit}]")
        lines.append(", ".join(hdr))
    for g in gpus:
        vals = _fields(hw, g, len(gpus))
        row = []
        for c in canon:
            unit, v = vals[c]
            if nounits and unit and v.endswith(" " + unit):
                v = v[: -len(unit) - 1]
            row.append(v)
        lines.append(", ".join(row))
    return 0, "\n".join(lines) + "\n"


# ---------------------------------------------------------------- topo -m, nvlink -s

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def topo(hw: dict, gpus: list[dict]) -> str:
    hcas = hw["hcas"]
    ngpu = len(gpus)
    cpus = {0: "0-51", 1: "52-103"}
    hdr = [f"GPU{g['index']}" for g in gpus] + [f"NIC{i}" for i in range(len(hcas))]
    lines = ["\t" + "\t".join(hdr + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])]
    near = _switch_gpus(gpus, hcas)

    def gpu_nic(g: dict, i: int) -> str:
        if near.get(i) == g["index"]:
            return "PIX"
        return "NODE" if g["numa_node"] == hcas[i]["numa_node"] else "SYS"

    for g in gpus:
        cells = []
        for o in gpus:
            if o is g:
                cells.append(" X ")
            else:
                n = min(_active_links(g), _active_links(o))
                cells.append(f"NV{n}" if n > 0 else ("NODE" if g["numa_node"] == o["numa_node"] else "SYS"))
        cells += [gpu_nic(g, i) for i in range(len(hcas))]
        cells += [cpus.get(g["numa_node"], "0-51"), str(g["numa_node"]), "", "N/A"]
        lines.append(f"GPU{g['index']}\t" + "\t".join(cells))
    for i, h in enumerate(hcas):
        cells = [gpu_nic(g, i) for g in gpus]
        for j, o in enumerate(hcas):
            cells.append(" X " if i == j else ("NODE" if h["numa_node"] == o["numa_node"] else "SYS"))
        cells += ["", "", "", ""]
        lines.append(f"NIC{i}\t" + "\t".join(cells))
    text = "\n".join(lines) + "\n" + LEGEND
    if hcas:
        text += "\nNIC Legend:\n\n" + "".join(f"  NIC{i}: {h['name']}\n" for i, h in enumerate(hcas))
    del ngpu
    return text


def _switch_gpus(gpus: list[dict], hcas: list[dict]) -> dict[int, int]:
    """HCA position -> the GPU index sharing its PCIe switch (hw.json ``switch_gpu``; a node built before it
    was recorded: the first GPU of the HCA's NUMA node that no HCA took before it)."""
    near: dict[int, int] = {}
    for i, h in enumerate(hcas):
        if "switch_gpu" in h:
            if h["switch_gpu"] is not None:
                near[i] = h["switch_gpu"]
            continue
        cand = [g["index"] for g in gpus
                if g["numa_node"] == h["numa_node"] and g["index"] not in near.values()]
        if cand:
            near[i] = cand[0]
    return near


P2P_LEGEND = """
Legend:

  X    = Self
  OK   = Status Ok
  CNS  = Chipset not supported
  GNS  = GPU not supported
  TNS  = Topology not supported
  NS   = Not supported
  U    = Unknown
"""


def topo_p2p(gpus: list[dict], cap: str) -> str:
    """``topo -p2p r|w|n|a|p``: P2P status per GPU pair. Over NVLink (both GPUs with an active link) read,
    write, atomics and NVLink are OK; without it NVLink is NS and the others go over PCIe, OK within a NUMA
    node and CNS across the host bridges (as PCIe-only P2P is on most chipsets); ``p`` (PCIe) is always
    that."""
    lines = [" \t" + "\t".join(f"GPU{g['index']}" for g in gpus) + "\t"]
    for g in gpus:
        cells = []
        for o in gpus:
            if o is g:
                cells.append("X")
                continue
            pcie = "OK" if g["numa_node"] == o["numa_node"] else "CNS"
            nvlink = _active_links(g) > 0 and _active_links(o) > 0
            if cap == "p":
                cells.append(pcie)
            elif cap == "n":
                cells.append("OK" if nvlink else "NS")
            else:
                cells.append("OK" if nvlink else pcie)
        lines.append(f" GPU{g['index']}\t" + "\t".join(cells) + "\t")
    return "\n".join(lines) + "\n" + P2P_LEGEND


NVLINK_ERROR_LABELS = (("replay", "Replay Errors"), ("recovery", "Recovery Errors"), ("crc", "CRC Errors"))


def nvlink_errors(gpus: list[dict]) -> str:
    """``nvlink -e``: per GPU, per active link, its replay, recovery and CRC error counters (hw.json
    ``nvlink.errors``; links that are down report none)."""
    out = []
    for g in gpus:
        out.append(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})")
        down = set(g["nvlink"].get("down", []))
        if len(down) >= g["nvlink"]["links"]:
            out.append("NVML: Unable to retrieve NVLink information as all links are inactive")
            continue
        errors = g["nvlink"].get("errors") or {}
        for link in range(g["nvlink"]["links"]):
            if link in down:
                continue
            counts = errors.get(str(link)) or {}
            for key, label in NVLINK_ERROR_LABELS:
                out.append(f"\t Link {link}: {label}: {int(counts.get(key, 0))}")
    return "\n".join(out) + "\n"


def nvlink_status(gpus: list[dict]) -> str:
    out = []
    for g in gpus:
        out.append(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})")
        down = set(g["nvlink"].get("down", []))
        if len(down) >= g["nvlink"]["links"]:
            out.append("NVML: Unable to retrieve NVLink information as all links are inactive")
            continue
        for link in range(g["nvlink"]["links"]):
            if link in down:
                out.append(f"\t Link {link}: <inactive>")
            else:
                out.append(f"\t Link {link}: {g['nvlink']['speed_gbyte_per_s']:.3f} GB/s")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- entry point

def _select(gpus: list[dict], ids: str | None) -> list[dict] | None:
    if ids is None:
        return gpus
    want = []
    for part in ids.split(","):
        part = part.strip()
        match = [g for g in gpus
                 if str(g["index"]) == part or g["uuid"] == part or g["bus_id"].lower() == part.lower()]
        if not match:
            return None
        want += match
    return want


def _about(argv: list[str], hw: dict) -> None:
    """--version, -h/--help."""
    if argv[0] == "--version":
        v = common.library_version(hw)
        common.out(f"NVIDIA-SMI version  : {v}\nNVML version        : {'.'.join(v.split('.')[:2])}\n"
                   f"DRIVER version      : {v}\nCUDA Version        : {hw['driver']['cuda']}\n"
                   f"# {common.BANNER}\n")
    else:
        common.out(f"NVIDIA System Management Interface -- {common.BANNER}\n")


def _driver_failure(hw: dict) -> int:
    """nvidia-smi's exit status where the driver is not loaded (9) or is not the library's version (18),
    said as it says it; 0 where it can talk to the driver."""
    loaded = common.loaded_driver_version()
    if loaded is None:
        common.out("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                   "Make sure that the latest NVIDIA driver is installed and running.\n\n")
        return 9
    lib = common.library_version(hw)
    if loaded != lib:
        common.out("Failed to initialize NVML: Driver/library version mismatch\n"
                   f"NVML library version: {'.'.join(lib.split('.')[:2])}\n")
        return 18
    return 0


def _ids(argv: list[str]) -> tuple[str | None, list[str]]:
    """(-i/--id's value, the other arguments)."""
    ids = None
    rest = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-i", "--id") and i + 1 < len(argv):
            ids = argv[i + 1]
            i += 2
            continue
        if a.startswith("--id="):
            ids = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    return ids, rest


def _topo(hw: dict, sel: list[dict], rest: list[str]) -> int:
    if len(rest) > 1 and rest[1] in ("-m", "--matrix", "-mp"):
        common.out(topo(hw, sel))
        return 0
    if len(rest) > 2 and rest[1] in ("-p2p", "--p2pstatus") and rest[2] in ("r", "w", "n", "a", "p"):
        common.out(topo_p2p(sel, rest[2]))
        return 0
    common.err("usage: nvidia-smi topo -m | -p2p r|w|n|a|p (the lab simulates these)\n")
    return 2


def _nvlink(sel: list[dict], rest: list[str]) -> int:
    if len(rest) > 1 and rest[1] in ("-s", "--status"):
        common.out(nvlink_status(sel))
        return 0
    if len(rest) > 1 and rest[1] in ("-e", "--errorcounters"):
        common.out(nvlink_errors(sel))
        return 0
    common.err("usage: nvidia-smi nvlink -s | -e (the lab simulates --status and --errorcounters)\n")
    return 2


def _persistence(sel: list[dict]) -> int:
    common.out("".join(f"Persistence mode is already Enabled for GPU {g['bus_id']}.\n" for g in sel)
               if common.persistence_on() else
               "".join(f"Enabled persistence mode for GPU {g['bus_id']}.\n" for g in sel))
    common.out("All done.\n")
    return 0


def _list(sel: list[dict]) -> int:
    common.out(list_gpus(sel))
    return 0


def _loop_seconds(a: str, nxt: str) -> float | None:
    """-l SEC / -lms MS (``nxt``: the argument after it) in seconds (5 without a value); None: not a number
    (said)."""
    raw = a.split("=", 1)[1] if "=" in a else nxt
    ms = a.startswith(("-lms", "--loop-ms"))
    try:
        return float(raw) / (1000.0 if ms else 1.0) if raw else 5.0
    except ValueError:
        common.out(f'Invalid value "{raw}" for {a.split("=")[0]}.\n')
        return None


def _queries(rest: list[str]) -> dict | None:
    """The query options among ``rest``: query (--query-gpu's fields), fmt, q, xml, loop_s; None where a
    loop interval is not a number (said)."""
    o: dict = {"query": None, "fmt": set(), "xml": False, "q": False, "loop_s": None}
    for i, a in enumerate(rest):
        if a in ("-l", "--loop", "-lms", "--loop-ms") or a.startswith(("--loop=", "--loop-ms=")):
            o["loop_s"] = _loop_seconds(a, rest[i + 1] if i + 1 < len(rest) else "")
            if o["loop_s"] is None:
                return None
        elif a.startswith("--query-gpu="):
            o["query"] = [f.strip() for f in a.split("=", 1)[1].split(",") if f.strip()]
        elif a.startswith("--format="):
            o["fmt"] = {f.strip() for f in a.split("=", 1)[1].split(",")}
        elif a in ("-q", "--query"):
            o["q"] = True
        elif a in ("-x", "--xml-format"):
            o["xml"] = True
        elif a == "-qx" or a == "-xq":
            o["q"] = o["xml"] = True
    return o


def _query(hw: dict, sel: list[dict], rest: list[str], ids: str | None) -> int:
    """--query-gpu (with -l/-lms: again and again), -q/-x."""
    o = _queries(rest)
    if o is None:
        return 2
    if o["query"] is not None:
        if "csv" not in o["fmt"]:
            common.out('"--format" must be specified when querying.\n')
            return 2
        rc, text = query_gpu(hw, sel, o["query"], o["fmt"])
        common.out(text)
        if rc != 0 or o["loop_s"] is None:
            return rc
        return _loop(o["query"], o["fmt"], ids, o["loop_s"])
    if o["q"]:
        common.out(q_xml(hw, sel) if o["xml"] else q_text(hw, sel))
        return 0
    common.err(f"Invalid combination of input arguments: {' '.join(rest)} ({common.BANNER})\n")
    return 2


def main(argv: list[str]) -> int:
    hw = common.load_hw()
    common.hang_if_configured("nvidia-smi", hw)
    if argv[:1] in (["--version"], ["-h"], ["--help"]):
        _about(argv, hw)
        return 0
    failed = _driver_failure(hw)
    if failed:
        return failed
    ids, rest = _ids(list(argv))
    sel = _select(common.present_gpus(hw), ids)
    if sel is None:
        common.out("No devices were found\n")
        return 6
    if not rest:
        common.out(table(hw, sel))
        return 0
    if rest[0] == "topo":
        return _topo(hw, sel, rest)
    if rest[0] == "nvlink":
        return _nvlink(sel, rest)
    if rest[0] in ("-pm", "--persistence-mode"):
        return _persistence(sel)
    if rest[0] in ("-L", "--list-gpus"):
        return _list(sel)
    return _query(hw, sel, rest, ids)


def _loop(query: list[str], fmt: set[str], ids: str | None, interval_s: float) -> int:
    """-l SEC / -lms MS: the query again every interval, rows only (the header is printed once),
    until the process is stopped; faults and workloads show up live."""
    fmt = fmt | {"noheader"}
    while True:
        time.sleep(max(0.01, interval_s))
        hw = common.load_hw()
        sel = _select(common.present_gpus(hw), ids) or []
        _rc, text = query_gpu(hw, sel, query, fmt)
        common.out(text)
