"""`clustercert lab ...`: the simulated lab's own program (``python3 -m clustercert_lab``,
clustercert_lab.cli), given the arguments after ``lab`` as they are. The product never imports the lab: it
only runs its program, so the lab's flags, output, one-line errors and exit status are the lab's."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

from clustercert.commands import Needs
from clustercert.errors import InputError

# the lab's program, run with the caller's umask, writes the nodes' root filesystems with their own modes
NEEDS = Needs(private_umask=False)

LAB_PROGRAM = "clustercert_lab"  # the package whose __main__ is the lab's program
LAB_DISTRIBUTION = "clustercert-lab"  # the distribution that installs it (clustercert-lab/pyproject.toml)


def command_line(args) -> list[str]:
    """The lab's program with ``args.argv`` (the words after ``lab``), a -v before ``lab`` passed on to it."""
    return [sys.executable, "-m", LAB_PROGRAM, *["-v"] * args.verbose, *args.argv]


def interpreter() -> str:
    """The binary of this process's Python: /proc/self/exe where there is one, as a user who cannot search the
    directories of sys.executable's path can still start it again (a venv's python under root's home, run
    as nobody through setpriv: tests/lab/test_lab_spec.py); sys.executable elsewhere. The lab's program gets
    sys.executable as its argv[0], so it finds the same prefix and venv as this process."""
    return "/proc/self/exe" if os.path.exists("/proc/self/exe") else sys.executable


def run(args) -> int:
    # find_spec of a top-level name only looks for it on sys.path: nothing of the lab is imported here
    if importlib.util.find_spec(LAB_PROGRAM) is None:
        raise InputError("lab", None, f"the simulated lab is not installed (no {LAB_PROGRAM} package beside "
                                      f"clustercert: it is the distribution {LAB_DISTRIBUTION}, "
                                      "clustercert-lab/ in clustercert's repository)")
    argv = command_line(args)
    if args.own_process:  # the process becomes the lab's: its signals, exit status and a kill reach the lab
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(interpreter(), argv)
    # called in-process (cli.main(argv)): a child, on the caller's stdout and stderr (file descriptors 1 and
    # 2)
    rc = subprocess.call(argv, executable=interpreter())
    return 128 - rc if rc < 0 else rc  # killed by signal N: 128 + N, as a shell says
