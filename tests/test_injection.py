"""No remote injection (issue 19.2b): every inventory, profile or override value that reaches a command built
in clustercert.checks, clustercert.collect.slurm or the bond failover script is one inert word.

The profile and host objects are built directly (pydantic ``model_copy``, no validation), past the strict
patterns that load time applies: the quoting must hold on its own. Every built command is RUN here, under
``/bin/sh -c`` in a temporary directory, with payloads that would create the file PWNED there; the tools the
commands call are stand-ins on PATH that record the argv they were given, so each test also sees that the
hostile value arrived as exactly one argument, unchanged.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clustercert import remote
from clustercert.checks import HostContext, bond_failover, component, components
from clustercert.checks import run as check_run
from clustercert.collect import slurm
from clustercert.collect.ssh import SshBackend, collect_node
from clustercert.model.evidence import CommandResult
from clustercert.model.inventory import HostView, Inventory, InventoryVars
from clustercert.model.profile import load_profile
from clustercert.probes import commands as probes
from clustercert.shell import join

MARK = "PWNED"
HOSTILE = [
    f"x; touch {MARK}; #",            # the override that ran on the node (issue 19)
    f"$(touch {MARK})",
    f"`touch {MARK}`",
    f"a b $(touch {MARK}) c",         # spaces
    f"-x$(touch {MARK})",             # a leading '-'
    f"x\ntouch {MARK}",               # a newline
    f"'$(touch {MARK})'\"`touch {MARK}`\"",  # quotes of both kinds
    f"x && touch {MARK} || touch {MARK} | touch {MARK} > {MARK}",
]
IDS = ["semicolon", "dollar-paren", "backticks", "spaces", "leading-dash", "newline", "quotes", "operators"]

# A stand-in for a tool: appends its argv (JSON, one line) to $ARGV_LOG and prints what $FAKE_OUT says.
FAKE_TOOL = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["ARGV_LOG"], "a") as f:
    f.write(json.dumps([os.path.basename(sys.argv[0])] + sys.argv[1:]) + "\\n")
"""


@pytest.fixture
def sandbox(tmp_path):
    """A working directory, a bin/ of recording stand-ins, and run(cmd) -> CompletedProcess (cwd = the
    sandbox, PATH = the stand-ins first). ``argv()`` reads what the stand-ins were given."""
    work = tmp_path / "work"
    work.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "argv.log"
    for tool in ("sysctl", "scontrol", "ip", "ping"):
        (bindir / tool).write_text(FAKE_TOOL)
        (bindir / tool).chmod(0o755)

    class Box:
        dir = work

        @staticmethod
        def run(cmd: str, timeout: float = 60, **env) -> subprocess.CompletedProcess:
            e = {
                "PATH": f"{bindir}:/usr/bin:/bin",
                "ARGV_LOG": str(log),
                "CLUSTERCERT_PYTHON": sys.executable,
                **env,
            }
            return subprocess.run(
                ["/bin/sh", "-c", cmd], cwd=work, capture_output=True, text=True, timeout=timeout, env=e
            )

        @staticmethod
        def argv() -> list[list[str]]:
            return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []

        @staticmethod
        def marked() -> list[Path]:
            return [p for p in (work, tmp_path) for p in p.rglob(MARK)]

    return Box


def hostile_profile(value: str, other: str | None = None):
    """The lab profile with ``value`` as bond name, bond slaves (and so primary), HCA names, netdevs and a
    sysctl key; built with model_copy, so nothing checks the values."""
    prof = load_profile("lab")
    other = other if other is not None else value + "2"
    hcas = tuple(h.model_copy(update={"name": f"{value}{i}", "netdev": n})
                 for i, (h, n) in enumerate(zip(prof.ib.hcas, (value, other), strict=True)))
    bond = prof.ib.bond.model_copy(update={"name": value, "slaves": (value, other), "primary": value})
    ib = prof.ib.model_copy(update={"hcas": hcas, "bond": bond})
    tuning = prof.tuning.model_copy(update={"sysctl": {value: "1", "net.ipv4.conf.all.rp_filter": "2"}})
    return prof.model_copy(update={"ib": ib, "tuning": tuning})


