"""Commands: one thin module per verb, ``run(args) -> exit status``.

Each one reads its parsed flags (clustercert.cli builds the parser from clustercert.cmdoptions),
calls the layers (model, collect, checks and probes, record, report) and prints; the logic lives
in those layers. None imports the lab (clustercert_lab): ``-i lab`` is resolved in commands.common by the
lab's path convention (clustercert.paths), and ``lab`` runs the lab's own program (docs/architecture.md).
The verbs that run on nodes share commands.context's ``Run`` (inventory, backend, lock, run record, output).

A verb's module declares what it needs before it runs as ``NEEDS = Needs(...)`` (as pip's Command classes
declare theirs as class attributes); clustercert.cli.prepare reads it. A module that sets none gets
``Needs()``.
This module is carried by node-check's zipapp: the stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Needs:
    """What clustercert.cli.prepare does for a verb before it runs (bad input there is exit 2, nothing run).

    ``private_umask``: umask 077 while the verb runs (state files 0600, directories 0700, whatever writes
    them, ansible's fact cache too); the lab's own program writes node root filesystems with their modes, and
    opts out. ``state``: the verb keeps state (store, runs, control sockets, locks, keys): the state directory
    is made 0700 and checked. ``sessions``: it opens SSH sessions at --forks: its open files are checked
    against the limit, and the directory of ssh's control sockets is made. ``required``: (flag, attribute,
    what it is for) of flags the verb needs that argparse cannot require (not needed with --list-hosts)."""

    private_umask: bool = True
    state: bool = False
    sessions: bool = False
    required: tuple[tuple[str, str, str], ...] = ()


# what a verb that runs on the nodes needs: the state directory and its SSH sessions
ON_NODES = Needs(state=True, sessions=True)
STATEFUL = Needs(state=True)
