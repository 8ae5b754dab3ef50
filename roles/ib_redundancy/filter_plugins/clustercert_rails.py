"""Filter ``clustercert_rails``: the node's compute rails (HCA names, in GPU order) from its ``nvidia-smi topo -m``
and its ``/sys/class/infiniband/*/ports/*/{rate,link_layer}`` dump, by clustercert's one rule
(clustercert.checks.rails.select: the rule the validators, the probes and the certificate apply), so that the
NCCL_IB_HCA this role writes names the rails certify holds the node to::

    NCCL_IB_HCA=={{ topo.stdout | clustercert_rails(ports.stdout, ib_redundancy_rails, 'InfiniBand') | join(',') }}

Like the clustercert_profile lookup it runs on the controller and needs clustercert importable by the Python
that runs ansible-playbook. Evidence that does not parse, or rails other than the profile states (another
count, a NIC near no free GPU), fail the task with what was found.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def clustercert_rails(topo_stdout: str, sysfs_stdout: str, rails: dict, link_layer: str = "InfiniBand") -> list[str]:
    try:
        from clustercert.checks.rails import select_text
        from clustercert.parsers import ParseError
    except ImportError as exc:  # pragma: no cover - depends on the controller's Python
        raise AnsibleFilterError(f"clustercert_rails: cannot import clustercert ({exc}); run ansible-playbook "
                                 "from the Python environment clustercert is installed in") from None
    if not isinstance(rails, dict) or not {"count", "rate_gbit_per_s", "affinity"} <= set(rails):
        raise AnsibleFilterError("clustercert_rails: rails must be the profile's hardware.rails "
                                 "({count, rate_gbit_per_s, affinity, ...})")
    try:
        pairs, problems = select_text(str(topo_stdout), str(sysfs_stdout), {**rails, "link_layer": link_layer})
    except ParseError as exc:
        raise AnsibleFilterError(f"clustercert_rails: {exc}") from None
    if problems:
        raise AnsibleFilterError("clustercert_rails: the node's compute rails are not as the profile states: "
                                 + "; ".join(problems))
    return [p["hca"] for p in pairs]


class FilterModule:
    def filters(self):
        return {"clustercert_rails": clustercert_rails}
