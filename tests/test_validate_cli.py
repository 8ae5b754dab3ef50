"""`clustercert validate` end to end against this machine (local connection) and an unreachable node."""

from __future__ import annotations

import json
import sqlite3
import sys
import textwrap
from pathlib import Path


def local_and_unreachable(path: Path) -> Path:
    """An inventory of this machine (local connection) and a host that refuses the connection."""
    path.write_text(textwrap.dedent(f"""\
        all:
          vars:
            clustercert_profile: lab
            clustercert_command_timeout_s: 10
          hosts:
            here:
              ansible_connection: local
              ansible_python_interpreter: {sys.executable}
            gone:
              ansible_host: 127.0.0.1
              ansible_port: 1
        """))
    return path


def test_validate_json_local_and_unreachable(cli, tmp_path):
    inv = local_and_unreachable(tmp_path / "hosts.yml")
    r = cli("validate", "-i", str(inv), "--format", "json", "--checks", "gpu,tuning", "--out", str(tmp_path / "out"),
            env={"CLUSTERCERT_HOME": str(tmp_path / "state")})
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc["nodes"]) == {"here", "gone"}
    assert doc["nodes"]["gone"]["verdict"] == "unreachable"
    here = doc["nodes"]["here"]
    # this machine has no GPU: GPU checks are errors (could not run), never passes
    gpu = [f for f in here["findings"] if f["check"] == "gpu.count"]
    assert gpu and gpu[0]["status"] == "error" and "nvidia-smi" in gpu[0]["observed"]
    assert here["verdict"] in ("error", "fail")
    for f in here["findings"]:
        assert set(f) >= {"check", "status", "subject", "expected", "observed", "evidence"}
    assert (tmp_path / "out" / "validate.json").is_file() and (tmp_path / "out" / "evidence" / "here.json").is_file()
    db = sqlite3.connect(tmp_path / "state" / "store.sqlite")
    (kind, verdict, status), = db.execute("SELECT kind, verdict, status FROM runs").fetchall()
    assert (kind, verdict, status) == ("validate", "fail", "done")
    assert db.execute("SELECT verdict FROM nodes WHERE node='gone'").fetchone()[0] == "unreachable"


def test_validate_rejects_unknown_component(cli, tmp_path):
    r = cli("validate", "-i", "inventory/h100-sample", "--checks", "gpu,gpus")
    assert r.returncode == 2 and "--checks: gpus: unknown check id or component (did you mean gpu?)" in r.stderr


def _node(name, findings, verdict="fail", detail=""):
    from clustercert.validate import NodeResult

    return NodeResult(name, verdict, findings, detail)


def test_identical_causes_fold_into_one_line():
    from clustercert.checks import Finding
    from clustercert.report_text import fold_findings, fold_line

    why = "tool not found: nvidia-smi -q -x"
    gpu = [Finding(c, "error", "", "", why) for c in ("gpu.count", "gpu.model", "gpu.memory", "gpu.ecc", "gpu.row_remap",
                                                      "gpu.retired_pages", "gpu.pcie_link", "gpu.throttle", "gpu.persistence")]
    ecc = [Finding("gpu.ecc", "fail", f"GPU{i}", "ECC enabled", "ECC disabled") for i in range(8)]
    results = {
        "n1": _node("n1", [*gpu, Finding("time.sync", "pass"), Finding("ib.bond", "fail", "bond0", "up", "missing")]),
        "n2": _node("n2", [*gpu, *ecc]),
        "n3": _node("n3", [], "unreachable", "host key verification failed"),
        "n4": _node("n4", [], "unreachable", "host key verification failed"),
    }
    lines = [fold_line(g) for g in fold_findings(results)]
    assert lines == [
        "n1, n2 error: 9 checks (gpu.count, gpu.model, gpu.memory (+6 more)): tool not found: nvidia-smi -q -x",
        "n1 fail: ib.bond bond0: expected up, observed missing",
        "n2 fail: gpu.ecc ×8 (GPU0, GPU1, GPU2 (+5 more)): expected ECC enabled, observed ECC disabled",
        "n3, n4 unreachable — host key verification failed",
    ]
    groups = fold_findings(results)
    assert groups[0]["findings"] == 18 and groups[0]["nodes"] == ["n1", "n2"] and len(groups[0]["checks"]) == 9


def test_terminal_folds_while_json_keeps_every_finding(cli, tmp_path):
    import shutil

    inv = tmp_path / "hosts.yml"
    inv.write_text(f"all:\n  vars: {{clustercert_profile: lab, clustercert_command_timeout_s: 10}}\n  hosts:\n"
                   f"    here: {{ansible_connection: local, ansible_python_interpreter: {sys.executable}}}\n")
    env = {"CLUSTERCERT_HOME": str(tmp_path / "state")}
    table = cli("validate", "-i", str(inv), "--checks", "gpu,driver", env=env)
    doc = json.loads(cli("validate", "-i", str(inv), "--checks", "gpu,driver", "--format", "json", env=env).stdout)
    bad = [f for f in doc["nodes"]["here"]["findings"] if f["status"] in ("fail", "error")]
    lines = [x for x in table.stdout.splitlines() if x.startswith("here ")]
    assert bad and lines and len(lines) <= len(bad)
    if shutil.which("nvidia-smi") is None:  # a machine without GPUs: one line for every check nvidia-smi feeds
        xml = [f for f in bad if f["observed"] == "tool not found: nvidia-smi -q -x"]
        assert len(xml) >= 9
        folded = [x for x in lines if x.endswith(": tool not found: nvidia-smi -q -x")]
        assert len(folded) == 1 and f"{len(xml)} checks (" in folded[0], lines
        assert len(lines) < len(bad)
