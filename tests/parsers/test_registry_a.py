"""Every group-A parser kind is registered with a description."""

from __future__ import annotations

import pytest

from clustercert.parsers import REGISTRY, ParseError, get, parse

KINDS_A = [
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


@pytest.mark.parametrize("kind", KINDS_A)
def test_registered(kind):
    assert kind in REGISTRY
    spec = get(kind)
    assert spec.kind == kind and spec.description.strip()


@pytest.mark.parametrize("kind", KINDS_A)
def test_empty_input_raises(kind):
    with pytest.raises(ParseError) as exc:
        parse(kind, "")
    assert exc.value.kind == kind
