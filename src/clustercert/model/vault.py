"""Ansible Vault in inventories: the secrets ``--vault-password-file``, ``--vault-id [LABEL@]SOURCE`` and
``--ask-vault-pass`` give, read the way ansible-playbook reads them (Ansible's own vault library:
``ansible.parsing.vault``), and the decryption of vaulted files and inline ``!vault`` values.

The secrets and every decrypted value are kept in this process only (``plaintexts()``): the engine hands
the secrets to ansible-playbook through its FIFO (never through a file or ansible-runner's environment
dump) and scrubs every file of a run of them and of the plaintexts; nothing else writes them.
"""

from __future__ import annotations

import getpass
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from clustercert.errors import InputError
from clustercert.model.bounded import MAX_SECRET_BYTES, MIB

VAULT_HEADER = "$ANSIBLE_VAULT;"
DEFAULT_LABEL = "default"
HOW = "--vault-password-file FILE, --vault-id [LABEL@]FILE or --ask-vault-pass"


@dataclass(frozen=True)
class Vaulted:
    """An inline ``!vault`` value as the strict YAML loader reads it: the ciphertext, undecrypted."""

    ciphertext: str
    line: int


@dataclass(frozen=True)
class Secret:
    label: str
    password: bytes


_SECRETS: list[Secret] = []
_PLAINTEXTS: set[str] = set()


