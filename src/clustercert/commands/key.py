"""`clustercert key init|show`: the certificate signing key under the state directory."""

from __future__ import annotations

from clustercert import paths
from clustercert.commands import STATEFUL
from clustercert.errors import EXIT_OK
from clustercert.record import certificate

NEEDS = STATEFUL


def run(args) -> int:
    state = paths.state_dir()
    if args.key_cmd == "init":
        priv = certificate.init_key(state, force=args.force)  # refuses an existing key without --force
    else:
        priv = certificate.key_paths(state)[0]
    key, pub = certificate.load_or_create_key(None, state)
    print(f"signing key {priv}")
    print(f"public key  {pub}")
    if args.key_cmd == "show":
        print(pub.read_text().strip())
    print(f"fingerprint {certificate.fingerprint(key.public_key())}")
    return EXIT_OK
