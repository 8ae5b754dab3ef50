"""clustercert's bond failover driver: takes a bond's active slave down, times the failover, brings it back.

clustercert.checks.bond_failover builds the command that runs it on a node, as one of the node runner's
commands: ``"${CLUSTERCERT_PYTHON:-python3}" -c <this file's text> BOND PRIMARY PEER FAILOVER_BOUND_MS
RETURN_BOUND_MS GUARD_S``. It runs on the node: python3 >= 3.6, stdlib only. Keep it so: no syntax newer
than Python 3.6 and no annotations (tests/test_remote_bond_failover.py compiles it for 3.6).

It reads the bond's active slave, refuses to disturb a bond whose backup slave is already down, takes the
active slave admin-down (``ip link set dev SLAVE down``), polls ``bonding/active_slave`` every 20 ms until
it names another slave (at most FAILOVER_BOUND_MS), pings PEER (when given) over the bond while the slave
is down, and brings the slave back up -- always: try/finally, signal handlers, and a watchdog in its own
session that brings it up after GUARD_S seconds should this program itself be killed. When a primary is
known (PRIMARY, else the bond's own), it then polls until the primary is active again (at most
RETURN_BOUND_MS). It prints ``key=value`` lines (parser ``bond-failover``), ``end=1`` last; exit status 0,
or 128 + N where signal N ended it.
"""

import os
import signal
import subprocess
import sys
import time

POLL = 0.02
NET = "/sys/class/net/"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE)


