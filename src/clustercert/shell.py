"""Quoting for remote commands: the one helper every command builder uses.

Every value that reaches a remote shell (an interface, bond, HCA or sysctl name, a host, address,
Slurm node name, path) is validated at load time (inventory/profile) *and* quoted here where the
command is built, so a value that slipped past validation is still one inert word.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable


def q(value: object) -> str:
    """``value`` as one shell word (str() first; numbers come out bare, everything else single-quoted
    where it needs to be)."""
    return shlex.quote(str(value))


def join(words: Iterable[object]) -> str:
    """A command line of ``words``, each quoted as one word."""
    return " ".join(q(w) for w in words)
