"""Where the shipped Ansible content lives, where a running lab's inventory is (`-i lab`), where clustercert
keeps its state, and the ids of its runs.

An editable install (or a source checkout) uses the repository's top-level folders; a wheel carries
them inside the package as ``clustercert/_data/`` (hatchling force-include).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import stat
import time
import uuid
from pathlib import Path

from clustercert.errors import InputError

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


def lab_inventory_path() -> Path:
    """What `-i lab` names: the inventory a running lab writes, by the lab's published path convention
    (``$CLUSTERCERT_LAB_DIR``, else /var/lib/clustercert/lab, then inventory/hosts.yml). The lab keeps its
    side of it in clustercert_lab/paths.py (the product never imports the lab); tests/test_lab_contract.py
    holds the two sides together."""
    return Path(os.environ.get("CLUSTERCERT_LAB_DIR", "/var/lib/clustercert/lab")) / "inventory" / "hosts.yml"


def state_dir() -> Path:
    """Where clustercert keeps its state (SQLite store, run directories, fact cache, control sockets,
    locks, the signing key): ``$CLUSTERCERT_HOME`` if set; else /var/lib/clustercert for root; else
    ``$XDG_STATE_HOME/clustercert`` (``~/.local/state/clustercert`` by default). Never the current
    directory: every command finds the same store and key wherever it runs."""
    home = os.environ.get("CLUSTERCERT_HOME")
    if home:
        return Path(home).expanduser().absolute()
    if os.geteuid() == 0:
        return Path("/var/lib/clustercert")
    xdg = os.environ.get("XDG_STATE_HOME")
    # XDG: relative is ignored
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "state"
    return base / "clustercert"


def ensure_state_dir() -> Path:
    """The state directory, created 0700 if missing. InputError (exit 2) when it is not a directory,
    is owned by another user, or is writable by group or others: a store and a signing key there could
    be replaced by someone else. An existing directory that is only readable by others is kept as it
    is (the lab's /var/lib/clustercert is 0755); everything clustercert makes inside it is 0700/0600."""
    path = state_dir()
    where = "CLUSTERCERT_HOME" if os.environ.get("CLUSTERCERT_HOME") else "state directory"
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = path.stat()
    except FileExistsError:
        raise InputError(str(path), where, "exists and is not a directory") from None
    except OSError as e:
        raise InputError(str(path), where, f"cannot create the state directory: {e.strerror or e}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(str(path), where, "exists and is not a directory")
    if st.st_uid != os.geteuid():
        raise InputError(str(path), where, f"owned by uid {st.st_uid}, not by this user (uid {os.geteuid()});"
                         " refusing a store and signing key another user controls")
    if st.st_mode & 0o022:
        raise InputError(str(path), where, f"mode {stat.S_IMODE(st.st_mode):04o} is writable by group or "
                         f"others; run `chmod 700 {path}` (or choose another CLUSTERCERT_HOME)")
    return path


# A Unix socket's path holds 107 bytes (sun_path less its NUL). ssh names a control socket <dir>/%C (40 hex
# characters) and, while it makes the master, binds <dir>/%C.<16 random characters> first.
SOCKET_PATH_MAX = 107
_CONTROL_NAME = 1 + 40 + 17


def control_dir() -> Path:
    """Where the control sockets of clustercert's own multiplexed ssh connections go: ``<state dir>/cp``;
    where that path is too long for a Unix socket (every connection would fail with "too long for Unix domain
    socket"), a private directory of this user's named by the state directory's hash, under $XDG_RUNTIME_DIR
    (else /tmp). InputError (exit 2) when that directory is not this user's own, 0700."""
    cp = state_dir() / "cp"
    if len(os.fsencode(cp)) + _CONTROL_NAME <= SOCKET_PATH_MAX:
        return cp
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime and Path(runtime).is_absolute() else Path("/tmp")
    short = (
        base / f"clustercert-cp-{os.geteuid()}-{hashlib.sha256(os.fsencode(state_dir())).hexdigest()[:12]}"
    )
    if len(os.fsencode(short)) + _CONTROL_NAME > SOCKET_PATH_MAX:
        base = Path("/tmp")
        short = base / short.name
    try:
        try:
            short.mkdir(mode=0o700)
            # made here: gone again at exit where no master connection keeps a socket in it (most runs on
            # local connections, the test suite's deep temporary state directories)
            atexit.register(_remove_if_empty, short)
        except FileExistsError:
            pass
        st = os.lstat(short)
    except OSError as e:
        raise InputError(str(short), "state directory", f"ssh's control sockets: {e.strerror or e}") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise InputError(str(short), "state directory", "ssh's control sockets would go here (the state "
                         f"directory's {cp} is too long for a Unix socket), but it is not a 0700 directory "
                         "of this user's")
    return short


def _remove_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:  # a persisting master's socket is there: the next run uses it
        pass


def new_run_id() -> str:
    """A run's id: when it started, and six random hex digits (``20261204T101500-1a2b3c``). The store's runs
    and the playbook runs' directories under ``<state>/runs/`` are named by it."""
    return time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
