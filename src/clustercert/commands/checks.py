"""`clustercert checks`: every check id and probe id, what it reads, what each profile holds it to, and the
lab fault that shows it failing (``--format markdown`` is docs/checks.md)."""

from __future__ import annotations

import sys

from clustercert.errors import EXIT_OK
from clustercert.report import catalogue, documents
from clustercert.report.terminal import print_checks


def run(args) -> int:
    started = documents.now()
    doc = catalogue.document(args.profile)
    if args.format == "json":
        print(documents.dumps(documents.envelope("checks", None, started) | doc))
    elif args.format == "markdown":
        sys.stdout.write(catalogue.markdown(doc))
    else:
        print_checks(doc)
    return EXIT_OK
