"""The collection's package step, clustercert.cluster.packages (plugins/action/packages.py, documented in
plugins/modules/packages.py), that every role installs its packages through: its decision (what goes to the
package manager, what is held) over dpkg-query lines as Debian 12's dpkg-query prints them with the roles'
format (tests/provisioning/test_package_filters.py), and the plugin run by ansible-playbook on this host --
its real dpkg-query, with stand-ins for apt and dpkg_selections (a test library: ansible.legacy modules)
that record how they were called and change nothing."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest
import yaml
from provisioning_helpers import BIN, REPO, ROLES, ansible_env

sys.path.insert(0, str(REPO / "collections"))  # ansible_collections.clustercert.cluster: this repository
from ansible.errors import AnsibleActionFail  # noqa: E402
from ansible_collections.clustercert.cluster.plugins.action import packages as pa  # noqa: E402
from ansible_collections.clustercert.cluster.plugins.filter.clustercert_packages import (  # noqa: E402
    DPKG_QUERY_FORMAT,
)
from ansible_collections.clustercert.cluster.plugins.modules import packages as docs  # noqa: E402

DPKG = ("libnccl2\t2.26.2-1+cuda12.8\thi \n"
        "libnccl-dev\t2.26.2-1+cuda12.8\tii \n"
        "datacenter-gpu-manager\t1:3.3.9\thi \n"
        "chrony\t\tun \n")
NCCL = ["libnccl2=2.26.2-1+cuda12.8", "libnccl-dev=2.26.2-1+cuda12.8", "datacenter-gpu-manager=1:3.3.9*"]
HAS_DPKG = subprocess.run(["which", "dpkg-query"], capture_output=True).returncode == 0


def test_an_apt_set_goes_to_apt_only_where_dpkg_lacks_a_package():
    assert pa.to_install("apt", NCCL, DPKG) == []                      # all at their pins: apt is skipped
    assert pa.to_install("apt", [*NCCL, "chrony"], DPKG) == ["chrony"]  # known to dpkg, not installed
    drifted = ["libnccl2=2.27.3-1+cuda12.8", *NCCL[1:]]
    assert pa.to_install("apt", drifted, DPKG) == ["libnccl2=2.27.3-1+cuda12.8"]


def test_a_dpkg_query_that_did_not_finish_leaves_the_decision_to_apt():
    assert pa.dpkg_query_output(1, DPKG) == DPKG  # 1: a package dpkg does not know; the others are listed
    for rc in (124, 127, 2, None):  # timed out, no dpkg-query, failed, not run
        assert pa.to_install("apt", NCCL, pa.dpkg_query_output(rc, DPKG)) == NCCL


def test_the_dpkg_query_is_the_filters_one_under_a_time_limit():
    argv = shlex.split(pa.dpkg_query_command(["libnccl2=2.26*", "libnccl2", "openssh-client:amd64"], 30))
    assert argv == [
        "timeout",
        "30",
        "dpkg-query",
        "-W",
        "-f",
        DPKG_QUERY_FORMAT,
        "libnccl2",
        "openssh-client",
    ]


def test_another_package_manager_decides_itself():
    specs = ["libnccl-2.26.2-1+cuda12.8", "chrony"]
    assert pa.to_install("dnf", specs, "") == specs
    assert pa.to_hold("dnf", ["libnccl"], "", installed=True) == []  # dnf: versionlock, not dpkg holds


def test_every_package_is_held_again_after_an_install_else_only_the_unheld():
    names = ["libnccl2", "libnccl-dev", "datacenter-gpu-manager"]
    assert pa.to_hold("apt", names, DPKG, installed=False) == ["libnccl-dev"]
    assert pa.to_hold("apt", names, DPKG, installed=True) == names  # apt drops a moved package's hold
    assert pa.to_hold("apt", [], DPKG, installed=True) == []


def test_a_pinned_set_may_move_held_packages_and_downgrade():
    assert pa.install_args("apt", NCCL, pinned=True) == {
        "name": NCCL, "state": "present", "allow_downgrade": True, "allow_change_held_packages": True,
        "install_recommends": False}
    assert pa.install_args("dnf", ["chrony"], pinned=True) == {"name": ["chrony"], "state": "present",
                                                               "allow_downgrade": True}
    assert pa.install_args("apt", ["chrony"], pinned=False) == {"name": ["chrony"], "state": "present"}
    with pytest.raises(AnsibleActionFail, match="zypper"):
        pa.install_args("zypper", ["chrony"], pinned=True)


def test_the_versionlock_block_is_marked_by_its_name():
    args = pa.versionlock_args(
        ["libnccl-*:2.26.2-1+cuda12.8*", "nvbandwidth-*:0.7*"], "clustercert nccl_tools"
    )
    assert (
        args["path"] == "/etc/dnf/plugins/versionlock.list"
        and args["marker"] == "# {mark} clustercert nccl_tools"
    )
    assert args["block"] == "libnccl-*:2.26.2-1+cuda12.8*\nnvbandwidth-*:0.7*"


def test_the_argument_spec_is_the_documented_one():
    options = yaml.safe_load(docs.DOCUMENTATION)["options"]
    documented = {name: {k: o[k] for k in ("type", "elements", "required", "default") if k in o}
                  for name, o in options.items()}
    assert pa.ARGUMENT_SPEC == documented


def test_every_role_installs_its_packages_through_the_action():
    """No role calls a package module itself: the package step is the action's (dnf's module stream, a
    repository switch of nvidia_driver on RHEL, is not a package install)."""
    users = set()
    for f in ROLES.glob("*/tasks/*.yml"):
        for task in yaml.safe_load(f.read_text()) or []:
            for module in ("apt", "package", "dnf", "yum", "dpkg_selections"):
                args = task.get(f"ansible.builtin.{module}", task.get(module))
                if args is not None:
                    assert module == "dnf" and str(args["name"]).startswith("@"), f"{f}: {task['name']}"
            if "clustercert.cluster.packages" in task:
                users.add(f.parent.parent.name)
            assert "versionlock" not in str(task.get("ansible.builtin.blockinfile", {})), (
                f"{f}: {task['name']}"
            )
    assert users == {"cluster_ssh", "container_toolkit", "fabricmanager", "ib_redundancy", "nccl_tools",
                     "node_check", "nvidia_driver", "ofed", "timesync"}


# -- the plugin run by ansible-playbook on this host ------------------------------------------------------

FAKE_MODULE = '''\
#!/usr/bin/python
import json, os
from ansible.module_utils.basic import AnsibleModule
module = AnsibleModule(argument_spec={SPEC}, supports_check_mode=True)
with open(os.environ["CLUSTERCERT_FAKE_LOG"], "a") as log:
    log.write(json.dumps({{"module": "{NAME}", "args": module.params, "check_mode": module.check_mode}}) + "\\n")
{EXIT}
'''  # noqa: E501
FAKE_APT = FAKE_MODULE.format(
    NAME="apt",
    SPEC=(
        '{"name": {"type": "list", "elements": "str"}, "state": {}, "allow_downgrade": {"type": "bool"}, '
        '"allow_change_held_packages": {"type": "bool"}, "install_recommends": {"type": "bool"}}'
    ),
    EXIT='module.exit_json(changed=True, diff={"prepared": "apt would install " + " '
         '".join(module.params["name"])})',
)
FAKE_DPKG_SELECTIONS = FAKE_MODULE.format(
    NAME="dpkg_selections",
    SPEC='{"name": {}, "selection": {}}',
    EXIT='module.exit_json(changed=True, before="install", after="hold")',
)


@pytest.fixture
def play(tmp_path):
    """Run one clustercert.cluster.packages task on this host (local connection, facts not gathered: the
    action reads pkg_mgr itself) with the stand-ins; returns (its registered result, the stand-ins' calls)."""
    library = tmp_path / "library"
    library.mkdir()
    (library / "apt.py").write_text(FAKE_APT)
    (library / "dpkg_selections.py").write_text(FAKE_DPKG_SELECTIONS)
    log, out = tmp_path / "calls.jsonl", tmp_path / "result.json"

    def run(args: dict, *flags: str) -> tuple[dict, list[dict]]:
        log.write_text("")
        (tmp_path / "pb.yml").write_text(yaml.safe_dump([{
            "name": "packages", "hosts": "localhost", "gather_facts": False,
            "tasks": [{"name": "The package step", "clustercert.cluster.packages": args, "register": "r"},
                      {"name": "Keep the result", "ansible.builtin.copy": {
                          "content": "{{ r | to_json }}", "dest": str(out), "mode": "0644"},
                       "check_mode": False, "diff": False}]}]))
        p = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e",
                            f"ansible_python_interpreter={sys.executable}", str(tmp_path / "pb.yml"), *flags],
                           capture_output=True, text=True, timeout=120,
                           env=ansible_env(ANSIBLE_LIBRARY=str(library), CLUSTERCERT_FAKE_LOG=str(log)))
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
        return json.loads(out.read_text()), [json.loads(x) for x in log.read_text().splitlines()]

    return run


