"""junit.xml against the common JUnit schema, with the durations the certificate measured; a validate
run's findings as JUnit (render_junit_validation)."""

from __future__ import annotations

import importlib.util
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import pytest
from test_certificate import sample_certificate

from clustercert.checks import Finding
from clustercert.checks.run import NodeResult
from clustercert.model.evidence import CommandResult, NodeEvidence
from clustercert.report.junit import render_junit, render_junit_validation

xmlschema = pytest.importorskip("xmlschema")

HERE = Path(__file__).resolve().parent
XSD = HERE / "fixtures" / "junit" / "jenkins-junit.xsd"
TIMING = {"validate_s": 1.4, "probe_wall_s": 21.3, "probe_tool_s": 20.1, "control_overhead_s": 1.2,
          "control_overhead_pct": 5.6, "node_probes": {"wall_s": 9.0, "tool_s": 8.7},
          "rounds": [{"round": 1, "wall_s": 10.2, "tool_s": 9.9}, {"round": 2, "wall_s": 2.1, "tool_s": 2.0}]}


@pytest.fixture(scope="module")
def schema():
    return xmlschema.XMLSchema(str(XSD))


def scale_module():
    spec = importlib.util.spec_from_file_location("scale", HERE.parent / "benchmarks" / "scale.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _timed() -> dict:
    cert = sample_certificate()
    cert["timing"] = dict(TIMING)
    return cert


def _cases(root: ET.Element, suite: str) -> list[ET.Element]:
    return [tc for s in root.iter("testsuite") if s.get("name") == suite for tc in s.iter("testcase")]


def test_the_schema_rejects_what_issue_23_found(schema):
    """The fixture schema is the common one: skipped on <testsuites> and a testcase without a name fail."""
    ok = (
        '<testsuites tests="1"><testsuite name="s" tests="1"><testcase name="c" time="0.5"/></testsuite></'
        'testsuites>'
    )
    assert schema.is_valid(ok)
    assert not schema.is_valid(ok.replace('<testsuites tests="1">', '<testsuites tests="1" skipped="0">'))
    assert not schema.is_valid(ok.replace('<testcase name="c"', '<testcase'))
    assert not schema.is_valid(ok.replace('time="0.5"', 'time="soon"'))


@pytest.mark.parametrize("which", ["sample", "sample+timing", "synthetic-96"])
def test_certify_junit_is_valid_against_the_jenkins_schema(schema, which):
    cert = {"sample": sample_certificate, "sample+timing": _timed,
            "synthetic-96": lambda: scale_module().synthetic_certificate(96)}[which]()
    xml = render_junit(cert)
    schema.validate(xml.decode("utf-8"))  # raises with the first violation
    root = ET.fromstring(xml)
    assert "skipped" not in root.attrib
    assert root.get("tests") == str(len(root.findall(".//testcase")))


def test_durations_come_from_the_certificate_timing():
    root = ET.fromstring(render_junit(_timed()))
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert float(suites["nodes"].get("time")) == pytest.approx(1.4 + 9.0)  # validators, then the node probes
    assert float(suites["links"].get("time")) == pytest.approx(10.2 + 2.1)  # the two pair rounds
    assert "timing.validate_s" in suites["nodes"].find("properties/property").get("value")
    per_node: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for tc in _cases(root, "nodes"):
        kind = "probe" if tc.get("name") in ("perf.ib_loopback", "nccl.allreduce_1node") else "validate"
        per_node[tc.get("classname")][kind] += float(tc.get("time"))
        assert float(tc.get("time")) > 0, (tc.get("classname"), tc.get("name"))
    for node, t in per_node.items():
        if node == "gpu-node-08":  # unreachable: its node.status case is charged the validation
            assert t == {"validate": pytest.approx(1.4)}
            continue
        # the node's validator checks share the validation's time, its node probes the probe phase
        assert t["validate"] == pytest.approx(1.4, abs=0.01) and t["probe"] == pytest.approx(9.0, abs=0.01), (
            node
        )
    # a pair's measurements of one round share the round's wall time: every pair of a round ran at once
    per_pair_round: dict[tuple, float] = defaultdict(float)
    for tc in _cases(root, "links"):
        pair, rnd = tc.get("name").rsplit(" round ", 1)
        per_pair_round[(pair, rnd)] += float(tc.get("time"))
    assert per_pair_round[("gpu-node-05 <-> gpu-node-06", "2")] == pytest.approx(2.1, abs=0.002)
    assert per_pair_round[("gpu-node-01 <-> gpu-node-02", "1")] == pytest.approx(10.2, abs=0.002)
    assert all(t > 0 for t in per_pair_round.values())


def test_a_nodes_own_times_and_a_measurements_own_seconds_win():
    cert = _timed()
    cert["timing"]["nodes"] = {"gpu-node-01": {"validate_s": 0.5, "probes_s": 4.0}}
    link = next(
        lk
        for lk in cert["links"]
        if (lk["a"], lk["b"], lk["fabric"]) == ("gpu-node-05", "gpu-node-06", 1) and lk["round"] == 2
    )
    link["seconds"] = 5.25
    fs = cert["nodes"]["gpu-node-02"]["findings"]
    next(f for f in fs if f["check"] == "gpu.count")["seconds"] = 0.75
    root = ET.fromstring(render_junit(cert))
    by = {(tc.get("classname"), tc.get("name")): float(tc.get("time")) for tc in root.iter("testcase")}
    node1 = {k[1]: v for k, v in by.items() if k[0] == "gpu-node-01"}
    assert sum(
        v for c, v in node1.items() if c not in ("perf.ib_loopback", "nccl.allreduce_1node")
    ) == pytest.approx(0.5, abs=0.01)
    assert node1["perf.ib_loopback"] + node1["nccl.allreduce_1node"] == pytest.approx(4.0, abs=0.01)
    assert by[("gpu-node-02", "gpu.count")] == 0.75
    assert by[("link.fabric1.ib_write_bw", "gpu-node-05 <-> gpu-node-06 round 2")] == 5.25
    # the other nodes keep the phase times
    assert by[("gpu-node-03", "perf.ib_loopback")] == pytest.approx(4.5)
    assert "timing.nodes" in root.find("testsuite/properties/property").get("value")


def test_each_nodes_validator_seconds_and_each_links_tool_seconds_as_certify_records_them(schema):
    """certify's timing.nodes has each node's validate_s only (its node probes keep the probe phase's wall
    time); a link carries its tool's seconds, null where it did not run (0, not a share of the round)."""
    cert = _timed()
    own = {n: 0.25 + 0.1 * i for i, n in enumerate(sorted(cert["nodes"]))}
    cert["timing"]["nodes"] = {n: {"validate_s": s} for n, s in own.items()}
    for i, lk in enumerate(cert["links"]):
        lk["seconds"] = None if i == 0 else 1.5
    xml = render_junit(cert)
    schema.validate(xml.decode())
    root = ET.fromstring(xml)
    per_node: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for tc in _cases(root, "nodes"):
        kind = "probe" if tc.get("name") in ("perf.ib_loopback", "nccl.allreduce_1node") else "validate"
        per_node[tc.get("classname")][kind] += float(tc.get("time"))
    for node, t in per_node.items():
        assert t["validate"] == pytest.approx(own[node], abs=0.01), node
        if node != "gpu-node-08":  # unreachable: no probes
            assert t["probe"] == pytest.approx(9.0, abs=0.01), node
    times = sorted(float(tc.get("time")) for tc in _cases(root, "links"))
    assert times == [0.0] + [1.5] * (len(cert["links"]) - 1)
    assert "validator seconds" in root.find("testsuite/properties/property").get("value")


def test_a_certificate_without_timing_still_validates_with_zero_times(schema):
    cert = sample_certificate()  # written before the timing object: nothing to report but the whole run
    xml = render_junit(cert)
    schema.validate(xml.decode())
    root = ET.fromstring(xml)
    assert {tc.get("time") for tc in root.iter("testcase")} == {"0.000"}
    assert root.get("time") == "1674.000"


def test_large_certificates_keep_evidence_for_what_did_not_pass():
    cert = scale_module().synthetic_certificate(128)
    root = ET.fromstring(render_junit(cert))
    passing = [tc for tc in _cases(root, "nodes") if tc.find("system-out") is not None]
    failing = [tc for tc in _cases(root, "nodes") if tc.find("failure") is not None]
    assert passing and failing
    for tc in passing:  # one "[pass] expected ..., observed ..." line per finding, no evidence
        lines = [x for x in tc.find("system-out").text.splitlines() if x]
        assert all(x.startswith(("[pass] ", "[skip] ")) for x in lines), (
            tc.get("classname"),
            tc.get("name"),
            lines,
        )
    # expected/observed, then the evidence
    assert all(tc.find("failure").text.count("\n") >= 1 for tc in failing)


# ---- validate ----------------------------------------------------------------------------------------

def _validate_results() -> dict[str, NodeResult]:
    def ev(node, secs):
        return NodeEvidence(
            node, True, "", {"nvidia_smi": CommandResult(0, "GPU 0: H100\n", "", False, 0.4)}, secs
        )

    return {
        "node01": NodeResult("node01", "pass", [
            Finding("gpu.count", "pass", "", "8", "8", "$ nvidia-smi -L\nGPU 0 ..."),
            Finding("ib.port_state", "pass", "mlx5_0/1", "Active", "Active", "State: Active"),
            Finding("ib.port_state", "pass", "mlx5_1/1", "Active", "Active", "State: Active"),
            Finding("ib.bond", "skip", "", "bond0", "no bond in this profile", "")], "", ev("node01", 1.2)),
        "node02": NodeResult("node02", "fail", [
            Finding("gpu.count", "fail", "", "8", "7", "$ nvidia-smi -L\n\x1b[31m7 GPUs\x1b[0m <b>"),
            Finding("ib.port_state", "error", "mlx5_0/1", "Active", "ibstat: not found", ""),
            Finding("ib.bond", "pass", "", "bond0", "bond0", "")], "", ev("node02", 0.9)),
        "node03": NodeResult("node03", "unreachable", [], "ssh: connect to host node03 port 22: timed out",
                             NodeEvidence("node03", False, "timed out", {}, 10.0)),
    }


def test_validation_junit_from_validate_results(schema):
    xml = render_junit_validation(_validate_results(), cluster="lab", timestamp="2026-12-05T10:00:00+00:00")
    schema.validate(xml.decode())
    root = ET.fromstring(xml)
    assert (root.get("name"), root.get("tests"), root.get("failures"), root.get("errors")) == (
        "clustercert validate lab", "7", "1", "2")
    suite = root.find("testsuite")
    assert (suite.get("name"), suite.get("skipped"), suite.get("hostname"), suite.get("timestamp")) == (
        "nodes", "1", "lab", "2026-12-05T10:00:00+00:00")
    assert suite.get("time") == "10.000" == root.get("time")  # the slowest node: they ran at once
    by = {(tc.get("classname"), tc.get("name")): tc for tc in root.iter("testcase")}
    assert list(by) == [("node01", "gpu.count"), ("node01", "ib.port_state"), ("node01", "ib.bond"),
                        ("node02", "gpu.count"), ("node02", "ib.port_state"), ("node02", "ib.bond"),
                        ("node03", "node.status")]
    # each node's checks share the seconds its collection took
    assert [by[("node01", c)].get("time") for c in ("gpu.count", "ib.port_state", "ib.bond")] == ["0.400"] * 3
    assert by[("node02", "gpu.count")].get("time") == "0.300"
    gc = by[("node02", "gpu.count")].find("failure")
    assert gc.get("message") == "expected 8, observed 7" and "\\x1b[31m7 GPUs\\x1b[0m <b>" in gc.text
    assert (
        by[("node02", "ib.port_state")].find("error").get("message")
        == "mlx5_0/1: expected Active, observed ibstat: not found"
    )
    assert by[("node01", "ib.bond")].find("skipped") is not None
    down = by[("node03", "node.status")]
    assert (
        down.find("error").get("message") == "node unreachable"
        and "port 22: timed out" in down.find("error").text
    )
    assert down.get("time") == "10.000"


def test_validation_junit_takes_the_json_form_and_a_wall_time(schema):
    results = {n: r.to_json() | {"seconds": r.evidence.seconds} for n, r in _validate_results().items()}
    xml = render_junit_validation(results, wall_s=11.5)
    schema.validate(xml.decode())
    root = ET.fromstring(xml)
    assert root.get("name") == "clustercert validate" and root.get("time") == "11.500"
    assert ET.tostring(root) == ET.tostring(
        ET.fromstring(render_junit_validation(_validate_results(), wall_s=11.5))
    )
