"""The compute rails' discovery before `clustercert probe` (certify and drift take theirs from the validators'
collection pass): each node's ``nvidia-smi topo -m`` and /sys/class/infiniband read in one connection, then
the one rule (clustercert.checks.rails) applied. A node that did not answer, or whose evidence did not run or
parse, has unknown rails: each of its rail probes is then an error, never a silent absence."""

from __future__ import annotations

from clustercert import paths
from clustercert.checks import rails as rails_checks
from clustercert.checks.ib import SYSFS_CMD
from clustercert.collect import ssh


def discover(inv, nodes: list[str], forks: int = 25, io=ssh) -> dict[str, rails_checks.NodeRails]:
    """{node: its NodeRails} for ``nodes`` whose profile has compute rails; a node whose profile names them
    (hardware.nic_gpu) is read too, for its GPUs' NUMA nodes."""
    hosts = {n: inv.hosts[n] for n in nodes if rails_checks.wanted(inv.hosts[n].profile)}
    if not hosts:
        return {}
    timeout = {n: float(h.vars.clustercert_command_timeout_s) for n, h in hosts.items()}
    cmds = {n: {"nvsmi_topo": (rails_checks.TOPO_CMD, timeout[n]), "ib_sysfs": (SYSFS_CMD, timeout[n])}
            for n in hosts}
    evidence = io.collect_many({n: h.connection for n, h in hosts.items()}, cmds, forks=max(1, forks),
                               control_dir=paths.control_dir())
    out: dict[str, rails_checks.NodeRails] = {}
    for n, h in hosts.items():
        ev = evidence.get(n)
        if ev is None or not ev.reachable:
            out[n] = rails_checks.node_rails(h.profile, None, None,
                                             f"{n} did not answer: {ev.error if ev is not None else 'not collected'}")
            continue
        out[n] = rails_checks.of_evidence(h.profile, ev.results.get("nvsmi_topo"), ev.results.get("ib_sysfs"),
                                          timeout[n])
    return out
