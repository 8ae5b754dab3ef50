"""Line and value helpers shared by the tool parsers (ib, bonding, perftest, nccl_tests, iperf3, ofed; dcgmi
and fio for a leading JSON object): lines of text, integers and rates, coded states, sysfs grep dumps.

Pure functions only. ``ttar_to_grep_dump`` is used by tests and ``benchmarks/corpus.py`` to turn a
``ttar`` archive of a sysfs tree into the ``PATH:VALUE`` dump the sysfs parsers read.
"""

from __future__ import annotations

import json
import re

from clustercert.parsers.base import ParseError, check_time


class _Lines(list):
    """The lines of a text; iterating them checks the parse's time budget every 1,024 lines."""

    def __iter__(self):
        for i, line in enumerate(list.__iter__(self)):
            if not i & 1023:
                check_time()
            yield line


def text_lines(kind: str, text: str, what: str) -> list[str]:
    """Normalise line endings, strip trailing blanks; raise ParseError on empty input."""
    if not isinstance(text, str):
        raise ParseError(kind, f"expected text, got {type(text).__name__}")
    check_time()
    lines = _Lines(ln.rstrip() for ln in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    if not any(lines):
        raise ParseError(kind, f"empty input; expected {what}")
    return lines


def to_int(value: str) -> int:
    """'12' -> 12, '0x1f' -> 31. Raises ValueError on anything else."""
    v = value.strip()
    if v.lower().startswith("0x"):
        return int(v, 16)
    return int(v)


def num(value: str) -> int | float:
    """A decimal string as int when integral-looking, else float."""
    v = value.strip()
    if re.fullmatch(r"-?\d+", v):
        return int(v)
    return float(v)


def int_or_none(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return to_int(value)
    except ValueError:
        return None


_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:Gb/sec|Gb/s|Gbps)?\s*(?:\((.*)\))?\s*$")


def parse_rate(value: str) -> tuple[int | float, str | None]:
    """'400 Gb/sec (4X NDR)' -> (400, '4X NDR'); '40 (FDR10)' -> (40, 'FDR10'); '2.5 Gb/sec' -> (2.5,
    None)."""
    m = _RATE_RE.match(value)
    if not m:
        raise ValueError(f"unrecognised rate {value!r}")
    return num(m.group(1)), (m.group(2) or None)


_STATE_RE = re.compile(r"^\s*(\d+)\s*:\s*(\S.*?)\s*$")


def parse_coded_state(value: str) -> tuple[str, int | None]:
    """'4: ACTIVE' -> ('ACTIVE', 4); 'PORT_ACTIVE (4)' -> ('PORT_ACTIVE', 4); 'Active' -> ('Active', None)."""
    m = _STATE_RE.match(value)
    if m:
        return m.group(2), int(m.group(1))
    m = re.match(r"^\s*(\S.*?)\s*\((\d+)\)\s*$", value)
    if m:
        return m.group(1), int(m.group(2))
    return value.strip(), None


def grep_dump_entries(kind: str, text: str, what: str) -> list[tuple[str, str]]:
    """Split ``grep -r . DIR`` style output (``PATH:VALUE`` per line) into (path, value) pairs.

    The path is everything up to the first ':' (sysfs paths contain no ':'); the value may itself
    contain ':' (``4: ACTIVE``). Lines without ':' or whose path has no '/' are skipped (prompts).
    """
    out: list[tuple[str, str]] = []
    for line in text_lines(kind, text, what):
        if ":" not in line:
            continue
        path, value = line.split(":", 1)
        path = path.strip()
        if "/" not in path or " " in path:
            continue
        out.append((path, value.strip()))
    if not out:
        raise ParseError(kind, f"no PATH:VALUE lines found; expected {what}")
    return out


def ttar_to_grep_dump(text: str) -> str:
    """Convert a ``ttar`` archive (as used by prometheus/node_exporter fixtures) to ``PATH:VALUE`` lines.

    Each ``Path: P`` / ``Lines: N`` block yields ``P:LINE`` for its N content lines, skipping empty
    lines just as ``grep -r .`` would. Directories, symlinks and empty files yield nothing.
    """
    lines = text.replace("\r\n", "\n").split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("Path: ") and i + 1 < len(lines) and lines[i + 1].startswith("Lines: "):
            path = line[len("Path: "):].strip()
            n = int(lines[i + 1][len("Lines: "):].strip())
            for content in lines[i + 2: i + 2 + n]:
                if content.strip():
                    out.append(f"{path}:{content}")
            i += 2 + n
            continue
        i += 1
    return "\n".join(out) + ("\n" if out else "")


def leading_json(kind: str, text: str, expected: str) -> tuple[dict, int]:
    """The first JSON object in ``text`` (a tool may print notes before it) and where it starts; raise
    ParseError when there is none, it is cut short, or it is not an object."""
    start = text.find("{") if isinstance(text, str) else -1
    if start < 0:
        raise ParseError(kind, f"expected {expected}, found no '{{'")
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as exc:
        raise ParseError(
            kind, f"malformed or truncated JSON ({exc.msg} at line {exc.lineno}); expected {expected}"
        ) from exc
    if not isinstance(doc, dict):
        raise ParseError(kind, f"expected {expected}")
    return doc, start
