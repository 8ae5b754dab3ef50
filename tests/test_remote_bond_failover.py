"""The bond failover driver (clustercert.remote.bond_failover), as code: its main() imported and run against
a bond made of files (the sysfs directory moved) with stand-ins for ``ip`` and ``ping``; and its text run as
the node runs it (``python3 -c <text> ARGS``, by this Python and by 3.6 where it is installed), to the end
and interrupted by SIGTERM while the slave is down."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_remote_runner import NODE_PYTHONS

from clustercert import remote
from clustercert.parsers import parse
from clustercert.remote import bond_failover as driver

# `ip`: `link set dev S down` makes the other slave active, `up` makes the primary active again
# ($FAKE_UP=fail: exit 2; $FAKE_DOWN=fail: exit 2 with a message); `-o -4 addr show dev BOND` prints one
# address.
FAKE_IP = f"""#!{sys.executable}
import json, os, sys
a = sys.argv[1:]
with open(os.environ["ARGV_LOG"], "a") as f:
    f.write(json.dumps(["ip"] + a) + "\\n")
bond = os.path.join(os.environ["FAKE_NET"], "bond0", "bonding")
if a[:3] == ["link", "set", "dev"]:
    if os.environ.get("FAKE_" + a[-1].upper()) == "fail":
        sys.stderr.write("RTNETLINK answers: Operation not permitted\\n")
        sys.exit(2)
    slaves = open(os.path.join(bond, "slaves")).read().split()
    now = [s for s in slaves if s != a[3]][0] if a[-1] == "down" else open(os.path.join(bond, "primary")).read().strip()
    open(os.path.join(bond, "active_slave"), "w").write(now + "\\n")
elif a[:3] == ["-o", "-4", "addr"]:
    print("7: bond0    inet 10.253.0.11/24 brd 10.253.0.255 scope global bond0\\\\       valid_lft forever")
"""  # noqa: E501

# `ping`: all replies; the failover's (-c 3) after $FAKE_PING_SLEEP seconds
FAKE_PING = f"""#!{sys.executable}
import json, os, sys, time
with open(os.environ["ARGV_LOG"], "a") as f:
    f.write(json.dumps(["ping"] + sys.argv[1:]) + "\\n")
n = sys.argv[sys.argv.index("-c") + 1]
if n == "3":
    time.sleep(float(os.environ.get("FAKE_PING_SLEEP", "0")))
