"""The clustercert command line. Commands glue layers together and hold no logic of their own."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import textwrap
from pathlib import Path

from clustercert import __version__
from clustercert import cmdoptions as opt
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
    """argparse that reports a usage error as ONE line naming the flag and the reason (exit 2), without the
    usage dump and without argparse's own "prog: error:" prefix (main adds "clustercert: error:")."""

    def parse_args(self, args=None, namespace=None):  # noqa: D102
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            verb = " ".join(x for x in (getattr(ns, "verb", None), getattr(ns, "lab_cmd", None)) if x)
            where = f"clustercert {verb}".strip()
            more = f" (and {' '.join(extras[1:])})" if len(extras) > 1 else ""
            raise InputError(extras[0], None, f"unrecognized argument for `{where}`{more}; see `{where} --help`")
        return ns

    def error(self, message: str):  # noqa: D401
        hint = f"; see `{self.prog} --help`"
        m = re.match(r"argument (\S+): (.*)$", message, re.S)
        if m:  # argument -f/--forks: expected ..., argument VERB: invalid choice: ...
            raise InputError(m.group(1), None, m.group(2) + hint)
        # the following arguments are required: -i/--inventory (names the verb, then argparse's words)
        raise InputError(self.prog.removeprefix(PROG).strip() or "usage", None, message + hint)


def _fmt(description: str, example: str) -> dict:
    return {
        "description": textwrap.dedent(description).strip(),
        "epilog": "example:\n" + textwrap.indent(textwrap.dedent(example).strip(), "  ") + "\n\n" + EXIT_CODES,
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }


# -v anywhere on the line: before the verb, after it, after a lab command; each level counts into its own
# destination (argparse's subparsers would otherwise overwrite the top's count), main() adds them up.
VERBOSE_DESTS = ("verbose", "verbose_verb", "verbose_cmd")


def _verb(sub, name: str, help: str, description: str, example: str, *options: opt.Option,
          verbose_dest: str = "verbose_verb") -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, **_fmt(description, example))
    opt.VERBOSE.add(p, dest=verbose_dest)
    opt.add(p, *options)
    return p


