"""The IPoIB bond failover test (``clustercert validate --disruptive`` only; never by default).

On the node, ONE command runs a small stdlib-only Python program (clustercert/remote/bond_failover.py,
sent as ``python3 -c <its text> ARGS``): it reads the bond's active slave, refuses to disturb a bond
whose backup slave is already down, takes the active slave admin-down (``ip link set SLAVE down``),
polls ``bonding/active_slave`` every 20 ms until it names the other slave (bounded), pings a peer's bond
address over the bond while the slave is down, brings the slave back up — always: try/finally, signal
handlers, and a watchdog in its own session that brings it up should the script itself be killed — and,
when a primary is configured, polls until the primary is active again. It prints ``key=value`` lines
(parser ``bond-failover``).

This module only builds that command and judges its parsed output (pure); clustercert.collect.ssh runs it
and clustercert.checks.run runs it node after node, after the normal checks, so that the peer a node
pings is never failing over at the same moment.

Findings, all ``ib.bond_failover`` (subject says which part):

* ``<bond> failover``: active slave moved to the other slave within miimon x 3 ms (value: ms);
* ``<bond> peer <address> (<node>)``: the peer answered over the bond while the slave was down; ``skip``
  with the reason when no peer address is known (the timing part still runs);
* ``<bond> back to <primary>``: the slave came back up and the primary is active again.

A step that could not run (no bond, timeout, unparseable output, ``ip``/``ping`` missing) is ``error``.
"""

from __future__ import annotations

import dataclasses
import ipaddress

from clustercert import remote
from clustercert.checks import Evidence, Finding, HostContext, error, judge, parsed
from clustercert.shell import join

CHECK = "ib.bond_failover"
CHECK_IDS = (CHECK,)
EVIDENCE = "bond_failover"
POLL_MS = 20


def failover_bound_ms(miimon_ms: int) -> int:
    """How long the script waits for the active slave to move before it gives up."""
    return max(2000, miimon_ms * 20)


def return_bound_ms(miimon_ms: int) -> int:
    """How long it waits for the primary to be active again once its link is back up (an IPoIB
    netdev's carrier can take a few seconds to return)."""
    return max(10000, miimon_ms * 50)


def command_timeout(ctx: HostContext) -> float:
    """The whole step's timeout: its own bounds, the pings (< 8 s) and a margin; at least the host's."""
    b = ctx.profile.ib.bond
    miimon = b.miimon_ms if b is not None else 100
    return float(max(ctx.timeout_s, (failover_bound_ms(miimon) + return_bound_ms(miimon)) / 1000 + 20))


def commands(ctx: HostContext) -> dict[str, tuple[str, float]]:
    b = ctx.profile.ib.bond
    if b is None:
        return {}
    timeout = command_timeout(ctx)
    argv = [b.name, b.primary or "", ctx.bond_peer or "", str(failover_bound_ms(b.miimon_ms)),
            str(return_bound_ms(b.miimon_ms)), str(int(timeout) + 5)]
    # the collector's own interpreter when it runs this (python3 otherwise, e.g. through testinfra)
    cmd = '"${CLUSTERCERT_PYTHON:-python3}" -c ' + join([remote.source("bond_failover"), *argv])
    return {EVIDENCE: (cmd, timeout)}


def choose_peers(
    order: list[str], addresses: dict[str, str | None], eligible: set[str]
) -> dict[str, tuple[str | None, str]]:
    """Each node's peer for the reachability part: the bond address of the next node after it in
    inventory order (wrapping) that is ``eligible`` (reachable, bond healthy) and whose bond address is
    in the same subnet. {node: (peer address, peer node)} or (None, why there is none)."""
    out: dict[str, tuple[str | None, str]] = {}
    for i, name in enumerate(order):
        own = addresses.get(name)
        if not own:
            out[name] = (
                None,
                "this node has no bond address (ib_redundancy_bond_address or clustercert_fabric_addresses)",
            )
            continue
        mine = ipaddress.ip_interface(own)
        found: tuple[str | None, str] = (
            None,
            f"no other node with a healthy bond and an address in {mine.network}",
        )
        for other in order[i + 1:] + order[:i]:
            addr = addresses.get(other)
            if other not in eligible or not addr:
                continue
            theirs = ipaddress.ip_interface(addr)
            if theirs.ip != mine.ip and theirs.ip in mine.network:
                found = (str(theirs.ip), other)
                break
        out[name] = found
    return out


def _untested(b, rec: dict, res, evidence: str, expected_move: str) -> list[Finding] | None:
    """The findings of a step that did not take the active slave down (no bond, the down failed, no active
    slave, the backup down); None when it did."""
    outcome, before = rec["outcome"], rec["active_before"]
    if outcome == "no_bond":
        return [error(CHECK, f"bond {b.name} does not exist: the failover test could not run", res, b.name)]
    if outcome == "down_failed":
        return [error(CHECK, f"could not take {before} down: {rec['down_error']}", res, b.name)]
    if outcome == "no_active":
        return [
            Finding(
                CHECK,
                "fail",
                f"{b.name} failover",
                expected_move,
                "no active slave before the test (the bond is down): nothing can fail over",
                evidence,
            )
        ]
    if outcome == "backup_down":
        down = ", ".join(rec["backup"]) or "none"
        return [
            Finding(
                CHECK,
                "fail",
                f"{b.name} failover",
                expected_move,
                f"backup slave {down} is down: failover impossible ({before} was not taken down)",
                evidence,
            )
        ]
    return None


