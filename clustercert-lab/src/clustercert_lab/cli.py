"""The lab's program: `clustercert lab up|down|status|fault|heal|inventory|slurm` (the product's `lab` verb
runs it with the words after ``lab``), also ``python3 -m clustercert_lab ...`` and the ``clustercert-lab``
script.

It speaks as `clustercert lab` whichever way it starts: the same help, one-line errors
("clustercert: error: lab fault: ...") and exit statuses as every clustercert verb (clustercert.cli's
parser and run_program: the lab may import the product, never the other way round)."""

from __future__ import annotations

import argparse
import json

from clustercert import cmdoptions as opt
from clustercert.cli import PROG, Parser, help_format, parse, run_program
from clustercert.errors import EXIT_OK, InputError

NODES = opt.option("--nodes", type=opt.positive_int, metavar="N",
                   help="how many nodes (default: the spec's, else 4)")
SPEC = opt.option("--spec", metavar="FILE", help="lab spec YAML: nodes, profile, link_mbit, faults, slurm")
SLURM = opt.option("--slurm", action="store_true",
                   help="with Slurm on the nodes (slurmctld on the first, slurmd on all), as the spec's "
                        "`slurm: true`")
SLURM_ACTION = opt.option("action", choices=("up", "down"),
                          help="up: install and start Slurm, wait until every node is idle; down: stop and "
                               "disable it")
FAULT_NODE = opt.option("node", help="the lab node (node01, ...)")
FAULT_KIND = opt.option("kind",
                        help="the fault kind (docs/lab-faults.md; `clustercert checks` names the check each "
                             "fails)")
FAULT_PARAMS = opt.option("params", nargs="*", metavar="KEY=VALUE",
                          help="the fault's parameters (defaults where "
                                "left out)")
HEAL_NODE = opt.option("node", help="the lab node")
HEAL_KIND = opt.option("kind", nargs="?", help="only this fault kind (default: every fault of the node)")


def build_parser() -> argparse.ArgumentParser:
    top = Parser(prog=f"{PROG} lab", **help_format(
        """\
        Start, inspect, break and mend the lab: systemd-nspawn nodes with their own root filesystems,
        network namespaces, sshd and apt; simulated GPUs and HCAs. Needs root.""",
        "clustercert lab up --nodes 4\nclustercert lab fault node02 gpu_missing gpu=3\nclustercert lab heal "
        "node02\n"
        "clustercert lab down"))
    top.set_defaults(verb="lab")  # Parser names the command in its errors: `clustercert lab up`
    opt.VERBOSE.add(top, dest="verbose_verb")
    sub = top.add_subparsers(dest="lab_cmd", metavar="CMD", parser_class=Parser, required=True)

    def command(name: str, help: str, description: str, example: str, *options: opt.Option) -> None:
        p = sub.add_parser(name, help=help, **help_format(description, example))
        opt.VERBOSE.add(p, dest="verbose_cmd")
        opt.add(p, *options)

    command("up", "start the lab (idempotent)",
            "Build the image once (cached), start the nodes, write the inventory.",
            "clustercert lab up --nodes 4 --spec lab.yml", NODES, SPEC, SLURM)
    command("down", "stop the lab and remove every trace",
            "Stop every node and remove the lab's links, bridges, mounts and processes.",
            "clustercert lab down")
    command("status", "nodes, their state and faults", "Show the lab's nodes, addresses and active faults.",
            "clustercert lab status --format json", opt.output_format("table", "json"))
    command("fault", "inject a fault into a running node",
            "Inject a hardware or configuration fault (see docs/lab-faults.md for kinds and parameters).",
            "clustercert lab fault node03 link_slow fabric=1 factor=0.3", FAULT_NODE, FAULT_KIND,
            FAULT_PARAMS)
    command("heal", "remove a node's faults (all, or one kind)", "Heal a node.",
            "clustercert lab heal node03 link_slow",
            HEAL_NODE, HEAL_KIND)
    command("slurm", "bring the running lab's Slurm up or down",
            "Slurm on the running lab (slurmctld on the first node, slurmd on all), or stopped and disabled.",
            "clustercert lab slurm up", SLURM_ACTION)
    command("inventory", "print the path of the lab's Ansible inventory",
            "Print the inventory path the lab wrote (`-i lab` on every verb means this).",
            "ansible all -i $(clustercert lab inventory) -m ping")
    return top


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


def print_status(status: dict) -> None:
    from rich.table import Table  # here, not with the parser: `--help` and a usage error stay quick

    from clustercert.report.terminal import console

    con = console()
    running = status.get("running")
    con.print(f"lab: {'running' if running else 'not running'}"
              + (f" — inventory {status.get('inventory')}" if status.get("inventory") else ""))
    if running and status.get("slurm"):
        con.print(slurm_line(status["slurm"]))
    nodes = status.get("nodes") or {}
    if not nodes:
        return
    t = Table(title_justify="left")
    for col in ("node", "state", "mgmt ip", "faults"):
        t.add_column(col)
    for name, n in sorted(nodes.items()):
        faults = ", ".join(f.get("kind", str(f)) if isinstance(f, dict) else str(f)
                           for f in n.get("faults") or [])
        t.add_row(name, str(n.get("state", "")), str(n.get("mgmt_ip", "")), faults)
    con.print(t)
    con.print("hardware in the lab is simulated (GPUs, HCAs, perftest/NCCL output); network, systemd, sshd "
              "and apt are real")


def slurm_line(slurm: dict) -> str:
    """`lab status`'s line on the lab's Slurm."""
    state, controller = slurm.get("state", "off"), slurm.get("controller")
    if state == "up":
        return f"slurm: up — slurmctld on {controller}, slurmd on every node"
    if state == "off":
        return "slurm: off (`clustercert lab slurm up` starts it)"
    return f"slurm: {state} — slurmctld on {controller} is not active"


def run(args: argparse.Namespace) -> int:
    from clustercert_lab import manager  # after the parse: --help and a usage error need none of the lab

    params = key_values(args.params) if args.lab_cmd == "fault" else {}
    if args.lab_cmd == "up":
        print_status(manager.up(nodes=args.nodes, spec_path=args.spec, slurm=args.slurm))
    elif args.lab_cmd == "down":
        manager.down()
        print("lab is down")
    elif args.lab_cmd == "status":
        status = manager.status()
        if args.format == "json":
            print(json.dumps(status, indent=2, default=str))
        else:
            print_status(status)
    elif args.lab_cmd == "fault":
        manager.fault(args.node, args.kind, params)
        print(f"{args.node}: {args.kind} injected")
    elif args.lab_cmd == "heal":
        manager.heal(args.node, args.kind)
        print(f"{args.node}: healed{' ' + args.kind if args.kind else ''}")
    elif args.lab_cmd == "slurm" and args.action == "up":
        done = manager.slurm_up()
        installed = f", installed on {', '.join(done['installed'])}" if done["installed"] else ""
        print(f"slurm is up{installed} ({'started' if done['restarted'] else 'already running'}, "
              f"{done['seconds']:.0f} s)")
    elif args.lab_cmd == "slurm":
        manager.slurm_down()
        print("slurm is down")
    elif args.lab_cmd == "inventory":
        print(manager.inventory_path())
    else:
        raise InputError("lab", None, f"unknown lab command {args.lab_cmd!r}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    return run_program(lambda: parse(build_parser(), argv), run)
