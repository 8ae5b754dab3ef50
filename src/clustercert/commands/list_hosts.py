"""``--list-hosts`` on any verb that takes ``-i``: the hosts the inventory and ``--limit`` select (the
inventory fully checked); nothing runs."""

from __future__ import annotations

from clustercert.commands.common import inventory
from clustercert.errors import EXIT_OK
from clustercert.report import documents


def run(args) -> int:
    started = documents.now()
    inv = inventory(args)
    names = list(inv.hosts)
    if getattr(args, "format", "table") == "json":
        print(documents.dumps(documents.envelope("hosts", None, started) | {
            "inventory": str(inv.source), "limit": args.limit, "hosts": names}))
        return EXIT_OK
    print(f"  hosts ({len(names)}):")
    for n in names:
        print(f"    {n}")
    return EXIT_OK
