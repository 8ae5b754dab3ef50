"""Simulated ``lspci`` (the node's GPUs, NVSwitches and HCAs, with their Express capability at -vv) and
``dmidecode`` (system, baseboard and chassis records), values from hw.json.

A container cannot see the host's PCI devices or firmware tables as its own: the lab puts these in place of
the real tools (dpkg diversions, as for dmesg and lsmod), printing pciutils' and dmidecode's formats.
"""

from __future__ import annotations

import hashlib

from . import common

# PCI ids and names as pciutils' database prints them
GPU_NAMES = {"2330": "GH100 [H100 SXM5 80GB]", "20b2": "GA100 [A100 SXM4 80GB]"}
HCA_PCI = {"MT4129": ("1021", "MT2910 Family [ConnectX-7]"),
           "MT4123": ("101b", "MT28908 Family [ConnectX-6]")}
GEN_GTS = {1: "2.5", 2: "5", 3: "8", 4: "16", 5: "32", 6: "64", 7: "128"}
NVSWITCH_LINK = (4, 2)  # an NVSwitch's PCIe management link (Gen4 x2)


def _addr(bus_id: str, domain: bool) -> str:
    """'00000000:19:00.0' / '0000:18:00.0' -> '0000:19:00.0' (-D) or '19:00.0'."""
    parts = bus_id.lower().split(":")
    short = f"{parts[-2]}:{parts[-1]}"
    return f"{parts[-3][-4:]}:{short}" if domain else short


def devices(hw: dict) -> list[dict]:
    """The node's simulated PCI functions, in bus order: {bus, vendor, device, class, class_id, name, numa,
    driver, cap: (gen, width), sta: (gen, width)}."""
    out = []
    for g in hw["gpus"]:
        if not g.get("on_bus", True):
            continue
        dev = g["pci_device_id"][2:6].lower()
        p = g["pcie"]
        out.append({"bus": g["bus_id"], "vendor": "10de", "device": dev, "class": "3D controller",
                    "class_id": "0302",
                    "name": f"NVIDIA Corporation {GPU_NAMES.get(dev, 'Device')}", "rev": "a1",
                    "numa": g["numa_node"],
                    "driver": "nvidia", "cap": (p["gen_max"], p["width_max"]),
                    "sta": (p["gen_current"], p["width_current"])})
    for s in hw.get("nvswitches", []):
        if not s.get("on_bus", True):
            continue
        out.append({"bus": s["bus_id"], "vendor": "10de", "device": s["device_id"], "class": "Bridge",
                    "class_id": "0680",
                    "name": "NVIDIA Corporation Device", "rev": "a1", "numa": 0, "driver": "nvidia-nvswitch",
                    "cap": NVSWITCH_LINK, "sta": NVSWITCH_LINK})
    for h in hw["hcas"]:
        dev, name = HCA_PCI.get(h["hca_type"], ("1021", "MT2910 Family [ConnectX-7]"))
        eth = h["ports"][0].get("link_layer") == "Ethernet"
        link = h.get("pcie") or {"gen": 5, "width": 16}
        out.append({"bus": h["bus_id"], "vendor": "15b3", "device": dev,
                    "class": "Ethernet controller" if eth else "Infiniband controller",
                    "class_id": "0200" if eth else "0207", "name": f"Mellanox Technologies {name}",
                    "rev": None,
                    "numa": h.get("numa_node", 0), "driver": "mlx5_core",
                    "cap": (link["gen"], link["width"]), "sta": (link["gen"], link["width"])})
    return sorted(out, key=lambda d: _addr(d["bus"], True))


def _matches(d: dict, spec: str) -> bool:
    """lspci -d [vendor]:[device][:class] ('*' or empty: any)."""
    parts = (spec.split(":") + ["", ""])[:3]
    for want, have in zip(parts, (d["vendor"], d["device"], d["class_id"]), strict=True):
        if want not in ("", "*") and want.lower() != have:
            return False
    return True


