"""Issue 23.6: every verb's --format json document follows the JSON Schema shipped in the package
(clustercert/schemas/). Verbs that need a lab are validated on a document their own code builds: certify's
from tests/test_certificate.py's sample certificate and from certify.run with the probes faked, probe's and
drift's from their run() with the remote parts faked, bootstrap's from a RunResult (and, in
tests/test_cli_flags.py, from a real run against a host that refuses the connection). The --prom files these
runs write are read back with prometheus_client's parser and checked with `promtool check metrics`."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from jsonschema import Draft202012Validator
from prom_lint import promtool_check
from prometheus_client.parser import text_string_to_metric_families

from clustercert.checks import Finding
from clustercert.cli import main
from clustercert.report import documents

SCHEMAS = Path(documents.__file__).parent.parent / "schemas"  # clustercert/schemas/


def check(doc: dict, kind: str | None = None) -> dict:
    """Validate ``doc`` against the schema its own ``schema`` field names (and expect ``kind``)."""
    name = doc["schema"]
    assert name.startswith("clustercert.") and name.endswith("/v1"), name
    found = name.removeprefix("clustercert.").removesuffix("/v1")
    assert kind is None or found == kind, (found, kind)
    Draft202012Validator(documents.schema_for(found)).validate(doc)
    assert doc["started"] <= doc["finished"]
    return doc


def run_json(capsys, *argv: str, rc: int = 0) -> dict:
    got = main(list(argv))
    out, err = capsys.readouterr()
    assert got == rc, (got, err)
    return json.loads(out)


def families(path: Path) -> dict:
    return {f.name: f for f in text_string_to_metric_families(path.read_text())}


def test_every_schema_is_a_valid_draft_2020_12_schema_and_every_kind_has_one():
    files = {p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json")}
    assert files == set(documents.KINDS)
    for kind in documents.KINDS:
        schema = documents.schema_for(kind)
        Draft202012Validator.check_schema(schema)
        assert schema["properties"]["schema"] == {"const": documents.schema_id(kind)}
        assert {"schema", "run", "started", "finished"} <= set(schema["required"])


def test_a_wrong_document_is_refused():
    doc = documents.envelope("init", None, documents.now()) | {
        "directory": "d",
        "files": [],
        "profile": "lab",
    }
    check(doc)
    from jsonschema import ValidationError

    for broken in (
        {**doc, "files": "x"},
        {k: v for k, v in doc.items() if k != "run"},
        {**doc, "started": "yesterday"},
    ):
        with pytest.raises(ValidationError):
            check(broken)


# ---- verbs that run here --------------------------------------------------------------------------

@pytest.fixture
def local_inventory(tmp_path) -> Path:
    from test_validate_cli import local_and_unreachable

    return local_and_unreachable(tmp_path / "hosts.yml")


def test_validate_report_and_out_documents(local_inventory, tmp_path, capsys):
    prom = tmp_path / "validate.prom"
    doc = check(
        run_json(
            capsys,
            "validate",
            "-i",
            str(local_inventory),
            "--checks",
            "gpu,time",
            "--skip",
            "gpu.xid",
            "--format",
            "json",
            "--out",
            str(tmp_path / "out"),
            "--prom",
            str(prom),
            rc=1,
        ),
        "validate",
    )
    assert doc["run"] and doc["verdict"] == "fail" and doc["components"] == ["gpu", "time"]
    assert "gpu.xid" not in doc["checks"] and "time.sync" in doc["checks"]
    assert {f["check"] for f in doc["nodes"]["here"]["findings"]} <= set(doc["checks"])
    assert doc["nodes"]["gone"]["verdict"] == "unreachable"
    assert json.loads((tmp_path / "out" / "validate.json").read_text()) == doc
    fams = families(prom)
    verdict = {
        s.labels["node"]: s.labels["verdict"] for s in fams["clustercert_node_verdict"].samples if s.value
    }
    assert verdict == {"here": doc["nodes"]["here"]["verdict"], "gone": "unreachable"}
    checks = {s.labels["check"] for s in fams["clustercert_check_status"].samples}
    assert checks == {f["check"] for f in doc["nodes"]["here"]["findings"]}
    assert fams["clustercert_run_duration_seconds"].samples[0].value > 0
    promtool_check(prom.read_text())

    runs = check(run_json(capsys, "report", "runs", "--format", "json"), "report")
    assert runs["rows"][0]["id"] == doc["run"] and runs["rows"][0]["meta"]["checks"] == doc["checks"]
    hist = check(run_json(capsys, "report", "history", "--node", "here", "--format", "json"), "report")
    assert hist["rows"][0]["id"] == doc["run"] and hist["rows"][0]["node"] == "here"


def test_inventory_checks_version_init_and_list_hosts_documents(tmp_path, capsys):
    check(run_json(capsys, "inventory", "-i", "sample:h100", "--format", "json"), "inventory")
    check(run_json(capsys, "checks", "--format", "json"), "checks")
    check(run_json(capsys, "checks", "--profile", "lab", "--format", "json"), "checks")
    doc = check(run_json(capsys, "version", "--format", "json"), "version")
    assert doc["run"] is None and doc["versions"]["clustercert"] == "0.1.0"
    doc = check(run_json(capsys, "init", str(tmp_path / "site"), "--format", "json"), "init")
    assert len(doc["files"]) == 3
    for verb in ("validate", "certify", "bootstrap", "probe", "drift", "inventory"):
        doc = check(
            run_json(capsys, verb, "-i", str(tmp_path / "site"), "--list-hosts", "--format", "json"), "hosts"
        )
        assert doc["hosts"] == ["node01", "node02"]


# ---- verbs that need a lab: their own code builds the document ------------------------------------------

def test_certify_document_from_the_sample_certificate(tmp_path):
    from test_certificate import sample_certificate

    from clustercert.report.documents import certify_document

    cert = sample_certificate()
    doc = check(certify_document(cert, "20240612T081403-abcdef", tmp_path / "cert", "/inv"), "certify")
    assert doc["started"] == "2024-06-12T08:14:03+00:00" and doc["verdict"] == "fail"
    assert doc["nodes"] == cert["nodes"] and doc["links"] == cert["links"]


def _measurement(probe, a, b="", **kw):
    from clustercert.probes.evaluate import Measurement

    return Measurement(probe, a, b, **kw)


def _outcome(nodes: list[str]):
    from clustercert.probes.run import ProbeOutcome

    per_node = {
        n: [
            _measurement(
                "ib_write_bw_loopback",
                n,
                subject="mlx5_0",
                fabric=0,
                value=390.0,
                unit="gbit_per_s",
                status="pass",
                expected=">= 380 gbit_per_s",
                threshold="ib_write_bw_loopback",
            )
        ]
        for n in nodes
    }
    pairs = [
        _measurement(
            "ib_write_bw",
            nodes[0],
            nodes[1],
            subject=f"mlx5_0 {nodes[0]}->{nodes[1]}",
            fabric=0,
            value=300.0,
            unit="gbit_per_s",
            status="fail",
            round=1,
            expected=">= 320 gbit_per_s",
            threshold="ib_write_bw_pair",
        ),
        _measurement(
            "iperf3",
            nodes[0],
            nodes[1],
            subject="fabric 0",
            fabric=0,
            value=None,
            unit="gbit_per_s",
            status="error",
            observed="not reachable",
            round=1,
            threshold="iperf3_ipoib",
        ),
    ]
    rounds = [SimpleNamespace(number=1, pairs=[(nodes[0], nodes[1])], question="every node with a partner")]
    return ProbeOutcome(per_node, pairs, [], rounds, set(), 1.5, {}, None)


def _validation(nodes: list[str]):
    from clustercert.checks.run import NodeResult

    return {n: NodeResult(n, "pass", [Finding("gpu.count", "pass", "node", "8", "8")]) for n in nodes}


def test_certify_run_prints_its_document_and_writes_prom(tmp_path, capsys, monkeypatch):
    import os
    from pathlib import Path

    from clustercert.checks import run as check_run
    from clustercert.probes import run as probe_run
    from clustercert.record import certificate

    # the signing key `clustercert key init` makes (a module-level helper, not the tests' conftest: in a
    # full run `from conftest import` finds another directory's conftest)
    certificate.init_key(Path(os.environ["CLUSTERCERT_HOME"]))
    nodes = ["gpu01", "gpu02"]
    monkeypatch.setattr(check_run, "validate_nodes", lambda inv, comps, forks, *a, **k: _validation(nodes))
    monkeypatch.setattr(
        probe_run, "run", lambda inv, names, cfg, judge, forks, all_pairs=False, io=None, **_: _outcome(nodes)
    )
    prom = tmp_path / "certify.prom"
    doc = check(
        run_json(
            capsys,
            "certify",
            "-i",
            "sample:h100",
            "-l",
            "gpu01:gpu02",
            "--out",
            str(tmp_path / "cert"),
            "--format",
            "json",
            "--prom",
            str(prom),
            rc=1,
        ),
        "certify",
    )
    assert doc["verdict"] == "fail" and Path(doc["certificate"]).is_file()
    check_certificate(Path(doc["certificate"]), capsys)  # the certificate certify wrote follows its schema
    fams = families(prom)
    values = {(s.labels["probe"], s.labels["a"]): s.value
              for s in fams["clustercert_link_bandwidth_bytes_per_second"].samples}
    assert values == {("ib_write_bw", "gpu01"): 300e9 / 8}  # 300 Gb/s in bytes per second
    bounds = {(s.labels["probe"], s.labels["bound"]): s.value
              for s in fams["clustercert_link_bandwidth_threshold_bytes_per_second"].samples}
    # the sample's override
    assert bounds == {("ib_write_bw", "floor"): 320e9 / 8, ("iperf3", "floor"): 25e9 / 8}
    status = {
        s.labels["probe"]: s.labels["status"] for s in fams["clustercert_link_status"].samples if s.value
    }
    assert status == {"ib_write_bw": "fail", "iperf3": "error"}
    promtool_check(prom.read_text())


def test_certify_times_each_node_and_link_and_junit_charges_them(tmp_path, capsys, monkeypatch):
    """Issue 23.6: the certificate's timing.nodes holds each node's validator seconds (NodeEvidence.seconds),
    each link its tool's seconds (Measurement.elapsed; null where it did not run); the certify document
    follows its schema with them, the signed certificate has no member the verifier refuses, and junit.xml
    charges those times."""
    import os
    import xml.etree.ElementTree as ET
    from pathlib import Path

    from clustercert.checks import run as check_run
    from clustercert.model.evidence import NodeEvidence
    from clustercert.probes import run as probe_run
    from clustercert.record import certificate

    certificate.init_key(Path(os.environ["CLUSTERCERT_HOME"]))
    nodes = ["gpu01", "gpu02"]
    results = _validation(nodes)
    for n, secs in zip(nodes, (0.8, 1.25), strict=True):
        results[n].evidence = NodeEvidence(n, True, "", {}, secs)
    outcome = _outcome(nodes)
    outcome.pairs[0].elapsed = 2.05  # ib_write_bw ran 2.05 s; iperf3 was not run (its path was not reachable)
    monkeypatch.setattr(check_run, "validate_nodes", lambda inv, comps, forks, *a, **k: results)
    monkeypatch.setattr(
        probe_run, "run", lambda inv, names, cfg, judge, forks, all_pairs=False, io=None, **_: outcome
    )
    out = tmp_path / "cert"
    doc = check(run_json(capsys, "certify", "-i", "sample:h100", "-l", "gpu01:gpu02", "--out", str(out),
                         "--format", "json", rc=1), "certify")
    assert doc["timing"]["nodes"] == {"gpu01": {"validate_s": 0.8}, "gpu02": {"validate_s": 1.25}}
    assert [(lk["probe"], lk["seconds"]) for lk in doc["links"]] == [("ib_write_bw", 2.05), ("iperf3", None)]
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["timing"]["nodes"] == doc["timing"]["nodes"] and certificate.unknown_member(cert) is None
    root = ET.fromstring((out / "junit.xml").read_bytes())
    times = {(tc.get("classname"), tc.get("name")): tc.get("time") for tc in root.iter("testcase")}
    assert times[("gpu01", "gpu.count")] == "0.800" and times[("gpu02", "gpu.count")] == "1.250"
    assert times[("link.fabric0.ib_write_bw", "gpu01 <-> gpu02 round 1")] == "2.050"
    assert times[("link.fabric0.iperf3", "gpu01 <-> gpu02 round 1")] == "0.000"
    from jsonschema import ValidationError

    for broken in ({**doc, "timing": {**doc["timing"], "nodes": {"gpu01": {"validate_s": "soon"}}}},
                   {**doc, "timing": {**doc["timing"], "nodes": {"gpu01": {}}}},
                   {**doc, "links": [{**doc["links"][0], "seconds": -1}]}):
        with pytest.raises(ValidationError):
            check(broken)


def test_probe_run_prints_its_document(capsys, monkeypatch):
    from clustercert.probes import run as probe_run

    monkeypatch.setattr(
        probe_run, "run", lambda inv, names, cfg, judge, forks, all_pairs=False, io=None, **_: _outcome(names)
    )
    # the sample's nodes do not exist: the rails' discovery would wait out ssh's connect timeout for them
    monkeypatch.setattr(probe_run, "discover_rails", lambda inv, names, forks=None, *, io: {})
    doc = check(
        run_json(
            capsys, "probe", "-i", "sample:h100", "--probes", "ib_write_bw,iperf3", "--format", "json", rc=1
        ),
        "probe",
    )
    assert doc["probes"] == ["ib_write_bw", "iperf3"] and doc["rounds"] == 1 and len(doc["links"]) == 2


def test_drift_run_prints_its_document_and_writes_prom(tmp_path, capsys, monkeypatch):
    from clustercert.checks import run as check_run
    from clustercert.collect import engine
    from clustercert.model.inventory import load_inventory
    from clustercert.paths import ensure_state_dir
    from clustercert.record.store import Store

    ensure_state_dir()
    inv = load_inventory("sample:h100", "gpu01:gpu02")
    store = Store()
    store.start_run("base", "certify", str(inv.source), {})
    store.finish_run(
        "base",
        "pass",
        {
            n: {
                "verdict": "pass",
                "findings": [{"check": "gpu.count", "status": "pass", "subject": "node", "observed": "8"}],
            }
            for n in ("gpu01", "gpu02")
        },
    )

    def fake_playbook(playbook, inventory, **kw):
        assert kw["check"] and kw["diff"]
        return engine.RunResult(
            "p1",
            tmp_path,
            0,
            "successful",
            {"gpu01": engine.HostStats(ok=3, changed=1)},
            changes=[
                {
                    "host": "gpu01",
                    "task": "nccl : write /etc/nccl.conf",
                    "role": "nccl",
                    "diff": {"before": "a", "after": "b"},
                }
            ],
        )

    results = _validation(["gpu01", "gpu02"])
    results["gpu02"].findings = [Finding("gpu.count", "fail", "node", "8", "7")]
    results["gpu02"].verdict = "fail"
    monkeypatch.setattr(engine, "run_playbook", fake_playbook)
    monkeypatch.setattr(check_run, "validate_nodes", lambda *a, **k: results)
    prom = tmp_path / "drift.prom"
    doc = check(run_json(capsys, "drift", "-i", "sample:h100", "-l", "gpu01:gpu02", "--format", "json",
                         "--prom", str(prom), rc=1), "drift")
    assert doc["baseline"] == "base" and doc["verdict"] == "drift"
    assert {(i["node"], i["kind"]) for i in doc["items"]} == {("gpu01", "configuration"), ("gpu02", "state")}
    fams = families(prom)
    per = {(s.labels["node"], s.labels["kind"]): s.value for s in fams["clustercert_drift_items"].samples}
    assert (
        per[("gpu01", "configuration")] == 1 and per[("gpu02", "state")] == 1 and per[("gpu01", "state")] == 0
    )
    assert {
        s.labels["node"]: s.labels["verdict"] for s in fams["clustercert_node_verdict"].samples if s.value
    } == {"gpu01": "pass", "gpu02": "fail"}
    assert fams["clustercert_last_success_timestamp_seconds"].samples == []
    promtool_check(prom.read_text())


def test_drift_prom_links_carry_the_baseline_bound(tmp_path):
    from clustercert.model.inventory import load_inventory
    from clustercert.report import prom
    from clustercert.report.documents import drift_document

    inv = load_inventory("sample:h100", "gpu01:gpu02")
    base = [{"a": "gpu01", "b": "gpu02", "fabric": 0, "probe": "ib_write_bw", "value": v, "status": "pass"}
            for v in (380.0, 390.0, 400.0)] + [
        {"a": "gpu01", "b": "gpu02", "fabric": 0, "probe": "ib_write_lat", "value": 2.0, "status": "pass"}]
    links = [
        {
            "a": "gpu01",
            "b": "gpu02",
            "fabric": 0,
            "probe": "ib_write_bw",
            "subject": "mlx5_0",
            "value": 300.0,
            "unit": "gbit_per_s",
            "status": "fail",
            "round": 1,
        },
        {
            "a": "gpu01",
            "b": "gpu02",
            "fabric": 0,
            "probe": "ib_write_lat",
            "subject": "mlx5_0",
            "value": 2.1,
            "unit": "usec",
            "status": "pass",
            "round": 1,
        },
    ]
    doc = drift_document([], "base", "r1", 1.0, 2.0, str(inv.source))
    check(doc, "drift")
    path = tmp_path / "d.prom"
    prom.write_drift(str(path), doc, inv, _validation(["gpu01", "gpu02"]), base, links, 1.0, 2.0)
    fams = families(path)
    bounds = {(s.labels["probe"], s.labels["bound"]): s.value
              for name in ("clustercert_link_bandwidth_threshold_bytes_per_second",
                           "clustercert_link_latency_threshold_seconds") for s in fams[name].samples}
    # median 390 Gb/s and 2.0 us, 10 %: 351 Gb/s and 2.2 us in bytes per second and seconds
    assert bounds == {
        ("ib_write_bw", "floor"): pytest.approx(351e9 / 8),
        ("ib_write_lat", "ceiling"): pytest.approx(2.2e-6),
    }
    assert fams["clustercert_last_success_timestamp_seconds"].samples[0].value == 2.0  # clean now
    promtool_check(path.read_text())


def test_bootstrap_document_from_a_run_result(tmp_path):
    from clustercert.collect import engine
    from clustercert.report.documents import bootstrap_document, bootstrap_summary

    result = engine.RunResult(
        "20261205T000000-abcdef",
        tmp_path,
        2,
        "failed",
        {"gpu01": engine.HostStats(ok=10, changed=2), "gpu02": engine.HostStats(unreachable=1)},
        changes=[{"host": "gpu01", "task": "install driver", "role": "nvidia_driver", "diff": None}],
        failures=[{"host": "gpu02", "task": "gather facts", "status": "unreachable", "msg": "refused"}],
    )
    summary = bootstrap_summary(result)
    doc = check(bootstrap_document(result, summary, 1.0, 5.0, "/inv", True, False), "bootstrap")
    assert doc["run"] == result.run_id and doc["hosts"]["gpu02"]["unreachable"] == 1


# ---- certificate.json: docs/schemas/certificate.schema.json ----------------------------------------------

CERTIFICATE_SCHEMA = Path(__file__).resolve().parent.parent / "docs" / "schemas" / "certificate.schema.json"


def certificate_validator(form: str | None = None) -> Draft202012Validator:
    """The certificate's schema; ``form`` "written" or "expanded" holds a certificate to that form only."""
    schema = json.loads(CERTIFICATE_SCHEMA.read_text())
    if form is not None:
        schema = {**schema, "anyOf": [{"$ref": f"#/$defs/{form}"}]}
    return Draft202012Validator(schema)


