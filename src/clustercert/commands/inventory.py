"""`clustercert inventory`: validate an inventory and print what each node must be (profile, thresholds)."""

from __future__ import annotations

from clustercert.commands.common import inventory
from clustercert.commands.output import emit
from clustercert.errors import EXIT_OK
from clustercert.model.inventory import resolved_view
from clustercert.report import documents
from clustercert.report.terminal import print_inventory


def run(args) -> int:
    started = documents.now()
    view = resolved_view(inventory(args))
    emit(args, lambda: documents.envelope("inventory", None, started) | view, lambda: print_inventory(view))
    return EXIT_OK
