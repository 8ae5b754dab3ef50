"""`clustercert validate` end to end against this machine (local connection) and an unreachable node."""

from __future__ import annotations

import json
import sqlite3
import sys
import textwrap
from pathlib import Path


def local_and_unreachable(path: Path, port: int = 1) -> Path:
    """An inventory of this machine (local connection) and a host ``gone`` at 127.0.0.1:``port`` (1: one that
    refuses the connection)."""
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
              ansible_port: {port}
        """))
    return path


def test_validate_json_local_and_unreachable(cli, tmp_path):
    inv = local_and_unreachable(tmp_path / "hosts.yml")
    r = cli(
        "validate",
        "-i",
        str(inv),
        "--format",
        "json",
        "--checks",
        "gpu,tuning",
        "--out",
        str(tmp_path / "out"),
        env={"CLUSTERCERT_HOME": str(tmp_path / "state")},
    )
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
    assert (tmp_path / "out" / "validate.json").is_file() and (
        tmp_path / "out" / "evidence" / "here.json"
    ).is_file()
    db = sqlite3.connect(tmp_path / "state" / "store.sqlite")
    (kind, verdict, status), = db.execute("SELECT kind, verdict, status FROM runs").fetchall()
    assert (kind, verdict, status) == ("validate", "fail", "done")
    assert db.execute("SELECT verdict FROM nodes WHERE node='gone'").fetchone()[0] == "unreachable"


def test_validate_rejects_unknown_component(cli, tmp_path):
    r = cli("validate", "-i", "inventory/h100-sample", "--checks", "gpu,gpus")
    assert (
        r.returncode == 2 and "--checks: gpus: unknown check id or component (did you mean gpu?)" in r.stderr
    )


def _node(name, findings, verdict="fail", detail=""):
    from clustercert.checks.run import NodeResult

    return NodeResult(name, verdict, findings, detail)


def test_identical_causes_fold_into_one_line():
    from clustercert.checks import Finding
    from clustercert.report.terminal import fold_findings, fold_line

    why = "tool not found: nvidia-smi -q -x"
    gpu = [
        Finding(c, "error", "", "", why)
        for c in (
            "gpu.count",
            "gpu.model",
            "gpu.memory",
            "gpu.ecc",
            "gpu.row_remap",
            "gpu.retired_pages",
            "gpu.pcie_link",
            "gpu.throttle",
            "gpu.persistence",
        )
    ]
    ecc = [Finding("gpu.ecc", "fail", f"GPU{i}", "ECC enabled", "ECC disabled") for i in range(8)]
    results = {
        "n1": _node(
            "n1", [*gpu, Finding("time.sync", "pass"), Finding("ib.bond", "fail", "bond0", "up", "missing")]
        ),
        "n2": _node("n2", [*gpu, *ecc]),
        "n3": _node("n3", [], "unreachable", "host key verification failed"),
        "n4": _node("n4", [], "unreachable", "host key verification failed"),
    }
    lines = [fold_line(g) for g in fold_findings(results)]
    assert lines == [
        "n1, n2 error: 9 checks (gpu.count, gpu.model, gpu.memory (+6 more)): tool not found: nvidia-smi -q "
        "-x",
        "n1 fail: ib.bond bond0: expected up, observed missing",
        "n2 fail: gpu.ecc ×8 (GPU0, GPU1, GPU2 (+5 more)): expected ECC enabled, observed ECC disabled",
        "n3, n4 unreachable — host key verification failed",
    ]
    groups = fold_findings(results)
    assert (
        groups[0]["findings"] == 18 and groups[0]["nodes"] == ["n1", "n2"] and len(groups[0]["checks"]) == 9
    )


def test_an_unreachable_nodes_reason_is_said_once_and_a_shared_one_folds(capsys):
    """The sudo case of the lab's non-root test: one unreachable node's reason (sudo wants a password) is in
    the first table only, whole on one line; a reason two nodes share is also folded below the matrix."""
    from clustercert.collect.ssh import describe_failure
    from clustercert.report.terminal import print_validate

    why = describe_failure("sudo: a password is required\n", 1, {"ansible_user": "op"})
    cols = {"gpu": "unreachable", "ib": "unreachable", "verdict": "unreachable"}
    print_validate(
        [{"node": "node01", **cols}], ["gpu", "ib"], {"node01": _node("node01", [], "unreachable", why)}, "r1"
    )
    out = capsys.readouterr().out
    said = [ln for ln in out.splitlines() if "sudo needs a password" in ln]
    assert len(said) == 1 and "-K" in said[0], out
    key = "host key verification failed"
    results = {n: _node(n, [], "unreachable", key) for n in ("n3", "n4")}
    print_validate([{"node": n, **cols} for n in results], ["gpu", "ib"], results, "r2")
    assert "n3, n4 unreachable — host key verification failed" in capsys.readouterr().out


def test_terminal_folds_while_json_keeps_every_finding(cli, tmp_path):
    import shutil

    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  vars: {clustercert_profile: lab, clustercert_command_timeout_s: 10}\n"
                   "  hosts:\n"
                   f"    here: {{ansible_connection: local, ansible_python_interpreter: {sys.executable}}}\n")
    env = {"CLUSTERCERT_HOME": str(tmp_path / "state")}
    table = cli("validate", "-i", str(inv), "--checks", "gpu,driver", env=env)
    doc = json.loads(
        cli("validate", "-i", str(inv), "--checks", "gpu,driver", "--format", "json", env=env).stdout
    )
    bad = [f for f in doc["nodes"]["here"]["findings"] if f["status"] in ("fail", "error")]
    lines = [x for x in table.stdout.splitlines() if x.startswith("here ")]
    assert bad and lines and len(lines) <= len(bad)
    # a machine without GPUs: one line for every check nvidia-smi feeds
    if shutil.which("nvidia-smi") is None:
        xml = [f for f in bad if f["observed"] == "tool not found: nvidia-smi -q -x"]
        assert len(xml) >= 9
        folded = [x for x in lines if x.endswith(": tool not found: nvidia-smi -q -x")]
        assert len(folded) == 1 and f"{len(xml)} checks (" in folded[0], lines
        assert len(lines) < len(bad)


# ---- --junit -------------------------------------------------------------------------------------

JUNIT_XSD = Path(__file__).resolve().parent / "fixtures" / "junit" / "jenkins-junit.xsd"


def test_validate_junit_is_valid_with_failures_messages_and_measured_times(cli, tmp_path):
    """validate --junit FILE: valid against the common JUnit schema; every node x check of the run is a
    testcase with its worst status (a failing check a <failure> whose message is its expected and observed
    values, a check that could not run an <error>, the unreachable node one node.status error); each node's
    checks share the seconds its collection took (evidence/NODE.json), so the times are not all zero."""
    import os
    import xml.etree.ElementTree as ET

    import pytest

    xmlschema = pytest.importorskip("xmlschema")
    inv = local_and_unreachable(tmp_path / "hosts.yml")
    junit = tmp_path / "reports" / "validate-junit.xml"  # a directory that does not exist yet
    r = cli("validate", "-i", str(inv), "--format", "json", "--checks", "gpu,ib,bond,packages", "--out",
            str(tmp_path / "out"), "--junit", str(junit), env={"CLUSTERCERT_HOME": str(tmp_path / "state")})
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    xml = junit.read_text()
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(xml)
    assert oct(os.stat(junit).st_mode & 0o777) == "0o600" and not list(
        junit.parent.glob(".validate-junit.xml.*")
    )
    root = ET.fromstring(xml)
    assert root.get("name") == "clustercert validate hosts.yml"
    cases = {(tc.get("classname"), tc.get("name")): tc for tc in root.iter("testcase")}

    # the JSON document's findings, node x check, against the testcases
    want = {}
    for node, n in doc["nodes"].items():
        if n["verdict"] == "unreachable":
            want[(node, "node.status")] = "error"
            continue
        for f in n["findings"]:
            st = want.get((node, f["check"]))
            rank = ["pass", "skip", "error", "fail"]
            if st is None or rank.index(f["status"]) > rank.index(st):
                want[(node, f["check"])] = f["status"]
    assert set(cases) == set(want)
    assert root.get("tests") == str(len(want))
    assert root.get("failures") == str(sum(s == "fail" for s in want.values()))
    assert root.get("errors") == str(sum(s == "error" for s in want.values()))
    fails = [k for k, s in want.items() if s == "fail"]
    # a machine that is not a clustercert node: no pin record, no IPoIB netdevs, no bond
    assert {("here", "packages.pinned"), ("here", "ib.ipoib"), ("here", "ib.bond")} <= set(fails), want
    for node, check in fails:
        failure = cases[(node, check)].find("failure")
        assert failure is not None and failure.get("type") == "fail", (node, check)
        first = next(
            f for f in doc["nodes"][node]["findings"] if f["check"] == check and f["status"] == "fail"
        )
        assert f"expected {first['expected']}, observed {first['observed']}" in failure.get("message"), (
            failure.attrib
        )
        assert first["observed"] in failure.text
    pinned = cases[("here", "packages.pinned")].find("failure").get("message")
    assert pinned.endswith("observed no pin record: the node was not bootstrapped"), pinned
    gpu = cases[("here", "gpu.count")]
    # could not run: an error, not a pass
    assert gpu.find("error") is not None and gpu.find("failure") is None
    gone = cases[("gone", "node.status")].find("error")
    assert gone.get("message") == "node unreachable"

    # durations: each node's checks share its collection's seconds, as measured
    secs = json.loads((tmp_path / "out" / "evidence" / "here.json").read_text())["seconds"]
    here = [float(tc.get("time")) for (n, _c), tc in cases.items() if n == "here"]
    assert secs > 0 and all(t > 0 for t in here), here
    assert sum(here) == pytest.approx(secs, abs=0.001 * len(here))
    suite = root.find("testsuite")
    assert suite.find("properties/property").get("value").startswith("each node's collection seconds")
    assert float(suite.get("time")) >= secs - 0.001 and float(root.get("time")) == float(suite.get("time"))
    assert suite.get("timestamp") == doc["started"]


def test_validate_junit_that_cannot_be_written_is_one_line_before_anything_runs(cli, tmp_path):
    inv = local_and_unreachable(tmp_path / "hosts.yml")
    home = tmp_path / "state"
    afile = tmp_path / "afile"
    afile.write_text("x")
    for target, reason in ((tmp_path, "is a directory, expected a file"),
                           (afile / "junit.xml", "is not a directory"),
                           ("/proc/1/junit.xml", "is not writable")):
        r = cli("validate", "-i", str(inv), "--junit", str(target), env={"CLUSTERCERT_HOME": str(home)})
        assert r.returncode == 2 and r.stderr.count("\n") == 1, (target, r.stderr)
        assert r.stderr.startswith("clustercert: error: --junit: ") and reason in r.stderr, r.stderr
    assert not (home / "store.sqlite").exists() and afile.read_text() == "x"
