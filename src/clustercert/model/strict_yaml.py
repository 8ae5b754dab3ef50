"""Strict YAML loading: duplicate keys are errors, and every failure names the file and line.

Before anything is built, the event stream is scanned (no recursion) for nesting deeper than MAX_DEPTH,
and the composed node graph is sized with aliases expanded (memoised, linear in the text): an alias
bomb ("billion laughs") is refused before a single object is constructed. The parsing is libyaml's (C) where
PyYAML has it: a 10,000-host inventory loads in a fraction of a second."""

from __future__ import annotations

from pathlib import Path

import yaml

from clustercert.errors import InputError
from clustercert.model.bounded import (
    MAX_CONFIG_BYTES,
    check_text_size,
    check_time,
    input_budget,
    read_text_bounded,
)
from clustercert.model.vault import Vaulted

# libyaml's parser where PyYAML was built with it (Debian's and PyPI's wheels are): the same events, nodes,
# marks and errors as the pure-Python one, parsed in C (a 10,000-host inventory in well under a second)
_BASE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_BASE):
    pass


class _StrictPyLoader(yaml.SafeLoader):
    """The pure-Python parser: on a document libyaml refuses, read again for PyYAML's own wording of the error
    (the messages users and tests know), which libyaml words differently."""


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




def _construct_vault(loader: _StrictLoader, node: yaml.Node) -> Vaulted:
    """An inline ``!vault |`` value, kept encrypted (clustercert.model.vault.reveal decrypts it)."""
    if not isinstance(node, yaml.ScalarNode):
        raise yaml.constructor.ConstructorError(
            None, None, "a !vault value must be a string (the vaulted text)", node.start_mark
        )
    return Vaulted(loader.construct_scalar(node), node.start_mark.line + 1)


for _cls in (_StrictLoader, _StrictPyLoader):
    _cls.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
    _cls.add_constructor("!vault", _construct_vault)
    # Ansible's other tag in inventories: the value as it is, never templated (a plain string here)
    _cls.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


MAX_DEPTH = 64  # mappings/sequences inside each other; inventories and profiles use fewer than 10
MAX_NODES = 100_000  # scalars, mappings and sequences once aliases are expanded
MAX_ALIASES = 1_000


def _bounded(text: str, source: str, loader_cls=_StrictLoader):
    """The document built, after its nesting (events, no recursion) and its size with aliases expanded were
    checked."""
    depth = aliases = 0
    for i, event in enumerate(yaml.parse(text, Loader=loader_cls)):
        if not i & 1023:
            check_time()
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
                raise InputError(
                    source, f"line {event.start_mark.line + 1}", f"more than {MAX_ALIASES} aliases"
                )
    loader = loader_cls(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_time()
        if aliases and _alias_growth(node) > MAX_NODES:
            raise InputError(source, None, f"aliases expand to more than {MAX_NODES} values (an alias "
                                           "bomb?): refused before it is built")
        check_time()
        data = loader.construct_document(node)
        check_time()
        return data
    finally:
        loader.dispose()


def _alias_growth(node) -> int:
    """How many nodes ``node``'s aliases add once expanded (over the nodes written out; capped just above
    MAX_NODES), so that a large inventory written out in full is never taken for a bomb."""
    written: set[int] = set()
    todo = [node]
    while todo:
        if not len(written) & 4095:
            check_time()
        n = todo.pop()
        if id(n) in written:
            continue
        written.add(id(n))
        if isinstance(n, yaml.MappingNode):
            todo.extend(x for kv in n.value for x in kv)
        elif isinstance(n, yaml.SequenceNode):
            todo.extend(n.value)
    cap = len(written) + MAX_NODES + 1
    sizes: dict[int, int] = {}

    def size(n) -> int:  # depth is bounded (MAX_DEPTH), so this recursion is too
        if id(n) in sizes:
            return sizes[id(n)]
        sizes[id(n)] = 1  # a recursive alias counts once (SafeLoader builds it as a cycle)
        if isinstance(n, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in n.value)
        elif isinstance(n, yaml.SequenceNode):
            total = 1 + sum(size(v) for v in n.value)
        else:
            total = 1
        sizes[id(n)] = min(total, cap)
        return sizes[id(n)]

    return size(node) - len(written)


def loads(text: str, source: str):
    check_text_size(text, source, MAX_CONFIG_BYTES, "YAML document")
    try:
        with input_budget(source):
            try:
                return _bounded(text, source)
            except yaml.MarkedYAMLError:
                if _BASE is yaml.SafeLoader:
                    raise
                _bounded(text, source, _StrictPyLoader)  # PyYAML's wording of the same error
                raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}" if mark else "?"
        problem = exc.problem or exc.context or "malformed YAML"
        if "maximum nesting depth" in problem:  # libyaml's own bound (1,000 levels) met while scanning ahead
            raise InputError(
                source, where, f"nesting deeper than {MAX_DEPTH} levels (refused before it is built)"
            ) from None
        raise InputError(source, where, f"malformed YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise InputError(source, None, f"malformed YAML: {exc}") from None


def load_yaml_file(path: Path | str):
    path = Path(path)
    return loads(read_text_bounded(path, MAX_CONFIG_BYTES), str(path))
