"""Every role resolved for recorded facts of Debian 12, Ubuntu 22.04/24.04 and Rocky 9, every template
rendered: a wrong repository URL, package name or template fails here, not at a site."""

from __future__ import annotations

import configparser
import json
from pathlib import Path

import pytest
from provisioning_helpers import ROLES, resolved

HOSTS = ["debian12", "ubuntu2204", "ubuntu2404", "rocky9"]


def test_every_template_is_rendered_somewhere(rendered: Path):
    names = set()
    for host in HOSTS:
        names |= {p.name.split(".j2")[0] for p in (rendered / host / "templates").iterdir()}
    bootstrap_roles = [
        "nvidia_repos",
        "nvidia_driver",
        "fabricmanager",
        "ofed",
        "nvidia_peermem",
        "nccl_tools",
        "container_toolkit",
        "ib_redundancy",
        "tuning",
        "rolling_reboot",
        "cluster_ssh",
    ]
    templates = [t for r in bootstrap_roles for t in (ROLES / r / "templates").glob("*.j2")]
    assert len(templates) >= 25
    for tpl in templates:
        key = f"{tpl.parent.parent.name}__{tpl.name[:-3]}"
        assert any(n == key or n.startswith(key + ".") for n in names), f"{tpl} was never rendered"


def test_repository_urls(rendered: Path):
    assert resolved(rendered, "debian12")["sources"] == [{
        "name": "clustercert-mirror", "url": "http://10.250.0.1:8081/", "suite": "./",
        "key_url": "http://10.250.0.1:8081/clustercert-mirror.gpg", "key_sha256": "",
        "key_path": "/etc/apt/keyrings/clustercert-mirror.gpg"}]
    u22 = resolved(rendered, "ubuntu2204")["sources"]
    assert [s["url"] for s in u22] == [
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/",
        "https://linux.mellanox.com/public/repo/doca/2.10.0/ubuntu22.04/x86_64/"]
    assert [s["key_url"] for s in u22] == [
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/3bf863cc.pub",
        "https://linux.mellanox.com/public/repo/doca/GPG-KEY-Mellanox.pub"]
    assert [s["key_path"] for s in u22] == [
        "/etc/apt/keyrings/nvidia-cuda.asc",
        "/etc/apt/keyrings/mellanox.asc",
    ]
    u24 = resolved(rendered, "ubuntu2404")["sources"]
    assert [s["url"] for s in u24] == [
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/",
        "https://linux.mellanox.com/public/repo/mlnx_ofed/24.10-1.1.4.0/ubuntu24.04/x86_64/"]
    rocky = resolved(rendered, "rocky9")["sources"]
    assert [(s["url"], s["key_url"], s["key_path"]) for s in rocky] == [(
        "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/",
        "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/D42D0685.pub",
        "/etc/pki/rpm-gpg/nvidia-cuda")]  # inbox OFED: no Mellanox repository


def test_apt_source_lines(rendered: Path):
    lines = [
        ln
        for ln in (rendered / "ubuntu2204/templates/nvidia_repos__nvidia.list").read_text().splitlines()
        if ln.startswith("deb ")
    ]
    assert lines == [
        "deb [signed-by=/etc/apt/keyrings/nvidia-cuda.asc] https://developer.download.nvidia.com/compute/"
        "cuda/repos/ubuntu2204/x86_64/ /",
        "deb [signed-by=/etc/apt/keyrings/mellanox.asc] https://linux.mellanox.com/public/repo/doca/2.10.0/"
        "ubuntu22.04/x86_64/ ./",
    ]


def test_dnf_repo_file(rendered: Path):
    cp = configparser.ConfigParser()
    cp.read_string((rendered / "rocky9/templates/nvidia_repos__nvidia.repo").read_text())
    assert cp.sections() == ["nvidia-cuda"]
    assert cp["nvidia-cuda"]["baseurl"] == "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/"
    assert cp["nvidia-cuda"]["gpgkey"] == "file:///etc/pki/rpm-gpg/nvidia-cuda"
    assert cp["nvidia-cuda"]["gpgcheck"] == "1"


@pytest.mark.parametrize(
    "host,packages,extra",
    [
        (
            "debian12",
            [
                "nvidia-open=570.172.08-*",
                "nvidia-driver=570.172.08-*",
                "nvidia-kernel-open-dkms=570.172.08-*",
                "nvidia-persistenced=570.172.08-*",
            ],
            ["linux-headers-6.1.0-37-amd64"],
        ),
        (
            "ubuntu2204",
            [
                "nvidia-driver-570-open=570.172.08-*",
                "nvidia-dkms-570-open=570.172.08-*",
                "nvidia-compute-utils-570=570.172.08-*",
            ],
            ["linux-headers-5.15.0-143-generic"],
        ),
        (
            "ubuntu2404",
            [
                "nvidia-driver-535=535.247.01-*",
                "nvidia-dkms-535=535.247.01-*",
                "nvidia-compute-utils-535=535.247.01-*",
            ],
            ["linux-headers-6.8.0-63-generic"],
        ),
        (
            "rocky9",
            [
                "nvidia-driver-570.172.08",
                "nvidia-driver-cuda-570.172.08",
                "kmod-nvidia-open-dkms-570.172.08",
                "nvidia-persistenced-570.172.08",
            ],
            [
                "python3-dnf-plugin-versionlock",
                "kernel-devel-5.14.0-570.17.1.el9_6.x86_64",
                "kernel-headers-5.14.0-570.17.1.el9_6",
            ],
        ),
    ],
)
def test_driver_packages(rendered: Path, host, packages, extra):
    r = resolved(rendered, host)
    assert r["driver_packages"] == packages
    assert r["driver_extra_packages"] == extra
    assert r["driver_module_stream"] == ("nvidia-driver:570-open" if host == "rocky9" else "")


