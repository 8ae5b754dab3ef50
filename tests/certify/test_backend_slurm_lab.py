"""`certify --backend slurm` beside `--backend ssh` (issue 24.2), on the lab's own Slurm (`clustercert lab
slurm up`: slurmctld on node01, slurmd on the 4 bootstrapped nodes, every node idle).

One fault (node02's fabric 0 at 30 %): the two backends give the same node verdicts, the same failing checks
and links, and the same localisation. Over Slurm the run is one job of Slurm's (its steps: every node's checks
in one step, each pair's servers and clients in one step per round, the pair NCCL launched from inside a
step), the controller's only SSH connection is to the launch node, and the job is gone once certify is.
validate both ways, a GPU missing on node03: the same findings.

Issue 36.5: for the run over Slurm, node04 is drained by an "administrator" (a reason with spaces and quotes).
certify reaches it all the same -- a maintenance reservation clustercert-<id>, node04 resumed inside it -- and
afterwards node04 is drained again with that reason, verbatim, and no clustercert reservation is left."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from clustercert.collect.slurm import parse_show_node
from clustercert.record import certificate
from clustercert.record.certificate import expanded  # the file keeps findings and links as tables

pytestmark = [pytest.mark.lab, pytest.mark.slow]

CONTROLLER = "node01"
SLOW = "node02"
# a server and its client each
PAIR_STEP_PROBES = ("ib_write_bw", "ib_write_lat", "iperf3", "ib_write_bw_gdr")
DRAINED = "node04"
ADMIN_REASON = 'admin: "fan" swap, ticket 12'


# slurm_lab (the lab's Slurm, up for this module): tests/certify/conftest.py


def certify(lab, inventory, out, home, *args: str) -> tuple[int, dict, subprocess.CompletedProcess, float]:
    """certify with its own state directory ``home`` (what it connected to stays apart), signed with the key
    of the lab's certify state directory."""
    key = certificate.key_paths(lab.dir.parent / "certify-test-state")[0]
    t0 = time.monotonic()
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
            "--key",
            str(key),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ, CLUSTERCERT_HOME=str(home)),
    )
    assert p.returncode in (0, 1), p.stdout[-2000:] + p.stderr[-3000:]
    return (
        p.returncode,
        expanded(json.loads((out / "certificate.json").read_text())),
        p,
        time.monotonic() - t0,
    )


def validate(inventory, home, *args: str) -> dict:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "clustercert",
            "validate",
            "-i",
            str(inventory),
            "--checks",
            "gpu,time",
            "--format",
            "json",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, CLUSTERCERT_HOME=str(home)),
    )
    assert p.returncode in (0, 1), p.stdout[-2000:] + p.stderr[-3000:]
    return {n: (v["verdict"], sorted(f["check"] for f in v["findings"] if f["status"] in ("fail", "error")))
            for n, v in json.loads(p.stdout)["nodes"].items()}


def outcome(cert: dict) -> dict:
    """What a user reads of a certificate: each node's verdict and failing checks, the failing links, the
    blame."""
    return {
        "verdict": cert["verdict"],
        "nodes": {
            n: (v["verdict"], sorted({f["check"] for f in v["findings"] if f["status"] in ("fail", "error")}))
            for n, v in cert["nodes"].items()
        },
        "failing_links": sorted(
            {
                (lk["probe"], lk.get("a"), lk.get("b"))
                for lk in cert["links"]
                if lk["status"] in ("fail", "error")
            }
        ),
        "localisation": sorted(
            (x.get("node") or x.get("link"), x["kind"], x.get("fabric")) for x in cert["localisation"]
        ),
    }


