"""Where a running lab keeps its state, and the inventory it writes (what `-i lab` means).

Only path conventions. ``inventory_path()`` is the lab's published contract with the product, which
never imports the lab and resolves `-i lab` by the same convention in clustercert.paths.lab_inventory_path
(tests/test_lab_contract.py holds the two sides together): change both, or neither.
"""

from __future__ import annotations

import os
from pathlib import Path


def lab_dir() -> Path:
    return Path(os.environ.get("CLUSTERCERT_LAB_DIR", "/var/lib/clustercert/lab"))


def inventory_path() -> Path:
    return lab_dir() / "inventory" / "hosts.yml"


def user_inventory_path() -> Path:
    """The same lab as ``inventory_path()``, logged into as the non-root operator (node.LAB_USER) who
    becomes root with sudo: ansible_user LAB_USER, ansible_become true."""
    return lab_dir() / "inventory-user" / "hosts.yml"


def ssh_dir() -> Path:
    return lab_dir() / "ssh"
