"""The node runner (clustercert.remote.runner), as code: run here as the node runs it (``python3 -c <text>``,
the request on stdin) and as imported functions; and what collect_node sends to run it."""

from __future__ import annotations

import glob
import io
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time

import pytest
from test_remote_tether import alive

from clustercert import remote
from clustercert.collect import ssh
from clustercert.remote import runner


def oldest_python() -> str | None:
    """A Python 3.6 that runs here (on PATH, or pyenv's), the oldest a node may have; None where there is
    none."""
    for cand in [
        shutil.which("python3.6"),
        *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.6*/bin/python3.6"))),
    ]:
        try:
            if (
                cand
                and subprocess.run(
                    [cand, "-c", "import sys; print(sys.version_info[:2])"],
                    capture_output=True,
                    text=True,
                    timeout=20,
                ).stdout
                == "(3, 6)\n"
            ):
                return cand
        except (OSError, subprocess.TimeoutExpired):
            pass
    return None


PYTHON36 = oldest_python()
# the interpreters a node program is run with here: this one, and 3.6 where it is installed
NODE_PYTHONS = [
    pytest.param(sys.executable, id="python"),
    pytest.param(
        PYTHON36, id="python3.6", marks=pytest.mark.skipif(PYTHON36 is None, reason="no Python 3.6 here")
    ),
]


@pytest.fixture(params=NODE_PYTHONS)
def python(request) -> str:
    return request.param


def run_source(
    request: dict | str, python: str = sys.executable, timeout: float = 30
) -> subprocess.CompletedProcess:
    """The runner's text run by ``python``, as collect_node runs it for ansible_connection=local."""
    data = request if isinstance(request, str) else json.dumps(request)
    return subprocess.run([python, "-c", remote.source("runner")], input=data, capture_output=True,
                          text=True, timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_source_run_as_on_the_node_prints_one_document(python):
    p = run_source({"commands": {"ok": ["echo out; echo err >&2", 10], "fails": ["exit 3", 10],
                                 "slow": ["sleep 30", 0.5], "missing": ["no-such-command-here", 10]}}, python)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["hostname"] == os.uname()[1]
    res = doc["results"]
    assert set(res) == {"ok", "fails", "slow", "missing"}
    assert res["ok"] == {
        "rc": 0,
        "stdout": "out\n",
        "stderr": "err\n",
        "timed_out": False,
        "seconds": res["ok"]["seconds"],
    }
    assert (res["fails"]["rc"], res["fails"]["timed_out"]) == (3, False)
    assert (res["slow"]["rc"], res["slow"]["timed_out"]) == (None, True) and res["slow"]["seconds"] < 10
    assert res["missing"]["rc"] == 127 and "not found" in res["missing"]["stderr"]


def test_the_commands_environment(python):
    p = run_source({"commands": {"env": ['echo "$LC_ALL $LANG $PATH $CLUSTERCERT_PYTHON"', 10]}}, python)
    (line,) = json.loads(p.stdout)["results"]["env"]["stdout"].splitlines()
    assert line == f"C C {runner.PATH} {python}"


def test_what_stands_before_the_request_mark_is_dropped(python):
    """A become password that sudo -S did not read, before REQUEST_MARK: the request follows the mark."""
    req = json.dumps({"commands": {"a": ["echo a", 10]}})
    p = run_source("not-a-json password\n" + ssh.REQUEST_MARK + req, python)
    assert json.loads(p.stdout)["results"]["a"]["stdout"] == "a\n"
    assert (
        runner.read_request("pw" + runner.REQUEST_MARK + req) == json.loads(req) == runner.read_request(req)
    )


def test_marks_are_written_as_each_command_ends_before_the_document(python):
    p = run_source({"commands": {"fast": ["true", 10], "slow": ["sleep 0.5", 10]}, "marks": True}, python)
    lines = p.stdout.splitlines()
    assert lines[:2] == [f"{ssh.DONE_MARK}fast", f"{ssh.DONE_MARK}slow"]
    assert set(json.loads("\n".join(lines[2:]))["results"]) == {"fast", "slow"}
    # without marks: the document alone
    p = run_source({"commands": {"fast": ["true", 10]}}, python)
    assert not p.stdout.startswith(ssh.DONE_MARK) and json.loads(p.stdout)


def test_stages_run_one_after_another_and_parallel_bounds_the_rest(python, tmp_path):
    f = tmp_path / "first"
    p = run_source({"commands": {"first": [f"sleep 0.3; touch {f}", 10], "second": [f"test -e {f}", 10]},
                    "stages": [["first"], ["second"]]}, python)
    assert json.loads(p.stdout)["results"]["second"]["rc"] == 0
    t0 = time.monotonic()
    p = run_source({"commands": {n: ["sleep 0.4", 10] for n in "abc"}, "parallel": 1}, python)
    assert time.monotonic() - t0 >= 1.2 and len(json.loads(p.stdout)["results"]) == 3


def test_a_commands_leftovers_in_its_group_are_killed_when_it_ends(python):
    p = run_source({"commands": {"bg": ["sleep 300 >/dev/null 2>&1 & echo $!", 10]}}, python)
    pid = int(json.loads(p.stdout)["results"]["bg"]["stdout"])
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)


