"""Issue 25.2: the simulated lab is a product beside the tool, and the tool never imports it. What the two
share is a contract: the path where a running lab writes its inventory (`-i lab`: clustercert.paths on the
product's side, clustercert_lab.paths on the lab's), and the lab's own program (`python3 -m clustercert_lab`,
the `clustercert-lab` script), which `clustercert lab ...` runs with the words after `lab` as they are.
None of these tests starts a lab."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from clustercert import paths
from clustercert.cli import main
from clustercert_lab import cli as lab_cli
from clustercert_lab import paths as lab_paths

NO_LAB = "clustercert: error: -i lab: no lab inventory: start the lab first with `clustercert lab up`\n"


@pytest.mark.parametrize("lab_dir", [None, "/srv/elsewhere/lab"])
def test_both_sides_of_the_lab_inventory_path_agree(lab_dir, monkeypatch):
    if lab_dir is None:
        monkeypatch.delenv("CLUSTERCERT_LAB_DIR", raising=False)
    else:
        monkeypatch.setenv("CLUSTERCERT_LAB_DIR", lab_dir)
    assert paths.lab_inventory_path() == lab_paths.inventory_path()
    assert paths.lab_inventory_path().parent.parent == lab_paths.lab_dir()
    if lab_dir is None:
        assert str(paths.lab_inventory_path()) == "/var/lib/clustercert/lab/inventory/hosts.yml"


def test_i_lab_without_a_running_lab_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CLUSTERCERT_LAB_DIR", str(tmp_path / "no-lab"))
    monkeypatch.chdir(tmp_path)
    for verb in ("inventory", "validate"):
        assert main([verb, "-i", "lab"]) == 2
        assert capsys.readouterr().err == NO_LAB


def test_i_lab_reads_the_inventory_the_lab_wrote(tmp_path, monkeypatch, capsys):
    inv = tmp_path / "lab" / "inventory" / "hosts.yml"
    inv.parent.mkdir(parents=True)
    inv.write_text(
        "all:\n  vars: {clustercert_profile: lab}\n  hosts:\n    node01: {ansible_host: 10.250.0.11}\n"
    )
    monkeypatch.setenv("CLUSTERCERT_LAB_DIR", str(tmp_path / "lab"))
    monkeypatch.chdir(tmp_path / "lab")  # no file or directory named `lab` here
    assert main(["inventory", "-i", "lab", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inventory"] == str(inv) and sorted(doc["hosts"]) == ["node01"]


def test_the_lab_verb_runs_the_lab_program_as_typed(monkeypatch):
    ran = []
    monkeypatch.setattr(subprocess, "call", lambda argv, **kw: ran.append(argv) or 3)
    assert main(["lab", "fault", "node02", "--", "gpu_missing", "gpu=3", "-v"]) == 3
    assert ran == [
        [sys.executable, "-m", "clustercert_lab", "fault", "node02", "--", "gpu_missing", "gpu=3", "-v"]
    ]
    # killed by SIGTERM: 128 + 15, as a shell says
    monkeypatch.setattr(subprocess, "call", lambda argv, **kw: -15)
    assert main(["lab", "up"]) == 143


def test_the_lab_verb_without_the_lab_installed(monkeypatch, capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "clustercert_lab"
                        else find_spec(name, *a))
    monkeypatch.setattr(subprocess, "call", lambda argv, **kw: pytest.fail("ran a lab that is not there"))
    assert main(["lab", "status"]) == 2
    assert capsys.readouterr().err == ("clustercert: error: lab: the simulated lab is not installed (no "
                                       "clustercert_lab package beside clustercert: it is the distribution "
                                       "clustercert-lab, clustercert-lab/ in clustercert's repository)\n")


def test_the_lab_verb_in_a_real_process(cli, tmp_path):
    """`clustercert lab` (the process becomes the lab's program) and `python3 -m clustercert_lab` say the
    same."""
    env = {"CLUSTERCERT_LAB_DIR": str(tmp_path)}
    r = cli("lab", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: clustercert lab [-h] [-v] CMD ...")
    assert (
        "example:\n  clustercert lab up --nodes 4" in r.stdout and "inventory    print the path" in r.stdout
    )
    for argv, rc, err in [
        (["inventory"], 0, ""),
        (
            ["fault", "node01", "gpu_missing", "gpu"],
            2,
            "clustercert: error: lab fault: gpu: parameters are KEY=VALUE\n",
        ),
        (
            ["up", "--bogus"],
            2,
            "clustercert: error: --bogus: unrecognized argument for `clustercert lab up`; "
            "see `clustercert lab up --help`\n",
        ),
        (
            [],
            2,
            "clustercert: error: lab: the following arguments are required: CMD; see `clustercert lab "
            "--help`\n",
        ),
    ]:
        for r in (
            cli("lab", *argv, env=env),
            subprocess.run(
                [sys.executable, "-m", "clustercert_lab", *argv],
                capture_output=True,
                text=True,
                env={**os.environ, **env},
            ),
        ):
            assert (r.returncode, r.stderr) == (rc, err), (argv, r.args)
            assert r.stdout == (f"{tmp_path}/inventory/hosts.yml\n" if argv == ["inventory"] else ""), r.args


def test_the_lab_prints_its_status(capsys):
    lab_cli.print_status(
        {
            "running": True,
            "inventory": "/x/hosts.yml",
            "nodes": {
                "node02": {"state": "running", "mgmt_ip": "10.250.0.12", "faults": [{"kind": "gpu_missing"}]},
                "node01": {"state": "stopped", "mgmt_ip": "10.250.0.11", "faults": []},
            },
        }
    )
    out = capsys.readouterr().out
    assert out.startswith("lab: running — inventory /x/hosts.yml\n")
    assert out.index("node01") < out.index("node02") and "gpu_missing" in out and "simulated" in out
    lab_cli.print_status({"running": False})
    assert capsys.readouterr().out == "lab: not running\n"


# ---- what the product reads of an installed distribution: profiles and lab proofs, by entry point ----------

@pytest.fixture
def site(tmp_path, monkeypatch):
    """A directory on sys.path where a test installs a distribution by hand (its dist-info), the product's
    caches of what is installed cleared before and after."""
    from clustercert.model import profile
    from clustercert.report import catalogue

    def clear():
        profile.installed_profiles.cache_clear()
        catalogue.lab_proofs.cache_clear()

    clear()
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    yield root
    monkeypatch.undo()
    clear()


def _install(site, name: str, entry_points: str, files: dict[str, str], record: bool) -> None:
    """A distribution ``name`` in ``site``: its files, and a dist-info declaring ``entry_points``; with
    ``record`` a RECORD listing its files (a wheel install), without one none (as an editable install lists
    none)."""
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    if record:
        (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in files))
    from clustercert.model import profile
    from clustercert.report import catalogue

    profile.installed_profiles.cache_clear()  # read once per process: this one has installed something since
    catalogue.lab_proofs.cache_clear()


@pytest.mark.parametrize("record", [True, False], ids=["wheel", "editable"])
def test_a_profile_an_installed_distribution_declares_is_known_by_name(site, record, capsys):
    """`--profile NAME` finds a profile an installed distribution declares (group clustercert.profiles, the
    value naming its directory), read from the distribution's files or, for an editable install, from
    sys.path; nothing of the distribution is imported. The product's own names stay the product's; a declared
    file that is missing, or a value that names no directory, is not a profile."""
    from clustercert.model.profile import builtin_profiles, load_profile, profile_origin, profile_source

    text = profile_source("lab").read_text().replace("name: lab", "name: site-gpu")
    _install(site, "site-profiles", "[clustercert.profiles]\nsite-gpu = sitepkg.profiles\n"
             "h100-sxm-8x-ndr = sitepkg.profiles\nmissing = sitepkg.profiles\nodd = ../etc\n",
             {"sitepkg/__init__.py": "raise SystemExit('imported')\n", "sitepkg/profiles/site-gpu.yml": text,
              "sitepkg/profiles/h100-sxm-8x-ndr.yml": "not: the product's\n"}, record)
    assert {"site-gpu", "h100-sxm-8x-ndr", "lab"} <= set(builtin_profiles())
    assert "missing" not in builtin_profiles() and "odd" not in builtin_profiles()
    assert load_profile("site-gpu").name == "site-gpu"
    assert profile_source("site-gpu") == site / "sitepkg" / "profiles" / "site-gpu.yml"
    assert profile_origin("site-gpu") == "site-profiles: sitepkg/profiles/site-gpu.yml"
    assert profile_origin("h100-sxm-8x-ndr") == "profiles/h100-sxm-8x-ndr.yml"
    assert load_profile("h100-sxm-8x-ndr").gpu.count == 8
    assert "sitepkg" not in sys.modules
    assert main(["checks", "--profile", "missing"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown profile 'missing'" in err and "site-gpu" in err


def test_lab_proofs_are_read_from_the_file_a_distribution_declares(site, capsys):
    """`clustercert checks` shows the proofs of every file declared in the group clustercert.proofs beside the
    lab's; a file that is not a proofs document is exit 2, one line naming it."""
    from clustercert.report import catalogue

    proof = {"fault": "gpu_missing", "params": {}, "status": "fail", "test": "tests/site/test_x.py::test_y"}
    doc = {"schema": "clustercert.lab-proofs/v1", "proofs": {"gpu.model": [proof]}}
    _install(site, "site-proofs", "[clustercert.proofs]\nsite = siteproofs\n",
             {"siteproofs/site.json": json.dumps(doc)}, True)
    assert main(["checks", "--format", "json"]) == 0
    entries = {e["id"]: e for e in json.loads(capsys.readouterr().out)["entries"]}
    assert entries["gpu.model"]["lab"]["proofs"] == [proof]
    assert [p["fault"] for p in entries["gpu.count"]["lab"]["proofs"]] == ["gpu_missing"]  # the lab's, still
    bad = site / "siteproofs" / "site.json"
    for text, why in [
        ("{", "cannot read the lab proofs"),
        ('{"schema": "x", "proofs": {}}', "schema: not a lab proofs"),
        (json.dumps({**doc, "proofs": {"gpu.model": [{"fault": "x"}]}}), "proofs.gpu.model: each proof"),
    ]:
        bad.write_text(text)
        catalogue.lab_proofs.cache_clear()
        assert main(["checks"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(bad) in err and why in err, err
