"""`clustercert init DIR`: a commented starter inventory that `clustercert inventory -i DIR` accepts."""

from __future__ import annotations

from clustercert.errors import EXIT_OK
from clustercert.model import starter
from clustercert.report import documents


def run(args) -> int:
    started = documents.now()
    done = starter.init(args.directory, args.profile, args.force)
    if args.format == "json":
        print(documents.dumps(documents.envelope("init", None, started) | done))
        return EXIT_OK
    print(f"wrote a starter inventory for profile {done['profile']} in {done['directory']}:")
    for f in done["files"]:
        print(f"  {f}")
    print("next: replace the example hosts, put the nodes' host keys into known_hosts (known_hosts.md), then")
    print(f"  clustercert inventory -i {args.directory}")
    return EXIT_OK