def say(k, v):
    """Prints ``k=v`` (v on one line)."""
    try:
        line = str(v).replace("\n", " ")
        sys.stdout.write(f"{k}={line}\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        pass  # nobody reads any more: the restore must still happen


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def active(bond):
    return read(NET + bond + "/bonding/active_slave") or ""


def link_up(nd):
    mii = read(NET + nd + "/bonding_slave/mii_status")
    return mii == "up" if mii is not None else read(NET + nd + "/operstate") in ("up", "unknown")


def ip_link(*a):
    """``ip link set dev A...``: (exit status, its stderr) or (-1, why it did not run)."""
    try:
        p = subprocess.run(
            ["ip", "link", "set", "dev"] + list(a),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=10,
        )
        return p.returncode, p.stderr.decode("utf-8", "replace").strip()[:200]
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, str(exc)[:200]


def wait_for(pred, t0, bound):
    """Polls ``pred`` every POLL s: the ms since ``t0`` when it held (one decimal), "" past ``bound`` s."""
    while True:
        now = time.monotonic()
        if pred():
            return f"{(now - t0) * 1000:.1f}"
        if now - t0 > bound:
            return ""
        time.sleep(POLL)


def ping(bond, peer, prefix, count):
    """Pings ``peer`` over ``bond`` ``count`` times; says <prefix>_rc, _summary and _message (or _error)."""
    try:
        p = subprocess.run(["ping", "-n", "-c", str(count), "-i", "0.2", "-W", "1", "-I", bond, peer],  # noqa: UP022 (capture_output: 3.7)
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


def addresses(bond):
    """The bond's IPv4 addresses (ADDRESS/PREFIX), from ``ip -o -4 addr show dev BOND``."""
    try:
        words = (
            subprocess.run(
                ["ip", "-o", "-4", "addr", "show", "dev", bond],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                timeout=10,
            )
            .stdout.decode("utf-8", "replace")
            .split()
        )
        return [words[i + 1] for i, w in enumerate(words[:-1]) if w == "inet"]
    except (OSError, subprocess.TimeoutExpired):
        return []


def stop(signum, frame):
    raise SystemExit(128 + signum)


def done(outcome):
    say("outcome", outcome)
    say("end", 1)
    return 0


def preflight(bond, primary):
    """Says the bond's mode, slaves, primary, addresses, active slave and backups. Returns (outcome, primary,
    active slave): the outcome is None when the test can run (a bond, an active slave, a backup link up)."""
    if not os.path.isdir(NET + bond + "/bonding"):
        return "no_bond", primary, ""
    slaves = (read(NET + bond + "/bonding/slaves") or "").split()
    primary = primary or read(NET + bond + "/bonding/primary") or ""
    addrs = addresses(bond)
    say("mode", (read(NET + bond + "/bonding/mode") or "").split(" ")[0])
    say("slaves", " ".join(slaves))
    say("primary", primary)
    say("addresses", " ".join(addrs))
    before = active(bond)
    say("active_before", before)
    backup = [s for s in slaves if s != before]
    say("backup", " ".join(backup))
    if not before:
        return "no_active", primary, before
    if not any(link_up(s) for s in backup):
        return "backup_down", primary, before
    return None, primary, before


def start_watchdog(slave, guard_s):
    """A shell that brings ``slave`` back up after ``guard_s`` seconds should this process die first.
    The slave's name is an argument of the watchdog's shell ("$2"), never part of its script."""
    guard = subprocess.Popen(
        ["/bin/sh", "-c", 'sleep "$1"; ip link set dev "$2" up', "watchdog", str(guard_s), slave],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    say("watchdog_s", guard_s)
    return guard


def measure_failover(bond, before, peer, t0, fail_bound):
    """With the active slave down since ``t0``: how long the bond took to pick another, which one, and the
    peer ping."""
    say("failover_bound_ms", f"{fail_bound * 1000:.0f}")
    say("failover_ms", wait_for(lambda: active(bond) not in ("", before), t0, fail_bound))
    say("active_during", active(bond))
    if peer:
        ping(bond, peer, "ping", 3)


def bring_back(slave):
    """Brings ``slave`` up again (five tries). Returns (restored, when the last try started)."""
    rc, err, t1 = None, "", time.monotonic()
    for _attempt in range(5):
        t1 = time.monotonic()
        rc, err = ip_link(slave, "up")
        if rc == 0:
            say("restored", 1)
            return True, t1
        time.sleep(0.2)
    say("restored", 0)
    say("restore_error", err or f"exit status {rc}")
    return False, t1


def main(argv=None):
    """Runs the test; ``argv`` = [BOND, PRIMARY, PEER, FAILOVER_BOUND_MS, RETURN_BOUND_MS, GUARD_S]
    (default: sys.argv[1:]). Returns 0; raises SystemExit(128 + N) when signal N interrupts it."""
    argv = sys.argv[1:] if argv is None else argv
    bond, primary, peer = argv[0], argv[1], argv[2]
    fail_bound, back_bound, guard_s = float(argv[3]) / 1000, float(argv[4]) / 1000, int(argv[5])
    for s in STOP_SIGNALS:
        signal.signal(s, stop)
    say("format", "clustercert-bond-failover 1")
    say("bond", bond)
    refused, primary, before = preflight(bond, primary)
    if refused:
        return done(refused)
    say("peer", peer)
    if peer:
        ping(bond, peer, "ping_before", 1)
    guard = start_watchdog(before, guard_s)
    downed, restored, outcome = False, False, "tested"
    try:
        t0 = time.monotonic()
        rc, err = ip_link(before, "down")
        if rc != 0:
            outcome = "down_failed"
            say("down_error", err or f"exit status {rc}")
        else:
            downed = True
            measure_failover(bond, before, peer, t0, fail_bound)
    finally:
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)  # nothing interrupts the restore
        if downed:
            restored, t1 = bring_back(before)
        if restored or not downed:
            try:
                os.killpg(guard.pid, signal.SIGKILL)
            except OSError:
                pass
    if restored and primary:
        say("return_bound_ms", f"{back_bound * 1000:.0f}")
        say("return_ms", wait_for(lambda: active(bond) == primary, t1, back_bound))
    say("active_after", active(bond))
    return done(outcome)


if __name__ == "__main__":
    sys.exit(main())
