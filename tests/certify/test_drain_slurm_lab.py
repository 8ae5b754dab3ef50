"""`certify --drain slurm` against a real Slurm: the lab's own (`clustercert lab slurm up`: Debian's slurm-wlm
and munge on the 4 bootstrapped lab nodes, slurmctld on node01, slurmd on all), as a site runs them. node02
misses a GPU; node03 was drained by an earlier clustercert run; node04 by an administrator. Only node02 is
drained, only node03 resumed; node04 keeps its administrator's reason, node01 is not touched.

The same Slurm then runs `clustercert node-check` as its HealthCheckProgram (issue 24.1): the node_check role
(playbooks/node_check.yml, through clustercert's engine) installs it on the 4 nodes, slurmd's own health check
drains node02 when it misses a GPU with ``Reason=clustercert: <ids>`` and resumes it once healed; node04 keeps
its administrator's drain, node01 and node03 are not touched."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from clustercert.collect import engine
from clustercert.collect.slurm import parse_show_node
from clustercert.model.profile import load_profile
from clustercert.record.certificate import expanded  # the file keeps findings and links as tables

pytestmark = [pytest.mark.lab, pytest.mark.slow]

CONTROLLER = "node01"
GPUS = load_profile("lab").gpu.count  # the lab inventory's profile: the GPUs each node has, as Slurm's GRES
# node-check as Slurm's HealthCheckProgram: the wrapper the node_check role installs, run every INTERVAL_S
WRAPPER = "/usr/local/sbin/clustercert-node-check"
INTERVAL_S = 10
HEALTH_CHECK = f"HealthCheckProgram={WRAPPER}\nHealthCheckInterval={INTERVAL_S}\nHealthCheckNodeState=ANY\n"


def _on_all(lab, command: str, timeout: float = 600) -> dict:
    with ThreadPoolExecutor(max_workers=len(lab.nodes)) as ex:
        return dict(
            zip(lab.nodes, ex.map(lambda n: lab.ssh(n, command, timeout=timeout), lab.nodes), strict=True)
        )


def node_state(lab, name: str) -> tuple[str, object]:
    raw = lab.ssh(CONTROLLER, f"scontrol show node {name} --oneliner").stdout
    return raw, parse_show_node(raw)


def wait_for(lab, name: str, ok, what: str, timeout: float = 150):
    """The node's (raw line, state) once ``ok(state)``; AssertionError with the last line after
    ``timeout``."""
    deadline = time.monotonic() + timeout
    raw, st = node_state(lab, name)
    while not ok(st) and time.monotonic() < deadline:
        time.sleep(1)
        raw, st = node_state(lab, name)
    assert ok(st), f"{name}: not {what} after {timeout:.0f} s: {raw}"
    return raw, st


# slurm_lab: tests/certify/conftest.py


def certify(lab, inventory, out, *args: str) -> tuple[int, dict, subprocess.CompletedProcess]:
    env = dict(os.environ, CLUSTERCERT_HOME=str(lab.dir.parent / "certify-test-state"))
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "clustercert",
            "certify",
            "-i",
            str(inventory),
            "--out",
            str(out),
            "--probe-seconds",
            "2",
            "--probe-timeout",
            "20",
            "--nccl-cluster",
            "all-rails",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert p.returncode in (0, 1), p.stderr[-3000:]
    return p.returncode, expanded(json.loads((out / "certificate.json").read_text())), p


def test_drain_failing_resume_own_leave_others(slurm_lab, tmp_path):
    lab = slurm_lab
    inv_dir = tmp_path / "inventory"
    shutil.copytree(lab.inventory.parent, inv_dir)  # with the lab's clustercert_slurm: true
    inventory = inv_dir / lab.inventory.name
    lab.ssh(CONTROLLER, "scontrol update NodeName=node03 State=DRAIN Reason='clustercert: gpu.count' && "
                        "scontrol update NodeName=node04 State=DRAIN Reason='admin: maintenance'")
    before = {n: node_state(lab, n)[1] for n in lab.nodes}
    assert (before["node01"].state, before["node01"].reason) == ("IDLE", None)
    assert not before["node02"].drained and before["node03"].drained and before["node04"].drained
    lab.manager.fault("node02", "gpu_missing", {})
    try:
        rc, cert, p = certify(lab, inventory, tmp_path / "out", "--drain", "slurm")
    finally:
        lab.manager.heal("node02")
    assert rc == 1 and cert["verdict"] == "fail", p.stdout[-3000:]
    assert cert["nodes"]["node02"]["verdict"] == "fail"
    assert all(cert["nodes"][n]["verdict"] == "pass" for n in ("node01", "node03", "node04")), p.stdout[
        -3000:
    ]
    after = {n: node_state(lab, n) for n in lab.nodes}
    raw, st = after["node02"]
    assert (
        st.drained
        and st.reason.startswith("clustercert:")
        and "gpu.count" in st.reason.split(": ", 1)[1].split(",")
    ), raw
    raw, st = after["node03"]
    assert not st.drained and st.reason is None, raw
    # back in service: slurmctld pings a resumed node (NOT_RESPONDING meanwhile), then it is IDLE
    wait_for(lab, "node03", lambda st: st.state == "IDLE", "idle", timeout=60)
    raw, st = after["node04"]
    assert st.drained and st.reason == "admin: maintenance" and "Reason=admin: maintenance [root@" in raw, raw
    raw, st = after["node01"]
    assert (st.state, st.reason) == ("IDLE", None), raw
    acts = {e["node"]: e for e in cert["slurm"]}
    assert {n: (e["action"], e["ok"]) for n, e in acts.items()} == {
        "node01": ("none", True),
        "node02": ("drain", True),
        "node03": ("resume", True),
        "node04": ("none", True),
    }, cert["slurm"]
    assert (
        acts["node02"]["reason"] == after["node02"][1].reason
        and acts["node04"]["reason"] == "admin: maintenance"
    )
    assert "slurm node02: drain (clustercert:" in p.stdout and "slurm node03: resume" in p.stdout
    # and recorded with the run in the store
    from clustercert.record.store import Store
    store = Store(lab.dir.parent / "certify-test-state" / "store.sqlite")
    run = store.runs(kind="certify", limit=1)[0]
    assert {
        a["node"]: (a["system"], a["target"], a["action"], a["ok"], a["reason"])
        for a in store.actions(run["id"])
    } == {n: ("slurm", e["slurm_node"], e["action"], e["ok"], e["reason"]) for n, e in acts.items()}
    # what was done is part of the signed certificate
    v = subprocess.run(
        [
            sys.executable,
            "-m",
            "clustercert",
            "verify",
            str(tmp_path / "out" / "certificate.json"),
            "--key",
            str(tmp_path / "out" / "signing.pub"),
        ],
        capture_output=True,
        text=True,
    )
    assert v.returncode == 0, v.stdout + v.stderr

    # Slurm stops answering (slurmctld down): certify says so and exits 1, even with every node passing
    lab.ssh(CONTROLLER, "systemctl stop slurmctld")
    try:
        rc, cert, p = certify(
            lab, inventory, tmp_path / "out2", "--drain", "slurm", "--limit", "node01,node03"
        )
    finally:
        lab.ssh(CONTROLLER, "systemctl start slurmctld")
    assert cert["verdict"] == "pass" and rc == 1, p.stdout[-2000:]
    assert cert["slurm"] and not any(e["ok"] for e in cert["slurm"]), cert["slurm"]
    assert "not done" in p.stderr
    nccl = [lk for lk in cert["links"] if lk["probe"] == "nccl_allreduce"]
    assert nccl and all(
        lk["evidence"].startswith("launched with mpirun over ssh: Slurm cannot start a step now (")
        for lk in nccl
    ), nccl


def test_pair_nccl_runs_as_an_srun_step_on_idle_nodes(slurm_lab, tmp_path):
    """Where Slurm can place it (both nodes IDLE), the pair all_reduce is a Slurm job step: Slurm
    records the job, named after the probe's tag, completed on both nodes."""
    lab = slurm_lab
    inv_dir = tmp_path / "inventory"
    shutil.copytree(lab.inventory.parent, inv_dir)  # with the lab's clustercert_slurm: true
    lab.ssh(CONTROLLER, "systemctl start slurmctld; for n in node01 node02; do "
                        "scontrol update NodeName=$n State=RESUME 2>/dev/null; done; true")
    for n in ("node01", "node02"):
        wait_for(lab, n, lambda st: st.state == "IDLE", "idle", timeout=90)
    def probe_jobs() -> list[str]:
        jobs = lab.ssh(CONTROLLER, "scontrol show job --oneliner", check=False).stdout
        return [j for j in jobs.splitlines() if "JobName=clustercert-nccl-" in j]

    # the first test's (failed) pair step, if Slurm still shows it
    earlier = {j.split()[0] for j in probe_jobs()}
    env = dict(os.environ, CLUSTERCERT_HOME=str(lab.dir.parent / "certify-test-state"))
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "clustercert",
            "probe",
            "-i",
            str(inv_dir / lab.inventory.name),
            "--limit",
            "node01,node02",
            "--probes",
            "nccl",
            "--probe-seconds",
            "2",
            "--probe-timeout",
            "40",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    doc = json.loads(p.stdout)
    (lk,) = [lk for lk in doc["links"] if lk["probe"] == "nccl_allreduce"]
    assert lk["status"] == "pass" and lk["evidence"].startswith("launched with srun\n"), lk
    mine = [j for j in probe_jobs() if j.split()[0] not in earlier]
    assert len(mine) == 1 and "JobState=COMPLETED" in mine[0] and "NodeList=node[01-02]" in mine[0], mine
    # the step asked for, and was given, each node's GPUs (the inventory's default clustercert_slurm_gres:
    # gpu): Slurm would have refused a request the nodes cannot meet
    assert f" TresPerNode=gres:gpu:{GPUS}" in mine[0], mine


