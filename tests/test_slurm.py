"""`certify --drain slurm` without a cluster: the `scontrol show node --oneliner` parser, the drain
reason, and the decision (drain failing, resume only what clustercert drained, leave the rest)."""

from __future__ import annotations

import pytest

from clustercert.collect import maintenance, slurm
from clustercert.collect.slurm import NodeState, decide, drain_reason, parse_show_node

# The layout of src/api/node_info.c (Slurm 22.05) with --oneliner: Key=Value fields separated by
# single spaces (OS= holds spaces of its own), the reason last, stamped " [user@time]".
HEAD = ("NodeName={n} Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=4 CPUTot=4 CPULoad=0.08 "
        "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=10.77.0.1{i} NodeHostName={n} "
        "Version=22.05.8 OS=Linux 6.1.0-13-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.55-1 (2023-09-29)  "
        "RealMemory=1 AllocMem=0 FreeMem=3021 Sockets=4 Boards=1 State={state} ThreadsPerCore=1 TmpDisk=0 "
        "Weight=1 Owner=N/A MCS_label=N/A Partitions=lab  BootTime=2026-12-03T02:50:11 "
        "SlurmdStartTime=2026-12-03T02:58:40 LastBusyTime=2026-12-03T02:58:40 CfgTRES=cpu=4,mem=1M,billing=4 "
        "AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
        "ExtSensorsTemp=n/s ")


def line(n: str, state: str, reason: str | None = None, stamp: str = "root@2026-12-03T03:01:12") -> str:
    i = n[-1]
    text = HEAD.format(n=n, i=i, state=state)
    if reason is not None:
        text += f"Reason={reason}" + (f" [{stamp}]" if stamp else "") + " "
    return text + "\n"


@pytest.mark.parametrize(("state", "reason", "drained", "ours"), [
    ("IDLE", None, False, False),
    ("IDLE+DRAIN", "clustercert: gpu.count", True, True),
    ("MIXED+DRAIN", "clustercert: gpu.count,ib.link_state", True, True),  # draining: jobs still run
    ("DOWN+DRAIN+NOT_RESPONDING", "admin: maintenance", True, False),
    ("DOWN+NOT_RESPONDING", "Not responding", False, False),
    ("IDLE*+DRAIN", "clustercert: unreachable", True, True),  # before 21.08: '*' for not responding
    ("DRAINED", "Kill task failed", True, False),
    ("ALLOCATED", None, False, False),
])
def test_parse_show_node(state, reason, drained, ours):
    st = parse_show_node(line("node02", state, reason))
    assert (st.node, st.state, st.reason) == ("node02", state, reason)
    assert (st.drained, st.ours) == (drained, ours)


# captured from Debian 12's slurm-wlm 22.05.8 on the lab (tests/certify/test_drain_slurm_lab.py)
REAL = ("NodeName=node04 Arch=x86_64 CoresPerSocket=2  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=1.18 "
        "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=10.250.0.14 NodeHostName=node04 "
        "Version=22.05.8 OS=Linux 6.18.44-fc-v1098 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=24105 AllocMem=0 "
        "FreeMem=22455 Sockets=1 Boards=1 State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A "
        "MCS_label=N/A Partitions=lab  BootTime=2026-12-02T12:53:12 SlurmdStartTime=2026-12-03T02:50:17 "
        "LastBusyTime=2026-12-03T02:51:35 CfgTRES=cpu=2,mem=24105M,billing=2 AllocTRES= CapWatts=n/a "
        "CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s "
        "Reason=admin: maintenance [root@2026-12-03T02:50:22]\n")


def test_parse_real_22_05_line():
    st = parse_show_node(REAL)
    assert (st.node, st.state, st.reason, st.drained, st.ours) == (
        "node04",
        "IDLE+DRAIN",
        "admin: maintenance",
        True,
        False,
    )
    resumed = parse_show_node(REAL.replace("IDLE+DRAIN", "IDLE+NOT_RESPONDING").split(" Reason=")[0] + "\n")
    assert (resumed.state, resumed.reason, resumed.drained) == ("IDLE+NOT_RESPONDING", None, False)


