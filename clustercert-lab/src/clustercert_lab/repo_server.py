"""Serve the lab's simulated apt repository over HTTP on the management bridge, and NTP.

Run as ``python -m clustercert_lab.repo_server ADDRESS PORT DIRECTORY PIDFILE`` (the lab starts it
as a daemon). It serves files only (no directory listings), GET and HEAD. It also answers NTP
(UDP 123 on the same address) with the host's clock, as a site's time server would: nodes run real
chrony against it (lab nodes share the host's kernel clock, so chrony only measures; see docs/lab.md).
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import struct
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

NTP_EPOCH_OFFSET = 2208988800  # seconds from 1900-01-01 (NTP) to 1970-01-01 (Unix)


def _ntp_ts(t: float) -> int:
    secs = int(t) + NTP_EPOCH_OFFSET
    frac = int((t - int(t)) * (1 << 32)) & 0xFFFFFFFF
    return (secs << 32) | frac


def ntp_reply(request: bytes, received: float, now: float) -> bytes | None:
    """An NTPv4 server-mode reply (stratum 2, leap 0) to a client-mode request; None for anything else."""
    if len(request) < 48:
        return None
    li_vn_mode = request[0]
    version, mode = (li_vn_mode >> 3) & 0x7, li_vn_mode & 0x7
    if mode != 3 or version not in (3, 4):
        return None
    poll = request[2]
    client_transmit = request[40:48]
    header = struct.pack("!BBbb", (0 << 6) | (version << 3) | 4, 2, poll, -20)
    root = struct.pack("!II", 1 << 8, 1 << 8)  # root delay / dispersion: ~4 ms each (16.16 fixed point)
    refid = socket.inet_aton("127.127.1.0")
    return (header + root + refid + struct.pack("!Q", _ntp_ts(now - 16)) + client_transmit
            + struct.pack("!QQ", _ntp_ts(received), _ntp_ts(now)))


def serve_ntp(address: str, port: int = 123) -> threading.Thread:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))

    def loop() -> None:
        while True:
            data, peer = sock.recvfrom(512)
            received = time.time()
            reply = ntp_reply(data, received, time.time())
            if reply:
                sock.sendto(reply, peer)

    t = threading.Thread(target=loop, name="ntp", daemon=True)
    t.start()
    return t


class _Handler(SimpleHTTPRequestHandler):
    def list_directory(self, path):  # no listings: an apt repo needs none
        self.send_error(404, "Not found")
        return None

    def log_message(self, format, *args):
        sys.stderr.write(f"{self.address_string()} {format % args}\n")


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: python -m clustercert_lab.repo_server ADDRESS PORT DIRECTORY PIDFILE", file=sys.stderr)
        return 2
    address, port, directory, pidfile = argv[0], int(argv[1]), argv[2], argv[3]
    handler = functools.partial(_Handler, directory=directory)
    ThreadingHTTPServer.allow_reuse_address = True
    server = ThreadingHTTPServer((address, port), handler)
    serve_ntp(address)
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
