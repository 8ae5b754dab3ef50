"""``Run``: the context the verbs that run on the nodes of an inventory share (validate, probe, certify,
drift); how every verb ends (its output, its exit status) is commands.output's.

A ``Run`` holds the inventory ``-i``/``-l`` select (fully checked, and the backend's needs of it: bad input
is exit 2 before anything runs), --forks, the backend (``opened``: the run's collect.backend.Backend), the
inventory's run lock (``locked``), the store's record of the run (``start`` ... ``finish``), the live progress
on stderr and the output format. The verb stays glue: it says what runs, in what order, and what it prints."""

from __future__ import annotations

import argparse
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from clustercert import paths
from clustercert.collect import DEFAULT_FORKS, backend
from clustercert.commands.common import inventory
from clustercert.commands.output import wants_json
from clustercert.record.runlock import inventory_lock
from clustercert.record.store import Store
from clustercert.report.progress import RunProgress, wanted

if TYPE_CHECKING:
    from clustercert.checks.run import NodeResult
    from clustercert.collect.backend import Backend


def reachable(results: dict[str, NodeResult]) -> list[str]:
    """The nodes the validators reached (the probes' nodes), in name order."""
    return [n for n, r in sorted(results.items()) if r.verdict != "unreachable"]


def rails_found(results: dict[str, NodeResult]) -> dict:
    """Each node's compute rails as the validators found them (checks.rails): the probes' rails."""
    return {n: r.rails for n, r in results.items() if r.rails is not None}


class Run:
    """One verb's run over the nodes of the inventory; ``verb`` names it in the store and in the lock."""

    def __init__(self, args: argparse.Namespace, verb: str) -> None:
        self.args, self.verb = args, verb
        self.inv = inventory(args)  # InputError (exit 2) before anything runs
        self.backend_name = getattr(args, "backend", "ssh")  # --backend
        self.reservation = getattr(args, "reservation", None)
        backend.check(self.inv, self.backend_name, self.reservation)
        self.run_id: str | None = None
        self._store: Store | None = None

    @property
    def source(self) -> str:
        """The inventory as the store and the documents name it."""
        return str(self.inv.source)

    @property
    def forks(self) -> int:
        """--forks: how many nodes at once, every stage of the run."""
        return self.args.forks or DEFAULT_FORKS

    @property
    def json(self) -> bool:
        return wants_json(self.args)

    @property
    def store(self) -> Store:
        """The store (made on first use: a verb checks first that one exists where it needs a baseline)."""
        if self._store is None:
            self._store = Store()
        return self._store

    def locked(self) -> AbstractContextManager:
        """The inventory's run lock (record.runlock): one run that records at a time per inventory."""
        return inventory_lock(self.source, self.verb)

    def opened(self) -> AbstractContextManager[Backend]:
        """The run's backend (--backend, --reservation), open for the ``with`` block."""
        return backend.opened(self.inv, self.backend_name, self.reservation)

    def progress(self) -> RunProgress:
        """The live progress on stderr (not with --format json unless stderr is a terminal)."""
        return RunProgress(self.verb, wanted(self.args.format))

    def start(self, meta: dict) -> str:
        """The run recorded as running (its id, as the store and the documents name it)."""
        self.run_id = paths.new_run_id()
        self.store.start_run(self.run_id, self.verb, self.source, meta)
        return self.run_id

    def finish(self, verdict: str, nodes: dict[str, dict], links=(), actions: dict | None = None) -> None:
        """The run's verdict, its nodes' findings and its links recorded (one transaction)."""
        self.store.finish_run(self.run_id, verdict, nodes, links, actions=actions)
