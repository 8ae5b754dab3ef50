"""`clustercert bootstrap` end to end on the controller (no lab): inventory validation, the engine run,
the per-host summary and the JSON document, exit codes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from clustercert import paths
from clustercert.cli import build_parser
from clustercert.collect import engine
from clustercert.commands import bootstrap as bs
from clustercert.errors import InputError
from clustercert.report.documents import bootstrap_summary


def bootstrap(inv: Path, *flags: str) -> int:
    """`clustercert bootstrap -i INV FLAGS` as its command runs it (bad input raises, as main sees it)."""
    args = build_parser().parse_args(["bootstrap", "-i", str(inv), *flags])
    args.verbose = 0
    return bs.run(args)


def _inventory(tmp: Path, hosts: list[str]) -> Path:
    inv = tmp / "hosts.yml"
    body = "".join(
        f"        {h}: {{ansible_connection: local, ansible_python_interpreter: {sys.executable}}}\n"
        for h in hosts
    )
    inv.write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n" + body + "  vars:\n    clustercert_profile: lab\n"
    )
    return inv


def _fake_playbook(tmp: Path) -> Path:
    pb = tmp / "bootstrap.yml"
    pb.write_text(f"""\
- name: fake bootstrap
  hosts: all
  gather_facts: false
  tasks:
    - name: Write the marker
      ansible.builtin.copy:
        content: "{{{{ inventory_hostname }}}}\\n"
        dest: "{tmp}/{{{{ inventory_hostname }}}}.marker"
        mode: "0644"
    - name: Fail on beta
      ansible.builtin.fail:
        msg: broken on purpose
      when: inventory_hostname == 'beta'
    - name: Skipped everywhere
      ansible.builtin.debug:
        msg: never
      when: false
""")
    return pb


@pytest.fixture
def fake_playbooks(tmp_path, monkeypatch):
    pdir = tmp_path / "playbooks"
    pdir.mkdir()
    _fake_playbook(tmp_path).rename(pdir / "bootstrap.yml")
    monkeypatch.setattr(paths, "playbooks_dir", lambda: pdir)
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path / "state"))
    return tmp_path


def test_json_summary_and_exit_code(fake_playbooks, capsys):
    inv = _inventory(fake_playbooks, ["alpha", "beta"])
    rc = bootstrap(inv, "--format", "json", "--diff")
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert doc["hosts"] == {
        "alpha": {"ok": 1, "changed": 1, "failed": 0, "unreachable": 0, "skipped": 2},
        "beta": {"ok": 1, "changed": 1, "failed": 1, "unreachable": 0, "skipped": 0},
    }
    assert sorted((c["host"], c["task"]) for c in doc["changes"]) == [
        ("alpha", "Write the marker"),
        ("beta", "Write the marker"),
    ]
    diff = next(c["diff"] for c in doc["changes"] if c["host"] == "alpha")
    assert diff[0]["after"] == "alpha\n"


def test_second_run_changes_nothing_and_check_mode_reports_would_be_changes(fake_playbooks, capsys):
    inv = _inventory(fake_playbooks, ["alpha"])
    assert bootstrap(inv, "--format", "json") == 0
    first = json.loads(capsys.readouterr().out)
    assert first["hosts"]["alpha"]["changed"] == 1
    assert bootstrap(inv, "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)["hosts"]["alpha"]["changed"] == 0
    (fake_playbooks / "alpha.marker").write_text("tampered\n")
    assert bootstrap(inv, "--format", "json", "--check", "--diff") == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(c["host"], c["task"]) for c in doc["changes"]] == [("alpha", "Write the marker")]
    assert doc["changes"][0]["diff"][0]["before"] == "tampered\n"
    assert (fake_playbooks / "alpha.marker").read_text() == "tampered\n"  # check mode changed nothing


def test_table_output(fake_playbooks, capsys):
    inv = _inventory(fake_playbooks, ["alpha", "beta"])
    assert bootstrap(inv) == 1
    out = capsys.readouterr().out
    rows = {
        ln.split()[1]: ln.split()[2:]
        for ln in out.splitlines()
        if ln.startswith("│") and ("alpha" in ln or "beta" in ln)
    }
    assert [c for c in rows["alpha"] if c != "│"] == ["1", "1", "0", "0", "2", "ok"]
    assert [c for c in rows["beta"] if c != "│"] == ["1", "1", "1", "0", "0", "FAILED"]
    assert "failed: beta: Fail on beta: broken on purpose" in out


def test_bad_inventory_fails_before_running(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        "all:\n  hosts:\n    a: {clustercert_profile: lab, clustercert_max_parallel_reboots: many}\n"
    )
    with pytest.raises(InputError, match="clustercert_max_parallel_reboots"):
        bootstrap(inv)


def test_summary_shape():
    result = engine.RunResult("r", Path("/tmp"), 0, "successful",
                              {"n1": engine.HostStats(ok=5, changed=2, skipped=1)},
                              [{"host": "n1", "task": "t", "role": "tuning", "diff": None}])
    assert bootstrap_summary(result) == {
        "hosts": {"n1": {"ok": 5, "changed": 2, "failed": 0, "unreachable": 0, "skipped": 1}},
        "changes": [{"host": "n1", "task": "t", "role": "tuning", "diff": None}],
    }


def test_strategy_env_falls_back_without_mitogen(monkeypatch):
    monkeypatch.setenv("CLUSTERCERT_STRATEGY", "linear")
    assert engine.strategy_env() == {"ANSIBLE_STRATEGY": "linear"}
    monkeypatch.setenv("CLUSTERCERT_STRATEGY", "auto")
    monkeypatch.setitem(sys.modules, "ansible_mitogen", None)  # import fails
    assert engine.strategy_env() == {}