def test_the_harness_sees_an_injection(sandbox):
    """The control: the same command built WITHOUT quoting runs the payload, and the test would see it."""
    sandbox.run(f"test -d /sys/class/net/{HOSTILE[0]}/bonding")
    assert sandbox.marked(), "the marker check cannot fail: the harness is broken"


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_bond_check_command(sandbox, value):
    ctx = HostContext("n1", hostile_profile(value), timeout_s=10)
    cmd, _ = component("bond").commands(ctx)["bonding"]
    p = sandbox.run(cmd)
    assert not sandbox.marked(), cmd
    # the name was one word: test -d looked for that directory and said it is not there
    assert p.returncode == 1, (cmd, p.stderr)
    (f,) = [
        f
        for f in component("bond").evaluate(
            {"bonding": CommandResult(p.returncode, p.stdout, p.stderr, False, 0.1, cmd)}, ctx
        )
        if f.check == "ib.bond"
    ]
    assert (f.status, f.observed) == ("fail", "bond does not exist")


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_sysctl_keys(sandbox, value):
    ctx = HostContext("n1", hostile_profile(value), timeout_s=10)
    cmd, _ = component("tuning").commands(ctx)["sysctl"]
    sandbox.run(cmd)
    assert not sandbox.marked(), cmd
    (argv,) = sandbox.argv()
    if "\n" in value:  # a newline is no sysctl name: not sent at all
        assert argv == ["sysctl", "--", "net.ipv4.conf.all.rp_filter"]
    else:  # one argument each, after `--`: a leading '-' is a key, not an option
        assert argv == ["sysctl", "--", *sorted([value, "net.ipv4.conf.all.rp_filter"])]


def test_a_sysctl_key_with_equals_is_never_sent(sandbox):
    """sysctl WRITES an argument that holds '=' (even without -w): such a key is not read, and says so."""
    prof = load_profile("lab")
    keys = {"kernel.domainname=" + MARK: "1", "net.ipv4.conf.all.rp_filter": "2", "../../etc/shadow": "x"}
    ctx = HostContext(
        "n1",
        prof.model_copy(update={"tuning": prof.tuning.model_copy(update={"sysctl": keys})}),
        timeout_s=10,
    )
    cmd, _ = component("tuning").commands(ctx)["sysctl"]
    sandbox.run(cmd)
    assert sandbox.argv() == [["sysctl", "--", "net.ipv4.conf.all.rp_filter"]]
    fs = component("tuning").evaluate(
        {"sysctl": CommandResult(0, "net.ipv4.conf.all.rp_filter = 2\n", "", False, 0.1, cmd)}, ctx
    )
    got = {f.subject: (f.status, f.observed) for f in fs if f.check == "tuning.sysctl"}
    assert got["net.ipv4.conf.all.rp_filter"][0] == "pass"
    assert (
        got["kernel.domainname=" + MARK][0] == "error"
        and "not a sysctl key" in got["kernel.domainname=" + MARK][1]
    )
    assert got["../../etc/shadow"][0] == "error"


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_slurm_show_and_update(sandbox, value):
    a = slurm.Action("n1", value, "drain", f"clustercert: gpu.count {value}", True)
    for cmd in (
        slurm.show_cmd(value),
        slurm.update_cmd(a),
        slurm.update_cmd(slurm.Action("n1", value, "resume")),
    ):
        sandbox.run(cmd)
        assert not sandbox.marked(), cmd
    assert sandbox.argv() == [
        ["scontrol", "show", "node", value, "--oneliner"],
        ["scontrol", "update", f"NodeName={value}", "State=DRAIN", f"Reason=clustercert: gpu.count {value}"],
        ["scontrol", "update", f"NodeName={value}", "State=RESUME"],
    ]


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_bond_failover_command(sandbox, value):
    """The failover step's argv (bond, primary, peer): the real script runs here and reports the bond it
    was given as missing (its name one word all the way into the script)."""
    c = HostContext("n1", hostile_profile(value), timeout_s=10, bond_peer=value)
    cmd, timeout = bond_failover.commands(c)["bond_failover"]
    p = sandbox.run(cmd, timeout=timeout)
    assert not sandbox.marked(), cmd
    lines = dict(x.split("=", 1) for x in p.stdout.splitlines() if "=" in x)
    assert lines["bond"] == value.replace("\n", " ") and lines["outcome"] == "no_bond", p.stdout + p.stderr
    assert sandbox.argv() == []  # nothing was taken down


