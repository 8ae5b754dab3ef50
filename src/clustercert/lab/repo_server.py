"""Serve the lab's simulated apt repository over HTTP on the management bridge.

Run as ``python -m clustercert.lab.repo_server ADDRESS PORT DIRECTORY PIDFILE`` (the lab starts it
as a daemon). It serves files only (no directory listings), GET and HEAD.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer


class _Handler(SimpleHTTPRequestHandler):
    def list_directory(self, path):  # no listings: an apt repo needs none
        self.send_error(404, "Not found")
        return None

    def log_message(self, format, *args):
        sys.stderr.write(f"{self.address_string()} {format % args}\n")


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: python -m clustercert.lab.repo_server ADDRESS PORT DIRECTORY PIDFILE", file=sys.stderr)
        return 2
    address, port, directory, pidfile = argv[0], int(argv[1]), argv[2], argv[3]
    handler = functools.partial(_Handler, directory=directory)
    ThreadingHTTPServer.allow_reuse_address = True
    server = ThreadingHTTPServer((address, port), handler)
    with open(pidfile + ".tmp", "w") as fh:
        fh.write(f"{os.getpid()}\n")
    os.replace(pidfile + ".tmp", pidfile)

    def _stop(_sig, _frm):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _stop)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
