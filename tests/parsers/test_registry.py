"""Every parser kind is registered with a description and a callable, and refuses empty input."""

from __future__ import annotations

import pytest

from clustercert.parsers import REGISTRY, ParseError, get, parse

# GPU, driver, container runtime and service tools
GPU_HOST_KINDS = [
    "nvidia-smi-xml",
    "nvidia-smi-csv",
    "nvidia-smi-q",
    "nvidia-smi-table",
    "nvidia-smi-topo",
    "nvidia-smi-nvlink",
    "nvidia-smi-list",
    "xid",
    "nvbandwidth",
    "nvbandwidth-json",
    "dcgmi-diag",
    "dcgmi-discovery",
    "lspci",
    "nvidia-ctk",
    "nvidia-container-cli-info",
    "docker-info",
    "lsmod",
    "modinfo",
    "systemctl-status",
]

# InfiniBand, bonding, bandwidth tools, OFED
FABRIC_KINDS = [
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

# kinds that must also refuse a tool's error message printed where its output would be
ERROR_TEXT_KINDS = ["dcgmi-diag-json", "dcgmi-nvlink", "nvidia-smi-nvlink-errors", "nvidia-smi-topo-p2p",
                    "perftest-json"]


@pytest.mark.parametrize("kind", GPU_HOST_KINDS + FABRIC_KINDS)
def test_kind_registered(kind):
    assert kind in REGISTRY
    spec = get(kind)
    assert spec.kind == kind and spec.description.strip() and callable(spec.func)


@pytest.mark.parametrize("kind", GPU_HOST_KINDS + FABRIC_KINDS)
def test_kind_rejects_empty_input(kind):
    with pytest.raises(ParseError) as excinfo:
        parse(kind, "")
    assert excinfo.value.kind == kind


@pytest.mark.parametrize("kind", ERROR_TEXT_KINDS)
def test_kind_registered_and_rejects_empty_input_and_an_error_message(kind):
    spec = get(kind)
    assert spec.kind == kind and spec.description.strip() and callable(spec.func)
    with pytest.raises(ParseError) as excinfo:
        parse(kind, "")
    assert excinfo.value.kind == kind
    with pytest.raises(ParseError):
        parse(kind, "command not found\n")
