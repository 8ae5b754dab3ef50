"""A built wheel carries the playbooks and roles, and the installed package finds them."""

from __future__ import annotations

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
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(REPO)],
                   check=True, capture_output=True, text=True, timeout=300)
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
    site = subprocess.check_output([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip()
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], check=True, timeout=300)

    out = subprocess.run(
        [str(py), "-c", "from clustercert import paths; print(paths.playbooks_dir()); print(paths.roles_dir())"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    ).stdout.split()
    assert out[0].startswith(site) and out[0].endswith("clustercert/_data/playbooks")
    assert (Path(out[0]) / "preflight.yml").is_file()
    assert (Path(out[1]) / "preflight" / "tasks" / "main.yml").is_file()

    # the engine's collections path links clustercert.cluster to the wheel's _data: the roles' filters by FQCN
    tree = subprocess.check_output(
        [str(py), "-c", "import sys; from pathlib import Path; from clustercert.collect import engine; "
         "print(engine._collection_tree(Path(sys.argv[1])))", str(tmp_path / "state")], text=True, cwd=tmp_path).strip()
    assert (Path(tree) / "ansible_collections/clustercert/cluster").resolve() == Path(out[0]).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=tree, ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"))
    r = subprocess.run([str(py), "-m", "ansible", "adhoc", "localhost", "-m", "ansible.builtin.debug", "-a",
                        "msg={{ ['perftest=25*'] | clustercert.cluster.clustercert_dpkg_query_argv | last }}"],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert r.returncode == 0 and '"msg": "perftest"' in r.stdout, r.stdout + r.stderr

    cli = venv / "bin" / "clustercert"
    r = subprocess.run([str(cli), "version"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("clustercert ")
    r = subprocess.run([str(cli), "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and "certify" in r.stdout
    # the lab's own program, installed beside the product: `clustercert lab` runs it, so does its script
    lab = subprocess.run([str(venv / "bin" / "clustercert-lab"), "--help"], capture_output=True, text=True, cwd=tmp_path)
    r = subprocess.run([str(cli), "lab", "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == lab.returncode == 0 and r.stdout == lab.stdout
    assert r.stdout.startswith("usage: clustercert lab ") and "inventory" in r.stdout
