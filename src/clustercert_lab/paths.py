"""Where a running lab keeps its state, and the inventory it writes (what `-i lab` means).

Only path conventions: importing this loads nothing else of the lab (the command layer reads
``inventory_path`` to resolve `-i lab`).
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
