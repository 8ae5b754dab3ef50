"""Host-key checking on every connection clustercert makes or causes, shown on the real ssh command lines
(issue 19.1): the collector's own ssh, Ansible's ssh plugin and mitogen (through `clustercert bootstrap`'s
strategy) each run ssh so that `ssh -G` gives StrictHostKeyChecking yes, even where the inventory and the
user's environment ask for the opposite. No lab: a wrapper ssh records `ssh -G` for each command line and
answers as ssh does for a forged key."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from clustercert.collect import engine, ssh

HOSTILE_ARGS = "-o StrictHostKeyChecking=no -o CheckHostIP=no"  # an inventory that tries to turn checking off


def _wrapper(tmp: Path) -> tuple[Path, Path]:
    log = tmp / "ssh-G.log"
    w = tmp / "fake-ssh"
    w.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        # record what the real ssh would use for this command line, then fail as ssh does on a forged key
        {{ echo "=== $*"; ssh -G "$@" 2>&1; }} >> {log}
        echo "Host key verification failed." >&2
        exit 255
        """))
    w.chmod(w.stat().st_mode | stat.S_IXUSR)
    return w, log


def _effective(log: Path) -> list[dict[str, str]]:
    out, cur = [], None
    for line in log.read_text().splitlines():
        if line.startswith("=== "):
            cur = {"argv": line[4:]}
            out.append(cur)
        elif cur is not None and " " in line:
            k, v = line.split(" ", 1)
            cur.setdefault(k, v)
    return out


def _assert_checked(records: list[dict[str, str]], known_hosts: str | None = None) -> None:
    assert records, "no ssh command line was recorded"
    for r in records:
        assert r.get("stricthostkeychecking") == "true", r["argv"]  # ssh -G spells `yes` as true
        assert "/dev/null" not in r.get("userknownhostsfile", ""), r["argv"]
        assert "StrictHostKeyChecking no" not in r["argv"].replace("=", " ").split(" -o ")[0]
        if known_hosts:
            assert known_hosts in r.get("userknownhostsfile", ""), r["argv"]


@pytest.fixture
def ssh_on_path(tmp_path, monkeypatch):
    if subprocess.run(["sh", "-c", "command -v ssh"], capture_output=True).returncode != 0:
        pytest.skip("needs the OpenSSH client")
    return _wrapper(tmp_path)


def test_collector_ssh_argv_checks_host_keys_whatever_the_inventory_says(wrapper_on_path, tmp_path):
    log = wrapper_on_path
    conn = {"ansible_host": "192.0.2.10", "ansible_user": "ops", "ansible_ssh_common_args": HOSTILE_ARGS}
    argv = ssh.ssh_argv(conn, "node01")
    assert argv[:3] == ["ssh", "-o", "StrictHostKeyChecking=yes"]
    # the collector's session as a whole: refused, with the reason in one line, nothing run
    ev = ssh.collect_node("node01", {**conn, "ansible_ssh_common_args": HOSTILE_ARGS},
                              {"marker": (f"touch {tmp_path}/RAN", 5)})
    assert not ev.reachable
    assert ev.error.startswith("host key verification failed")
    assert not (tmp_path / "RAN").exists()
    _assert_checked(_effective(log))


@pytest.fixture
def wrapper_on_path(ssh_on_path, tmp_path, monkeypatch):
    wrapper, log = ssh_on_path
    bindir = tmp_path / "bin"
    bindir.mkdir()
    real = subprocess.run(["sh", "-c", "command -v ssh"], capture_output=True, text=True).stdout.strip()
    (bindir / "ssh").symlink_to(wrapper)
    # the wrapper's own `ssh -G` must reach the real one
    wrapper.write_text(wrapper.read_text().replace("ssh -G", f"{real} -G"))
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return log


@pytest.mark.parametrize("strategy", ["linear", "mitogen_linear"])
def test_playbook_runs_check_host_keys(wrapper_on_path, tmp_path, monkeypatch, strategy):
    """ansible-runner would set ANSIBLE_HOST_KEY_CHECKING=False; the user's env says False too: the engine
    still runs with host keys checked, and mitogen gets check_host_keys=enforce (its ssh line has
    StrictHostKeyChecking yes first, no UserKnownHostsFile /dev/null)."""
    log = wrapper_on_path
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")
    monkeypatch.setenv("CLUSTERCERT_STRATEGY", strategy)
    env = engine.strategy_env()
    if strategy == "mitogen_linear" and env.get("ANSIBLE_STRATEGY") != "mitogen_linear":
        pytest.skip("mitogen is not installed")
    kh = tmp_path / "known_hosts"
    kh.write_text(
        "192.0.2.10 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFakeFakeFakeFakeFakeFakeFake\n"
    )
    inv = tmp_path / "inv.ini"
    inv.write_text("node01 ansible_host=192.0.2.10 ansible_user=root ansible_python_interpreter=/usr/bin/"
                   f"python3 ansible_ssh_common_args='-o UserKnownHostsFile={kh}'\n")
    pb = tmp_path / "pb.yml"
    pb.write_text(f"- hosts: all\n  gather_facts: false\n  tasks:\n"
                  f"    - ansible.builtin.file:\n        path: {tmp_path}/RAN\n        state: touch\n")
    result = engine.run_playbook(pb, inv, state=tmp_path / "state", envvars=env, timeout=120)
    assert result.stats["node01"].unreachable == 1, result.to_json()
    assert not (tmp_path / "RAN").exists()
    records = _effective(log)
    _assert_checked(records, str(kh))
    if strategy == "mitogen_linear":
        assert any("StrictHostKeyChecking yes" in r["argv"] for r in records)
        assert "UserKnownHostsFile /dev/null" not in log.read_text()
    assert result.failures[0]["msg"] == ssh.HOST_KEY_FAILURE, result.failures


