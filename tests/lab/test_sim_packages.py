"""The lab's apt repository, built in a temp dir (no lab): well-formed .debs, a signed flat repo that
apt accepts, two versions where faults need them, and the node-side files prepare_node writes."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from clustercert_lab import hardware, packages
from clustercert_lab.sim import prepare_node

PROFILE = Path(__file__).resolve().parents[2] / "clustercert-lab/src/clustercert_lab/profiles/lab.yml"

pytestmark = pytest.mark.skipif(not shutil.which("dpkg-deb") or not shutil.which("gpg")
                                or not shutil.which("dpkg-scanpackages"),
                                reason="needs dpkg-deb, dpkg-scanpackages (dpkg-dev) and gpg")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    base = tmp_path_factory.mktemp("cache")
    profile = yaml.safe_load(PROFILE.read_text())
    packages.build_repo(base / "repo", profile)
    return base / "repo"


def _packages(repo: Path) -> list[dict]:
    out = []
    for stanza in (repo / "Packages").read_text().strip().split("\n\n"):
        d = {}
        for line in stanza.splitlines():
            if line[:1] != " " and ":" in line:
                k, _, v = line.partition(":")
                d[k] = v.strip()
        out.append(d)
    return out


def test_repo_has_the_real_package_names_and_versions(repo):
    have = {(p["Package"], p["Version"]) for p in _packages(repo)}
    for expected in [
        ("nvidia-open", "570.172.08-1"),
        ("nvidia-driver", "570.172.08-1"),
        ("cuda-drivers-570", "570.172.08-1"),
        ("nvidia-smi", "570.172.08-1"),
        ("libnvidia-ml1", "570.172.08-1"),
        ("nvidia-persistenced", "570.172.08-1"),
        ("nvidia-kernel-open-dkms", "570.172.08-1"),
        ("nvidia-fabricmanager-570", "570.172.08-1"),
        ("libnccl2", "2.26.2-1+cuda12.8"),
        ("libnccl-dev", "2.26.2-1+cuda12.8"),
        ("nvidia-container-toolkit", "1.17.8-1"),
        ("nvidia-container-toolkit-base", "1.17.8-1"),
        ("libnvidia-container-tools", "1.17.8-1"),
        ("libnvidia-container1", "1.17.8-1"),
        ("doca-ofed", "2.10.0-1"),
        ("datacenter-gpu-manager", "1:3.3.9"),
        ("nccl-tests", "2.14.1-1+cuda12.8"),
        ("nvbandwidth", "0.7-1+cuda12.8"),
        ("perftest", "25.01.0-0.84.1"),
        # second versions for package_drift / driver_version_mismatch
        ("nvidia-smi", "570.158.01-1"),
        ("libnccl2", "2.27.3-1+cuda12.8"),
        ("nvidia-container-toolkit", "1.17.7-1"),
    ]:
        assert expected in have, expected
    for p in _packages(repo):
        assert "clustercert lab simulation" in p["Description"], p["Package"]


def test_debs_are_well_formed(repo):
    debs = sorted((repo / "pool").glob("*.deb"))
    assert len(debs) == len(_packages(repo)) == 41  # 40 NVIDIA-named packages + headers for the host kernel
    for deb in debs:
        info = subprocess.run(
            ["dpkg-deb", "--info", str(deb)], capture_output=True, text=True, check=True
        ).stdout
        assert "Package: " + deb.name.split("_")[0] in info
    contents = subprocess.run(
        ["dpkg-deb", "--contents", str(repo / "pool/nvidia-smi_570.172.08-1_amd64.deb")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "./usr/bin/nvidia-smi" in contents
    tmp = repo.parent / "x"
    subprocess.run(
        ["dpkg-deb", "-x", str(repo / "pool/nvidia-smi_570.158.01-1_amd64.deb"), str(tmp)], check=True
    )
    wrapper = (tmp / "usr/bin/nvidia-smi").read_text()
    assert "export CLUSTERCERT_LAB_LIB_VERSION=570.158.01" in wrapper
    assert (
        'exec /usr/bin/python3 -I -S /var/lib/clustercert-lab/labsim/__main__.py nvidia-smi "$@"' in wrapper
    )
    subprocess.run(
        ["dpkg-deb", "-x", str(repo / "pool/nvidia-kernel-open-dkms_570.172.08-1_amd64.deb"), str(tmp)],
        check=True,
    )
    conf = (tmp / "etc/modprobe.d/nvidia-570-clustercert-lab.conf").read_text()
    assert (
        "install nvidia_peermem /usr/bin/python3 /var/lib/clustercert-lab/labsim modload nvidia_peermem"
        in conf
    )
    ctl = subprocess.run(
        ["dpkg-deb", "--field", str(repo / "pool/nvidia-persistenced_570.172.08-1_amd64.deb"), "Depends"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert ctl == "libnvidia-ml1 (= 570.172.08-1)"


def test_repo_is_signed_and_the_key_stays_in_the_cache(repo):
    assert sorted(p.name for p in repo.iterdir()) == [
        "InRelease",
        "Packages",
        "Packages.gz",
        "Release",
        "Release.gpg",
        "clustercert-lab.gpg",
        "clustercert-mirror.gpg",
        "pool",
    ]
    r = subprocess.run(["gpgv", "--keyring", str(repo / "clustercert-lab.gpg"), str(repo / "InRelease")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    key = subprocess.run(["gpg", "--show-keys", "--with-colons", str(repo / "clustercert-lab.gpg")],
                         capture_output=True, text=True, check=True).stdout
    assert "pub:" in key and "sec:" not in key
    assert (repo.parent / "repo-signing-key").is_dir()
    tampered = repo.parent / "InRelease.bad"
    tampered.write_text((repo / "InRelease").read_text().replace("Label: clustercert-lab", "Label: evil"))
    assert subprocess.run(["gpgv", "--keyring", str(repo / "clustercert-lab.gpg"), str(tampered)],
                          capture_output=True).returncode != 0


@pytest.mark.skipif(not shutil.which("apt-get"), reason="needs apt-get")
def test_apt_accepts_the_repo_and_resolves_the_driver(repo, tmp_path):
    etc = tmp_path / "etc"
    for d in (
        etc / "sources.list.d",
        etc / "preferences.d",
        etc / "apt.conf.d",
        tmp_path / "state/lists/partial",
        tmp_path / "cache/archives/partial",
    ):
        d.mkdir(parents=True)
    (etc / "sources.list").write_text(f"deb [signed-by={repo}/clustercert-lab.gpg] file:{repo} ./\n")
    # a node image without the Debian mirror: pretend the Debian packages the lab's depend on are installed
    (tmp_path / "status").write_text("".join(
        f"Package: {name}\nStatus: install ok installed\nPriority: optional\nSection: misc\nMaintainer: x\n"
        f"Architecture: amd64\nVersion: {ver}\nDescription: stub\n\n"
        for name, ver in (("kmod", "30+20221128-1"), ("infiniband-diags", "44.0-2"))))
    opts = [
        "-o",
        f"Dir::Etc={etc}",
        "-o",
        f"Dir::State={tmp_path}/state",
        "-o",
        f"Dir::Cache={tmp_path}/cache",
        "-o",
        f"Dir::State::status={tmp_path}/status",
        "-o",
        "Debug::NoLocking=1",
    ]
    up = subprocess.run(["apt-get", *opts, "update"], capture_output=True, text=True, timeout=120)
    assert up.returncode == 0 and "NO_PUBKEY" not in up.stderr and "not signed" not in up.stderr, up.stderr
    sim = subprocess.run(["apt-get", *opts, "install", "-s", "nvidia-open", "nvidia-fabricmanager-570",
                          "nvidia-container-toolkit", "libnccl2=2.26.2-1+cuda12.8"],
                         capture_output=True, text=True, timeout=120)
    inst = {
        line.split()[1]: line.split()[2].strip("(")
        for line in sim.stdout.splitlines()
        if line.startswith("Inst ")
    }
    assert inst["nvidia-smi"] == "570.172.08-1" and inst["nvidia-kernel-open-dkms"] == "570.172.08-1"
    assert inst["nvidia-container-toolkit"] == "1.17.8-1" and inst["libnccl2"] == "2.26.2-1+cuda12.8"
    # the lab's perftest wins over Debian's 4.5+0.17-1 for a plain install
    assert (
        subprocess.run(["dpkg", "--compare-versions", "25.01.0-0.84.1", "gt", "4.5+0.17-1"]).returncode == 0
    )


def test_prepare_node_writes_code_hw_and_readme(tmp_path):
    profile = yaml.safe_load(PROFILE.read_text())
    hw = hardware.build(profile, "node03", 3, {})
    prepare_node(tmp_path / "sim", hw)
    assert json.loads((tmp_path / "sim/hw.json").read_text()) == hw
    assert (tmp_path / "sim/labsim/__main__.py").exists() and (tmp_path / "sim/labsim/agent.py").exists()
    # compiled here (the node mounts it read-only: without them every simulated tool call would
    # compile its modules again)
    for py in (tmp_path / "sim/labsim").glob("*.py"):
        assert Path(importlib.util.cache_from_source(str(py))).exists(), py
    assert "SIMULATED" in (tmp_path / "sim/README").read_text()
    assert hardware.load(tmp_path / "sim") == hw