def build_parser() -> argparse.ArgumentParser:
    top = _Parser(
        prog=PROG,
        description="Provision GPU/InfiniBand nodes with Ansible, certify them with evidence, watch them for drift.",
        epilog=textwrap.dedent("""\
            first steps:
              clustercert init site/                 # a commented starter inventory: edit the two hosts
              clustercert inventory -i site/         # what each node must be (profile, thresholds)
              clustercert bootstrap -i site/ --check # what the playbooks would change
              clustercert certify -i site/ --out cert/   # validators + probes -> signed certificate

            on this machine, without hardware:
              clustercert lab up --nodes 4           # a simulated GPU/IB cluster
              clustercert certify -i lab --out cert

            """) + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    opt.VERBOSE.add(top)
    top.add_argument("--version", action="store_true",
                     help="print the versions of clustercert, ansible-core, ansible-runner and Python, then stop "
                          "(as `clustercert version`)")
    sub = top.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)

    _verb(sub, "init", "write a commented starter inventory into DIR",
          """Write a starter inventory into DIR: hosts.yml (two example hosts with ansible_host and their bond
          address), group_vars/all.yml (the profile choice and every variable a site sets, the optional ones
          commented out) and known_hosts.md (how to put the nodes' host keys into known_hosts). `clustercert
          inventory -i DIR` accepts it as written. A DIR that holds anything is refused unless --force.""",
          "clustercert init site/ --profile h100-sxm-8x-ndr\nclustercert inventory -i site/",
          opt.option("directory", metavar="DIR", help="where to write the inventory (created if missing)"),
          opt.option("--profile", default="h100-sxm-8x-ndr", metavar="NAME",
                   help="the node class: a built-in profile (h100-sxm-8x-ndr, a100-sxm-8x-hdr, lab) or a path to "
                        "your own profile YAML (default h100-sxm-8x-ndr)"),
          opt.option("--force", action="store_true",
                   help="write into a DIR that is not empty (replaces hosts.yml, group_vars/all.yml and "
                        "known_hosts.md there; keeps everything else)"),
          opt.output_format("table", "json"))

    _verb(sub, "bootstrap", "bring nodes to the pinned software state (rolling, safe)",
          """Run playbooks/bootstrap.yml: drivers, fabric manager, OFED/DOCA, peermem, NCCL and probe
          tools, the container toolkit, dual-IB redundancy and tuning, with rolling reboots.""",
          "clustercert bootstrap -i sample:h100 --limit gpu01 --check --diff\n"
          "clustercert bootstrap -i site/ -u ops -K --skip-tags container_toolkit -e @site-vars.yml -vv",
          *opt.CONNECTION, *opt.PLAYBOOK, opt.output_format("table", "json"))

    _verb(sub, "validate", "run the testinfra validators on every node",
          """\
          Run the validators (gpu, driver, rdma, ib, bond, container, tuning, time, packages) on every node in parallel.
          --checks and --skip take check ids and component names (`clustercert checks` lists them).
          --disruptive (opt-in, never the default) then runs the bond failover test (ib.bond_failover) on one node
          after the other: the active slave goes down, the other must take over within miimon x 3 with a peer
          still reachable over the bond, and the primary must come back once the slave is up again.
          --junit FILE also writes the findings as JUnit XML for CI (as certify's junit.xml: one testcase per node x
          check, each node's checks sharing the seconds its collection took).""",
          "clustercert validate -i lab --checks gpu,ib --format json --junit validate-junit.xml\n"
          "clustercert validate -i lab --skip gpu.xid,time --prom /var/lib/node_exporter/textfile/validate.prom\n"
          "clustercert validate -i lab --checks bond --disruptive",
          *opt.CONNECTION,
          opt.option("--checks", metavar="LIST", help="only these check ids and components, comma separated "
                   "(gpu,ib.port_state); default every component"),
          opt.option("--skip", metavar="LIST", help="leave out these check ids and components, comma separated "
                   "(gpu.xid,time)"),
          opt.output_format("table", "json"),
          opt.option("--out", metavar="DIR", help="also write validate.json and each node's raw evidence "
                   "(evidence/NODE.json) into DIR"),
          opt.PROM, opt.JUNIT,
          opt.option("--disruptive", action="store_true",
                   help="also run the bond failover test (ib.bond_failover): takes each node's active bond slave "
                        "down for a moment, one node at a time; never the default"))

    _verb(sub, "probe", "run bandwidth/latency probes (ib_write_bw, NCCL, nvbandwidth, iperf3)",
          "Run the bandwidth probes on the two-round pair schedule and print the values against the thresholds.",
          "clustercert probe -i lab --probes iperf3,ib_write_bw --format json",
          *opt.CONNECTION,
          opt.option("--probes", metavar="LIST", help="comma-separated: ib_write_bw, ib_write_lat, iperf3, nccl, "
                   "nvbandwidth, dcgmi (default: every probe the profile sets a threshold for)"),
          *opt.PROBE_RUN, opt.output_format("table", "json"))

    _verb(sub, "certify", "validators + probes -> verdict and a signed certificate",
          "Validate, probe and judge every node and link; write certificate.json, report.html, junit.xml, summary.md.",
          "clustercert certify -i lab --out cert/\n"
          "clustercert certify -i site/ --out cert/ --drain slurm --prom /var/lib/node_exporter/textfile/certify.prom",
          *opt.CONNECTION,
          opt.option("--out", metavar="DIR", help="where certificate.json, signing.pub and the reports go (required)"),
          opt.option("--drain", choices=("slurm",), help="after the verdicts, drain the failing nodes in Slurm "
                   "(Reason=clustercert: <check ids>) and resume the passing nodes clustercert drained"),
          opt.option("--key", metavar="FILE", help="Ed25519 private key that signs the certificate (default: the "
                   "state directory's key from `clustercert key init`)"),
          *opt.PROBE_RUN, opt.output_format("table", "json"), opt.PROM)

    _verb(sub, "drift", "what changed since the last certificate",
          "Configuration drift (bootstrap in check mode), state drift (validators) and performance drift (probes).",
          "clustercert drift -i lab --probes quick --prom /var/lib/node_exporter/textfile/clustercert.prom",
          *opt.CONNECTION,
          opt.option("--baseline", default="latest-certified", metavar="RUN_ID",
                   help="the run to compare with: a run id from `clustercert report runs` (default: the latest "
                        "certified run of this inventory)"),
          opt.option("--probes", choices=("none", "quick", "full"), default="none",
                   help="performance drift: none (default), quick (2 s pair probes) or full (5 s), against the "
                        "baseline's values within the profile's drift_tolerance"),
          opt.option("--fix", action="store_true", help="bootstrap the nodes with configuration drift (only the "
                   "roles that drifted), then validate them again"),
          opt.PROM, opt.output_format("table", "json"))

    p = _verb(sub, "lab", "a simulated GPU/InfiniBand cluster on this machine",
              """Start, inspect, break and mend the lab: systemd-nspawn nodes with their own root filesystems,
              network namespaces, sshd and apt; simulated GPUs and HCAs. Needs root.""",
              "clustercert lab up --nodes 4\nclustercert lab fault node02 gpu_missing gpu=3\nclustercert lab heal node02\n"
              "clustercert lab down")
    lab = p.add_subparsers(dest="lab_cmd", metavar="CMD", parser_class=_Parser, required=True)

    def lab_cmd(name: str, help: str, description: str, example: str, *options) -> None:
        _verb(lab, name, help, description, example, *options, verbose_dest="verbose_cmd")

    lab_cmd("up", "start the lab (idempotent)", "Build the image once (cached), start the nodes, write the inventory.",
            "clustercert lab up --nodes 4 --spec lab.yml",
            opt.option("--nodes", type=opt.positive_int, metavar="N", help="how many nodes (default: the spec's, else 4)"),
            opt.option("--spec", metavar="FILE", help="lab spec YAML: nodes, profile, link_mbit, faults"))
    lab_cmd("down", "stop the lab and remove every trace",
            "Stop every node and remove the lab's links, bridges, mounts and processes.", "clustercert lab down")
    lab_cmd("status", "nodes, their state and faults", "Show the lab's nodes, addresses and active faults.",
            "clustercert lab status --format json", opt.output_format("table", "json"))
    lab_cmd("fault", "inject a fault into a running node",
            "Inject a hardware or configuration fault (see docs/lab-faults.md for kinds and parameters).",
            "clustercert lab fault node03 link_slow fabric=1 factor=0.3",
            opt.option("node", help="the lab node (node01, ...)"),
            opt.option("kind", help="the fault kind (docs/lab-faults.md; `clustercert checks` names the check each fails)"),
            opt.option("params", nargs="*", metavar="KEY=VALUE", help="the fault's parameters (defaults where left out)"))
    lab_cmd("heal", "remove a node's faults (all, or one kind)", "Heal a node.", "clustercert lab heal node03 link_slow",
            opt.option("node", help="the lab node"),
            opt.option("kind", nargs="?", help="only this fault kind (default: every fault of the node)"))
    lab_cmd("inventory", "print the path of the lab's Ansible inventory",
            "Print the inventory path the lab wrote (`-i lab` on every verb means this).",
            "ansible all -i $(clustercert lab inventory) -m ping")

    _verb(sub, "parse", "parse a tool's output into a typed record",
          "Parse saved tool output with the same parsers the validators use. FILE may be - for stdin.",
          "nvidia-smi -q -x > gpu.xml\nclustercert parse nvidia-smi-xml gpu.xml --json\nclustercert parse --list",
          opt.option("kind", nargs="?", help="the parser (`clustercert parse --list`)"),
          opt.option("file", nargs="?", help="the saved output, or - for stdin"),
          opt.option("--json", action="store_true", help="print JSON (default: YAML)"),
          opt.option("--list", action="store_true", help="list the kinds"))

    _verb(sub, "inventory", "validate an inventory and print the resolved view",
          "Validate the inventory (profiles, overrides, clustercert_* variables) and print hosts, profiles and effective "
          "thresholds.",
          "clustercert inventory -i sample:h100 --format json",
          opt.INVENTORY, opt.LIMIT, opt.LIST_HOSTS, opt.output_format("table", "json"))

    _verb(sub, "checks", "every check id and probe id: what it reads, its thresholds, the lab fault that fails it",
          """List every check id (validate --checks/--skip take them) and probe id: the command it reads, what it
          holds a node to in each profile with the source of each figure, and the lab fault kind that shows it
          failing (or why none does). --format markdown is docs/checks.md.""",
          "clustercert checks\nclustercert checks --profile lab --format json\n"
          "clustercert checks --format markdown > docs/checks.md",
          opt.option("--profile", action="append", metavar="NAME",
                   help="the profile(s) whose figures to show: a built-in name or a YAML path (repeatable; default "
                        "every built-in profile)"),
          opt.output_format("table", "json", "markdown"))

    _verb(sub, "report", "reports from the store (history, runs)",
          "Per-node trends and past runs from the SQLite store.",
          "clustercert report history --node node01\nclustercert report runs --format json",
          opt.option("what", choices=("history", "runs"), help="history: per-node verdicts, failing checks and probe "
                   "values, newest first; runs: the recorded runs"),
          opt.option("--node", metavar="NODE", help="history of this node only"),
          opt.output_format("table", "json"))

    _verb(sub, "verify", "verify a certificate's signature",
          "Check that certificate.json was signed by the key and not changed since.",
          "clustercert verify cert/certificate.json --key cert/signing.pub",
          opt.option("certificate", help="the certificate.json to verify"),
          opt.option("--key", required=True, metavar="FILE", help="the signer's public key (signing.pub, OpenSSH or PEM)"))

    _verb(sub, "key", "the certificate signing key (init, show)",
          """`key init` makes the Ed25519 signing key under the state directory (keys/signing.key, 0600) and
          prints its path and fingerprint; it refuses to replace an existing key unless --force. `key show`
          prints the key's path, public key and fingerprint. certify never makes a key by itself.""",
          "clustercert key init\nclustercert key show",
          opt.option("key_cmd", choices=("init", "show"), metavar="CMD", help="init or show"),
          opt.option("--force", action="store_true", help="init: replace an existing key (old certificates then "
                   "verify only against the old public key)"))

    _verb(sub, "version", "print versions and the state directory",
          "Print clustercert, ansible-core, ansible-runner and Python versions, and where the state directory is.",
          "clustercert version\nclustercert version --format json",
          opt.output_format("table", "json"))
    return top