def fake_bond(root: Path, bond: str, slaves: tuple[str, str]) -> None:
    (root / bond / "bonding").mkdir(parents=True)
    for name, text in (("slaves", " ".join(slaves)), ("active_slave", slaves[0]), ("primary", slaves[0]),
                       ("mode", "active-backup 1")):
        (root / bond / "bonding" / name).write_text(text + "\n")
    for s in slaves:
        (root / s / "bonding_slave").mkdir(parents=True)
        (root / s / "bonding_slave" / "mii_status").write_text("up\n")


# `ip` for the failover script: `link set dev SLAVE down` moves the active slave to the other one; `up`
# fails (the restore does not work), so the script's watchdog is left to bring the slave up.
FAKE_IP = FAKE_TOOL + """
a = sys.argv[1:]
net = os.environ["FAKE_NET"]
bond = os.environ["FAKE_BOND"]
if a[:3] == ["link", "set", "dev"] and a[-1] == "down":
    others = [s for s in open(os.path.join(net, bond, "bonding", "slaves")).read().split() if s != a[3]]
    open(os.path.join(net, bond, "bonding", "active_slave"), "w").write(others[0] + "\\n")
elif a[:3] == ["link", "set", "dev"] and a[-1] == "up":
    sys.exit(2)
"""


@pytest.mark.parametrize("slave", [f"ib0$(touch {MARK})", f"ib0;touch {MARK}", f"-ib0`touch {MARK}`"])
def test_the_failover_watchdog_gets_the_slave_as_an_argument(sandbox, tmp_path, slave):
    """The slave the script takes down comes from the node's sysfs: the watchdog that brings it back up
    (here: because `ip link set ... up` fails) gets it as one argument too, never inside its shell text."""
    net = tmp_path / "net"
    fake_bond(net, "bond0", (slave, "ib1"))
    (tmp_path / "bin" / "ip").write_text(FAKE_IP)
    script = remote.source("bond_failover").replace('"/sys/class/net/"', repr(str(net) + "/"))
    assert script != remote.source("bond_failover")
    cmd = join([sys.executable, "-c", script, "bond0", "", "", "500", "500", "1"])
    p = sandbox.run(cmd, FAKE_NET=str(net), FAKE_BOND="bond0")
    assert "restored=0" in p.stdout, p.stdout + p.stderr
    up = ["ip", "link", "set", "dev", slave, "up"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sandbox.argv().count(up) < 6:
        time.sleep(0.1)
    calls = sandbox.argv()
    assert ["ip", "link", "set", "dev", slave, "down"] in calls
    # five restore attempts by the script, then the watchdog's own
    assert calls.count(up) == 6, calls
    assert not sandbox.marked()


def hostile_inventory(value: str) -> Inventory:
    prof = hostile_profile(value)
    hv = HostView(
        name="local1",
        groups=["all"],
        vars=InventoryVars(clustercert_profile="lab", clustercert_command_timeout_s=20),
        profile=prof,
        connection={"ansible_connection": "local"},
        bond_address=None,
    )
    return Inventory(source=Path("hostile.yml"), hosts={"local1": hv}, files=[])


@pytest.mark.parametrize(
    "value",
    [HOSTILE[0], HOSTILE[1], HOSTILE[4], HOSTILE[5]],
    ids=["semicolon", "dollar-paren", "leading-dash", "newline"],
)
def test_every_check_command_through_the_collector(tmp_path, monkeypatch, value):
    """End to end: every component's commands for a host whose profile is hostile throughout, collected
    through clustercert.collect with ansible_connection: local (the commands run on this machine, in the
    collector's working directory), then the validate path with --disruptive. Nothing runs the payload;
    the bond is reported missing."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path / "state"))
    ctx = HostContext("local1", hostile_profile(value), timeout_s=20)
    cmds = {}
    for comp in components():
        cmds.update(comp.commands(ctx))
    ev = collect_node("local1", {"ansible_connection": "local"}, cmds)
    assert ev.reachable, ev.error
    assert not list(tmp_path.rglob(MARK))
    results = check_run.validate_nodes(hostile_inventory(value), ["bond", "tuning"], disruptive=True,
                                       io=SshBackend())
    assert not list(tmp_path.rglob(MARK))
    fs = {(f.check, f.subject): f for f in results["local1"].findings}
    bond = fs[("ib.bond", value)]
    assert (bond.status, bond.observed) == ("fail", "bond does not exist")
    assert fs[("ib.bond_failover", value)].status == "error"
    assert results["local1"].verdict == "fail"


def test_slurm_apply_through_the_collector(tmp_path, monkeypatch, capsys):
    """certify --drain slurm with hostile Slurm node names, through the collector (local): the payloads
    never run; a name scontrol would take for an option is not sent at all, and the entry says why."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    prof = load_profile("lab")
    names = {"n1": HOSTILE[0], "n2": HOSTILE[1], "n3": HOSTILE[4]}
    base = InventoryVars(clustercert_profile="lab", clustercert_slurm=True, clustercert_command_timeout_s=20)
    hosts = {n: HostView(name=n, groups=["all"], profile=prof, connection={"ansible_connection": "local"},
                         vars=base.model_copy(update={"clustercert_slurm_node_name": sn}))
             for n, sn in names.items()}
    inv = Inventory(source=Path("hostile.yml"), hosts=hosts, files=[])
    nodes = {
        n: {"verdict": "fail", "findings": [{"check": f"gpu.count; touch {MARK}", "status": "fail"}]}
        for n in names
    }
    entries = {e["node"]: e for e in slurm.apply(inv, nodes)}
    assert not list(tmp_path.rglob(MARK))
    assert all(not e["ok"] for e in entries.values())  # no scontrol here: nothing is claimed done
    assert "not a Slurm node name" in entries["n3"]["detail"]


@pytest.mark.parametrize("build", [
    lambda v: probes.perftest_cmd("ib_write_bw", v, 1, 18515, 1, server_addr=v),
    lambda v: probes.iperf3_client_cmd(v, v, 5201, 1),
    lambda v: probes.iperf3_server_cmd(v, 5201),
    lambda v: probes.nccl_pair_mpirun_cmd([v, "b"], 8, "t"),
    lambda v: probes.nccl_pair_srun_cmd([v, "b"], 8, "t", 60, "gpu"),
])
def test_probe_commands_keep_hostile_values_inert(tmp_path, build):
    """Probe command builders (ib_write_bw's HCA and server, iperf3's addresses, mpirun's -H hosts, srun's
    nodelist) quote what they interpolate: run under sh, the payload never runs."""
    marker = tmp_path / "PWNED"
    cmd = build(f"x; touch {marker}; $(touch {marker}) `touch {marker}`")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "touch").symlink_to(shutil.which("touch"))  # only touch is found: the probe tools are not
    subprocess.run(
        ["/bin/sh", "-c", cmd], cwd=tmp_path, capture_output=True, timeout=20, env={"PATH": str(bindir)}
    )
    assert not marker.exists(), cmd
