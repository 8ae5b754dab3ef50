"""Evidence parsers: pure functions over real tool output (see base.py for the contract)."""

from __future__ import annotations

import importlib

from clustercert.parsers.base import REGISTRY, ParseError, ParserSpec, register

# Each module registers its kinds on import.
_MODULES = [
    "nvidia_smi",
    "xid",
    "nvbandwidth",
    "dcgmi",
    "lspci",
    "container",
    "kmod",
    "systemctl",
    "ib",
    "bonding",
    "perftest",
    "nccl_tests",
    "iperf3",
    "ofed",
    "timesync",
    "dmidecode",
]

for _m in _MODULES:
    try:
        importlib.import_module(f"clustercert.parsers.{_m}")
    except ModuleNotFoundError as exc:  # pragma: no cover - only while a module is being written
        if exc.name != f"clustercert.parsers.{_m}":
            raise


def get(kind: str) -> ParserSpec:
    return REGISTRY[kind]


def parse(kind: str, text: str) -> dict:
    """Parse ``text`` as ``kind``. Raises KeyError for an unknown kind, ParseError for bad text."""
    return REGISTRY[kind].func(text)


__all__ = ["REGISTRY", "ParseError", "ParserSpec", "register", "get", "parse"]
