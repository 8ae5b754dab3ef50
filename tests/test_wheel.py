"""A built wheel carries the playbooks and roles, and the installed package finds them."""

from __future__ import annotations

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