def _installed_libc6() -> str:
    return subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", "libc6"], capture_output=True, text=True
    ).stdout


@pytest.mark.skipif(not HAS_DPKG, reason="no dpkg on this host")
def test_a_set_dpkg_already_has_runs_nothing_and_changes_nothing(play):
    result, calls = play({"name": [f"libc6={_installed_libc6()}", "dpkg"], "pinned": True})
    assert (result["changed"], result["package_manager"], result["unmet"], calls) == (False, "apt", [], [])


@pytest.mark.skipif(not HAS_DPKG, reason="no dpkg on this host")
def test_check_mode_reports_the_install_and_the_holds_it_would_make(play):
    """A package dpkg lacks sends the whole set to apt in one transaction, in check mode; then every package
    of the hold list is held (in check mode too): the task reports the would-be changes, with apt's diff."""
    specs = [f"libc6={_installed_libc6()}", "clustercert-no-such-package"]
    result, calls = play({"name": specs, "pinned": True, "hold": ["libc6"]}, "--check", "--diff")
    assert calls == [
        {"module": "apt", "check_mode": True, "args": {
            "name": specs, "state": "present", "allow_downgrade": True, "allow_change_held_packages": True,
            "install_recommends": False}},
        {"module": "dpkg_selections", "check_mode": True, "args": {"name": "libc6", "selection": "hold"}}]
    assert result["changed"] and result["installed"] and result["unmet"] == ["clustercert-no-such-package"]
    assert result["held"] == ["libc6"]
    assert result["diff"][0] == {"prepared": "apt would install " + " ".join(specs)}
    assert result["diff"][1]["after"] == "libc6 hold\n"


