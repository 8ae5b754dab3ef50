"""The package filters (plugins/filter/clustercert_packages.py, the collection's): an apt task is
skipped only where dpkg already has every package it names at a matching version, and a hold task only
where dpkg lists the package held. The dpkg-query lines are as Debian 12's dpkg-query prints them with
the roles' format (captured on this project's Debian 12 host: a package known but not installed is
``un`` with an empty version)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess

import pytest
from provisioning_helpers import BIN, REPO, ROLES, ansible_env

spec = importlib.util.spec_from_file_location(
    "clustercert_packages", REPO / "plugins/filter/clustercert_packages.py")
pk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pk)

DPKG = ("libnccl2\t2.27.3-1+cuda12.8\thi \n"
        "libnccl-dev\t2.27.3-1+cuda12.8\tii \n"
        "datacenter-gpu-manager\t1:3.3.9\thi \n"
        "chrony\t\tun \n"
        "openssh-client\t1:9.2p1-2+deb12u6\tii \n"
        "perftest\t24.10.0-0.66.g0d7b0b4\tiU \n"           # unpacked, not configured
        "nvbandwidth\t0.7-1\tiiR\n"                         # reinstall required
        "iperf3\t3.12-1+deb12u1\trc \n")                    # removed, its conffiles left


def test_a_pinned_package_at_its_version_is_met_anything_else_unmet():
    specs = ["libnccl2=2.27.3-1+cuda12.8", "libnccl-dev=2.26.2-1+cuda12.8", "datacenter-gpu-manager=1:3.3*",
             "openssh-client", "chrony", "perftest=24.10*", "nvbandwidth=0.7*", "iperf3", "fio"]
    assert pk.unmet_packages(specs, DPKG) == [
        "libnccl-dev=2.26.2-1+cuda12.8",  # another version installed
        "chrony",                          # known to dpkg, not installed
        "perftest=24.10*",                 # half installed
        "nvbandwidth=0.7*",                # reinstall required
        "iperf3",                          # only its conffiles left
        "fio",                             # dpkg knows nothing of it
    ]


def test_what_the_filter_cannot_read_is_left_to_apt():
    assert pk.unmet_packages(["libnccl2>=2.20", "Bad Name", "libnccl2=2.27.3-1+cuda12.8"], DPKG) == [
        "libnccl2>=2.20", "Bad Name"]
    assert pk.unmet_packages(["libnccl2=2.27.3-1+cuda12.8"], "") == ["libnccl2=2.27.3-1+cuda12.8"]
    assert pk.unmet_packages(["libnccl2=2.27.3-1+cuda12.8"], "garbage without tabs\n") == [
        "libnccl2=2.27.3-1+cuda12.8"
    ]


def test_an_arch_qualified_spec_reads_the_package():
    assert pk.unmet_packages(["openssh-client:amd64"], DPKG) == []
    assert pk.dpkg_query_argv(["openssh-client:amd64", "libnccl2=2*", "libnccl2"])[4:] == [
        "openssh-client",
        "libnccl2",
    ]


def test_only_packages_dpkg_does_not_list_held_are_held_again():
    assert pk.unheld_packages(["libnccl2", "libnccl-dev", "datacenter-gpu-manager", "fio"], DPKG) == [
        "libnccl-dev", "fio"]


def test_systemctl_show_blocks_by_unit():
    out = ("Id=systemd-timesyncd.service\nLoadState=loaded\nActiveState=active\nUnitFileState=enabled\n\n"
           "Id=ntp.service\nLoadState=not-found\nActiveState=inactive\nUnitFileState=\n")
    units = pk.systemd_units(out)
    assert units["systemd-timesyncd.service"]["ActiveState"] == "active"
    assert units["ntp.service"] == {"Id": "ntp.service", "LoadState": "not-found", "ActiveState": "inactive",
                                    "UnitFileState": ""}


@pytest.mark.skipif(subprocess.run(["which", "dpkg-query"], capture_output=True).returncode != 0,
                    reason="no dpkg on this host")
def test_the_roles_dpkg_query_on_this_host_reads_what_apt_has():
    """The argv the roles run, run here: an installed package (the host's libc6) is met at its version and
    not at another; a package dpkg does not have is unmet."""
    p = subprocess.run(
        pk.dpkg_query_argv(["libc6", "clustercert-no-such-package"]), capture_output=True, text=True
    )
    version = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", "libc6"], capture_output=True, text=True
    ).stdout
    assert p.stdout.splitlines()[0] == f"libc6\t{version}\tii "
    assert pk.unmet_packages([f"libc6={version}", "clustercert-no-such-package"], p.stdout) == [
        "clustercert-no-such-package"
    ]
    assert pk.unmet_packages(["libc6=0.0-0"], p.stdout) == ["libc6=0.0-0"]


def test_the_filters_load_by_fqcn_from_the_repository(tmp_path):
    """From a clone (the repository's ansible.cfg and nothing else: no role loaded, no plugin path), a play
    finds the filters as the roles name them, clustercert.cluster.clustercert_*."""
    pb = tmp_path / "pb.yml"
    pb.write_text("""\
- name: filters by FQCN
  hosts: localhost
  gather_facts: false
  vars:
    dpkg: "openssh-client\\t1:9.2p1\\tii \\n"
  tasks:
    - name: Use them
      ansible.builtin.copy:
        content: "{{ ['chrony', 'openssh-client'] | clustercert.cluster.clustercert_unmet_packages(dpkg) | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
""")  # noqa: E501
    out = tmp_path / "out.json"
    # ansible.cfg's own path
    env = {k: v for k, v in ansible_env().items() if k != "ANSIBLE_COLLECTIONS_PATH"}
    p = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e", f"out={out}", str(pb)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert json.loads(out.read_text()) == ["chrony"]


def test_every_role_names_the_filters_by_fqcn():
    """The roles use the collection's filters by FQCN only: a short name is not found where the role runs
    from an installed collection (Ansible loads no filter plugins from a collection's roles)."""
    users = set()
    for d in ROLES.iterdir():
        for f in d.glob("**/*.yml"):
            text = f.read_text()
            assert not re.search(
                r"\|\s*clustercert_(unmet_packages|unheld_packages|dpkg_query_argv|systemd_units)", text
            ), f"{f.relative_to(REPO)}: a filter by its short name"
            if re.search(r"\|\s*clustercert\.cluster\.clustercert_\w+", text):
                users.add(d.name)
    # the package-installing roles read dpkg through the collection's packages action
    # (test_packages_action.py)
    assert {"timesync"} <= users
    assert not (ROLES / "clustercert_defaults" / "filter_plugins").exists()