def _failover_finding(b, rec: dict, evidence: str, expected_move: str, limit: int) -> Finding:
    before, fo, during = rec["active_before"], rec["failover_ms"], rec["active_during"]
    moved = fo is not None and during not in (None, before)
    if not moved:
        observed = (
            f"active slave still {during or 'none'} {rec['failover_bound_ms'] or 0:.0f} ms after {before} "
            "went down"
        )
    else:
        observed = f"{before} -> {during} in {fo:.0f} ms"
    return judge(CHECK, moved and fo <= limit, f"{b.name} failover", f"{expected_move}", observed, evidence,
                 fo, "ms")


def _peer_finding(b, ctx: HostContext, rec: dict, res, evidence: str) -> Finding:
    """Reachability of the peer over the bond while the slave was down."""
    before = rec["active_before"]
    if not ctx.bond_peer:
        return Finding(
            CHECK,
            "skip",
            f"{b.name} peer",
            "a peer's bond address answers over the bond during the failover",
            f"reachability not tested: {ctx.bond_peer_note or 'no peer address known'}",
        )
    subject = f"{b.name} peer {ctx.bond_peer}" + (f" ({ctx.bond_peer_note})" if ctx.bond_peer_note else "")
    expected = f"{ctx.bond_peer} answers ping over {b.name} while {before} is down"
    ping, before_ping = rec["ping"], rec["ping_before"]
    if rec["ping_error"] or rec["ping_before_error"]:
        return error(
            CHECK, f"could not ping the peer: {rec['ping_error'] or rec['ping_before_error']}", res, subject
        )
    if before_ping is not None and not before_ping["received"]:
        return Finding(CHECK, "fail", subject, expected,
                       f"not reachable over {b.name} even before the failover ({_ping_text(before_ping)})"
                       f"{_address_hint(ctx, rec)}", evidence)
    if ping is None:
        return error(CHECK, "the step printed no ping result", res, subject)
    good = bool(ping["received"])
    return judge(CHECK, good, subject, expected, _ping_text(ping) + ("" if good else _address_hint(ctx, rec)),
                 evidence)


def _return_finding(b, rec: dict, evidence: str) -> Finding:
    """The restore, and the move back to the primary."""
    before = rec["active_before"]
    primary = b.primary or rec["primary"]
    subject = f"{b.name} back to {primary}" if primary else f"{b.name} restore"
    if not rec["restored"]:
        return Finding(CHECK, "fail", subject, f"{before} back up", f"{before} could not be brought back up: "
                       f"{rec['restore_error'] or 'unknown reason'} (the node's watchdog retries after "
                       f"{rec['watchdog_s'] or '?'} s)", evidence)
    if not primary:
        return Finding(CHECK, "skip", subject, "", f"{before} is back up; no primary configured, so the "
                                                   "active slave stays where it is")
    back, after = rec["return_ms"], rec["active_after"]
    ok_back = back is not None and after == primary
    observed = (f"{primary} active again {back:.0f} ms after {before} came back up" if ok_back else
                f"active slave {after or 'none'} {rec['return_bound_ms'] or 0:.0f} ms after {before} came "
                "back up")
    return judge(CHECK, ok_back, subject, f"{before} back up and primary {primary} active again", observed,
                 evidence, back, "ms")


def evaluate(ev: Evidence, ctx: HostContext) -> list[Finding]:
    b = ctx.profile.ib.bond
    if b is None:
        return [Finding(CHECK, "skip", "", "", "profile declares no bond (ib.bond is empty)")]
    res = ev.get(EVIDENCE)
    timeout = command_timeout(ctx)
    if res is not None and res.timed_out:
        return [error(CHECK, f"the failover step timed out after {timeout:g} s (the node's watchdog brings "
                             "the slave back up if the step was killed while it was down)", res, b.name)]
    short = dataclasses.replace(res, command="bond failover step") if res is not None else None
    rec, errs = parsed("bond-failover", short, CHECK_IDS, timeout)
    if rec is None:
        return [dataclasses.replace(f, subject=b.name) for f in errs]
    evidence = res.excerpt(1200)
    limit = b.miimon_ms * 3
    expected_move = f"active slave moves off the active one within {limit} ms (miimon {b.miimon_ms} x 3)"
    untested = _untested(b, rec, res, evidence, expected_move)
    if untested is not None:
        return untested
    return [_failover_finding(b, rec, evidence, expected_move, limit),
            _peer_finding(b, ctx, rec, res, evidence),
            _return_finding(b, rec, evidence)]


def _address_hint(ctx: HostContext, rec: dict) -> str:
    """When the peer did not answer: the bond's addresses, and whether the inventory's one is among them."""
    have = rec["addresses"]
    text = f"; {rec['bond']} addresses: {' '.join(have) or 'none'}"
    if ctx.bond_address and ctx.bond_address not in have:
        text += f", not the inventory's {ctx.bond_address}"
    return text


def _ping_text(ping: dict) -> str:
    if ping["transmitted"] is None:
        return f"ping exit status {ping['rc']}" + (f": {ping['message']}" if ping["message"] else "")
    return f"{ping['received']}/{ping['transmitted']} replies" + (
        f" ({ping['message']})" if ping["message"] and not ping["received"] else ""
    )
