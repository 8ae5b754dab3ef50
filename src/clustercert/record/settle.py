"""What a run keeps until it is recorded, set aside from Python's cyclic garbage collector.

Between certify's stages what a stage made (the validators' results, the probes' measurements, the signed
certificate) lives to the end of the run: it is collected once and then frozen (``gc.freeze``), because each
of the collector's later full collections traversed all of it again -- a fifth of the run's CPU at a few
thousand nodes (docs/scale.md). Reference counting frees it as before; ``settling`` gives it back at the end
of the run. benchmarks/scale.py settles at the same points as certify.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
from collections.abc import Callable, Iterator

SETTLE_NODES = 500  # the validators' results are settled every so many nodes as well


def settle() -> None:
    """Collect once (no cyclic garbage is set aside), then set aside from the collector what is alive now."""
    gc.collect()
    gc.freeze()


def settle_every(n: int = SETTLE_NODES) -> Callable[[], None]:
    """A function that settles (``settle``) every ``n``-th time it is called: for the validators'
    ``after_node`` (each collection then traverses only the results of the last ``n`` nodes, not of every node
    so far)."""
    count = itertools.count(1)

    def tick() -> None:
        if next(count) % n == 0:
            settle()
    return tick


@contextlib.contextmanager
def settling() -> Iterator[None]:
    """A run that settles: what ``settle`` set aside is the collector's again when it ends, however it
    ends."""
    try:
        yield
    finally:
        gc.unfreeze()
