"""Live progress: for playbook runs (PlaybookProgress: hosts ok/changed/failed/unreachable and the current
task) and for validate, certify and probe (RunProgress: nodes done of the total, the pair round and its pairs,
an ETA).

Above the hosts, one line counts them all (hosts done with the current task out of the total, and how many
are ok, changed, failed, unreachable, running). When the hosts do not fit the terminal's rows (1,000 hosts
on a 50-row terminal), the table holds that count and, instead of one row per host, the failed and
unreachable hosts and the slowest ones (longest running on the current task, then the most task time)."""

from __future__ import annotations

import math
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text


class PlaybookProgress:
    """A callback for engine.run_playbook that renders a live table on stderr (or plain lines)."""

    COLS = ("ok", "changed", "failed", "unreachable", "skipped")

    def __init__(
        self,
        title: str,
        enabled: bool = True,
        console: Console | None = None,
        total: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
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
# a rich Table's lines besides its rows: title, top border, header, rule, bottom border, caption
TABLE_LINES = 6


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


# ---- validate, certify, probe: nodes done, the pair round and its pairs, an ETA ------------------------

def wanted(fmt: str | None = None) -> bool:
    """Live progress is drawn where stderr is a terminal, and not for ``--format json``."""
    return fmt != "json" and stderr_is_tty()


def _secs(s: float) -> str:
    s = max(0, round(s))
    return f"{s // 60}m {s % 60:02d}s" if s >= 60 else f"{s}s"


class _Phase:
    """One stage of a run whose items (nodes, or a round's pairs) run ``forks`` at a time."""

    def __init__(self, label: str, items: list[str], forks: int, started: float, detail: str = ""):
        self.label, self.items, self.forks, self.started, self.detail = (
            label,
            list(items),
            max(1, forks),
            started,
            detail,
        )
        self.finished: dict[str, float] = {}  # item -> seconds from the phase's start to its end
        self.status: Counter = Counter()
        self.ended: float | None = None

    def eta(self, now: float) -> float | None:
        """Seconds left, from the elapsed rate: the items of the first wave (they all began with the phase)
        took ``per`` seconds on average; the phase takes about that per wave of ``forks``. None before an
        item ended, or once that estimate is past (the rest are slower than those done)."""
        total, done = len(self.items), len(self.finished)
        if not done or done >= total:
            return None
        first = sorted(self.finished.values())[:min(self.forks, total)]
        per = sum(first) / len(first)
        left = per * math.ceil(total / self.forks) - (now - self.started)
        return left if left >= 1 else None

    def waiting(self, most: int = 3) -> list[str]:
        """The items not done yet, when they are few enough to name."""
        rest = [x for x in self.items if x not in self.finished]
        return rest if len(rest) <= most else []

    def line(self, now: float) -> str:
        total, done = len(self.items), len(self.finished)
        what = "pairs" if self.label.startswith("pair round") else "nodes"
        bad = ", ".join(
            f"{n} {st}" for st, n in sorted(self.status.items()) if st not in ("pass", "done", "skip")
        )
        head = f"{self.label}{f' ({self.detail})' if self.detail else ''}: {done}/{total} {what} done"
        if bad:
            head += f" ({bad})"
        if self.ended is not None:
            return f"{head} in {_secs(self.ended - self.started)}"
        parts = [head, f"{_secs(now - self.started)} so far"]
        eta = self.eta(now)
        parts.append(f"ETA ~{_secs(eta)}" if eta is not None else "ETA unknown")
        if waiting := self.waiting():
            parts.append("waiting on " + ", ".join(waiting))
        return " · ".join(parts)


class RunProgress:
    """Live progress of validate, certify and probe on stderr (``enabled`` and stderr a terminal; silent
    otherwise). The run loops call it: ``progress("nodes", phase=..., names=[...], forks=N)`` as a stage
    over nodes begins, ``progress("node", name=..., status=...)`` as each ends; ``progress("round",
    number=k, most=n, pairs=[...], question=..., forks=N)`` as a pair round begins and ``progress("pair",
    a=..., b=..., status=...)`` as each of its pairs ends. Callable from any thread."""

    def __init__(self, verb: str, enabled: bool = True, console: Console | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.verb, self.clock = verb, clock
        self.console = console or Console(stderr=True, highlight=False)
        self.live_mode = enabled and self.console.is_terminal
        self.started = clock()
        self.phases: list[_Phase] = []
        self._lock = threading.Lock()
        self._live: Live | None = None

    def __enter__(self) -> RunProgress:
        if self.live_mode:
            self._live = Live(get_renderable=self.render, console=self.console, refresh_per_second=4,
                              transient=False, redirect_stdout=False, redirect_stderr=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            with self._lock:
                for p in self.phases:
                    if p.ended is None and len(p.finished) >= len(p.items):
                        p.ended = self.clock()
            self._live.refresh()
            self._live.__exit__(*exc)

    def __call__(self, kind: str, **ev) -> None:
        with self._lock:
            now = self.clock()
            if kind in ("nodes", "round"):
                for p in self.phases:
                    if p.ended is None:
                        p.ended = now
                if kind == "nodes":
                    self.phases.append(_Phase(ev["phase"], ev["names"], ev.get("forks", 1), now))
                else:
                    most = ev.get("most")
                    label = f"pair round {ev['number']}" + (f" of at most {most}" if most else "")
                    self.phases.append(
                        _Phase(
                            label,
                            [f"{a}<->{b}" for a, b in ev["pairs"]],
                            ev.get("forks", 1),
                            now,
                            ev.get("question") or "",
                        )
                    )
            elif kind in ("node", "pair") and self.phases:
                p = self.phases[-1]
                item = ev["name"] if kind == "node" else f"{ev['a']}<->{ev['b']}"
                if item not in p.finished:
                    p.finished[item] = now - p.started
                    p.status[str(ev.get("status") or "done")] += 1
                if len(p.finished) >= len(p.items):
                    p.ended = now

    def lines(self) -> list[str]:
        """What the live display shows: the verb and its time so far, then a line per stage."""
        with self._lock:
            now = self.clock()
            return [f"{self.verb}: {_secs(now - self.started)}", *(f"  {p.line(now)}" for p in self.phases)]

    def render(self) -> Text:
        return Text("\n".join(self.lines()), no_wrap=False, overflow="fold")
