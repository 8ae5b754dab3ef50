"""Bounded reading of every input file: a size limit checked before a byte is read, a JSON nesting
limit checked without recursion before the document is parsed (YAML's bounds: strict_yaml).

Each refusal is an InputError naming the file, so a hostile or runaway file (a 64 MiB inventory, an
iperf3 -J nested 200,000 arrays deep) costs milliseconds and exits 2, never a traceback or minutes.

Time: a file that is within every size and depth limit may still be slow to read (an inventory of many
hosts, each with many variables). ``input_budget`` gives the reading a wall-clock budget
(INPUT_TIME_LIMIT_S, or CLUSTERCERT_INPUT_TIME_LIMIT_S); the loaders' loops call ``check_time()`` (the
deadline is a context variable, so it holds in whichever thread loads, where signal.alarm would only work
in the main thread), and a spent budget is an InputError naming the file being read. Tool-output parsers
have their own budget (clustercert.parsers.base).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

from clustercert.errors import InputError

INPUT_TIME_LIMIT_S = 120.0  # a 10,000-host inventory loads in about 5 s (benchmarks/inventory.py)
INPUT_TIME_ENV = "CLUSTERCERT_INPUT_TIME_LIMIT_S"


class _OverTime(Exception):  # noqa: N818 - a budget spent, turned into an InputError by input_budget
    def __init__(self, seconds: float):
        self.seconds = seconds


# (monotonic deadline, the budget in seconds) of the innermost input budget, or None
_DEADLINE: ContextVar[tuple[float, float] | None] = ContextVar("clustercert_input_deadline", default=None)


def check_time() -> None:
    """Within ``input_budget``: raise once the budget is spent (a no-op outside one). The loaders' loops call
    it."""
    d = _DEADLINE.get()
    if d is not None and time.monotonic() > d[0]:
        raise _OverTime(d[1])


def input_time_limit() -> float:
    raw = os.environ.get(INPUT_TIME_ENV)
    if raw is None or not raw.strip():
        return INPUT_TIME_LIMIT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise InputError(INPUT_TIME_ENV, raw, "expected a positive number of seconds")
    return value


@contextlib.contextmanager
def input_budget(source: str) -> Iterator[None]:
    """Within: reading ``source`` (and what it pulls in) must end within the input time limit, else an
    InputError naming ``source`` (or the file an inner budget was reading). A nested budget never extends
    the one around it."""
    seconds = input_time_limit()
    end = time.monotonic() + seconds
    outer = _DEADLINE.get()
    token = None if outer is not None and outer[0] <= end else _DEADLINE.set((end, seconds))
    try:
        yield
    except _OverTime as exc:
        raise InputError(source, None, f"reading it took longer than {exc.seconds:g} s ({INPUT_TIME_ENV}): "
                                       "refused as a pathological input") from None
    finally:
        if token is not None:
            _DEADLINE.reset(token)

MIB = 1 << 20
# generous for real sites: a 10,000-host inventory with per-host vars is about 1-2 MiB
MAX_CONFIG_BYTES = 16 * MIB  # inventory, profile, lab spec, vault, config files
MAX_OUTPUT_BYTES = 64 * MIB  # saved tool output (`clustercert parse`), certificates
MAX_SECRET_BYTES = 1 * MIB  # a vault password file (its first line is the password)
MAX_JSON_DEPTH = 256  # real tool output and certificates nest fewer than 20 levels


def read_bounded(path: Path | str, limit: int = MAX_CONFIG_BYTES, what: str = "file") -> bytes:
    """The bytes of ``path``, refused before reading when it is over ``limit`` bytes."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > limit:
                raise InputError(str(path), None, f"{what} is {size / MIB:.1f} MiB, over the "
                                 f"{limit // MIB} MiB limit: refused before reading it")
            data = f.read(limit + 1)  # a growing file or a pipe: never more than the limit
    except FileNotFoundError:
        raise InputError(str(path), None, "file not found") from None
    except PermissionError:
        raise InputError(str(path), None, "file is not readable (permission denied)") from None
    except IsADirectoryError:
        raise InputError(str(path), None, "is a directory, expected a file") from None
    except OSError as exc:
        raise InputError(str(path), None, f"cannot read: {exc.strerror}") from None
    if len(data) > limit:
        raise InputError(str(path), None, f"{what} is over the {limit // MIB} MiB limit: refused")
    return data


def read_text_bounded(path: Path | str, limit: int = MAX_CONFIG_BYTES, what: str = "file",
                      errors: str = "strict") -> str:
    data = read_bounded(path, limit, what)
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError:
        raise InputError(str(path), None, "not UTF-8 text") from None


def check_text_size(text: str, source: str, limit: int = MAX_OUTPUT_BYTES, what: str = "input") -> None:
    if len(text) > limit:
        raise InputError(source, None, f"{what} is over the {limit // MIB} MiB limit: refused")


def check_json_depth(text: str, source: str, limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse JSON nested deeper than ``limit`` (brackets outside strings), in one pass, no recursion."""
    depth = 0
    for i, m in enumerate(_JSON_TOKENS.finditer(text)):
        if not i & 4095:
            check_time()
        ch = m.group()
        if ch in "[{":
            depth += 1
            if depth > limit:
                line = text.count("\n", 0, m.start()) + 1
                raise InputError(source, f"line {line}", f"JSON nested deeper than {limit} levels "
                                 "(refused before it is parsed)")
        elif ch in "]}":
            depth -= 1


_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)  # a string, whole; a bracket
