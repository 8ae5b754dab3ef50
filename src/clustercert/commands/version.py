"""`clustercert version` (and `--version`): the versions that matter, and where the state directory is."""

from __future__ import annotations

import os
import sys
from importlib.metadata import PackageNotFoundError, version

from clustercert import __version__, paths
from clustercert.errors import EXIT_OK
from clustercert.report import documents


def versions() -> dict[str, str]:
    def v(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return {"clustercert": __version__, "ansible-core": v("ansible-core"), "ansible-runner": v("ansible-runner"),
            "pytest-testinfra": v("pytest-testinfra"), "python": sys.version.split()[0]}


def run(args) -> int:
    started = documents.now()
    state = paths.state_dir()
    origin = "CLUSTERCERT_HOME" if os.environ.get("CLUSTERCERT_HOME") else "default"
    vs = versions()
    if getattr(args, "format", "table") == "json":
        print(documents.dumps(documents.envelope("version", None, started) | {
            "versions": vs, "state_dir": {"path": str(state), "origin": origin, "exists": state.is_dir()}}))
        return EXIT_OK
    for name, value in vs.items():
        print(f"{name} {value}")
    print(f"state directory {state} ({origin}{'' if state.is_dir() else ', not created yet'})")
    return EXIT_OK
