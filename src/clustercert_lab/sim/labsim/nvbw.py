"""Simulated nvbandwidth (v0.7-style text output) and dcgmi diag (DCGM 3.3 table)."""

from __future__ import annotations

from . import common

TESTS = {
    "host_to_device_memcpy_ce": ("memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)", "h2d"),
    "device_to_host_memcpy_ce": ("memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)", "d2h"),
    "host_to_device_bidirectional_memcpy_ce": ("memcpy CE CPU(row) <-> GPU(column) bandwidth (GB/s)", "h2d_bi"),
    "device_to_host_bidirectional_memcpy_ce": ("memcpy CE CPU(row) <-> GPU(column) bandwidth (GB/s)", "d2h_bi"),
    "device_to_device_memcpy_read_ce": ("memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)", "d2d"),
    "device_to_device_memcpy_write_ce": ("memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)", "d2d"),
    "device_to_device_bidirectional_memcpy_read_ce": ("memcpy CE GPU(row) <-> GPU(column) bandwidth (GB/s)", "d2d_bi"),
    "device_to_device_bidirectional_memcpy_write_ce": ("memcpy CE GPU(row) <-> GPU(column) bandwidth (GB/s)", "d2d_bi"),
    # one row: per GPU, what all its peers write into it / what it writes into all of them at once
    "all_to_one_write_ce": ("memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)", "a2o"),
    "one_to_all_write_ce": ("memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)", "o2a"),
}


def pcie_factor(g: dict) -> float:
    p = g["pcie"]
    return min(1.0, (2 ** (p["gen_current"] - p["gen_max"])) * (p["width_current"] / p["width_max"]))


def nvlink_factor(g: dict) -> float:
    n = g["nvlink"]["links"]
    return (n - len(set(g["nvlink"]["down"]))) / n if n else 0.0


def _value(hw: dict, kind: str, g: dict, o: dict | None) -> float | None:
    perf = hw["performance"]
    node = hw["health"].get("node_factor", 1.0)
    if kind in ("h2d", "h2d_bi"):
        v = perf["nvbandwidth_h2d_gbyte_per_s"]["value"] * pcie_factor(g)
        return v * (0.975 if kind.endswith("bi") else 1.0) * node
    if kind in ("d2h", "d2h_bi"):
        v = perf["nvbandwidth_d2h_gbyte_per_s"]["value"] * pcie_factor(g)
        return v * (0.93 if kind.endswith("bi") else 1.0) * node
    if kind in ("a2o", "o2a"):  # half the GPU's NVLink aggregate each way, by its active links
        ref = perf.get("nvlink_aggregate_gbyte_per_s", {"value": 840.0})["value"]  # hw.json of an older lab
        return ref / 2 * nvlink_factor(g) * node
    if o is None or o is g:
        return None
    f = min(nvlink_factor(g), nvlink_factor(o))
    key = "nvbandwidth_d2d_bidir_gbyte_per_s" if kind == "d2d_bi" else "nvbandwidth_d2d_gbyte_per_s"
    return perf[key]["value"] * f * node


def _matrix(hw: dict, name: str, gpus: list[dict]) -> list[str]:
    title, kind = TESTS[name]
    cols = "".join(f"{g['index']:>10}" for g in gpus)
    lines = [f"Running {name}.", title, "  " + cols]
    total = 0.0
    if kind.startswith(("h2d", "d2h", "a2o", "o2a")):
        vals = [_value(hw, kind, g, None) for g in gpus]
        total = sum(vals)
        lines.append(f"{0:>2}" + "".join(f"{v:>10.2f}" for v in vals))
    else:
        for g in gpus:
            row = []
            for o in gpus:
                v = _value(hw, kind, g, o)
                if v is None:
                    row.append(f"{'N/A':>10}")
                else:
                    total += v
                    row.append(f"{v:>10.2f}")
            lines.append(f"{g['index']:>2}" + "".join(row))
    lines += ["", f"SUM {name} {total:.2f}", ""]
    return lines


def nvbandwidth(argv: list[str]) -> int:
    hw = common.load_hw()
    common.hang_if_configured("nvbandwidth", hw)
    tests: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-t", "--testcase") and i + 1 < len(argv):
            tests += argv[i + 1].split(",") if "," in argv[i + 1] else [argv[i + 1]]
            i += 1
        elif a in ("-l", "--list"):
            common.out("".join(f"{n:>2}, {t}:\n" for n, t in enumerate(TESTS)))
            return 0
        elif a in ("-h", "--help", "--version"):
            common.out(f"nvbandwidth Version: v0.7 ({common.BANNER})\n")
            return 0
        elif not a.startswith("-"):
            tests.append(a)
        i += 1
    unknown = [t for t in tests if t not in TESTS]
    if unknown:
        common.out(f"ERROR: Testcase {unknown[0]} not found!\n")
        return 1
    if common.loaded_driver_version() is None:
        common.out("nvbandwidth Version: v0.7\nBuilt from Git version: v0.7\n\n"
                   "NOTE: This tool reports current measured bandwidth on your system.\n"
                   "Additional system-specific tuning may be required to achieve maximal peak bandwidth.\n\n"
                   "[CUDA_ERROR_NO_DEVICE] no CUDA-capable device is detected in nvbandwidth.cpp at 154\n")
        return 1
    gpus = common.present_gpus(hw)
    drv = common.loaded_driver_version()
    cuda = hw["driver"]["cuda"]
    cnum = int(cuda.split(".")[0]) * 1000 + int(cuda.split(".")[1]) * 10
    lines = ["nvbandwidth Version: v0.7", "Built from Git version: v0.7", "",
             "NOTE: This tool reports current measured bandwidth on your system.",
             "Additional system-specific tuning may be required to achieve maximal peak bandwidth.", "",
             f"CUDA Runtime Version: {cnum}", f"CUDA Driver Version: {cnum}", f"Driver Version: {drv}", ""]
    for g in gpus:
        lines.append(f"Device {g['index']}: {g['name']} ({g['bus_id'][4:]})")
    lines.append("")
    for t in tests or list(TESTS):
        lines += _matrix(hw, t, gpus)
    common.out("\n".join(lines) + "\n")
    return 0


