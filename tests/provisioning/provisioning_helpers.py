"""Helpers shared by the provisioning tests (roles, render harness, ansible environment)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
ROLES = REPO / "roles"
BIN = Path(sys.executable).parent


def ansible_env(**extra: str) -> dict:
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(ROLES),
        "ANSIBLE_LIBRARY": str(HERE / "library"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / "collections"),  # clustercert.cluster: this repository
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": "",
        "ANSIBLE_CACHE_PLUGIN": "memory",
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    })
    env.update(extra)
    return env




def resolved(rendered: Path, host: str) -> dict:
    return json.loads((rendered / host / "resolved.json").read_text())
