"""The engine runs a real playbook through ansible-runner and reports events and per-host stats."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from clustercert.collect.engine import run_playbook


def _local_inventory(tmp: Path, hosts: list[str]) -> Path:
    inv = tmp / "inv.ini"
    lines = ["[nodes]"] + [
        f"{h} ansible_connection=local ansible_python_interpreter={sys.executable}" for h in hosts
    ]
    inv.write_text("\n".join(lines) + "\n")
    return inv


def _playbook(tmp: Path) -> Path:
    pb = tmp / "pb.yml"
    pb.write_text(textwrap.dedent(f"""\
        - name: engine test
          hosts: all
          gather_facts: false
          tasks:
            - name: write a marker per host
              ansible.builtin.copy:
                content: "{{{{ inventory_hostname }}}}\\n"
                dest: "{tmp}/{{{{ inventory_hostname }}}}.txt"
                mode: "0644"
            - name: fail on the second host only
              ansible.builtin.fail:
                msg: "deliberate failure on {{{{ inventory_hostname }}}}"
              when: inventory_hostname == 'beta'
            - name: runs only where the previous task passed
              ansible.builtin.stat:
                path: "{tmp}/{{{{ inventory_hostname }}}}.txt"
        """))
    return pb


def test_engine_events_and_stats(tmp_path):
    inv = _local_inventory(tmp_path, ["alpha", "beta"])
    seen: list[dict] = []
    result = run_playbook(_playbook(tmp_path), inv, progress=seen.append, state=tmp_path / "state", diff=True)

    assert result.status == "failed"
    assert (
        result.stats["alpha"].ok == 2
        and result.stats["alpha"].skipped == 1
        and result.stats["alpha"].changed == 1
        and result.stats["alpha"].failed == 0
    )
    assert (
        result.stats["beta"].failed == 1
        and result.stats["beta"].changed == 1
        and result.stats["beta"].ok == 1
    )
    assert not result.ok

    tasks = [e["task"] for e in seen if e["kind"] == "task"]
    assert tasks == [
        "write a marker per host",
        "fail on the second host only",
        "runs only where the previous task passed",
    ]
    changed = [(e["host"], e["task"]) for e in seen if e["kind"] == "host" and e["status"] == "changed"]
    assert sorted(changed) == [("alpha", "write a marker per host"), ("beta", "write a marker per host")]
    assert result.failures == [{"host": "beta", "task": "fail on the second host only", "status": "failed",
                                "msg": "deliberate failure on beta"}]
    # --diff fills the change's diff
    diffs = {c["host"]: c["diff"] for c in result.changes}
    assert diffs["alpha"][0]["after"] == "alpha\n"

    # artifacts are kept in a private run dir, extra-vars env is not
    assert (result.run_dir / "artifacts").is_dir()
    assert not (result.run_dir / "env").exists()
    saved = json.loads((result.run_dir / "result.json").read_text())
    assert saved["hosts"]["beta"]["failed"] == 1


def test_engine_check_mode_changes_nothing(tmp_path):
    inv = _local_inventory(tmp_path, ["alpha"])
    pb = tmp_path / "pb.yml"
    pb.write_text(textwrap.dedent(f"""\
        - hosts: all
          gather_facts: false
          tasks:
            - name: would write
              ansible.builtin.copy: {{content: "x", dest: "{tmp_path}/never.txt", mode: "0644"}}
        """))
    result = run_playbook(
        pb, inv, check=True, diff=True, state=tmp_path / "state", extra_vars={"secret_token": "s3cr3t"}
    )
    assert result.ok
    assert result.stats["alpha"].changed == 1
    assert not (tmp_path / "never.txt").exists()
    # secrets passed as extra-vars are not left in the run directory
    for f in result.run_dir.rglob("*"):
        if f.is_file() and f.name != "stdout":
            assert "s3cr3t" not in f.read_text(errors="replace"), f


def test_a_run_leaves_this_process_environment_alone(tmp_path, monkeypatch):
    """ansible-playbook next to this Python is found through the run's own environment: a PATH without this
    interpreter's bin directory still runs it, and os.environ (PATH included) is the same after the run."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    before = dict(os.environ)
    inv = _local_inventory(tmp_path, ["alpha"])
    pb = tmp_path / "pb.yml"
    pb.write_text(textwrap.dedent(f"""\
        - hosts: all
          gather_facts: false
          tasks:
            - name: writes
              ansible.builtin.copy: {{content: "x", dest: "{tmp_path}/written.txt", mode: "0644"}}
        """))
    result = run_playbook(pb, inv, state=tmp_path / "state")
    assert dict(os.environ) == before
    assert result.ok and (tmp_path / "written.txt").read_text() == "x"
    wrapper = (result.run_dir / "bin" / "ansible-playbook").read_text()
    assert os.path.join(os.path.dirname(sys.executable), "ansible-playbook") in wrapper


