"""The IPoIB bond failover test (``clustercert validate --disruptive`` only; never by default).

On the node, ONE command runs a small stdlib-only Python script (``FAILOVER_PY``): it reads the bond's
active slave, refuses to disturb a bond whose backup slave is already down, takes the active slave
admin-down (``ip link set SLAVE down``), polls ``bonding/active_slave`` every 20 ms until it names the
other slave (bounded), pings a peer's bond address over the bond while the slave is down, brings the
slave back up — always: try/finally, signal handlers, and a watchdog in its own session that brings it
up should the script itself be killed — and, when a primary is configured, polls until the primary is
active again. It prints ``key=value`` lines (parser ``bond-failover``).

This module only builds that command and judges its parsed output (pure); clustercert.collect runs it
and clustercert.validate runs it node after node, after the normal checks, so that the peer a node
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


# Runs on the node: python3 (stdlib only), argv = bond primary peer failover_bound_ms return_bound_ms guard_s.
FAILOVER_PY = r'''
import os, signal, subprocess, sys, time
bond, primary, peer = sys.argv[1], sys.argv[2], sys.argv[3]
fail_bound, back_bound, guard_s = float(sys.argv[4]) / 1000, float(sys.argv[5]) / 1000, int(sys.argv[6])
POLL, NET = 0.02, "/sys/class/net/"
def say(k, v):
    try:
        sys.stdout.write("%s=%s\n" % (k, str(v).replace("\n", " ")))
        sys.stdout.flush()
    except (OSError, ValueError):
        pass  # nobody reads any more: the restore below must still happen
def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None
def active():
    return read(NET + bond + "/bonding/active_slave") or ""
def link_up(nd):
    mii = read(NET + nd + "/bonding_slave/mii_status")
    return mii == "up" if mii is not None else read(NET + nd + "/operstate") in ("up", "unknown")
def ip_link(*a):
    try:
        p = subprocess.run(["ip", "link", "set", "dev"] + list(a), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=10)
        return p.returncode, p.stderr.decode("utf-8", "replace").strip()[:200]
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, str(exc)[:200]
def wait_for(pred, t0, bound):
    while True:
        now = time.monotonic()
        if pred():
            return "%.1f" % ((now - t0) * 1000)
        if now - t0 > bound:
            return ""
        time.sleep(POLL)
def ping(prefix, count):
    try:
        p = subprocess.run(["ping", "-n", "-c", str(count), "-i", "0.2", "-W", "1", "-I", bond, peer],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=8)
    except FileNotFoundError:
        say(prefix + "_error", "ping not found")
        return
    except subprocess.TimeoutExpired:
        say(prefix + "_error", "ping did not finish within 8 s")
        return
    out = p.stdout.decode("utf-8", "replace")
    summary = [ln for ln in out.splitlines() if "transmitted" in ln]
    say(prefix + "_rc", p.returncode)
    say(prefix + "_summary", summary[-1] if summary else "")
    say(prefix + "_message", (p.stderr.decode("utf-8", "replace").strip().splitlines() or [""])[-1][:200])
def stop(signum, frame):
    raise SystemExit(128 + signum)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
    signal.signal(s, stop)
say("format", "clustercert-bond-failover 1")
say("bond", bond)
if not os.path.isdir(NET + bond + "/bonding"):
    say("outcome", "no_bond")
    say("end", 1)
    sys.exit(0)
slaves = (read(NET + bond + "/bonding/slaves") or "").split()
primary = primary or read(NET + bond + "/bonding/primary") or ""
try:
    addrs = subprocess.run(["ip", "-o", "-4", "addr", "show", "dev", bond], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, timeout=10).stdout.decode("utf-8", "replace").split()
    addrs = [addrs[i + 1] for i, w in enumerate(addrs[:-1]) if w == "inet"]
except (OSError, subprocess.TimeoutExpired):
    addrs = []
say("mode", (read(NET + bond + "/bonding/mode") or "").split(" ")[0])
say("slaves", " ".join(slaves))
say("primary", primary)
say("addresses", " ".join(addrs))
before = active()
say("active_before", before)
backup = [s for s in slaves if s != before]
say("backup", " ".join(backup))
if not before:
    say("outcome", "no_active")
    say("end", 1)
    sys.exit(0)
if not any(link_up(s) for s in backup):
    say("outcome", "backup_down")
    say("end", 1)
    sys.exit(0)
say("peer", peer)
if peer:
    ping("ping_before", 1)
# the slave's name is an argument of the watchdog's shell ("$2"), never part of its script
guard = subprocess.Popen(["/bin/sh", "-c", 'sleep "$1"; ip link set dev "$2" up', "watchdog", str(guard_s), before],
                         start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
say("watchdog_s", guard_s)
downed, restored, outcome = False, False, "tested"
try:
    t0 = time.monotonic()
    rc, err = ip_link(before, "down")
    if rc != 0:
        outcome = "down_failed"
        say("down_error", err or "exit status %d" % rc)
    else:
        downed = True
        say("failover_bound_ms", "%.0f" % (fail_bound * 1000))
        say("failover_ms", wait_for(lambda: active() not in ("", before), t0, fail_bound))
        say("active_during", active())
        if peer:
            ping("ping", 3)
finally:
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(s, signal.SIG_IGN)  # nothing interrupts the restore
    if downed:
        for attempt in range(5):
            t1 = time.monotonic()
            rc, err = ip_link(before, "up")
            if rc == 0:
                restored = True
                break
            time.sleep(0.2)
        say("restored", 1 if restored else 0)
        if not restored:
            say("restore_error", err or "exit status %d" % rc)
    if restored or not downed:
        try:
            os.killpg(guard.pid, signal.SIGKILL)
        except OSError:
            pass
if restored and primary:
    say("return_bound_ms", "%.0f" % (back_bound * 1000))
    say("return_ms", wait_for(lambda: active() == primary, t1, back_bound))
say("active_after", active())
say("outcome", outcome)
say("end", 1)
'''


def commands(ctx: HostContext) -> dict[str, tuple[str, float]]:
    b = ctx.profile.ib.bond
    if b is None:
        return {}
    timeout = command_timeout(ctx)
    argv = [b.name, b.primary or "", ctx.bond_peer or "", str(failover_bound_ms(b.miimon_ms)),
            str(return_bound_ms(b.miimon_ms)), str(int(timeout) + 5)]
    # the collector's own interpreter when it runs this (python3 otherwise, e.g. through testinfra)
    cmd = '"${CLUSTERCERT_PYTHON:-python3}" -c ' + join([FAILOVER_PY, *argv])
    return {EVIDENCE: (cmd, timeout)}


def choose_peers(order: list[str], addresses: dict[str, str | None], eligible: set[str]) -> dict[str, tuple[str | None, str]]:
    """Each node's peer for the reachability part: the bond address of the next node after it in
    inventory order (wrapping) that is ``eligible`` (reachable, bond healthy) and whose bond address is
    in the same subnet. {node: (peer address, peer node)} or (None, why there is none)."""
    out: dict[str, tuple[str | None, str]] = {}
    for i, name in enumerate(order):
        own = addresses.get(name)
        if not own:
            out[name] = (None, "this node has no bond address (ib_redundancy_bond_address or clustercert_fabric_addresses)")
            continue
        mine = ipaddress.ip_interface(own)
        found: tuple[str | None, str] = (None, f"no other node with a healthy bond and an address in {mine.network}")
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


def evaluate(ev: Evidence, ctx: HostContext) -> list[Finding]:
    b = ctx.profile.ib.bond
    if b is None:
        return [Finding(CHECK, "skip", "", "", "profile declares no bond (ib.bond is empty)")]
    res = ev.get(EVIDENCE)
    timeout = command_timeout(ctx)
    if res is not None and res.timed_out:
        return [error(CHECK, f"the failover step timed out after {timeout:g} s (the node's watchdog brings the slave "
                             "back up if the step was killed while it was down)", res, b.name)]
    short = dataclasses.replace(res, command="bond failover step") if res is not None else None
    rec, errs = parsed("bond-failover", short, CHECK_IDS, timeout)
    if rec is None:
        return [dataclasses.replace(f, subject=b.name) for f in errs]
    evidence = res.excerpt(1200)
    limit = b.miimon_ms * 3
    outcome = rec["outcome"]
    before = rec["active_before"]
    if outcome == "no_bond":
        return [error(CHECK, f"bond {b.name} does not exist: the failover test could not run", res, b.name)]
    if outcome == "down_failed":
        return [error(CHECK, f"could not take {before} down: {rec['down_error']}", res, b.name)]
    expected_move = f"active slave moves off the active one within {limit} ms (miimon {b.miimon_ms} x 3)"
    if outcome == "no_active":
        return [Finding(CHECK, "fail", f"{b.name} failover", expected_move,
                        "no active slave before the test (the bond is down): nothing can fail over", evidence)]
    if outcome == "backup_down":
        down = ", ".join(rec["backup"]) or "none"
        return [Finding(CHECK, "fail", f"{b.name} failover", expected_move,
                        f"backup slave {down} is down: failover impossible ({before} was not taken down)", evidence)]

    out: list[Finding] = []
    fo, during = rec["failover_ms"], rec["active_during"]
    moved = fo is not None and during not in (None, before)
    if not moved:
        observed = f"active slave still {during or 'none'} {rec['failover_bound_ms'] or 0:.0f} ms after {before} went down"
    else:
        observed = f"{before} -> {during} in {fo:.0f} ms"
    out.append(judge(CHECK, moved and fo <= limit, f"{b.name} failover", f"{expected_move}", observed, evidence,
                     fo, "ms"))

    # reachability of the peer over the bond while the slave was down
    if not ctx.bond_peer:
        out.append(Finding(CHECK, "skip", f"{b.name} peer", "a peer's bond address answers over the bond during the failover",
                           f"reachability not tested: {ctx.bond_peer_note or 'no peer address known'}"))
    else:
        subject = f"{b.name} peer {ctx.bond_peer}" + (f" ({ctx.bond_peer_note})" if ctx.bond_peer_note else "")
        expected = f"{ctx.bond_peer} answers ping over {b.name} while {before} is down"
        ping, before_ping = rec["ping"], rec["ping_before"]
        if rec["ping_error"] or rec["ping_before_error"]:
            out.append(error(CHECK, f"could not ping the peer: {rec['ping_error'] or rec['ping_before_error']}", res, subject))
        elif before_ping is not None and not before_ping["received"]:
            out.append(Finding(CHECK, "fail", subject, expected,
                               f"not reachable over {b.name} even before the failover ({_ping_text(before_ping)})"
                               f"{_address_hint(ctx, rec)}", evidence))
        elif ping is None:
            out.append(error(CHECK, "the step printed no ping result", res, subject))
        else:
            good = bool(ping["received"])
            out.append(judge(CHECK, good, subject, expected, _ping_text(ping) + ("" if good else _address_hint(ctx, rec)),
                             evidence))

    # restore, and the move back to the primary
    primary = b.primary or rec["primary"]
    subject = f"{b.name} back to {primary}" if primary else f"{b.name} restore"
    if not rec["restored"]:
        out.append(Finding(CHECK, "fail", subject, f"{before} back up", f"{before} could not be brought back up: "
                           f"{rec['restore_error'] or 'unknown reason'} (the node's watchdog retries after "
                           f"{rec['watchdog_s'] or '?'} s)", evidence))
    elif not primary:
        out.append(Finding(CHECK, "skip", subject, "", f"{before} is back up; no primary configured, so the active "
                                                           "slave stays where it is"))
    else:
        back, after = rec["return_ms"], rec["active_after"]
        ok_back = back is not None and after == primary
        observed = (f"{primary} active again {back:.0f} ms after {before} came back up" if ok_back else
                    f"active slave {after or 'none'} {rec['return_bound_ms'] or 0:.0f} ms after {before} came back up")
        out.append(judge(CHECK, ok_back, subject, f"{before} back up and primary {primary} active again", observed,
                         evidence, back, "ms"))
    return out


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
    return f"{ping['received']}/{ping['transmitted']} replies" + (f" ({ping['message']})" if ping["message"] and not ping["received"] else "")
