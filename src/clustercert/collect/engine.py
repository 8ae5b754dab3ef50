"""Playbook runs through ansible-runner: ``run_playbook``, the strategy it runs with, and ``-e`` as
ansible-playbook reads it.

One private data dir per run under ``<state>/runs/<id>/`` (artifacts kept; the env/ folder, which may
hold extra-vars, is removed after the run so secrets do not linger in artifacts). Runner events are
streamed to a progress callback and summarised into per-host stats and a list of changes.

Host keys: every run gets ANSIBLE_HOST_KEY_CHECKING=True (ansible-runner otherwise sets it False, which
overrides ansible.cfg; mitogen then runs ssh with StrictHostKeyChecking no and UserKnownHostsFile
/dev/null). A caller cannot turn it off.

Secrets: ansible-runner dumps the whole environment of the run into artifacts/<id>/command. Every
variable whose name or value looks like a password, token or key (``secret_env``) is kept out of the
environment ansible-runner sees; the tether (clustercert/remote/tether.py) receives them through a FIFO
in the run directory (never on disk) and puts them back into ansible-playbook's environment, so
ANSIBLE_BECOME_PASS still reaches the become plugin. After the run every file in the run directory is
scrubbed of those values.

Vault: the secrets of --vault-id / --vault-password-file / --ask-vault-pass (clustercert.model.vault) reach
ansible-playbook the same way: each is a secret variable (CLUSTERCERT_VAULT_PASS_<n>, through the FIFO)
that a password script in the run directory prints (``--vault-id LABEL@<run>/bin/vault-pass-<n>``); no
password is ever written to a file. Every value the inventory's vault decrypted is scrubbed from the run's
files too, and from the Ansible output passed through (``output``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import ansible_runner
from ansible.errors import AnsibleError
from ansible.parsing.splitter import parse_kv

from clustercert import paths, remote
from clustercert.collect.ssh import HOST_KEY_FAILURE, describe_failure
from clustercert.errors import InputError
from clustercert.model import vault
from clustercert.model.strict_yaml import load_yaml_file, loads

STAT_KEYS = ("ok", "changed", "failed", "unreachable", "skipped", "rescued", "ignored")


@dataclass
class HostStats:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0


@dataclass
class RunResult:
    run_id: str
    run_dir: Path
    rc: int
    status: str  # successful | failed | timeout | canceled
    stats: dict[str, HostStats]
    changes: list[dict] = field(default_factory=list)
    failures: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "successful" and not any(s.failed or s.unreachable for s in self.stats.values())

    def to_json(self) -> dict:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "rc": self.rc,
            "hosts": {h: asdict(s) for h, s in sorted(self.stats.items())},
            "changes": self.changes,
            "failures": self.failures,
        }


# An event as the progress display sees it: (kind, host, task, detail)
ProgressCallback = Callable[[dict], None]


def _summarise(event: dict) -> dict | None:
    """Reduce a runner event to what the display, stats and the caller need."""
    kind = event.get("event", "")
    data = event.get("event_data", {}) or {}
    if kind == "playbook_on_task_start":
        return {"kind": "task", "task": data.get("task", ""), "role": data.get("role", "")}
    if kind == "playbook_on_play_start":
        return {"kind": "play", "play": data.get("play", "")}
    if kind.startswith("runner_on_") or kind.startswith("runner_item_on_"):
        res = data.get("res", {}) or {}
        status = kind.removeprefix("runner_item_on_").removeprefix("runner_on_")
        if status == "ok" and res.get("changed"):
            status = "changed"
        if status == "failed" and data.get("ignore_errors"):
            status = "ignored"
        return {
            "kind": "host",
            "status": status,
            "host": data.get("host", ""),
            "task": data.get("task", ""),
            "role": data.get("role", ""),
            "action": data.get("task_action", ""),
            "item": kind.startswith("runner_item_on_"),
            "changed": bool(res.get("changed")),
            "msg": _failure_msg(status, str(res.get("msg", "")))
            if status in ("failed", "unreachable")
            else "",
            "diff": res.get("diff") if res.get("changed") else None,
        }
    if kind == "playbook_on_stats":
        return {
            "kind": "stats",
            "data": {
                k: data.get(k, {})
                for k in ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored", "processed")
            },
        }
    return None


def _failure_msg(status: str, msg: str) -> str:
    """A task's failure message; an unreachable host whose key did not verify says so in clustercert's words
    (Ansible's ssh plugin and mitogen each word it their own way)."""
    if status == "unreachable":
        if describe_failure(msg, None) == HOST_KEY_FAILURE:
            return HOST_KEY_FAILURE
    return msg[:500]


def _stats_from(data: dict) -> dict[str, HostStats]:
    mapping = {"ok": "ok", "changed": "changed", "failures": "failed", "dark": "unreachable",
               "skipped": "skipped", "rescued": "rescued", "ignored": "ignored"}
    hosts = set(data.get("processed", {})) | {h for k in mapping for h in data.get(k, {})}
    out = {h: HostStats() for h in hosts}
    for src, dst in mapping.items():
        for h, n in data.get(src, {}).items():
            setattr(out[h], dst, int(n))
    return out


def _resolve_playbook(playbook: str | Path) -> Path:
    """A path as given when it exists, else one under the shipped playbooks directory."""
    playbook = Path(playbook)
    if not playbook.is_absolute() and not playbook.exists():
        playbook = paths.playbooks_dir() / playbook
    return playbook.resolve()


def _playbook_flags(*, check: bool, diff: bool, tags: str | None, skip_tags: str | None,
                    start_at_task: str | None, listing: str | None) -> list[str]:
    """ansible-playbook's own flags for these options (the playbook and --vault-id come later)."""
    flags: list[str] = []
    if check:
        flags.append("--check")
    if diff:
        flags.append("--diff")
    for flag, value in (("--tags", tags), ("--skip-tags", skip_tags), ("--start-at-task", start_at_task)):
        if value:
            flags += [flag, value]
    if listing:
        if listing not in LISTINGS:
            raise ValueError(f"listing {listing!r} is none of {LISTINGS}")
        flags.append(f"--{listing}")
    return flags


def interpreter_path(path: str | None = None) -> str:
    """``path`` (default: this process's PATH) with this interpreter's bin directory in front unless it is
    on it already: ansible-runner starts ansible-playbook from PATH, and it must be the one next to this
    Python. Given to the run's environment; this process's own ``os.environ`` is left as it is."""
    path = os.environ.get("PATH", "") if path is None else path
    bindir = os.path.dirname(sys.executable)
    if bindir in path.split(os.pathsep):
        return path
    return bindir + os.pathsep + path


def _playbook_env(state: Path, envvars: dict | None) -> dict[str, str]:
    """The environment ansible-runner adds to this process's for the run (secrets still in it)."""
    env = {
        "PATH": interpreter_path(),
        "ANSIBLE_CONFIG": str(paths.ansible_cfg()),
        "ANSIBLE_ROLES_PATH": str(paths.roles_dir()),
        # the roles and playbooks name the collection's plugins by FQCN (clustercert.cluster.*)
        "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join([str(_collection_tree(state)), *_DEFAULT_COLLECTIONS]),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(state / "facts"),
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_FORCE_COLOR": "False",
        "ANSIBLE_NOCOLOR": "True",
    }
    env.update(envvars or {})
    # ansible-runner sets ANSIBLE_HOST_KEY_CHECKING=False unless the env says otherwise: host keys stay
    # checked
    env["ANSIBLE_HOST_KEY_CHECKING"] = "True"
    ssh_args = env.get("ANSIBLE_SSH_ARGS") or os.environ.get("ANSIBLE_SSH_ARGS")
    if ssh_args:  # replaces ansible.cfg's, which has it first
        env["ANSIBLE_SSH_ARGS"] = "-o StrictHostKeyChecking=yes " + ssh_args
    return env


def _take_secrets(env: dict[str, str], run_dir: Path) -> tuple[dict[str, str], list[str]]:
    """Moves the secrets out of ``env`` (they reach ansible-playbook through the tether's FIFO, never
    ansible-runner's dump of its environment) and adds each vault password as one; returns them and the
    ``--vault-id`` flags that read those passwords back."""
    secrets = secret_env({**os.environ, **env})
    for k in secrets:
        env.pop(k, None)
    flags: list[str] = []
    for n, sec in enumerate(vault.secrets()):
        name = f"{VAULT_PASS_ENV}{n}"
        secrets[name] = sec.password.decode("utf-8", "surrogateescape")
        flags += ["--vault-id", f"{sec.label}@{_vault_pass_script(run_dir, name)}"]
    return secrets, flags


class _EventCollector:
    """ansible-runner's event handler: keeps the changes, failures, events and final stats of a run, passes
    Ansible's output (scrubbed) to ``output`` and each summarised event to ``progress``."""

    def __init__(self, needles: list[str], output: Callable[[str], None] | None,
                 progress: ProgressCallback | None) -> None:
        self.needles, self.output, self.progress = needles, output, progress
        self.changes: list[dict] = []
        self.failures: list[dict] = []
        self.events: list[dict] = []
        self.final_stats: dict = {}

    def __call__(self, event: dict) -> bool:
        if self.output is not None and event.get("stdout"):
            self.output(scrub_text(event["stdout"], self.needles))
        s = _summarise(event)
        if s is None:
            return True
        if s["kind"] == "stats":
            self.final_stats.update(s["data"])
        elif s["kind"] == "host" and not s["item"]:
            self._host(s)
        if s["kind"] != "host" or not s["item"]:
            self.events.append({k: v for k, v in s.items() if k != "diff"})
        if self.progress is not None:
            self.progress(s)
        return True

    def _host(self, s: dict) -> None:
        if s["status"] == "changed":
            self.changes.append({"host": s["host"], "task": s["task"], "role": s["role"], "diff": s["diff"]})
        if s["status"] in ("failed", "unreachable"):
            self.failures.append({"host": s["host"], "task": s["task"], "status": s["status"],
                                  "msg": s["msg"]})


def _run_runner(kwargs: dict, secrets: dict[str, str], fifo: Path | None, run_dir: Path, needles: list[str]):
    """Runs ansible-runner with ``kwargs``; afterwards (also on failure) releases the secrets' FIFO, removes
    the env directory (extra-vars may hold secrets) and scrubs the secrets from the artifacts."""
    try:
        runner = ansible_runner.interface.init_runner(**kwargs)
        # seeded from os.environ: out of what ansible-runner dumps (the tether puts them back)
        for k in secrets:
            runner.config.env.pop(k, None)
        runner.run()
    finally:
        if fifo is not None:
            _close_fifo(fifo)
        # extra-vars may hold secrets: do not keep them next to the artifacts.
        shutil.rmtree(run_dir / "env", ignore_errors=True)
        scrub_tree(run_dir, needles)
    return runner


def run_playbook(
    playbook: str | Path,
    inventory: str | Path,
    *,
    limit: str | None = None,
    check: bool = False,
    diff: bool = False,
    tags: str | None = None,
    skip_tags: str | None = None,
    extra_vars: dict | None = None,
    forks: int | None = None,
    verbosity: int = 0,
    timeout: int | None = None,
    progress: ProgressCallback | None = None,
    state: Path | None = None,
    envvars: dict | None = None,
    start_at_task: str | None = None,
    listing: str | None = None,
    output: Callable[[str], None] | None = None,
) -> RunResult:
    """``listing``: "list-tasks", "list-tags" or "syntax-check" (ansible-playbook's, nothing runs on the
    hosts). ``output``: called with Ansible's own output of each event (its stdout at ``verbosity``), secrets
    and vaulted values replaced."""
    state = state or paths.state_dir()
    run_id = paths.new_run_id()
    run_dir = state / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    playbook = _resolve_playbook(playbook)
    cmdline = _playbook_flags(check=check, diff=diff, tags=tags, skip_tags=skip_tags,
                              start_at_task=start_at_task, listing=listing)
    env = _playbook_env(state, envvars)
    secrets, vault_flags = _take_secrets(env, run_dir)
    needles = _needles([*secrets.values(), *vault.plaintexts()])
    collector = _EventCollector(needles, output, progress)

    fifo = _secrets_fifo(run_dir, secrets) if secrets else None
    kwargs = dict(
        private_data_dir=str(run_dir),
        binary=str(_tethered_playbook_binary(run_dir, timeout or 0, fifo, path=interpreter_path())),
        inventory=str(Path(inventory).resolve()),
        envvars=env,
        event_handler=collector,
        quiet=True,
        verbosity=verbosity or None,
        # no job_timeout: ansible-runner's kills only the tether's process group (SIGKILL), not Ansible's
        # workers in their own sessions nor what their tasks started; the tether enforces ``timeout`` itself
        settings={"suppress_ansible_output": True},
        # With `binary` set, ansible-runner passes no playbook of its own: it is the last argument here.
        cmdline=" ".join(_quote(c) for c in [*cmdline, *vault_flags, str(playbook)]),
    )
    for key, value in (("limit", limit), ("forks", forks), ("extravars", extra_vars)):
        if value:
            kwargs[key] = value
    runner = _run_runner(kwargs, secrets, fifo, run_dir, needles)
    stats = _stats_from(collector.final_stats or (runner.stats or {}))
    status = "timeout" if (run_dir / TIMED_OUT_MARK).exists() else str(runner.status)
    result = RunResult(run_id, run_dir, int(runner.rc or 0), status, stats,
                       collector.changes, collector.failures, collector.events)
    (run_dir / "result.json").write_text(json.dumps(result.to_json(), indent=2, default=str))
    return result


LISTINGS = ("list-tasks", "list-tags", "syntax-check")
VAULT_PASS_ENV = "CLUSTERCERT_VAULT_PASS_"


_DEFAULT_COLLECTIONS = ("~/.ansible/collections", "/usr/share/ansible/collections")


def _collection_tree(state: Path) -> Path:
    """A collections path in the state directory where clustercert.cluster is this installation's content
    (a link to the repository, or to the wheel's ``_data``, which ansible.cfg's relative path cannot reach):
    the roles' and playbooks' ``clustercert.cluster.*`` plugins resolve to the same copy as the roles. Kept
    out of the run directories (their artifacts are walked and scrubbed); replaced when it names another
    copy."""
    tree = state / "collections"
    link = tree / "ansible_collections" / "clustercert" / "cluster"
    target = paths.data_dir()
    if not (link.is_symlink() and Path(os.readlink(link)) == target):
        for d in (tree, tree / "ansible_collections", link.parent):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = link.with_name(f".cluster.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target, target_is_directory=True)
        os.replace(tmp, link)
    return tree


def _vault_pass_script(run_dir: Path, name: str) -> Path:
    """A vault password script (ansible-playbook runs it, and uses what it prints) that prints the secret
    variable ``name``: the password is in ansible-playbook's environment only, never in a file."""
    bindir = run_dir / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    script = bindir / f"vault-pass-{name.removeprefix(VAULT_PASS_ENV)}"
    script.write_text(f'#!/bin/sh\nprintf \'%s\' "${name}"\n')
    script.chmod(0o700)
    return script


# The tether (clustercert/remote/tether.py) runs in ansible-playbook's place: it kills the whole run when this
# process dies or at the run's timeout, when it leaves TIMED_OUT_MARK in the run directory.
TIMED_OUT_MARK = "timed-out"


# ---- secrets: kept out of what ansible-runner writes ------------------------------------------

_SECRET_NAME = re.compile(r"PASS|SECRET|TOKEN|CREDENTIAL|PRIVATE|(^|_)(API_?)?KEY($|_)|(^|_)AUTH($|_)", re.I)
_NOT_SECRET_NAME = re.compile(r"(_FILE|_PATH|_DIR|_SOCK|_CHECKING)$|^(OLDPWD|PWD)$", re.I)
_SECRET_VALUE = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY|\b(ghp|gho|ghs|ghu)_[A-Za-z0-9]{20,}|github_pat_|glpat-|xox[abprs]-|"
    r"\bAKIA[0-9A-Z]{16}\b|\beyJ[A-Za-z0-9_-]{8,}\.eyJ|://[^/\s:@]+:[^/\s@]+@|^Bearer\s")
REDACTED = "<redacted by clustercert>"


def secret_env(env: dict) -> dict[str, str]:
    """The variables of ``env`` that look like a password, token or key, by name (ANSIBLE_BECOME_PASS,
    *_TOKEN, *_SECRET*, *_KEY, ...; not *_FILE/*_PATH/*_DIR/*_SOCK, which name where a secret is) or by
    value (a PEM private key, a GitHub/GitLab/Slack token, an AWS access key id, a JWT, a URL with a
    password in it)."""
    out = {}
    for k, v in env.items():
        v = str(v)
        if (_SECRET_NAME.search(k) and not _NOT_SECRET_NAME.search(k)) or _SECRET_VALUE.search(v):
            out[k] = v
    return out


def _needles(values) -> list[str]:
    """The secret values worth replacing (4 characters or more), longest first."""
    return sorted({v for v in values if len(v) >= 4}, key=len, reverse=True)


def scrub_text(text: str, values) -> str:
    for v in _needles(values):
        text = text.replace(v, REDACTED)
    return text


def scrub_tree(root: Path, values) -> None:
    """Replace every occurrence of each secret value (4 characters or more) in the files under ``root``."""
    needles = _needles(values)
    if not needles:
        return
    enc = [(n.encode(), json.dumps(n)[1:-1].encode()) for n in needles]
    for path in root.rglob("*"):
        if not path.is_file() or path.is_symlink() or stat_is_fifo(path):
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        new = data
        for raw, escaped in enc:
            new = new.replace(raw, REDACTED.encode()).replace(escaped, REDACTED.encode())
        if new != data:
            path.write_bytes(new)


def stat_is_fifo(path: Path) -> bool:
    try:
        return stat.S_ISFIFO(path.lstat().st_mode)
    except OSError:
        return False


def _secrets_fifo(run_dir: Path, secrets: dict[str, str]) -> Path:
    """A FIFO (0600) the tether reads the secret variables from: they reach ansible-playbook's
    environment without passing through ansible-runner (which writes its environment to disk)."""
    fifo = run_dir / ".secrets"
    os.mkfifo(fifo, 0o600)
    payload = json.dumps(secrets).encode()

    def feed() -> None:
        try:
            with open(fifo, "wb") as fh:  # blocks until the tether opens it (or _close_fifo does)
                fh.write(payload)
        except OSError:
            pass

    threading.Thread(target=feed, daemon=True, name="clustercert-secrets").start()
    return fifo


def _close_fifo(fifo: Path) -> None:
    """Release a feeder still waiting (the tether never started), then remove the FIFO."""
    try:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        os.close(fd)
    except OSError:
        pass
    fifo.unlink(missing_ok=True)


def _tethered_playbook_binary(run_dir: Path, timeout: int, secrets_fifo: Path | None = None,
                              path: str | None = None) -> Path:
    """Writes the tether (clustercert/remote/tether.py) to ``<run_dir>/bin/tether.py`` and, for ansible-runner
    to run, ``<run_dir>/bin/ansible-playbook``: a shell script that execs it with this interpreter and its
    settings (this process, ``timeout``, the mark, the FIFO, the real ansible-playbook) in front of its
    arguments. The real ansible-playbook is looked up on ``path`` (default: this process's PATH)."""
    real = shutil.which("ansible-playbook") if path is None else shutil.which("ansible-playbook", path=path)
    if real is None:
        raise FileNotFoundError("ansible-playbook is not on PATH")
    bindir = run_dir / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    tether = bindir / "tether.py"
    tether.write_text(remote.source("tether"))
    settings = [str(os.getpid()), str(int(timeout)), str(run_dir / TIMED_OUT_MARK),
                str(secrets_fifo) if secrets_fifo else "", real]
    wrapper = bindir / "ansible-playbook"
    wrapper.write_text("#!/bin/sh\n"
                       "# clustercert's tether around ansible-playbook: a run dies with the clustercert "
                       "process that started it.\n"
                       "exec " + shlex.join([sys.executable, str(tether), *settings]) + ' "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def _quote(s: str) -> str:
    return shlex.quote(s)


# ---- what clustercert's own runs use ------------------------------------------------------------

BOOTSTRAP_PLAYBOOK = "bootstrap.yml"  # playbooks/bootstrap.yml: `bootstrap`, and `drift` in check mode


def strategy_env() -> dict[str, str]:
    """Environment selecting the fastest available strategy: when the ``mitogen`` package is importable,
    its ``mitogen_linear`` (one persistent interpreter per host instead of one SSH round trip + Python
    start per task); ``CLUSTERCERT_STRATEGY=linear`` forces Ansible's own strategy."""
    wanted = os.environ.get("CLUSTERCERT_STRATEGY", "auto")
    if wanted not in ("auto", "mitogen_linear"):
        return {"ANSIBLE_STRATEGY": wanted} if wanted else {}
    try:  # an optional dependency: whether it is installed is the question asked here
        import ansible_mitogen  # noqa: F401  (the mitogen package's Ansible integration)
    except ImportError:
        return {}
    plugin_dir = Path(sys.modules["ansible_mitogen"].__file__).resolve().parent / "plugins" / "strategy"
    if not plugin_dir.is_dir():
        return {}
    return {"ANSIBLE_STRATEGY_PLUGINS": str(plugin_dir), "ANSIBLE_STRATEGY": "mitogen_linear"}


# ---- -e/--extra-vars ------------------------------------------------------------------------------

EXTRA_VARS_FLAG = "-e/--extra-vars"


def parse_extra_vars(items: list[str]) -> dict:
    """-e as ansible-playbook reads it: @FILE (YAML or JSON), a JSON/YAML mapping, or key=value pairs (quoted
    values may hold spaces); later wins. Anything else is bad input naming the flag and the item."""
    out: dict = {}
    for item in items:
        text = item.strip()
        if not text:
            raise InputError(
                EXTRA_VARS_FLAG, repr(item), "empty (expected key=value, a JSON mapping, or @file)"
            )
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
            out.update(_key_values(text))
    return out


def _key_values(text: str) -> dict:
    """``k=v k2='a b'`` split as ansible-playbook splits it (ansible's parse_kv)."""
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
    return pairs