def _express(d: dict) -> list[str]:
    (cg, cw), (sg, sw) = d["cap"], d["sta"]
    speed = f"Speed {GEN_GTS.get(sg, '?')}GT/s" + (" (downgraded)" if sg < cg else "")
    width = f"Width x{sw}" + (" (downgraded)" if sw < cw else "")
    return ["\tCapabilities: [60] Express (v2) Endpoint, MSI 00",
            "\t\tDevCap:\tMaxPayload 256 bytes, PhantFunc 0, Latency L0s unlimited, L1 <64us",
            "\t\tDevCtl:\tCorrErr- NonFatalErr- FatalErr- UnsupReq-",
            f"\t\tLnkCap:\tPort #0, Speed {GEN_GTS.get(cg, '?')}GT/s, Width x{cw}, ASPM not supported",
            "\t\t\tClockPM- Surprise- LLActRep- BwNot- ASPMOptComp+",
            "\t\tLnkCtl:\tASPM Disabled; RCB 64 bytes, Disabled- CommClk+",
            f"\t\tLnkSta:\t{speed}, {width}",
            "\t\t\tTrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-"]


def lspci(argv: list[str]) -> int:
    hw = common.load_hw()
    domain = nn = False
    verbose = 0
    spec = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "-d" and i + 1 < len(argv):
            spec = argv[i + 1]
            i += 2
            continue
        if a.startswith("-d") and len(a) > 2:
            spec = a[2:]
        elif a in ("--version", "-V"):
            common.out(f"lspci version 3.9.0 ({common.BANNER})\n")
            return 0
        elif a.startswith("-") and not a.startswith("--"):
            for ch in a[1:]:
                domain |= ch == "D"
                nn |= ch == "n"
                verbose += ch == "v"
        i += 1
    lines: list[str] = []
    for d in devices(hw):
        if spec is None or _matches(d, spec):
            lines += _device_lines(d, domain, nn, verbose)
    common.out("\n".join(lines) + ("\n" if lines else ""))
    return 0


def _device_lines(d: dict, domain: bool, nn: bool, verbose: int) -> list[str]:
    """One device as lspci prints it: -D (domain), -n (numeric ids), -v/-vv (verbose)."""
    cls = f"{d['class']} [{d['class_id']}]" if nn else d["class"]
    ids = f" [{d['vendor']}:{d['device']}]" if nn else ""
    rev = f" (rev {d['rev']})" if d["rev"] else ""
    lines = [f"{_addr(d['bus'], domain)} {cls}: {d['name']}{ids}{rev}"]
    if verbose:
        lines.append(f"\tSubsystem: {d['name']}")
        lines.append(f"\tNUMA node: {d['numa']}")
        if verbose >= 2:
            lines += _express(d)
        lines.append(f"\tKernel driver in use: {d['driver']}")
        lines.append("")
    return lines


# ---------------------------------------------------------------- dmidecode

def board(hw: dict) -> dict:
    """hw.json's board (a node built before it was recorded: derived from the node's name, as build()
    does)."""
    b = hw.get("board")
    if b:
        return b
    h = hashlib.sha256(f"board/{hw['node']}".encode()).hexdigest()
    return {"manufacturer": "clustercert lab", "product": "simulated HGX node",
            "system_serial": f"LAB{int(h[0:10], 16) % 10**9:09d}",
            "baseboard_serial": f"LBB{int(h[10:20], 16) % 10**9:09d}",
            "chassis_serial": f"LCH{int(h[20:30], 16) % 10**9:09d}",
            "uuid": f"{h[32:40]}-{h[40:44]}-{h[44:48]}-{h[48:52]}-{h[52:64]}"}


