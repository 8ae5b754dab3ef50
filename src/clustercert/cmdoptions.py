"""Every option of the command line, each defined once (the way pip's ``cli/cmdoptions.py`` does).

An :class:`Option` holds the flags and the keyword arguments of one ``add_argument`` call; a verb adds
it with ``OPTION.add(parser)`` (keywords given there override the defaults, e.g. ``required=False``).
The groups (``CONNECTION``, ``PLAYBOOK``, ``PROBE_RUN``) are the sets the verbs share, so that ``-i``,
``-l``, ``-u``, ``-K`` or ``--list-hosts`` mean the same thing, with the same help, on every verb that
takes them; the options of one verb follow, under its name. clustercert.cli composes the verbs from
them; the lab's program (clustercert_lab.cli) defines its commands' options with ``option`` too. Every
option carries a help line (tests/test_cli_flags.py checks it).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field

from clustercert.collect import DEFAULT_FORKS


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    kwargs: dict = field(default_factory=dict)

    def add(self, parser: argparse.ArgumentParser, **overrides) -> argparse.Action:
        return parser.add_argument(*self.flags, **{**self.kwargs, **overrides})


def option(*flags: str, **kwargs) -> Option:
    return Option(tuple(flags), kwargs)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


class Refused(argparse.Action):
    """An ansible-playbook flag clustercert does not take: using it is a usage error (exit 2) whose one line
    says what to use instead (``help`` says it too)."""

    def __init__(self, option_strings, dest, instead: str = "", **kwargs):
        self.instead = instead
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        raise argparse.ArgumentError(self, f"not taken by clustercert: {self.instead}")


def limit_pattern(text: str) -> str:
    """``-l``'s value; ``@FILE`` (as ansible-playbook's) reads the hosts from FILE, one a line (blank lines
    and # comments left out), into one pattern ``a,b,c``."""
    if not text.startswith("@"):
        return text
    name = text[1:]
    if not name:
        raise argparse.ArgumentTypeError("@ names no file")
    try:
        with open(name, encoding="utf-8") as fh:
            lines = [ln.strip() for ln in fh]
    except FileNotFoundError:
        raise argparse.ArgumentTypeError(f"{name}: file not found") from None
    except IsADirectoryError:
        raise argparse.ArgumentTypeError(f"{name}: is a directory, expected a file of host names") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise argparse.ArgumentTypeError(
            f"{name}: cannot read ({getattr(exc, 'strerror', None) or exc})"
        ) from None
    hosts = [ln for ln in lines if ln and not ln.startswith("#")]
    if not hosts:
        raise argparse.ArgumentTypeError(f"{name}: names no host")
    return ",".join(hosts)


# ---- where and whom ------------------------------------------------------------------------------

INVENTORY = option(
    "-i", "--inventory", metavar="INV", required=True,
    help="Ansible inventory (file or directory); `lab` is the running lab's inventory, `sample:h100` the "
         "bundled sample (found wherever clustercert is installed)")
LIMIT = option("-l", "--limit", metavar="PATTERN", type=limit_pattern,
               help="only the hosts matching this Ansible pattern (gpu01:gpu02, 'gpu*', '!gpu03'), or @FILE: "
                    "the hosts named in FILE, one a line; never widens")
LIST_HOSTS = option("--list-hosts", action="store_true",
                    help="print the hosts the inventory and --limit select, then stop (nothing runs)")
USER = option("-u", "--user", metavar="USER",
              help="log in as USER where the inventory sets no ansible_user (as ansible's -u; "
                   "sets ANSIBLE_REMOTE_USER for this run)")
PRIVATE_KEY = option("--private-key", "--key-file", dest="private_key", metavar="FILE",
                     help="SSH private key for hosts whose inventory sets no ansible_ssh_private_key_file "
                          "(as ansible's --private-key; sets ANSIBLE_PRIVATE_KEY_FILE for this run)")
ASK_BECOME_PASS = option(
    "-K", "--ask-become-pass", action="store_true",
    help="ask once for the sudo password (hosts with ansible_become: true); it is kept in this process's "
         "environment as ANSIBLE_BECOME_PASS, never printed or written")
BECOME = option("-b", "--become", action="store_true",
                help="become root for the tasks (as ansible-playbook's -b; sets ANSIBLE_BECOME for this run: "
                     "the hosts' ansible_become still wins)")
ASK_PASS = option("-k", "--ask-pass", action=Refused,
                  instead="clustercert logs in with SSH keys only (validate and probe run ssh in batch "
                          "mode): use --private-key FILE or an ssh-agent; a sudo password is -K",
                  help="not taken: clustercert logs in with SSH keys (--private-key, ssh-agent)")
VAULT_ID = option("--vault-id", action="append", default=[], metavar="[LABEL@]SOURCE",
                  help="a vault identity, as ansible-playbook's: SOURCE a password file, an executable "
                       "printing the password, or `prompt`; repeatable")
VAULT_PASSWORD_FILE = option("--vault-password-file", "--vault-pass-file", dest="vault_password_file",
                             action="append", default=[], metavar="FILE",
                             help="the vault password from FILE (or from its output when executable)")
ASK_VAULT_PASS = option(
    "-J",
    "--ask-vault-pass",
    "--ask-vault-password",
    dest="ask_vault_pass",
    action="store_true",
    help="ask once for the vault password (on the terminal, never echoed nor written)",
)
FORKS = option("-f", "--forks", type=positive_int, metavar="N",
               help=f"how many hosts at once (default {DEFAULT_FORKS}, as ansible.cfg's forks)")

# ---- playbook runs -------------------------------------------------------------------------------

CHECK = option("-C", "--check", action="store_true", help="dry run: report what would change, change nothing")
DIFF = option("-D", "--diff", action="store_true",
              help="print the differences of changed files and templates (as ansible-playbook prints them, "
                   "---before/+++after, under the host table)")
START_AT_TASK = option("--start-at-task", metavar="TASK", help="start the playbook at the task of this name")
LIST_TASKS = option("--list-tasks", action="store_true", help="print the playbook's tasks, then stop")
LIST_TAGS = option("--list-tags", action="store_true", help="print the playbook's tags, then stop")
SYNTAX_CHECK = option("--syntax-check", action="store_true", help="check the playbook's syntax, then stop")
EXTRA_VARS = option(
    "-e", "--extra-vars", action="append", default=[], metavar="VARS",
    help="extra variables, as ansible-playbook's: key=value pairs (quote values with spaces), a JSON/YAML "
         "mapping ('{\"k\": 1}'), or @FILE (YAML or JSON); repeatable, later wins")
TAGS = option("-t", "--tags", metavar="TAGS", help="only the roles/tasks with these tags (comma separated)")
SKIP_TAGS = option(
    "--skip-tags", metavar="TAGS", help="leave out the roles/tasks with these tags (comma separated)"
)

# ---- probes --------------------------------------------------------------------------------------

ALL_PAIRS = option("--all-pairs", action="store_true",
                   help="probe every pair of nodes (circle method, N-1 rounds) instead of the round-1 "
                        "matching plus localisation rounds")
PROBE_SECONDS = option("--probe-seconds", type=positive_int, default=5, metavar="S",
                       help="duration of each bandwidth probe (default 5)")
PROBE_TIMEOUT = option("--probe-timeout", type=positive_int, default=60, metavar="S",
                       help="a probe still running after its duration + this many seconds is killed and "
                            "reported as error (default 60)")

# ---- output --------------------------------------------------------------------------------------

PROM = option("--prom", metavar="FILE",
              help="also write node_exporter textfile metrics to FILE (atomically; e.g. "
                   "/var/lib/node_exporter/textfile/clustercert.prom)")
JUNIT = option("--junit", metavar="FILE",
               help="also write the findings as JUnit XML to FILE (one testcase per node x check, failures "
                    "with their expected and observed values, each node's measured seconds; written "
                    "atomically)")
VERBOSE = option("-v", "--verbose", action="count", default=0,
                 help="more output, repeatable (-vvvv); anywhere on the line; -v shows the traceback of an "
                      "internal error; bootstrap passes it to ansible-playbook and prints Ansible's own "
                      "output at that verbosity on stderr")


def output_format(*choices: str, default: str = "table") -> Option:
    extra = {"json": "json: one document with its schema id (src/clustercert/schemas/)",
             "markdown": "markdown: the docs/checks.md page"}
    notes = "; ".join(extra[c] for c in choices if c in extra)
    return option("--format", choices=choices, default=default,
                  help=f"output: {', '.join(choices)} (default {default})" + (f"; {notes}" if notes else ""))


# ---- the groups verbs share ----------------------------------------------------------------------

VAULT = (VAULT_ID, VAULT_PASSWORD_FILE, ASK_VAULT_PASS)
CONNECTION = (INVENTORY, LIMIT, LIST_HOSTS, USER, PRIVATE_KEY, ASK_BECOME_PASS, ASK_PASS, FORKS, *VAULT)
PLAYBOOK = (
    BECOME,
    CHECK,
    DIFF,
    EXTRA_VARS,
    TAGS,
    SKIP_TAGS,
    START_AT_TASK,
    LIST_TASKS,
    LIST_TAGS,
    SYNTAX_CHECK,
)
NCCL_CLUSTER = option(
    "--nccl-cluster", choices=("per-fabric", "all-rails"), default="per-fabric",
    help="probe.nccl_cluster's runs across the cleared nodes: one over every compute rail, then one per "
         "fabric where the rails span several (per-fabric, the default: a slow fabric is named), or the "
         "all-rails run alone (all-rails: on F fabrics F runs fewer, each at least as long as the all-rails "
         "run)")
PROBE_RUN = (ALL_PAIRS, PROBE_SECONDS, PROBE_TIMEOUT, NCCL_CLUSTER)


VERSION = option("--version", action="store_true",
                 help="print the versions of clustercert, ansible-core, ansible-runner and Python, then stop "
                      "(as `clustercert version`)")

# ---- the options of one verb ---------------------------------------------------------------------

# init
INIT_DIRECTORY = option("directory", metavar="DIR", help="where to write the inventory (created if missing)")
INIT_PROFILE = option("--profile", default="h100-sxm-8x-ndr", metavar="NAME",
                      help="the node class: a built-in profile (h100-sxm-8x-ndr, a100-sxm-8x-hdr, lab) or a "
                           "path to your own profile YAML (default h100-sxm-8x-ndr)")
INIT_FORCE = option("--force", action="store_true",
                    help="write into a DIR that is not empty (replaces hosts.yml, group_vars/all.yml and "
                         "known_hosts.md there; keeps everything else)")

# validate
CHECKS = option("--checks", metavar="LIST", help="only these check ids and components, comma separated "
                "(gpu,ib.port_state); default every component")
SKIP = option("--skip", metavar="LIST", help="leave out these check ids and components, comma separated "
              "(gpu.xid,time)")
VALIDATE_OUT = option("--out", metavar="DIR", help="also write validate.json and each node's raw evidence "
                      "(evidence/NODE.json) into DIR")
DISRUPTIVE = option("--disruptive", action="store_true",
                    help="also run the bond failover test (ib.bond_failover): takes each node's active bond "
                         "slave down for a moment, one node at a time; never the default")

# probe
PROBES = option("--probes", metavar="LIST", help="comma-separated: ib_write_bw, ib_write_lat, iperf3, nccl, "
                "nvbandwidth, dcgmi, gdr, nvlink, storage, ddp (default: every probe the profile sets a "
                "threshold or a section for)")

BACKEND = option("--backend", choices=("ssh", "slurm"), default="ssh",
                 help="how the nodes' work reaches them: ssh (default: one connection per node from here) or "
                      "slurm (Slurm job steps started from one Slurm node, the controller holding one "
                      "session; every host clustercert_slurm: true). A drained node is certified too: "
                      "clustercert reserves the nodes (scontrol create reservation clustercert-<id> "
                      "Flags=MAINT,IGNORE_JOBS, an admin operation), resumes only the drained ones inside it,"
                      " and at the end drains them again with their own reason and deletes the reservation")


def _reservation(text: str) -> str:
    """A Slurm reservation's name, as collect.maintenance.reservation_name checks it (node-check's zipapp
    carries this module, not that one)."""
    if not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$", text):
        raise argparse.ArgumentTypeError(
            f"not a reservation name: {text!r} (letters, digits, '_', '.', '-'; at most 64)"
        )
    return text


RESERVATION = option("--reservation", type=_reservation, metavar="NAME",
                     help="with --backend slurm: run the job in this existing (ACTIVE) reservation of the "
                          "admin's, which must hold every node; drained nodes are resumed in it and drained "
                          "again with their own reason at the end; clustercert never creates, changes nor "
                          "deletes it")

# certify
CERTIFY_OUT = option(
    "--out", metavar="DIR", help="where certificate.json, signing.pub and the reports go (required)"
)
DRAIN = option("--drain", choices=("slurm",), help="after the verdicts, drain the failing nodes in Slurm "
               "(Reason=clustercert: <check ids>) and resume the passing nodes clustercert drained")
SIGNING_KEY = option("--key", metavar="FILE", help="Ed25519 private key that signs the certificate (default: "
                     "the state directory's key from `clustercert key init`)")

# drift
BASELINE = option("--baseline", default="latest-certified", metavar="RUN_ID",
                  help="the run to compare with: a run id from `clustercert report runs` (default: the "
                       "latest certified run of this inventory)")
DRIFT_PROBES = option("--probes", choices=("none", "quick", "full"), default="none",
                      help="performance drift: none (default), quick (2 s pair probes) or full (5 s), "
                           "against the baseline's values within the profile's drift_tolerance")
FIX = option("--fix", action="store_true", help="bootstrap the nodes with configuration drift (only the "
             "roles that drifted), then validate them again")

# parse
PARSE_KIND = option("kind", nargs="?", help="the parser (`clustercert parse --list`)")
PARSE_FILE = option("file", nargs="?", help="the saved output, or - for stdin")
PARSE_JSON = option("--json", action="store_true", help="print JSON (default: YAML)")
PARSE_LIST = option("--list", action="store_true", help="list the kinds")

# node-check
NODE_PROFILE = option("--profile", metavar="P",
                      help="what the node must be: the node file the node_check role writes (.json: the "
                           "resolved profile, the node's name and command timeout), or a built-in profile "
                           "name (a profile YAML with the full install only)")
NODE_DRAIN = option("--drain", action="store_true",
                    help="on failure drain this node in Slurm (State=DRAIN Reason='clustercert: <failing "
                         "check ids>') unless someone else drained it; on success resume it only where "
                         "clustercert drained it")
SLURM_NODE = option("--slurm-node", metavar="NAME", help="with --drain: this node's Slurm NodeName (default: "
                    "the short host name, as hostname -s)")
TOOL_PATH = option("--tool-path", metavar="DIRS", help="directories (colon separated) searched for the tools "
                   "and scontrol before the checks' fixed PATH (/usr/local/sbin:/usr/local/bin:/usr/sbin:/"
                   "usr/bin:/sbin:/bin)")
BUILD_ZIPAPP = option("--build-zipapp", metavar="FILE",
                      help="write node-check as one self-contained Python zipapp for the nodes (stdlib only, "
                           "the built-in profiles resolved inside; run it as python3 FILE --profile P), then "
                           "stop")

# checks
CHECKS_PROFILE = option("--profile", action="append", metavar="NAME",
                        help="the profile(s) whose figures to show: a built-in name or a YAML path "
                             "(repeatable; default every built-in profile)")

# report
REPORT_WHAT = option("what", choices=("history", "runs", "prune", "show"), help="history: per-node verdicts, "
                     "failing checks and probe values, newest first; runs: the recorded runs; prune: remove "
                     "old runs from the store (never each inventory's latest certified run, nor a drift's "
                     "baseline) and compact it; show CERT: a certificate file (--format json: the "
                     "certificate with its findings and links as objects)")
REPORT_CERT = option(
    "report_certificate", nargs="?", metavar="CERT", help="show: the certificate.json to show"
)
REPORT_NODE = option("--node", metavar="NODE", help="history of this node only")


def duration_s(text: str) -> float:
    """``--older-than``: a number of days, or a number with a unit s, m, h, d or w (90m, 12h, 30d)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    t = text.strip().lower()
    number, unit = (t[:-1], t[-1]) if t and t[-1] in units else (t, "d")
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 30d, 12h or 90m, got {text!r}"
        ) from None
    if value <= 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive duration, got {text!r}")
    return value * units[unit]


PRUNE_KEEP = option(
    "--keep",
    type=positive_int,
    metavar="N",
    help="prune: keep the newest N runs (default: report.keep in <state>/config.yml, else 500)",
)
PRUNE_OLDER = option("--older-than", dest="older_than", type=duration_s, metavar="D",
                     help="prune: remove runs started more than D ago (30d, 12h, 90m; a bare number is days);"
                          " with --keep, a run must be both beyond the newest N and older")
PRUNE_DRY_RUN = option(
    "--dry-run", action="store_true", help="prune: say what would be removed, remove nothing"
)

# verify
CERTIFICATE = option("certificate", help="the certificate.json to verify")
PUBLIC_KEY = option(
    "--key", required=True, metavar="FILE", help="the signer's public key (signing.pub, OpenSSH or PEM)"
)

# key
KEY_CMD = option("key_cmd", choices=("init", "show"), metavar="CMD", help="init or show")
KEY_FORCE = option("--force", action="store_true", help="init: replace an existing key (old certificates "
                   "then verify only against the old public key)")


def add(parser: argparse.ArgumentParser, *options: Option) -> None:
    for opt in options:
        opt.add(parser)
