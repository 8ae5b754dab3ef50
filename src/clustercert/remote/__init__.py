"""Programs that clustercert runs outside its own process, kept as real modules.

* ``runner``: the node runner: sent over SSH as ``python3 -c <its source>`` (run locally for
  ``ansible_connection=local``) by clustercert.collect.ssh.collect_node; runs a request's commands on the
  node and prints one JSON document.
* ``bond_failover``: the bond failover driver: one of the runner's commands,
  ``"${CLUSTERCERT_PYTHON:-python3}" -c <its source> ARGS`` (clustercert.checks.bond_failover).
* ``ddp_smoke``: the DDP smoke test each rank of ``torchrun`` runs (``torchrun --no_python python3 -c <its
  source> ARGS``; clustercert.probes.commands.ddp_launch_cmd, probe.ddp_allreduce): torch.distributed's
  all_reduce across two nodes, one line of JSON per rank.
* ``slurm_agent``: on the launch node of ``--backend slurm`` (clustercert.collect.srun): sent over SSH as
  ``python3 -c <its source>``; starts the srun commands the controller asks for and sends back their output.
* ``pair_step``: the task on each of a pair's two nodes of the step its probes run in (``--backend slurm``:
  clustercert.collect.srun.PairStep), ``srun ... python3 -c <its source>``; starts each server and client the
  controller sends on the step's stdin.
* ``tether``: the wrapper placed as ``<run_dir>/bin/ansible-playbook`` by clustercert.collect.engine.

The first two and ddp_smoke run on a node (ddp_smoke also needs torch): python3 >= 3.6, stdlib only, no file
of clustercert's needed there. Their text is sent whole; ``source`` reads it from the installed package at
call time.
"""

from __future__ import annotations

from importlib import resources

PROGRAMS = ("runner", "bond_failover", "tether", "ddp_smoke", "slurm_agent", "pair_step")


def source(name: str) -> str:
    """The text of the program ``clustercert/remote/<name>.py``, as it is sent or written out."""
    if name not in PROGRAMS:
        raise ValueError(f"no such remote program: {name!r}")
    return resources.files(__name__).joinpath(f"{name}.py").read_text(encoding="utf-8")
