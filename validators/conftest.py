"""testinfra validators: `pytest validators/ --hosts=... --ansible-inventory=INV` (or --clustercert-profile).

The checks are clustercert's own (clustercert.checks); these modules only collect through testinfra.

Host keys are checked on every connection these tests make: testinfra's ssh backends (ssh://, and ansible://
over ssh) get ``-o StrictHostKeyChecking=yes`` first on each ssh command line (ssh keeps an option's first
value, so no --ssh-config or inventory ssh args can loosen it), Ansible itself runs with
ANSIBLE_HOST_KEY_CHECKING=True, and the paramiko backend, which accepts any key, is refused.
"""

from __future__ import annotations

import os

import pytest

from clustercert.checks import HostContext
from clustercert.checks.run import host_context
from clustercert.model.inventory import load_inventory
from clustercert.model.profile import load_profile

HOST_KEY_OPTION = "-o StrictHostKeyChecking=yes"


def enforce_host_keys() -> None:
    os.environ["ANSIBLE_HOST_KEY_CHECKING"] = "True"
    from testinfra.backend import ssh as ssh_backend

    build = ssh_backend.SshBackend._build_ssh_command
    if getattr(build, "clustercert_checked", False):
        return

    def checked(self, command):
        cmd, args = build(self, command)
        cmd.insert(cmd.index("ssh") + 1, HOST_KEY_OPTION)
        return cmd, args

    checked.clustercert_checked = True
    ssh_backend.SshBackend._build_ssh_command = checked
    try:
        from testinfra.backend import paramiko as paramiko_backend
    except (ImportError, RuntimeError):  # RuntimeError: testinfra's own "install paramiko"
        return

    def refuse(self, *args, **kwargs):
        raise RuntimeError("clustercert validators: testinfra's paramiko backend does not check host keys "
                           "(it accepts any key); use ssh:// or ansible:// over ssh")

    paramiko_backend.ParamikoBackend.__init__ = refuse


def pytest_configure(config):
    enforce_host_keys()



def pytest_addoption(parser):
    group = parser.getgroup("clustercert")
    group.addoption("--clustercert-profile", default=None,
                    help="profile for hosts not found in --ansible-inventory (name or YAML path)")
    group.addoption("--clustercert-timeout", type=float, default=None, help="per-command timeout in seconds")


_INVENTORIES: dict[str, object] = {}


def _inventory(path: str):
    if path not in _INVENTORIES:
        _INVENTORIES[path] = load_inventory(path)
    return _INVENTORIES[path]


@pytest.fixture(scope="module")
def clustercert_ctx(host, request) -> HostContext:
    name = host.backend.get_hostname()
    inv_path = request.config.getoption("ansible_inventory", default=None)
    timeout = request.config.getoption("clustercert_timeout")
    if inv_path:
        inv = _inventory(inv_path)
        if name in inv.hosts:
            h = inv.hosts[name]
            ctx = host_context(h)
            if timeout:
                ctx.timeout_s = timeout
            return ctx
    prof = request.config.getoption("clustercert_profile")
    if not prof:
        pytest.fail(f"{name}: not in --ansible-inventory and no --clustercert-profile given", pytrace=False)
    return HostContext(name=name, profile=load_profile(prof), timeout_s=timeout or 30.0)