def test_reason_keeps_spaces_brackets_and_drops_only_the_stamp():
    st = parse_show_node(
        line("node04", "IDLE+DRAIN", "admin: swap [PSU 2] then reboot", stamp="alice@2026-11-30T09:12:00")
    )
    assert st.reason == "admin: swap [PSU 2] then reboot"
    # a reason set without a time (set in slurm.conf's DownNodes) has no stamp
    assert parse_show_node(line("node04", "DOWN", "rack 3 power", stamp="")).reason == "rack 3 power"
    # an admin reason that merely mentions clustercert is not clustercert's
    assert not parse_show_node(line("node04", "IDLE+DRAIN", "waiting for clustercert: rerun")).ours


def test_parse_refuses_what_is_not_a_node_line():
    with pytest.raises(ValueError, match="no NodeName"):
        parse_show_node("Node node09 not found\n")
    with pytest.raises(ValueError, match="no State"):
        parse_show_node("NodeName=node01 Arch=x86_64\n")


def node(verdict: str, *bad: str, status: str = "fail") -> dict:
    findings = [{"check": c, "status": status, "subject": "x"} for c in bad]
    findings.append({"check": "driver.version", "status": "pass", "subject": "x"})
    return {"verdict": verdict, "findings": findings}


def test_drain_reason():
    assert (
        drain_reason(node("fail", "gpu.count", "ib.link_state", "gpu.count"))
        == "clustercert: gpu.count,ib.link_state"
    )
    assert (
        drain_reason(node("error", "probe.nccl_allreduce", status="error"))
        == "clustercert: probe.nccl_allreduce"
    )
    assert (
        drain_reason({"verdict": "unreachable", "findings": [], "detail": "timeout"})
        == "clustercert: unreachable"
    )
    many = node("fail", *(f"check.number_{i:02d}" for i in range(40)))
    text = drain_reason(many)
    assert len(text) <= slurm.MAX_REASON and text.startswith("clustercert: check.number_00,")
    kept = text.removeprefix("clustercert: ").split(" +")[0].split(",")
    assert text.endswith(f" +{40 - len(kept)} more") and 0 < len(kept) < 40


def test_decide():
    nodes = {
        "node01": node("pass"),
        "node02": node("fail", "gpu.count"),
        "node03": node("pass"),
        "node04": node("pass"),
        "node05": {"verdict": "unreachable", "findings": [], "detail": "no route"},
        "node06": node("fail", "ib.link_state"),
        "node07": node("fail", "gpu.count"),
        "node08": node("fail", "gpu.count"),
        "gpu-ext": node("fail", "gpu.count"),   # not a Slurm node (clustercert_slurm false): ignored
    }
    names = {f"node0{i}": f"node0{i}" for i in range(1, 9)}
    names["node06"] = "sn06"  # clustercert_slurm_node_name
    states = {
        "node01": NodeState("node01", "IDLE", None),
        "node02": NodeState("node02", "IDLE", None),
        "node03": NodeState("node03", "IDLE+DRAIN", "clustercert: gpu.count"),
        "node04": NodeState("node04", "IDLE+DRAIN", "admin: maintenance"),
        "node05": NodeState("node05", "DOWN+NOT_RESPONDING", "Not responding"),
        "sn06": NodeState("sn06", "DOWN+DRAIN", "admin: cable"),
        "node07": NodeState("node07", "IDLE+DRAIN", "clustercert: gpu.count"),
        "node08": "Node node08 not found",
    }
    acts = {a.node: a for a in decide(nodes, names, states)}
    assert "gpu-ext" not in acts
    got = {n: (a.slurm_node, a.action, a.reason, a.ok) for n, a in acts.items()}
    assert got == {
        "node01": ("node01", "none", "", True),
        "node02": ("node02", "drain", "clustercert: gpu.count", True),
        "node03": ("node03", "resume", "clustercert: gpu.count", True),
        "node04": ("node04", "none", "admin: maintenance", True),
        "node05": ("node05", "drain", "clustercert: unreachable", True),
        "node06": ("sn06", "none", "admin: cable", True),          # someone else's drain stays theirs
        "node07": ("node07", "none", "clustercert: gpu.count", True),  # already drained for this reason
        "node08": ("node08", "drain", "clustercert: gpu.count", False),
    }
    assert "not found" in acts["node08"].detail
    assert "someone else" in acts["node04"].detail
    # a node drained by clustercert for other checks gets the new reason
    states["node07"] = NodeState("node07", "IDLE+DRAIN", "clustercert: ib.link_state")
    again = {a.node: a for a in decide(nodes, names, states)}
    assert (again["node07"].action, again["node07"].reason) == ("drain", "clustercert: gpu.count")
    # a passing node whose state cannot be read is a failure too, never silently skipped
    states["node01"] = "timed out after 30 s"
    assert not {a.node: a for a in decide(nodes, names, states)}["node01"].ok


