"""An Ansible user's hands (issue 34): a site's playbook of every role by FQCN from the built collection is
clean under ansible-lint's production profile (no load-failure: every task file is a real file), and a clone
runs `ansible-playbook -i INV playbooks/bootstrap.yml` with the repository's ansible.cfg alone (the roles by
name from roles/, the collection's plugins by FQCN)."""

from __future__ import annotations

import os
import re
import subprocess

import pytest
import yaml
from consumer import build_and_install, clean_env, site_env, write_site
from provisioning_helpers import BIN, HERE, REPO, ROLES

ROLE_NAMES = sorted(p.name for p in ROLES.iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("consumer")
    collections = build_and_install(tmp)
    playbook = write_site(tmp / "site", collections)
    return {"collections": collections, "playbook": playbook, "dir": tmp / "site"}


def test_the_site_playbook_names_every_role_of_the_collection(site):
    named = {r["role"] for play in yaml.safe_load(site["playbook"].read_text()) for r in play["roles"]}
    assert named == {f"clustercert.cluster.{r}" for r in ROLE_NAMES}


def test_ansible_lint_production_is_clean_on_a_site_playbook_of_every_role(site):
    env = site_env(site["dir"], site["collections"])
    p = subprocess.run(
        [
            str(BIN / "ansible-lint"),
            "--offline",
            "--profile",
            "production",
            "--nocolor",
            "-f",
            "pep8",
            "site.yml",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(site["dir"]),
        timeout=300,
    )
    out = p.stdout + p.stderr
    assert "load-failure" not in out, out[-4000:]
    assert p.returncode == 0, out[-4000:]
    assert re.search(r"Passed: 0 failure\(s\), 0 warning\(s\)", out), out[-4000:]


def test_syntax_check_and_list_tasks_of_bootstrap_from_a_clone(tmp_path):
    """`ansible-playbook -i INV playbooks/bootstrap.yml` in the repository: its ansible.cfg (found in the
    current directory) gives the roles path and the collections path; nothing else is set."""
    env = clean_env()
    env.update(
        {
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    inv = HERE / "inventory.yml"
    syntax = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inv), "playbooks/bootstrap.yml", "--syntax-check"],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(REPO),
        timeout=300,
    )
    assert syntax.returncode == 0, syntax.stdout[-3000:] + syntax.stderr[-3000:]
    listing = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inv), "playbooks/bootstrap.yml", "--list-tasks"],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(REPO),
        timeout=300,
    )
    assert listing.returncode == 0, listing.stdout[-3000:] + listing.stderr[-3000:]
    roles = set(re.findall(r"^\s+(\w+) : ", listing.stdout, re.M))
    bootstrap_roles = {r["role"] for play in yaml.safe_load((REPO / "playbooks/bootstrap.yml").read_text())
                       for r in play.get("roles", [])}
    assert bootstrap_roles | {"preflight"} <= roles, sorted(roles)
    assert (
        "nvidia_driver : Install the driver and the running kernel's headers in one transaction"
        in listing.stdout
    )


def test_the_profile_lookup_resolves_by_fqcn_from_a_clone(tmp_path):
    """The playbooks' `query('clustercert.cluster.clustercert_profile', ...)` resolves from a clone: the
    bootstrap playbook's first pre-task, run alone on the controller (--tags always, --check)."""
    env = clean_env()
    env.update(
        {
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    pb = tmp_path / "profile.yml"
    pb.write_text("""\
- name: Resolve a profile through the collection's lookup
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Resolve
      ansible.builtin.debug:
        msg: "{{ (query('clustercert.cluster.clustercert_profile', 'h100-sxm-8x-ndr') | first).driver.branch }}"
""")  # noqa: E501
    p = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e",
                        f"ansible_python_interpreter={BIN / 'python'}", str(pb)],
                       capture_output=True, text=True, env=env, cwd=str(REPO), timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert re.search(r'"msg": "\d+"', p.stdout), p.stdout[-2000:]