# ---------------------------------------------------------------------------------------------
# verbs


def _json(doc: dict) -> None:
    from clustercert.documents import dumps

    print(dumps(doc))


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    def v(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return {"clustercert": __version__, "ansible-core": v("ansible-core"), "ansible-runner": v("ansible-runner"),
            "pytest-testinfra": v("pytest-testinfra"), "python": sys.version.split()[0]}


def cmd_version(args) -> int:
    from clustercert import documents, paths

    started = documents.now()
    state = paths.state_dir()
    origin = "CLUSTERCERT_HOME" if os.environ.get("CLUSTERCERT_HOME") else "default"
    vs = versions()
    if getattr(args, "format", "table") == "json":
        _json(documents.envelope("version", None, started) | {
            "versions": vs, "state_dir": {"path": str(state), "origin": origin, "exists": state.is_dir()}})
        return EXIT_OK
    for name, value in vs.items():
        print(f"{name} {value}")
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


def cmd_init(args) -> int:
    from clustercert import documents, starter

    started = documents.now()
    done = starter.init(args.directory, args.profile, args.force)
    if args.format == "json":
        _json(documents.envelope("init", None, started) | done)
        return EXIT_OK
    print(f"wrote a starter inventory for profile {done['profile']} in {done['directory']}:")
    for f in done["files"]:
        print(f"  {f}")
    print("next: replace the example hosts, put the nodes' host keys into known_hosts (known_hosts.md), then")
    print(f"  clustercert inventory -i {args.directory}")
    return EXIT_OK


def cmd_inventory(args) -> int:
    from clustercert import documents
    from clustercert.inventory import load_inventory, resolved_view
    from clustercert.report_text import print_inventory

    started = documents.now()
    view = resolved_view(load_inventory(args.inventory, args.limit))
    if args.format == "json":
        _json(documents.envelope("inventory", None, started) | view)
    else:
        print_inventory(view)
    return EXIT_OK


def cmd_checks(args) -> int:
    from clustercert import catalogue, documents

    started = documents.now()
    doc = catalogue.document(args.profile)
    if args.format == "json":
        _json(documents.envelope("checks", None, started) | doc)
    elif args.format == "markdown":
        sys.stdout.write(catalogue.markdown(doc))
    else:
        from clustercert.report_text import print_checks

        print_checks(doc)
    return EXIT_OK


def list_hosts(args) -> int:
    """--list-hosts: the hosts the inventory and --limit select (the inventory fully checked); nothing runs."""
    from clustercert import documents
    from clustercert.inventory import load_inventory

    started = documents.now()
    inv = load_inventory(args.inventory, args.limit)
    names = list(inv.hosts)
    if getattr(args, "format", "table") == "json":
        _json(documents.envelope("hosts", None, started) | {"inventory": str(inv.source), "limit": args.limit,
                                                            "hosts": names})
        return EXIT_OK
    print(f"  hosts ({len(names)}):")
    for n in names:
        print(f"    {n}")
    return EXIT_OK


def cmd_parse(args) -> int:
    from clustercert import parsers

    if args.list:
        for kind in sorted(parsers.REGISTRY):
            print(f"{kind:28} {parsers.REGISTRY[kind].description}")
        return EXIT_OK
    if not args.kind or not args.file:
        raise InputError("parse", None, "usage: clustercert parse KIND FILE [--json] (or --list)")
    if args.kind not in parsers.REGISTRY:
        raise InputError("parse", "KIND", f"unknown kind {args.kind!r} (see `clustercert parse --list`)")
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
            raise InputError("lab fault", item, "parameters are KEY=VALUE")
        if key in params:
            raise InputError("lab fault", key, "parameter given twice")
        params[key] = value
    return params


def cmd_lab(args) -> int:
    params = _key_values(args.params) if args.lab_cmd == "fault" else {}
    from clustercert_lab import manager

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
    raise InputError("lab", None, f"unknown lab command {args.lab_cmd!r}")


EXTRA_VARS_FLAG = "-e/--extra-vars"


def parse_extra_vars(items: list[str]) -> dict:
    """-e as ansible-playbook reads it: @FILE (YAML or JSON), a JSON/YAML mapping, or key=value pairs (quoted
    values may hold spaces); later wins. Anything else is bad input naming the flag and the item."""
    from clustercert.yamlutil import load_yaml_file, loads

    out: dict = {}
    for item in items:
        text = item.strip()
        if not text:
            raise InputError(EXTRA_VARS_FLAG, repr(item), "empty (expected key=value, a JSON mapping, or @file)")
        if text.startswith("@"):
            if not text[1:]:
                raise InputError(EXTRA_VARS_FLAG, item, "@ names no file")
            data = load_yaml_file(text[1:])
            if not isinstance(data, dict):
                raise InputError(text[1:], None, "extra-vars file must be a mapping")
            out.update(data)
        elif text.startswith(("{", "[")):
            data = loads(text, EXTRA_VARS_FLAG)
            if not isinstance(data, dict):
                raise InputError(EXTRA_VARS_FLAG, text[:60], "expected a mapping")
            out.update(data)
        else:
            from ansible.errors import AnsibleError
            from ansible.parsing.splitter import parse_kv

            try:
                pairs = parse_kv(text, check_raw=False)
            except AnsibleError as exc:
                reason = str(exc).strip().splitlines()[0] if str(exc).strip() else "cannot split"
                raise InputError(EXTRA_VARS_FLAG, text[:60], reason) from None
            raw = pairs.pop("_raw_params", None)
            if raw is not None:
                raise InputError(EXTRA_VARS_FLAG, raw[:60], "expected key=value, a JSON mapping, or @file")
            if "" in pairs:
                raise InputError(EXTRA_VARS_FLAG, text[:60], "a variable name is empty")
            out.update(pairs)
    return out


def cmd_not_ready(args) -> int:
    raise NotReady(f"`clustercert {args.verb}` is not implemented yet; nothing was run")


def cmd_bootstrap(args) -> int:
    from clustercert.bootstrap import bootstrap

    return bootstrap(
        args.inventory, limit=args.limit, check=args.check, diff=args.diff, tags=args.tags, skip_tags=args.skip_tags,
        extra_vars=parse_extra_vars(args.extra_vars), forks=args.forks, fmt=args.format, verbosity=args.verbose,
    )


def cmd_validate(args) -> int:
    from clustercert import validate

    return validate.run(args.inventory, limit=args.limit, checks=args.checks, skip=args.skip, forks=args.forks,
                        fmt=args.format, out=args.out, disruptive=args.disruptive, prom=args.prom, junit=args.junit)


def cmd_certify(args) -> int:
    from clustercert import certify

    return certify.run(args.inventory, limit=args.limit, forks=args.forks, out=args.out, all_pairs=args.all_pairs,
                       key=args.key, probe_seconds=args.probe_seconds, probe_timeout=args.probe_timeout,
                       drain=args.drain, fmt=args.format, prom=args.prom)


def cmd_probe(args) -> int:
    from clustercert import probing

    return probing.run(args.inventory, limit=args.limit, forks=args.forks, only=args.probes, all_pairs=args.all_pairs,
                       fmt=args.format, probe_seconds=args.probe_seconds, probe_timeout=args.probe_timeout)


def cmd_verify(args) -> int:
    from clustercert.certificate import verify_command

    return verify_command(args.certificate, args.key)


def cmd_report(args) -> int:
    from clustercert import documents
    from clustercert.report_text import print_history, print_runs
    from clustercert.store import Store, default_path

    started = documents.now()
    if not default_path().exists():
        raise InputError(str(default_path()), None, "no store yet: run `clustercert validate` or `certify` first")
    store = Store()
    if args.what == "history":
        rows = store.history(args.node)
        if args.node and not rows:
            raise InputError("--node", args.node, "no recorded results for this node")
    else:
        rows = store.runs()
        for r in rows:
            r["meta"] = json.loads(r["meta"]) if isinstance(r.get("meta"), str) and r["meta"] else (r.get("meta") or {})
    if args.format == "json":
        rows = [r | {"started": documents.iso(r["started"]),
                     "finished": documents.iso(r["finished"]) if r.get("finished") else None}
                if args.what == "runs" else r | {"started": documents.iso(r["started"])} for r in rows]
        _json(documents.envelope("report", None, started) | {"report": args.what, "node": args.node, "rows": rows})
    elif args.what == "history":
        print_history(rows)
    else:
        print_runs(rows)
    return EXIT_OK


def cmd_drift(args) -> int:
    from clustercert import drift

    return drift.run(args.inventory, limit=args.limit, baseline=args.baseline, probes=args.probes, fix=args.fix,
                     prom_path=args.prom, fmt=args.format, forks=args.forks)


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
    "init": cmd_init,
    "checks": cmd_checks,
}