def check_certificate(path: Path, capsys) -> dict:
    """The file validates as written (tables), `report show --format json` prints it expanded (objects), which
    validates as expanded and is what expanded() gives; neither validates as the other form. The raw file."""
    from clustercert.record import certificate as cc

    raw = json.loads(path.read_text())
    certificate_validator("written").validate(raw)
    shown = run_json(capsys, "report", "show", str(path), "--format", "json")
    certificate_validator("expanded").validate(shown)
    assert shown == json.loads(json.dumps(cc.expanded(cc.load_certificate(path))))
    if raw["nodes"] and isinstance(raw["links"], dict):
        assert not certificate_validator("expanded").is_valid(raw)
        assert not certificate_validator("written").is_valid(shown)
    return raw


def test_certificate_schema_is_published_once_and_matches_what_verify_accepts():
    """Draft 2020-12; in docs/schemas/ only (the package does not read it); its closed parts are the
    verifier's members exactly, its open ones name no member the verifier refuses."""
    from clustercert.record import certificate as cc

    schema = json.loads(CERTIFICATE_SCHEMA.read_text())
    Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema"] == {"const": cc.SCHEMA}
    assert not list(SCHEMAS.glob("certificate*")) and not list(
        SCHEMAS.parent.rglob("certificate.schema.json")
    )
    props = schema["properties"]
    assert set(props) <= cc.TOP_MEMBERS
    defs = schema["$defs"]
    assert (
        set(defs["written_node"]["properties"]) == set(defs["expanded_node"]["properties"]) <= cc.NODE_MEMBERS
    )
    closed = {"signature": (props["signature"], cc.SIGNATURE_MEMBERS),
              "versions": (props["versions"], cc.VERSIONS_MEMBERS),
              "threshold": (props["thresholds"]["additionalProperties"], cc.THRESHOLD_MEMBERS),
              "schedule": (props["schedule"]["items"], cc.SCHEDULE_MEMBERS),
              "findings table": (defs["findings_table"], cc.TABLE_MEMBERS),
              "links table": (defs["links_table"], cc.TABLE_MEMBERS)}
    for name, (sub, members) in closed.items():
        assert sub["additionalProperties"] is False and set(sub["properties"]) == members, name
    assert set(props["localisation"]["items"]["properties"]) <= cc.LOCALISATION_MEMBERS


