"""A site's own playbook that applies every role of the collection clustercert.cluster by its FQCN (issue 34):
linted by test_consumer_playbook.py (ansible-lint, production profile) and run against a lab node by
test_bootstrap_lab.py. The site brings what clustercert's bootstrap playbook has
in its group_vars: the profile-to-role-variables mapping (the collection's
playbooks/group_vars/all/profile.yml, copied next to the site's playbook, so inventory host variables still
win as they do in bootstrap)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from provisioning_helpers import BIN, REPO

NAMESPACE, NAME = "clustercert", "cluster"
FQCN = f"{NAMESPACE}.{NAME}"

# The roles in bootstrap's order; rolling_reboot only where a role asked for a reboot (as bootstrap does).
PLAYBOOK = """\
---
# A site's playbook: every role of clustercert.cluster by its FQCN, nothing of clustercert's but the collection
# and the profile mapping in group_vars/all/ (copied from the collection's playbooks/group_vars/all/profile.yml).
- name: Preflight checks
  hosts: "{hosts}"
  gather_facts: false
  roles:
    - role: clustercert.cluster.preflight

- name: Provision GPU nodes with clustercert's roles
  hosts: "{hosts}"
  gather_facts: true
  gather_subset: [min]
  pre_tasks:
    - name: Resolve the node-class profile of each host (controller side)
      ansible.builtin.set_fact:
        clustercert_node: >-
          {{{{ query('clustercert.cluster.clustercert_profile', clustercert_profile,
                     overrides=clustercert_profile_overrides | default({{}})) | first }}}}
      when: clustercert_profile is defined
  roles:
    - role: clustercert.cluster.clustercert_defaults
    - role: clustercert.cluster.nvidia_repos
    - role: clustercert.cluster.tuning
    - role: clustercert.cluster.ofed
    - role: clustercert.cluster.nvidia_driver
    - role: clustercert.cluster.rolling_reboot
      when: (nvidia_driver_reboot_required | default(false) | bool) or (tuning_reboot_required | default(false) | bool)
    - role: clustercert.cluster.fabricmanager
    - role: clustercert.cluster.nvidia_peermem
    - role: clustercert.cluster.nccl_tools
    - role: clustercert.cluster.cluster_ssh
    - role: clustercert.cluster.container_toolkit
    - role: clustercert.cluster.ib_redundancy
    - role: clustercert.cluster.timesync
      when: timesync_servers | length > 0
    - role: clustercert.cluster.node_check
"""  # noqa: E501


def clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}


def build_and_install(tmp: Path) -> Path:
    """`ansible-galaxy collection build` from the repository root, then `collection install` of the tarball
    into ``tmp/collections``; the collections path."""
    env = clean_env()
    env["ANSIBLE_LOCAL_TEMP"] = str(tmp / "ansible-tmp")
    for argv, cwd in (
        ([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(tmp / "dist")], REPO),
        (None, tmp),
    ):
        if argv is None:
            tarball = next((tmp / "dist").glob(f"{NAMESPACE}-{NAME}-*.tar.gz"))
            argv = [
                str(BIN / "ansible-galaxy"),
                "collection",
                "install",
                "-p",
                str(tmp / "collections"),
                str(tarball),
            ]
        p = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=str(cwd), timeout=300)
        assert p.returncode == 0, " ".join(argv) + "\n" + p.stdout[-3000:] + p.stderr[-2000:]
    assert (tmp / "collections" / "ansible_collections" / NAMESPACE / NAME / "roles").is_dir()
    return tmp / "collections"


def write_site(site: Path, collections: Path, hosts: str = "all") -> Path:
    """The site's project: site.yml, group_vars/all/clustercert.yml (the collection's mapping), an ansible.cfg
    of the site's own (its collections path, pipelining; host keys checked, as Ansible's default). The
    playbook's path."""
    (site / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(
        collections / "ansible_collections" / NAMESPACE / NAME / "playbooks/group_vars/all/profile.yml",
        site / "group_vars" / "all" / "clustercert.yml",
    )
    (site / "ansible.cfg").write_text(
        f"[defaults]\ncollections_path = {collections}\nroles_path = {site / 'roles'}\n"
        "[ssh_connection]\npipelining = True\n"
    )
    (site / "roles").mkdir(exist_ok=True)
    playbook = site / "site.yml"
    playbook.write_text(PLAYBOOK.format(hosts=hosts))
    return playbook


def site_env(site: Path, collections: Path, **extra: str) -> dict:
    """A site's controller: only the site's ansible.cfg and the installed collection (no ANSIBLE_* of the
    caller); this Python, so the profile lookup imports clustercert as ansible-playbook's Python."""
    env = clean_env()
    env.update({
        "ANSIBLE_CONFIG": str(site / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(collections),
        "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "False",
        "ANSIBLE_LOCAL_TEMP": str(site / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "CLUSTERCERT_HOME": str(site / "state"),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHON": sys.executable,
    })
    env.update(extra)
    return env
