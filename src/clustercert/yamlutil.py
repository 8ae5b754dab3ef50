"""Strict YAML loading: duplicate keys are errors, and every failure names the file and line."""

from __future__ import annotations

from pathlib import Path

import yaml

from clustercert.errors import InputError


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


def loads(text: str, source: str):
    try:
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
