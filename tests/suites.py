"""Which unit tests scripts/test.sh runs where (tests/conftest.py marks them)."""

from __future__ import annotations

# Unit test files that drive ansible-playbook, ansible-galaxy, pip or Chromium as subprocesses and read no
# clock: scripts/test.sh runs them (tests/conftest.py marks them beside_lab) beside the lab tests, at the
# lowest CPU priority, in the CPU time the lab's simulated tools leave idle, once the lab modules from
# BESIDE_LAB_FROM on run, instead of before the lab tests. A file here must not time anything
# (tests/test_beside_lab.py holds them to it): under the lab's load a step may take many times its quiet
# length. Their subprocess timeouts are minutes.
BESIDE_LAB = (
    "tests/provisioning/",
    "tests/test_wheel.py",
    "tests/test_ansible_hands.py",
    "tests/test_report_first.py",
    "tests/test_reports.py",
    "tests/test_node_check_zipapp.py",
    "tests/test_cli_flags.py",
    "tests/security/test_artifact_secrets.py",
)


def beside_lab(path: str) -> bool:
    """Whether the unit tests of ``path`` (relative to the repository) run beside the lab tests."""
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in BESIDE_LAB)


# The lab modules (tests/conftest.py LAB_MODULE_ORDER) from this one on leave the CPUs idle about half the
# time (the simulated probe tools sleep) and write little to disk; before it, the bare bootstrap's apt runs
# and the check-mode playbooks keep them busy. The work beside the lab tests starts with it: started with the
# lab tests, it slowed the bare bootstrap from about 110 s to 188 s (CI of 3198bc3, docs/benchmarks.md).
BESIDE_LAB_FROM = "tests/certify/test_nccl_pair_lab.py"
