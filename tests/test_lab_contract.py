"""Issue 25.2: the simulated lab is a product beside the tool, and the tool never imports it. What the two
share is a contract: the path where a running lab writes its inventory (`-i lab`: clustercert.paths on the
product's side, clustercert_lab.paths on the lab's), and the lab's own program (`python3 -m clustercert_lab`,
the `clustercert-lab` script), which `clustercert lab ...` runs with the words after `lab` as they are.
None of these tests starts a lab."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from clustercert import paths
from clustercert.cli import main
from clustercert_lab import cli as lab_cli
from clustercert_lab import paths as lab_paths

NO_LAB = "clustercert: error: -i lab: no lab inventory: start the lab first with `clustercert lab up`\n"


@pytest.mark.parametrize("lab_dir", [None, "/srv/elsewhere/lab"])
def test_both_sides_of_the_lab_inventory_path_agree(lab_dir, monkeypatch):
    if lab_dir is None:
        monkeypatch.delenv("CLUSTERCERT_LAB_DIR", raising=False)
    else:
        monkeypatch.setenv("CLUSTERCERT_LAB_DIR", lab_dir)
    assert paths.lab_inventory_path() == lab_paths.inventory_path()
    assert paths.lab_inventory_path().parent.parent == lab_paths.lab_dir()
    if lab_dir is None:
        assert str(paths.lab_inventory_path()) == "/var/lib/clustercert/lab/inventory/hosts.yml"


def test_i_lab_without_a_running_lab_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CLUSTERCERT_LAB_DIR", str(tmp_path / "no-lab"))
    monkeypatch.chdir(tmp_path)
    for verb in ("inventory", "validate"):
        assert main([verb, "-i", "lab"]) == 2
        assert capsys.readouterr().err == NO_LAB


def test_i_lab_reads_the_inventory_the_lab_wrote(tmp_path, monkeypatch, capsys):
    inv = tmp_path / "lab" / "inventory" / "hosts.yml"
    inv.parent.mkdir(parents=True)
    inv.write_text("all:\n  vars: {clustercert_profile: lab}\n  hosts:\n    node01: {ansible_host: 10.250.0.11}\n")
    monkeypatch.setenv("CLUSTERCERT_LAB_DIR", str(tmp_path / "lab"))
    monkeypatch.chdir(tmp_path / "lab")  # no file or directory named `lab` here
    assert main(["inventory", "-i", "lab", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inventory"] == str(inv) and sorted(doc["hosts"]) == ["node01"]


def test_the_lab_verb_runs_the_lab_program_as_typed(monkeypatch):
    ran = []
    monkeypatch.setattr(subprocess, "call", lambda argv, **kw: ran.append(argv) or 3)
    assert main(["lab", "fault", "node02", "--", "gpu_missing", "gpu=3", "-v"]) == 3
    assert ran == [[sys.executable, "-m", "clustercert_lab", "fault", "node02", "--", "gpu_missing", "gpu=3", "-v"]]
    monkeypatch.setattr(subprocess, "call", lambda argv, **kw: -15)  # killed by SIGTERM: 128 + 15, as a shell says
    assert main(["lab", "up"]) == 143


def test_the_lab_verb_without_the_lab_installed(monkeypatch, capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "clustercert_lab"
                        else find_spec(name, *a))
    monkeypatch.setattr(subprocess, "call", lambda argv, **kw: pytest.fail("ran a lab that is not there"))
    assert main(["lab", "status"]) == 2
    assert capsys.readouterr().err == ("clustercert: error: lab: the simulated lab is not installed "
                                       "(no clustercert_lab package beside clustercert: it is the distribution "
                                       "clustercert-lab, clustercert-lab/ in clustercert's repository)\n")


def test_the_lab_verb_in_a_real_process(cli, tmp_path):
    """`clustercert lab` (the process becomes the lab's program) and `python3 -m clustercert_lab` say the same."""
    env = {"CLUSTERCERT_LAB_DIR": str(tmp_path)}
    r = cli("lab", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: clustercert lab [-h] [-v] CMD ...")
    assert "example:\n  clustercert lab up --nodes 4" in r.stdout and "inventory    print the path" in r.stdout
    for argv, rc, err in [
        (["inventory"], 0, ""),
        (["fault", "node01", "gpu_missing", "gpu"], 2, "clustercert: error: lab fault: gpu: parameters are KEY=VALUE\n"),
        (["up", "--bogus"], 2, "clustercert: error: --bogus: unrecognized argument for `clustercert lab up`; "
                               "see `clustercert lab up --help`\n"),
        ([], 2, "clustercert: error: lab: the following arguments are required: CMD; see `clustercert lab --help`\n"),
    ]:
        for r in (cli("lab", *argv, env=env),
                  subprocess.run([sys.executable, "-m", "clustercert_lab", *argv], capture_output=True, text=True,
                                 env={**os.environ, **env})):
            assert (r.returncode, r.stderr) == (rc, err), (argv, r.args)
            assert r.stdout == (f"{tmp_path}/inventory/hosts.yml\n" if argv == ["inventory"] else ""), r.args


def test_the_lab_prints_its_status(capsys):
    lab_cli.print_status({"running": True, "inventory": "/x/hosts.yml",
                          "nodes": {"node02": {"state": "running", "mgmt_ip": "10.250.0.12", "faults": [{"kind": "gpu_missing"}]},
                                    "node01": {"state": "stopped", "mgmt_ip": "10.250.0.11", "faults": []}}})
    out = capsys.readouterr().out
    assert out.startswith("lab: running — inventory /x/hosts.yml\n")
    assert out.index("node01") < out.index("node02") and "gpu_missing" in out and "simulated" in out
    lab_cli.print_status({"running": False})
    assert capsys.readouterr().out == "lab: not running\n"
