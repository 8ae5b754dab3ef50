"""Strict patterns for every value that reaches a remote command (issue 19.2a).

Each ``check_*`` returns None when the value is acceptable, or the reason it is not (a short phrase);
``validate(kind, value)`` raises ValueError with that reason. The loaders (inventory.py, profile.py)
apply them at load time and turn a violation into InputError(file, key, reason): exit 2, nothing ran.
Quoting (clustercert.shell) still happens where commands are built; this is the first of two walls.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

# Linux IFNAMSIZ is 16 with the NUL: 1..15 characters; the kernel forbids '/', ':' and whitespace. We
# are stricter: letters, digits, '_', '.', '-', not starting with '-' or '.', and never "." or "..".
IFNAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}")
HCA_RE = re.compile(r"[a-z][a-z0-9_]{0,63}")  # mlx5_0, irdma0, bnxt_re0, rxe0
# dotted (net.ipv4.conf.all.rp_filter) or slashed (net/ipv4/...) sysctl keys; a component may hold
# '-' (net.ipv4.conf.eth-1.rp_filter) but never start with it
SYSCTL_KEY_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*(?:[./][A-Za-z0-9_][A-Za-z0-9_-]*)*")
SYSCTL_VALUE_RE = re.compile(r"[A-Za-z0-9_.,:/+=@-]+(?:[ \t][A-Za-z0-9_.,:/+=@-]+)*")  # "4096 87380 16777216"
HOST_LABEL_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
SLURM_NODE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
INVENTORY_HOST_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,252}")
USER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
REMOTE_PATH_RE = re.compile(r"/[A-Za-z0-9_.+@%=,~/-]*")
COMMAND_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")  # a bare command looked up on PATH (python3)
KERNEL_ARG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.,:=/+-]*")  # iommu=pt, isolcpus=1-3,5
VERSION_RE = re.compile(r"[0-9][0-9A-Za-z.+~_-]{0,63}")
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")  # a cluster name, a connection plugin

_SHOWN = 40


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "...'"


def _text(value: object, what: str) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str):
        return f"expected {what} (text), got {type(value).__name__} {_show(value)}"
    return None


def _pattern(value: object, regex: re.Pattern, what: str, allowed: str) -> str | None:
    bad = _text(value, what)
    if bad:
        return bad
    if not value:
        return f"expected {what}, got an empty string"
    if value.startswith("-"):
        return f"{_show(value)} is not {what}: it starts with '-' (it would read as an option)"
    if not regex.fullmatch(value):
        return f"{_show(value)} is not {what} ({allowed})"
    return None


def check_ifname(value: object) -> str | None:
    bad = _pattern(value, IFNAME_RE, "an interface name",
                   "1-15 characters of letters, digits, '_', '.', '-'; Linux IFNAMSIZ")
    if bad is None and value in (".", ".."):
        return f"{_show(value)} is not an interface name"
    return bad


def check_hca(value: object) -> str | None:
    return _pattern(
        value, HCA_RE, "an HCA name", "lowercase letters, digits and '_', starting with a letter, e.g. mlx5_0"
    )


def check_sysctl_key(value: object) -> str | None:
    bad = _pattern(value, SYSCTL_KEY_RE, "a sysctl key", "dotted or slashed names of letters, digits, '_', "
                                                          "'-', e.g. net.ipv4.conf.all.rp_filter")
    if bad is None and len(value) > 255:
        return f"{_show(value)} is not a sysctl key (longer than 255 characters)"
    return bad


def check_sysctl_value(value: object) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    bad = _pattern(value, SYSCTL_VALUE_RE, "a sysctl value",
                   "words of letters, digits and _.,:/+=@- separated by single spaces or tabs")
    if bad is None and len(value) > 4096:
        return f"{_show(value)} is not a sysctl value (longer than 4096 characters)"
    return bad


def check_host(value: object) -> str | None:
    """An RFC 1123 host name, or an IPv4/IPv6 literal (an IPv6 zone must be an interface name)."""
    bad = _text(value, "a host name or address")
    if bad:
        return bad
    if not value:
        return "expected a host name or address, got an empty string"
    if value.startswith("-"):
        return (
            f"{_show(value)} is not a host name or address: it starts with '-' (it would read as an option)"
        )
    addr, pct, zone = value.partition("%")
    try:
        ipaddress.ip_address(addr)
    except ValueError:
        pass
    else:
        if pct and check_ifname(zone):
            return f"{_show(value)} is not an address: the zone {_show(zone)} is not an interface name"
        return None
    name = value[:-1] if value.endswith(".") else value
    labels = name.split(".")
    if (len(name) > 253 or not all(HOST_LABEL_RE.fullmatch(label) for label in labels)
            or all(label.isdigit() for label in labels)):
        return (f"{_show(value)} is not a host name (RFC 1123: dot-separated labels of letters, digits and "
                "'-', at most 253 characters) nor an IPv4/IPv6 address")
    return None


def check_inventory_host(value: object) -> str | None:
    """An inventory host's own name (it becomes the ssh target without ansible_host, and mpirun's -H)."""
    return _pattern(value, INVENTORY_HOST_RE, "a host name", "letters, digits, '_', '.', ':', '-'")


def check_slurm_node(value: object) -> str | None:
    return _pattern(value, SLURM_NODE_RE, "a Slurm node name", "1-64 letters, digits, '_', '.', '-'")


def check_user(value: object) -> str | None:
    return _pattern(
        value, USER_RE, "a user name", "letters, digits, '_', '.', '-', at most 32, not starting with a digit"
    )


def check_port(value: object) -> str | None:
    """1..65535; an integer (a string of decimal digits, as an INI inventory may give, is accepted)."""
    if isinstance(value, bool):
        return f"expected a port 1..65535, got a boolean {value!r}"
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,5}", value):
        value = int(value)
    if not isinstance(value, int):
        return f"expected a port 1..65535, got {type(value).__name__} {_show(value)}"
    if not 1 <= value <= 65535:
        return f"expected a port 1..65535, got {value}"
    return None


def check_remote_path(value: object) -> str | None:
    """An absolute path that a remote command runs or reads: printable, no whitespace or shell syntax."""
    return _pattern(value, REMOTE_PATH_RE, "an absolute path",
                    "starting with '/', letters, digits and _.+@%=,~/- only: no spaces, quotes or shell "
                    "syntax")


def check_interpreter(value: object) -> str | None:
    """ansible_python_interpreter: an absolute path or a bare command name (Ansible's auto modes and Jinja
    templates are left to Ansible)."""
    if isinstance(value, str) and (value.startswith("auto") and COMMAND_RE.fullmatch(value) or "{{" in value):
        return None
    if isinstance(value, str) and not value.startswith("/"):
        return _pattern(
            value, COMMAND_RE, "an interpreter", "an absolute path or a command name such as python3"
        )
    return check_remote_path(value)


def check_local_path(value: object) -> str | None:
    """A path on this machine given to a program as one argument (ssh -i): printable, one line, no
    leading '-'."""
    bad = _text(value, "a path")
    if bad:
        return bad
    if not value:
        return "expected a path, got an empty string"
    if value.startswith("-"):
        return f"{_show(value)} is not a path: it starts with '-' (it would read as an option)"
    if not value.isprintable():
        return f"{_show(value)} is not a path: it holds a newline or another control character"
    return None


def check_kernel_arg(value: object) -> str | None:
    return _pattern(value, KERNEL_ARG_RE, "a kernel command-line parameter",
                    "letters, digits and _.,:=/+- such as iommu=pt; no spaces, quotes or shell syntax")


def check_version(value: object) -> str | None:
    return _pattern(value, VERSION_RE, "a version", "starting with a digit; letters, digits and .+~_- only")


def check_name(value: object) -> str | None:
    return _pattern(value, NAME_RE, "a name", "1-64 letters, digits, '_', '.', '-'")


CHECKS: dict[str, Callable[[object], str | None]] = {
    "ifname": check_ifname,
    "hca": check_hca,
    "sysctl_key": check_sysctl_key,
    "sysctl_value": check_sysctl_value,
    "host": check_host,
    "inventory_host": check_inventory_host,
    "slurm_node": check_slurm_node,
    "user": check_user,
    "port": check_port,
    "remote_path": check_remote_path,
    "interpreter": check_interpreter,
    "local_path": check_local_path,
    "kernel_arg": check_kernel_arg,
    "version": check_version,
    "name": check_name,
}


def validate(kind: str, value: object) -> object:
    """``value`` if it is a valid ``kind``; else ValueError(reason) (pydantic turns it into the key's
    error)."""
    reason = CHECKS[kind](value)
    if reason:
        raise ValueError(reason)
    return value