def test_fabricmanager_name_and_version_follow_the_driver(rendered: Path):
    assert [
        (resolved(rendered, h)["fabricmanager_package"], resolved(rendered, h)["fabricmanager_version"])
        for h in HOSTS
    ] == [
        ("nvidia-fabricmanager-570", "570.172.08"),
        ("nvidia-fabricmanager-570", "570.172.08"),
        ("nvidia-fabricmanager-535", "535.247.01"),
        ("nvidia-fabric-manager", "570.172.08"),
    ]


def test_ofed_nccl_toolkit_packages(rendered: Path):
    assert resolved(rendered, "debian12")["ofed_packages"] == ["doca-ofed=2.10.0*"]
    assert resolved(rendered, "ubuntu2404")["ofed_packages"] == ["mlnx-ofed-basic=24.10-1.1.4.0*"]
    assert resolved(rendered, "rocky9")["ofed_packages"] == [
        "rdma-core",
        "libibverbs-utils",
        "infiniband-diags",
    ]
    assert resolved(rendered, "debian12")["nccl_tools_packages"] == [
        "libnccl2=2.26.2-1+cuda12.8",
        "libnccl-dev=2.26.2-1+cuda12.8",
        "perftest=25.01.0*",
        "nccl-tests=2.14.1*",
        "nvbandwidth=0.7*",
        "datacenter-gpu-manager=1:3.3.9*",
    ]
    # a site's CUDA build of perftest (nccl_tools_perftest_package) in place of the stock package, pinned
    # alike
    assert [p for p in resolved(rendered, "ubuntu2204")["nccl_tools_packages"] if "perftest" in p] == [
        "perftest-cuda=25.01.0-cuda12.8*"]
    assert resolved(rendered, "ubuntu2404")["nccl_tools_packages"][:2] == [
        "libnccl2=2.21.5-1+cuda12.2", "libnccl-dev=2.21.5-1+cuda12.2"]
    assert resolved(rendered, "rocky9")["nccl_tools_packages"][:2] == [
        "libnccl-2.26.2-1+cuda12.8", "libnccl-devel-2.26.2-1+cuda12.8"]
    assert resolved(rendered, "rocky9")["container_toolkit_packages"] == [
        "nvidia-container-toolkit-1.17.8*", "nvidia-container-toolkit-base-1.17.8*",
        "libnvidia-container-tools-1.17.8*", "libnvidia-container1-1.17.8*"]


def test_runtime_targets(rendered: Path):
    assert (
        resolved(rendered, "ubuntu2204")["container_runtime"]["config"]
        == "/etc/containerd/conf.d/99-nvidia.toml"
    )
    assert resolved(rendered, "ubuntu2404")["container_runtime"]["config"] == "/etc/docker/daemon.json"
    assert (
        resolved(rendered, "rocky9")["container_runtime"]["config"] == "/etc/crio/crio.conf.d/99-nvidia.toml"
    )


def test_bond_for_each_network_stack(rendered: Path):
    t = rendered / "ubuntu2204/templates"
    netdev = t.joinpath("ib_redundancy__bond.netdev").read_text()
    assert "Name=bond0\nKind=bond" in netdev
    assert "Mode=active-backup\nMIIMonitorSec=100ms\nFailOverMACPolicy=active" in netdev
    assert "Address=10.20.0.11/16" in t.joinpath("ib_redundancy__bond.network").read_text()
    assert "Bond=bond0\nPrimarySlave=yes" in t.joinpath("ib_redundancy__bond-slave.network.ib8").read_text()
    assert "PrimarySlave" not in t.joinpath("ib_redundancy__bond-slave.network.ib9").read_text()
    ifup = t.joinpath("ib_redundancy__bond.ifupdown").read_text()
    for line in ("bond-slaves ib8 ib9", "bond-mode active-backup", "bond-primary ib8", "bond-miimon 100",
                 "bond-fail-over-mac active", "address 10.20.0.11/16"):
        assert line in ifup
    nm = configparser.ConfigParser()
    nm.read_string((rendered / "rocky9/templates/ib_redundancy__bond.nmconnection").read_text())
    assert dict(nm["bond"]) == {
        "mode": "active-backup",
        "miimon": "100",
        "primary": "ib8",
        "fail_over_mac": "active",
    }
    slave = configparser.ConfigParser()
    slave.read_string((rendered / "rocky9/templates/ib_redundancy__bond-slave.nmconnection.ib9").read_text())
    assert slave["connection"]["master"] == "bond0" and slave["connection"]["type"] == "infiniband"
    assert resolved(rendered, "rocky9")["network_stack"] == "networkmanager"
    assert resolved(rendered, "debian12")["network_stack"] == "networkd"


