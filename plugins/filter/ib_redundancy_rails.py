"""Filter ``ib_redundancy_compute_rails``: the node's compute rails (HCA names, in GPU order) from its
``nvidia-smi topo -m`` and its HCA ports' ``rate`` and ``link_layer`` in sysfs (``ports``: the results of
``ansible.builtin.slurp`` over ``/sys/class/infiniband/<hca>/ports/<n>/{rate,link_layer}``, or those lines as
``grep -r .`` prints them there), by clustercert's one rule (clustercert.checks.rails.select: the rule the
validators, the probes and the certificate apply), so that the NCCL_IB_HCA this role writes names the rails
certify holds the node to::

    NCCL_IB_HCA=={{ topo.stdout | clustercert.cluster.ib_redundancy_compute_rails(ports.results,
    ib_redundancy_rails) | join(',') }}

Like the clustercert_profile lookup it runs on the controller and needs clustercert importable by the Python
that runs ansible-playbook. Evidence that does not parse, or rails other than the profile states (another
count, a NIC near no free GPU), fail the task with what was found.
"""

from __future__ import annotations

import base64
import binascii

from ansible.errors import AnsibleFilterError

SYSFS = "/sys/class/infiniband/"


def _ports_text(ports) -> str:
    """slurp results -> the ``<hca>/ports/<n>/<attr>:<value>`` lines; a string is taken as those lines."""
    if isinstance(ports, str):
        return ports
    lines = []
    for r in ports or []:
        if not isinstance(r, dict) or "content" not in r or not str(r.get("source", "")).startswith(SYSFS):
            continue  # a skipped or failed read: that port is not known
        try:
            value = base64.b64decode(r["content"]).decode("utf-8", "replace").strip()
        except (binascii.Error, ValueError):
            raise AnsibleFilterError(
                f"ib_redundancy_compute_rails: unreadable content of {r['source']}"
            ) from None
        lines.append(f"{r['source'][len(SYSFS):]}:{value}")
    return "\n".join(lines) + "\n"


def ib_redundancy_compute_rails(
    topo_stdout: str, ports, rails: dict, link_layer: str = "InfiniBand"
) -> list[str]:
    try:
        from clustercert.checks.rails import select_text
        from clustercert.parsers import ParseError
    except ImportError as exc:  # pragma: no cover - depends on the controller's Python
        raise AnsibleFilterError(
            f"ib_redundancy_compute_rails: cannot import clustercert ({exc}); run ansible-playbook "
            "from the Python environment clustercert is installed in"
        ) from None
    if not isinstance(rails, dict) or not {"count", "rate_gbit_per_s", "affinity"} <= set(rails):
        raise AnsibleFilterError("ib_redundancy_compute_rails: rails must be the profile's hardware.rails "
                                 "({count, rate_gbit_per_s, affinity, ...})")
    try:
        pairs, problems = select_text(
            str(topo_stdout), _ports_text(ports), {**rails, "link_layer": link_layer}
        )
    except ParseError as exc:
        raise AnsibleFilterError(f"ib_redundancy_compute_rails: {exc}") from None
    if problems:
        raise AnsibleFilterError(
            "ib_redundancy_compute_rails: the node's compute rails are not as the profile states: "
            + "; ".join(problems)
        )
    return [p["hca"] for p in pairs]


class FilterModule:
    def filters(self):
        return {"ib_redundancy_compute_rails": ib_redundancy_compute_rails}