# Verbs that keep state (store, runs, control sockets, locks, keys): the state directory is made 0700
# and checked before they run.
STATEFUL = {"bootstrap", "validate", "probe", "certify", "drift", "report", "key"}

# Flags that name where a verb writes: checked before the verb runs (no probe, drain or run record first).
OUT_FLAGS = {"out": ("--out", "dir"), "prom": ("--prom", "file"), "junit": ("--junit", "file")}


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


def connection_flags(args) -> dict[str, str]:
    """-u/--user and --private-key as the environment variables Ansible reads them from (ANSIBLE_REMOTE_USER,
    ANSIBLE_PRIVATE_KEY_FILE): playbook runs get them through the environment, the collector through
    clustercert.inventory.connection_defaults. The inventory's ansible_user / ansible_ssh_private_key_file win,
    as they do over ansible-playbook's own -u. Bad values are exit 2 before anything runs."""
    from clustercert import names

    env = {}
    user = getattr(args, "user", None)
    if user is not None:
        reason = names.CHECKS["user"](user)
        if reason:
            raise InputError("-u/--user", user, reason)
        env["ANSIBLE_REMOTE_USER"] = user
    key = getattr(args, "private_key", None)
    if key is not None:
        path = Path(key).expanduser()
        reason = names.CHECKS["local_path"](str(path.absolute()))
        if reason:
            raise InputError("--private-key", key, reason)
        if not path.is_file():
            raise InputError("--private-key", key, "no such file" if not path.exists() else "not a file")
        if not os.access(path, os.R_OK):
            raise InputError("--private-key", key, "file is not readable (permission denied)")
        env["ANSIBLE_PRIVATE_KEY_FILE"] = str(path.absolute())
    return env


