"""Every group-B parser kind is registered with a description and a callable."""

from __future__ import annotations

import pytest

from clustercert.parsers import REGISTRY, ParseError, get, parse

GROUP_B_KINDS = [
    "ibstat",
    "ibstatus",
    "ibv-devinfo",
    "ibdev2netdev",
    "perfquery",
    "sysfs-infiniband",
    "rdma-link",
    "bonding",
    "bonding-sysfs",
    "bond-failover",
    "perftest",
    "nccl-tests",
    "iperf3-json",
    "iperf3",
    "ofed-info",
]


@pytest.mark.parametrize("kind", GROUP_B_KINDS)
def test_kind_registered(kind):
    assert kind in REGISTRY
    spec = get(kind)
    assert spec.kind == kind
    assert spec.description.strip()
    assert callable(spec.func)


@pytest.mark.parametrize("kind", GROUP_B_KINDS)
def test_kind_rejects_empty_input(kind):
    with pytest.raises(ParseError) as excinfo:
        parse(kind, "")
    assert excinfo.value.kind == kind


ISSUE21_KINDS = ["dcgmi-diag-json", "dcgmi-nvlink", "nvidia-smi-nvlink-errors", "nvidia-smi-topo-p2p", "perftest-json"]


@pytest.mark.parametrize("kind", ISSUE21_KINDS)
def test_issue21_kind_registered_and_rejects_empty(kind):
    spec = get(kind)
    assert spec.kind == kind and spec.description.strip() and callable(spec.func)
    with pytest.raises(ParseError) as excinfo:
        parse(kind, "")
    assert excinfo.value.kind == kind
    with pytest.raises(ParseError):
        parse(kind, "command not found\n")