def _processes_with(marker: str) -> list[str]:
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            found.append(f"{p.name}: {cmd}")
    return found


def _long_task_playbook(tmp: Path) -> Path:
    """A playbook that touches TMP/started, then runs a command (named TMP/long) that ignores SIGTERM and
    SIGHUP."""
    pb = tmp / "slow-playbook.yml"
    pb.write_text(textwrap.dedent(f"""\
        - hosts: all
          gather_facts: false
          tasks:
            - name: started
              ansible.builtin.copy: {{content: "x", dest: "{tmp}/started", mode: "0644"}}
            - name: long task
              ansible.builtin.command: sh -c "trap '' TERM HUP; sleep 300; echo {tmp}/long"
              changed_when: false
        """))
    return pb


@pytest.mark.parametrize("strategy", ["linear", "mitogen_linear"])
def test_a_killed_run_leaves_no_playbook_running(tmp_path, strategy):
    """SIGKILL on the process that runs a playbook (cron timeout, OOM killer) must not leave ansible-playbook
    and its workers changing nodes on their own: neither with Ansible's own strategy nor with mitogen's,
    whose connection multiplexer is a child of its own that outlived ansible-playbook."""
    import signal
    import subprocess
    import time

    inv = _local_inventory(tmp_path, ["alpha"])
    pb = _long_task_playbook(tmp_path)
    runner = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""\
        from pathlib import Path
        from clustercert.collect.engine import run_playbook, strategy_env
        import os
        os.environ["CLUSTERCERT_STRATEGY"] = {strategy!r}
        run_playbook(Path({str(pb)!r}), Path({str(inv)!r}), state=Path({str(tmp_path / 'state')!r}),
                     envvars=strategy_env())
        """)])
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (tmp_path / "started").exists()
        while not _processes_with(f"{tmp_path}/long") and time.monotonic() < deadline:
            time.sleep(0.2)  # the next task starts within a second on an idle machine, later under load
        assert _processes_with(str(pb)), "the playbook should be running now"
        assert _processes_with(f"{tmp_path}/long"), "and its long task"
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait()
    deadline = time.monotonic() + 15
    # nothing of the run is left: not ansible-playbook, its workers or a strategy's helper processes, nor the
    # command its task started (which ignores SIGTERM and SIGHUP)
    while _processes_with(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_with(str(tmp_path)) == []


def test_a_run_past_its_timeout_is_stopped_whole(tmp_path):
    """run_playbook(timeout=S): ansible-runner's job timeout ends the run as `timeout` (not successful) and
    leaves none of its processes, even a task command that ignores SIGTERM and SIGHUP."""
    import time

    inv = _local_inventory(tmp_path, ["alpha"])
    pb = _long_task_playbook(tmp_path)
    t0 = time.monotonic()
    res = run_playbook(pb, inv, state=tmp_path / "state", timeout=5)
    assert res.status == "timeout" and time.monotonic() - t0 < 60
    deadline = time.monotonic() + 15
    while _processes_with(f"{tmp_path}/long") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_with(f"{tmp_path}/long") == []
