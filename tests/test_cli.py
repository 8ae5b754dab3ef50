"""The CLI's surface: verbs, help with examples, versions, honest exit codes."""

from __future__ import annotations

import pytest

from clustercert.cli import build_parser, main
from clustercert_lab import cli as lab_cli

VERBS = [
    "init",
    "bootstrap",
    "validate",
    "node-check",
    "probe",
    "certify",
    "drift",
    "lab",
    "parse",
    "inventory",
    "checks",
    "report",
    "verify",
    "key",
    "version",
]


def test_top_level_help_lists_every_verb(cli):
    r = cli("--help")
    assert r.returncode == 0
    for verb in VERBS:
        assert f"\n    {verb} " in r.stdout, verb
    assert "exit codes" in r.stdout


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_help_has_an_example(verb, capsys):
    with pytest.raises(SystemExit) as exc:  # `lab --help` is the lab's program's (clustercert_lab.cli)
        if verb == "lab":
            lab_cli.build_parser().parse_args(["--help"])
        else:
            build_parser().parse_args([verb, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "example:" in out
    assert f"clustercert {verb}" in out


def test_version_names_the_stack(cli):
    r = cli("version")
    assert r.returncode == 0
    lines = dict(line.split(" ", 1) for line in r.stdout.strip().splitlines())
    assert lines["clustercert"] == "0.1.0"
    assert lines["ansible-core"].startswith("2.")
    assert "ansible-runner" in lines


@pytest.mark.parametrize("probes, key", [("bogus", "bogus"), ("iperf3,nccl_all", "nccl_all"), (",", ",")])
def test_probe_rejects_unknown_probe_names_before_running(probes, key, capsys):
    rc = main(["probe", "-i", "inventory/h100-sample", "--probes", probes])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "--probes" in err[0] and key in err[0] and "ib_write_bw" in err[0]


def test_probe_selection_keeps_only_the_named_probes_thresholds():
    from clustercert.commands.probe import parse_probe_list
    from clustercert.model.inventory import load_inventory
    from clustercert.probes.plan import ProbeSettings

    prof = next(iter(load_inventory("inventory/h100-sample").hosts.values())).profile
    everything = ProbeSettings()
    assert everything.thresholds(prof) == prof.thresholds and everything.dcgm_diag(prof) is prof.dcgm_diag
    lat = ProbeSettings(only=parse_probe_list("ib_write_lat, iperf3"))
    assert set(lat.thresholds(prof)) == {"ib_write_lat_p99", "iperf3_ipoib", "outlier_ratio"} & set(
        prof.thresholds
    )
    assert "ib_write_lat_p99" in lat.thresholds(prof) and lat.dcgm_diag(prof) is None


def test_inventory_verb_prints_resolved_thresholds(capsys):
    rc = main(["inventory", "-i", "inventory/h100-sample", "--format", "json"])
    assert rc == 0
    import json

    view = json.loads(capsys.readouterr().out)
    assert view["schema"] == "clustercert.inventory/v1" and view["run"] is None
    assert sorted(view["hosts"]) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert view["hosts"]["gpu01"]["profile"] == "h100-sxm-8x-ndr"
    (label, prof), = view["profiles"].items()
    # the site override in group_vars/gpu_nodes.yml replaces the profile's iperf3 floor
    assert prof["thresholds"]["iperf3_ipoib"]["floor"] == 25
    assert prof["thresholds"]["ib_write_bw_pair"]["floor"] == 320
    assert "anchors" in prof["thresholds"]["nccl_allreduce_1node"]["source"]


def test_inventory_limit(capsys):
    import json

    assert main(["inventory", "-i", "inventory/h100-sample", "-l", "gpu01:gpu02", "--format", "json"]) == 0
    assert sorted(json.loads(capsys.readouterr().out)["hosts"]) == ["gpu01", "gpu02"]


def test_parse_verb_good_and_bad_files(cli, tmp_path):
    import json
    from pathlib import Path

    fixtures = Path(__file__).parent / "fixtures" / "nvidia-smi"
    good = sorted(fixtures.glob("*.xml"))[0]
    r = cli("parse", "nvidia-smi-xml", str(good), "--json")
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert rec["gpu_count"] == len(rec["gpus"]) >= 1
    assert rec["gpus"][0]["bus_id"].startswith("0000")

    bad = tmp_path / "not-xml.txt"
    bad.write_text("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    r = cli("parse", "nvidia-smi-xml", str(bad))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert str(bad) in r.stderr and "nvidia-smi-xml" in r.stderr


def test_parse_list_names_the_kinds(cli):
    r = cli("parse", "--list")
    kinds = {line.split()[0] for line in r.stdout.splitlines()}
    assert {
        "nvidia-smi-xml",
        "nvidia-smi-csv",
        "nvidia-smi-topo",
        "ibstat",
        "ibv-devinfo",
        "perftest",
        "nccl-tests",
        "nvbandwidth",
        "dcgmi-diag",
        "iperf3-json",
        "bonding",
        "lspci",
        "xid",
    } <= kinds
