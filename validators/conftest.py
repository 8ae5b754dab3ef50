"""testinfra validators: `pytest validators/ --hosts=... --ansible-inventory=INV` (or --clustercert-profile).

The checks are clustercert's own (clustercert.checks); these modules only collect through testinfra.
"""

from __future__ import annotations

import pytest

from clustercert.checks import HostContext


def pytest_addoption(parser):
    group = parser.getgroup("clustercert")
    group.addoption("--clustercert-profile", default=None,
                    help="profile for hosts not found in --ansible-inventory (name or YAML path)")
    group.addoption("--clustercert-timeout", type=float, default=None, help="per-command timeout in seconds")


_INVENTORIES: dict[str, object] = {}


def _inventory(path: str):
    from clustercert.inventory import load_inventory

    if path not in _INVENTORIES:
        _INVENTORIES[path] = load_inventory(path)
    return _INVENTORIES[path]


@pytest.fixture(scope="module")
def clustercert_ctx(host, request) -> HostContext:
    from clustercert.profile import load_profile
    from clustercert.validate import host_context

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
