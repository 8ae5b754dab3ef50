"""Errors that map onto the CLI's exit codes.

Exit codes (documented in the README):
  0  success / certified
  1  findings: something failed, drifted or was unreachable
  2  bad input or usage (InputError)
  3  internal error (any other ClustercertError, or an exception: one line, -v for the traceback)
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_INPUT = 2
EXIT_INTERNAL = 3


class ClustercertError(Exception):
    exit_code = EXIT_INTERNAL


class InputError(ClustercertError):
    """Bad input: a file, a key in it, and the reason. Rendered as one line, exit 2."""

    exit_code = EXIT_INPUT

    def __init__(self, source: str, key: str | None, reason: str):
        self.source = str(source)
        self.key = key
        self.reason = reason
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = [self.source]
        if self.key:
            parts.append(self.key)
        parts.append(self.reason)
        return ": ".join(p.replace("\n", " ") for p in parts)
