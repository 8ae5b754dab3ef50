"""Simulated InfiniBand user tools: ibv_devinfo, ibdev2netdev (port state from hw.json)."""

from __future__ import annotations

from . import common

STATE_NUM = {"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5}
PHYS_NUM = {"Sleep": 1, "Polling": 2, "Disabled": 3, "PortConfigurationTraining": 4, "LinkUp": 5,
            "LinkErrorRecovery": 6, "Phy Test": 7}


def find_hca(hw: dict, name: str | None) -> dict | None:
    if not hw["hcas"]:
        return None
    if name is None:
        return hw["hcas"][0]
    for h in hw["hcas"]:
        if h["name"] == name:
            return h
    return None


def port_of(hca: dict, port: int | None) -> dict | None:
    for p in hca["ports"]:
        if port is None or p["port"] == port:
            return p
    return None


def netdev_oper(netdev: str) -> str:
    try:
        with open(common.root(f"/sys/class/net/{netdev}/operstate")) as f:
            return f.read().strip()
    except OSError:
        return "down"


def _devinfo_port(p: dict, verbose: bool) -> list[str]:
    st = p["state"]
    lines = [f"\t\tport:\t{p['port']}",
             f"\t\t\tstate:\t\t\tPORT_{st} ({STATE_NUM.get(st, 1)})",
             "\t\t\tmax_mtu:\t\t4096 (5)",
             f"\t\t\tactive_mtu:\t\t{'4096 (5)' if st == 'ACTIVE' else '4096 (5)'}",
             f"\t\t\tsm_lid:\t\t\t{p['sm_lid'] if st == 'ACTIVE' else 0}",
             f"\t\t\tport_lid:\t\t{p['lid'] if st == 'ACTIVE' else 65535}",
             "\t\t\tport_lmc:\t\t0x00",
             f"\t\t\tlink_layer:\t\t{p['link_layer']}"]
    if verbose:
        gbps = p["rate_gbit_per_s"] // 4 if p["width"] == "4X" else p["rate_gbit_per_s"]
        lines += [f"\t\t\tactive_width:\t\t{p['width']} ({2 if p['width'] == '4X' else 1})",
                  f"\t\t\tactive_speed:\t\t{gbps}.0 Gbps ({p['speed']})",
                  f"\t\t\tphys_state:\t\t{p['phys_state'].upper()} ({PHYS_NUM.get(p['phys_state'], 3)})"]
    return lines


def _devinfo_hca(h: dict, verbose: bool) -> str:
    lines = [f"hca_id:\t{h['name']}",
             "\ttransport:\t\t\tInfiniBand (0)",
             f"\tfw_ver:\t\t\t\t{h['fw_ver']}",
             f"\tnode_guid:\t\t\t{h['node_guid']}",
             f"\tsys_image_guid:\t\t\t{h['sys_image_guid']}",
             "\tvendor_id:\t\t\t0x02c9",
             f"\tvendor_part_id:\t\t\t{h['vendor_part_id']}",
             f"\thw_ver:\t\t\t\t{h['hw_rev']}",
             f"\tboard_id:\t\t\t{h['board_id']}",
             f"\tphys_port_cnt:\t\t\t{len(h['ports'])}"]
    for p in h["ports"]:
        lines += _devinfo_port(p, verbose)
    return "\n".join(lines) + "\n"


def ibv_devinfo(hw: dict, argv: list[str]) -> int:
    dev = None
    verbose = False
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-d", "--ib-dev") and i + 1 < len(argv):
            dev = argv[i + 1]
            i += 1
        elif a.startswith("--ib-dev="):
            dev = a.split("=", 1)[1]
        elif a in ("-v", "--verbose"):
            verbose = True
        elif a in ("-l", "--list"):
            common.out(f"{len(hw['hcas'])} HCA{'s' if len(hw['hcas']) != 1 else ''} found:\n"
                       + "".join(f"\t{h['name']}\n" for h in hw["hcas"]))
            return 0
        elif a == "--version":
            common.out(f"ibv_devinfo 44.0 ({common.BANNER})\n")
            return 0
        i += 1
    hcas = hw["hcas"] if dev is None else [h for h in hw["hcas"] if h["name"] == dev]
    if not hw["hcas"]:
        common.out("No IB devices found\n")
        return 255
    if not hcas:
        common.err(f"IB device '{dev}' wasn't found\n")
        return 255
    common.out("\n".join(_devinfo_hca(h, verbose) for h in hcas) + "\n")
    return 0


def ibdev2netdev(hw: dict, argv: list[str]) -> int:
    if "--version" in argv or "-h" in argv:
        common.out(f"ibdev2netdev ({common.BANNER})\n")
        return 0
    for h in hw["hcas"]:
        for p in h["ports"]:
            nd = p.get("netdev")
            if not nd:
                continue
            oper = netdev_oper(nd)
            up = "Up" if oper in ("up", "unknown") and p["state"] == "ACTIVE" else "Down"
            common.out(f"{h['name']} port {p['port']} ==> {nd} ({up})\n")
    return 0

