"""--backend: the collect layer the verbs' runs go through -- the collect.ssh module (the default), or a
collect.srun.SlurmBackend opened for the run (its launch node's session ended when the run is done). Either
offers the same functions (collect_node, collect_many, start_server, ...), which checks.run and probes.run take
as ``io``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from clustercert import paths
from clustercert.collect import srun, ssh
from clustercert.errors import InputError

if TYPE_CHECKING:
    from clustercert.model.inventory import Inventory

BACKENDS = ("ssh", "slurm")


def check(inv: Inventory, name: str, reservation: str | None = None) -> None:
    """Before anything runs: what the backend needs of the inventory and flags (InputError, exit 2)."""
    if reservation is not None and name != "slurm":
        raise InputError("--reservation", reservation, "only with --backend slurm (the run's Slurm job goes there)")
    if name == "slurm":
        srun.check_inventory(inv)


@contextmanager
def opened(inv: Inventory, name: str, reservation: str | None = None) -> Iterator:
    """The backend for the run; with slurm, ``reservation`` the admin's maintenance reservation (--reservation)."""
    if name == "slurm":
        with srun.SlurmBackend.open(inv, paths.control_dir(), reservation, paths.ensure_state_dir()) as io:
            yield io
    else:
        yield ssh
