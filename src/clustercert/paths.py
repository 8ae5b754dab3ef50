"""Where the shipped Ansible content lives.

An editable install (or a source checkout) uses the repository's top-level folders; a wheel carries
them inside the package as ``clustercert/_data/`` (hatchling force-include).
"""

from __future__ import annotations

import os
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def data_dir() -> Path:
    packaged = _PKG / "_data"
    if (packaged / "playbooks").is_dir():
        return packaged
    repo = _PKG.parent.parent
    if (repo / "playbooks").is_dir() and (repo / "roles").is_dir():
        return repo
    raise RuntimeError(f"cannot find clustercert's playbooks next to {_PKG}: broken installation")


def playbooks_dir() -> Path:
    return data_dir() / "playbooks"


def roles_dir() -> Path:
    return data_dir() / "roles"


def validators_dir() -> Path:
    return data_dir() / "validators"


def sample_inventory_dir() -> Path:
    return data_dir() / "inventory"


def ansible_cfg() -> Path:
    return data_dir() / "ansible.cfg"


def state_dir() -> Path:
    """Run directories, the SQLite store and the fact cache: $CLUSTERCERT_HOME or ./.clustercert."""
    return Path(os.environ.get("CLUSTERCERT_HOME") or Path.cwd() / ".clustercert")
