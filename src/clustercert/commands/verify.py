"""`clustercert verify CERT --key PUB`: 0 and one line on stdout when valid; 1 and one line on stderr when
the signature does not verify. Bad input raises InputError (exit 2)."""

from __future__ import annotations

import sys
from pathlib import Path

from clustercert.record.certificate import fingerprint, load_certificate, load_public_key, verify


def run(args) -> int:
    cert_path, key_path = args.certificate, args.key
    ok, reason = verify(Path(cert_path), Path(key_path))
    if not ok:
        print(f"clustercert: error: {cert_path}: {reason}".replace("\n", " "), file=sys.stderr)
        return 1
    cert = load_certificate(Path(cert_path))
    fp = fingerprint(load_public_key(Path(key_path)))
    print(f"certificate OK: {cert.get('cluster')}, verdict {cert.get('verdict')}, signed by {fp}")
    return 0
