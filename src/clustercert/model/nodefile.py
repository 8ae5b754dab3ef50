"""The node file: what ``node-check`` runs against on a node -- a resolved profile, the node's name, its
timeout.

The node_check role writes it from the profile the controller validated (the ``clustercert_profile`` lookup)::

    {"schema": "clustercert.node/v1", "node": "<inventory name>", "command_timeout_s": 20, "profile": {...}}

What it holds was validated where it was written; here only its shape is checked (a missing or unknown key is
bad input, naming the file and the key) and the profile becomes clustercert.model.plain's. ``resolve`` is
``--profile``: such a file, or a built-in name (or a YAML profile) validated here where pydantic is, or in the
zipapp a built-in resolved when it was built. Stdlib only (clustercert.remote.nodeapp carries it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from clustercert.errors import InputError
from clustercert.model import names
from clustercert.model.plain import FIELDS, Section, profile_of

NODE_SCHEMA = "clustercert.node/v1"
NODE_KEYS = ("schema", "node", "command_timeout_s", "profile")
DEFAULT_TIMEOUT_S = 30  # clustercert_command_timeout_s's default


@dataclass(frozen=True)
class NodeFile:
    """What node-check runs against: the profile, and the node's own settings."""

    profile: Section
    source: str                 # the file, or "built-in profile NAME"
    node: str | None = None     # the node's name as the controller knows it (None: this machine's short name)
    timeout_s: float = DEFAULT_TIMEOUT_S


def _node_envelope(data: dict, source: str) -> tuple[str | None, int, object]:
    """A node file's own keys (schema, node, command_timeout_s) checked: (node, timeout, its profile)."""
    if data["schema"] != NODE_SCHEMA:
        raise InputError(source, "schema", f"is {data['schema']!r}, expected {NODE_SCHEMA!r}")
    for key in data:
        if key not in NODE_KEYS:
            raise InputError(source, key, f"unknown key (a node file has {', '.join(NODE_KEYS)})")
    node, timeout = data.get("node"), data.get("command_timeout_s", DEFAULT_TIMEOUT_S)
    if node is not None and (not isinstance(node, str) or (why := names.CHECKS["inventory_host"](node))):
        raise InputError(source, "node", why if isinstance(node, str) else "expected the node's name (text)")
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= 3600:
        raise InputError(source, "command_timeout_s", f"expected whole seconds 1..3600, got {timeout!r}")
    return node, timeout, data.get("profile")


def _check_profile_keys(data: dict, source: str, prefix: str) -> None:
    for key in FIELDS:
        if key not in data:
            raise InputError(source, prefix + key, "missing: write the file from a validated profile (the "
                                                   "node_check role does; the clustercert_profile lookup "
                                                   "returns one)")
    for key in data:
        if key not in FIELDS:
            raise InputError(source, prefix + key, "unknown profile key")


def node_file(data, source: str) -> NodeFile:
    """A node file's JSON -- or a bare resolved profile (what the lookup returns) -- as a NodeFile. A key
    that is missing, unknown or of the wrong kind is an InputError naming ``source`` and the key."""
    if not isinstance(data, dict):
        raise InputError(source, None, "expected a JSON object: a node file (the node_check role writes it) "
                                       "or a resolved profile")
    prefix, node, timeout = "", None, DEFAULT_TIMEOUT_S
    if "schema" in data:
        node, timeout, data = _node_envelope(data, source)
        prefix = "profile."
        if not isinstance(data, dict):
            raise InputError(source, "profile", "expected the resolved profile (a mapping)")
    _check_profile_keys(data, source, prefix)
    return NodeFile(profile_of(data), source, node, float(timeout))


def read_node_file(path: str, flag: str = "--profile") -> NodeFile:
    """The node file (or resolved profile) at ``path``, JSON."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(flag, path, f"cannot read it: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, None, f"not JSON: line {exc.lineno}: {exc.msg}") from None
    return node_file(data, path)


# node-check's zipapp carries the built-in profiles resolved (clustercert/profiles/NAME.json)
def bundled(name: str) -> dict | None:
    """The built-in profile ``name`` resolved, where this copy of clustercert carries it as JSON (the
    zipapp)."""
    if not name or "/" in name or name.startswith("."):
        return None
    f = resources.files("clustercert").joinpath("profiles").joinpath(f"{name}.json")
    return json.loads(f.read_text(encoding="utf-8")) if f.is_file() else None


def resolve(arg: str, flag: str = "--profile") -> NodeFile:
    """``--profile``: a node file or resolved profile (``.json``); else a built-in name or a YAML profile,
    validated here where pydantic is (the full install), or a built-in resolved at build time (the zipapp)."""
    if arg.endswith(".json"):
        return read_node_file(arg, flag)
    try:
        from clustercert.model.profile import load_profile
    except ImportError:  # the zipapp: no pydantic, no YAML
        data = bundled(arg)
        if data is None:
            raise InputError(flag, arg, "not a node file (.json) nor a profile built into this node-check; a "
                                        "YAML profile is validated on the controller: give the node file the "
                                        "node_check role writes") from None
        return node_file(data, f"built-in profile {arg}")
    return node_file(load_profile(arg).model_dump(mode="json"), f"profile {arg}")
