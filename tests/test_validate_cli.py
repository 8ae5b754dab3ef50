"""`clustercert validate` end to end against this machine (local connection) and an unreachable node."""

from __future__ import annotations

import json
import sqlite3
import sys
import textwrap


def test_validate_json_local_and_unreachable(cli, tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text(textwrap.dedent(f"""\
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
