"""The node_check role (issue 24.1) on this machine, every path of it under a temporary directory: it builds
the zipapp on the controller, installs it with the node file and the wrapper, changes nothing when run again
or in check mode, and the wrapper -- run as slurmd runs a HealthCheckProgram, with no argument -- passes a
healthy fake node and drains a faulty one (a fake scontrol records the call). No systemd timer
(node_check_timer off)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from provisioning_helpers import BIN, ansible_env

from clustercert.collect import engine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from test_node_check import A5000, FAULTY_XML, HEALTHY_XML, fake_scontrol, fake_tool  # noqa: E402

from clustercert.model.profile import load_profile  # noqa: E402

SYSTEM_PYTHON = "/usr/bin/python3"
PLAY = """\
- name: The node_check role on this machine, into a temporary directory
  hosts: localhost
  gather_facts: true
  gather_subset: [min]
  roles:
    - role: node_check
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    if not Path(SYSTEM_PYTHON).is_file():
        pytest.skip(f"no {SYSTEM_PYTHON}")
    tmp = tmp_path_factory.mktemp("node_check_role")
    bindir, log = fake_scontrol(tmp, "IDLE", None)
    fake_tool(bindir, "nvidia-smi", f"#!/bin/sh\ncat {HEALTHY_XML}\n")
    variables = {
        "node_check_profile": load_profile("lab", A5000).model_dump(mode="json"),
        "node_check_node_name": "gpu01",
        "node_check_python": SYSTEM_PYTHON,
        "node_check_dir": str(tmp / "lib"),
        "node_check_wrapper": str(tmp / "sbin" / "clustercert-node-check"),
        "node_check_build_dir": str(tmp / "build"),
        "node_check_checks": "gpu.count,gpu.model,gpu.memory",
        "node_check_tool_path": str(bindir),
        "node_check_drain": True,
        "node_check_slurm_node": "gpu01",
        "node_check_command_timeout_s": 10,
    }
    (tmp / "sbin").mkdir()
    (tmp / "vars.json").write_text(json.dumps(variables))
    (tmp / "play.yml").write_text(PLAY)

    def play(*args: str) -> subprocess.CompletedProcess:
        p = subprocess.run(
            [
                str(BIN / "ansible-playbook"),
                "-i",
                "localhost,",
                "-c",
                "local",
                str(tmp / "play.yml"),
                "-e",
                f"@{tmp / 'vars.json'}",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=ansible_env(ANSIBLE_CACHE_PLUGIN="memory", **engine.strategy_env()),
            cwd=str(tmp),
        )
        assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
        return p

    first = play()
    return {"tmp": tmp, "play": play, "first": first, "bindir": bindir, "log": log}


def recap(p: subprocess.CompletedProcess) -> dict:
    m = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", p.stdout)
    return {"ok": int(m[1]), "changed": int(m[2]), "failed": int(m[4])}


def test_the_role_installs_the_zipapp_node_file_and_wrapper(installed):
    tmp = installed["tmp"]
    assert recap(installed["first"])["changed"] >= 4, installed["first"].stdout[-3000:]
    pyz = tmp / "lib" / "clustercert-node-check.pyz"
    assert pyz.read_bytes() == (tmp / "build" / "clustercert-node-check.pyz").read_bytes()
    node = json.loads((tmp / "lib" / "node.json").read_text())
    assert (node["schema"], node["node"], node["command_timeout_s"]) == ("clustercert.node/v1", "gpu01", 10)
    assert node["profile"]["gpu"]["model"] == "NVIDIA RTX A5000"
    wrapper = (tmp / "sbin" / "clustercert-node-check").read_text()
    assert (tmp / "sbin" / "clustercert-node-check").stat().st_mode & 0o777 == 0o755
    assert (
        f"exec {SYSTEM_PYTHON} -I -S {pyz} --profile {tmp / 'lib' / 'node.json'} --checks gpu.count,"
        "gpu.model,gpu.memory"
        in wrapper
    )
    assert wrapper.rstrip().endswith('--drain --slurm-node gpu01 "$@"'), wrapper


def test_a_second_run_and_check_mode_change_nothing(installed):
    again = installed["play"]()
    assert recap(again)["changed"] == 0, again.stdout[-3000:]
    assert "unchanged" in again.stdout or "ok: [localhost]" in again.stdout
    check = installed["play"]("--check", "--diff")
    assert recap(check)["changed"] == 0, check.stdout[-3000:]


def test_the_wrapper_is_a_health_check_program(installed):
    """As slurmd runs it: no argument, root, its exit status ignored -- the drain is what Slurm sees."""
    tmp, bindir, log = installed["tmp"], installed["bindir"], installed["log"]
    wrapper = str(tmp / "sbin" / "clustercert-node-check")
    healthy = subprocess.run(
        [wrapper], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}
    )
    assert healthy.returncode == 0 and "slurm gpu01: untouched" in healthy.stdout, (
        healthy.stdout + healthy.stderr
    )
    fake_tool(bindir, "nvidia-smi", f"#!/bin/sh\ncat {FAULTY_XML}\n")
    try:
        faulty = subprocess.run([wrapper, "--format", "json"], capture_output=True, text=True, timeout=60,
                                env={"PATH": "/usr/bin:/bin"})
    finally:
        fake_tool(bindir, "nvidia-smi", f"#!/bin/sh\ncat {HEALTHY_XML}\n")
    assert faulty.returncode == 1, faulty.stderr
    assert json.loads(faulty.stdout)["slurm"][0]["action"] == "drain"
    assert json.loads(log.read_text().splitlines()[-1]) == [
        "update", "NodeName=gpu01", "State=DRAIN", "Reason=clustercert: gpu.count,gpu.memory,gpu.model"]

