"""`clustercert lab up|down|status|fault|heal|inventory`: the simulated lab (clustercert_lab) on this machine."""

from __future__ import annotations

import json

from clustercert.errors import EXIT_OK, InputError
from clustercert.report.terminal import print_lab_status
from clustercert_lab import manager


def key_values(items: list[str]) -> dict[str, str]:
    """`lab fault NODE KIND KEY=VALUE ...`: the fault's parameters."""
    params: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError("lab fault", item, "parameters are KEY=VALUE")
        if key in params:
            raise InputError("lab fault", key, "parameter given twice")
        params[key] = value
    return params


def run(args) -> int:
    params = key_values(args.params) if args.lab_cmd == "fault" else {}
    if args.lab_cmd == "up":
        print_lab_status(manager.up(nodes=args.nodes, spec_path=args.spec))
    elif args.lab_cmd == "down":
        manager.down()
        print("lab is down")
    elif args.lab_cmd == "status":
        status = manager.status()
        if args.format == "json":
            print(json.dumps(status, indent=2, default=str))
        else:
            print_lab_status(status)
    elif args.lab_cmd == "fault":
        manager.fault(args.node, args.kind, params)
        print(f"{args.node}: {args.kind} injected")
    elif args.lab_cmd == "heal":
        manager.heal(args.node, args.kind)
        print(f"{args.node}: healed{' ' + args.kind if args.kind else ''}")
    elif args.lab_cmd == "inventory":
        print(manager.inventory_path())
    else:
        raise InputError("lab", None, f"unknown lab command {args.lab_cmd!r}")
    return EXIT_OK
