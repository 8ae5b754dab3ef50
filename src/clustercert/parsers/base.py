"""Parser contract shared by every evidence parser.

A parser is a pure function ``parse(text: str) -> dict``: text in, a JSON-serialisable record out,
no I/O. Unrecognised or truncated input raises ``ParseError`` saying what was expected.
Numbers that carry a unit are named for it (``gbit_per_s``, ``gbyte_per_s``, ``mib_per_s``,
``usec``, ``mib``, ``celsius``...), never a bare number of unknown unit.

Parsers register themselves under a kind name with ``@register("kind", "one-line description")``.

Time: every parse runs under a wall-clock budget (``clustercert.parsers.parse``: PARSE_TIME_LIMIT_S, or
CLUSTERCERT_PARSE_TIME_LIMIT_S). Parsers' loops call ``check_time()`` (``text_lines``' lines do it for
them), which raises ``OverTime`` once the budget is spent; ``parse`` turns that into a ParseError, so a
pathological output is an ``error`` finding naming its tool (or exit 2 naming the file), never a hung run.
The budget is a context variable: it holds in whichever thread parses, where signal.alarm would only
work in the main thread. The loaders have their own budget (clustercert.model.bounded.input_budget: the
model layer sits below the parsers).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

PARSE_TIME_LIMIT_S = 30.0  # the largest real outputs parse in well under a second
PARSE_TIME_ENV = "CLUSTERCERT_PARSE_TIME_LIMIT_S"


class OverTime(Exception):  # noqa: N818 - not an error of the input's form, a budget spent
    """A time budget (``time_budget``) was spent; ``seconds`` is the budget."""

    def __init__(self, seconds: float | None = None):  # the watchdog raises the bare class
        self.seconds = seconds
        super().__init__("did not finish within its time budget" if seconds is None else
                         f"did not finish within {seconds:g} s")


# (monotonic deadline, the budget in seconds) of the innermost budget, or None
_DEADLINE: ContextVar[tuple[float, float] | None] = ContextVar("clustercert_deadline", default=None)


@contextlib.contextmanager
def time_budget(seconds: float) -> Iterator[None]:
    """Within: ``check_time()`` raises OverTime once ``seconds`` have passed. An enclosing budget that ends
    sooner stays in force (a budget never extends the one around it)."""
    end = time.monotonic() + seconds
    outer = _DEADLINE.get()
    token = None if outer is not None and outer[0] <= end else _DEADLINE.set((end, seconds))
    try:
        yield
    finally:
        if token is not None:
            _DEADLINE.reset(token)


def check_time() -> None:
    """Raise OverTime when the current budget is spent (a no-op outside one)."""
    d = _DEADLINE.get()
    if d is not None and time.monotonic() > d[0]:
        raise OverTime(d[1])


class _Watchdog:
    """One daemon thread that raises OverTime in a thread whose armed deadline passes (CPython's
    PyThreadState_SetAsyncExc: delivered at the thread's next bytecode, whatever the parser's loops look
    like). A long single C call (one regex match, json.loads) finishes first; the size limits bound those."""

    def __init__(self) -> None:
        import threading

        self._cond = threading.Condition()
        self._armed: dict[int, tuple[float, int, float]] = {}  # token -> (deadline, thread id, seconds)
        self._fired: set[int] = set()
        self._next = 0
        self._thread: threading.Thread | None = None
        try:
            import ctypes

            api = ctypes.pythonapi.PyThreadState_SetAsyncExc

            def set_async(tid: int, exc) -> None:  # exc None: NULL, which takes back a pending one
                api(ctypes.c_ulong(tid), None if exc is None else ctypes.py_object(exc))

            self._set_async = set_async
        except (ImportError, AttributeError):  # not CPython: the cooperative checks only
            self._set_async = None

    def arm(self, seconds: float) -> int | None:
        if self._set_async is None:
            return None
        import threading

        with self._cond:
            self._next += 1
            token = self._next
            self._armed[token] = (time.monotonic() + seconds, threading.get_ident(), seconds)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="clustercert-parse-watchdog", daemon=True
                )
                self._thread.start()
            self._cond.notify()
            return token

    def disarm(self, token: int | None) -> None:
        if token is None:
            return
        with self._cond:
            entry = self._armed.pop(token, None)
            if token in self._fired:
                self._fired.discard(token)
                if entry is not None:  # fired but not yet delivered: take it back
                    self._set_async(entry[1], None)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                due = [t for t, (end, _tid, _s) in self._armed.items() if end <= now and t not in self._fired]
                for t in due:
                    self._fired.add(t)
                    self._set_async(self._armed[t][1], OverTime)
                waiting = [end for t, (end, _tid, _s) in self._armed.items() if t not in self._fired]
                self._cond.wait(timeout=max(0.0, min(waiting) - now) if waiting else None)


_WATCHDOG = _Watchdog()


@contextlib.contextmanager
def hard_time_budget(seconds: float) -> Iterator[None]:
    """``time_budget``, and the watchdog besides: OverTime is raised in this thread even where the code
    never calls ``check_time()``. For parsers (pure functions: an exception anywhere in them is harmless)."""
    with time_budget(seconds):
        token = _WATCHDOG.arm(seconds)
        try:
            yield
        finally:
            _WATCHDOG.disarm(token)


def limit_from_env(name: str, default: float) -> float:
    """A time limit in seconds from the environment variable ``name`` (a positive number), else ``default``.
    ValueError naming the variable for anything else."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{name}={raw!r}: expected a positive number of seconds")
    return value


class ParseError(ValueError):
    """Input was not what the parser expected. The message says what was expected."""

    def __init__(self, kind: str, reason: str):
        self.kind = kind
        self.reason = reason
        super().__init__(f"{kind}: {reason}")


@dataclass(frozen=True)
class ParserSpec:
    kind: str
    description: str
    func: Callable[[str], dict]


REGISTRY: dict[str, ParserSpec] = {}


def register(kind: str, description: str):
    def deco(func: Callable[[str], dict]) -> Callable[[str], dict]:
        if kind in REGISTRY:
            raise RuntimeError(f"parser kind registered twice: {kind}")
        REGISTRY[kind] = ParserSpec(kind, description, func)
        return func

    return deco
