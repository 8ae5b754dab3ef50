"""The bond failover step's output (clustercert/remote/bond_failover.py) -> parser bond-failover.

The samples are what the step prints (written for this project: it is clustercert's own format)."""

from __future__ import annotations

import pytest

from clustercert.parsers import REGISTRY, ParseError, parse

TESTED = """\
format=clustercert-bond-failover 1
bond=bond0
mode=active-backup
slaves=ib0 ib1
primary=ib0
addresses=10.253.0.11/24
active_before=ib0
backup=ib1
peer=10.253.0.12
ping_before_rc=0
ping_before_summary=1 packets transmitted, 1 received, 0% packet loss, time 0ms
ping_before_message=
watchdog_s=37
failover_bound_ms=2000
failover_ms=41.7
active_during=ib1
ping_rc=0
ping_summary=3 packets transmitted, 3 received, 0% packet loss, time 404ms
ping_message=
restored=1
return_bound_ms=10000
return_ms=22.3
active_after=ib0
outcome=tested
end=1
"""

BACKUP_DOWN = """\
format=clustercert-bond-failover 1
bond=bond0
mode=active-backup
slaves=ib0 ib1
primary=ib0
addresses=10.253.0.12/24
active_before=ib0
backup=ib1
outcome=backup_down
end=1
"""


def test_registered():
    assert "bond-failover" in REGISTRY and REGISTRY["bond-failover"].description.strip()


def test_tested_run():
    rec = parse("bond-failover", TESTED)
    assert rec["outcome"] == "tested" and rec["bond"] == "bond0" and rec["mode"] == "active-backup"
    assert rec["slaves"] == ["ib0", "ib1"] and rec["primary"] == "ib0" and rec["backup"] == ["ib1"]
    assert rec["addresses"] == ["10.253.0.11/24"] and rec["peer"] == "10.253.0.12"
    assert (rec["active_before"], rec["active_during"], rec["active_after"]) == ("ib0", "ib1", "ib0")
    assert rec["failover_ms"] == 41.7 and rec["failover_bound_ms"] == 2000.0
    assert rec["return_ms"] == 22.3 and rec["return_bound_ms"] == 10000.0
    assert rec["ping_before"] == {"rc": 0, "transmitted": 1, "received": 1, "message": ""}
    assert rec["ping"] == {"rc": 0, "transmitted": 3, "received": 3, "message": ""}
    assert rec["restored"] is True and rec["watchdog_s"] == 37 and rec["ping_error"] is None


def test_no_failover_within_the_bound_and_lost_pings():
    text = (
        TESTED.replace("failover_ms=41.7", "failover_ms=")
        .replace("active_during=ib1", "active_during=")
        .replace(
            "ping_rc=0\nping_summary=3 packets transmitted, 3 received, 0% packet loss, time 404ms\n"
            "ping_message=",
            "ping_rc=1\n"
            "ping_summary=3 packets transmitted, 0 received, +3 errors, 100% packet loss, time "
            "2040ms\nping_message=",
        )
    )
    rec = parse("bond-failover", text)
    assert rec["failover_ms"] is None and rec["active_during"] is None
    assert rec["ping"] == {"rc": 1, "transmitted": 3, "received": 0, "message": ""}


def test_ping_without_summary_and_busybox_summary():
    text = TESTED.replace(
        "ping_summary=3 packets transmitted, 3 received, 0% packet loss, time 404ms\nping_message=",
        "ping_summary=\nping_message=connect: Network is unreachable",
    )
    rec = parse("bond-failover", text)
    assert rec["ping"] == {
        "rc": 0,
        "transmitted": None,
        "received": None,
        "message": "connect: Network is unreachable",
    }
    busybox = TESTED.replace(
        "3 packets transmitted, 3 received,", "3 packets transmitted, 2 packets received,"
    )
    assert parse("bond-failover", busybox)["ping"]["received"] == 2


def test_early_outcomes():
    rec = parse("bond-failover", BACKUP_DOWN)
    assert rec["outcome"] == "backup_down" and rec["backup"] == ["ib1"] and rec["failover_ms"] is None
    assert rec["restored"] is None and rec["ping"] is None
    rec = parse("bond-failover", "format=clustercert-bond-failover 1\nbond=bond0\noutcome=no_bond\nend=1\n")
    assert rec["outcome"] == "no_bond" and rec["slaves"] == [] and rec["active_before"] is None
    rec = parse("bond-failover", BACKUP_DOWN.replace("outcome=backup_down", "peer=\nwatchdog_s=37\n"
                                                     "down_error=RTNETLINK answers: Operation not permitted\n"
                                                     "outcome=down_failed"))
    assert (
        rec["outcome"] == "down_failed" and rec["down_error"] == "RTNETLINK answers: Operation not permitted"
    )


def test_crlf_and_blank_lines_are_tolerated():
    assert parse("bond-failover", TESTED.replace("\n", "\r\n") + "\n\n")["failover_ms"] == 41.7


MALFORMED = [
    ("empty", "", "empty input"),
    (
        "other-tool",
        "PING 10.253.0.12 (10.253.0.12) from 10.253.0.11 bond0: 56(84) bytes of data.\n",
        "expected 'format=",
    ),
    ("truncated", TESTED.split("restored=1")[0], "truncated"),
    (
        "not-key-value",
        TESTED.replace("active_during=ib1", "active_during ib1"),
        "line 16: expected key=value",
    ),
    ("twice", TESTED.replace("restored=1", "restored=1\nrestored=1"), "restored given twice"),
    ("unknown-outcome", TESTED.replace("outcome=tested", "outcome=maybe"), "outcome: expected one of"),
    ("no-outcome", TESTED.replace("outcome=tested\n", ""), "outcome: expected one of"),
    ("bad-number", TESTED.replace("failover_ms=41.7", "failover_ms=fast"), "failover_ms: expected a number"),
    ("tested-without-timing", TESTED.replace("failover_ms=41.7\n", ""), "outcome tested without failover_ms"),
    ("bad-restored", TESTED.replace("restored=1", "restored=yes"), "restored: expected 0 or 1"),
    (
        "bad-ping-summary",
        TESTED.replace("3 packets transmitted, 3 received", "all good"),
        "unrecognised ping summary",
    ),
    ("bad-ping-rc", TESTED.replace("ping_rc=0", "ping_rc=zero"), "ping_rc: expected an exit status"),
    ("no-bond", TESTED.replace("bond=bond0\n", ""), "no bond= line"),
    ("end-not-last", TESTED.replace("end=1\n", "end=1\nextra=1\n"), "truncated"),
]


@pytest.mark.parametrize("text,reason", [(t, r) for _, t, r in MALFORMED], ids=[i for i, _, _ in MALFORMED])
def test_malformed_is_a_parse_error(text, reason):
    with pytest.raises(ParseError) as exc:
        parse("bond-failover", text)
    assert exc.value.kind == "bond-failover"
    assert reason in exc.value.reason, exc.value.reason
