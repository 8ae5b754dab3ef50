"""Run artifacts hold no secrets (issue 19.4): a real ansible-runner run (local connection) with
ANSIBLE_BECOME_PASS and a token in the environment, and a task that prints the password."""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap

from clustercert.collect import engine

PASSWORD = "hunter2-Zq8!r$sudo"  # a value that occurs nowhere else
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def test_become_password_reaches_ansible_but_no_artifact(tmp_path, monkeypatch):
    monkeypatch.setenv("ANSIBLE_BECOME_PASS", PASSWORD)
    monkeypatch.setenv("SOME_HARMLESS_NAME", TOKEN)  # a secret by its value, not its name
    # a user's setting: host keys stay checked anyway
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")
    inv = tmp_path / "inv.ini"
    inv.write_text(f"node ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    seen = tmp_path / "seen.json"
    pb = tmp_path / "pb.yml"
    pb.write_text(textwrap.dedent(f"""\
        - hosts: all
          gather_facts: false
          tasks:
            - name: what ansible-playbook got, hashed
              ansible.builtin.copy:
                dest: {seen}
                mode: "0600"
                content: >-
                  {{{{ {{'pass': lookup('env', 'ANSIBLE_BECOME_PASS') | hash('sha256'),
                       'token': lookup('env', 'SOME_HARMLESS_NAME') | hash('sha256'),
                       'hkc': lookup('env', 'ANSIBLE_HOST_KEY_CHECKING')}} | to_json }}}}
            - name: a task that prints the password (it lands in stdout and job_events unless scrubbed)
              ansible.builtin.debug:
                msg: "the password is {{{{ lookup('env', 'ANSIBLE_BECOME_PASS') }}}}"
        """))
    result = engine.run_playbook(
        pb, inv, state=tmp_path / "state", envvars={"ANSIBLE_HOST_KEY_CHECKING": "False"}
    )
    assert result.ok, result.to_json()

    got = json.loads(seen.read_text())
    assert got["pass"] == hashlib.sha256(PASSWORD.encode()).hexdigest()  # the become plugin can read it
    assert got["token"] == hashlib.sha256(TOKEN.encode()).hexdigest()
    assert got["hkc"] == "True"

    files = [p for p in result.run_dir.rglob("*") if p.is_file()]
    command = next(p for p in files if p.name == "command")
    env = json.loads(command.read_text())["env"]
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    assert "ANSIBLE_BECOME_PASS" not in env and "SOME_HARMLESS_NAME" not in env
    assert "ANSIBLE_CONFIG" in env  # the dump is still there, only without the secrets
    assert any("job_events" in p.parts for p in files)
    printed = [p for p in files if engine.REDACTED.encode() in p.read_bytes()]
    assert printed, "the debug task's output should have been redacted somewhere (stdout, job_events)"
    for p in files:
        data = p.read_bytes()
        assert PASSWORD.encode() not in data, p
        assert TOKEN.encode() not in data, p
        assert json.dumps(PASSWORD)[1:-1].encode() not in data, p
    assert not (result.run_dir / ".secrets").exists()


def test_secret_env_by_name_and_value():
    env = {
        "ANSIBLE_BECOME_PASS": "x",
        "ANSIBLE_BECOME_PASSWORD": "x",
        "MY_API_TOKEN": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "VAULT_KEY": "x",
        "DB_CREDENTIALS": "x",
        "HTTP_AUTH": "x",
        "PROXY": "http://u:pw@proxy:3128",
        "K": "-----BEGIN OPENSSH PRIVATE KEY-----\nabc",
        "AWSID": "AKIAABCDEFGHIJKLMNOP",
        # not secrets: where a key is, the agent socket, host-key checking, the shell's directories
        "ANSIBLE_PRIVATE_KEY_FILE": "/root/.ssh/id",
        "SSH_AUTH_SOCK": "/tmp/agent",
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "PWD": "/root",
        "OLDPWD": "/",
        "PATH": "/usr/bin",
        "HOME": "/root",
        "KEYBOARD": "us",
        "MONKEY": "x",
        "HTTP_PROXY": "http://proxy:3128",
    }
    assert sorted(engine.secret_env(env)) == sorted(
        [
            "ANSIBLE_BECOME_PASS",
            "ANSIBLE_BECOME_PASSWORD",
            "MY_API_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "VAULT_KEY",
            "DB_CREDENTIALS",
            "HTTP_AUTH",
            "PROXY",
            "K",
            "AWSID",
        ]
    )
