"""``--list-hosts`` on any verb that takes ``-i``: the hosts the inventory and ``--limit`` select (the
inventory fully checked); nothing runs."""

from __future__ import annotations

from clustercert.commands.common import inventory
from clustercert.commands.output import emit
from clustercert.errors import EXIT_OK
from clustercert.report import documents


def run(args) -> int:
    started = documents.now()
    inv = inventory(args)
    names = list(inv.hosts)
    emit(args, lambda: documents.envelope("hosts", None, started) | {
        "inventory": str(inv.source), "limit": args.limit, "hosts": names},
        lambda: print(f"  hosts ({len(names)}):", *(f"    {n}" for n in names), sep="\n"))
    return EXIT_OK
