"""Simulated nvbandwidth (v0.7-style text output) and dcgmi: diag (the DCGM 3.3 table; -j in the JSON layout
of the installed DCGM version, 3.x or 4.x) and nvlink (--link-status, -e -g GPU [-j])."""

from __future__ import annotations

import os

from . import common

TESTS = {
    "host_to_device_memcpy_ce": ("memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)", "h2d"),
    "device_to_host_memcpy_ce": ("memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)", "d2h"),
    "host_to_device_bidirectional_memcpy_ce": ("memcpy CE CPU(row) <-> GPU(column) bandwidth (GB/s)",
                                               "h2d_bi"),
    "device_to_host_bidirectional_memcpy_ce": ("memcpy CE CPU(row) <-> GPU(column) bandwidth (GB/s)",
                                               "d2h_bi"),
    "device_to_device_memcpy_read_ce": ("memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)", "d2d"),
    "device_to_device_memcpy_write_ce": ("memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)", "d2d"),
    "device_to_device_bidirectional_memcpy_read_ce": ("memcpy CE GPU(row) <-> GPU(column) bandwidth (GB/s)",
                                                      "d2d_bi"),
    "device_to_device_bidirectional_memcpy_write_ce": ("memcpy CE GPU(row) <-> GPU(column) bandwidth (GB/s)",
                                                       "d2d_bi"),
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


def _testcases(argv: list[str]) -> list[str] | None:
    """The testcases asked (none: every one); None where --list or --help/--version printed instead."""
    tests: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-t", "--testcase") and i + 1 < len(argv):
            tests += argv[i + 1].split(",") if "," in argv[i + 1] else [argv[i + 1]]
            i += 1
        elif a in ("-l", "--list"):
            common.out("".join(f"{n:>2}, {t}:\n" for n, t in enumerate(TESTS)))
            return None
        elif a in ("-h", "--help", "--version"):
            common.out(f"nvbandwidth Version: v0.7 ({common.BANNER})\n")
            return None
        elif not a.startswith("-"):
            tests.append(a)
        i += 1
    return tests


def nvbandwidth(argv: list[str]) -> int:
    hw = common.load_hw()
    common.hang_if_configured("nvbandwidth", hw)
    tests = _testcases(argv)
    if tests is None:
        return 0
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
        if TESTS[t][1].startswith("d2d") and len(gpus) < 2:
            lines += ["Waived:", ""]  # v0.4 and later: a bare line in place of a testcase with no GPU pair
            continue
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


def dcgm_version() -> str:
    """The installed DCGM's version (the package's wrapper sets it; the lab repository carries 3.3.9)."""
    return os.environ.get("CLUSTERCERT_LAB_DCGM_VERSION") or "3.3.9"


def _engine_down() -> bool:
    # dcgmi is a client: the diagnostics run in the host engine (nvidia-dcgm.service), which needs the driver
    if common.loaded_driver_version() is None or not common.pid_alive(common.HOSTENGINE_PID):
        common.out("Error: unable to establish a connection to the specified host: localhost\n"
                   "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n")
        return True
    return False


def dcgmi(argv: list[str]) -> int:
    hw = common.load_hw()
    common.hang_if_configured("dcgmi", hw)
    if not argv or argv[0] in ("-v", "--version"):
        common.out(f"dcgmi  version: {dcgm_version()} ({common.BANNER})\n")
        return 0
    if argv[0] == "nvlink":
        return dcgmi_nvlink(hw, argv[1:])
    if argv[0] != "diag":
        common.err("dcgmi: the lab simulates 'dcgmi diag -r N [-j]' and 'dcgmi nvlink' only "
                   f"({common.BANNER})\n")
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
        common.out("Error: the lab simulates the suite levels only: -r 1|2|3|4 (quick/short, medium, long, "
                   f"xlong) ({common.BANNER})\n")
        return 2
    if _engine_down():
        return 255
    gpus = common.present_gpus(hw)
    tests = diag_tests(gpus, level)
    failed = any(r == "Fail" for _c, _n, res, _m in tests for r in res.values())
    if "-j" in argv or "--json" in argv:
        major = int(dcgm_version().split(".")[0])
        doc = _diag_json4(gpus, tests) if major >= 4 else _diag_json3(gpus, tests)
        common.out(common.dumps(doc) + "\n")
    else:
        common.out(_diag_text(gpus, tests))
    return 226 if failed else 0


def diag_tests(gpus: list[dict], level: int) -> list[tuple[str, str, dict[int, str], str | None]]:
    """The diagnostic's tests at ``level`` as (category, name, {gpu index: Pass|Fail|Skip}, warning or None):
    what the text table and both JSON layouts print. Deployment tests run once for the node (their result
    is every GPU's)."""
    idx = [g["index"] for g in gpus]

    def per_gpu(bad: list[int], fail: str = "Fail") -> dict[int, str]:
        return {i: (fail if i in bad else "Pass") for i in idx}

    pm_ok = common.persistence_on()
    bad_mem = [g["index"] for g in gpus if g["remapped_rows"]["pending"] or g["remapped_rows"]["failure"]
               or g["ecc"]["volatile"]["dram_uncorrectable"] > 0]
    first = bad_mem[0] if bad_mem else None
    tests: list[tuple[str, str, dict[int, str], str | None]] = []
    for name, ok, msg in [
            ("Denylist", True, None), ("NVML Library", True, None), ("CUDA Main Library", True, None),
            ("Permissions and OS Blocks", True, None),
            ("Persistence Mode", pm_ok, "Persistence mode for GPU 0 is disabled. Enable persistence mode by "
             "running \"nvidia-smi -i <gpuId> -pm 1 \" as root."),
            ("Environment Variables", True, None),
            ("Page Retirement/Row Remap", not bad_mem,
             f"GPU {first} has uncorrectable memory errors and row remappings are pending"),
            ("Graphics Processes", True, None), ("Inforom", True, None)]:
        tests.append(("Deployment", name, {i: ("Pass" if ok else "Fail") for i in idx}, None if ok else msg))
    if level >= 2:
        pcie_bad = [g["index"] for g in gpus if nvlink_factor(g) < 1.0 or pcie_factor(g) < 1.0]
        tests.append(("Integration", "PCIe", per_gpu(pcie_bad),
                      f"GPU {pcie_bad[0]}: PCIe/NVLink bandwidth below the expected value"
                      if pcie_bad else None))
        tests.append(("Hardware", "GPU Memory", per_gpu(bad_mem),
                      f"GPU {first} had uncorrectable memory errors and row remapping is pending"
                      if bad_mem else None))
    if level >= 3:
        throttled = [g["index"] for g in gpus if g.get("throttle")]
        tests += [("Stress", "Targeted Stress", per_gpu([]), None),
                  ("Stress", "Targeted Power", per_gpu(throttled),
                   f"GPU {throttled[0]}: clocks throttled (HW slowdown)" if throttled else None),
                  ("Stress", "Memory Bandwidth", per_gpu([]), None),
                  ("Stress", "EUD Test", per_gpu(idx, "Skip"), "EUD is not installed: skipping the test")]
    if level >= 4:
        tests += [("Stress", "Memtest", per_gpu(bad_mem), None), ("Stress", "Pulse Test", per_gpu([]), None)]
    return tests


def _diag_text(gpus: list[dict], tests) -> str:
    """The DCGM 3.3 table (``dcgmi diag -r N``)."""
    dev_ids = ",".join(g["pci_device_id"][2:6].lower() for g in gpus)
    sep = "+---------------------------+------------------------------------------------+"
    out = ["Successfully ran diagnostic for group.", sep,
           "| Diagnostic                | Result                                         |",
           "+===========================+================================================+",
           "|-----  Metadata  ----------+------------------------------------------------|",
           _row("DCGM Version", dcgm_version()),
           _row("Driver Version Detected", common.loaded_driver_version()),
           _row("GPU Device IDs Detected", dev_ids),
           "|-----  Deployment  --------+------------------------------------------------|"]
    category = "Deployment"
    for cat, name, res, msg in tests:
        if cat != category:
            out.append(f"+-----  {cat}  " + "-" * (18 - len(cat))
                       + "+------------------------------------------------+")
            category = cat
        if cat == "Deployment":
            ok = all(r == "Pass" for r in res.values())
            out.append(_row(name, "Pass" if ok else "Fail"))
            if not ok:
                wrapped = _wrap(msg)
                out.append(_row("Warning", wrapped[0]))
                out += [_row("", w) for w in wrapped[1:]]
            continue
        worst = next((r for r in ("Fail", "Skip") if r in res.values()), "Pass")
        bad = [str(i) for i, r in res.items() if r != "Pass"]
        if worst == "Pass" or (worst == "Skip" and len(bad) == len(res)):
            out.append(_row(name, f"{worst} - All"))
        else:
            out.append(_row(name, f"{worst} - GPU: " + ", ".join(bad)))
    out.append(sep)
    return "\n".join(out) + "\n"


def _diag_json3(gpus: list[dict], tests) -> dict:
    """DCGM 3.x ``dcgmi diag -j``: {"DCGM GPU Diagnostic": {"test_categories": [...]}} with per-result
    gpu_ids."""
    cats: list[dict] = []
    for cat, name, res, msg in tests:
        if not cats or cats[-1]["category"] != cat:
            cats.append({"category": cat, "tests": []})
        if cat == "Deployment":
            status = "Pass" if all(r == "Pass" for r in res.values()) else "Fail"
            result = {"gpu_ids": ",".join(str(i) for i in res), "status": status}
            if msg and status != "Pass":
                result["warnings"] = [{"warning": msg, "error_id": 0, "error_category": 0,
                                       "error_severity": 2}]
            cats[-1]["tests"].append({"name": name, "results": [result]})
            continue
        results = []
        for i, r in res.items():
            result = {"gpu_ids": str(i), "status": r}
            if r != "Pass" and msg:
                result["warnings"] = [{"warning": msg, "error_id": 0, "error_category": 0,
                                       "error_severity": 2}]
            results.append(result)
        cats[-1]["tests"].append({"name": name, "results": results})
    return {"DCGM GPU Diagnostic": {"test_categories": cats}, "version": dcgm_version(),
            "Driver Version Detected": common.loaded_driver_version(),
            "GPU Device IDs": [g["pci_device_id"][2:6].lower() for g in gpus]}


# DCGM 4.x names its tests after the plugins; the deployment checks are one test, "software"
_DCGM4_NAMES = {"PCIe": "pcie", "GPU Memory": "memory", "Targeted Stress": "targeted_stress",
                "Targeted Power": "targeted_power", "Memory Bandwidth": "memory_bandwidth", "EUD Test": "eud",
                "Memtest": "memtest", "Pulse Test": "pulse_test"}


def _diag_json4(gpus: list[dict], tests) -> dict:
    """DCGM 4.x ``dcgmi diag -j``: {"DCGM Diagnostic": {"test_categories": [...]}} with entity results and a
    test_summary per test; entity_groups and metadata beside it."""
    def entity(i: int, status: str, msg: str | None) -> dict:
        e = {"entity_group_id": 1, "entity_group": "GPU", "entity_id": i, "status": status}
        if status != "Pass" and msg:
            e["warnings"] = [{"warning": msg, "error_id": 0, "error_category": 0, "error_severity": 2}]
        return e

    def summary(res: dict, msg: str | None) -> dict:
        worst = next((r for r in ("Fail", "Skip") if r in res.values()), "Pass")
        if worst == "Skip" and any(r == "Pass" for r in res.values()):
            worst = "Pass"  # DCGM 4 sums a test that ran somewhere as Pass: the per-GPU Skip tells the rest
        out = {"status": worst}
        if worst == "Fail" and msg:
            out["warnings"] = [{"warning": msg, "error_id": 0, "error_category": 0, "error_severity": 2}]
        return out

    deploy = [(res, msg) for cat, _n, res, msg in tests if cat == "Deployment"]
    software = {i: ("Fail" if any(res[i] != "Pass" for res, _m in deploy) else "Pass") for i in deploy[0][0]}
    soft_msg = "; ".join(m for res, m in deploy if m and any(r != "Pass" for r in res.values())) or None
    cats: list[dict] = [{"category": "Deployment", "tests": [
        {"name": "software", "results": [entity(i, r, soft_msg) for i, r in software.items()],
         "test_summary": summary(software, soft_msg)}]}]
    for cat, name, res, msg in tests:
        if cat == "Deployment":
            continue
        if cats[-1]["category"] != cat:
            cats.append({"category": cat, "tests": []})
        cats[-1]["tests"].append({"name": _DCGM4_NAMES.get(name, name), "results": [entity(i, r, msg)
                                  for i, r in res.items()], "test_summary": summary(res, msg)})
    return {"DCGM Diagnostic": {"test_categories": cats},
            "entity_groups": [{"entity_group_id": 1, "entity_group": "GPU", "entities": [
                {"entity_id": g["index"], "serial_num": g["serial"],
                 "device_id": g["pci_device_id"][2:6].lower()}
                for g in gpus]}],
            "metadata": {"version": dcgm_version(),
                         "Driver Version Detected": common.loaded_driver_version()}}


# ---------------------------------------------------------------- dcgmi nvlink

_DCGMI_NVLINK_COUNTERS = (("CRC FLIT Error", "crc"), ("CRC Data Error", None), ("Replay Error", "replay"),
                          ("Recovery Error", "recovery"))


def dcgmi_nvlink(hw: dict, argv: list[str]) -> int:
    """``dcgmi nvlink --link-status`` (-s) and ``dcgmi nvlink -e -g GPU [-j]`` (the tree table, or JSON)."""
    if _engine_down():
        return 255
    gpus = common.present_gpus(hw)
    if "-s" in argv or "--link-status" in argv:
        out = ["+----------------------+", "|  NvLink Link Status  |", "+----------------------+", "GPUs:"]
        for g in gpus:
            down = set(g["nvlink"].get("down", []))
            out += [f"    gpuId {g['index']}:",
                    "        " + " ".join("D" if i in down else "U" for i in range(g["nvlink"]["links"]))]
        out += ["NvSwitches:", "    No NvSwitches found.", "",
                "Key: Up=U, Down=D, Disabled=X, Not Supported=_"]
        common.out("\n".join(out) + "\n")
        return 0
    if "-e" in argv or "--errors" in argv:
        gid = None
        for i, a in enumerate(argv):
            if a in ("-g", "--gpuid") and i + 1 < len(argv):
                gid = argv[i + 1]
        g = next((g for g in gpus if str(g["index"]) == str(gid)), None)
        if g is None:
            common.out(f"Error: Invalid GPU ID {gid} (give -g with one of the GPU ids of dcgmi discovery "
                       "-l)\n")
            return 255
        errors = g["nvlink"].get("errors") or {}
        links = {f"Link {i}": {label: str(int((errors.get(str(i)) or {}).get(key, 0)) if key else 0)
                               for label, key in _DCGMI_NVLINK_COUNTERS} for i in range(g["nvlink"]["links"])}
        if "-j" in argv or "--json" in argv:
            doc = {"body": {k: {"children": {label: {"value": v} for label, v in c.items()}} for k,
                            c in links.items()},
                   "header": ["NVLINK Error Counts", f"GPU {g['index']}"]}
            common.out(common.dumps(doc) + "\n")
            return 0
        sep = "+-----------------------------+------------------------------------------------+"
        out = [sep, f"| {'NVLINK Error Counts':<76} |", f"| {'GPU ' + str(g['index']):<76} |",
               "+=============================+================================================+"]
        for k, c in links.items():
            out.append(f"| {k:<27} | {'':<46} |")
            out += [f"| -> {label:<24} | {v:<46} |" for label, v in c.items()]
        out.append(sep)
        common.out("\n".join(out) + "\n")
        return 0
    common.err(f"dcgmi nvlink: the lab simulates --link-status and -e -g GPU [-j] ({common.BANNER})\n")
    return 2