def test_certify_over_slurm_agrees_with_ssh_on_one_fault(slurm_lab, tmp_path):
    lab = slurm_lab
    inv_dir = tmp_path / "inventory"
    shutil.copytree(lab.inventory.parent, inv_dir)  # the lab's, with clustercert_slurm: true
    inventory = inv_dir / lab.inventory.name
    # short state directories: ssh's control sockets live there (a Unix socket's path has 108 bytes at most)
    homes = {k: Path(tempfile.mkdtemp(prefix=f"cc-{k}-", dir="/tmp")) for k in ("ssh", "slurm")}
    lab.manager.fault(SLOW, "link_slow", {"fabric": "0", "factor": "0.3"})
    try:
        _, over_ssh, _, ssh_s = certify(lab, inventory, tmp_path / "ssh", homes["ssh"])
        lab.ssh(
            CONTROLLER,
            f"scontrol update NodeName={DRAINED} State=DRAIN {shlex.quote('Reason=' + ADMIN_REASON)}",
        )
        rc, over_slurm, p, slurm_s = certify(
            lab, inventory, tmp_path / "slurm", homes["slurm"], "--backend", "slurm"
        )
        # the job ended with certify: no step, no job of it left
        jobs = lab.ssh(CONTROLLER, "squeue -h -o '%i %j %T'", check=False).stdout
        drained = parse_show_node(lab.ssh(CONTROLLER, f"scontrol show node {DRAINED} --oneliner").stdout)
        reservations = lab.ssh(CONTROLLER, "scontrol show reservation --oneliner", check=False).stdout
    finally:
        lab.manager.heal(SLOW)
        lab.ssh(CONTROLLER, f"scontrol update NodeName={DRAINED} State=RESUME", check=False)
    # the administrator's drain: certified all the same, then back with its reason verbatim; no reservation
    # left
    assert drained.drained and drained.reason == ADMIN_REASON, drained
    assert "ReservationName=clustercert-" not in reservations, reservations
    assert f"{DRAINED} resumed in reservation clustercert-" in p.stderr, p.stderr[-2000:]
    assert f"drains restored on {DRAINED}; reservation clustercert-" in p.stderr, p.stderr[-2000:]
    print(f"certify: --backend ssh {ssh_s:.0f} s, --backend slurm {slurm_s:.0f} s")
    assert outcome(over_ssh)["localisation"] == [(SLOW, "bad_node", 0)], over_ssh["localisation"]
    assert rc == 1 and outcome(over_slurm) == outcome(over_ssh), (outcome(over_slurm), outcome(over_ssh))
    assert not [j for j in jobs.splitlines() if " clustercert-" in j], jobs
    # Slurm ran it: the run's job, on the 4 nodes, ended (cancelled by certify once done)
    shown = lab.ssh(CONTROLLER, "scontrol show job --oneliner", check=False).stdout
    job = [j for j in shown.splitlines() if "JobName=clustercert-" in j and "NodeList=node[01-04]" in j]
    assert job and ("JobState=CANCELLED" in job[-1] or "JobState=COMPLETED" in job[-1]), shown[-2000:]
    job_id = job[-1].split()[0].removeprefix("JobId=")
    # each pair's servers and clients ran in ONE step of that job across its two nodes, a step of the pair's
    # own for each round (probes.run puts the step in the evidence, as the site's Slurm logs name it)
    steps: dict[str, set] = {}
    for lk in (lk for lk in over_slurm["links"] if lk["probe"] in PAIR_STEP_PROBES):
        first = lk["evidence"].split("\n", 1)[0]
        assert first.startswith(f"ran in the pair's Slurm step {job_id}."), lk
        steps.setdefault(first, set()).add((lk["a"], lk["b"], lk["round"]))
    assert steps and all(len(pairs) == 1 for pairs in steps.values()), steps
    assert len(steps) == len({(lk["a"], lk["b"], lk["round"]) for lk in over_slurm["links"]
                              if lk["probe"] in PAIR_STEP_PROBES}), steps
    nccl = [lk for lk in over_slurm["links"] if lk["probe"] == "nccl_allreduce"]
    assert nccl and all(
        lk["evidence"].startswith(f"launched with srun (a step of the run's Slurm job {job_id})\n")
        for lk in nccl
    ), nccl
    # the controller's one connection: the launch node's (its multiplexed master is the only one in the state
    # dir)
    masters = sorted(x.name for x in (homes["slurm"] / "cp").iterdir())
    assert len(masters) == 1, masters

    # validate both ways, a GPU missing on node03: the same findings
    lab.manager.fault("node03", "gpu_missing", {})
    try:
        found = {b: validate(inventory, homes[b], "--backend", b) for b in ("ssh", "slurm")}
    finally:
        lab.manager.heal("node03")
    assert found["slurm"] == found["ssh"], found
    assert found["slurm"]["node03"][0] == "fail" and "gpu.count" in found["slurm"]["node03"][1], found
    for home in homes.values():
        shutil.rmtree(home, ignore_errors=True)
    states = {
        n: parse_show_node(lab.ssh(CONTROLLER, f"scontrol show node {n} --oneliner").stdout)
        for n in lab.nodes
    }
    assert {n: st.state for n, st in states.items()} == dict.fromkeys(lab.nodes, "IDLE"), states
