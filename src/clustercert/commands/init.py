"""`clustercert init DIR`: a commented starter inventory that `clustercert inventory -i DIR` accepts."""

from __future__ import annotations

from clustercert.commands.output import emit
from clustercert.errors import EXIT_OK
from clustercert.model import starter
from clustercert.report import documents


def run(args) -> int:
    started = documents.now()
    done = starter.init(args.directory, args.profile, args.force)
    emit(args, lambda: documents.envelope("init", None, started) | done, lambda: print(
        f"wrote a starter inventory for profile {done['profile']} in {done['directory']}:",
        *(f"  {f}" for f in done["files"]),
        "next: replace the example hosts, put the nodes' host keys into known_hosts (known_hosts.md), then",
        f"  clustercert inventory -i {args.directory}", sep="\n"))
    return EXIT_OK