@pytest.fixture
def health_checked(slurm_lab, tmp_path):
    """node-check installed by its role and named in slurm.conf; every node back in service first (the tests
    above leave drains behind), and nothing of it left after."""
    lab = slurm_lab
    lab.ssh(CONTROLLER, "systemctl start slurmctld; for n in $(sinfo -h -N -o %N); do "
                        "scontrol update NodeName=$n State=RESUME 2>/dev/null; done; true")
    state = tmp_path / "node-check-role-state"
    result = engine.run_playbook("node_check.yml", lab.inventory, state=state, envvars=engine.strategy_env(),
                                 extra_vars={"node_check_drain": True, "node_check_checks": "gpu"})
    assert result.ok and not result.failures, (result.status, result.failures)
    conf = base64.b64encode(HEALTH_CHECK.encode()).decode()
    _on_all(lab, f"test -x {WRAPPER} && echo {conf} | base64 -d >> /etc/slurm/slurm.conf")
    lab.ssh(CONTROLLER, "systemctl restart slurmctld")
    _on_all(lab, "systemctl restart slurmd")
    try:
        yield lab
    finally:
        _on_all(lab, "sed -i '/^HealthCheck/d' /etc/slurm/slurm.conf; rm -rf /usr/local/lib/clustercert "
                     f"{WRAPPER}; true")


