"""What the verbs that take ``-i`` share: the inventory it names (``lab`` is the running lab's)."""

from __future__ import annotations

from pathlib import Path

from clustercert import paths
from clustercert.errors import InputError
from clustercert.model import vault
from clustercert.model.inventory import Inventory, load_inventory

LAB = "lab"


def inventory_path(arg: str) -> str:
    """``-i`` as the model reads it: ``lab`` (unless a file or directory of that name is here) is the
    inventory the running lab wrote (clustercert.paths.lab_inventory_path); anything else is left as it is
    (a path, or ``sample:NAME``)."""
    if arg == LAB and not Path(LAB).exists():
        path = paths.lab_inventory_path()
        if not path.exists():
            raise InputError(
                "-i lab", None, "no lab inventory: start the lab first with `clustercert lab up`"
            )
        return str(path)
    return arg


def inventory(args) -> Inventory:
    """The inventory ``-i`` names, limited by ``-l`` (fully checked: bad input is exit 2 here), its vaulted
    values decrypted with the secrets of --vault-id, --vault-password-file and --ask-vault-pass."""
    vault.load_secrets(getattr(args, "vault_password_file", None), getattr(args, "vault_id", None),
                       getattr(args, "ask_vault_pass", False))
    return load_inventory(inventory_path(args.inventory), args.limit)
