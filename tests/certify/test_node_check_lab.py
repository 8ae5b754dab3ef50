"""Issue 24.1's acceptance: `clustercert node-check` as Slurm's HealthCheckProgram drains a faulty node with its
reason and resumes it once healed. The node_check role (playbooks/node_check.yml, through clustercert's engine)
installs it on the 4 bootstrapped lab nodes of test_drain_slurm_lab's Slurm (Debian's slurm-wlm): every slurmd of
the cluster runs the one HealthCheckProgram slurm.conf names. node02 then misses a GPU, node04 was drained by an
administrator: slurmd's own health check drains node02 with ``Reason=clustercert: <ids>`` (gpu.count among them)
and, once healed, resumes it; node04 keeps its administrator's drain, node01 and node03 are not touched.

Marked wip: it passed on the lab when run by hand (2026-12-05), but its Slurm set-up (3.5 min) is not yet shared
with test_drain_slurm_lab's, and CI has no room for a second one (README, Two commands)."""

from __future__ import annotations

import base64
import time

import pytest
from test_drain_slurm_lab import CONTROLLER, _on_all, node_state, slurm_lab  # noqa: F401 - the fixture

from clustercert.collect import engine

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.wip]

WRAPPER = "/usr/local/sbin/clustercert-node-check"
INTERVAL_S = 10
HEALTH_CHECK = (f"HealthCheckProgram={WRAPPER}\nHealthCheckInterval={INTERVAL_S}\nHealthCheckNodeState=ANY\n")


def wait_for(lab, name: str, ok, what: str, timeout: float = 150):
    """The node's (raw line, state) once ``ok(state)``; AssertionError with the last line after ``timeout``."""
    deadline = time.monotonic() + timeout
    raw, st = node_state(lab, name)
    while not ok(st) and time.monotonic() < deadline:
        time.sleep(2)
        raw, st = node_state(lab, name)
    assert ok(st), f"{name}: not {what} after {timeout:.0f} s: {raw}"
    return raw, st


@pytest.fixture(scope="module")
def no_saved_slurm_state(bootstrapped_lab):
    """Before slurm_lab: slurmctld forgets the node states an earlier module left (test_drain_slurm_lab's drains
    would survive in its StateSaveLocation, and slurm_lab waits for every node idle)."""
    _on_all(bootstrapped_lab, "systemctl stop slurmctld slurmd 2>/dev/null; rm -rf /var/lib/slurm/slurmctld/*; true")


@pytest.fixture(scope="module")
def health_checked(no_saved_slurm_state, slurm_lab, tmp_path_factory):  # noqa: F811 - the imported fixture
    lab = slurm_lab
    state = tmp_path_factory.mktemp("node-check-role-state")
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
    lab.manager.fault("node02", "gpu_missing", {})
    try:
        raw, st = wait_for(lab, "node02", lambda st: st.drained, "drained", timeout=INTERVAL_S * 6 + 60)
        assert st.reason.startswith("clustercert: ") and "gpu.count" in st.reason.removeprefix("clustercert: ").split(","), raw
        # the wrapper, run by hand as slurmd runs it, says the same and finds it drained for this reason
        p = lab.ssh("node02", f"{WRAPPER} --format json", check=False)
        assert p.returncode == 1 and '"action": "none"' in p.stdout and "already drained" in p.stdout, p.stdout[-2000:]
    finally:
        lab.manager.heal("node02")
    raw, st = wait_for(lab, "node02", lambda st: not st.drained, "resumed", timeout=INTERVAL_S * 6 + 60)
    assert st.reason is None, raw
    wait_for(lab, "node02", lambda st: st.state == "IDLE", "idle again", timeout=90)
    # the administrator's drain stays theirs through every health check; the others were never touched
    time.sleep(INTERVAL_S * 2)
    raw, st = node_state(lab, "node04")
    assert st.drained and st.reason == "admin: maintenance", raw
    for n in ("node01", "node03"):
        raw, st = node_state(lab, n)
        assert (st.state, st.reason) == ("IDLE", None), raw
    lab.ssh(CONTROLLER, "scontrol update NodeName=node04 State=RESUME")
