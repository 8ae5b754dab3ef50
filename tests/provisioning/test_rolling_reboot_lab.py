"""Acceptance on the lab (root): the rolling reboot policy. A bootstrap that changes the pinned driver
reboots the nodes whose loaded module no longer matches, one node at a time.

The suite's last lab module: it runs on the 6 nodes the certify module left bootstrapped and reboots two of
them into another driver (--limit; two reboots in a row show whether the policy lets them overlap -- a batch
of two, or no serial at all, takes both down at once -- and each node more costs about 20 s of CI), which
nothing after it has to undo (putting the driver back costs a second round of reboots). The sampler watches
all six."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from labfixtures import bootstrap

pytestmark = [pytest.mark.lab, pytest.mark.slow]

LAB_NODES = 6  # as tests/certify/test_certify_lab.py leaves the lab
REBOOTED = ("node01", "node02")
OTHER_DRIVER = "570.158.01"  # another pinned driver in the lab repository


@pytest.fixture(scope="module")
def lab6(lab, lab_bootstrapper):
    return lab_bootstrapper(lab, LAB_NODES)



class Reachability(threading.Thread):
    """Samples TCP/22 of every node; records the largest number of nodes down at the same time."""

    def __init__(self, addresses: dict[str, str]):
        super().__init__(daemon=True)
        self.addresses = addresses
        self.stop = threading.Event()
        self.max_down = 0
        self.down_seen: set[str] = set()
        self.samples = 0

    @staticmethod
    def up(ip: str) -> bool:
        try:
            with socket.create_connection((ip, 22), timeout=0.5) as s:
                s.settimeout(1)
                return s.recv(4) == b"SSH-"
        except OSError:
            return False

    def run(self) -> None:
        while not self.stop.is_set():
            down = {n for n, ip in self.addresses.items() if not self.up(ip)}
            self.max_down = max(self.max_down, len(down))
            self.down_seen |= down
            self.samples += 1
            time.sleep(0.1)


def test_rolling_reboot_takes_one_node_down_at_a_time(lab6):
    lab = lab6
    status = lab.manager.status()["nodes"]
    sampler = Reachability({n: status[n]["mgmt_ip"] for n in lab.nodes})  # every node: none other goes down
    sampler.start()
    try:
        # Another pinned driver: the loaded module no longer matches -> reboot, one node at a time.
        rc, doc = bootstrap(
            lab,
            "--limit",
            ",".join(REBOOTED),
            "-e",
            json.dumps({"clustercert_profile_overrides": {"driver": {"version": OTHER_DRIVER}}}),
        )
    finally:
        sampler.stop.set()
        sampler.join(10)
    assert rc == 0, doc
    assert sampler.samples > 50
    assert sampler.down_seen == set(REBOOTED), "every node of the run must have rebooted, and only those"
    assert sampler.max_down == 1
    for n in REBOOTED:
        assert lab.ssh(n, "cat /sys/module/nvidia/version").stdout.strip() == OTHER_DRIVER
