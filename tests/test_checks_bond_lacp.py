"""Issue 36.4: 802.3ad bonds whose slaves sit outside the active aggregator look healthy (MII up) and are
a finding, on real /proc/net/bonding and sysfs output quoted in public issues (tests/fixtures/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

from clustercert.checks import HostContext, component
from clustercert.checks.bond import LACP_CMD, lacp_problems
from clustercert.model.evidence import CommandResult
from clustercert.model.profile import load_profile
from clustercert.parsers import parse

FIX = Path(__file__).parent / "fixtures" / "bonding"
OTHER_AGGREGATOR = (
    FIX / "proc-net-bonding-802.3ad-slave-in-other-aggregator-systemd-11635-excerpt.txt"
).read_text()
NO_AGGREGATOR = (FIX / "proc-net-bonding-802.3ad-no-active-aggregator-accelerated-text-387.txt").read_text()
SYSFS_CAT = (FIX / "sysfs-cat-bond0-ad-aggregator-mismatch-node_exporter-1604.txt").read_text()

# written for this project in the kernel's format (bond_procfs.c): a healthy 802.3ad bond, both slaves in
# the active aggregator (the real samples above are all faulty)
HEALTHY = """Ethernet Channel Bonding Driver: v6.1.0-18-amd64

Bonding Mode: IEEE 802.3ad Dynamic link aggregation
Transmit Hash Policy: layer3+4 (1)
MII Status: up
MII Polling Interval (ms): 100
Up Delay (ms): 0
Down Delay (ms): 0
Peer Notification Delay (ms): 0

802.3ad info
LACP active: on
LACP rate: fast
Min links: 0
Aggregator selection policy (ad_select): stable
System priority: 65535
System MAC address: 94:6d:ae:11:22:30
Active Aggregator Info:
\tAggregator ID: 1
\tNumber of ports: 2
\tActor Key: 21
\tPartner Key: 32769
\tPartner Mac Address: 00:1c:73:aa:bb:cc

Slave Interface: enp65s0f0np0
MII Status: up
Speed: 100000 Mbps
Duplex: full
Link Failure Count: 0
Permanent HW addr: 94:6d:ae:11:22:30
Slave queue ID: 0
Aggregator ID: 1

Slave Interface: enp65s0f1np1
MII Status: up
Speed: 100000 Mbps
Duplex: full
Link Failure Count: 0
Permanent HW addr: 94:6d:ae:11:22:31
Slave queue ID: 0
Aggregator ID: 1
"""
ACTIVE_BACKUP = """Bonding Mode: fault-tolerance (active-backup) (fail_over_mac active)
Primary Slave: ib0 (primary_reselect always)
Currently Active Slave: ib0
MII Status: up
MII Polling Interval (ms): 100

Slave Interface: ib0
MII Status: up
"""


def tail(**files: str) -> str:
    """What LACP_CMD (tail -v -n +1 /proc/net/bonding/*) prints for these bond files."""
    return "\n".join(f"==> /proc/net/bonding/{name} <==\n{text}" for name, text in files.items())


def res(stdout: str, rc: int | None = 0, timed_out: bool = False) -> CommandResult:
    return CommandResult(rc, stdout, "", timed_out, 0.1, LACP_CMD)


def lacp(stdout: str, **kw) -> list:
    ctx = HostContext("n1", load_profile("lab"), timeout_s=20)
    return [
        f
        for f in component("bond").evaluate({"bonding_proc": res(stdout, **kw)}, ctx)
        if f.check == "net.bond_lacp"
    ]


def test_slave_in_another_aggregator_is_a_finding():
    (f,) = lacp(tail(bond0=OTHER_AGGREGATOR))
    assert (f.status, f.subject) == ("fail", "bond0")
    assert "not in the active aggregator 2: enp7s0 in aggregator 1" in f.observed
    assert "Active Aggregator Info" in f.evidence


def test_no_active_aggregator_is_a_finding():
    (f,) = lacp(tail(bond0=NO_AGGREGATOR))
    assert f.status == "fail" and "no active aggregator" in f.observed


def test_healthy_lacp_bond_passes_and_each_bond_is_judged():
    fs = lacp(tail(bond0=HEALTHY, bond1=OTHER_AGGREGATOR, ib_bond=ACTIVE_BACKUP))
    assert [(f.subject, f.status) for f in fs] == [("bond0", "pass"), ("bond1", "fail")]
    assert "2 slaves up in active aggregator 1" in fs[0].observed


def test_slave_down_in_an_lacp_bond_is_a_finding():
    down = HEALTHY.replace("MII Status: up\nSpeed: 100000 Mbps\nDuplex: full\nLink Failure Count: 0\n"
                           "Permanent HW addr: 94:6d:ae:11:22:31", "MII Status: down\nSpeed: Unknown\n"
                           "Duplex: Unknown\nLink Failure Count: 1\nPermanent HW addr: 94:6d:ae:11:22:31")
    (f,) = lacp(tail(bond0=down))
    assert f.status == "fail" and "slave down enp65s0f1np1" in f.observed


def test_no_lacp_bond_is_skip_and_unreadable_is_error():
    assert [f.status for f in lacp("")] == ["skip"]  # no bond at all: the command prints nothing
    (f,) = lacp(tail(ib_bond=ACTIVE_BACKUP))
    assert f.status == "skip" and "bonds: ib_bond (active-backup)" in f.observed
    assert "profile" in f.observed  # the lab's healthy run holds every skip to saying why (the profile)
    assert [f.status for f in lacp(tail(bond0=HEALTHY), rc=1)] == ["error"]
    assert [f.status for f in lacp(tail(bond0=HEALTHY), timed_out=True, rc=None)] == ["error"]
    (f,) = lacp(tail(bond0=HEALTHY[: HEALTHY.index("Active Aggregator Info")]))
    assert f.status == "error" and "no active aggregator id" in f.observed
    (f,) = lacp("Bonding Mode: IEEE 802.3ad Dynamic link aggregation\n")
    assert f.status == "error" and "bonding-files" in f.observed


def test_sysfs_view_of_the_same_fault():
    """node_exporter#1604: the same judgement on the sysfs attributes (ad_aggregator, ad_aggregator_id)."""
    lines, path = [], None
    for ln in SYSFS_CAT.splitlines():
        if ln.startswith("$ cat "):
            path = ln.removeprefix("$ cat ")
        else:
            lines.append(f"{path}:{ln}")
    dump = "\n".join(lines).replace("/sys/class/net/bond0/bonding/slaves:", "/sys/class/net/bond0/bonding/"
                                    "mode:802.3ad 4\n/sys/class/net/bond0/bonding/slaves:")
    rec = parse("bonding-sysfs", dump)["bonds"]["bond0"]
    assert (rec["ad_aggregator"], [s["aggregator_id"] for s in rec["slaves"]]) == (2, [2, 3])
    for s in rec["slaves"]:
        s["mii_status"] = "up"  # the issue shows no mii_status; the aggregator ids are the fault
    problems, unread = lacp_problems(rec)
    assert unread is None and problems == ["not in the active aggregator 2: enp216s0f0 in aggregator 3"]
