"""Action plugin ``clustercert.cluster.packages``: the roles' package step, written once.

Documented in plugins/modules/packages.py (``ansible-doc clustercert.cluster.packages``). On the controller:
one read-only ``dpkg-query`` where apt manages the host's packages, the decision below (pure functions, the
package filters' reading of dpkg: plugins/filter/clustercert_packages.py), then ansible.builtin's own modules
(apt or dnf, dpkg_selections, blockinfile) with the task's become, check mode and diff mode.
"""

from __future__ import annotations

import shlex

from ansible.errors import AnsibleActionFail
from ansible.module_utils.facts.system.pkg_mgr import PKG_MGRS
from ansible.plugins.action import ActionBase
from ansible.utils.vars import combine_vars
from ansible_collections.clustercert.cluster.plugins.filter.clustercert_packages import (
    dpkg_query_argv,
    unheld_packages,
    unmet_packages,
)

# The options of plugins/modules/packages.py's DOCUMENTATION (tests/provisioning/test_packages_action.py
# holds the two equal).
ARGUMENT_SPEC = {
    "name": {"type": "list", "elements": "str", "required": True},
    "pinned": {"type": "bool", "default": False},
    "hold": {"type": "list", "elements": "str", "default": []},
    "versionlock": {"type": "list", "elements": "str", "default": []},
    "versionlock_block": {"type": "str"},
    "query_timeout": {"type": "int", "default": 60},
}
DNF_MANAGERS = ("dnf", "dnf5")
VERSIONLOCK_LIST = "/etc/dnf/plugins/versionlock.list"
BUILTIN_MANAGERS = frozenset(m["name"] for m in PKG_MGRS)


def dpkg_query_command(specs, timeout_s):
    """The read-only shell command that lists the specs' packages for the decision, under a time limit."""
    return shlex.join(["timeout", str(int(timeout_s)), *dpkg_query_argv(specs)])


def dpkg_query_output(rc, stdout):
    """What the decision reads of the dpkg-query: its output where it ran (rc 1: a package dpkg does not
    know, listed or not), else nothing (not run, failed, timed out), so every spec counts as unmet."""
    return stdout if rc in (0, 1) else ""


def to_install(manager, specs, dpkg_stdout):
    """The specs that send the set to the package manager: apt, those dpkg does not satisfy (none: the
    transaction is skipped); another manager decides itself, so every spec."""
    if manager == "apt":
        return unmet_packages(specs, dpkg_stdout)
    return list(specs)


def install_args(manager, specs, pinned):
    """The arguments of the package manager's module for the whole set (one transaction)."""
    args = {"name": list(specs), "state": "present"}
    if pinned and manager == "apt":
        args.update(allow_downgrade=True, allow_change_held_packages=True, install_recommends=False)
    elif pinned and manager in DNF_MANAGERS:
        args.update(allow_downgrade=True)
    elif pinned:
        raise AnsibleActionFail(
            f"pinned package sets need apt or dnf; this host's package manager is {manager}"
        )
    return args


def to_hold(manager, names, dpkg_stdout, installed):
    """The packages to hold (apt only): every one after an install (apt drops a package's hold when it
    moves it to another version), else those dpkg does not list on hold."""
    if manager != "apt":
        return []
    return list(names) if installed else unheld_packages(names, dpkg_stdout)


def versionlock_args(lines, block):
    """The blockinfile arguments that keep the versionlock lines in their marked block."""
    return {"path": VERSIONLOCK_LIST, "create": True, "owner": "root", "group": "root", "mode": "0644",
            "marker": "# {mark} " + block, "block": "\n".join(lines)}


def hold_diff(changed_holds):
    """The dpkg selections a run changes, as a diff (package and selection per line)."""
    return {"before_header": "dpkg selections", "after_header": "dpkg selections",
            "before": "".join(f"{name} {before}\n" for name, before in changed_holds),
            "after": "".join(f"{name} hold\n" for name, _before in changed_holds)}


class _StepFailed(Exception):
    """A module the action ran failed: its result, and what the action was doing."""

    def __init__(self, res, msg):
        super().__init__(msg)
        self.res, self.msg = res, msg