def _records(hw: dict) -> dict[int, tuple[str, list[tuple[str, str]]]]:
    b = board(hw)
    return {
        0: ("BIOS Information", [("Vendor", "clustercert lab"), ("Version", "1.0 (simulated)"),
                                 ("Release Date", "01/01/2026")]),
        1: ("System Information", [("Manufacturer", b["manufacturer"]), ("Product Name", b["product"]),
                                   ("Version", "1.0"), ("Serial Number", b["system_serial"]),
                                   ("UUID", b["uuid"]),
                                   ("Wake-up Type", "Power Switch"), ("SKU Number", "Not Specified"),
                                   ("Family", "clustercert lab (simulated)")]),
        2: ("Base Board Information",
            [("Manufacturer", b["manufacturer"]), ("Product Name", "simulated baseboard"),
             ("Version", "1.0"), ("Serial Number", b["baseboard_serial"]),
             ("Asset Tag", "Not Specified")]),
        3: ("Chassis Information", [("Manufacturer", b["manufacturer"]), ("Type", "Rack Mount Chassis"),
                                    ("Lock", "Not Present"), ("Version", "1.0"),
                                    ("Serial Number", b["chassis_serial"]), ("Asset Tag", "Not Specified")]),
    }


TYPE_NAMES = {"bios": [0], "system": [1], "baseboard": [2], "chassis": [3]}
KEYWORDS = {"bios-vendor": (0, "Vendor"), "bios-version": (0, "Version"),
            "bios-release-date": (0, "Release Date"),
            "system-manufacturer": (1, "Manufacturer"), "system-product-name": (1, "Product Name"),
            "system-version": (1, "Version"), "system-serial-number": (1, "Serial Number"),
            "system-uuid": (1, "UUID"),
            "system-sku-number": (1, "SKU Number"), "system-family": (1, "Family"),
            "baseboard-manufacturer": (2, "Manufacturer"), "baseboard-product-name": (2, "Product Name"),
            "baseboard-version": (2, "Version"), "baseboard-serial-number": (2, "Serial Number"),
            "baseboard-asset-tag": (2, "Asset Tag"), "chassis-manufacturer": (3, "Manufacturer"),
            "chassis-type": (3, "Type"), "chassis-version": (3, "Version"),
            "chassis-serial-number": (3, "Serial Number"),
            "chassis-asset-tag": (3, "Asset Tag")}


def _types(arg: str) -> list[int] | None:
    """-t's comma-separated types (names or numbers); None where one is neither (said)."""
    types = []
    for part in arg.split(","):
        if part in TYPE_NAMES:
            types += TYPE_NAMES[part]
        elif part.isdigit():
            types.append(int(part))
        else:
            common.err(f"Invalid type keyword: {part}\n")
            return None
    return types


def dmidecode(argv: list[str]) -> int:
    hw = common.load_hw()
    recs = _records(hw)
    types: list[int] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-s", "--string") and i + 1 < len(argv):
            key = argv[i + 1]
            if key not in KEYWORDS:
                common.err(f"Invalid string keyword: {key}\n")
                return 2
            t, field = KEYWORDS[key]
            common.out(dict(recs[t][1])[field] + "\n")
            return 0
        if a in ("-t", "--type") and i + 1 < len(argv):
            asked = _types(argv[i + 1])
            if asked is None:
                return 2
            types += asked
            i += 2
            continue
        if a in ("--version", "-V"):
            common.out(f"3.4 ({common.BANNER})\n")
            return 0
        i += 1
    out = ["# dmidecode 3.4", f"# {common.BANNER}", "Getting SMBIOS data from sysfs.",
           "SMBIOS 3.5.0 present.", ""]
    for t in sorted(recs):
        if types and t not in types:
            continue
        name, fields = recs[t]
        out += [f"Handle 0x{t + 1:04X}, DMI type {t}, {8 + 4 * len(fields)} bytes", name]
        out += [f"\t{k}: {v}" for k, v in fields]
        out.append("")
    common.out("\n".join(out) + "\n")
    return 0
