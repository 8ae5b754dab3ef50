"""node-check's zipapp: the pure layers and the node runner in one file for a node, as ``python -m zipapp``
makes it.

``build(target, profiles, components)`` writes ``#!/usr/bin/env python3`` and a zip (zipapp.create_archive) of
the modules in NODE_MODULES and of the check components (``components``: clustercert.checks.COMPONENT_MODULES,
which clustercert.checks imports by name; remote/ comes before checks/ in the layers, so the caller hands them
over) -- what ``clustercert node-check`` imports, all stdlib-only: no pydantic, PyYAML, Ansible,
ansible-runner, Jinja2 or rich -- with ``profiles`` (the built-in profiles, validated on the controller and
resolved: clustercert.model.nodefile reads them as clustercert/profiles/NAME.json) and a ``__main__`` that
runs ``clustercert node-check`` with the program's own arguments. The node needs Python >= 3.10 (MIN_PYTHON:
the parsers use 3.10's ``zip(strict=)`` and ``X | Y`` in isinstance); an older one gets one line and exit 2.

The bytes depend on the sources and the profiles only (entries sorted, with a fixed time and mode, then
``zipapp.create_archive`` adds the interpreter line): building again gives the same file, so the node_check
role's copy changes nothing until clustercert does.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import zipapp
import zipfile
from collections.abc import Iterable
from pathlib import Path

from clustercert.errors import InputError

MIN_PYTHON = (3, 10)
PACKAGE = Path(__file__).resolve().parent.parent  # clustercert/
# the package's modules the zipapp carries besides the check components (paths under clustercert/, without
# .py; "parsers/*": every parser); tests/test_node_check_zipapp.py holds the list closed under their imports
NODE_MODULES = (
    "__init__", "errors", "paths", "shell", "cli", "cmdoptions",
    "model/__init__", "model/names", "model/evidence", "model/plain", "model/nodefile",
    "remote/__init__", "remote/runner",
    "collect/__init__", "collect/ssh", "collect/slurm",
    "parsers/*",
    "checks/__init__", "checks/run", "checks/cluster", "checks/rails",
    "report/__init__", "report/documents", "report/text",
    "commands/__init__", "commands/node_check",
)
INTERPRETER = "/usr/bin/env python3"

# the zipapp's __main__.py: Python 3.0's syntax, so that any python3 can say what it needs
MAIN = """\
# clustercert node-check, as a zipapp (clustercert.remote.nodeapp): `python3 THIS.pyz --help`
import sys

if sys.version_info < {min!r}:
    sys.stderr.write("clustercert: error: node-check needs Python >= {text}; this is %d.%d (%s)\\n"
                     % (sys.version_info[0], sys.version_info[1], sys.executable))
    sys.exit(2)

from clustercert.cli import main

sys.exit(main(["node-check"] + sys.argv[1:]))
""".format(min=MIN_PYTHON, text=".".join(map(str, MIN_PYTHON)))


def module_files(components: Iterable[str]) -> list[str]:
    """The files NODE_MODULES and the check ``components`` name, relative to the package, sorted."""
    out = set()
    for m in (*NODE_MODULES, *(f"checks/{c}" for c in components)):
        if m.endswith("/*"):
            out |= {p.relative_to(PACKAGE).as_posix() for p in (PACKAGE / m[:-2]).glob("*.py")}
        else:
            out.add(f"{m}.py")
    return sorted(out)


def build(target: str | Path, profiles: dict[str, dict], components: Iterable[str],
          interpreter: str = INTERPRETER) -> tuple[Path, bool]:
    """Write the zipapp to ``target`` (replaced atomically, mode 0755) carrying ``profiles`` ({name: the
    resolved profile's dict}) and the check ``components`` (clustercert.checks.COMPONENT_MODULES); returns its
    path and whether it changed (a target with the same bytes is left as it is). A target whose directory is
    missing or not writable is bad input."""
    target = Path(target).expanduser().absolute()
    if target.is_dir():
        raise InputError("--build-zipapp", str(target), "is a directory, expected a file")
    if not target.parent.is_dir() or not os.access(target.parent, os.W_OK | os.X_OK):
        raise InputError("--build-zipapp", str(target), f"{target.parent} is not a writable directory")
    entries = {f"clustercert/{rel}": (PACKAGE / rel).read_bytes() for rel in module_files(components)}
    entries |= {f"clustercert/profiles/{name}.json": (json.dumps(data, sort_keys=True) + "\n").encode()
                for name, data in profiles.items()}
    entries["__main__.py"] = MAIN.encode()
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        for name in sorted(entries):  # fixed order, time and mode: the same sources make the same bytes
            info = zipfile.ZipInfo(name, date_time=(2000, 1, 1, 0, 0, 0))
            info.external_attr = 0o100644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, entries[name])
    archive.seek(0)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    os.close(fd)
    try:
        # the zipapp: the interpreter line, the zip
        zipapp.create_archive(archive, tmp, interpreter=interpreter)
        os.chmod(tmp, 0o755)
        changed = not target.is_file() or target.read_bytes() != Path(tmp).read_bytes()
        if changed or target.stat().st_mode & 0o777 != 0o755:
            os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target, changed