def test_certificates_from_the_lab_free_pipeline_follow_the_schema(tmp_path, capsys, monkeypatch):
    """benchmarks/scale.py's pipeline (the real validators, probe rounds, signing and writing against its fake
    fleet, every probe of the lab profile) and its synthetic fleet certificate, signed and written."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from test_scale import scale_pipeline

    from clustercert.record import certificate as cc

    keep: dict = {}
    scale_pipeline(monkeypatch, tmp_path, 3, 2, keep)
    import scale  # benchmarks/scale.py, on sys.path for this test (scale_pipeline)

    raw = check_certificate(Path(keep["certificate"]), capsys)
    assert all(
        isinstance(b["findings"], dict) and isinstance(b["evidence"], list) for b in raw["nodes"].values()
    )
    assert raw["signature"]["canonicalization"] == "rfc8785"
    path = cc.write_certificate(cc.sign(scale.synthetic_certificate(24), Ed25519PrivateKey.generate()),
                                tmp_path / "fleet.json")
    check_certificate(path, capsys)


def test_the_sample_and_an_old_certificate_follow_the_schema(tmp_path, capsys):
    """tests/test_certificate.py's sample signed now, and the certificate main signed before RFC 8785; one
    written before the tables (findings as objects) is the expanded form."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from test_certificate import sample_certificate

    from clustercert.record import certificate as cc

    path = cc.write_certificate(
        cc.sign(sample_certificate(), Ed25519PrivateKey.generate()), tmp_path / "c.json"
    )
    check_certificate(path, capsys)
    old = Path(__file__).parent / "certificates" / "v1-python-json.certificate.json"
    assert "canonicalization" not in check_certificate(old, capsys)["signature"]
    before_tables = cc.expanded(json.loads(old.read_text()))
    certificate_validator().validate(before_tables)
    assert not certificate_validator("written").is_valid(before_tables)


