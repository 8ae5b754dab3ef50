"""ib.bond_failover (validate --disruptive): the pure evaluator, the peer choice, the command, and the glue
that runs it node by node after the normal checks. No lab: the lab test is
tests/validators/test_failover_lab.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clustercert.checks import HostContext, all_check_ids, bond_failover, component, disruptive_component
from clustercert.checks import run as check_run
from clustercert.collect import ssh
from clustercert.model.evidence import CommandResult, NodeEvidence
from clustercert.model.inventory import HostView, Inventory, InventoryVars
from clustercert.model.profile import load_profile
from clustercert.report.terminal import summary_table

sys.path.insert(0, str(Path(__file__).parent / "parsers"))
from test_bond_failover_output import BACKUP_DOWN, TESTED  # noqa: E402

CHECK = "ib.bond_failover"
BOND_OUT = """\
/sys/class/net/bond0/bonding/mode:active-backup 1
/sys/class/net/bond0/bonding/slaves:ib0 ib1
/sys/class/net/bond0/bonding/active_slave:ib0
/sys/class/net/bond0/bonding/mii_status:up
/sys/class/net/bond0/bonding/primary:ib0
/sys/class/net/bond0/bonding/miimon:100
/sys/class/net/bond0/bonding/fail_over_mac:active 1
/sys/class/net/ib0/bonding_slave/mii_status:up
/sys/class/net/ib1/bonding_slave/mii_status:up
"""


def res(stdout: str = "", rc: int | None = 0, stderr: str = "", timed_out: bool = False) -> CommandResult:
    return CommandResult(
        rc, stdout, stderr, timed_out, 0.5, "python3 -c '...' bond0 ib0 10.253.0.12 2000 10000 37"
    )


def ctx(peer: str | None = "10.253.0.12", note: str = "node02", **kw) -> HostContext:
    return HostContext(
        "node01",
        load_profile("lab", kw.pop("overrides", None)),
        timeout_s=30,
        bond_address="10.253.0.11/24",
        bond_peer=peer,
        bond_peer_note=note if peer else "no other node with a healthy bond",
        **kw,
    )


def evaluate(stdout: str, c: HostContext | None = None, **kw):
    return bond_failover.evaluate({"bond_failover": res(stdout, **kw)}, c or ctx())


def by_subject(findings) -> dict[str, object]:
    assert all(f.check == CHECK for f in findings)
    return {f.subject: f for f in findings}


def test_healthy_failover_passes_all_three_parts():
    fs = by_subject(evaluate(TESTED))
    assert set(fs) == {"bond0 failover", "bond0 peer 10.253.0.12 (node02)", "bond0 back to ib0"}
    assert all(f.status == "pass" for f in fs.values()), fs
    fo = fs["bond0 failover"]
    assert fo.observed == "ib0 -> ib1 in 42 ms" and fo.value == 41.7 and fo.unit == "ms"
    assert "within 300 ms (miimon 100 x 3)" in fo.expected
    assert fs["bond0 peer 10.253.0.12 (node02)"].observed == "3/3 replies"
    assert fs["bond0 back to ib0"].observed == "ib0 active again 22 ms after ib0 came back up"


def test_slow_failover_fails_and_says_how_slow():
    fs = by_subject(evaluate(TESTED.replace("failover_ms=41.7", "failover_ms=450.2")))
    assert fs["bond0 failover"].status == "fail" and fs["bond0 failover"].observed == "ib0 -> ib1 in 450 ms"
    assert fs["bond0 back to ib0"].status == "pass"


def test_miimon_sets_the_limit():
    slow_mon = ctx(
        overrides={
            "ib": {
                "bond": {
                    "name": "bond0",
                    "mode": "active-backup",
                    "slaves": ["ib0", "ib1"],
                    "primary": "ib0",
                    "miimon_ms": 200,
                    "fail_over_mac": "active",
                }
            }
        }
    )
    fs = by_subject(evaluate(TESTED.replace("failover_ms=41.7", "failover_ms=450.2"), slow_mon))
    assert fs["bond0 failover"].status == "pass" and "within 600 ms" in fs["bond0 failover"].expected


def test_no_failover_within_the_bound_fails():
    text = TESTED.replace("failover_ms=41.7", "failover_ms=").replace("active_during=ib1", "active_during=")
    fs = by_subject(evaluate(text))
    assert fs["bond0 failover"].status == "fail"
    assert fs["bond0 failover"].observed == "active slave still none 2000 ms after ib0 went down"


def test_peer_unreachable_during_the_outage_fails():
    text = TESTED.replace(
        "3 packets transmitted, 3 received, 0% packet loss",
        "3 packets transmitted, 0 received, 100% packet loss",
    )
    fs = by_subject(evaluate(text))
    peer = fs["bond0 peer 10.253.0.12 (node02)"]
    assert peer.status == "fail" and peer.observed == "0/3 replies; bond0 addresses: 10.253.0.11/24"
    assert "while ib0 is down" in peer.expected
    assert fs["bond0 failover"].status == "pass"


def test_peer_unreachable_even_before_fails_and_says_so():
    text = TESTED.replace("1 packets transmitted, 1 received", "1 packets transmitted, 0 received")
    peer = by_subject(evaluate(text))["bond0 peer 10.253.0.12 (node02)"]
    assert (
        peer.status == "fail"
        and "even before the failover" in peer.observed
        and "10.253.0.11/24" in peer.observed
    )
    # the role did not put the inventory's address on the bond: the finding says so
    peer = by_subject(evaluate(text.replace("addresses=10.253.0.11/24", "addresses=")))[
        "bond0 peer 10.253.0.12 (node02)"
    ]
    assert peer.observed.endswith("; bond0 addresses: none, not the inventory's 10.253.0.11/24")


def test_ping_missing_is_an_error_not_a_pass():
    text = TESTED.replace(
        "ping_rc=0\nping_summary=3 packets transmitted, 3 received, 0% packet loss, time 404ms\n"
        "ping_message=\n",
        "ping_error=ping not found\n",
    )
    peer = by_subject(evaluate(text))["bond0 peer 10.253.0.12 (node02)"]
    assert peer.status == "error" and "ping not found" in peer.observed


def test_no_peer_skips_reachability_but_still_times_the_failover():
    fs = by_subject(evaluate(TESTED.replace("peer=10.253.0.12", "peer="), ctx(peer=None)))
    assert (
        fs["bond0 peer"].status == "skip" and "no other node with a healthy bond" in fs["bond0 peer"].observed
    )
    assert fs["bond0 failover"].status == "pass" and fs["bond0 back to ib0"].status == "pass"


def test_primary_not_back_fails():
    text = TESTED.replace("return_ms=22.3", "return_ms=").replace("active_after=ib0", "active_after=ib1")
    back = by_subject(evaluate(text))["bond0 back to ib0"]
    assert back.status == "fail" and back.observed == "active slave ib1 10000 ms after ib0 came back up"


def test_slave_not_restored_fails_loudly():
    text = (
        TESTED.replace("restored=1", "restored=0\nrestore_error=RTNETLINK answers: No such device")
        .replace("return_bound_ms=10000\nreturn_ms=22.3\n", "")
        .replace("active_after=ib0", "active_after=ib1")
    )
    back = by_subject(evaluate(text))["bond0 back to ib0"]
    assert (
        back.status == "fail"
        and "could not be brought back up: RTNETLINK answers: No such device" in back.observed
    )
    assert "watchdog retries after 37 s" in back.observed


def test_backup_down_is_a_fail_without_disturbing_the_node():
    (f,) = evaluate(BACKUP_DOWN)
    assert f.status == "fail" and f.subject == "bond0 failover"
    assert f.observed == "backup slave ib1 is down: failover impossible (ib0 was not taken down)"


def test_no_active_slave_is_a_fail():
    text = (
        BACKUP_DOWN.replace("active_before=ib0", "active_before=")
        .replace("backup=ib1", "backup=ib0 ib1")
        .replace("backup_down", "no_active")
    )
    (f,) = evaluate(text)
    assert f.status == "fail" and "no active slave before the test" in f.observed


@pytest.mark.parametrize(
    "stdout,kw,reason",
    [
        (
            "format=clustercert-bond-failover 1\nbond=bond0\noutcome=no_bond\nend=1\n",
            {},
            "bond bond0 does not exist",
        ),
        ("", {"rc": None, "timed_out": True}, "timed out after 32 s"),
        (
            TESTED.split("restored=1")[0],
            {"rc": 1, "stderr": "Traceback ..."},
            "exit status 1: bond failover step",
        ),
        (TESTED.split("restored=1")[0], {}, "unparseable bond-failover output: truncated"),
        ("", {"rc": 127, "stderr": "sh: 1: python3: not found"}, "tool not found: bond failover step"),
        (
            BACKUP_DOWN.replace(
                "outcome=backup_down", "down_error=Operation not permitted\noutcome=down_failed"
            ),
            {},
            "could not take ib0 down: Operation not permitted",
        ),
    ],
)
def test_step_that_could_not_run_is_an_error(stdout, kw, reason):
    (f,) = evaluate(stdout, **kw)
    assert f.status == "error" and f.check == CHECK and f.subject == "bond0"
    assert reason in f.observed, f.observed


def test_not_collected_is_an_error_and_no_bond_in_profile_is_a_skip():
    (f,) = bond_failover.evaluate({}, ctx())
    assert f.status == "error" and "not collected" in f.observed
    nobond = ctx(overrides={"ib": {"bond": None}})
    assert bond_failover.commands(nobond) == {}
    (f,) = bond_failover.evaluate({}, nobond)
    assert f.status == "skip" and "profile declares no bond" in f.observed


def test_one_command_with_a_timeout_that_covers_its_bounds():
    (name, (cmd, timeout)), = bond_failover.commands(ctx()).items()
    assert name == "bond_failover"
    assert timeout >= 30 and timeout >= (2000 + 10000) / 1000 + 20
    assert cmd.startswith('"${CLUSTERCERT_PYTHON:-python3}" -c ')
    assert cmd.endswith(f" bond0 ib0 10.253.0.12 2000 10000 {int(timeout) + 5}")
    assert "ip link set" not in cmd.split(" -c ")[0]  # everything runs inside the script
    # a short host timeout never cuts the step below its own bounds; a long one is kept
    assert bond_failover.command_timeout(HostContext("n", load_profile("lab"), timeout_s=5)) == 32
    assert bond_failover.command_timeout(HostContext("n", load_profile("lab"), timeout_s=120)) == 120
    peerless = bond_failover.commands(ctx(peer=None))["bond_failover"][0]
    assert peerless.endswith(" bond0 ib0 '' 2000 10000 37")


def test_the_step_on_a_machine_without_the_bond_touches_nothing():
    """The real script, run here: a bond that does not exist is reported as such (nothing is taken down)."""
    c = ctx(
        overrides={
            "ib": {
                "bond": {
                    "name": "ccnosuchbond",
                    "mode": "active-backup",
                    "slaves": ["ib0", "ib1"],
                    "primary": "ib0",
                    "miimon_ms": 100,
                    "fail_over_mac": "active",
                }
            }
        }
    )
    cmd, timeout = bond_failover.commands(c)["bond_failover"]
    p = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=timeout,
                       env={"PATH": "/usr/bin:/bin", "CLUSTERCERT_PYTHON": sys.executable})
    (f,) = bond_failover.evaluate(
        {"bond_failover": CommandResult(p.returncode, p.stdout, p.stderr, False, 0.1, cmd)}, c
    )
    assert (
        f.status == "error"
        and f.observed == "bond ccnosuchbond does not exist: the failover test could not run"
    )


def test_peers_are_the_next_healthy_node_in_the_same_subnet():
    order = ["n1", "n2", "n3", "n4", "n5"]
    addrs = {
        "n1": "10.253.0.11/24",
        "n2": "10.253.0.12/24",
        "n3": "10.253.0.13/24",
        "n4": None,
        "n5": "10.9.0.15/24",
    }
    peers = bond_failover.choose_peers(order, addrs, eligible={"n1", "n3", "n4", "n5"})
    assert peers["n1"] == ("10.253.0.13", "n3")          # n2's bond is not healthy
    assert peers["n2"] == ("10.253.0.13", "n3")
    assert peers["n3"] == ("10.253.0.11", "n1")          # wraps around; n4 has no address, n5 another subnet
    assert peers["n4"][0] is None and "this node has no bond address" in peers["n4"][1]
    assert peers["n5"] == (None, "no other node with a healthy bond and an address in 10.9.0.0/24")
    assert bond_failover.choose_peers(["a"], {"a": "10.0.0.1/24"}, {"a"})["a"][0] is None  # never itself


def test_check_ids_and_component_wiring():
    assert CHECK not in all_check_ids()                # not a default check
    ids = all_check_ids(disruptive=True)
    assert CHECK in ids and len(ids) == len(set(ids)) == len(all_check_ids()) + 1
    assert disruptive_component("bond").check_ids == (CHECK,)
    assert disruptive_component("gpu") is None


def _inventory(names: list[str]) -> Inventory:
    prof = load_profile("lab")
    hosts = {
        n: HostView(
            n,
            ["lab"],
            InventoryVars(clustercert_profile="lab"),
            prof,
            {"ansible_host": f"10.0.0.{i}"},
            f"10.253.0.{10 + i}/24",
        )
        for i, n in enumerate(names, 1)
    }
    return Inventory(Path("/nonexistent"), hosts, [])


def test_validate_runs_the_failover_node_by_node_after_the_normal_checks(monkeypatch, tmp_path):
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path))
    inv = _inventory(["n1", "n2", "n3", "n4"])
    calls = []

    def fake_many(nodes, commands_for, **kw):
        calls.append(("many", sorted(nodes), sorted(next(iter(commands_for.values())))))
        bad = BOND_OUT.replace("ib1/bonding_slave/mii_status:up", "ib1/bonding_slave/mii_status:down")
        out = {
            n: NodeEvidence(
                n, True, "", {"bonding": res(bad if n == "n2" else BOND_OUT), "bonding_proc": res("")}
            )
            for n in nodes
            if n != "n4"
        }
        out["n4"] = NodeEvidence("n4", False, "Connection refused")
        return out

    def fake_in_turn(nodes, commands_for, **kw):
        calls.append(
            ("in_turn", list(nodes), {n: commands_for[n]["bond_failover"][0].split()[-4] for n in nodes})
        )
        return {
            n: NodeEvidence(n, True, "", {"bond_failover": res(BACKUP_DOWN if n == "n2" else TESTED)})
            for n in nodes
        }

    monkeypatch.setattr(ssh, "collect_many", fake_many)
    monkeypatch.setattr(ssh, "collect_in_turn", fake_in_turn)
    results = check_run.validate_nodes(inv, ["bond"], disruptive=True, io=ssh.SshBackend())
    # normal checks first (all nodes at once), then the failover on the reachable nodes one by one, in order;
    # each pings the next reachable node whose ib.bond passed (n2's backup slave is down, n4 does not answer)
    assert calls[0] == ("many", ["n1", "n2", "n3", "n4"], ["bonding", "bonding_proc"])
    assert calls[1] == (
        "in_turn",
        ["n1", "n2", "n3"],
        {"n1": "10.253.0.13", "n2": "10.253.0.13", "n3": "10.253.0.11"},
    )
    assert len(calls) == 2
    assert results["n4"].verdict == "unreachable" and results["n4"].findings == []
    for n in ("n1", "n3"):
        assert results[n].verdict == "pass", results[n].findings
        assert {f.status for f in results[n].findings if f.check == CHECK} == {"pass"}
        assert "bond_failover" in results[n].evidence.results  # recorded with the node's other evidence
    assert results["n2"].verdict == "fail"
    assert [f.status for f in results["n2"].findings if f.check == CHECK] == ["fail"]
    rows = {r["node"]: r for r in summary_table(results, ["bond"])}
    assert rows["n1"]["bond"] == "pass" and rows["n2"]["bond"] == "fail (2)"
    # without --disruptive: no failover step, no ib.bond_failover finding
    calls.clear()
    results = check_run.validate_nodes(inv, ["bond"], io=ssh.SshBackend())
    assert [c[0] for c in calls] == ["many"]
    assert not [f for r in results.values() for f in r.findings if f.check == CHECK]


def test_component_interface():
    comp = component("bond_failover")
    assert comp.check_ids == (CHECK,) and comp.commands is bond_failover.commands
