"""`clustercert parse KIND FILE`: saved tool output through the same parsers the validators use."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from clustercert import parsers
from clustercert.errors import EXIT_OK, InputError


def run(args) -> int:
    if args.list:
        for kind in sorted(parsers.REGISTRY):
            print(f"{kind:28} {parsers.REGISTRY[kind].description}")
        return EXIT_OK
    if not args.kind or not args.file:
        raise InputError("parse", None, "usage: clustercert parse KIND FILE [--json] (or --list)")
    if args.kind not in parsers.REGISTRY:
        raise InputError("parse", "KIND", f"unknown kind {args.kind!r} (see `clustercert parse --list`)")
    text, source = _read(args.file)
    try:
        record = parsers.parse(args.kind, text)
    except parsers.ParseError as exc:
        raise InputError(source, args.kind, exc.reason) from None
    if args.json:
        print(json.dumps(record, indent=2, default=str))
    else:
        print(yaml.safe_dump(record, sort_keys=False, default_flow_style=False).rstrip())
    return EXIT_OK


def _read(file: str) -> tuple[str, str]:
    """(the text, where it came from): ``-`` is stdin."""
    if file == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        return Path(file).read_text(encoding="utf-8", errors="replace"), file
    except FileNotFoundError:
        raise InputError(file, None, "file not found") from None
    except IsADirectoryError:
        raise InputError(file, None, "is a directory, expected a file") from None
    except OSError as exc:
        raise InputError(file, None, f"cannot read: {exc.strerror}") from None
