"""Strict YAML loading: duplicate keys are errors, and every failure names the file and line.

Before anything is built, the event stream is scanned (no recursion) for nesting deeper than MAX_DEPTH,
and the composed node graph is sized with aliases expanded (memoised, linear in the text): an alias
bomb ("billion laughs") is refused before a single object is constructed."""

from __future__ import annotations

from pathlib import Path

import yaml

from clustercert.errors import InputError
from clustercert.model.vault import Vaulted


class _StrictLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False):
    seen: dict = {}
    for key_node, _value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen[key] = True
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _construct_vault(loader: _StrictLoader, node: yaml.Node) -> Vaulted:
    """An inline ``!vault |`` value, kept encrypted (clustercert.model.vault.reveal decrypts it)."""
    if not isinstance(node, yaml.ScalarNode):
        raise yaml.constructor.ConstructorError(None, None, "a !vault value must be a string (the vaulted text)",
                                                node.start_mark)
    return Vaulted(loader.construct_scalar(node), node.start_mark.line + 1)


_StrictLoader.add_constructor("!vault", _construct_vault)
# Ansible's other tag in inventories: the value as it is, never templated (a plain string here)
_StrictLoader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


MAX_DEPTH = 64  # mappings/sequences inside each other; inventories and profiles use fewer than 10
MAX_NODES = 100_000  # scalars, mappings and sequences once aliases are expanded
MAX_ALIASES = 1_000


def _bounded(text: str, source: str) -> None:
    depth = aliases = 0
    for event in yaml.parse(text, Loader=_StrictLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise InputError(source, f"line {event.start_mark.line + 1}",
                                 f"nesting deeper than {MAX_DEPTH} levels (refused before it is built)")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise InputError(source, f"line {event.start_mark.line + 1}", f"more than {MAX_ALIASES} aliases")
    node = yaml.compose(text, Loader=_StrictLoader)
    if node is None:
        return
    sizes: dict[int, int] = {}

    def size(n) -> int:  # depth is bounded above, so this recursion is too
        if id(n) in sizes:
            return sizes[id(n)]
        sizes[id(n)] = 1  # a recursive alias counts once (SafeLoader builds it as a cycle)
        if isinstance(n, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in n.value)
        elif isinstance(n, yaml.SequenceNode):
            total = 1 + sum(size(v) for v in n.value)
        else:
            total = 1
        sizes[id(n)] = min(total, MAX_NODES + 1)
        return sizes[id(n)]

    if size(node) > MAX_NODES:
        raise InputError(source, None, f"aliases expand to more than {MAX_NODES} values (an alias bomb?): "
                                       "refused before it is built")


def loads(text: str, source: str):
    try:
        _bounded(text, source)
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}" if mark else "?"
        problem = exc.problem or exc.context or "malformed YAML"
        raise InputError(source, where, f"malformed YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise InputError(source, None, f"malformed YAML: {exc}") from None


def load_yaml_file(path: Path | str):
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(str(path), None, "file not found") from None
    except PermissionError:
        raise InputError(str(path), None, "file is not readable (permission denied)") from None
    except IsADirectoryError:
        raise InputError(str(path), None, "is a directory, expected a file") from None
    except UnicodeDecodeError:
        raise InputError(str(path), None, "not UTF-8 text") from None
    except OSError as exc:
        raise InputError(str(path), None, f"cannot read: {exc.strerror}") from None
    return loads(text, str(path))
