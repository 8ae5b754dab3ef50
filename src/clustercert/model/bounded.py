"""Bounded reading of every input file: a size limit checked before a byte is read, a JSON nesting
limit checked without recursion before the document is parsed (YAML's bounds: strict_yaml).

Each refusal is an InputError naming the file, so a hostile or runaway file (a 64 MiB inventory, an
iperf3 -J nested 200,000 arrays deep) costs milliseconds and exits 2, never a traceback or minutes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from clustercert.errors import InputError

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
    for m in _JSON_TOKENS.finditer(text):
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
