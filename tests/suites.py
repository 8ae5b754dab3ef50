"""Which unit tests scripts/test.sh runs where (tests/conftest.py marks them)."""

from __future__ import annotations

# Unit test files that drive ansible-playbook, ansible-galaxy, pip or Chromium as subprocesses and read no
# clock: scripts/test.sh runs them (tests/conftest.py marks them beside_lab) beside the lab tests, at the
# lowest CPU priority, in the CPU time the lab's simulated tools leave idle (about half of the lab run),
# instead of before them. A file here must not time anything (tests/test_beside_lab.py holds them to it):
# under the lab's load a step may take many times its quiet length. Their subprocess timeouts are minutes.
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
