"""The lab's own run-time error (its input errors are clustercert.errors.InputError, exit 2)."""

from __future__ import annotations

from clustercert.errors import ClustercertError


class LabError(ClustercertError):
    """The lab failed at run time (exit 3)."""