class ActionModule(ActionBase):

    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        self._supports_check_mode = True
        self._supports_async = False
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp

        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        if args["versionlock"] and not args["versionlock_block"]:
            raise AnsibleActionFail("versionlock_block is required with versionlock")
        specs = args["name"]
        manager = self._package_manager(task_vars)
        result.update(package_manager=manager, unmet=[], installed=False, held=[], versionlock_changed=False,
                      changed=False)
        diffs = []

        dpkg_stdout = ""
        if manager == "apt" and (specs or args["hold"]):
            q = self._low_level_execute_command(
                dpkg_query_command(specs + args["hold"], args["query_timeout"])
            )
            dpkg_stdout = dpkg_query_output(q.get("rc"), q.get("stdout", ""))

        try:
            self._install(manager, args, dpkg_stdout, task_vars, result, diffs)
            self._hold(manager, args, dpkg_stdout, task_vars, result, diffs)
            self._versionlock(manager, args, task_vars, result, diffs)
        except _StepFailed as exc:
            return self._failed(result, exc.res, exc.msg)

        result["changed"] = result["installed"] or bool(result["held"]) or result["versionlock_changed"]
        if diffs and self._task.diff:
            result["diff"] = diffs
        return result

    def _module(self, name, module_args, task_vars, diffs, failure):
        """Run one module; its diff joins ``diffs``; a failure stops the action (``failure`` says what)."""
        res = self._execute_module(module_name=name, module_args=module_args, task_vars=task_vars)
        if res.get("failed"):
            raise _StepFailed(res, failure)
        if res.get("diff"):
            diffs.extend(res["diff"] if isinstance(res["diff"], list) else [res["diff"]])
        return res

    def _install(self, manager, args, dpkg_stdout, task_vars, result, diffs):
        """What is missing or at another version, installed in one transaction of the host's manager."""
        specs = args["name"]
        result["unmet"] = unmet = to_install(manager, specs, dpkg_stdout)
        if unmet:
            module = ("ansible.legacy." + manager) if manager in BUILTIN_MANAGERS else manager
            res = self._module(module, install_args(manager, specs, args["pinned"]), task_vars, diffs,
                               f"{manager} could not install {', '.join(specs)}")
            result["installed"] = bool(res.get("changed"))

    def _hold(self, manager, args, dpkg_stdout, task_vars, result, diffs):
        """Each package to hold that is not held (or every one, after an install), held."""
        changed_holds = []
        for name in to_hold(manager, args["hold"], dpkg_stdout, result["installed"]):
            res = self._module(
                "ansible.legacy.dpkg_selections",
                {"name": name, "selection": "hold"},
                task_vars,
                [],
                f"could not hold {name}",
            )
            if res.get("changed"):
                changed_holds.append((name, res.get("before", "")))
        result["held"] = [name for name, _before in changed_holds]
        if changed_holds:
            diffs.append(hold_diff(changed_holds))

    def _versionlock(self, manager, args, task_vars, result, diffs):
        """dnf's versionlock list: the role's block of it, where the host's manager is dnf."""
        if manager in DNF_MANAGERS and args["versionlock"]:
            res = self._module(
                "ansible.legacy.blockinfile",
                versionlock_args(args["versionlock"], args["versionlock_block"]),
                task_vars,
                diffs,
                f"could not write {VERSIONLOCK_LIST}",
            )
            result["versionlock_changed"] = bool(res.get("changed"))

    @staticmethod
    def _failed(result, res, msg):
        result.update({k: v for k, v in res.items() if k not in ("changed", "invocation")})
        result.update(failed=True, msg=f"{msg}: {res.get('msg', '')}".rstrip(": "))
        return result

    def _package_manager(self, task_vars):
        """The host's ansible_facts.pkg_mgr, gathered (subset pkg_mgr) where the facts lack it, as
        ansible.builtin.package finds it."""
        if self._task.delegate_to:
            host_vars = task_vars.get("hostvars", {}).get(self._task.delegate_to, {})
            tvars = combine_vars(self._task.vars, task_vars.get("delegated_vars", {}))
        else:
            host_vars = tvars = task_vars
        manager = tvars.get("ansible_package_use") or host_vars.get("ansible_facts", {}).get("pkg_mgr")
        if not manager:
            facts = self._execute_module(module_name="ansible.legacy.setup",
                                         module_args={"filter": "ansible_pkg_mgr", "gather_subset": "!all"},
                                         task_vars=task_vars)
            if facts.get("failed"):
                raise AnsibleActionFail(f"could not read the host's package manager: {facts.get('msg')}")
            manager = facts.get("ansible_facts", {}).get("ansible_pkg_mgr")
        if not manager or manager == "unknown":
            raise AnsibleActionFail("could not tell the host's package manager (ansible_facts.pkg_mgr)")
        return manager
