"""Issue 34.3/34.4, 36.3, 35.5 (bootstrap): Ansible Vault in inventories, the ansible-playbook flags, --diff
as Ansible prints it, conflicting group profiles/overrides, and bootstrap's table beyond one screen."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from rich.console import Console

from clustercert.report.diffs import render_diff
from clustercert.report.progress import PlaybookProgress, render_playbook_table


def run_cli(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "clustercert", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


PLAIN = "s3cr3t-become-Pa55"


def _encrypt(text: str, password: str) -> str:
    from ansible.parsing.vault import VaultLib, VaultSecret

    return VaultLib([("default", VaultSecret(password.encode()))]).encrypt(text).decode()


def _inventory(tmp_path: Path, group_vars: str) -> Path:
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text("all:\n  hosts:\n    n1:\n      ansible_host: 127.0.0.1\n")
    (inv / "group_vars" / "all.yml").write_text(group_vars)
    return inv


def _inline(password: str) -> str:
    body = textwrap.indent(_encrypt(PLAIN, password), "  ")
    return f"clustercert_profile: lab\nansible_become_password: !vault |\n{body}\n"


def test_inline_vault_value_loads_with_the_password_file(tmp_path):
    inv = _inventory(tmp_path, _inline("pw1"))
    (tmp_path / "pw").write_text("pw1\n")
    r = run_cli(
        "inventory", "-i", str(inv), "--vault-password-file", str(tmp_path / "pw"), "--format", "json"
    )
    assert r.returncode == 0, r.stderr
    assert PLAIN not in r.stdout + r.stderr
    r = run_cli("inventory", "-i", str(inv), "--vault-id", f"default@{tmp_path / 'pw'}")
    assert r.returncode == 0, r.stderr


def test_vault_without_or_with_a_wrong_password_is_one_line_naming_file_and_key(tmp_path):
    inv = _inventory(tmp_path, _inline("pw1"))
    r = run_cli("inventory", "-i", str(inv))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "all.yml" in r.stderr and "ansible_become_password" in r.stderr and "no vault password" in r.stderr
    (tmp_path / "bad").write_text("nope\n")
    r = run_cli("inventory", "-i", str(inv), "--vault-password-file", str(tmp_path / "bad"))
    assert r.returncode == 2 and "does not decrypt" in r.stderr and "ansible_become_password" in r.stderr
    r = run_cli("inventory", "-i", str(inv), "--vault-password-file", str(tmp_path / "missing"))
    assert r.returncode == 2 and "missing" in r.stderr


def test_a_vaulted_group_vars_file_loads(tmp_path):
    inv = _inventory(tmp_path, _encrypt("clustercert_profile: lab\n", "pw2"))
    (tmp_path / "pw").write_text("pw2\n")
    r = run_cli(
        "inventory", "-i", str(inv), "--vault-password-file", str(tmp_path / "pw"), "--format", "json"
    )
    assert r.returncode == 0, r.stderr
    assert '"profile": "lab"' in r.stdout
    r = run_cli("inventory", "-i", str(inv))
    assert r.returncode == 2 and "the file is vaulted" in r.stderr


def test_vault_secret_and_plaintext_reach_no_file_of_a_playbook_run(tmp_path):
    """A real ansible-playbook run (syntax check: nothing reaches a host) with a vaulted become password:
    no file under the state directory holds the vault password or the plaintext."""
    inv = _inventory(tmp_path, _inline("vault-pw-Xy9"))
    (tmp_path / "pw").write_text("vault-pw-Xy9\n")
    home = tmp_path / "home"
    r = run_cli("bootstrap", "-i", str(inv), "--vault-password-file", str(tmp_path / "pw"), "--syntax-check",
                env={"CLUSTERCERT_HOME": str(home)}, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "playbook:" in r.stdout
    files = [p for p in home.rglob("*") if p.is_file()]
    assert any("vault-pass-" in p.name for p in files)  # the run passed the secret through its script
    for p in files:
        data = p.read_bytes()
        assert b"vault-pw-Xy9" not in data and PLAIN.encode() not in data, p


def test_ansible_short_flags_and_refusals(tmp_path):
    inv = _inventory(tmp_path, "clustercert_profile: lab\n")
    r = run_cli("bootstrap", "-i", str(inv), "-k")
    assert r.returncode == 2 and "-k/--ask-pass" in r.stderr and "--private-key" in r.stderr
    r = run_cli("bootstrap", "-i", str(inv), "-e", "@missing.yml")
    assert r.returncode == 2 and "missing.yml" in r.stderr and "not found" in r.stderr
    (tmp_path / "hosts.txt").write_text("# mine\nn1\n")
    r = run_cli("inventory", "-i", str(inv), "-l", f"@{tmp_path / 'hosts.txt'}", "--list-hosts")
    assert r.returncode == 0 and "n1" in r.stdout, r.stderr
    r = run_cli("inventory", "-i", str(inv), "-l", "@nowhere.txt")
    assert r.returncode == 2 and "nowhere.txt" in r.stderr
    from clustercert.cli import build_parser

    a = build_parser().parse_args(["bootstrap", "-i", "x", "-C", "-D", "-b", "-J", "--start-at-task", "t"])
    assert a.check and a.diff and a.become and a.ask_vault_pass and a.start_at_task == "t"


def test_list_tasks_prints_ansible_playbooks_answer(tmp_path):
    inv = _inventory(tmp_path, "clustercert_profile: lab\n")
    r = run_cli("bootstrap", "-i", str(inv), "--list-tasks", env={"CLUSTERCERT_HOME": str(tmp_path / "h")},
                timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tasks:" in r.stdout


def test_diff_renders_like_ansibles_default_callback():
    text = render_diff(
        {"before": "a\nb\n", "after": "a\nc\n", "before_header": "/etc/x", "after_header": "/etc/x"}
    )
    assert text.splitlines()[:2] == ["--- before: /etc/x", "+++ after: /etc/x"]
    assert "-b" in text.splitlines() and "+c" in text.splitlines()
    assert render_diff({"prepared": "pkg foo installed"}) == "pkg foo installed"


def test_conflicting_group_overrides_refused_and_profile_origin_shown(tmp_path):
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text("a:\n  hosts:\n    n1:\n      ansible_host: 127.0.0.1\n"
                                   "b:\n  hosts:\n    n1:\n    n2:\n      ansible_host: 127.0.0.2\n")
    (inv / "group_vars" / "all.yml").write_text("clustercert_profile: lab\n")
    (inv / "group_vars" / "b.yml").write_text("clustercert_profile: lab\n")
    r = run_cli("inventory", "-i", str(inv), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert '"profile_from": "group b"' in r.stdout
    (inv / "group_vars" / "a.yml").write_text("clustercert_profile_overrides: {thresholds: {}}\n")
    (inv / "group_vars" / "b.yml").write_text(
        "clustercert_profile: lab\nclustercert_profile_overrides: {x: 1}\n"
    )
    r = run_cli("inventory", "-i", str(inv))
    assert r.returncode == 2 and "host n1" in r.stderr and "threshold overrides" in r.stderr, r.stderr


def test_bootstrap_table_for_1000_hosts_fits_the_screen_and_counts():
    t = [0.0]
    con = Console(file=io.StringIO(), width=100, height=40)
    p = PlaybookProgress("bootstrap", enabled=False, console=con, total=1000, clock=lambda: t[0])
    p({"kind": "task", "task": "install driver"})
    for i in range(1000):
        p({"kind": "host", "status": "start", "host": f"node{i:04d}", "item": False})
    for i in range(1, 1000):
        t[0] += 0.01
        if i % 100 == 0:
            continue
        st = "failed" if i % 97 == 0 else "unreachable" if i % 331 == 0 else "changed" if i % 3 == 0 else "ok"
        p({"kind": "host", "status": st, "host": f"node{i:04d}", "item": False, "msg": ""})
    con.print(render_playbook_table(p, 40, 100))
    out = con.file.getvalue()
    assert len(out.splitlines()) <= 40
    assert "hosts 990/1000 done" in out and "10 failed" in out and "3 unreachable" in out
    assert "10 running" in out and "node0097" in out and "node0331" in out


def test_a_real_check_diff_run_gives_ansibles_diff_and_output(tmp_path):
    """ansible-playbook in check mode on localhost (a copy to a temp file): the runner events' diff renders as
    Ansible's, and the output callback gets Ansible's own text at -v."""
    from clustercert.collect import engine
    from clustercert.report.diffs import render_changes

    target = tmp_path / "motd"
    target.write_text("old line\n")
    play = tmp_path / "play.yml"
    play.write_text(textwrap.dedent(f"""\
        - hosts: all
          gather_facts: false
          tasks:
            - name: write the motd
              ansible.builtin.copy:
                dest: {target}
                content: "new line\\n"
        """))
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    lines: list[str] = []
    result = engine.run_playbook(play, inv, check=True, diff=True, verbosity=1, output=lines.append,
                                 state=tmp_path / "state", timeout=120)
    assert result.rc == 0, "\n".join(lines)
    text = render_changes(result.changes, True)
    assert f"--- before: {target}" in text and f"+++ after: {target}" in text
    assert "-old line" in text and "+new line" in text and "changed: [localhost]" in text
    assert any("TASK [write the motd]" in x for x in lines)
    assert target.read_text() == "old line\n"  # check mode changed nothing


def _recording_sudo(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in sudo on PATH: records its arguments and the line it read on stdin (-S), then runs the
    command."""
    bindir, rec = tmp_path / "bin", tmp_path / "sudo.log"
    bindir.mkdir()
    (bindir / "sudo").write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import os, sys
        args = sys.argv[1:]
        pw = b""
        if "-S" in args:
            while (c := os.read(0, 1)) not in (b"", b"\\n"):
                pw += c
        with open({str(rec)!r}, "a") as f:
            f.write(repr(args) + " pw=" + pw.decode() + "\\n")
        rest = args[args.index("--") + 1:]
        os.execvp(rest[0], rest)
        """))
    (bindir / "sudo").chmod(0o755)
    return bindir, rec


def test_a_vaulted_inventory_become_password_reaches_the_collectors_sudo_and_is_never_shown(
    tmp_path, monkeypatch
):
    """Issue 34.3: the inventory's ansible_become_password (inline !vault) is what the collector's `sudo -S`
    reads (validate, probe and certify collect through it), before -K's ANSIBLE_BECOME_PASS as Ansible's
    variables come before its flags; no repr, str or JSON of the host's view shows it."""
    import json

    import pytest

    from clustercert.collect import ssh
    from clustercert.model import vault
    from clustercert.model.inventory import load_inventory

    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text(
        "all:\n  hosts:\n    n1:\n      ansible_connection: local\n      ansible_become: true\n"
        f"      ansible_python_interpreter: {sys.executable}\n")
    (inv / "group_vars" / "all.yml").write_text(_inline("pw-34"))
    (tmp_path / "pw").write_text("pw-34\n")
    bindir, rec = _recording_sudo(tmp_path)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ANSIBLE_BECOME_PASS", "the-K-answer")
    vault.load_secrets(password_files=[str(tmp_path / "pw")])
    try:
        host = load_inventory(str(inv)).hosts["n1"]
    finally:
        vault.reset()
    for shown in (repr(host), str(host.connection), json.dumps(host.connection, default=str)):
        assert PLAIN not in shown
    with pytest.raises(TypeError):
        json.dumps(host.connection)
    ev = ssh.collect_node("n1", host.connection, {"hello": ("echo hi", 5)})
    assert ev.reachable and ev.results["hello"].stdout == "hi\n", ev
    line = rec.read_text().splitlines()[-1]
    assert line.startswith("['-S', '-p', '', '-u', 'root', '--'") and line.endswith(f" pw={PLAIN}")
    assert PLAIN not in line.rsplit(" pw=", 1)[0] and PLAIN not in repr(ev)

    # ansible_become_pass (Ansible's other name), not vaulted, the same way; without either, -K's answer
    (inv / "group_vars" / "all.yml").write_text(
        "clustercert_profile: lab\nansible_become_pass: plain-pw-34\n"
    )
    host = load_inventory(str(inv)).hosts["n1"]
    assert ssh.become_argv(host.connection)[1] == b"plain-pw-34\n" and "plain-pw-34" not in repr(host)
    (inv / "group_vars" / "all.yml").write_text("clustercert_profile: lab\n")
    host = load_inventory(str(inv)).hosts["n1"]
    assert ssh.become_argv(host.connection)[1] == b"the-K-answer\n"
