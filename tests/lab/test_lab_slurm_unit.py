"""The lab's Slurm (clustercert_lab.slurm) without a lab: the configuration it writes, what `up` runs inside
the nodes (nothing costly where Slurm is up already), the inventory's clustercert_slurm and the commands."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from clustercert.errors import InputError
from clustercert.model.inventory import load_inventory
from clustercert_lab import cli, manager, node, slurm
from clustercert_lab.errors import LabError

NODES = [("node01", "10.250.0.11"), ("node02", "10.250.0.12")]


def test_slurm_conf_and_gres_conf():
    conf = slurm.slurm_conf(NODES, {"node01": 7936, "node02": 7900}, 8)
    lines = conf.splitlines()
    for line in (
        "ClusterName=clustercert-lab",
        "SlurmctldHost=node01(10.250.0.11)",
        "AuthType=auth/munge",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "GresTypes=gpu",
        "ReturnToService=2",
        "SlurmdParameters=config_overrides",
        "ProctrackType=proctrack/linuxproc",
    ):
        assert line in lines, line
    assert ("NodeName=node02 NodeAddr=10.250.0.12 CPUs=16 Boards=1 SocketsPerBoard=2 CoresPerSocket=8 "
            "ThreadsPerCore=1 RealMemory=7900 Gres=gpu:8 State=UNKNOWN") in lines
    assert lines[-1] == "PartitionName=lab Nodes=node01,node02 Default=YES MaxTime=INFINITE State=UP"
    assert [ln for ln in lines if ln.startswith("PartitionName=")] == [lines[-1]]
    gres = slurm.gres_conf(8)
    assert gres.splitlines()[-1] == "Name=gpu File=/dev/nvidia[0-7]"
    assert "simulates GPU device files" in gres


def test_parsers():
    assert (
        slurm.parse_real_memory("NodeName=node01 CPUs=2 Boards=1 RealMemory=7936\nUpTime=0-01:00:00\n")
        == 7936
    )
    with pytest.raises(LabError, match="no RealMemory"):
        slurm.parse_real_memory("slurmd: error: something\n")
    assert slurm.parse_sinfo("node01 idle\nnode02 drained\n\nnoise\n") == {
        "node01": "idle",
        "node02": "drained",
    }


class FakeNode:
    """A running lab node whose shell answers as a node with (``ready``) or without Slurm in place."""

    def __init__(self, name: str, ip: str, ready: bool, ran: list):
        self.name, self.mgmt_ip, self.ready, self.ran = name, ip, ready, ran

    def is_running(self) -> bool:
        return True

    def exec(self, argv, timeout=60, input=None):
        script = argv[-1]
        assert argv[:2] == ["sh", "-c"] and timeout > 0
        self.ran.append((self.name, script, timeout))
        out, rc = "", 0
        if script.startswith("dpkg-query"):
            out, rc = ("install ok installed\ninstall ok installed\n", 0) if self.ready else ("", 1)
        elif script == "slurmd -C":
            out = f"NodeName={self.name} CPUs=2 RealMemory=7936\nUpTime=0-00:10:00\n"
        elif script.startswith("sha256sum"):
            out = "abc  /etc/munge/munge.key\n" if self.ready else f"{self.name}  /etc/munge/munge.key\n"
        elif ".clustercert-new" in script and "cmp -s" in script:
            out = "same\n" if self.ready else "changed\n"
        elif script.startswith("systemctl is-active"):
            rc = 0 if self.ready else 3
        elif script.startswith("sinfo"):
            out = "node01 idle\nnode02 idle\n"
        return subprocess.CompletedProcess(argv, rc, out, "")


def _nodes(ready: bool) -> tuple[list[FakeNode], list]:
    ran: list = []
    return [FakeNode(n, ip, ready, ran) for n, ip in NODES], ran


def test_up_on_bare_nodes_installs_configures_starts_and_waits():
    handles, ran = _nodes(ready=False)
    done = slurm.up(handles, 8)
    assert done["installed"] == ["node01", "node02"] and done["restarted"]
    scripts = [(n, s) for n, s, _ in ran]
    assert {n for n, s in scripts if "apt-get install -y -q slurm-wlm munge" in s} == {"node01", "node02"}
    assert [t for _, s, t in ran if "apt-get install" in s] == [slurm.INSTALL_TIMEOUT_S] * 2
    assert {n for n, s in scripts if s.startswith("base64 -d > /etc/munge/munge.key.new")} == {
        "node01",
        "node02",
    }
    assert {n for n, s in scripts if s == "systemctl restart slurmctld"} == {"node01"}
    assert {n for n, s in scripts if s == "systemctl restart slurmd"} == {"node01", "node02"}
    assert any(s.startswith("sinfo") for _, s in scripts)


def test_up_where_slurm_is_up_runs_nothing_costly():
    handles, ran = _nodes(ready=True)
    done = slurm.up(handles, 8)
    assert done == {"installed": [], "restarted": False, "seconds": done["seconds"]}
    costly = [s for _, s, _ in ran if re.search(r"apt-get|restart|sinfo|munge.key.new", s)]
    assert not costly


def test_down_stops_disables_and_removes_the_stand_ins():
    handles, ran = _nodes(ready=True)
    slurm.down(handles)
    assert len(ran) == 2
    assert all("systemctl disable --now slurmd slurmctld munge" in s and "rm -f /dev/nvidia[0-9]*" in s
               for _, s, _ in ran)


def test_inventory_carries_clustercert_slurm_while_slurm_is_up(tmp_path, monkeypatch):
    monkeypatch.setenv("CLUSTERCERT_LAB_DIR", str(tmp_path / "lab"))
    (tmp_path / "lab" / "ssh").mkdir(parents=True)
    (tmp_path / "lab" / "ssh" / "id_ed25519").write_text("")
    handles = [node.NodeHandle(tmp_path / "lab", n, i) for i, (n, _) in enumerate(NODES, start=1)]
    sp = {"nodes": [n for n, _ in NODES], "profile": "lab", "link_mbit": 1000, "faults": [], "slurm": True}
    manager._write_inventory(handles, sp)
    for inv in (manager.inventory_path(), manager.user_inventory_path()):
        gv = yaml.safe_load((inv.parent / "group_vars" / "all.yml").read_text())
        assert gv["clustercert_slurm"] is True
    loaded = load_inventory(str(manager.inventory_path()))
    assert all(h.vars.clustercert_slurm for h in loaded.hosts.values())
    manager._write_inventory(handles, {**sp, "slurm": False})
    assert "clustercert_slurm" not in (manager.inventory_path().parent / "group_vars" / "all.yml").read_text()


def test_slurm_commands_need_a_running_lab(tmp_path, monkeypatch):
    monkeypatch.setenv("CLUSTERCERT_LAB_DIR", str(tmp_path / "lab"))
    monkeypatch.setattr(manager.os, "geteuid", lambda: 0)
    for fn, words in ((manager.slurm_up, "slurm up"), (manager.slurm_down, "slurm down")):
        with pytest.raises(InputError) as exc:
            fn()
        assert (
            exc.value.one_line()
            == f"clustercert lab {words}: the lab is not up: start it with `clustercert lab up`"
        )
    assert manager.status()["slurm"] == {"state": "off", "controller": None}


def test_the_commands_and_the_status_line(capsys):
    parser = cli.build_parser()
    assert parser.parse_args(["up", "--slurm"]).slurm is True
    assert parser.parse_args(["up"]).slurm is False
    assert parser.parse_args(["slurm", "down"]).action == "down"
    cli.print_status(
        {"running": True, "inventory": "/x/hosts.yml", "slurm": {"state": "up", "controller": "node01"}}
    )
    assert capsys.readouterr().out.splitlines()[1] == "slurm: up — slurmctld on node01, slurmd on every node"
    assert cli.slurm_line({"state": "off", "controller": None}).startswith("slurm: off")
    assert "not active" in cli.slurm_line({"state": "not running", "controller": "node01"})


def test_spec_json_records_the_slurm_key():
    assert manager._public_spec({"nodes": ["node01"], "profile": "lab", "link_mbit": 1000, "faults": [],
                                 "slurm": True, "other": 1}) == {
        "nodes": ["node01"], "profile": "lab", "link_mbit": 1000, "faults": [], "slurm": True}
