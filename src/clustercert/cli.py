"""The clustercert command line. Commands glue layers together and hold no logic of their own."""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from pathlib import Path

from clustercert import __version__
from clustercert.errors import (
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    ClustercertError,
    InputError,
    NotReady,
)

PROG = "clustercert"

EXIT_CODES = """\
exit codes:
  0  success / certified / no drift
  1  findings: something failed, drifted or was unreachable
  2  bad input or usage (inventory, profile, lab spec, flags, tool output)
  3  internal error, or a verb that is not implemented yet"""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as ONE line and exit 2, without the usage dump."""

    def error(self, message: str):  # noqa: D401
        raise InputError(self.prog, None, message)


def _fmt(description: str, example: str) -> dict:
    return {
        "description": textwrap.dedent(description).strip(),
        "epilog": "example:\n" + textwrap.indent(textwrap.dedent(example).strip(), "  ") + "\n\n" + EXIT_CODES,
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }


def _inventory_flags(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    p.add_argument("-i", "--inventory", metavar="INV", required=required,
                   help="Ansible inventory (file or directory); `lab` means the running lab's inventory")
    p.add_argument("-l", "--limit", metavar="PATTERN", help="limit to hosts matching an Ansible pattern")


def _become_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("-K", "--ask-become-pass", action="store_true",
                   help="ask once for the sudo password (hosts with ansible_become: true); it is kept in this "
                        "process's environment as ANSIBLE_BECOME_PASS, never printed or written")


def _playbook_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--check", action="store_true", help="dry run: report what would change, change nothing")
    p.add_argument("--diff", action="store_true", help="show the differences of changed files and templates")
    p.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                   help="extra variables: key=value, a JSON/YAML mapping, or @file (repeatable)")
    p.add_argument("-t", "--tags", metavar="TAGS", help="only run roles/tasks with these tags (comma separated)")
    p.add_argument("-f", "--forks", type=_positive_int, metavar="N", help="parallel hosts (default from ansible.cfg: 25)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    top = _Parser(
        prog=PROG,
        description="Provision GPU/InfiniBand nodes with Ansible, certify them with evidence, watch them for drift.",
        epilog=textwrap.dedent("""\
            typical session:
              clustercert lab up --nodes 4          # a simulated GPU/IB cluster on this machine
              clustercert inventory -i lab          # what each node must be (profile, thresholds)
              clustercert bootstrap -i lab          # bring nodes to the pinned software state
              clustercert certify -i lab --out cert # validators + probes -> signed certificate

            """) + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument("-v", "--verbose", action="count", default=0, help="more output (repeatable)")
    sub = top.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)

    p = sub.add_parser("bootstrap", help="bring nodes to the pinned software state (rolling, safe)", **_fmt(
        """Run playbooks/bootstrap.yml: drivers, fabric manager, OFED/DOCA, peermem, NCCL and probe
        tools, the container toolkit, dual-IB redundancy and tuning, with rolling reboots.""",
        "clustercert bootstrap -i inventory/h100-sample --limit gpu01 --check --diff"))
    _inventory_flags(p)
    _become_flag(p)
    _playbook_flags(p)
    p.add_argument("--format", choices=("table", "json"), default="table")

    p = sub.add_parser("validate", help="run the testinfra validators on every node", **_fmt(
        """\
        Run the validators (gpu, driver, rdma, ib, bond, container, tuning, time, packages) on every node in parallel.
        --disruptive (opt-in, never the default) then runs the bond failover test (ib.bond_failover) on one node
        after the other: the active slave goes down, the other must take over within miimon x 3 with a peer
        still reachable over the bond, and the primary must come back once the slave is up again.""",
        "clustercert validate -i lab --checks gpu,ib --format json\nclustercert validate -i lab --checks bond --disruptive"))
    _inventory_flags(p)
    _become_flag(p)
    p.add_argument("-f", "--forks", type=_positive_int, metavar="N")
    p.add_argument("--checks", metavar="LIST", help="components to run, e.g. gpu,ib,bond")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--out", metavar="DIR")
    p.add_argument("--disruptive", action="store_true",
                   help="also run the bond failover test (ib.bond_failover): takes each node's active bond slave "
                        "down for a moment, one node at a time; never the default")

    p = sub.add_parser("probe", help="run bandwidth/latency probes (ib_write_bw, NCCL, nvbandwidth, iperf3)", **_fmt(
        "Run the bandwidth probes on the two-round pair schedule and print the values against the thresholds.",
        "clustercert probe -i lab --probes iperf3,ib_write_bw"))
    _inventory_flags(p)
    _become_flag(p)
    p.add_argument("-f", "--forks", type=_positive_int, metavar="N")
    p.add_argument("--probes", metavar="LIST", help="comma-separated: ib_write_bw, ib_write_lat, iperf3, nccl, "
                   "nvbandwidth, dcgmi (default: every probe the profile sets a threshold for)")
    p.add_argument("--all-pairs", action="store_true", help="every pair (circle method, N-1 rounds) instead of two rounds")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--probe-seconds", type=_positive_int, default=5, metavar="S", help="duration of each bandwidth probe")
    p.add_argument("--probe-timeout", type=_positive_int, default=60, metavar="S",
                   help="a probe still running after its duration + this many seconds is killed and reported as error")

    p = sub.add_parser("certify", help="validators + probes -> verdict and a signed certificate", **_fmt(
        "Validate, probe and judge every node and link; write certificate.json, report.html, junit.xml, summary.md.",
        "clustercert certify -i lab --out cert/"))
    _inventory_flags(p)
    _become_flag(p)
    p.add_argument("-f", "--forks", type=_positive_int, metavar="N")
    p.add_argument("--out", metavar="DIR", required=True)
    p.add_argument("--all-pairs", action="store_true")
    p.add_argument("--drain", choices=("slurm",))
    p.add_argument("--key", metavar="FILE", help="Ed25519 private key used to sign the certificate")
    p.add_argument("--probe-seconds", type=_positive_int, default=5, metavar="S", help="duration of each bandwidth probe")
    p.add_argument("--probe-timeout", type=_positive_int, default=60, metavar="S",
                   help="a probe still running after its duration + this many seconds is killed and reported as error")

    p = sub.add_parser("drift", help="what changed since the last certificate", **_fmt(
        "Configuration drift (bootstrap in check mode), state drift (validators) and performance drift (probes).",
        "clustercert drift -i lab --probes quick --prom /var/lib/node_exporter/clustercert.prom"))
    _inventory_flags(p)
    _become_flag(p)
    p.add_argument("--baseline", default="latest-certified", metavar="RUN_ID")
    p.add_argument("--probes", choices=("none", "quick", "full"), default="none")
    p.add_argument("--fix", action="store_true")
    p.add_argument("--prom", metavar="FILE")
    p.add_argument("--format", choices=("table", "json"), default="table")

    p = sub.add_parser("lab", help="a simulated GPU/InfiniBand cluster on this machine", **_fmt(
        """Start, inspect, break and mend the lab: systemd-nspawn nodes with their own root filesystems,
        network namespaces, sshd and apt; simulated GPUs and HCAs. Needs root.""",
        "clustercert lab up --nodes 4\nclustercert lab fault node02 gpu_missing gpu=3\nclustercert lab heal node02\nclustercert lab down"))
    lab = p.add_subparsers(dest="lab_cmd", metavar="CMD", parser_class=_Parser, required=True)
    q = lab.add_parser("up", help="start the lab (idempotent)", **_fmt(
        "Build the image once (cached), start the nodes, write the inventory.", "clustercert lab up --nodes 4 --spec lab.yml"))
    q.add_argument("--nodes", type=_positive_int, metavar="N")
    q.add_argument("--spec", metavar="FILE", help="lab spec YAML: nodes, profile, link_mbit, faults")
    lab.add_parser("down", help="stop the lab and remove every trace", **_fmt("Stop every node and remove the lab's links, bridges, mounts and processes.", "clustercert lab down"))
    q = lab.add_parser("status", help="nodes, their state and faults", **_fmt("Show the lab's nodes, addresses and active faults.", "clustercert lab status --format json"))
    q.add_argument("--format", choices=("table", "json"), default="table")
    q = lab.add_parser("fault", help="inject a fault into a running node", **_fmt(
        "Inject a hardware or configuration fault (see docs/lab-faults.md for kinds and parameters).",
        "clustercert lab fault node03 link_slow fabric=1 factor=0.3"))
    q.add_argument("node")
    q.add_argument("kind")
    q.add_argument("params", nargs="*", metavar="KEY=VALUE")
    q = lab.add_parser("heal", help="remove a node's faults (all, or one kind)", **_fmt("Heal a node.", "clustercert lab heal node03 link_slow"))
    q.add_argument("node")
    q.add_argument("kind", nargs="?")
    lab.add_parser("inventory", help="print the path of the lab's Ansible inventory", **_fmt(
        "Print the inventory path the lab wrote (`-i lab` on every verb means this).", "ansible all -i $(clustercert lab inventory) -m ping"))

    p = sub.add_parser("parse", help="parse a tool's output into a typed record", **_fmt(
        "Parse saved tool output with the same parsers the validators use. FILE may be - for stdin.",
        "nvidia-smi -q -x > gpu.xml && clustercert parse nvidia-smi-xml gpu.xml --json"))
    p.add_argument("kind", nargs="?")
    p.add_argument("file", nargs="?")
    p.add_argument("--json", action="store_true", help="print JSON (default: YAML)")
    p.add_argument("--list", action="store_true", help="list the kinds")

    p = sub.add_parser("inventory", help="validate an inventory and print the resolved view", **_fmt(
        "Validate the inventory (profiles, overrides, clustercert_* variables) and print hosts, profiles and effective thresholds.",
        "clustercert inventory -i inventory/h100-sample --format json"))
    _inventory_flags(p)
    p.add_argument("--format", choices=("table", "json"), default="table")

    p = sub.add_parser("report", help="reports from the store (history, runs)", **_fmt(
        "Per-node trends and past runs from the SQLite store.", "clustercert report history --node node01"))
    p.add_argument("what", choices=("history", "runs"))
    p.add_argument("--node")

    p = sub.add_parser("verify", help="verify a certificate's signature", **_fmt(
        "Check that certificate.json was signed by the key and not changed since.",
        "clustercert verify cert/certificate.json --key cert/signing.pub"))
    p.add_argument("certificate")
    p.add_argument("--key", required=True)

    p = sub.add_parser("key", help="the certificate signing key (init, show)", **_fmt(
        """`key init` makes the Ed25519 signing key under the state directory (keys/signing.key, 0600) and
        prints its path and fingerprint; it refuses to replace an existing key unless --force. `key show`
        prints the key's path, public key and fingerprint. certify never makes a key by itself.""",
        "clustercert key init\nclustercert key show"))
    p.add_argument("key_cmd", choices=("init", "show"), metavar="CMD", help="init or show")
    p.add_argument("--force", action="store_true", help="init: replace an existing key (old certificates then "
                   "verify only against the old public key)")

    sub.add_parser("version", help="print versions and the state directory", **_fmt(
        "Print clustercert, ansible-core, ansible-runner and Python versions, and where the state directory is.",
        "clustercert version"))
    return top


