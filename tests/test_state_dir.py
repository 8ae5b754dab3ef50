"""The state directory and signing-key rules (issue 19.4), run as a user would from two directories."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from types import SimpleNamespace


def run_cli(*args, env=None, cwd=None, timeout=120):
    # not `from conftest import run_cli`: that resolves to whichever conftest pytest imported first
    return subprocess.run([sys.executable, "-m", "clustercert", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd, timeout=timeout)


def _walk_modes(root):
    for dirpath, _dirnames, filenames in os.walk(root):
        yield dirpath, stat.S_IMODE(os.stat(dirpath).st_mode), True
        for f in filenames:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p):
                yield p, stat.S_IMODE(os.lstat(p).st_mode), False


def test_same_store_and_key_from_two_directories_and_tight_modes(tmp_path):
    home = tmp_path / "state"
    env = {"CLUSTERCERT_HOME": str(home)}
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    v = run_cli("version", env=env, cwd=a)
    assert v.returncode == 0 and f"state directory {home}" in v.stdout
    init = run_cli("key", "init", env=env, cwd=a)
    assert init.returncode == 0, init.stderr
    fp = [ln for ln in init.stdout.splitlines() if ln.startswith("fingerprint")][0]
    show = run_cli("key", "show", env=env, cwd=b)
    assert show.returncode == 0 and fp in show.stdout and str(home / "keys" / "signing.key") in show.stdout
    again = run_cli("key", "init", env=env, cwd=b)
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "--force" in again.stderr
    assert not (a / ".clustercert").exists() and not (b / ".clustercert").exists()
    modes = list(_walk_modes(home))
    assert modes and all(m == (0o700 if is_dir else 0o600) for _p, m, is_dir in modes), modes


def test_default_without_clustercert_home_is_not_the_working_directory(tmp_path):
    env = dict(os.environ)
    env.pop("CLUSTERCERT_HOME", None)
    env["XDG_STATE_HOME"] = str(tmp_path / "xdg")
    code = "from clustercert import paths; print(paths.state_dir())"
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd,
                           check=True).stdout.strip() for cwd in (tmp_path, "/")}
    want = "/var/lib/clustercert" if os.geteuid() == 0 else str(tmp_path / "xdg" / "clustercert")
    assert outs == {want}


def test_group_writable_state_dir_is_refused(tmp_path):
    home = tmp_path / "state"
    home.mkdir()
    home.chmod(0o777)
    r = run_cli("key", "init", env={"CLUSTERCERT_HOME": str(home)})
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "chmod 700" in r.stderr
    assert not (home / "keys").exists()


def _tiny_inventory(tmp_path):
    inv = tmp_path / "hosts.yml"
    # TEST-NET
    inv.write_text(
        "all:\n  vars:\n    clustercert_profile: h100-sxm-8x-ndr\n  hosts:\n    node01:\n"
        "      ansible_host: 192.0.2.1\n"
    )
    return inv


def test_certify_without_a_key_is_refused_before_anything_runs(tmp_path):
    home = tmp_path / "state"
    env = {"CLUSTERCERT_HOME": str(home)}
    r = run_cli(
        "certify", "-i", str(_tiny_inventory(tmp_path)), "--out", str(tmp_path / "out"), env=env, timeout=60
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "clustercert key init" in r.stderr and "Traceback" not in r.stderr
    assert not (home / "store.sqlite").exists() and not (tmp_path / "out").exists()
    assert not (home / "keys" / "signing.key").exists()


def test_out_that_is_a_file_or_unwritable_is_refused_before_anything_runs(tmp_path):
    home = tmp_path / "state"
    env = {"CLUSTERCERT_HOME": str(home)}
    afile = tmp_path / "afile"
    afile.write_text("x")
    inv = str(_tiny_inventory(tmp_path))
    for verb, out, reason in (("certify", afile, "exists and is not a directory"),
                              ("validate", afile, "exists and is not a directory"),
                              ("certify", "/proc/1/out", "is not writable"),
                              ("certify", afile / "sub", "is not a directory")):
        r = run_cli(verb, "-i", inv, "--out", str(out), env=env, timeout=60)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, (verb, out, r.stderr)
        assert "--out" in r.stderr and reason in r.stderr, r.stderr
    assert not (home / "store.sqlite").exists() and afile.read_text() == "x"


def test_ask_become_pass_prompts_once_and_sets_only_the_environment(tmp_path):
    from clustercert import cli

    seen = {}

    def fake_handler(args):
        seen["pass"] = os.environ.get("ANSIBLE_BECOME_PASS")
        return 0

    import getpass

    prompts = []
    orig_getpass, orig_command = getpass.getpass, cli.command
    getpass.getpass = lambda prompt="": prompts.append(prompt) or "s3cret"
    cli.command = lambda name: SimpleNamespace(run=fake_handler)
    try:
        os.environ.pop("ANSIBLE_BECOME_PASS", None)
        assert cli.main(["validate", "-i", "x", "-K"]) == 0
    finally:
        getpass.getpass, cli.command = orig_getpass, orig_command
        os.environ.pop("ANSIBLE_BECOME_PASS", None)
    assert seen["pass"] == "s3cret" and len(prompts) == 1
    for verb in ("bootstrap", "probe", "certify", "drift"):
        assert "--ask-become-pass" in run_cli(verb, "--help").stdout


def _binds(directory) -> bool:
    """Whether ssh could make its master's socket there: it binds <dir>/<%C: 40 hex>.<16 random
    characters>."""
    import socket

    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(os.path.join(str(directory), "c" * 40 + "." + "r" * 16))
        return True
    except OSError:
        return False
    finally:
        s.close()


def test_control_sockets_go_where_a_unix_socket_fits(tmp_path, monkeypatch):
    """ssh's control sockets: in the state directory where the path fits a Unix socket; for a deep state
    directory (which made every connection fail with "too long for Unix domain socket") a private directory
    of this user's named after it, the same one every run."""
    import shutil
    import tempfile
    from pathlib import Path

    from clustercert import paths

    short = Path(tempfile.mkdtemp(prefix="cc-", dir="/tmp"))
    try:
        monkeypatch.setenv("CLUSTERCERT_HOME", str(short))
        assert paths.control_dir() == short / "cp"
    finally:
        shutil.rmtree(short)
    # (pytest's tmp_path alone is already too deep for ssh's sockets)
    deep = tmp_path / ("deep-" * 16) / "state"
    monkeypatch.setenv("CLUSTERCERT_HOME", str(deep))
    (deep / "cp").mkdir(parents=True)
    assert not _binds(deep / "cp")  # the socket ssh would make there cannot be made
    run = Path(tempfile.mkdtemp(prefix="run-", dir="/tmp"))  # as /run/user/UID
    try:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
        cp = paths.control_dir()
        assert cp.parent == run and cp.name.startswith(f"clustercert-cp-{os.geteuid()}-")
        assert stat.S_IMODE(cp.stat().st_mode) == 0o700 and _binds(cp)
        assert paths.control_dir() == cp  # the same for every run of this state directory
        monkeypatch.setenv("CLUSTERCERT_HOME", str(deep) + "2")
        assert paths.control_dir() != cp  # another state directory, other sockets
    finally:
        shutil.rmtree(run)