SERVER = """
import socket, sys, time
time.sleep(0.3)  # the client must wait for this
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
print(c.recv(10).decode(), flush=True)
time.sleep(30)  # a server that does not end by itself
"""
CLIENT = """
import socket, sys
socket.create_connection(("127.0.0.1", int(sys.argv[1]))).sendall(b"hello")
"""


def test_a_client_starts_once_its_server_listens_and_the_server_is_ended(python, tmp_path):
    port = free_port()
    (tmp_path / "server.py").write_text(SERVER)
    (tmp_path / "client.py").write_text(CLIENT)
    server = f'"$CLUSTERCERT_PYTHON" {tmp_path}/server.py {port}'
    client = f'"$CLUSTERCERT_PYTHON" {tmp_path}/client.py {port}'
    p = run_source({"commands": {"pair": [client, 10, {"cmd": server, "port": port, "timeout": 20}]}}, python)
    res = json.loads(p.stdout)["results"]["pair"]
    assert res["rc"] == 0, res
    assert res["server"]["stdout"].split() == ["listening", "hello"]
    assert res["server"]["rc"] == -9  # killed: its traffic ended with its client's
    assert res["seconds"] < 5


def test_run_request_and_main_as_functions():
    out = io.StringIO()
    doc = runner.run_request({"commands": {"a": ["echo a", 10], "b": ["exit 1", 10]}, "marks": True}, out)
    assert {n: r["rc"] for n, r in doc["results"].items()} == {"a": 0, "b": 1}
    assert sorted(out.getvalue().splitlines()) == [f"{runner.DONE_MARK}a", f"{runner.DONE_MARK}b"]
    stdin, stdout = io.StringIO(json.dumps({"commands": {"a": ["echo a", 10]}})), io.StringIO()
    assert runner.main(stdin, stdout) == 0
    assert json.loads(stdout.getvalue())["results"]["a"]["stdout"] == "a\n"


def test_run_command_reports_a_timeout():
    res = runner.run_command(["echo partial; sleep 30", 0.3], runner.command_env())
    assert (res["rc"], res["timed_out"], res["stdout"]) == (None, True, "partial\n")


def test_the_marks_collect_uses_are_the_runners():
    assert (ssh.DONE_MARK, ssh.REQUEST_MARK) == (runner.DONE_MARK, runner.REQUEST_MARK)


@pytest.mark.parametrize("become", [False, True])
def test_collect_node_sends_the_runner_text_in_one_python3_c(monkeypatch, become):
    """Over SSH: one remote command line, [sudo -n -u root --] python3 -c <the runner's text>; the request on
    stdin. Nothing else is needed on the node."""
    seen = {}

    def fake_run(argv, input, **kw):
        seen["argv"], seen["input"] = argv, input
        return subprocess.CompletedProcess(argv, 0, json.dumps({"results": {}, "hostname": "n1"}), "")

    monkeypatch.setattr(ssh.subprocess, "run", fake_run)
    conn = {"ansible_host": "10.0.0.1", "ansible_become": become}
    ev = ssh.collect_node("n1", conn, {"a": ("true", 5)})
    assert ev.reachable, ev.error
    assert seen["argv"][0] == "ssh" and seen["argv"][-2] == "10.0.0.1"
    words = shlex.split(seen["argv"][-1])
    assert words == (["sudo", "-n", "-u", "root", "--"] if become else []) + [
        "python3",
        "-c",
        remote.source("runner"),
    ]
    assert json.loads(seen["input"])["commands"] == {"a": ["true", 5]}


def test_collect_node_runs_it_locally_with_this_interpreter(monkeypatch):
    seen = {}
    real = subprocess.run

    def spy(argv, **kw):
        seen["argv"] = argv
        return real(argv, **kw)

    monkeypatch.setattr(ssh.subprocess, "run", spy)
    ev = ssh.collect_node("local", {"ansible_connection": "local"}, {"a": ("echo a", 5)})
    assert seen["argv"] == [sys.executable, "-c", remote.source("runner")]
    assert ev.reachable and ev.results["a"].stdout == "a\n" and ev.results["a"].command == "echo a"


@pytest.mark.skipif(PYTHON36 is None, reason="no Python 3.6 here")
def test_collect_node_with_a_node_whose_python_is_3_6():
    """ansible_python_interpreter: python3.6 runs the runner, and the commands' CLUSTERCERT_PYTHON is it."""
    done = []
    ev = ssh.collect_node(
        "local",
        {"ansible_connection": "local", "ansible_python_interpreter": PYTHON36},
        {"v": ('"$CLUSTERCERT_PYTHON" -c "import sys; print(sys.version_info[:2])"', 10)},
        on_done=done.append,
    )
    assert ev.reachable, ev.error
    assert ev.results["v"].stdout == "(3, 6)\n" and done == ["v"]