def test_update_commands_quote_the_reason():
    drain = slurm.Action("n", "node02", "drain", "clustercert: gpu.count; touch /tmp/x", True)
    assert slurm.update_cmd(drain) == ("scontrol update NodeName=node02 State=DRAIN "
                                       "Reason='clustercert: gpu.count; touch /tmp/x'")
    assert (
        slurm.update_cmd(slurm.Action("n", "node03", "resume"))
        == "scontrol update NodeName=node03 State=RESUME"
    )
    assert slurm.show_cmd("node$(id)") == "scontrol show node 'node$(id)' --oneliner"


# ---- apply(): the remote part, with collect_node replaced by a fake Slurm -------------------------

class FakeSlurm:
    """Answers scontrol as a controller would; ``down`` nodes do not answer SSH, ``no_client`` nodes
    have no working scontrol, ``refuse`` makes every update fail."""

    def __init__(self, states: dict[str, tuple[str, str | None]], down=(), no_client=(), refuse=False):
        self.states, self.down, self.no_client, self.refuse = dict(states), set(down), set(no_client), refuse
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, node, conn, cmds, *, control_dir=None, parallel=8):
        import shlex

        from clustercert.model.evidence import CommandResult, NodeEvidence

        self.calls.append((node, dict(cmds)))
        assert all(t > 0 for _, t in cmds.values()), cmds
        if node in self.down:
            return NodeEvidence(node, False, "ssh: connect to host 10.0.0.9 port 22: No route to host")
        res = {}
        for key, (cmd, _) in cmds.items():
            argv = shlex.split(cmd)
            if node in self.no_client:
                res[key] = CommandResult(
                    1,
                    "",
                    "slurm_load_node error: Unable to contact slurm controller (connect failure)",
                    False,
                    0.1,
                )
            elif argv[1] == "show":
                st = self.states.get(argv[3])
                res[key] = (CommandResult(0, line(argv[3], st[0], st[1]), "", False, 0.1) if st else
                            CommandResult(1, "", f"Node {argv[3]} not found", False, 0.1))
            elif self.refuse:
                res[key] = CommandResult(1, "", "slurm_update error: Invalid user id", False, 0.1)
            else:
                kv = dict(a.split("=", 1) for a in argv[2:])
                old = self.states[kv["NodeName"]][0].split("+")[0]
                self.states[kv["NodeName"]] = (
                    (old + "+DRAIN", kv["Reason"]) if kv["State"] == "DRAIN" else (old, None)
                )
                res[key] = CommandResult(0, "", "", False, 0.1)
        return NodeEvidence(node, True, "", res)


def fake_inventory(tmp_path, slurm_hosts=("node01", "node02", "node03", "node04")):
    from clustercert.model.inventory import load_inventory

    d = tmp_path / "inv"
    (d / "group_vars").mkdir(parents=True)
    hosts = "".join(
        f"    {n}: {{ansible_host: 10.0.0.{i}{', clustercert_slurm: true' if n in slurm_hosts else ''}}}\n"
        for i, n in enumerate(("node01", "node02", "node03", "node04", "node05"), 1)
    )
    (d / "hosts.yml").write_text("all:\n  hosts:\n" + hosts)
    (d / "group_vars" / "all.yml").write_text("clustercert_profile: lab\n")
    return load_inventory(str(d))


def certified(**verdicts) -> dict:
    out = {f"node0{i}": node("pass") for i in range(1, 6)}
    out.update(verdicts)
    return out


