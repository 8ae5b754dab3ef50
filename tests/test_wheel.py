"""A built wheel carries the playbooks and roles, and the installed package finds them; the tool's wheel runs
without the lab's, which installs beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_installs_and_finds_its_ansible_content(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(REPO)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (wheel,) = dist.glob("clustercert-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "clustercert/_data/playbooks/preflight.yml" in names
    assert "clustercert/_data/roles/preflight/meta/argument_specs.yml" in names
    assert "clustercert/_data/ansible.cfg" in names
    assert "clustercert/_data/plugins/filter/clustercert_packages.py" in names  # the roles' filters, by FQCN
    assert "clustercert/_data/plugins/lookup/clustercert_profile.py" in names
    assert "clustercert/profiles/h100-sxm-8x-ndr.yml" in names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    # dependencies come from the test environment (no network needed); clustercert itself from the wheel
    site = subprocess.check_output(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
    ).strip()
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        timeout=300,
    )

    out = subprocess.run(
        [
            str(py),
            "-c",
            "from clustercert import paths; print(paths.playbooks_dir()); print(paths.roles_dir())",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.split()
    assert out[0].startswith(site) and out[0].endswith("clustercert/_data/playbooks")
    assert (Path(out[0]) / "preflight.yml").is_file()
    assert (Path(out[1]) / "preflight" / "tasks" / "main.yml").is_file()

    # the engine's collections path links clustercert.cluster to the wheel's _data: the roles' filters by FQCN
    tree = subprocess.check_output(
        [
            str(py),
            "-c",
            "import sys; from pathlib import Path; from clustercert.collect import engine; "
            "print(engine._collection_tree(Path(sys.argv[1])))",
            str(tmp_path / "state"),
        ],
        text=True,
        cwd=tmp_path,
    ).strip()
    assert (Path(tree) / "ansible_collections/clustercert/cluster").resolve() == Path(out[0]).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=tree, ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"))
    r = subprocess.run(
        [
            str(py),
            "-m",
            "ansible",
            "adhoc",
            "localhost",
            "-m",
            "ansible.builtin.debug",
            "-a",
            "msg={{ ['perftest=25*'] | clustercert.cluster.clustercert_dpkg_query_argv | last }}",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0 and '"msg": "perftest"' in r.stdout, r.stdout + r.stderr

    cli = venv / "bin" / "clustercert"
    r = subprocess.run([str(cli), "version"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("clustercert ")
    r = subprocess.run([str(cli), "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and "certify" in r.stdout


def _checks(cli: Path, cwd: Path, *argv: str) -> dict:
    r = subprocess.run(
        [str(cli), "checks", "--format", "json", *argv], capture_output=True, text=True, cwd=cwd
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.slow
def test_the_tool_installs_and_runs_without_the_lab_and_the_lab_installs_beside_it(tmp_path):
    """Issue 37: the lab is a distribution of its own (clustercert-lab/pyproject.toml). The product's wheel
    holds nothing of it; installed alone, the tool runs (version, checks: every id, no lab proofs),
    `clustercert lab` says in one line that the lab is not installed, and `--profile lab` is unknown. The
    lab's wheel installed beside it brings its program (`clustercert-lab`, `clustercert lab`), its profile
    (`--profile lab`) and its proofs, which the product reads from the lab's installed files without importing
    it."""
    dist = tmp_path / "dist"
    for src in (REPO, REPO / "clustercert-lab"):
        subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(src)],
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
    (product,) = dist.glob("clustercert-0*.whl")
    (lab,) = dist.glob("clustercert_lab-*.whl")
    names = zipfile.ZipFile(product).namelist()
    assert not [n for n in names if "clustercert_lab" in n or n.endswith("profiles/lab.yml")], names
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert zipfile.ZipFile(product).read(entry_points).decode().split() == [
        "[console_scripts]",
        "clustercert",
        "=",
        "clustercert.cli:main",
    ]
    lab_names = zipfile.ZipFile(lab).namelist()
    assert {"clustercert_lab/__main__.py", "clustercert_lab/cli.py", "clustercert_lab/profiles/lab.yml",
            "clustercert_lab/proofs/lab.json", "clustercert_lab/sim/labsim/__main__.py"} <= set(lab_names)
    assert not [n for n in lab_names if n.startswith("clustercert/")]

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = subprocess.check_output(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
    ).strip()
    # the product's dependencies come from the test environment (no network), without the lab installed there
    deps = tmp_path / "deps"
    deps.mkdir()
    here = Path(sysconfig.get_paths()["purelib"])
    for entry in here.iterdir():
        if not entry.name.startswith(("clustercert", "_clustercert", "__editable__", "deps.pth")) \
                and not entry.name.endswith(".pth"):
            (deps / entry.name).symlink_to(entry)
    Path(site, "deps.pth").write_text(f"{deps}\n")
    subprocess.run(
        [str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(product)],
        check=True,
        timeout=300,
    )
    cli = venv / "bin" / "clustercert"
    run = lambda *argv: subprocess.run([str(cli), *argv], capture_output=True, text=True, cwd=tmp_path)  # noqa: E731

    r = subprocess.run(
        [str(py), "-c", "import clustercert_lab"], capture_output=True, text=True, cwd=tmp_path
    )
    assert r.returncode == 1 and "No module named 'clustercert_lab'" in r.stderr  # the product alone
    assert not (venv / "bin" / "clustercert-lab").exists()
    r = run("version")
    assert r.returncode == 0 and r.stdout.startswith("clustercert ")
    alone = _checks(cli, tmp_path)
    assert alone["lab_installed"] is False and alone["profiles"] == ["a100-sxm-8x-hdr", "h100-sxm-8x-ndr"]
    ids = [e["id"] for e in alone["entries"]]
    assert {"gpu.count", "probe.nccl_cluster", "probe.nccl_allreduce", "probe.ddp_step"} <= set(ids)
    assert all(e["lab"]["proofs"] == [] for e in alone["entries"]) and alone["verdicts"] == {}
    r = run("checks")
    assert (
        r.returncode == 0
        and "probe.nccl_cluster" in r.stdout
        and "clustercert-lab) is not installed" in r.stdout
    )
    r = run("checks", "--format", "markdown")
    assert (
        r.returncode == 0
        and "The simulated lab (the distribution clustercert-lab) is not installed" in r.stdout
    )
    r = run("lab", "status")
    assert (r.returncode, r.stdout) == (2, "") and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("clustercert: error: lab: the simulated lab is not installed"), r.stderr
    r = run("checks", "--profile", "lab")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "unknown profile 'lab'" in r.stderr, r.stderr

    subprocess.run(
        [str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(lab)], check=True, timeout=300
    )
    both = _checks(cli, tmp_path)
    assert both["lab_installed"] is True and both["profiles"] == ["a100-sxm-8x-hdr", "h100-sxm-8x-ndr", "lab"]
    assert [e["id"] for e in both["entries"]] == ids
    by_id = {e["id"]: e for e in both["entries"]}
    assert [(p["fault"], p["status"]) for p in by_id["probe.nccl_cluster"]["lab"]["proofs"]] == [
        ("nccl_scale_slow", "fail")
    ]
    assert ("nccl_one_host", "error") in [
        (p["fault"], p["status"]) for p in by_id["probe.nccl_allreduce"]["lab"]["proofs"]
    ]
    assert [p["fault"] for p in by_id["probe.ddp_step"]["lab"]["proofs"]] == ["rank_slow"]
    # the lab's profile, read from the lab's installed files (not from this checkout)
    source = {x["key"]: x["source"] for x in by_id["gpu.count"]["profiles"]["lab"]["expects"]}["gpu.count"]
    assert source == "clustercert-lab: clustercert_lab/profiles/lab.yml"
    r = subprocess.run(
        [str(py), "-c", "from clustercert.model.profile import profile_source; print(profile_source('lab'))"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert r.stdout.strip() == f"{site}/clustercert_lab/profiles/lab.yml"
    # the lab's own program, installed beside the product: `clustercert lab` runs it, so does its script
    own = subprocess.run(
        [str(venv / "bin" / "clustercert-lab"), "--help"], capture_output=True, text=True, cwd=tmp_path
    )
    r = run("lab", "--help")
    assert r.returncode == own.returncode == 0 and r.stdout == own.stdout
    assert r.stdout.startswith("usage: clustercert lab ") and "inventory" in r.stdout
