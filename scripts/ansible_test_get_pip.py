"""ansible-test's pip bootstrap, without its download (scripts/collection_check.sh).

ansible-test fills each sanity test's virtual environment after running a ``get-pip`` script it downloads from
Ansible's CI file host, which this project's machines cannot reach. It runs a script already in its cache
instead, so collection_check.sh puts this one there: pip from the interpreter's own ensurepip (no download),
then the packages ansible-test pinned (``pip==X``), and after it the pinned sanity requirements, from the
package index pip is configured with, as for any other package of this project.
Arguments are those ansible-test passes to get-pip: pip options and package specs.
"""

from __future__ import annotations

import subprocess
import sys


def main(argv: list[str]) -> int:
    args = [a for a in argv if a not in ("--no-setuptools", "--no-wheel")]  # get-pip's own flags, not pip's
    # ensurepip in a process of its own: in-process it sets PIP_CONFIG_FILE=/dev/null in os.environ, and the
    # pip run after it would then ignore the machine's pip configuration (its CA bundle, its index)
    # into this virtual environment
    rc = subprocess.call([sys.executable, "-m", "ensurepip", "--default-pip"])
    return rc or subprocess.call([sys.executable, "-m", "pip", "install", "-q", *args])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