print("PING x\\n\\n--- x ping statistics ---\\n%s packets transmitted, %s received, 0%% packet loss, time 1ms" % (n, n))
"""  # noqa: E501

GUARD_S = "4321"  # the watchdog's delay: tells its process from any other


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A bond0 of ib0 (active, primary) and ib1 under tmp_path/net, the stand-ins first on PATH; calls() reads
    what they were given. The driver's NET points at the files and its signal handlers are put back."""
    net = tmp_path / "net"
    bonding = net / "bond0" / "bonding"
    bonding.mkdir(parents=True)
    for name, text in (
        ("slaves", "ib0 ib1"),
        ("active_slave", "ib0"),
        ("primary", "ib0"),
        ("mode", "active-backup 1"),
    ):
        (bonding / name).write_text(text + "\n")
    for s in ("ib0", "ib1"):
        (net / s / "bonding_slave").mkdir(parents=True)
        (net / s / "bonding_slave" / "mii_status").write_text("up\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool, text in (("ip", FAKE_IP), ("ping", FAKE_PING)):
        (bindir / tool).write_text(text)
        (bindir / tool).chmod(0o755)
    log = tmp_path / "argv.log"
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("ARGV_LOG", str(log))
    monkeypatch.setenv("FAKE_NET", str(net))
    monkeypatch.setattr(driver, "NET", str(net) + "/")
    handlers = {s: signal.getsignal(s) for s in driver.STOP_SIGNALS}

    class Node:
        path = net

        @staticmethod
        def calls() -> list[list[str]]:
            return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []

    yield Node
    for s, h in handlers.items():
        signal.signal(s, h)
    for pid in watchdogs(Node):  # its group: its sleep too
        os.killpg(pid, signal.SIGKILL)


def watchdogs(node) -> list[int]:
    """The watchdogs of ``node``'s bond: those whose environment has its FAKE_NET (inherited from the test),
    not a watchdog of a test running beside this one (pytest-xdist, another session's run)."""
    found, own = [], f"\0FAKE_NET={node.path}\0".encode()
    for p in Path("/proc").iterdir():
        try:
            if (p.name.isdigit() and f"\0watchdog\0{GUARD_S}\0".encode() in (p / "cmdline").read_bytes()
                    and own in b"\0" + (p / "environ").read_bytes()):
                found.append(int(p.name))
        except OSError:
            pass
    return found


def run_main(capsys, *args: str) -> tuple[int, dict, str]:
    argv = ["bond0", "", "10.253.0.12", "2000", "2000", GUARD_S]
    argv[:len(args)] = args
    rc = driver.main(argv)
    out = capsys.readouterr().out
    return rc, parse("bond-failover", out), out


def test_main_takes_the_active_slave_down_and_brings_it_back(node, capsys):
    rc, rec, out = run_main(capsys)
    assert rc == 0
    assert (rec["outcome"], rec["mode"], rec["slaves"], rec["primary"]) == (
        "tested",
        "active-backup",
        ["ib0", "ib1"],
        "ib0",
    )
    assert rec["addresses"] == ["10.253.0.11/24"] and rec["peer"] == "10.253.0.12"
    assert (rec["active_before"], rec["active_during"], rec["active_after"]) == ("ib0", "ib1", "ib0")
    assert 0 <= rec["failover_ms"] < 2000 and 0 <= rec["return_ms"] < 2000
    assert rec["failover_bound_ms"] == 2000 and rec["return_bound_ms"] == 2000
    assert rec["ping_before"]["received"] == 1 and rec["ping"]["received"] == 3
    assert rec["restored"] is True and rec["watchdog_s"] == int(GUARD_S)
    assert out.endswith("outcome=tested\nend=1\n")
    calls = node.calls()
    assert [c for c in calls if c[:2] == ["ip", "link"]] == [["ip", "link", "set", "dev", "ib0", "down"],
                                                            ["ip", "link", "set", "dev", "ib0", "up"]]
    assert ["ping", "-n", "-c", "3", "-i", "0.2", "-W", "1", "-I", "bond0", "10.253.0.12"] in calls
    deadline = time.monotonic() + 5
    while watchdogs(node) and time.monotonic() < deadline:  # restored: the watchdog is killed
        time.sleep(0.05)
    assert watchdogs(node) == []


def test_main_without_a_peer_pings_nothing(node, capsys):
    rc, rec, _ = run_main(capsys, "bond0", "", "")
    assert rec["outcome"] == "tested" and rec["ping"] is None and rec["ping_before"] is None
    assert not [c for c in node.calls() if c[0] == "ping"]


def test_main_refuses_a_bond_whose_backup_is_down(node, capsys):
    (node.path / "ib1" / "bonding_slave" / "mii_status").write_text("down\n")
    rc, rec, out = run_main(capsys)
    assert (rc, rec["outcome"], rec["backup"]) == (0, "backup_down", ["ib1"])
    assert not [c for c in node.calls() if c[:2] == ["ip", "link"]] and watchdogs(node) == []


def test_main_on_a_bond_without_an_active_slave_or_no_bond(node, capsys):
    (node.path / "bond0" / "bonding" / "active_slave").write_text("\n")
    assert run_main(capsys)[1]["outcome"] == "no_active"
    rc, rec, out = run_main(capsys, "bond9")
    assert (rc, rec["outcome"]) == (0, "no_bond") and out.startswith(
        "format=clustercert-bond-failover 1\nbond=bond9\n"
    )
    assert not [c for c in node.calls() if c[:2] == ["ip", "link"]]


def test_main_when_the_slave_cannot_be_taken_down(node, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_DOWN", "fail")
    rc, rec, _ = run_main(capsys)
    assert (rec["outcome"], rec["down_error"]) == (
        "down_failed",
        "RTNETLINK answers: Operation not permitted",
    )
    assert rec["restored"] is None and rec["failover_ms"] is None
    deadline = time.monotonic() + 5
    while watchdogs(node) and time.monotonic() < deadline:  # nothing went down: the watchdog is killed too
        time.sleep(0.05)
    assert watchdogs(node) == []


def test_main_when_the_restore_fails_leaves_the_watchdog(node, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_UP", "fail")
    rc, rec, _ = run_main(capsys)
    assert rec["restored"] is False and rec["restore_error"] == "RTNETLINK answers: Operation not permitted"
    assert rec["return_ms"] is None and rec["outcome"] == "tested"
    assert [c for c in node.calls() if c[-1] == "up"] == [["ip", "link", "set", "dev", "ib0", "up"]] * 5
    assert len(watchdogs(node)) == 1  # it brings the slave up later (killed here by the fixture)


def node_text(node) -> str:
    """The driver's text with the sysfs directory moved (as tests/test_injection.py does)."""
    text = remote.source("bond_failover")
    script = text.replace('"/sys/class/net/"', repr(str(node.path) + "/"))
    assert script != text
    return script


@pytest.mark.parametrize("python", NODE_PYTHONS)
def test_the_text_run_as_on_the_node(node, python):
    """``python3 -c <text> ARGS`` as the node runs it, to the end."""
    p = subprocess.run(
        [python, "-c", node_text(node), "bond0", "ib0", "10.253.0.12", "2000", "2000", GUARD_S],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    rec = parse("bond-failover", p.stdout)
    assert (rec["outcome"], rec["active_during"], rec["restored"], rec["active_after"]) == (
        "tested",
        "ib1",
        True,
        "ib0",
    )
    assert rec["failover_ms"] is not None and rec["return_ms"] is not None and rec["ping"]["received"] == 3


@pytest.mark.parametrize("python", NODE_PYTHONS)
def test_the_text_run_as_on_the_node_restores_the_slave_when_terminated(node, python):
    """SIGTERM while the slave is down and the peer is pinged: the slave comes back up, exit status 143."""
    env = dict(os.environ, FAKE_PING_SLEEP="20")
    p = subprocess.Popen(
        [python, "-c", node_text(node), "bond0", "ib0", "10.253.0.12", "2000", "2000", GUARD_S],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        lines = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            lines.append(line)
            if line.startswith("active_during=") or not line:
                break
        deadline = time.monotonic() + 10
        while (
            not [c for c in node.calls() if c[:4] == ["ping", "-n", "-c", "3"]]
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    out = "".join(lines) + out
    assert p.returncode == 128 + signal.SIGTERM, out + err
    assert "active_during=ib1\n" in out and "restored=1\n" in out and "end=1" not in out
    assert [c for c in node.calls() if c[:2] == ["ip", "link"]][-1] == [
        "ip",
        "link",
        "set",
        "dev",
        "ib0",
        "up",
    ]
    assert (node.path / "bond0" / "bonding" / "active_slave").read_text() == "ib0\n"
