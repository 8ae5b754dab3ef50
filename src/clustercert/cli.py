"""The clustercert command line: the parser (every option from clustercert.cmdoptions), the checks every
verb gets before it runs, and the dispatch to the verb's module in clustercert.commands."""

from __future__ import annotations

import argparse
import getpass
import importlib
import os
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from clustercert import cmdoptions as opt
from clustercert import paths
from clustercert.collect import DEFAULT_FORKS
from clustercert.commands import Needs
from clustercert.errors import EXIT_INPUT, EXIT_INTERNAL, EXIT_OK, ClustercertError, InputError
from clustercert.model import names

PROG = "clustercert"

EXIT_CODES = """\
exit codes:
  0  success / certified / no drift
  1  findings: something failed, drifted or was unreachable
  2  bad input or usage (inventory, profile, lab spec, flags, tool output)
  3  internal error"""


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as ONE line naming the flag and the reason (exit 2), without the
    usage dump and without argparse's own "prog: error:" prefix (main adds "clustercert: error:").

    ``passthrough=True`` makes a verb whose arguments belong to another program (``lab``: the lab's own,
    clustercert_lab): everything after the verb is kept as it is, in ``args.argv``, for that program to
    parse (argparse's REMAINDER would still take the options before the first word as this parser's)."""

    def __init__(self, *args, passthrough: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.passthrough = passthrough

    def parse_known_args(self, args=None, namespace=None):  # noqa: D102
        if self.passthrough:
            ns = argparse.Namespace() if namespace is None else namespace
            ns.argv = list(sys.argv[1:] if args is None else args)
            return ns, []
        return super().parse_known_args(args, namespace)

    def parse_args(self, args=None, namespace=None):  # noqa: D102
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            verb = " ".join(x for x in (getattr(ns, "verb", None), getattr(ns, "lab_cmd", None)) if x)
            where = f"clustercert {verb}".strip()
            more = f" (and {' '.join(extras[1:])})" if len(extras) > 1 else ""
            raise InputError(
                extras[0], None, f"unrecognized argument for `{where}`{more}; see `{where} --help`"
            )
        return ns

    def error(self, message: str):  # noqa: D401
        hint = f"; see `{self.prog} --help`"
        m = re.match(r"argument (\S+): (.*)$", message, re.S)
        if m:  # argument -f/--forks: expected ..., argument VERB: invalid choice: ...
            raise InputError(m.group(1), None, m.group(2) + hint)
        # the following arguments are required: -i/--inventory (names the verb, then argparse's words)
        raise InputError(self.prog.removeprefix(PROG).strip() or "usage", None, message + hint)


# a verb's description is printed as written (RawDescriptionHelpFormatter, after dedent): the few of
# its lines past 110 characters in the source carry a noqa for E501 where the string ends
def help_format(description: str, example: str) -> dict:
    return {
        "description": textwrap.dedent(description).strip(),
        "epilog": "example:\n"
        + textwrap.indent(textwrap.dedent(example).strip(), "  ")
        + "\n\n"
        + EXIT_CODES,
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }


# -v anywhere on the line: before the verb, after it, after a lab command (the lab's program,
# clustercert_lab.cli, counts its own levels the same way); each level counts into its own destination
# (argparse's subparsers would otherwise overwrite the top's count), parse() adds them up.
VERBOSE_DESTS = ("verbose", "verbose_verb", "verbose_cmd")


def _verb(sub, name: str, help: str, description: str, example: str,
          *options: opt.Option) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, **help_format(description, example))
    opt.VERBOSE.add(p, dest="verbose_verb")
    opt.add(p, *options)
    return p


def build_parser() -> argparse.ArgumentParser:
    top = Parser(
        prog=PROG,
        description="Provision GPU/InfiniBand nodes with Ansible, certify them with evidence, watch them for "
                    "drift.",
        epilog=textwrap.dedent("""\
            first steps:
              clustercert init site/                 # a commented starter inventory: edit the two hosts
              clustercert inventory -i site/         # what each node must be (profile, thresholds)
              clustercert bootstrap -i site/ --check # what the playbooks would change
              clustercert certify -i site/ --out cert/   # validators + probes -> signed certificate

            on this machine, without hardware:
              clustercert lab up --nodes 4           # a simulated GPU/IB cluster
              clustercert certify -i lab --out cert

            """)
        + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    opt.VERBOSE.add(top)
    opt.VERSION.add(top)
    sub = top.add_subparsers(dest="verb", metavar="VERB", parser_class=Parser)

    _verb(sub, "init", "write a commented starter inventory into DIR",
          """Write a starter inventory into DIR: hosts.yml (two example hosts with ansible_host and their bond
          address), group_vars/all.yml (the profile choice and every variable a site sets, the optional ones
          commented out) and known_hosts.md (how to put the nodes' host keys into known_hosts). `clustercert
          inventory -i DIR` accepts it as written. A DIR that holds anything is refused unless --force.""",
          "clustercert init site/ --profile h100-sxm-8x-ndr\nclustercert inventory -i site/",
          opt.INIT_DIRECTORY, opt.INIT_PROFILE, opt.INIT_FORCE, opt.output_format("table", "json"))

    _verb(sub, "bootstrap", "bring nodes to the pinned software state (rolling, safe)",
          """Run playbooks/bootstrap.yml: drivers, fabric manager, OFED/DOCA, peermem, NCCL and probe
          tools, the container toolkit, dual-IB redundancy and tuning, with rolling reboots.""",
          "clustercert bootstrap -i sample:h100 --limit gpu01 --check --diff\n"
          "clustercert bootstrap -i site/ -u ops -K --skip-tags container_toolkit -e @site-vars.yml -vv",
          *opt.CONNECTION, *opt.PLAYBOOK, opt.output_format("table", "json"))

    _verb(
        sub,
        "validate",
        "run the testinfra validators on every node",
        """\
          Run the validators (gpu, driver, rdma, ib, bond, container, tuning, time, packages, hardware, storage) on
          every node in parallel; the cluster-wide ones (ib.firmware_uniform, gpu.vbios_uniform) then compare the nodes.
          --checks and --skip take check ids and component names (`clustercert checks` lists them).
          --disruptive (opt-in, never the default) then runs the bond failover test (ib.bond_failover) on one node
          after the other: the active slave goes down, the other must take over within miimon x 3 with a peer
          still reachable over the bond, and the primary must come back once the slave is up again.
          --junit FILE also writes the findings as JUnit XML for CI (as certify's junit.xml: one testcase per node x
          check, each node's checks sharing the seconds its collection took).""",  # noqa: E501
        "clustercert validate -i lab --checks gpu,ib --format json --junit validate-junit.xml\n"
        "clustercert validate -i lab --skip gpu.xid,time --prom /var/lib/node_exporter/textfile/"
        "validate.prom\nclustercert validate -i lab --checks bond --disruptive",
        *opt.CONNECTION,
        opt.CHECKS,
        opt.SKIP,
        opt.output_format("table", "json"),
        opt.VALIDATE_OUT,
        opt.PROM,
        opt.JUNIT,
        opt.DISRUPTIVE,
        opt.BACKEND,
        opt.RESERVATION,
    )

    _verb(
        sub,
        "node-check",
        "this node's own checks, run here (Slurm HealthCheckProgram, prolog, systemd timer)",
        """\
          Run the validators' per-node checks on this machine, without a controller: the same commands (each under
          its timeout, in a process group of its own, LC_ALL=C) and the same evaluation as validate, against the node
          file the node_check role writes (or a built-in profile). Not here: the cluster-wide checks
          (ib.firmware_uniform, gpu.vbios_uniform), the bond failover test and the probes -- validate, certify.
          --format json prints validate's per-node findings (the controller merges them). Exit 0 when every check
          passes, 1 when one fails or errs (or --drain could not act), 2 for bad input. --drain then drains this node
          in Slurm with the failing ids as the reason, or resumes it where clustercert drained it (certify --drain's
          rules). --build-zipapp writes the self-contained program the node_check role installs.""",  # noqa: E501
        "clustercert node-check --profile lab --checks gpu,driver --format json\n"
        "clustercert node-check --profile /usr/local/lib/clustercert/node.json --drain --slurm-node gpu01\n"
        "clustercert node-check --build-zipapp dist/clustercert-node-check.pyz",
        opt.NODE_PROFILE,
        opt.CHECKS,
        opt.SKIP,
        opt.output_format("text", "json", default="text"),
        opt.NODE_DRAIN,
        opt.SLURM_NODE,
        opt.TOOL_PATH,
        opt.BUILD_ZIPAPP,
    )

    _verb(sub, "probe", "run bandwidth/latency probes (ib_write_bw, NCCL, nvbandwidth, iperf3)",
          "Run the bandwidth probes on the two-round pair schedule and print the values against the "
          "thresholds.",
          "clustercert probe -i lab --probes iperf3,ib_write_bw --format json",
          *opt.CONNECTION, opt.PROBES, *opt.PROBE_RUN, opt.output_format("table", "json"))

    _verb(
        sub,
        "certify",
        "validators + probes -> verdict and a signed certificate",
        "Validate, probe and judge every node and link; write certificate.json, report.html, junit.xml, "
        "summary.md.",
        "clustercert certify -i lab --out cert/\n"
        "clustercert certify -i site/ --out cert/ --drain slurm --prom /var/lib/node_exporter/textfile/"
        "certify.prom",
        *opt.CONNECTION,
        opt.CERTIFY_OUT,
        opt.DRAIN,
        opt.SIGNING_KEY,
        *opt.PROBE_RUN,
        opt.output_format("table", "json"),
        opt.PROM,
        opt.BACKEND,
        opt.RESERVATION,
    )

    _verb(
        sub,
        "drift",
        "what changed since the last certificate",
        "Configuration drift (bootstrap in check mode), state drift (validators) and performance drift "
        "(probes).",
        "clustercert drift -i lab --probes quick --prom /var/lib/node_exporter/textfile/clustercert.prom",
        *opt.CONNECTION,
        opt.BASELINE,
        opt.DRIFT_PROBES,
        opt.FIX,
        opt.PROM,
        opt.output_format("table", "json"),
        opt.BACKEND,
        opt.RESERVATION,
    )

    # the lab's own program (clustercert_lab.cli) parses and runs it: the product never imports the lab
    sub.add_parser("lab", help="a simulated GPU/InfiniBand cluster on this machine", passthrough=True)

    _verb(sub, "parse", "parse a tool's output into a typed record",
          "Parse saved tool output with the same parsers the validators use. FILE may be - for stdin.",
          "nvidia-smi -q -x > gpu.xml\nclustercert parse nvidia-smi-xml gpu.xml --json\n"
          "clustercert parse --list",
          opt.PARSE_KIND, opt.PARSE_FILE, opt.PARSE_JSON, opt.PARSE_LIST)

    _verb(sub, "inventory", "validate an inventory and print the resolved view",
          "Validate the inventory (profiles, overrides, clustercert_* variables) and print hosts, profiles "
          "and effective thresholds.",
          "clustercert inventory -i sample:h100 --format json",
          opt.INVENTORY, opt.LIMIT, opt.LIST_HOSTS, *opt.VAULT, opt.output_format("table", "json"))

    _verb(
        sub,
        "checks",
        "every check id and probe id: what it reads, its thresholds, the lab fault that fails it",
        """List every check id (validate --checks/--skip take them) and probe id: the command it reads, what it
          holds a node to in each profile with the source of each figure, and the lab fault kind that shows it
          failing (or why none does). --format markdown is docs/checks.md.""",  # noqa: E501
        "clustercert checks\nclustercert checks --profile lab --format json\n"
        "clustercert checks --format markdown > docs/checks.md",
        opt.CHECKS_PROFILE,
        opt.output_format("table", "json", "markdown"),
    )

    _verb(
        sub,
        "report",
        "reports from the store (history, runs), its retention (prune), a certificate (show)",
        "Per-node trends and past runs from the SQLite store; `prune` removes old runs and compacts it; "
        "`show CERT` prints a certificate file (--format json: expanded, docs/schemas/"
        "certificate.schema.json).",
        "clustercert report history --node node01\nclustercert report runs --format json\n"
        "clustercert report prune --keep 200\nclustercert report prune --older-than 90d\n"
        "clustercert report show cert/certificate.json --format json",
        opt.REPORT_WHAT,
        opt.REPORT_CERT,
        opt.REPORT_NODE,
        opt.PRUNE_KEEP,
        opt.PRUNE_OLDER,
        opt.PRUNE_DRY_RUN,
        opt.output_format("table", "json"),
    )

    _verb(sub, "verify", "verify a certificate's signature",
          "Check that certificate.json was signed by the key and not changed since.",
          "clustercert verify cert/certificate.json --key cert/signing.pub",
          opt.CERTIFICATE, opt.PUBLIC_KEY)

    _verb(sub, "key", "the certificate signing key (init, show)",
          """`key init` makes the Ed25519 signing key under the state directory (keys/signing.key, 0600) and
          prints its path and fingerprint; it refuses to replace an existing key unless --force. `key show`
          prints the key's path, public key and fingerprint. certify never makes a key by itself.""",
          "clustercert key init\nclustercert key show",
          opt.KEY_CMD, opt.KEY_FORCE)

    _verb(sub, "version", "print versions and the state directory",
          "Print clustercert, ansible-core, ansible-runner and Python versions, and where the state "
          "directory is.",
          "clustercert version\nclustercert version --format json",
          opt.output_format("table", "json"))
    return top


# ---------------------------------------------------------------------------------------------
# dispatch

def command(name: str):
    """clustercert.commands.<name>, whose ``run(args)`` runs the verb (``list_hosts``: --list-hosts, on any
    verb that takes -i) and whose ``NEEDS`` says what prepare() does first. Imported by name when the verb
    runs, not with this module: the verbs' layers bring pydantic, ansible, ansible-runner, cryptography,
    jinja2, rich and prometheus_client, and importing every verb's module made `clustercert --help` (and
    every mistyped flag) take 0.58 s instead of 0.04 s (median of 5, 2-core CI machine, 2026-12-05)."""
    return importlib.import_module(f"clustercert.commands.{name}")


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
    clustercert.model.inventory.connection_defaults. The inventory's ansible_user /
    ansible_ssh_private_key_file win, as they do over ansible-playbook's own -u. Bad values are exit 2 before
    anything runs."""
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
    if getattr(args, "become", False):
        env["ANSIBLE_BECOME"] = "True"
    return env


def prepare(args, needs: Needs) -> None:
    """What every verb gets before it runs, as its module's ``NEEDS`` (clustercert.commands.Needs) asks: a
    private umask, checked flags, a checked state directory, checked output paths, the open-file limit, the
    become password. Bad input here is exit 2 with nothing run."""
    # not asked of --list-hosts (argparse cannot say so): main() ran that before
    for flag, attr, why in needs.required:
        if not getattr(args, attr, None):
            raise InputError(flag, None, f"required by `clustercert {args.verb}`: {why}")
    if needs.private_umask:
        # state files 0600, directories 0700 (ansible's fact cache too); main() puts the caller's umask back
        os.umask(0o077)
    os.environ.update(connection_flags(args))
    for attr, (flag, kind) in OUT_FLAGS.items():
        if getattr(args, attr, None):
            check_out(flag, getattr(args, attr), kind)
    if needs.state:
        paths.ensure_state_dir()
    if needs.sessions:
        from clustercert.collect.ssh import check_open_files  # not with the parser: it is what runs the verbs

        check_open_files(args.forks or DEFAULT_FORKS)
        # where ssh's control sockets go (a deep state directory's own path cannot hold one)
        paths.control_dir()
    if getattr(args, "ask_become_pass", False):
        ask_become_pass()


# the environment main() puts back when a verb returns (in-process callers, tests, keep theirs)
RESTORED_ENV = ("ANSIBLE_REMOTE_USER", "ANSIBLE_PRIVATE_KEY_FILE", "ANSIBLE_BECOME")


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``argv`` parsed, with ``verbose`` the -v of every level added up."""
    args = parser.parse_args(argv)
    args.verbose = sum(getattr(args, d, 0) or 0 for d in VERBOSE_DESTS)
    return args


def run_program(
    parse_argv: Callable[[], argparse.Namespace], run: Callable[[argparse.Namespace], int]
) -> int:
    """``run(parse_argv())`` as every clustercert program runs (this one, and the lab's: clustercert_lab.cli):
    bad input is one line and exit 2, a failure one line and its exit status, an interrupt 130, a closed
    pipe no error, and an internal error one line and exit 3, with the traceback only under -v or
    CLUSTERCERT_DEBUG."""
    verbose = 0
    try:
        args = parse_argv()
        verbose = args.verbose
        return run(args)
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
        print(
            f"{PROG}: internal error: {type(exc).__name__}: {exc} (run with -v for the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def main(argv: list[str] | None = None) -> int:
    """The clustercert program: ``argv``, or the process's own arguments when None (``own_process``: a verb
    may then replace the process with another program, as ``lab`` does with the lab's)."""
    parser = build_parser()
    umask = os.umask(0o077)
    os.umask(umask)
    saved_env = {k: os.environ.get(k) for k in RESTORED_ENV}

    def run(args: argparse.Namespace) -> int:
        args.own_process = argv is None
        if args.version:
            return command("version").run(args)
        if not args.verb:
            parser.print_help()
            return EXIT_INPUT
        if getattr(args, "list_hosts", False):
            return command("list_hosts").run(args)
        verb = command(args.verb.replace("-", "_"))
        prepare(args, getattr(verb, "NEEDS", Needs()))  # what the verb's module declares it needs
        return verb.run(args)

    try:
        return run_program(lambda: parse(parser, argv), run)
    finally:
        os.umask(umask)  # in-process callers (tests) keep theirs
        # the vault secrets and what they decrypted live as long as the verb (the module is loaded only where
        # a verb read an inventory: node-check's zipapp carries no vault)
        if "clustercert.model.vault" in sys.modules:
            sys.modules["clustercert.model.vault"].reset()
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