def prepare(args) -> None:
    """What every verb gets before it runs: a private umask, checked flags, a checked state directory,
    checked output paths, the become password. Bad input here is exit 2 with nothing run."""
    if args.verb == "certify" and not args.out:  # required, but not with --list-hosts (argparse cannot say so)
        raise InputError("--out", None, "required by `clustercert certify`: the directory for certificate.json and "
                                        "its reports")
    if args.verb != "lab":  # the lab writes node root filesystems, which keep their own modes
        os.umask(0o077)  # state files 0600, directories 0700, whatever writes them (ansible's fact cache too)
        # main() puts the caller's umask back when the verb returns
    os.environ.update(connection_flags(args))
    for attr, (flag, kind) in OUT_FLAGS.items():
        if getattr(args, attr, None):
            check_out(flag, getattr(args, attr), kind)
    if args.verb in STATEFUL:
        from clustercert import paths

        paths.ensure_state_dir()
    if getattr(args, "ask_become_pass", False):
        ask_become_pass()


# the environment main() puts back when a verb returns (in-process callers, tests, keep theirs)
RESTORED_ENV = ("ANSIBLE_REMOTE_USER", "ANSIBLE_PRIVATE_KEY_FILE")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    verbose = 0
    umask = os.umask(0o077)
    os.umask(umask)
    saved_env = {k: os.environ.get(k) for k in RESTORED_ENV}
    try:
        args = parser.parse_args(argv)
        args.verbose = verbose = sum(getattr(args, d, 0) or 0 for d in VERBOSE_DESTS)
        if args.version:
            return cmd_version(args)
        if not args.verb:
            parser.print_help()
            return EXIT_INPUT
        if getattr(args, "list_hosts", False):
            return list_hosts(args)
        prepare(args)
        handler = HANDLERS.get(args.verb, cmd_not_ready)
        return handler(args)
    except InputError as exc:
        # one line; a source that names the command ("clustercert lab fault") loses its "clustercert ", which
        # the prefix already says
        print(f"{PROG}: error: {exc.one_line().removeprefix(PROG + ' ')}", file=sys.stderr)
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
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
