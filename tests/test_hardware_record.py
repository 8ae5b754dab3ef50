"""Issue 21.5: the certificate records, per node, the hardware that was certified (``nodes.<n>.hardware``: in
the member whitelist and the certify schema), the store keeps it, and `drift` reports a swapped part as a
``hardware`` item against the baseline's -- and hands the baseline's NVLink error counters to the
validators."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator, ValidationError
from test_hardware_checks import DMI, ib_identity, lspci_vv, smi_xml

from clustercert.checks import Finding
from clustercert.checks.run import NodeResult
from clustercert.model.evidence import CommandResult, NodeEvidence
from clustercert.record import certificate
from clustercert.record.results import build_nodes
from clustercert.report import documents


def res(stdout: str, rc: int = 0) -> CommandResult:
    return CommandResult(rc, stdout, "", False, 0.1, "cmd")


def evidence(node: str, serial: str = "1650") -> NodeEvidence:
    return NodeEvidence(
        node,
        True,
        "",
        {
            "nvsmi_xml": res(smi_xml([("Completed", "Success")] * 8, serial=serial)),
            "hca_identity": res(ib_identity()),
            "dmi": res(DMI),
            "lspci": res(lspci_vv()),
        },
        1.0,
    )


def results(serials: dict[str, str]) -> dict[str, NodeResult]:
    return {n: NodeResult(n, "pass", [Finding("gpu.count", "pass", "node", "8", "8")], "", evidence(n, s))
            for n, s in serials.items()}


class Outcome:
    down: set = set()
    why_down: dict = {}
    per_node: dict = {}
    localisation: list = []


def test_the_certificate_records_each_node_s_hardware_and_verify_accepts_it():
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    val = results({"gpu01": "1650", "gpu02": "1660"})
    val["gpu03"] = NodeResult(
        "gpu03", "unreachable", [], "no route to host", NodeEvidence("gpu03", False, "no route")
    )
    nodes = build_nodes(val, Outcome())
    assert "hardware" not in nodes["gpu03"]
    hw = nodes["gpu01"]["hardware"]
    assert [g["serial"] for g in hw["gpus"]][:2] == ["16500", "16501"] and hw["nvswitch_count"] == 4
    assert (
        hw["board"]["chassis_serial"] == "C8170AM39A01234"
        and hw["hcas"][1]["node_guid"] == "58a2:e103:0001:0002"
    )
    cert = certificate.sign({"schema": certificate.SCHEMA, "nodes": nodes}, Ed25519PrivateKey.generate())
    assert certificate.unknown_member(cert) is None
    assert "hardware" in certificate.NODE_MEMBERS
    cert["nodes"]["gpu01"]["hardware_extra"] = {}
    assert certificate.unknown_member(cert) == "nodes.gpu01.hardware_extra"


def test_the_certify_schema_describes_the_hardware_member():
    nodes = build_nodes(results({"gpu01": "1650"}), Outcome())
    doc = documents.envelope("certify", "r1", 1.0, 2.0) | {
        "inventory": "i", "out": "o", "certificate": "o/certificate.json", "verdict": "pass", "nodes": nodes,
        "links": [], "localisation": []}
    schema = documents.schema_for("certify")
    Draft202012Validator(schema).validate(doc)
    for broken in ({**nodes["gpu01"]["hardware"], "extra": 1},
                   {**nodes["gpu01"]["hardware"], "gpus": [{"index": 0}]},
                   {**nodes["gpu01"]["hardware"], "nvswitch_count": -1}):
        bad = json.loads(json.dumps(doc))
        bad["nodes"]["gpu01"]["hardware"] = broken
        with pytest.raises(ValidationError):
            Draft202012Validator(schema).validate(bad)


def test_the_store_keeps_each_run_s_hardware(tmp_path):
    import sqlite3

    from clustercert.record.store import Store

    path = tmp_path / "store.sqlite"
    store = Store(path)
    nodes = build_nodes(results({"gpu01": "1650", "gpu02": "1660"}), Outcome())
    nodes["gpu02"].pop("hardware")
    store.start_run("r1", "certify", "inv")
    store.finish_run("r1", "pass", nodes)
    assert store.hardware("r1") == {"gpu01": nodes["gpu01"]["hardware"]}
    assert store.hardware("other") == {}
    # a store made before the table existed gets it on open, its runs intact
    db = sqlite3.connect(path)
    db.execute("DROP TABLE hardware")
    db.commit()
    db.close()
    again = Store(path)
    assert again.hardware("r1") == {} and again.node_verdicts("r1") == {"gpu01": "pass", "gpu02": "pass"}


def test_drift_reports_a_swapped_gpu_as_a_hardware_item(tmp_path, capsys, monkeypatch):
    from clustercert.checks import run as check_run
    from clustercert.cli import main
    from clustercert.collect import engine
    from clustercert.model.inventory import load_inventory
    from clustercert.paths import ensure_state_dir
    from clustercert.record.store import Store

    ensure_state_dir()
    inv = load_inventory("sample:h100", "gpu01:gpu02")
    store = Store()
    base = build_nodes(results({"gpu01": "1650", "gpu02": "1660"}), Outcome())
    counters = json.dumps({"uuid": "GPU-0000", "counters": {"crc": 5, "replay": 5, "recovery": 0}})
    base["gpu01"]["findings"].append({"check": "gpu.nvlink_errors", "status": "pass", "subject": "GPU0",
                                      "evidence": counters})
    store.start_run("base", "certify", str(inv.source), {})
    store.finish_run("base", "pass", base)
    monkeypatch.setattr(
        engine, "run_playbook", lambda *a, **k: engine.RunResult("p1", tmp_path, 0, "successful", {})
    )
    asked = {}

    def validate(*a, **k):
        asked.update(k)
        now = results({"gpu01": "1650", "gpu02": "1660"})
        xml = smi_xml([("Completed", "Success")] * 8, serial="1660").replace("<serial>16603</serial>",
                                                                               "<serial>19993</serial>")
        now["gpu02"].evidence.results["nvsmi_xml"] = res(xml)
        return now

    monkeypatch.setattr(check_run, "validate_nodes", validate)
    prom = tmp_path / "drift.prom"
    rc = main(["drift", "-i", "sample:h100", "-l", "gpu01:gpu02", "--format", "json", "--probes", "none",
               "--prom", str(prom)])
    doc = json.loads(capsys.readouterr().out)
    Draft202012Validator(documents.schema_for("drift")).validate(doc)
    assert rc == 1 and doc["verdict"] == "drift"
    (item,) = doc["items"]
    assert item == {
        "node": "gpu02",
        "kind": "hardware",
        "check": "hardware.gpu",
        "before": "serial 16603, UUID GPU-0003",
        "after": "serial 19993, UUID GPU-0003",
        "detail": "GPU3 00000000:1C:00.0: swapped",
    }
    assert asked["nvlink_baseline"] == {"gpu01": {"GPU-0000": {"crc": 5, "replay": 5, "recovery": 0}}}
    from prometheus_client.parser import text_string_to_metric_families

    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    per = {(s.labels["node"], s.labels["kind"]): s.value for s in fams["clustercert_drift_items"].samples}
    assert per[("gpu02", "hardware")] == 1 and per[("gpu01", "hardware")] == 0
    # the terminal report names the part as well (the table's cells show the check and the serials only)
    monkeypatch.setenv("COLUMNS", "200")
    main(["drift", "-i", "sample:h100", "-l", "gpu01:gpu02", "--probes", "none"])
    assert "gpu02: hardware: GPU3 00000000:1C:00.0: swapped" in capsys.readouterr().out
    from prom_lint import promtool_check

    promtool_check(prom.read_text())


def test_the_html_report_shows_each_node_s_certified_hardware():
    from test_certificate import sample_certificate

    from clustercert.report.html import hardware_text, render_html

    cert = sample_certificate()
    name = sorted(cert["nodes"])[0]
    cert["nodes"][name]["hardware"] = build_nodes(results({name: "1650"}), Outcome())[name]["hardware"]
    line = hardware_text(cert["nodes"][name]["hardware"])
    assert line.startswith(
        "system serial S4220613X3A0123, chassis C8170AM39A01234; 8 GPUs (GPU0 16500, GPU1 16501"
    )
    assert line.endswith("HCAs mlx5_0 58a2:e103:0001:0001 fw 28.43.1014, mlx5_1 58a2:e103:0001:0002 fw "
                         "28.43.1014; 4 NVSwitches")
    page = render_html(cert)
    assert f"certified hardware: {line}" in page
    assert page.count("certified hardware:") == 1 and hardware_text(None) == ""