# ---------------------------------------------------------------------------------------------
# verbs


def cmd_version(args) -> int:
    from importlib.metadata import PackageNotFoundError, version

    def v(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    print(f"clustercert {__version__}")
    print(f"ansible-core {v('ansible-core')}")
    print(f"ansible-runner {v('ansible-runner')}")
    print(f"pytest-testinfra {v('pytest-testinfra')}")
    print(f"python {sys.version.split()[0]}")
    from clustercert import paths

    state = paths.state_dir()
    origin = "CLUSTERCERT_HOME" if os.environ.get("CLUSTERCERT_HOME") else "default"
    print(f"state directory {state} ({origin}{'' if state.is_dir() else ', not created yet'})")
    return EXIT_OK


def cmd_key(args) -> int:
    from clustercert import certificate, paths

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


def cmd_inventory(args) -> int:
    from clustercert.inventory import load_inventory, resolved_view
    from clustercert.report_text import print_inventory

    view = resolved_view(load_inventory(args.inventory, args.limit))
    if args.format == "json":
        print(json.dumps(view, indent=2))
    else:
        print_inventory(view)
    return EXIT_OK


def cmd_parse(args) -> int:
    from clustercert import parsers

    if args.list:
        for kind in sorted(parsers.REGISTRY):
            print(f"{kind:28} {parsers.REGISTRY[kind].description}")
        return EXIT_OK
    if not args.kind or not args.file:
        raise InputError("clustercert parse", None, "usage: clustercert parse KIND FILE [--json] (or --list)")
    if args.kind not in parsers.REGISTRY:
        raise InputError("clustercert parse", "KIND", f"unknown kind {args.kind!r} (see `clustercert parse --list`)")
    if args.file == "-":
        text, source = sys.stdin.read(), "<stdin>"
    else:
        source = args.file
        try:
            text = Path(args.file).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            raise InputError(source, None, "file not found") from None
        except IsADirectoryError:
            raise InputError(source, None, "is a directory, expected a file") from None
        except OSError as exc:
            raise InputError(source, None, f"cannot read: {exc.strerror}") from None
    try:
        record = parsers.parse(args.kind, text)
    except parsers.ParseError as exc:
        raise InputError(source, args.kind, exc.reason) from None
    if args.json:
        print(json.dumps(record, indent=2, default=str))
    else:
        import yaml

        print(yaml.safe_dump(record, sort_keys=False, default_flow_style=False).rstrip())
    return EXIT_OK


def _key_values(items: list[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError("clustercert lab fault", item, "parameters are KEY=VALUE")
        if key in params:
            raise InputError("clustercert lab fault", key, "parameter given twice")
        params[key] = value
    return params


def cmd_lab(args) -> int:
    params = _key_values(args.params) if args.lab_cmd == "fault" else {}
    from clustercert.lab import manager

    if args.lab_cmd == "up":
        status = manager.up(nodes=args.nodes, spec_path=args.spec)
        from clustercert.report_text import print_lab_status

        print_lab_status(status)
        return EXIT_OK
    if args.lab_cmd == "down":
        manager.down()
        print("lab is down")
        return EXIT_OK
    if args.lab_cmd == "status":
        status = manager.status()
        if args.format == "json":
            print(json.dumps(status, indent=2, default=str))
        else:
            from clustercert.report_text import print_lab_status

            print_lab_status(status)
        return EXIT_OK
    if args.lab_cmd == "fault":
        manager.fault(args.node, args.kind, params)
        print(f"{args.node}: {args.kind} injected")
        return EXIT_OK
    if args.lab_cmd == "heal":
        manager.heal(args.node, args.kind)
        print(f"{args.node}: healed{' ' + args.kind if args.kind else ''}")
        return EXIT_OK
    if args.lab_cmd == "inventory":
        print(manager.inventory_path())
        return EXIT_OK
    raise InputError("clustercert lab", None, f"unknown lab command {args.lab_cmd!r}")


def parse_extra_vars(items: list[str]) -> dict:
    from clustercert.yamlutil import load_yaml_file, loads

    out: dict = {}
    for item in items:
        if item.startswith("@"):
            data = load_yaml_file(item[1:])
            if not isinstance(data, dict):
                raise InputError(item[1:], None, "extra-vars file must be a mapping")
            out.update(data)
        elif item.lstrip().startswith("{"):
            data = loads(item, "-e/--extra-vars")
            if not isinstance(data, dict):
                raise InputError("-e/--extra-vars", None, "expected a mapping")
            out.update(data)
        else:
            for pair in item.split():
                key, sep, value = pair.partition("=")
                if not sep or not key:
                    raise InputError("-e/--extra-vars", pair, "expected key=value, a JSON mapping, or @file")
                out[key] = value
    return out


_NOT_READY = {
    "bootstrap": "issue: Provisioning (roles and playbooks/bootstrap.yml)",
    "validate": "issue: Validators",
    "probe": "issue: Certify (probes)",
    "certify": "issue: Certify",
    "verify": "issue: Certify (signed certificates)",
}


def cmd_not_ready(args) -> int:
    # Validate what the user gave us first: bad input is still exit 2.
    if getattr(args, "inventory", None) is not None:
        from clustercert.inventory import load_inventory

        load_inventory(args.inventory, getattr(args, "limit", None))
    if getattr(args, "extra_vars", None):
        parse_extra_vars(args.extra_vars)
    raise NotReady(f"`clustercert {args.verb}` is not implemented yet ({_NOT_READY[args.verb]}); nothing was run")


def cmd_bootstrap(args) -> int:
    try:
        from clustercert.bootstrap import bootstrap
    except ModuleNotFoundError:
        return cmd_not_ready(args)
    return bootstrap(
        args.inventory, limit=args.limit, check=args.check, diff=args.diff, tags=args.tags,
        extra_vars=parse_extra_vars(args.extra_vars), forks=args.forks, fmt=args.format, verbosity=args.verbose,
    )


def cmd_validate(args) -> int:
    from clustercert import validate

    return validate.run(args.inventory, limit=args.limit, checks=args.checks, forks=args.forks, fmt=args.format, out=args.out,
                        disruptive=args.disruptive)


def cmd_certify(args) -> int:
    from clustercert import certify

    return certify.run(args.inventory, limit=args.limit, forks=args.forks, out=args.out, all_pairs=args.all_pairs,
                       key=args.key, probe_seconds=args.probe_seconds, probe_timeout=args.probe_timeout,
                       drain=args.drain)


def cmd_probe(args) -> int:
    from clustercert import probing

    return probing.run(args.inventory, limit=args.limit, forks=args.forks, only=args.probes, all_pairs=args.all_pairs,
                       fmt=args.format, probe_seconds=args.probe_seconds, probe_timeout=args.probe_timeout)


def cmd_verify(args) -> int:
    from clustercert.certificate import verify_command

    return verify_command(args.certificate, args.key)


def cmd_report(args) -> int:
    from clustercert.report_text import print_history, print_runs
    from clustercert.store import Store, default_path

    if not default_path().exists():
        raise InputError(str(default_path()), None, "no store yet: run `clustercert validate` or `certify` first")
    store = Store()
    if args.what == "history":
        rows = store.history(args.node)
        if args.node and not rows:
            raise InputError("--node", args.node, "no recorded results for this node")
        print_history(rows)
    else:
        print_runs(store.runs())
    return EXIT_OK


def cmd_drift(args) -> int:
    from clustercert import drift

    return drift.run(args.inventory, limit=args.limit, baseline=args.baseline, probes=args.probes, fix=args.fix,
                     prom_path=args.prom, fmt=args.format)


HANDLERS = {
    "drift": cmd_drift,
    "report": cmd_report,
    "bootstrap": cmd_bootstrap,
    "certify": cmd_certify,
    "probe": cmd_probe,
    "verify": cmd_verify,
    "validate": cmd_validate,
    "version": cmd_version,
    "inventory": cmd_inventory,
    "parse": cmd_parse,
    "lab": cmd_lab,
    "key": cmd_key,
}

# Verbs that keep state (store, runs, control sockets, locks, keys): the state directory is made 0700
# and checked before they run.
STATEFUL = {"bootstrap", "validate", "probe", "certify", "drift", "report", "key"}

# Flags that name where a verb writes: checked before the verb runs (no probe, drain or run record first).
OUT_FLAGS = {"out": ("--out", "dir"), "prom": ("--prom", "file")}


def check_out(flag: str, value: str, kind: str) -> None:
    """InputError (one line, exit 2) unless ``value`` can be written as a ``kind`` ("dir" or "file"):
    an existing path of the other kind, or a parent that is not a writable directory, is refused."""
    path = Path(value).expanduser()
    if kind == "dir" and path.exists() and not path.is_dir():
        raise InputError(flag, value, "exists and is not a directory")
    if kind == "file" and path.is_dir():
        raise InputError(flag, value, "is a directory, expected a file")
    target = path if kind == "dir" and path.is_dir() else None
    if target is None:
        parent = path.absolute().parent
        while not parent.exists() and parent != parent.parent:
            if parent.is_symlink():
                raise InputError(flag, value, f"{parent} is a dangling symbolic link")
            parent = parent.parent
        if not parent.is_dir():
            raise InputError(flag, value, f"{parent} is not a directory")
        target = parent
    if not os.access(target, os.W_OK | os.X_OK):
        raise InputError(flag, value, f"directory {target} is not writable")


def ask_become_pass() -> None:
    """-K/--ask-become-pass: one getpass prompt; the answer goes into os.environ only."""
    import getpass

    try:
        password = getpass.getpass("BECOME password: ")
    except EOFError:
        raise InputError("-K/--ask-become-pass", None, "no password given (end of input)") from None
    if not password:
        raise InputError("-K/--ask-become-pass", None, "empty password")
    os.environ["ANSIBLE_BECOME_PASS"] = password


def prepare(args) -> None:
    """What every verb gets before it runs: a private umask, a checked state directory, checked
    output paths, the become password. Bad input here is exit 2 with nothing run."""
    if args.verb != "lab":  # the lab writes node root filesystems, which keep their own modes
        os.umask(0o077)  # state files 0600, directories 0700, whatever writes them (ansible's fact cache too)
        # main() puts the caller's umask back when the verb returns
    for attr, (flag, kind) in OUT_FLAGS.items():
        if getattr(args, attr, None):
            check_out(flag, getattr(args, attr), kind)
    if args.verb in STATEFUL:
        from clustercert import paths

        paths.ensure_state_dir()
    if getattr(args, "ask_become_pass", False):
        ask_become_pass()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    verbose = 0
    umask = os.umask(0o077)
    os.umask(umask)
    try:
        args = parser.parse_args(argv)
        verbose = args.verbose
        if not args.verb:
            parser.print_help()
            return EXIT_INPUT
        prepare(args)
        handler = HANDLERS.get(args.verb, cmd_not_ready)
        return handler(args)
    except InputError as exc:
        print(f"{PROG}: error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    except ClustercertError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `clustercert ... | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:  # an internal error: never a traceback unless asked for
        if verbose or os.environ.get("CLUSTERCERT_DEBUG"):
            raise
        print(f"{PROG}: internal error: {type(exc).__name__}: {exc} (run with -v for the traceback)", file=sys.stderr)
        return EXIT_INTERNAL
    finally:
        os.umask(umask)  # in-process callers (tests) keep theirs


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
