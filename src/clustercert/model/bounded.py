"""Bounded reading of every input file: a size limit checked before a byte is read, a JSON nesting
limit checked without recursion before the document is parsed (YAML's bounds: strict_yaml).

Each refusal is an InputError naming the file, so a hostile or runaway file (a 64 MiB inventory, an
iperf3 -J nested 200,000 arrays deep) costs milliseconds and exits 2, never a traceback or minutes.

Time: a file that is within every size and depth limit may still be slow to read (an inventory of many
hosts, each with many variables). ``input_budget`` gives the reading a wall-clock budget
(INPUT_TIME_LIMIT_S, or CLUSTERCERT_INPUT_TIME_LIMIT_S); the loaders' loops call ``check_time()``
(clustercert.parsers.base: one clock for loaders and tool-output parsers, held in a context variable, so
it works in any thread), and a spent budget is an InputError naming the file being read.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

from clustercert.errors import InputError
from clustercert.parsers.base import OverTime, check_time, limit_from_env, time_budget

INPUT_TIME_LIMIT_S = 120.0  # a 10,000-host inventory loads in about 5 s (benchmarks/inventory.py)
INPUT_TIME_ENV = "CLUSTERCERT_INPUT_TIME_LIMIT_S"


@contextlib.contextmanager
def input_budget(source: str) -> Iterator[None]:
    """Within: reading ``source`` (and what it pulls in) must end within the input time limit, else an
    InputError naming ``source`` (or the file an inner budget was reading). Nested budgets keep the
    earliest deadline."""
    try:
        with time_budget(limit_from_env(INPUT_TIME_ENV, INPUT_TIME_LIMIT_S)):
            yield
    except OverTime as exc:
        raise InputError(source, None, f"reading it took longer than {exc.seconds:g} s ({INPUT_TIME_ENV}): "
                                       "refused as a pathological input") from None

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