def test_added_members_are_accepted_where_the_certificate_is_open():
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from test_certificate import sample_certificate

    from clustercert.record import certificate as cc

    cert = cc.sign(sample_certificate(), Ed25519PrivateKey.generate())
    cert["nodes"]["gpu-node-01"]["topology"] = {"numa_nodes": 2}  # a member a later version may add
    cert["nodes"]["gpu-node-01"]["findings"][0]["note"] = "a later version's member"
    cert["links"][0]["bus"] = "nvlink"
    cert["fabric_manager"] = {"state": "running"}  # a top-level member a later version may add
    written = json.loads(cc.dumps(cert))
    certificate_validator("written").validate(written)
    certificate_validator("expanded").validate(json.loads(json.dumps(cert)))


def _broken(raw: dict) -> list[tuple[str, dict]]:
    node = next(n for n, b in raw["nodes"].items() if isinstance(b["findings"], dict))
    body = raw["nodes"][node]

    def with_node(**kw) -> dict:
        return {**raw, "nodes": {**raw["nodes"], node: {**body, **kw}}}

    table = body["findings"]
    return [
        ("no schema", {k: v for k, v in raw.items() if k != "schema"}),
        ("another schema", {**raw, "schema": "clustercert.certificate/v2"}),
        ("verdict", {**raw, "verdict": "mostly"}),
        ("started", {**raw, "started": "yesterday"}),
        ("no signature", {k: v for k, v in raw.items() if k != "signature"}),
        ("signature member", {**raw, "signature": {**raw["signature"], "comment": "ok"}}),
        ("canonicalization", {**raw, "signature": {**raw["signature"], "canonicalization": "c14n"}}),
        ("node verdict", with_node(verdict="fine")),
        ("table member", with_node(findings={**table, "note": 1})),
        ("table rows", with_node(findings={**table, "rows": ["gpu.count"]})),
        ("table columns", with_node(findings={k: v for k, v in table.items() if k != "columns"})),
        ("a row's cell", with_node(findings={**table, "rows": [[{"check": "gpu.count"}]]})),
        ("evidence text", with_node(evidence=[1])),
        ("links", {**raw, "links": [{"a": "x"}]}),
        ("threshold member", {**raw, "thresholds": {"t": {"floor": 1.0, "override": True}}}),
    ]


