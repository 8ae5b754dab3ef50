"""Tests for clustercert.parsers.ib (ibstat, ibstatus, ibv-devinfo, ibdev2netdev, perfquery, sysfs, rdma)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercert.parsers import ParseError, parse
from clustercert.parsers._text import ttar_to_grep_dump

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def fx(rel: str) -> str:
    return (FIXTURES / rel).read_text()


def port_of(rec: dict, ca: str) -> dict:
    (c,) = [c for c in rec["cas"] if c["name"] == ca]
    return c["ports"][0]


# ----------------------------------------------------------------------------- ibstat


def test_ibstat_ndr_all_active_tabs():
    rec = parse("ibstat", fx("ibstat/ibstat-9x-cx7-ndr400-bluefield3-h100-all-active.txt"))
    assert rec["format"] == "full" and rec["ok"] is True and rec["errors"] == []
    assert len(rec["cas"]) == 9
    mlx5_0 = rec["cas"][0]
    assert mlx5_0["name"] == "mlx5_0"
    assert mlx5_0["type"] == "MT4129"
    assert mlx5_0["num_ports"] == 1
    assert mlx5_0["firmware_version"] == "28.41.1000"
    assert mlx5_0["node_guid"] == "0x58a2e10300a7820e"
    p = mlx5_0["ports"][0]
    assert p == {
        "port": 1,
        "state": "Active",
        "physical_state": "LinkUp",
        "base_lid": 128,
        "lmc": 0,
        "sm_lid": 1,
        "capability_mask": "0xa751e848",
        "port_guid": "0x58a2e10300a7820e",
        "link_layer": "InfiniBand",
        "rate_gbit_per_s": 400,
        "rate_note": None,
    }
    bond = port_of(rec, "mlx5_bond_0")
    assert (bond["rate_gbit_per_s"], bond["link_layer"]) == (200, "Ethernet")
    assert rec["cas"][-1]["type"] == "MT41692"


def test_ibstat_three_ports_down_disabled():
    rec = parse("ibstat", fx("ibstat/ibstat-12x-h100-ib-3ports-down-disabled.txt"))
    assert rec["ok"] is True
    down = sorted(c["name"] for c in rec["cas"] if c["ports"][0]["state"] == "Down")
    assert down == ["mlx5_2", "mlx5_7", "mlx5_8"]
    p = port_of(rec, "mlx5_7")
    assert (p["physical_state"], p["rate_gbit_per_s"], p["link_layer"]) == ("Disabled", 40, "Ethernet")
    ib = port_of(rec, "mlx5_10")
    assert (ib["state"], ib["base_lid"], ib["sm_lid"], ib["rate_gbit_per_s"]) == ("Active", 828, 334, 400)


def test_ibstat_polling_port():
    rec = parse("ibstat", fx("ibstat/ibstat-12x-h100-roce-down-polling-semisynthetic.txt"))
    p = port_of(rec, "mlx5_11")
    assert (p["state"], p["physical_state"]) == ("Down", "Polling")
    assert port_of(rec, "mlx5_5")["physical_state"] == "Disabled"


def test_ibstat_hdr_mixed_link_layers():
    rec = parse("ibstat", fx("ibstat/ibstat-9x-mt4126-a100-hdr-all-active.txt"))
    layers = [c["ports"][0]["link_layer"] for c in rec["cas"]]
    assert layers.count("InfiniBand") == 8 and layers.count("Ethernet") == 1
    assert port_of(rec, "mlx5_8")["base_lid"] == 1396
    assert rec["cas"][0]["firmware_version"] == "22.35.2302"


def test_ibstat_ibpanic_exit_is_not_ok_and_keeps_cas():
    rec = parse("ibstat", fx("ibstat/ibstat-8x-cx6-mt4124-a100-ibpanic-exit255.txt"))
    assert rec["ok"] is False
    assert rec["errors"] == [
        "ibpanic: [1400444] main: stat of IB device 'mlx5_8' failed: No such file or directory"
    ]
    assert len(rec["cas"]) == 8
    assert port_of(rec, "mlx5_0")["base_lid"] == 13247


def test_ibstat_error_only_no_devices():
    text = "ibpanic: [2211] main: can't init UMAD library: (No such file or directory)\n"
    rec = parse("ibstat", text)
    assert rec["ok"] is False and rec["cas"] == []
    assert rec["errors"][0].startswith("ibpanic: [2211] main: can't init UMAD library")


# Variants written for this project (the corpus copies are reference-only).
IBSTAT_NOINDENT = """CA: 'mlx4_3'
Port 2:
State: Initializing
Physical state: LinkUp
Rate: 40 (FDR10)
Base lid: 65535
LMC: 0
SM lid: 0
Capability mask: 0x0251486a
Port GUID: 0x0002c903001a2b3c
Link layer: InfiniBand
"""


def test_ibstat_ca_port_noindent_variant_and_fdr10_rate():
    rec = parse("ibstat", IBSTAT_NOINDENT)
    assert rec["cas"][0]["name"] == "mlx4_3"
    assert rec["cas"][0]["type"] is None
    p = rec["cas"][0]["ports"][0]
    assert (p["port"], p["state"], p["rate_gbit_per_s"], p["rate_note"]) == (2, "Initializing", 40, "FDR10")
    assert p["base_lid"] == 65535


def test_ibstat_tolerates_prompt_lines_and_crlf():
    text = "$ ibstat mlx4_3 2\r\n" + IBSTAT_NOINDENT.replace("\n", "\r\n") + "[root@node01 ~]#\r\n"
    rec = parse("ibstat", text)
    assert rec["cas"][0]["ports"][0]["link_layer"] == "InfiniBand"
    assert rec["ok"] is True


def test_ibstat_list_and_port_guid_formats():
    assert parse("ibstat", "mlx5_0\nmlx5_1\nmlx5_bond_0\n")["ca_names"] == ["mlx5_0", "mlx5_1", "mlx5_bond_0"]
    rec = parse("ibstat", "0x0002c903001a2b3c\r\n0x0002c903001a2b3d\r\n")
    assert rec["format"] == "port_guids"
    assert rec["port_guids"] == ["0x0002c903001a2b3c", "0x0002c903001a2b3d"]


def test_ibstat_short_format_has_no_ports():
    text = "CA 'mlx5_4'\n\tCA type: MT4123\n\tNumber of ports: 1\n\tFirmware version: 20.31.1014\n"
    rec = parse("ibstat", text)
    assert rec["format"] == "short"
    assert rec["cas"][0]["firmware_version"] == "20.31.1014" and rec["cas"][0]["ports"] == []


def test_ibstat_parse_errors():
    with pytest.raises(ParseError, match="empty input"):
        parse("ibstat", "  \n")
    full = fx("ibstat/ibstat-9x-cx7-ndr400-bluefield3-h100-all-active.txt")
    truncated = full[: full.index("State: Active")]  # cut inside the first port block
    with pytest.raises(ParseError, match="truncated"):
        parse("ibstat", truncated)
    with pytest.raises(ParseError, match="CA '<name>'"):
        parse("ibstat", fx("ibstatus/ibstatus-8x-a100-hdr-all-active.txt"))


# ----------------------------------------------------------------------------- ibstatus


def test_ibstatus_hdr():
    rec = parse("ibstatus", fx("ibstatus/ibstatus-8x-a100-hdr-all-active.txt"))
    assert len(rec["ports"]) == 9
    first = rec["ports"][0]
    assert first["device"] == "mlx5_0" and first["port"] == 1
    assert (first["state"], first["state_code"]) == ("ACTIVE", 4)
    assert (first["phys_state"], first["phys_state_code"]) == ("LinkUp", 5)
    assert (first["rate_gbit_per_s"], first["rate_label"]) == (200, "4X HDR")
    assert first["base_lid"] == 0x33BF and first["sm_lid"] == 1
    last = rec["ports"][-1]
    assert (last["device"], last["link_layer"], last["rate_gbit_per_s"], last["default_gid"]) == (
        "mlx5_8", "Ethernet", 40, None)


def test_ibstatus_errors():
    with pytest.raises(ParseError, match="Infiniband device"):
        parse("ibstatus", fx("ibdev2netdev/ibdev2netdev-mlx5-roce-ens64np1.txt"))
    with pytest.raises(ParseError, match="truncated"):
        parse("ibstatus", "Infiniband device 'mlx5_0' port 1 status:\n\tdefault gid:\t fe80::1\n")


# ----------------------------------------------------------------------------- ibv_devinfo


def test_ibv_devinfo_eight_hcas():
    rec = parse("ibv-devinfo", fx("ibv_devinfo/ibv_devinfo-8x-cx7-MT4129-ndr200-dell-h100.txt"))
    assert rec["ok"] is True
    assert [d["hca_id"] for d in rec["devices"]] == [
        "mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
    d = rec["devices"][0]
    assert (d["fw_ver"], d["board_id"], d["vendor_part_id"], d["phys_port_cnt"]) == (
        "28.41.1000", "DEL0000000036", "4129", 1)
    assert d["node_guid"] == "58a2:e103:001a:677e"
    p = d["ports"][0]
    assert (p["state"], p["state_code"], p["active_mtu"], p["port_lid"], p["sm_lid"], p["link_layer"]) == (
        "PORT_ACTIVE", 4, 4096, 3697, 5790, "InfiniBand")
    assert d["verbose"] is False and p["active_width"] is None


IBV_DEVINFO_V = """hca_id:\tmlx5_2
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t20.39.1002
\tnode_guid:\t\t\tb83f:d203:0011:2233
\tsys_image_guid:\t\t\tb83f:d203:0011:2233
\tvendor_id:\t\t\t0x02c9
\tvendor_part_id:\t\t\t4123
\thw_ver:\t\t\t\t0x0
\tboard_id:\t\t\tMT_0000000594
\tphys_port_cnt:\t\t\t1
\tmax_mr_size:\t\t\t0xffffffffffffffff
\tmax_qp:\t\t\t\t131072
\tdevice_cap_flags:\t\t0xed721c36
\t\t\t\t\tBAD_PKEY_CNTR
\tDevice ports:
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_INIT (2)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t2048 (4)
\t\t\tsm_lid:\t\t\t0
\t\t\tport_lid:\t\t65535
\t\t\tport_lmc:\t\t0x00
\t\t\tlink_layer:\t\tInfiniBand
\t\t\tactive_width:\t\t4X (2)
\t\t\tactive_speed:\t\t50.0 Gbps (64)
\t\t\tphys_state:\t\tLINK_UP (5)
\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:b83f:d203:0011:2233
"""


def test_ibv_devinfo_verbose_fields():
    rec = parse("ibv-devinfo", IBV_DEVINFO_V)
    d = rec["devices"][0]
    assert d["verbose"] is True
    p = d["ports"][0]
    assert (p["state"], p["state_code"], p["active_mtu"], p["max_mtu"]) == ("PORT_INIT", 2, 2048, 4096)
    assert (p["active_width"], p["active_speed"], p["active_speed_gbit_per_s"], p["phys_state"]) == (
        "4X", "50.0 Gbps", 50.0, "LINK_UP")


def test_ibv_devinfo_no_devices_and_errors():
    rec = parse("ibv-devinfo", "No IB devices found\n")
    assert rec == {"ok": False, "error": "No IB devices found", "devices": []}
    with pytest.raises(ParseError, match="hca_id"):
        parse("ibv-devinfo", fx("ibstatus/ibstatus-8x-a100-hdr-all-active.txt"))
    with pytest.raises(ParseError, match="truncated"):
        parse("ibv-devinfo", IBV_DEVINFO_V[: IBV_DEVINFO_V.index("\tDevice ports:")])


# ----------------------------------------------------------------------------- ibdev2netdev


def test_ibdev2netdev_copy_and_variants():
    rec = parse("ibdev2netdev", fx("ibdev2netdev/ibdev2netdev-mlx5-roce-ens64np1.txt"))
    assert rec["mappings"] == [
        {"hca": "mlx5_0", "port": 1, "netdev": "ens64np1", "state": "Up", "port_state": None}
    ]
    text = ("mlx5_0 port 1 ==> ibp12s0 (Up)\nmlx5_3 port 1 ==> ibp75s0 (Down)\n"
            "0000:cb:00.0 mlx5_6 (MT4129 - MCX75310AAS-NEAT) NVIDIA ConnectX-7 fw 28.39.2048 port 1 (DOWN  ) "
            "==> ibp203s0 (Down)\n")
    maps = parse("ibdev2netdev", text)["mappings"]
    assert [(m["hca"], m["netdev"], m["state"]) for m in maps] == [
        ("mlx5_0", "ibp12s0", "Up"), ("mlx5_3", "ibp75s0", "Down"), ("mlx5_6", "ibp203s0", "Down")]
    assert maps[2]["port_state"] == "DOWN" and maps[0]["port_state"] is None


def test_ibdev2netdev_errors():
    with pytest.raises(ParseError):
        parse("ibdev2netdev", "")
    with pytest.raises(ParseError, match="==>"):
        parse("ibdev2netdev", fx("ibstatus/ibstatus-8x-a100-hdr-all-active.txt"))


# ----------------------------------------------------------------------------- perfquery


def test_perfquery_switch_port_errors():
    rec = parse("perfquery", fx("perfquery/perfquery-x-switch-port-errors.txt"))
    assert rec["ok"] is True
    (p,) = rec["ports"]
    assert (p["lid"], p["port"], p["extended"], p["cap_mask"]) == (2052, 1, True, "0x5300")
    c = p["counters"]
    assert c["LinkDownedCounter"] == 1
    assert c["PortXmitDiscards"] == 20046
    assert c["PortRcvSwitchRelayErrors"] == 7
    assert c["SymbolErrorCounter"] == 0
    assert c["PortXmitData"] == 178791657177235
    assert rec["error_counters"] == {
        "LinkDownedCounter": 1,
        "PortRcvSwitchRelayErrors": 7,
        "PortXmitDiscards": 20046,
    }


def test_perfquery_two_ports_and_clean_hca():
    rec = parse("perfquery", fx("perfquery/perfquery-x-switch-2ports-edr-clean.txt"))
    assert [(p["lid"], p["port"]) for p in rec["ports"]] == [(1719, 1), (1719, 2)]
    assert rec["ports"][1]["counters"]["PortXmitWait"] == 36510964
    assert rec["error_counters"] == {}
    hca = parse("perfquery", fx("perfquery/perfquery-x-hca-edr-clean.txt"))
    assert hca["ports"][0]["counters"]["PortRcvData"] == 9752484588300
    assert hca["ports"][0]["cap_mask"] == "0x5A00"


def test_perfquery_rcv_error_details():
    rec = parse("perfquery", fx("perfquery/perfquery-E-rcv-error-details-switch-port1.txt"))
    p = rec["ports"][0]
    assert p["counter_set"] == "PortRcvErrorDetails counters" and p["extended"] is False
    assert p["counters"]["PortLocalPhysicalErrors"] == 0 and len(p["counters"]) == 8


def test_perfquery_errors():
    rec = parse("perfquery", "ibwarn: [3356] mad_rpc: _do_madrpc failed; dport (Lid 12)\n"
                             "perfquery: iberror: failed: perfquery query failed\n")
    assert rec["ok"] is False and len(rec["errors"]) == 2 and rec["ports"] == []
    with pytest.raises(ParseError, match="counters: Lid"):
        parse("perfquery", fx("ibstatus/ibstatus-8x-a100-hdr-all-active.txt"))
    with pytest.raises(ParseError, match="truncated"):
        parse("perfquery", "# Port extended counters: Lid 134 port 1 (CapMask: 0x5A00 CapMask2: 0x0000000)\n")


# ----------------------------------------------------------------------------- sysfs-infiniband


def test_sysfs_infiniband_from_node_exporter_ttar():
    dump = ttar_to_grep_dump(fx("sysfs/node_exporter-sys-class-infiniband.ttar"))
    rec = parse("sysfs-infiniband", dump)
    assert sorted(rec["hcas"]) == ["i40iw0", "mlx4_0"]
    mlx = rec["hcas"]["mlx4_0"]
    assert (mlx["fw_ver"], mlx["hca_type"], mlx["board_id"]) == ("2.31.5050", "MT4099", "SM_1141000001000")
    p1 = mlx["ports"]["1"]
    assert (p1["state"], p1["state_code"], p1["phys_state"], p1["phys_state_code"]) == (
        "ACTIVE",
        4,
        "LinkUp",
        5,
    )
    assert (p1["rate_gbit_per_s"], p1["rate_label"], p1["link_layer"]) == (40, "4X QDR", "InfiniBand")
    assert p1["counters"]["port_rcv_packets"] == 6825908347
    assert p1["counters"]["port_xmit_discards"] == 5
    assert p1["counters_ext"]["port_rcv_data_64"] == 4631917
    i40 = rec["hcas"]["i40iw0"]["ports"]["1"]
    assert i40["rate_gbit_per_s"] == 10 and i40["rate_label"] == "4X"
    assert i40["counters"]["symbol_error"] is None  # "N/A (no PMA)"


SYSFS_ABS = """/sys/class/infiniband/mlx5_7/fw_ver:28.39.2048
/sys/class/infiniband/mlx5_7/ports/1/state:1: DOWN
/sys/class/infiniband/mlx5_7/ports/1/phys_state:3: Disabled
/sys/class/infiniband/mlx5_7/ports/1/rate:400 Gb/sec (4X NDR)
/sys/class/infiniband/mlx5_7/ports/1/link_layer:InfiniBand
/sys/class/infiniband/mlx5_7/ports/1/counters/link_downed:3
/sys/class/infiniband/mlx5_7/ports/1/counters/symbol_error:12
/sys/class/infiniband/mlx5_7/ports/1/hw_counters/out_of_buffer:0
[root@node ~]#
"""


def test_sysfs_infiniband_absolute_paths():
    rec = parse("sysfs-infiniband", SYSFS_ABS)
    p = rec["hcas"]["mlx5_7"]["ports"]["1"]
    assert (p["state"], p["state_code"], p["phys_state"], p["phys_state_code"]) == ("DOWN", 1, "Disabled", 3)
    assert p["rate_gbit_per_s"] == 400
    assert p["counters"] == {"link_downed": 3, "symbol_error": 12}
    assert p["hw_counters"] == {"out_of_buffer": 0}
    assert rec["hcas"]["mlx5_7"]["fw_ver"] == "28.39.2048"


def test_sysfs_infiniband_errors():
    with pytest.raises(ParseError, match="PATH:VALUE"):
        parse("sysfs-infiniband", "nothing to see here\n")
    with pytest.raises(ParseError, match="infiniband"):
        parse("sysfs-infiniband", "/sys/class/net/bond0/bonding/mode:active-backup 1\n")
    with pytest.raises(ParseError, match="rate"):
        parse("sysfs-infiniband", "/sys/class/infiniband/mlx5_0/ports/1/rate:fast\n")


# ----------------------------------------------------------------------------- rdma link


def test_rdma_link():
    text = ("link mlx5_0/1 state ACTIVE physical_state LINK_UP netdev ibp12s0 \n"
            "link mlx5_1/1 state DOWN physical_state DISABLED \n")
    rec = parse("rdma-link", text)
    assert rec["links"] == [
        {"hca": "mlx5_0", "port": 1, "state": "ACTIVE", "physical_state": "LINK_UP", "netdev": "ibp12s0"},
        {"hca": "mlx5_1", "port": 1, "state": "DOWN", "physical_state": "DISABLED", "netdev": None},
    ]
    with pytest.raises(ParseError, match="link <hca>"):
        parse("rdma-link", "mlx5_0 port 1 ==> ib0 (Up)\n")


def _link(hca, port, state, phys, netdev=None):
    return {"hca": hca, "port": port, "state": state, "physical_state": phys, "netdev": netdev}


def test_rdma_link_ib_port_with_subnet_prefix_and_lid_before_state():
    # ROCm/rccl#1423: IB ports print subnet_prefix/lid/sm_lid/lmc between the port and the state.
    down = (FIXTURES / "rdma/rdma-link-ib-subnet-prefix-lid-polling-rccl-1423.txt").read_text()
    up = (FIXTURES / "rdma/rdma-link-ib-subnet-prefix-lid-active-rccl-1423.txt").read_text()
    assert parse("rdma-link", down)["links"] == [_link("mlx5_7", 1, "DOWN", "POLLING")]
    assert parse("rdma-link", up)["links"] == [_link("mlx5_7", 1, "ACTIVE", "LINK_UP")]


def test_rdma_link_trailing_spaces_real_sample():
    text = (FIXTURES / "rdma/rdma-link-show-cx6dx-trailing-space-3fs-283.txt").read_text()
    assert parse("rdma-link", text)["links"] == [
        _link("mlx5_0", 1, "ACTIVE", "LINK_UP", "p1p1"), _link("mlx5_1", 1, "ACTIVE", "LINK_UP", "p1p2")]


@pytest.mark.parametrize(
    "line, expected",
    [
        # old iproute2 layout (issue 36): index prefix, no 'link' word, colon after the port
        ("0/1: i40iw0/1: state ACTIVE physical_state LINK_UP", _link("i40iw0", 1, "ACTIVE", "LINK_UP")),
        ("1/1: mlx5_0/1: state DOWN physical_state NOP", _link("mlx5_0", 1, "DOWN", "NOP")),
        (
            "  0/1:   i40iw0/1:\tstate ACTIVE   physical_state LINK_UP  ",
            _link("i40iw0", 1, "ACTIVE", "LINK_UP"),
        ),
        (
            "0/1: mlx5_0/1: state ACTIVE physical_state LINK_UP netdev ib0",
            _link("mlx5_0", 1, "ACTIVE", "LINK_UP", "ib0"),
        ),
        # fields in another order, extra fields
        (
            "link mlx5_0/1 physical_state LINK_UP netdev ib0 state ACTIVE",
            _link("mlx5_0", 1, "ACTIVE", "LINK_UP", "ib0"),
        ),
        (
            "link mlx5_0/2 state ACTIVE physical_state LINK_UP netdev ib1 netdev_index 5",
            _link("mlx5_0", 2, "ACTIVE", "LINK_UP", "ib1"),
        ),
        (
            "link rxe0/1 lmc 0 detached state ACTIVE physical_state LINK_UP",
            _link("rxe0", 1, "ACTIVE", "LINK_UP"),
        ),
    ],
)
def test_rdma_link_near_variants(line, expected):
    assert parse("rdma-link", line + "\n")["links"] == [expected]


def test_rdma_link_line_without_physical_state_is_not_a_link():
    with pytest.raises(ParseError, match="link <hca>"):
        parse("rdma-link", "0/1: i40iw0/1: state ACTIVE\n")
