"""One certify/drift run per inventory at a time: an flock on a file in the state directory.

The lock dies with its holder (the kernel releases an flock when the process exits, SIGKILL
included), so a killed run never leaves a stale lock. The file records who holds it, for the
message the second run prints.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from clustercert import paths
from clustercert.errors import ClustercertError


class LockBusy(ClustercertError):
    exit_code = 1


def lock_path(inventory_source: str) -> Path:
    digest = hashlib.sha256(str(Path(inventory_source).resolve()).encode()).hexdigest()[:16]
    return paths.state_dir() / "locks" / f"{digest}.lock"


@contextmanager
def inventory_lock(inventory_source: str, verb: str):
    path = lock_path(inventory_source)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
            except (ValueError, OSError):
                holder = {}
            who = (f"`clustercert {holder.get('verb', '?')}` (pid {holder.get('pid', '?')} on "
                   f"{holder.get('host', '?')}, since "
                   f"{time.strftime('%H:%M:%S', time.localtime(holder.get('since', 0)))})")
            raise LockBusy(
                f"another run holds the lock for {inventory_source}: {who}; try again when it has finished"
            ) from None
        info = json.dumps(
            {
                "verb": verb,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "since": time.time(),
                "inventory": str(inventory_source),
            }
        ).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, info, 0)
        yield path
    finally:
        os.close(fd)
