"""--backend: the collect layer the verbs' runs go through. ``Backend`` is its interface: collect.ssh's
``SshBackend`` (the default: one connection per node from here) and collect.srun's ``SlurmBackend`` (the steps
of one Slurm job, its launch node's session ended when the run is done) both implement it, and the drivers
(checks.run, probes.run) take one as ``io``; ``opened`` gives the run's."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from clustercert import paths
from clustercert.collect import DEFAULT_FORKS, srun, ssh
from clustercert.errors import InputError

if TYPE_CHECKING:
    from clustercert.model.evidence import CommandResult, NodeEvidence
    from clustercert.model.inventory import Inventory

BACKENDS = ("ssh", "slurm")


@runtime_checkable
class Backend(Protocol):
    """Every byte a run's drivers send to or read from the nodes (the signatures are collect.ssh's functions';
    tests/test_backend_protocol.py holds both backends to them). A server is the backend's own handle (what
    ``start_server`` returns is what ``stop_server`` and ``finish_probe`` take)."""

    job_id: str | None  # the Slurm job whose steps reach the nodes; None over ssh

    def runner_limit(self, commands: dict[str, tuple], stages: list[list[str]] | None = None,
                     parallel: int = 8) -> float:
        """The seconds a node runner with ``commands`` may take, all told."""
        ...

    def collect_node(self, node: str, conn: dict, commands: dict[str, tuple], *,
                     control_dir: Path | None = None, parallel: int = 8,
                     stages: list[list[str]] | None = None, on_done: Callable[[str], None] | None = None,
                     path: str = "") -> NodeEvidence:
        """One node's ``commands`` through the node runner."""
        ...

    def collect_many(self, nodes: dict[str, dict], commands_for: dict[str, dict[str, tuple]], *,
                     forks: int = DEFAULT_FORKS, control_dir: Path | None = None,
                     each: Callable[[str, NodeEvidence], NodeEvidence] | None = None,
                     ) -> dict[str, NodeEvidence]:
        """Every node's commands at once; ``each`` with each node's evidence as it ends."""
        ...

    def collect_in_turn(self, nodes: dict[str, dict], commands_for: dict[str, dict[str, tuple]], *,
                        control_dir: Path | None = None) -> dict[str, NodeEvidence]:
        """One node after the other (the disruptive tests)."""
        ...

    def start_server(self, server: tuple[str, dict, str], timeout: float, *, control_dir: Path | None = None,
                     server_start_delay: float = 0.5, server_port: int | None = None,
                     peer: str | None = None) -> Any:
        """A probe's server started, bounded by ``timeout``; returns once a client may connect."""
        ...

    def stop_server(self, srv: Any, wait: float = 0.0) -> CommandResult:
        """The server's result, once it has ended (killed after ``wait``)."""
        ...

    def finish_probe(self, srv: Any, client: tuple[str, dict, str], timeout: float, *,
                     control_dir: Path | None = None,
                     background: ThreadPoolExecutor | None = None) -> ssh.ProbeRun:
        """``client`` against the started server (or alone), both bounded; no process left."""
        ...

    def run_server_client(self, server: tuple[str, dict, str] | None, client: tuple[str, dict, str],
                          timeout: float, *, control_dir: Path | None = None, server_start_delay: float = 0.5,
                          server_port: int | None = None) -> ssh.ProbeRun:
        """start_server, then finish_probe."""
        ...


def check(inv: Inventory, name: str, reservation: str | None = None) -> None:
    """Before anything runs: what the backend needs of the inventory and flags (InputError, exit 2)."""
    if reservation is not None and name != "slurm":
        raise InputError(
            "--reservation", reservation, "only with --backend slurm (the run's Slurm job goes there)"
        )
    if name == "slurm":
        srun.check_inventory(inv)


@contextmanager
def opened(inv: Inventory, name: str, reservation: str | None = None) -> Iterator[Backend]:
    """The backend for the run; with slurm, ``reservation`` the admin's maintenance reservation
    (--reservation)."""
    if name == "slurm":
        with srun.SlurmBackend.open(inv, paths.control_dir(), reservation, paths.ensure_state_dir()) as io:
            yield io
    else:
        yield ssh.SshBackend()