class Hidden:
    """A secret value from the inventory (a become password): the collector reads it with ``reveal()``; its
    repr and str never show it, and json refuses it. Its text joins plaintexts(), which runs scrub."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value
        _PLAINTEXTS.add(value)

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Hidden(<not shown>)"

    __str__ = __repr__

    def __copy__(self) -> Hidden:
        return self

    def __deepcopy__(self, memo) -> Hidden:  # dataclasses.asdict of a host's view keeps it hidden
        return self

    def __reduce__(self):  # not pickled: not copied into another process or file
        raise TypeError("a Hidden value is not serialised")


def secrets() -> list[Secret]:
    """The vault secrets this process was given (empty: none)."""
    return list(_SECRETS)


def plaintexts() -> set[str]:
    """Every value decrypted so far (what no file a run writes may hold)."""
    return set(_PLAINTEXTS)


def reset() -> None:
    _SECRETS.clear()
    _PLAINTEXTS.clear()


def _prompt(label: str, flag: str) -> bytes:
    if not sys.stdin.isatty():
        raise InputError(flag, None, "asks for the vault password on a terminal, and stdin is not one "
                                     "(use --vault-password-file FILE)")
    try:
        text = getpass.getpass(
            "Vault password: " if label == DEFAULT_LABEL else f"Vault password ({label}): "
        )
    except EOFError:
        raise InputError(flag, None, "no vault password given (end of input)") from None
    if not text:
        raise InputError(flag, None, "empty vault password")
    return text.encode()


def _from_source(label: str, source: str, flag: str) -> bytes:
    """A password file's first line, or an executable's output (Ansible's get_file_vault_secret)."""
    from ansible.errors import AnsibleError
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.vault import get_file_vault_secret

    path = Path(source).expanduser()
    if not path.exists():
        raise InputError(flag, source, "vault password file not found")
    if path.is_dir():
        raise InputError(flag, source, "is a directory, expected a vault password file")
    if not os.access(path, os.R_OK):
        raise InputError(flag, source, "vault password file is not readable (permission denied)")
    size = path.stat().st_size
    if not os.access(path, os.X_OK) and size > MAX_SECRET_BYTES:
        raise InputError(flag, source, f"vault password file is {size / MIB:.1f} MiB, over the "
                         f"{MAX_SECRET_BYTES // MIB} MiB limit: refused before reading it")
    try:
        secret = get_file_vault_secret(filename=str(path), vault_id=label, loader=DataLoader())
        secret.load()
    except AnsibleError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InputError(flag, source, first) from None
    if not secret.bytes:
        raise InputError(flag, source, "the vault password file is empty")
    return secret.bytes


def load_secrets(password_files: list[str] | None = None, vault_ids: list[str] | None = None,
                 ask: bool = False) -> list[Secret]:
    """The secrets of the vault flags (replacing any given before), in ansible-playbook's order: the
    --vault-id's, then --vault-password-file's, then --ask-vault-pass's prompt. Bad input is InputError."""
    out: list[Secret] = []
    for vid in vault_ids or []:
        label, at, source = vid.partition("@")
        if not at:
            label, source = DEFAULT_LABEL, vid
        if not label or not source:
            raise InputError(
                "--vault-id", vid, "expected [LABEL@]SOURCE (a password file, a script, or prompt)"
            )
        if source == "prompt":
            out.append(Secret(label, _prompt(label, "--vault-id")))
        else:
            out.append(Secret(label, _from_source(label, source, "--vault-id")))
    for f in password_files or []:
        out.append(Secret(DEFAULT_LABEL, _from_source(DEFAULT_LABEL, f, "--vault-password-file")))
    if ask:
        out.append(Secret(DEFAULT_LABEL, _prompt(DEFAULT_LABEL, "--ask-vault-pass")))
    reset()
    _SECRETS.extend(out)
    return out


def ansible_secrets() -> list:
    """The secrets as Ansible's DataLoader.set_vault_secrets / VaultLib take them."""
    from ansible.parsing.vault import VaultSecret

    return [(s.label, VaultSecret(s.password)) for s in _SECRETS]


def decrypt(ciphertext: str, source: str, key: str | None) -> str:
    """The plaintext of vaulted text (a whole file's or one value's); InputError naming ``source`` and
    ``key`` when no secret was given or none of them decrypts it."""
    from ansible.errors import AnsibleError
    from ansible.parsing.vault import VaultLib

    what = f"{key} is vaulted" if key else "the file is vaulted"
    if not _SECRETS:
        raise InputError(source, key, f"{what} and no vault password was given ({HOW})")
    try:
        plain = VaultLib(secrets=ansible_secrets()).decrypt(ciphertext.encode())
    except AnsibleError:
        raise InputError(source, key, f"{what} and the vault password given does not decrypt it "
                                      "(wrong password, or another vault id)") from None
    text = plain.decode("utf-8", errors="replace")
    _PLAINTEXTS.add(text)
    stripped = text.strip()
    if stripped != text and stripped:
        _PLAINTEXTS.add(stripped)
    return text


def is_vaulted_text(text: str) -> bool:
    return text.lstrip().startswith(VAULT_HEADER)


def reveal(data, source: str, trail: str = ""):
    """``data`` with each inline ``!vault`` value (Vaulted) replaced by its plaintext."""
    if isinstance(data, Vaulted):
        return decrypt(data.ciphertext, source, f"{trail or 'value'} (line {data.line})")
    if isinstance(data, dict):
        return {k: reveal(v, source, f"{trail}.{k}" if trail else str(k)) for k, v in data.items()}
    if isinstance(data, list):
        return [reveal(v, source, f"{trail}[{i}]") for i, v in enumerate(data)]
    return data


def install_in_ansible(loader) -> None:
    """Give ``loader`` (a DataLoader) the secrets, and Ansible's lazy EncryptedString values too (their
    context: VaultSecretsContext.initialize refuses a second call, and one process may load several
    inventories, as the tests do)."""
    from ansible.parsing.vault import VaultSecretsContext

    pairs = ansible_secrets()
    loader.set_vault_secrets(pairs)
    VaultSecretsContext._current = VaultSecretsContext(pairs)


def plain(value):
    """A variable's value from Ansible's VariableManager with each EncryptedString decrypted (recursively)."""
    from ansible.parsing.vault import EncryptedString

    if isinstance(value, EncryptedString):
        text = str(value)
        _PLAINTEXTS.add(text)
        return text
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value
