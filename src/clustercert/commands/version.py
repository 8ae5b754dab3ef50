"""`clustercert version` (and `--version`): the versions that matter, and where the state directory is."""

from __future__ import annotations

import os
import sys
from importlib.metadata import PackageNotFoundError, version

from clustercert import __version__, paths
from clustercert.commands.output import emit
from clustercert.errors import EXIT_OK
from clustercert.report import documents


def versions() -> dict[str, str]:
    def v(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return {
        "clustercert": __version__,
        "ansible-core": v("ansible-core"),
        "ansible-runner": v("ansible-runner"),
        "pytest-testinfra": v("pytest-testinfra"),
        "python": sys.version.split()[0],
    }


def run(args) -> int:
    started = documents.now()
    state = paths.state_dir()
    origin = "CLUSTERCERT_HOME" if os.environ.get("CLUSTERCERT_HOME") else "default"
    vs = versions()
    where = f"state directory {state} ({origin}{'' if state.is_dir() else ', not created yet'})"
    emit(args, lambda: documents.envelope("version", None, started) | {
        "versions": vs, "state_dir": {"path": str(state), "origin": origin, "exists": state.is_dir()}},
        lambda: print(*(f"{name} {value}" for name, value in vs.items()), where, sep="\n"))
    return EXIT_OK
