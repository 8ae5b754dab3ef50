"""Fixtures of the certify lab modules."""

from __future__ import annotations

import time

import pytest


@pytest.fixture(scope="module")
def slurm_lab(bootstrapped_lab):
    """The lab's own Slurm (`clustercert lab slurm up`: slurmctld on node01, slurmd on all, every node idle;
    the lab's inventory then says clustercert_slurm: true), and nothing of it left after."""
    lab = bootstrapped_lab
    t0 = time.monotonic()
    lab.manager.slurm_up()
    lab.refresh()
    print(f"slurm up in {time.monotonic() - t0:.0f} s")
    try:
        yield lab
    finally:
        # other modules reuse the nodes: nothing of Slurm keeps running, nor starts on a reboot
        lab.manager.slurm_down()
        lab.refresh()
