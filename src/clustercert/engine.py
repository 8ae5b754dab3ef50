"""Run playbooks through ansible-runner.

One private data dir per run under ``<state>/runs/<id>/`` (artifacts kept; the env/ folder, which may
hold extra-vars, is removed after the run so secrets do not linger in artifacts). Runner events are
streamed to a progress callback and summarised into per-host stats and a list of changes.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from clustercert import paths

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


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


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
            "msg": str(res.get("msg", ""))[:500] if status in ("failed", "unreachable") else "",
            "diff": res.get("diff") if res.get("changed") else None,
        }
    if kind == "playbook_on_stats":
        return {"kind": "stats", "data": {k: data.get(k, {}) for k in ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored", "processed")}}
    return None


def _stats_from(data: dict) -> dict[str, HostStats]:
    mapping = {"ok": "ok", "changed": "changed", "failures": "failed", "dark": "unreachable",
               "skipped": "skipped", "rescued": "rescued", "ignored": "ignored"}
    hosts = set(data.get("processed", {})) | {h for k in mapping for h in data.get(k, {})}
    out = {h: HostStats() for h in hosts}
    for src, dst in mapping.items():
        for h, n in data.get(src, {}).items():
            setattr(out[h], dst, int(n))
    return out


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
) -> RunResult:
    import ansible_runner

    state = state or paths.state_dir()
    run_id = new_run_id()
    run_dir = state / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    playbook = Path(playbook)
    if not playbook.is_absolute() and not playbook.exists():
        playbook = paths.playbooks_dir() / playbook
    playbook = playbook.resolve()

    cmdline: list[str] = []
    if check:
        cmdline.append("--check")
    if diff:
        cmdline.append("--diff")
    if tags:
        cmdline += ["--tags", tags]
    if skip_tags:
        cmdline += ["--skip-tags", skip_tags]

    # ansible-runner starts ansible-playbook from PATH: make sure it is the one next to this Python.
    bindir = os.path.dirname(sys.executable)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    env = {
        "ANSIBLE_CONFIG": str(paths.ansible_cfg()),
        "ANSIBLE_ROLES_PATH": str(paths.roles_dir()),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(state / "facts"),
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_FORCE_COLOR": "False",
        "ANSIBLE_NOCOLOR": "True",
    }
    env.update(envvars or {})

    changes: list[dict] = []
    failures: list[dict] = []
    events: list[dict] = []
    final_stats: dict = {}

    def handler(event: dict) -> bool:
        s = _summarise(event)
        if s is None:
            return True
        if s["kind"] == "stats":
            final_stats.update(s["data"])
        elif s["kind"] == "host":
            if s["status"] == "changed" and not s["item"]:
                changes.append({"host": s["host"], "task": s["task"], "role": s["role"], "diff": s["diff"]})
            if s["status"] in ("failed", "unreachable") and not s["item"]:
                failures.append({"host": s["host"], "task": s["task"], "status": s["status"], "msg": s["msg"]})
        if s["kind"] != "host" or not s["item"]:
            events.append({k: v for k, v in s.items() if k != "diff"})
        if progress is not None:
            progress(s)
        return True

    kwargs = dict(
        private_data_dir=str(run_dir),
        binary=str(_tethered_playbook_binary(run_dir, timeout or 0)),
        inventory=str(Path(inventory).resolve()),
        envvars=env,
        event_handler=handler,
        quiet=True,
        verbosity=verbosity or None,
        # no job_timeout: ansible-runner's kills only the tether's process group (SIGKILL), not Ansible's workers
        # in their own sessions nor what their tasks started; the tether enforces ``timeout`` itself
        settings={"suppress_ansible_output": True},
    )
    if limit:
        kwargs["limit"] = limit
    if forks:
        kwargs["forks"] = forks
    if extra_vars:
        kwargs["extravars"] = extra_vars
    # With `binary` set, ansible-runner passes no playbook of its own: it is the last argument here.
    kwargs["cmdline"] = " ".join(_quote(c) for c in [*cmdline, str(playbook)])
    runner = ansible_runner.run(**kwargs)
    # extra-vars may hold secrets: do not keep them next to the artifacts.
    shutil.rmtree(run_dir / "env", ignore_errors=True)
    stats = _stats_from(final_stats or (runner.stats or {}))
    status = "timeout" if (run_dir / TIMED_OUT_MARK).exists() else str(runner.status)
    result = RunResult(run_id, run_dir, int(runner.rc or 0), status, stats, changes, failures, events)
    (run_dir / "result.json").write_text(json.dumps(result.to_json(), indent=2, default=str))
    return result


# ansible-runner starts ansible-playbook in a session of its own that ignores SIGHUP, so when this process dies
# without cleaning up (SIGKILL, OOM killer, a cron timeout's KILL) the playbook would run on, orphaned, still
# changing nodes. ansible-runner runs this tether in its place: it asks the kernel for SIGTERM when its parent
# dies (PR_SET_PDEATHSIG) and to inherit the run's orphans (PR_SET_CHILD_SUBREAPER), starts the real
# ansible-playbook as its child, and on SIGTERM, SIGHUP (the pty closing) or SIGINT kills every process under
# it: ansible-playbook, its workers (in sessions of their own), a strategy's helpers (mitogen's connection
# multiplexer outlived a SIGTERMed ansible-playbook by minutes) and the commands their tasks started. The same
# happens at the run's timeout (SIGALRM; the tether leaves TIMED_OUT_MARK in the run directory): ansible-runner's
# own job_timeout SIGKILLs one process group only, which leaves the workers and their commands running.
# When ansible-playbook exits on its own the tether exits with its status and kills nothing, so ssh
# ControlPersist masters live on as usual.
TIMED_OUT_MARK = "timed-out"
_TETHER = """#!{python}
# clustercert's tether around ansible-playbook (clustercert/engine.py): a run dies with the clustercert
# process that started it.
import ctypes, os, signal, sys

libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG


def descendants():
    children = {{}}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [os.getpid()]
    while todo:
        for pid in children.get(todo.pop(), []):
            found.append(pid)
            todo.append(pid)
    return found


def end_run(signum, frame):
    for _ in range(5):  # again, for whatever was forked while the pass before ran
        pids = descendants()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    os._exit(128 + signum)


inherited = {{s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}}
for s in inherited:
    signal.signal(s, end_run)


def timed_out(signum, frame):
    open({mark!r}, "w").close()
    end_run(signum, frame)


if {timeout}:
    signal.signal(signal.SIGALRM, timed_out)
    signal.alarm({timeout})
if os.getppid() != {parent}:  # clustercert died before PR_SET_PDEATHSIG took effect
    end_run(signal.SIGTERM, None)
child = os.fork()
if child == 0:
    for s, handler in inherited.items():
        if handler is not None:
            signal.signal(s, handler)
    os.execv({playbook!r}, [{playbook!r}, *sys.argv[1:]])
while True:
    pid, status = os.waitpid(-1, 0)  # the run's orphans are reaped here too
    if pid == child:
        code = os.waitstatus_to_exitcode(status)
        os._exit(code if code >= 0 else 128 - code)
"""


def _tethered_playbook_binary(run_dir: Path, timeout: int) -> Path:
    real = shutil.which("ansible-playbook")
    if real is None:
        raise FileNotFoundError("ansible-playbook is not on PATH")
    wrapper = run_dir / "bin" / "ansible-playbook"
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text(_TETHER.format(python=sys.executable, parent=os.getpid(), playbook=real, timeout=int(timeout),
                                      mark=str(run_dir / TIMED_OUT_MARK)))
    wrapper.chmod(0o755)
    return wrapper


def _quote(s: str) -> str:
    import shlex

    return shlex.quote(s)
