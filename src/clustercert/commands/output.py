"""How every verb ends: its result on stdout as the output format asks (``emit``) and its exit status
(``exit_code``). Light (the JSON text only): the verbs that need no node import it too."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from clustercert.errors import EXIT_FINDINGS, EXIT_OK
from clustercert.report import documents


def wants_json(args: argparse.Namespace) -> bool:
    """--format json (a verb, or --list-hosts on one, without --format prints its text)."""
    return getattr(args, "format", None) == "json"


def emit(args: argparse.Namespace, doc: dict | Callable[[], dict], text: Callable[[], object]) -> None:
    """The verb's result on stdout: with --format json its document (``doc``, or what ``doc()`` makes: only
    then), one JSON text with its schema id; otherwise ``text()`` prints the verb's table or lines."""
    if wants_json(args):
        print(documents.dumps(doc() if callable(doc) else doc))
    else:
        text()


def exit_code(ok: bool) -> int:
    """0 when everything passed (certified, no drift), 1 for findings (failed, drifted, unreachable)."""
    return EXIT_OK if ok else EXIT_FINDINGS
