"""Role layout and house rules that need no Ansible run."""

from __future__ import annotations

import re

import pytest
import yaml
from provisioning_helpers import REPO, ROLES

ROLE_NAMES = ["nvidia_repos", "nvidia_driver", "fabricmanager", "ofed", "nvidia_peermem", "nccl_tools",
              "container_toolkit", "ib_redundancy", "tuning", "rolling_reboot", "timesync",
              "cluster_ssh"]
# roles with their own entry playbook, not bootstrap's: the same layout and house rules
OWN_PLAYBOOK = {"node_check": "playbooks/node_check.yml"}


def test_the_bootstrap_playbook_tags_every_role_once():
    plays = yaml.safe_load((REPO / "playbooks/bootstrap.yml").read_text())
    seen = {}
    for play in plays:
        for role in play.get("roles", []):
            seen[role["role"]] = role["tags"]
    assert set(seen) == set(ROLE_NAMES)
    for name, tags in seen.items():
        assert name in tags, f"{name} is not tagged {name}"
    reboot = next(p for p in plays if p.get("hosts") == "clustercert_reboot_True")
    assert reboot["serial"] == "{{ clustercert_max_parallel_reboots | default(1) }}"
    assert reboot["max_fail_percentage"] == 0


def test_a_role_with_its_own_playbook_is_tagged_there():
    for role, playbook in OWN_PLAYBOOK.items():
        plays = yaml.safe_load((REPO / playbook).read_text())
        assert [r["tags"] for p in plays for r in p.get("roles", []) if r["role"] == role] == [[role]]


@pytest.mark.parametrize("role", ROLE_NAMES + list(OWN_PLAYBOOK))
def test_role_layout(role):
    d = ROLES / role
    for sub in ("defaults/main.yml", "handlers/main.yml", "meta/argument_specs.yml", "README.md",
                "tasks/main.yml", "tasks/preflight.yml", "tasks/install.yml", "tasks/configure.yml",
                "vars/Debian.yml", "vars/RedHat.yml"):
        assert (d / sub).is_file(), f"{role}: {sub} missing"
    # Ubuntu reads vars/Debian.yml (its os_family) unless the role's Ubuntu values differ (tasks/vars.yml)
    ubuntu = d / "vars/Ubuntu.yml"
    assert not ubuntu.exists() or ubuntu.read_bytes() != (d / "vars/Debian.yml").read_bytes(), \
        f"{role}: vars/Ubuntu.yml repeats vars/Debian.yml"
    main = (d / "tasks/main.yml").read_text()
    for phase in ("preflight.yml", "install.yml", "configure.yml"):
        assert phase in main


def test_no_link_in_the_collection_and_the_shared_task_files_are_equal():
    """Every file of the collection (roles, playbooks, plugins, meta) is a real file, so an installed copy,
    ansible-lint and a reader see it where it is; the two task files every role has alike (the three phases
    after the distribution's variables) are equal, written once in spirit and checked here."""
    links = [str(p.relative_to(REPO)) for top in ("roles", "playbooks", "plugins", "meta")
             for p in (REPO / top).rglob("*") if p.is_symlink()]
    assert links == []
    reference = {f: (ROLES / "nvidia_driver" / "tasks" / f).read_text() for f in ("main.yml", "vars.yml")}
    for role in ROLE_NAMES + list(OWN_PLAYBOOK):
        assert (ROLES / role / "tasks/vars.yml").read_text() == reference["vars.yml"], role
        if role != "rolling_reboot":  # skips its phases in check mode
            assert (ROLES / role / "tasks/main.yml").read_text() == reference["main.yml"], role


@pytest.mark.parametrize("role", ROLE_NAMES + list(OWN_PLAYBOOK))
def test_public_variables_are_prefixed_and_documented(role):
    d = ROLES / role
    defaults = yaml.safe_load((d / "defaults/main.yml").read_text()) or {}
    spec = yaml.safe_load((d / "meta/argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    for name in defaults:
        assert name.startswith(role + "_"), f"{role}: default {name} lacks the role prefix"
        assert name in spec, f"{role}: default {name} is not in meta/argument_specs.yml"
    for name in spec:
        assert name.startswith(role + "_"), f"{role}: option {name} lacks the role prefix"
    for f in (d / "vars").glob("*.yml"):
        for name in yaml.safe_load(f.read_text()) or {}:
            assert re.match(rf"^_*{role}_", name), f"{f}: {name} lacks the role prefix"


@pytest.mark.parametrize("role", ROLE_NAMES + list(OWN_PLAYBOOK))
def test_no_shell_and_no_blanket_changed_when_false(role):
    for f in (ROLES / role / "tasks").glob("*.yml"):
        tasks = yaml.safe_load(f.read_text()) or []
        for task in tasks:
            assert "ansible.builtin.shell" not in task and "shell" not in task, (
                f"{f}: {task.get('name')} uses shell"
            )
            if task.get("changed_when") is False or task.get("changed_when") == "false":
                # only read-only commands may say they never change anything
                argv = str(task.get("ansible.builtin.command", {}))
                # (clustercert_dpkg_query_argv: `dpkg-query -W`, clustercert_defaults' filter plugin;
                # `nvidia-smi topo -m`: ib_redundancy reads the GPU-NIC topology for the compute rails' names)
                assert any(
                    word in argv
                    for word in (
                        "show",
                        "--info",
                        "cat",
                        "waitsync",
                        "clustercert_dpkg_query_argv",
                        "topo -m",
                    )
                ), f"{f}: {task['name']}"