def test_describe_failure_names_the_host_key_and_sudo_cases():
    forged = ("@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
              "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"
              "Host key verification failed.\n")
    assert ssh.describe_failure(forged, 255).startswith("host key verification failed")
    assert ssh.describe_failure("No ED25519 host key is known for 10.0.0.1 and you have requested strict "
                                    "checking.\nHost key verification failed.\n", 255).startswith("host key")
    line = ssh.describe_failure("sudo: a password is required\n", 1, {"ansible_user": "ops"})
    assert "\n" not in line and "sudo needs a password" in line and "-K" in line
    assert ssh.describe_failure("ssh: connect to host 10.0.0.9 port 22: No route to host\n", 255) == \
        "ssh: connect to host 10.0.0.9 port 22: No route to host"


def test_become_uses_sudo_and_feeds_the_password_on_stdin_only(tmp_path, monkeypatch):
    """The collector's node reads under become, run locally through a stand-in sudo that records its command
    line and what it read: `sudo -n` without a password, `sudo -S` fed ANSIBLE_BECOME_PASS first on stdin with
    it (never on a command line); the node's runner still gets its request."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    rec = tmp_path / "sudo.log"
    (bindir / "sudo").write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import os, sys
        args = sys.argv[1:]
        pw = b""
        if "-S" in args:  # read one line, byte by byte, as sudo does
            while (c := os.read(0, 1)) not in (b"", b"\\n"):
                pw += c
        with open({str(rec)!r}, "a") as f:
            f.write(repr(args) + " pw=" + pw.decode() + "\\n")
        rest = args[args.index("--") + 1:]
        os.execvp(rest[0], rest)
        """))
    (bindir / "sudo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    conn = {
        "ansible_connection": "local",
        "ansible_become": "yes",
        "ansible_python_interpreter": sys.executable,
    }
    monkeypatch.delenv("ANSIBLE_BECOME_PASS", raising=False)
    ev = ssh.collect_node("n", conn, {"hello": ("echo hi", 5)})
    assert ev.reachable and ev.results["hello"].stdout == "hi\n", ev
    monkeypatch.setenv("ANSIBLE_BECOME_PASS", "s3cret-pw")
    ev = ssh.collect_node("n", conn, {"hello": ("echo hi", 5)})
    assert ev.reachable and ev.results["hello"].stdout == "hi\n", ev
    lines = rec.read_text().splitlines()
    assert lines[0].startswith("['-n', '-u', 'root', '--'") and lines[0].endswith(" pw=")
    assert lines[1].startswith("['-S', '-p', '', '-u', 'root', '--'") and lines[1].endswith(" pw=s3cret-pw")
    assert "s3cret-pw" not in lines[1].rsplit(" pw=", 1)[0]
    # a probe's commands run as the login user (mpirun logs into the other nodes as that account)
    n_before = len(rec.read_text().splitlines())
    run = ssh.run_server_client(None, ("n", conn, "echo probe"), 10)
    assert run.client.stdout.strip() == "probe", run
    assert len(rec.read_text().splitlines()) == n_before
    with pytest.raises(ValueError):
        ssh.become_argv({"ansible_become": True, "ansible_become_method": "su"})


def test_testinfra_validators_check_host_keys(wrapper_on_path, tmp_path):
    """`pytest validators/` (pytest-testinfra, ssh backend) with an ssh config that turns checking off: the
    ssh command lines still have StrictHostKeyChecking yes effective, and the forged-key answer fails the
    tests."""
    log = wrapper_on_path
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n")
    repo = Path(__file__).resolve().parents[2]
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(repo / "validators" / "test_time.py"),
            "--hosts",
            "ssh://root@192.0.2.10",
            f"--ssh-config={cfg}",
            "--clustercert-profile",
            "lab",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert p.returncode != 0, p.stdout
    records = _effective(log)
    assert records
    for r in records:
        assert r.get("stricthostkeychecking") == "true", r["argv"]