@pytest.mark.skipif(not HAS_DPKG, reason="no dpkg on this host")
def test_a_hold_dropped_on_its_own_is_the_only_change(play):
    """The set is installed at its pin (apt is skipped); a package dpkg does not list on hold is held again,
    and only it."""
    held = set(subprocess.run(["apt-mark", "showhold"], capture_output=True, text=True).stdout.split())
    if "libc6" in held:
        pytest.skip("libc6 is held on this host")
    result, calls = play({"name": [f"libc6={_installed_libc6()}"], "pinned": True, "hold": ["libc6"]})
    assert [c["module"] for c in calls] == ["dpkg_selections"] and calls[0]["check_mode"] is False
    assert (result["changed"], result["installed"], result["held"]) == (True, False, ["libc6"])


# -- every role's package step, per distribution ----------------------------------------------------------

ROLES_PLAY = """\
- name: The roles' package steps for recorded distributions, in check mode, with stand-in package modules
  hosts: all
  # one host at a time: with several, Ansible queues the roles' included tasks in the order the hosts'
  # include results come back, which the load of the machine decides (a host's calls were then logged in
  # another role order: the test's flake)
  serial: 1
  gather_facts: false
  environment:
    CLUSTERCERT_FAKE_HOST: "{{ inventory_hostname }}"
  vars_files:
    - %(repo)s/roles/clustercert_defaults/defaults/main.yml
    - %(repo)s/playbooks/group_vars/all/profile.yml
  vars:
    fabricmanager_enabled: true
  tasks:
    - name: Use the recorded facts
      recorded_facts:
        path: "%(facts)s/{{ render_facts }}.json"
    - name: Resolve the profile
      ansible.builtin.set_fact:
        clustercert_node: "{{ query('clustercert.cluster.clustercert_profile', clustercert_profile,
                              overrides=clustercert_profile_overrides | default({})) | first }}"
    - name: Load the roles' variables and run their side-effect-free preflight
      ansible.builtin.include_role:
        name: "{{ item.0 }}"
        tasks_from: "{{ item.1 }}"
        public: true
      loop: "{{ roles | product(['vars.yml']) + pinned | product(['preflight.yml']) }}"
    - name: Run the install step
      ansible.builtin.include_role:
        name: "{{ item }}"
        tasks_from: install.yml
      loop: "{{ roles }}"
      # nvidia_driver's module stream is ansible.builtin.dnf (no stand-in for it): its apt hosts only
      when: item != 'nvidia_driver' or ansible_facts.pkg_mgr == 'apt'
"""
FAKE_ANY = FAKE_MODULE.replace(
    '"module": "{NAME}"', '"module": "{NAME}", "host": os.environ["CLUSTERCERT_FAKE_HOST"]'
)


