"""Live progress for playbook runs: hosts ok/changed/failed/unreachable and the current task.

Above the hosts, one line counts them all (hosts done with the current task out of the total, and how many
are ok, changed, failed, unreachable, running). When the hosts do not fit the terminal's rows (1,000 hosts
on a 50-row terminal), the table holds that count and, instead of one row per host, the failed and
unreachable hosts and the slowest ones (longest running on the current task, then the most task time)."""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Callable

from rich.console import Console
from rich.live import Live
from rich.table import Table


class PlaybookProgress:
    """A callback for engine.run_playbook that renders a live table on stderr (or plain lines)."""

    COLS = ("ok", "changed", "failed", "unreachable", "skipped")

    def __init__(self, title: str, enabled: bool = True, console: Console | None = None, total: int | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.title = title
        self.total = total
        self.clock = clock
        self.running: dict[str, float] = {}  # host -> when it started the current task
        self.task_seconds: dict[str, float] = defaultdict(float)  # host -> its tasks' time so far
        self.done_task: set[str] = set()  # hosts with a result for the current task
        self.finished = False
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
            self.done_task.clear()
            if self.enabled and not self.live_mode:
                self.console.print(f"TASK {ev['task']}", highlight=False)
        elif kind == "play":
            self.play = ev["play"]
        elif kind == "stats":
            self.finished = True
            self.running.clear()
        elif kind == "host" and not ev["item"]:
            status = ev["status"]
            self._timing(ev["host"], status)
            col = {"ignored": "ok", "rescued": "ok"}.get(status, status)
            if col in self.COLS:
                self.counts[ev["host"]][col] += 1
            if self.enabled and not self.live_mode and status in ("changed", "failed", "unreachable"):
                msg = f": {ev['msg']}" if ev.get("msg") else ""
                self.console.print(f"  {status}: {ev['host']}{msg}", highlight=False)
        if self._live is not None:
            self._live.update(self._render())

    def _timing(self, host: str, status: str) -> None:
        now = self.clock()
        if status == "start":
            self.running[host] = now
            self.counts[host]  # noqa: B018 - the host has a row from its first task on
            return
        began = self.running.pop(host, None)
        if began is not None:
            self.task_seconds[host] += now - began
        self.done_task.add(host)

    def _render(self) -> Table:
        size = self.console.size
        return render_playbook_table(self, size.height if self.live_mode else None, size.width)


# ---- the bootstrap table: the overall count, and a summary where the hosts do not fit ------------------

STATES = ("ok", "changed", "failed", "unreachable", "running")
TABLE_LINES = 6  # a rich Table's lines besides its rows: title, top border, header, rule, bottom border, caption


def host_state(progress: PlaybookProgress, host: str) -> str:
    """unreachable or failed (once, for the rest of the run), running (a task under way), changed, ok,
    or pending (nothing yet)."""
    row = progress.counts.get(host) or dict.fromkeys(PlaybookProgress.COLS, 0)
    if row["unreachable"]:
        return "unreachable"
    if row["failed"]:
        return "failed"
    if host in progress.running:
        return "running"
    if row["changed"]:
        return "changed"
    return "ok" if any(row.values()) else "pending"


def overall_counts(progress: PlaybookProgress) -> dict[str, int]:
    """{"done", "total", and each of STATES (plus "pending")}: "done" counts the hosts through the current
    task (a failed or unreachable host is out of the play: done), every host once the run has ended."""
    hosts = list(progress.counts)
    total = max(progress.total or 0, len(hosts))
    out = dict.fromkeys((*STATES, "pending"), 0)
    for h in hosts:
        out[host_state(progress, h)] += 1
    out["pending"] += total - len(hosts)
    if progress.finished:
        done = total
    else:
        done = sum(1 for h in hosts if host_state(progress, h) in ("failed", "unreachable")
                   or (h in progress.done_task and h not in progress.running))
    return {"done": done, "total": total, **out}


def summary_line(progress: PlaybookProgress) -> str:
    c = overall_counts(progress)
    parts = [f"{c[s]} {s}" for s in STATES]
    if c["pending"]:
        parts.append(f"{c['pending']} pending")
    return f"hosts {c['done']}/{c['total']} done · " + " · ".join(parts)


def _notable(progress: PlaybookProgress, n: int) -> list[tuple[str, str]]:
    """The ``n`` hosts to show when not every host fits: (host, why) for the failed and unreachable first,
    then the longest running on the current task, then the most task time so far."""
    now = progress.clock()
    bad = sorted(h for h in progress.counts if host_state(progress, h) in ("failed", "unreachable"))
    running = sorted(progress.running, key=lambda h: (progress.running[h], h))
    slow = sorted((h for h in progress.task_seconds if h not in progress.running),
                  key=lambda h: (-progress.task_seconds[h], h))
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for group, why in ((bad, lambda h: host_state(progress, h)),
                       (running, lambda h: f"running {now - progress.running[h]:.0f}s"),
                       (slow, lambda h: f"slowest: {progress.task_seconds[h]:.0f}s of tasks")):
        for h in group:
            if len(out) >= n:
                return out
            if h not in seen:
                seen.add(h)
                out.append((h, why(h)))
    return out


def render_playbook_table(progress: PlaybookProgress, height: int | None, width: int = 80) -> Table:
    """The live table: one row per host when they fit ``height`` rows (None: no limit), else the overall
    count with the failed, unreachable and slowest hosts only (the table then as wide as the terminal, its
    title and caption wrapped at ``width``)."""
    title = f"{progress.title} — {progress.task or progress.play or 'starting'}"
    caption = summary_line(progress)
    hosts = sorted(progress.counts)
    fits = height is None or len(hosts) <= height - TABLE_LINES - 1
    t = Table(title=title, title_justify="left", caption_justify="left", expand=not fits)
    t.add_column("host")
    for c in PlaybookProgress.COLS:
        t.add_column(c, justify="right")
    if fits:
        for host in hosts:
            row = progress.counts[host]
            t.add_row(host, *(str(row[c]) for c in PlaybookProgress.COLS))
        t.caption = caption
        return t
    t.add_column("state")
    caption += f" (showing the failed, unreachable and slowest of {len(hosts)})"
    wrapped = -(-len(title) // max(width, 1)) + -(-len(caption) // max(width, 1))  # lines, rounded up
    budget = max(1, height - (TABLE_LINES - 2) - wrapped - 1)
    for host, why in _notable(progress, budget):
        row = progress.counts[host]
        t.add_row(host, *(str(row[c]) for c in PlaybookProgress.COLS), why)
    t.caption = caption
    return t


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()