def test_apply_drains_resumes_and_leaves_alone(tmp_path, monkeypatch, capsys):
    inv = fake_inventory(tmp_path)
    fake = FakeSlurm(
        {
            "node01": ("IDLE", None),
            "node02": ("IDLE", None),
            "node03": ("IDLE+DRAIN", "clustercert: gpu.count"),
            "node04": ("IDLE+DRAIN", "admin: maintenance"),
        }
    )
    monkeypatch.setattr(slurm, "collect_node", fake)
    entries = slurm.apply(inv, certified(node02=node("fail", "gpu.count")))
    got = {e["node"]: (e["action"], e["ok"]) for e in entries}
    assert got == {
        "node01": ("none", True),
        "node02": ("drain", True),
        "node03": ("resume", True),
        "node04": ("none", True),
    }
    assert fake.states == {"node01": ("IDLE", None), "node02": ("IDLE+DRAIN", "clustercert: gpu.count"),
                           "node03": ("IDLE", None), "node04": ("IDLE+DRAIN", "admin: maintenance")}
    assert [c[0] for c in fake.calls] == ["node01", "node01"]  # the node05 (not in Slurm) is never asked
    assert capsys.readouterr().err == ""


def test_apply_uses_the_next_slurm_node_when_one_cannot(tmp_path, monkeypatch):
    inv = fake_inventory(tmp_path)
    fake = FakeSlurm(
        {f"node0{i}": ("IDLE", None) for i in range(1, 5)}, down={"node02"}, no_client={"node03"}
    )
    monkeypatch.setattr(slurm, "collect_node", fake)
    # node01 failed validation as unreachable: not asked; node02 stops answering; node03's scontrol fails
    entries = slurm.apply(inv, certified(node01={"verdict": "unreachable", "findings": []}))
    assert [c[0] for c in fake.calls] == ["node02", "node03", "node04", "node04"]
    assert {e["node"]: (e["action"], e["reason"], e["ok"]) for e in entries}["node01"] == (
        "drain",
        "clustercert: unreachable",
        True,
    )
    assert fake.states["node01"] == ("IDLE+DRAIN", "clustercert: unreachable")


def test_apply_failures_are_reported_not_swallowed(tmp_path, monkeypatch, capsys):
    inv = fake_inventory(tmp_path)
    monkeypatch.setattr(
        slurm, "collect_node", FakeSlurm({}, no_client={"node01", "node02", "node03", "node04"})
    )
    entries = slurm.apply(inv, certified(node02=node("fail", "gpu.count")))
    assert entries and not any(e["ok"] for e in entries)
    assert "Unable to contact slurm controller" in entries[0]["detail"]
    assert "node02 (node02): drain not done" in capsys.readouterr().err
    # the update itself is refused
    fake = FakeSlurm({f"node0{i}": ("IDLE", None) for i in range(1, 5)}, refuse=True)
    monkeypatch.setattr(slurm, "collect_node", fake)
    entries = {e["node"]: e for e in slurm.apply(inv, certified(node02=node("fail", "gpu.count")))}
    assert not entries["node02"]["ok"] and "Invalid user id" in entries["node02"]["detail"]
    assert entries["node01"]["ok"]