def test_each_role_hands_its_set_holds_and_locks_to_the_package_manager(tmp_path):
    """Every package-installing role's install step for recorded Debian 12 and Rocky 9 nodes (the roles'
    variables, profile and pins as bootstrap resolves them), in check mode: the sets, pinned or not, the holds
    and the versionlock lines each role gave apt, dpkg_selections and dnf before it had this one step."""
    library = tmp_path / "library"
    library.mkdir()
    (library / "recorded_facts.py").write_text(
        (REPO / "tests/provisioning/library/recorded_facts.py").read_text()
    )
    spec_any = '{"name": {"type": "raw"}, "state": {}, "allow_downgrade": {"type": "bool"}, ' \
               '"allow_change_held_packages": {"type": "bool"}, "install_recommends": {"type": "bool"}}'
    for name in ("apt", "dnf"):
        (library / f"{name}.py").write_text(FAKE_ANY.format(NAME=name, SPEC=spec_any,
                                                            EXIT="module.exit_json(changed=True)"))
    (library / "dpkg_selections.py").write_text(FAKE_ANY.format(
        NAME="dpkg_selections", SPEC='{"name": {}, "selection": {}}',
        EXIT='module.exit_json(changed=True, before="install", after="hold")'))
    (library / "blockinfile.py").write_text(FAKE_ANY.format(
        NAME="blockinfile", SPEC='{k: {"type": "raw"} for k in ("path", "create", "owner", "group", "mode", '
                                 '"marker", "block")}', EXIT="module.exit_json(changed=True)"))
    # dpkg knows none of the packages: every set goes to apt, and every hold after it (the decision on what
    # dpkg has is the tests above'; this one is about what each role hands over)
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "dpkg-query").write_text("#!/bin/sh\nexit 1\n")
    (fake_bin / "dpkg-query").chmod(0o755)
    roles = ["nvidia_driver", "fabricmanager", "ofed", "nccl_tools", "container_toolkit", "ib_redundancy",
             "timesync", "cluster_ssh"]
    (tmp_path / "pb.yml").write_text(ROLES_PLAY % {"repo": REPO, "facts": REPO / "tests/provisioning/facts"})
    log = tmp_path / "calls.jsonl"
    log.write_text("")
    env = ansible_env(ANSIBLE_LIBRARY=str(library), CLUSTERCERT_FAKE_LOG=str(log))
    env["PATH"] = f"{fake_bin}:{env['PATH']}"
    p = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            str(REPO / "tests/provisioning/inventory.yml"),
            "--limit",
            "debian12,ubuntu2204,rocky9",
            str(tmp_path / "pb.yml"),
            "--check",
            "-e",
            json.dumps(
                {
                    "roles": roles,
                    "pinned": ["nvidia_driver", "fabricmanager", "ofed", "nccl_tools", "container_toolkit"],
                    "ansible_python_interpreter": sys.executable,
                }
            ),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    calls = [json.loads(x) for x in log.read_text().splitlines()]
    assert calls and all(c["check_mode"] for c in calls)  # --check: the stand-ins were asked to simulate
    pinned_apt = {"allow_downgrade": True, "allow_change_held_packages": True, "install_recommends": False}

    def seen(host: str) -> list:
        out = []
        for c in (c for c in calls if c["host"] == host):
            a = {k: v for k, v in c["args"].items() if v is not None}
            if c["module"] == "dpkg_selections":
                assert a["selection"] == "hold"
                out.append(("hold", a["name"]))
            elif c["module"] == "blockinfile":
                assert (a["path"], a["create"], a["mode"]) == (
                    "/etc/dnf/plugins/versionlock.list",
                    True,
                    "0644",
                )
                out.append(("lock", a["marker"], a["block"].splitlines()))
            else:
                extra = {k: v for k, v in a.items() if k not in ("name", "state")}
                assert a["state"] == "present"
                out.append((c["module"], a["name"], "pinned" if extra else "as shipped"))
                assert extra in ({}, pinned_apt if c["module"] == "apt" else {"allow_downgrade": True})
        return out

    nccl = ["libnccl2", "libnccl-dev", "perftest", "nccl-tests", "nvbandwidth", "datacenter-gpu-manager"]
    toolkit = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
               "libnvidia-container1"]
    driver = ["nvidia-open", "nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-persistenced"]
    assert seen("debian12") == [
        ("apt", ["linux-headers-6.1.0-37-amd64"] + [f"{p}=570.172.08-*" for p in driver], "pinned"),
        *[("hold", p) for p in driver],
        ("apt", ["nvidia-fabricmanager-570=570.172.08-*"], "pinned"), ("hold", "nvidia-fabricmanager-570"),
        ("apt", ["doca-ofed=2.10.0*"], "pinned"), ("hold", "doca-ofed"),
        ("apt", ["libnccl2=2.26.2-1+cuda12.8", "libnccl-dev=2.26.2-1+cuda12.8", "perftest=25.01.0*",
                 "nccl-tests=2.14.1*", "nvbandwidth=0.7*", "datacenter-gpu-manager=1:3.3.9*"], "pinned"),
        *[("hold", p) for p in nccl],
        ("apt", ["iperf3", "fio", "numactl", "python3-torch", "openmpi-bin"], "as shipped"),
        ("apt", [f"{p}=1.17.8*" for p in toolkit], "pinned"), *[("hold", p) for p in toolkit],
        ("apt", ["chrony"], "as shipped"), ("apt", ["openssh-client"], "as shipped")]
    # Ubuntu reads the Debian.yml of the roles without an Ubuntu.yml: the same names as Debian 12
    ubuntu = seen("ubuntu2204")
    assert ("apt", ["chrony"], "as shipped") in ubuntu and ("apt", ["openssh-client"], "as shipped") in ubuntu
    assert ("apt", ["nvidia-fabricmanager-570=570.172.08-*"], "pinned") in ubuntu
    assert [c for c in ubuntu if c[0] == "hold"][-4:] == [("hold", p) for p in toolkit]
    assert ("apt", ["iperf3", "fio", "numactl", "openmpi-bin"], "as shipped") in ubuntu
    # a bond on networkd, switch-managed SM
    assert not [c for c in ubuntu if c[1] in (["ifenslave"], ["opensm"])]
    assert seen("rocky9") == [
        ("dnf", ["nvidia-fabric-manager-570.172.08"], "pinned"),
        ("lock", "# {mark} clustercert fabricmanager", ["nvidia-fabric-manager-*:570.172.08-*"]),
        # inbox: neither held nor locked
        ("dnf", ["rdma-core", "libibverbs-utils", "infiniband-diags"], "pinned"),
        ("dnf", ["libnccl-2.26.2-1+cuda12.8", "libnccl-devel-2.26.2-1+cuda12.8", "perftest-25.01.0",
                 "nccl-tests-2.14.1", "nvbandwidth-0.7", "datacenter-gpu-manager-3.3.9"], "pinned"),
        ("lock", "# {mark} clustercert nccl_tools", [
            "libnccl-*:2.26.2-1+cuda12.8*", "libnccl-devel-*:2.26.2-1+cuda12.8*", "perftest-*:25.01.0*",
            "nccl-tests-*:2.14.1*", "nvbandwidth-*:0.7*", "datacenter-gpu-manager-*:3.3.9*"]),
        ("dnf", ["iperf3", "fio", "numactl", "openmpi"], "as shipped"),
        ("dnf", [f"{p}-1.17.8*" for p in toolkit], "pinned"),
        ("lock", "# {mark} clustercert container_toolkit", [f"{p}-*:1.17.8*" for p in toolkit]),
        ("dnf", ["opensm"], "as shipped"),  # its subnet manager
        ("dnf", ["chrony"], "as shipped"), ("dnf", ["openssh-clients"], "as shipped")]