def test_health_check_program_drains_a_faulty_node_and_resumes_it_healed(health_checked):
    lab = health_checked
    for n in lab.nodes:  # a first health check ran at slurmd's start: every node healthy, idle
        wait_for(lab, n, lambda st: st.state == "IDLE" and st.reason is None, "idle")
    lab.ssh(CONTROLLER, "scontrol update NodeName=node04 State=DRAIN Reason='admin: maintenance'")
    admin_drained = time.monotonic()
    lab.manager.fault("node02", "gpu_missing", {})
    try:
        raw, st = wait_for(lab, "node02", lambda st: st.drained, "drained", timeout=INTERVAL_S * 6 + 60)
        assert st.reason.startswith("clustercert: ") and "gpu.count" in st.reason.removeprefix(
            "clustercert: "
        ).split(","), raw
        # the wrapper, run by hand as slurmd runs it, says the same and finds it drained for this reason
        p = lab.ssh("node02", f"{WRAPPER} --format json", check=False)
        assert p.returncode == 1 and '"action": "none"' in p.stdout and "already drained" in p.stdout, (
            p.stdout[-2000:]
        )
    finally:
        lab.manager.heal("node02")
    raw, st = wait_for(lab, "node02", lambda st: not st.drained, "resumed", timeout=INTERVAL_S * 6 + 60)
    assert st.reason is None, raw
    wait_for(lab, "node02", lambda st: st.state == "IDLE", "idle again", timeout=90)
    # the administrator's drain stays theirs through every health check (at least two since it was set:
    # node02's drain and resume usually took longer); the others were never touched
    time.sleep(max(0.0, admin_drained + INTERVAL_S * 2 - time.monotonic()))
    raw, st = node_state(lab, "node04")
    assert st.drained and st.reason == "admin: maintenance", raw
    for n in ("node01", "node03"):
        raw, st = node_state(lab, n)
        assert (st.state, st.reason) == ("IDLE", None), raw
    lab.ssh(CONTROLLER, "scontrol update NodeName=node04 State=RESUME")
