"""Parser contract shared by every evidence parser.

A parser is a pure function ``parse(text: str) -> dict``: text in, a JSON-serialisable record out,
no I/O. Unrecognised or truncated input raises ``ParseError`` saying what was expected.
Numbers that carry a unit are named for it (``gbit_per_s``, ``gbyte_per_s``, ``mib_per_s``,
``usec``, ``mib``, ``celsius``...), never a bare number of unknown unit.

Parsers register themselves under a kind name with ``@register("kind", "one-line description")``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


class ParseError(ValueError):
    """Input was not what the parser expected. The message says what was expected."""

    def __init__(self, kind: str, reason: str):
        self.kind = kind
        self.reason = reason
        super().__init__(f"{kind}: {reason}")


@dataclass(frozen=True)
class ParserSpec:
    kind: str
    description: str
    func: Callable[[str], dict]


REGISTRY: dict[str, ParserSpec] = {}


def register(kind: str, description: str):
    def deco(func: Callable[[str], dict]) -> Callable[[str], dict]:
        if kind in REGISTRY:
            raise RuntimeError(f"parser kind registered twice: {kind}")
        REGISTRY[kind] = ParserSpec(kind, description, func)
        return func

    return deco
