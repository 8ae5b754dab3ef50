"""`clustercert parse KIND FILE`: saved tool output through the same parsers the validators use."""

from __future__ import annotations

import json
import sys

import yaml

from clustercert import parsers
from clustercert.errors import EXIT_OK, InputError
from clustercert.model.bounded import MAX_OUTPUT_BYTES, check_json_depth, check_text_size, read_text_bounded


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
    check_text_size(text, source, MAX_OUTPUT_BYTES, "tool output")
    if text.lstrip()[:1] in ("{", "["):
        check_json_depth(text, source)
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
        return sys.stdin.read(MAX_OUTPUT_BYTES + 1), "<stdin>"
    return read_text_bounded(file, MAX_OUTPUT_BYTES, "tool output", errors="replace"), file
