"""Tests for clustercert.parsers.bonding.

The corpus' /proc/net/bonding samples are reference-only, so the inputs here are written for this
project in the kernel's format; the sysfs case uses the copy-ok node_exporter ttar fixture.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercert.parsers import ParseError, parse
from clustercert.parsers._text import ttar_to_grep_dump

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

ACTIVE_BACKUP_IPOIB = """Ethernet Channel Bonding Driver: v5.15.0-105-generic

Bonding Mode: fault-tolerance (active-backup) (fail_over_mac active)
Primary Slave: ib0 (primary_reselect failure)
Currently Active Slave: ib1
MII Status: up
MII Polling Interval (ms): 100
Up Delay (ms): 0
Down Delay (ms): 0
Peer Notification Delay (ms): 0

Slave Interface: ib0
MII Status: down
Speed: Unknown
Duplex: Unknown
Link Failure Count: 3
Permanent HW addr: 00:00:10:29:fe:80:00:00:00:00:00:00:b8:3f:d2:03:00:aa:bb:01
Slave queue ID: 0

Slave Interface: ib1
MII Status: up
Speed: 200000 Mbps
Duplex: full
Link Failure Count: 0
Permanent HW addr: 00:00:10:29:fe:80:00:00:00:00:00:00:b8:3f:d2:03:00:aa:bb:02
Slave queue ID: 0
"""

LACP = """Ethernet Channel Bonding Driver: v6.1.0-18-amd64\r
\r
Bonding Mode: IEEE 802.3ad Dynamic link aggregation\r
Transmit Hash Policy: layer3+4 (1)\r
MII Status: up\r
MII Polling Interval (ms): 100\r
Up Delay (ms): 200\r
Down Delay (ms): 0\r
\r
802.3ad info\r
LACP active: on\r
LACP rate: slow\r
Min links: 0\r
Aggregator selection policy (ad_select): stable\r
\r
Slave Interface: enp65s0f0np0\r
MII Status: up\r
Speed: 100000 Mbps\r
Duplex: full\r
Link Failure Count: 0\r
Permanent HW addr: 94:6d:ae:11:22:30\r
Slave queue ID: 0\r
Aggregator ID: 1\r
\r
Slave Interface: enp65s0f1np1\r
MII Status: up\r
Speed: 100000 Mbps\r
Duplex: full\r
Link Failure Count: 5\r
Permanent HW addr: 94:6d:ae:11:22:31\r
Slave queue ID: 0\r
Aggregator ID: 1\r
"""


def test_bonding_active_backup_ipoib():
    rec = parse("bonding", ACTIVE_BACKUP_IPOIB)
    assert rec["driver_version"] == "v5.15.0-105-generic"
    assert rec["mode"] == "active-backup"
    assert rec["mode_description"] == "fault-tolerance (active-backup)"
    assert rec["fail_over_mac"] == "active"
    assert (rec["primary_slave"], rec["primary_reselect"]) == ("ib0", "failure")
    assert rec["currently_active_slave"] == "ib1"
    assert rec["mii_status"] == "up" and rec["mii_polling_interval_ms"] == 100
    ib0, ib1 = rec["slaves"]
    assert ib0["name"] == "ib0" and ib0["mii_status"] == "down"
    assert ib0["link_failure_count"] == 3 and ib0["speed_mbps"] is None and ib0["duplex"] is None
    assert ib1["speed_mbps"] == 200000
    assert ib1["permanent_hw_addr"].endswith("b8:3f:d2:03:00:aa:bb:02")


def test_bonding_lacp_crlf():
    rec = parse("bonding", LACP)
    assert rec["mode"] == "802.3ad"
    assert rec["transmit_hash_policy"] == "layer3+4 (1)"
    assert rec["lacp_rate"] == "slow"
    assert rec["up_delay_ms"] == 200
    assert rec["currently_active_slave"] is None and rec["primary_slave"] is None
    assert [s["name"] for s in rec["slaves"]] == ["enp65s0f0np0", "enp65s0f1np1"]
    assert rec["slaves"][1]["link_failure_count"] == 5
    assert rec["slaves"][1]["aggregator_id"] == 1
    assert rec["slaves"][0]["permanent_hw_addr"] == "94:6d:ae:11:22:30"


@pytest.mark.parametrize(
    ("description", "mode"),
    [
        ("load balancing (round-robin)", "balance-rr"),
        ("load balancing (xor)", "balance-xor"),
        ("fault-tolerance (broadcast)", "broadcast"),
        ("transmit load balancing", "balance-tlb"),
        ("adaptive load balancing", "balance-alb"),
    ],
)
def test_bonding_mode_names(description, mode):
    text = f"Bonding Mode: {description}\nMII Status: up\nMII Polling Interval (ms): 50\n"
    rec = parse("bonding", text)
    assert rec["mode"] == mode and rec["mii_polling_interval_ms"] == 50 and rec["slaves"] == []


def test_bonding_parse_errors():
    with pytest.raises(ParseError, match="empty"):
        parse("bonding", "")
    with pytest.raises(ParseError, match="Bonding Mode"):
        parse("bonding", "CA 'mlx5_0'\n\tCA type: MT4129\n")
    with pytest.raises(ParseError, match="unrecognised bonding mode"):
        parse("bonding", "Bonding Mode: something new\nMII Status: up\n")
    truncated = ACTIVE_BACKUP_IPOIB[
        : ACTIVE_BACKUP_IPOIB.index("Slave Interface: ib1") + len("Slave Interface: ib1\n")
    ]
    with pytest.raises(ParseError, match="slave ib1 has no 'MII Status:'"):
        parse("bonding", truncated)
    with pytest.raises(ParseError, match="no bond-level 'MII Status:'"):
        parse("bonding", "Bonding Mode: fault-tolerance (active-backup)\n")


SYSFS_BOND = """/sys/class/net/bond0/bonding/mode:active-backup 1
/sys/class/net/bond0/bonding/slaves:ib0 ib1
/sys/class/net/bond0/bonding/active_slave:ib0
/sys/class/net/bond0/bonding/mii_status:up
/sys/class/net/bond0/bonding/miimon:100
/sys/class/net/bond0/bonding/fail_over_mac:active 1
/sys/class/net/bond0/lower_ib0/bonding_slave/mii_status:up
/sys/class/net/bond0/lower_ib0/bonding_slave/state:active
/sys/class/net/bond0/lower_ib0/bonding_slave/link_failure_count:0
/sys/class/net/bond0/lower_ib1/bonding_slave/mii_status:down
/sys/class/net/bond0/lower_ib1/bonding_slave/state:backup
/sys/class/net/bond0/lower_ib1/bonding_slave/link_failure_count:4
"""


def test_bonding_sysfs_grep_dump():
    rec = parse("bonding-sysfs", SYSFS_BOND)
    assert rec["bonding_masters"] is None
    b = rec["bonds"]["bond0"]
    assert (b["mode"], b["mode_id"], b["fail_over_mac"]) == ("active-backup", 1, "active")
    assert (b["currently_active_slave"], b["primary_slave"]) == ("ib0", None)
    assert (b["mii_status"], b["mii_polling_interval_ms"]) == ("up", 100)
    ib0, ib1 = b["slaves"]
    assert (ib0["name"], ib0["mii_status"], ib0["state"], ib0["link_failure_count"]) == (
        "ib0",
        "up",
        "active",
        0,
    )
    assert (ib1["name"], ib1["mii_status"], ib1["state"], ib1["link_failure_count"]) == (
        "ib1",
        "down",
        "backup",
        4,
    )


def test_bonding_sysfs_node_exporter_ttar():
    dump = ttar_to_grep_dump((FIXTURES / "sysfs" / "node_exporter-sys-class-net-bonding.ttar").read_text())
    rec = parse("bonding-sysfs", dump)
    assert rec["bonding_masters"] == ["bond0", "dmz", "int"]
    assert sorted(rec["bonds"]) == ["bond0", "dmz", "int"]
    assert rec["bonds"]["bond0"]["slaves"] == []  # empty slaves file
    int_slaves = {s["name"]: s["mii_status"] for s in rec["bonds"]["int"]["slaves"]}
    assert int_slaves == {"eth5": "up", "eth1": "down"}
    assert [s["name"] for s in rec["bonds"]["dmz"]["slaves"]] == ["eth0", "eth4"]


def test_bonding_sysfs_errors():
    with pytest.raises(ParseError, match="PATH:VALUE"):
        parse("bonding-sysfs", ACTIVE_BACKUP_IPOIB)
    with pytest.raises(ParseError, match="bonding"):
        parse("bonding-sysfs", "/sys/class/infiniband/mlx5_0/ports/1/state:4: ACTIVE\n")


# ---- issue 36.4: 802.3ad's active aggregator (real samples quoted in public issues:
# tests/fixtures/SOURCES.md)

def test_bonding_active_aggregator_info_systemd_11635():
    rec = parse("bonding", (FIXTURES / "bonding" /
                            "proc-net-bonding-802.3ad-slave-in-other-aggregator-systemd-11635-excerpt.txt").read_text())
    assert rec["mode"] == "802.3ad" and rec["no_active_aggregator"] is False
    assert rec["active_aggregator"] == {
        "aggregator_id": 2,
        "number_of_ports": 1,
        "actor_key": 9,
        "partner_key": 3,
        "partner_mac_address": "**:**:**:**:**:6e",
    }
    (slave,) = rec["slaves"]
    assert (slave["name"], slave["mii_status"], slave["aggregator_id"]) == ("enp7s0", "up", 1)


def test_bonding_no_active_aggregator_accelerated_text_387():
    rec = parse("bonding", (FIXTURES / "bonding" /
                            "proc-net-bonding-802.3ad-no-active-aggregator-accelerated-text-387.txt").read_text())
    assert rec["no_active_aggregator"] is True and rec["active_aggregator"] is None
    assert [(s["name"], s["aggregator_id"]) for s in rec["slaves"]] == [("eth1", None), ("eth2", None)]


def test_bonding_active_backup_has_no_aggregator():
    rec = parse("bonding", ACTIVE_BACKUP_IPOIB)
    assert rec["active_aggregator"] is None and rec["no_active_aggregator"] is False


def test_bonding_files_tail_headers():
    one = ACTIVE_BACKUP_IPOIB
    text = f"==> /proc/net/bonding/bond0 <==\n{one}\n==> /proc/net/bonding/bond1 <==\n{LACP}"
    rec = parse("bonding-files", text)
    assert sorted(rec["bonds"]) == ["bond0", "bond1"]
    assert rec["bonds"]["bond1"]["mode"] == "802.3ad" and rec["bonds"]["bond0"]["mode"] == "active-backup"
    assert parse("bonding-files", "") == {"bonds": {}}
    with pytest.raises(ParseError, match="expected '==> /proc/net/bonding/BOND <==' first"):
        parse("bonding-files", one)
    with pytest.raises(ParseError, match="bond1: truncated"):
        parse(
            "bonding-files",
            "==> /proc/net/bonding/bond1 <==\nBonding Mode: IEEE 802.3ad Dynamic link aggregation\n",
        )


def test_bonding_sysfs_ad_aggregator():
    dump = SYSFS_BOND.replace("mode:active-backup 1", "mode:802.3ad 4") + (
        "/sys/class/net/bond0/bonding/ad_aggregator:2\n/sys/class/net/bond0/bonding/ad_num_ports:1\n"
        "/sys/class/net/bond0/lower_ib0/bonding_slave/ad_aggregator_id:2\n"
        "/sys/class/net/bond0/lower_ib1/bonding_slave/ad_aggregator_id:1\n")
    b = parse("bonding-sysfs", dump)["bonds"]["bond0"]
    assert (b["mode"], b["ad_aggregator"], b["ad_num_ports"]) == ("802.3ad", 2, 1)
    assert [s["aggregator_id"] for s in b["slaves"]] == [2, 1]