def test_a_broken_certificate_fails_the_schema(tmp_path, capsys):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from test_certificate import sample_certificate

    from clustercert.record import certificate as cc

    raw = json.loads(cc.dumps(cc.sign(sample_certificate(), Ed25519PrivateKey.generate())))
    validator = certificate_validator()
    validator.validate(raw)
    for what, doc in _broken(raw):
        assert not validator.is_valid(doc), what
    expanded = json.loads(json.dumps(cc.expanded(raw)))
    node = expanded["nodes"]["gpu-node-01"]
    for doc in (
        {**expanded, "nodes": {"gpu-node-01": {**node, "findings": [{"status": "pass"}]}}},
        {
            **expanded,
            "nodes": {"gpu-node-01": {**node, "findings": [{**node["findings"][0], "status": "ok"}]}},
        },
        {**expanded, "nodes": {"gpu-node-01": {**node, "evidence": {"not-a-ref": "x"}}}},
        {**expanded, "links": [{**expanded["links"][0], "status": "meh"}]},
    ):
        assert not validator.is_valid(doc)


def test_report_show_refuses_what_is_not_a_certificate(tmp_path, capsys):
    bad = tmp_path / "c.json"
    bad.write_text('{"schema": "clustercert.certificate/v1", "nodes": {"n": {"verdict": "pass", "findings": '
                   '{"columns": ["check"], "rows": [[null]], "repeat": ["check"]}}}, "links": []}')
    assert main(["report", "show", str(bad), "--format", "json"]) == 2
    err = capsys.readouterr().err
    assert "malformed table" in err and err.count("\n") == 1
    bad.write_text("[]")
    assert main(["report", "show", str(bad)]) == 2
    assert "not a certificate" in capsys.readouterr().err
    assert main(["report", "runs", str(bad)]) == 2
    assert "only `report show` takes a certificate file" in capsys.readouterr().err
