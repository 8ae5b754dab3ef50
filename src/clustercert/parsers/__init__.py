"""Evidence parsers: pure functions over real tool output (see base.py for the contract)."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from contextvars import ContextVar

from clustercert.parsers.base import (
    PARSE_TIME_ENV,
    PARSE_TIME_LIMIT_S,
    REGISTRY,
    OverTime,
    ParseError,
    ParserSpec,
    hard_time_budget,
    limit_from_env,
    register,
)

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
    "nccl_info",
    "fio",
    "ddp",
    "storage",
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
    """Parse ``text`` as ``kind``. Raises KeyError for an unknown kind, ParseError for bad text, and a
    ParseError too when the parse outlasts its time budget (PARSE_TIME_LIMIT_S,
    CLUSTERCERT_PARSE_TIME_LIMIT_S)."""
    func = REGISTRY[kind].func
    try:
        limit = limit_from_env(PARSE_TIME_ENV, PARSE_TIME_LIMIT_S)
    except ValueError as exc:
        raise ParseError(kind, str(exc)) from None
    try:
        with hard_time_budget(limit):
            return func(text)
    except OverTime as exc:
        raise ParseError(kind, f"parsing did not finish within {exc.seconds or limit:g} s "
                               f"({PARSE_TIME_ENV}): refused as a runaway or pathological output "
                               f"({len(text):,} characters)") from None


# Within ``one_parse_per_output``: (kind, id(text)) -> (text, its record); None outside one.
_ONCE: ContextVar[dict | None] = ContextVar("clustercert_parse_once", default=None)


@contextlib.contextmanager
def one_parse_per_output() -> Iterator[None]:
    """Within: ``parse_once`` parses an output (the same string object) once per kind and gives every later
    caller the same record; the callers read records, never change them. For one node's evaluation: its
    validators read its nvidia-smi -q -x in five places and its sysfs texts in two each, its node probes
    nvbandwidth's output in two. Every node's outputs are still parsed, each once; nothing outlives the
    block."""
    token = _ONCE.set({})
    try:
        yield
    finally:
        _ONCE.reset(token)


def parse_once(kind: str, text: str) -> dict:
    """``parse``, once per output and kind within ``one_parse_per_output`` (else every time). An output that
    does not parse is parsed again by each caller: no error is kept (nor its traceback, nor what that
    holds)."""
    memo = _ONCE.get()
    if memo is None:
        return parse(kind, text)
    hit = memo.get((kind, id(text)))
    if hit is None or hit[0] is not text:
        hit = memo[(kind, id(text))] = (text, parse(kind, text))
    return hit[1]


__all__ = [
    "REGISTRY",
    "ParseError",
    "ParserSpec",
    "register",
    "get",
    "parse",
    "parse_once",
    "one_parse_per_output",
]