def test_nccl_conf_names_compute_rails_only(rendered: Path):
    # the lab profile names its rails (hardware.nic_gpu): written as they are, in GPU order
    assert (
        "NCCL_IB_HCA==mlx5_0,mlx5_1\n"
        in (rendered / "debian12/templates/ib_redundancy__nccl.conf").read_text()
    )
    assert resolved(rendered, "debian12")["compute_hcas"] == ["mlx5_0", "mlx5_1"]
    # the h100 profile names none: the role gets its hardware.rails and discovers the names on the node (the
    # same rule as certify: tests/test_rails.py renders this template from it on a real 12-NIC capture)
    u22 = resolved(rendered, "ubuntu2204")
    assert u22["compute_hcas"] == [] and (u22["rails"]["count"], u22["rails"]["affinity"]) == (8, "PIX")


def test_sysctls_split_between_arp_and_tuning(rendered: Path):
    r = resolved(rendered, "ubuntu2204")
    assert r["arp_sysctl"] == {"net.ipv4.conf.all.arp_ignore": "1", "net.ipv4.conf.all.arp_announce": "2",
                               "net.ipv4.conf.all.rp_filter": "2"}
    assert r["tuning_sysctl"] == {"vm.zone_reclaim_mode": "1"}
    arp = (rendered / "ubuntu2204/templates/ib_redundancy__arp-sysctl.conf").read_text()
    assert "net.ipv4.conf.all.arp_ignore = 1\n" in arp and "net.ipv4.conf.all.rp_filter = 2\n" in arp
    assert "vm.zone_reclaim_mode = 1\n" in (rendered / "ubuntu2204/templates/tuning__sysctl.conf").read_text()


def test_tuning_files(rendered: Path):
    t = rendered / "ubuntu2204/templates"
    assert "*       hard    memlock unlimited\n" in t.joinpath("tuning__limits.conf").read_text()
    assert (
        "DefaultLimitMEMLOCK=infinity\nDefaultLimitNOFILE=1048576\n"
        in t.joinpath("tuning__systemd-limits.conf").read_text()
    )
    assert (
        'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt"'
        in t.joinpath("tuning__grub-cmdline.cfg").read_text()
    )
    assert "echo performance >" in t.joinpath("tuning__clustercert-cpu-governor.service").read_text()


def test_opensm_only_on_named_sm_hosts(rendered: Path):
    assert resolved(rendered, "rocky9")["opensm_enabled"] is True
    assert resolved(rendered, "ubuntu2204")["opensm_enabled"] is False  # switch-managed fabric
    conf = (rendered / "rocky9/templates/ib_redundancy__opensm.conf").read_text()
    assert "guid 0x58a2e10300123456\n" in conf and "sm_priority 14\n" in conf


def test_tool_versions_record(rendered: Path):
    data = json.loads((rendered / "ubuntu2404/templates/nccl_tools__nccl-tools-versions.json").read_text())
    assert data == {"cuda": "12.2", "nccl": "2.21.5", "nccl_cuda": "12.2", "perftest": "25.01.0",
                    "nccl_tests": "2.14.1", "nvbandwidth": "0.7", "dcgm": "3.3.9"}


def test_driver_pin_covers_the_whole_set(rendered: Path):
    pref = (rendered / "ubuntu2404/templates/nvidia_driver__nvidia-driver.pref").read_text()
    assert "Pin: version 535.247.01-*\nPin-Priority: 1001\n" in pref
    assert "Package: nvidia-* libnvidia-* libcuda1 " in pref


def test_openmpi_and_cluster_ssh_per_distribution(rendered: Path):
    """OpenMPI (mpirun for the NCCL probe across nodes) and the SSH client, by each family's name; the
    known-hosts file lists every node's recorded host key under its names (host keys stay checked)."""
    assert [resolved(rendered, h)["nccl_tools_mpi_packages"] for h in HOSTS] == [
        ["openmpi-bin"], ["openmpi-bin"], ["openmpi-bin"], ["openmpi"]]
    assert [resolved(rendered, h)["cluster_ssh_client_package"] for h in HOSTS] == [
        "openssh-client", "openssh-client", "openssh-client", "openssh-clients"]
    known = (rendered / "debian12/templates/cluster_ssh__ssh_known_hosts").read_text().splitlines()
    assert len(known) == len(HOSTS), known
    for h in HOSTS:
        line = next(x for x in known if x.split(",")[0] == h)
        names, keytype, key = line.split(" ")
        assert f"{h}-node" in names.split(",") and keytype == "ssh-ed25519" and key.startswith("AAAAC3Nza")
    config = (rendered / "rocky9/templates/cluster_ssh__ssh_config").read_text()
    assert config.splitlines()[0] == "Host " + " ".join(sorted(HOSTS))
    assert "StrictHostKeyChecking yes" in config and "IdentityFile ~/.ssh/id_clustercert" in config
