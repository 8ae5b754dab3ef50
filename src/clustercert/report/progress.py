"""Live progress for playbook runs: hosts ok/changed/failed/unreachable and the current task."""

from __future__ import annotations

import sys
from collections import defaultdict

from rich.console import Console
from rich.live import Live
from rich.table import Table


class PlaybookProgress:
    """A callback for engine.run_playbook that renders a live table on stderr (or plain lines)."""

    COLS = ("ok", "changed", "failed", "unreachable", "skipped")

    def __init__(self, title: str, enabled: bool = True, console: Console | None = None):
        self.title = title
        self.console = console or Console(stderr=True)
        self.enabled = enabled
        self.live_mode = enabled and self.console.is_terminal
        self.counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(self.COLS, 0))
        self.task = ""
        self.play = ""
        self._live: Live | None = None

    def __enter__(self) -> PlaybookProgress:
        if self.live_mode:
            self._live = Live(self._render(), console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(*exc)

    def __call__(self, ev: dict) -> None:
        kind = ev["kind"]
        if kind == "task":
            self.task = ev["task"]
            if self.enabled and not self.live_mode:
                self.console.print(f"TASK {ev['task']}", highlight=False)
        elif kind == "play":
            self.play = ev["play"]
        elif kind == "host" and not ev["item"]:
            status = ev["status"]
            col = {"ignored": "ok", "rescued": "ok"}.get(status, status)
            if col in self.COLS:
                self.counts[ev["host"]][col] += 1
            if self.enabled and not self.live_mode and status in ("changed", "failed", "unreachable"):
                msg = f": {ev['msg']}" if ev.get("msg") else ""
                self.console.print(f"  {status}: {ev['host']}{msg}", highlight=False)
        if self._live is not None:
            self._live.update(self._render())

    def _render(self) -> Table:
        t = Table(title=f"{self.title} — {self.task or self.play or 'starting'}", title_justify="left")
        t.add_column("host")
        for c in self.COLS:
            t.add_column(c, justify="right")
        for host in sorted(self.counts):
            row = self.counts[host]
            t.add_row(host, *(str(row[c]) for c in self.COLS))
        return t


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()