# ---------------------------------------------------------------- dcgmi diag

def _row(name: str, result: str) -> str:
    return f"| {name:<25} | {result:<46} |"


def _wrap(msg: str, width: int = 46) -> list[str]:
    words, lines, cur = msg.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = " " + w
        else:
            cur = f"{cur} {w}" if cur else w
    if cur:
        lines.append(cur)
    return lines


def dcgmi(argv: list[str]) -> int:
    hw = common.load_hw()
    common.hang_if_configured("dcgmi", hw)
    if not argv or argv[0] in ("-v", "--version"):
        common.out(f"dcgmi  version: 3.3.9 ({common.BANNER})\n")
        return 0
    if argv[0] != "diag":
        common.err(f"dcgmi: the lab simulates 'dcgmi diag -r N' only ({common.BANNER})\n")
        return 2
    level = None
    for i, a in enumerate(argv):
        if a in ("-r", "--run") and i + 1 < len(argv):
            raw = argv[i + 1]
            level = {"quick": 1, "short": 1, "medium": 2, "long": 3, "xlong": 4}.get(raw, raw)
    try:
        level = int(level)
    except (TypeError, ValueError):
        level = 0
    if not 1 <= level <= 4:
        common.out("Error: the lab simulates the suite levels only: -r 1|2|3|4 (quick/short, medium, long, xlong) "
                   f"({common.BANNER})\n")
        return 2
    # dcgmi is a client: the diagnostics run in the host engine (nvidia-dcgm.service), which needs the driver
    if common.loaded_driver_version() is None or not common.pid_alive(common.HOSTENGINE_PID):
        common.out("Error: unable to establish a connection to the specified host: localhost\n"
                   "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n")
        return 255
    gpus = common.present_gpus(hw)
    dev_ids = ",".join(g["pci_device_id"][2:6].lower() for g in gpus)
    sep = "+---------------------------+------------------------------------------------+"
    out = ["Successfully ran diagnostic for group.", sep, "| Diagnostic                | Result                                         |",
           "+===========================+================================================+",
           "|-----  Metadata  ----------+------------------------------------------------|",
           _row("DCGM Version", "3.3.9"), _row("Driver Version Detected", common.loaded_driver_version()),
           _row("GPU Device IDs Detected", dev_ids),
           "|-----  Deployment  --------+------------------------------------------------|"]
    pm_ok = common.persistence_on()
    bad_mem = [g for g in gpus if g["remapped_rows"]["pending"] or g["remapped_rows"]["failure"]
               or g["ecc"]["volatile"]["dram_uncorrectable"] > 0]
    deploy = [("Denylist", True, None), ("NVML Library", True, None), ("CUDA Main Library", True, None),
              ("Permissions and OS Blocks", True, None),
              ("Persistence Mode", pm_ok, "Persistence mode for GPU 0 is disabled. Enable persistence mode by "
               "running \"nvidia-smi -i <gpuId> -pm 1 \" as root."),
              ("Environment Variables", True, None),
              ("Page Retirement/Row Remap", not bad_mem,
               f"GPU {bad_mem[0]['index']} has uncorrectable memory errors and row remappings are pending" if bad_mem else None),
              ("Graphics Processes", True, None), ("Inforom", True, None)]
    failed = False
    for name, ok, msg in deploy:
        out.append(_row(name, "Pass" if ok else "Fail"))
        if not ok:
            failed = True
            wrapped = _wrap(msg)
            out.append(_row("Warning", wrapped[0]))
            out += [_row("", w) for w in wrapped[1:]]
    if level >= 2:
        pcie_bad = [g["index"] for g in gpus if nvlink_factor(g) < 1.0 or pcie_factor(g) < 1.0]
        out += ["+-----  Integration  -------+------------------------------------------------+",
                _row("PCIe", "Pass - All" if not pcie_bad else "Fail - GPU: " + ", ".join(map(str, pcie_bad))),
                "+-----  Hardware  ----------+------------------------------------------------+",
                _row("GPU Memory", "Pass - All" if not bad_mem else
                     "Fail - GPU: " + ", ".join(str(g["index"]) for g in bad_mem))]
        failed = failed or bool(pcie_bad) or bool(bad_mem)
    if level >= 3:
        throttled = [g["index"] for g in gpus if g.get("throttle")]
        out += ["+-----  Stress  ------------+------------------------------------------------+",
                _row("Targeted Stress", "Pass - All"),
                _row("Targeted Power", "Pass - All" if not throttled else
                     "Fail - GPU: " + ", ".join(map(str, throttled))),
                _row("Memory Bandwidth", "Pass - All"), _row("EUD Test", "Skip - All")]
        failed = failed or bool(throttled)
    if level >= 4:
        out += [_row("Memtest", "Pass - All" if not bad_mem else
                     "Fail - GPU: " + ", ".join(str(g["index"]) for g in bad_mem)),
                _row("Pulse Test", "Pass - All")]
    out.append(sep)
    common.out("\n".join(out) + "\n")
    return 226 if failed else 0