def test_a_control_directory_others_could_write_is_refused(tmp_path, monkeypatch):
    """The short directory must be this user's own, 0700 (someone else's could hold a socket that answers for
    a node): otherwise exit 2 and one line naming it, before anything runs. One a run made and left empty (no
    master connection persists in it) is gone after the run."""
    import shutil
    import tempfile

    from clustercert import paths

    run = tempfile.mkdtemp(prefix="run-", dir="/tmp")
    env = {"CLUSTERCERT_HOME": str(tmp_path / ("deep-" * 16) / "state"), "XDG_RUNTIME_DIR": run}
    try:
        inv = tmp_path / "hosts.yml"
        inv.write_text(
            "all:\n  hosts:\n    node01: {ansible_host: 192.0.2.1}\n  vars: {clustercert_profile: lab}\n"
        )
        first = run_cli(
            "validate", "-i", str(inv), "--checks", "time", "--format", "json", env=env, timeout=60
        )
        assert first.returncode == 1, first.stderr  # node01 does not answer
        assert os.listdir(run) == []  # the directory it made for its sockets, empty, is gone with it
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        made = paths.control_dir()  # as a run makes it; then opened to others
        os.chmod(made, 0o777)
        p = run_cli("validate", "-i", str(inv), "--checks", "time", env=env, timeout=60)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert str(made) in p.stderr and "0700 directory of this user's" in p.stderr
    finally:
        shutil.rmtree(run)
