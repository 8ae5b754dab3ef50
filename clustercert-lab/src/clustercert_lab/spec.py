"""The lab spec: what `clustercert lab up --spec FILE` builds. Every key is validated; every error is
one line naming the file, the key and the reason (InputError, exit 2).

    nodes: 4                 # 1..64, or a list of unique names ([a-z][a-z0-9-]*)
    profile: lab             # a built-in profile name
    link_mbit: 1000          # fabric link rate, 10..10000 Mbit/s
    faults:                  # applied once the nodes are up
      - {node: node02, kind: gpu_missing, gpu: 3}
    slurm: false             # true: Slurm on the nodes once they answer SSH (clustercert_lab.slurm)
"""

from __future__ import annotations

import re

from clustercert.errors import InputError
from clustercert.model.profile import builtin_profiles, load_profile
from clustercert.model.strict_yaml import load_yaml_file
from clustercert_lab import faults, hardware

DEFAULT_NODES = 4
DEFAULT_PROFILE = "lab"
DEFAULT_LINK_MBIT = 1000
MAX_NODES = 64
KEYS = ("nodes", "profile", "link_mbit", "faults", "slurm")
NAME_RE = re.compile(r"^[a-z][a-z0-9-]*$")
EMBEDDED = "<embedded default spec>"


def node_names(count: int) -> list[str]:
    return [f"node{i:02d}" for i in range(1, count + 1)]


def _int(value, source: str, key: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(source, key, f"must be an integer {lo}..{hi}, not {type(value).__name__} {value!r}")
    if not lo <= value <= hi:
        raise InputError(source, key, f"must be {lo}..{hi}, not {value}")
    return value


def _bool(value, source: str, key: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(source, key, f"must be true or false, not {type(value).__name__} {value!r}")
    return value


def _nodes(value, source: str) -> list[str]:
    if isinstance(value, list):
        if not value:
            raise InputError(source, "nodes", "an empty list: a lab needs at least one node")
        if len(value) > MAX_NODES:
            raise InputError(source, "nodes", f"at most {MAX_NODES} nodes, not {len(value)}")
        seen: set[str] = set()
        for i, name in enumerate(value):
            key = f"nodes[{i}]"
            if not isinstance(name, str):
                raise InputError(source, key,
                                 f"a node name must be a string, not {type(name).__name__} {name!r}")
            if not NAME_RE.match(name) or len(name) > 32:
                raise InputError(source, key,
                                 f"invalid node name {name!r} (want [a-z][a-z0-9-]*, at most 32 chars)")
            if name in seen:
                raise InputError(source, key, f"duplicate node name {name!r}")
            seen.add(name)
        return list(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return node_names(_int(value, source, "nodes", 1, MAX_NODES))
    raise InputError(source, "nodes",
                     f"must be an integer 1..{MAX_NODES} or a list of node names, not {type(value).__name__}")


def _profile(value, source: str) -> tuple[str, dict]:
    known = builtin_profiles()
    if not isinstance(value, str) or value not in known:
        raise InputError(source, "profile", f"unknown profile {value!r} (known: {', '.join(known)})")
    return value, load_profile(value).model_dump(mode="json")


def _faults(value, source: str, names: list[str], profile: dict, link_mbit: int) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(source, "faults",
                         f"must be a list of {{node, kind, ...params}}, not {type(value).__name__}")
    if not value:
        return []
    return [_fault(entry, f"faults[{i}]", source, names, profile, link_mbit) for i, entry in enumerate(value)]


def _fault(entry, key: str, source: str, names: list[str], profile: dict, link_mbit: int) -> dict:
    """One entry of the spec's faults, ``key`` (faults[i]): {node, kind, params}, its params normalised."""
    if not isinstance(entry, dict):
        raise InputError(source, key,
                         f"must be a mapping {{node, kind, ...params}}, not {type(entry).__name__}")
    node = entry.get("node")
    if node is None:
        raise InputError(source, f"{key}.node", "required key is missing")
    if node not in names:
        raise InputError(source, f"{key}.node", f"no node {node!r} in this lab "
                         f"(nodes: {', '.join(names[:8])}{'...' if len(names) > 8 else ''})")
    kind = entry.get("kind")
    if kind is None:
        raise InputError(source, f"{key}.kind", "required key is missing")
    if kind not in faults.FAULTS:
        raise InputError(source, f"{key}.kind",
                         f"unknown fault kind {kind!r} (known: {', '.join(sorted(faults.FAULTS))})")
    params = {k: v for k, v in entry.items() if k not in ("node", "kind")}
    hw = hardware.build(profile, node, names.index(node) + 1, {"nodes": names, "link_mbit": link_mbit})
    try:
        norm = faults.validate(kind, params, hw)
    except ValueError as exc:
        msg = str(exc)
        pkey, _, reason = msg.partition(": ")
        if reason and (pkey in params or pkey in faults.FAULTS[kind].params):
            raise InputError(source, f"{key}.{pkey}", reason) from None
        raise InputError(source, key, msg) from None
    return {"node": node, "kind": kind, "params": norm}


def normalise(raw, source: str = EMBEDDED, nodes_override: int | None = None, slurm: bool = False) -> dict:
    """Validate a parsed spec (None = the embedded default) and return it normalised:
    {"nodes": [names], "profile": name, "link_mbit": int, "faults": [{node, kind, params}], "slurm": bool}.
    ``slurm`` (`lab up --slurm`) turns the spec's slurm on."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InputError(source, None, f"a lab spec must be a YAML mapping, not {type(raw).__name__}")
    for k in raw:
        if k not in KEYS:
            raise InputError(source, str(k), f"unknown key (known: {', '.join(KEYS)})")
    names = _nodes(raw.get("nodes", DEFAULT_NODES), source)
    if nodes_override is not None:
        names = node_names(_nodes_flag(nodes_override))
    profile_name, profile = _profile(raw.get("profile", DEFAULT_PROFILE), source)
    link_mbit = _int(raw.get("link_mbit", DEFAULT_LINK_MBIT), source, "link_mbit", 10, 10000)
    injected = _faults(raw.get("faults"), source, names, profile, link_mbit)
    with_slurm = _bool(raw.get("slurm", False), source, "slurm") or slurm
    return {"nodes": names, "profile": profile_name, "link_mbit": link_mbit, "faults": injected,
            "slurm": with_slurm,
            "source": source}


def _nodes_flag(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_NODES:
        raise InputError("--nodes", None, f"must be an integer 1..{MAX_NODES}, not {value!r}")
    return value


def load(spec_path: str | None = None, nodes: int | None = None, slurm: bool = False) -> dict:
    if spec_path is None:
        return normalise(None, EMBEDDED, nodes, slurm)
    return normalise(load_yaml_file(spec_path), str(spec_path), nodes, slurm)