def test_drain_without_slurm_nodes_is_bad_input(tmp_path, capsys):
    from clustercert.cli import main

    inv = fake_inventory(tmp_path, slurm_hosts=())
    rc = main(["certify", "-i", str(inv.source), "--out", str(tmp_path / "out"), "--drain", "slurm"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "clustercert_slurm" in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "state, ok",
    [
        ("IDLE", True),
        ("IDLE+DRAIN", False),
        ("IDLE+DRAIN+NOT_RESPONDING", False),
        ("MIXED", False),
        ("ALLOCATED", False),
        ("DOWN+NOT_RESPONDING", False),
        ("IDLE+MAINT+RESERVED", False),
        ("IDLE+COMPLETING", False),
        ("IDLE+POWERED_DOWN", False),
        ("IDLE+CLOUD", True),
        ("idle", True),
    ],
)
def test_a_probe_step_is_placed_only_on_idle_nodes_nothing_keeps_jobs_off(state, ok):
    from clustercert.collect.slurm import accepts_step

    assert accepts_step(NodeState("n1", state, None)) is ok
    assert accepts_step("scontrol: error: Invalid node name specified") is False


# ---- --backend slurm on drained nodes: collect.maintenance's pure parts
# ----------------------------------------

@pytest.mark.parametrize(("expr", "names"), [
    ("node[01-04]", ["node01", "node02", "node03", "node04"]),
    ("node[01-02,07],gpu1", ["node01", "node02", "node07", "gpu1"]),
    ("rack[1-2]-gpu", ["rack1-gpu", "rack2-gpu"]),
    ("node04", ["node04"]),
])
def test_expand_hostlist(expr, names):
    assert maintenance.expand_hostlist(expr) == names


def test_expand_hostlist_refuses_what_it_cannot_read():
    with pytest.raises(ValueError):
        maintenance.expand_hostlist("node[a-b]")


# the layout of src/scontrol/info_resv.c (Slurm 22.05) with --oneliner
RESV = ("ReservationName=clustercert-0a1b2c3d4e5f StartTime=2026-12-07T13:40:00 EndTime=2026-12-07T21:40:00 "
        "Duration=08:00:00 Nodes=node[01-04] NodeCnt=4 CoreCnt=8 Features=(null) PartitionName=(null) "
        "Flags=MAINT,IGNORE_JOBS,SPEC_NODES TRES=cpu=8 Users=root Groups=(null) Accounts=(null) "
        "Licenses=(null) State=ACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)\n")


def test_parse_reservations():
    (r,) = maintenance.parse_reservations(RESV).values()
    assert (r.name, r.state, r.nodes, r.users) == ("clustercert-0a1b2c3d4e5f", "ACTIVE",
                                                   ("node01", "node02", "node03", "node04"), "root")
    assert "MAINT" in r.flags
    assert maintenance.parse_reservations("No reservations in the system\n") == {}
    assert maintenance.check_reservation(r, r.name, ["node02", "node04"]) is None
    assert (
        maintenance.check_reservation(r, r.name, ["node05"])
        == f"--reservation {r.name}: it does not hold node05"
    )


def test_plan_resumes_only_the_idle_drained_nodes_and_keeps_their_reasons():
    states = {
        st.node: st
        for st in (
            NodeState("n1", "IDLE", None),
            NodeState("n2", "IDLE+DRAIN", 'admin: "psu" RMA 7'),
            NodeState("n3", "MIXED", None),
            NodeState("n4", "MIXED+DRAIN", "admin: draining"),
            NodeState("n5", "DOWN+DRAIN+NOT_RESPONDING", "admin: dead"),
            NodeState("n6", "IDLE+DRAIN", "clustercert: gpu.count"),
            NodeState("n7", "IDLE+RESERVED", None),
        )
    }
    names = {f"host{i}": f"n{i}" for i in range(1, 9)}
    p = maintenance.plan(names, states)
    assert p.nodes == ["n1", "n2", "n3", "n6"]
    # verbatim, whoever drained
    assert p.drained == {"n2": 'admin: "psu" RMA 7', "n6": "clustercert: gpu.count"}
    # jobs still on n4; n5 down; n7 someone's; n8 unknown
    assert set(p.blocked) == {"host4", "host5", "host7", "host8"}
    assert p.blocked["host8"] == "Slurm does not know a node n8"
    # in the admin's reservation, MAINT and RESERVED keep nothing off
    assert maintenance.plan({"h": "n7"}, states, reserved=True).nodes == ["n7"]


def test_to_restore_keeps_a_drain_someone_set_during_the_run():
    saved = {"n1": "admin: fan", "n2": "admin: psu", "n3": "admin: cable"}
    now = {"n1": NodeState("n1", "IDLE", None), "n2": NodeState("n2", "IDLE+DRAIN", "admin: new"),
           "n3": "its state was not read"}
    assert maintenance.to_restore(saved, now) == {"n1": "admin: fan", "n3": "admin: cable"}


@pytest.mark.parametrize("reason", ['admin: "fan" swap', '"quoted"', "it's; $(rm -rf /) `x`", "ends with \""])
def test_a_drain_reason_is_one_argv_word_scontrol_reads_back_verbatim(reason):
    argv = maintenance.drain_argv("node03", reason)
    assert argv[:4] == ["scontrol", "update", "NodeName=node03", "State=DRAIN"] and len(argv) == 5
    val = argv[4].removeprefix("Reason=")
    # src/scontrol/update_node.c: one leading and one trailing double quote stripped
    val = val[1:] if val.startswith('"') else val
    val = val[:-1] if val.endswith('"') else val
    assert val == reason


@pytest.mark.parametrize("name", ["maint jan", "-x", "", "a;b", "x" * 65])
def test_a_reservation_name_is_checked(name):
    with pytest.raises(ValueError):
        maintenance.reservation_name(name)
