"""What a verb needs before it runs is the verb's own declaration (its module's NEEDS,
clustercert.commands.Needs), and clustercert.cli.prepare does what it says: the state directory, the open-file
check, the private umask, the flags argparse cannot require."""

from __future__ import annotations

import argparse
import os
import stat
from types import SimpleNamespace

import pytest

from clustercert import cli
from clustercert.commands import Needs
from clustercert.errors import InputError


def verbs() -> list[str]:
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(sub.choices)


@pytest.mark.parametrize("verb", verbs())
def test_every_verb_s_module_runs_it_and_declares_what_it_needs(verb):
    module = cli.command(verb.replace("-", "_"))
    assert callable(module.run)
    assert isinstance(getattr(module, "NEEDS", Needs()), Needs)


def test_the_verbs_that_run_on_nodes_keep_state_and_open_sessions_the_lab_keeps_the_callers_umask():
    needs = {v: getattr(cli.command(v.replace("-", "_")), "NEEDS", Needs()) for v in verbs()}
    assert {v for v, n in needs.items() if n.sessions} == {"validate", "probe", "certify", "drift"}
    assert {v for v, n in needs.items() if n.state} == {"bootstrap", "validate", "probe", "certify", "drift",
                                                         "report", "key"}
    assert {v for v, n in needs.items() if not n.private_umask} == {"lab"}
    assert [f for f, *_ in needs["certify"].required] == ["--out"]


def _main_with(monkeypatch, needs: Needs, argv: list[str]) -> dict:
    """cli.main(argv) with the verb's module replaced by one declaring ``needs``: what its run saw."""
    seen = {}

    def run(args):
        seen["umask"] = os.umask(0o022)
        os.umask(seen["umask"])
        return 0

    monkeypatch.setattr(cli, "command", lambda name: SimpleNamespace(run=run, NEEDS=needs))
    seen["rc"] = cli.main(argv)
    return seen


def test_prepare_makes_the_state_directory_only_for_a_verb_that_declares_it(monkeypatch, tmp_path):
    home = tmp_path / "home"
    monkeypatch.setenv("CLUSTERCERT_HOME", str(home))
    assert _main_with(monkeypatch, Needs(), ["version"])["rc"] == 0
    assert not home.exists()
    seen = _main_with(monkeypatch, Needs(state=True), ["version"])
    assert seen["rc"] == 0 and seen["umask"] == 0o077
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


def test_prepare_keeps_the_caller_s_umask_where_the_verb_asks(monkeypatch, tmp_path):
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path / "home"))
    old = os.umask(0o022)
    try:
        assert _main_with(monkeypatch, Needs(private_umask=False), ["version"])["umask"] == 0o022
        assert _main_with(monkeypatch, Needs(), ["version"])["umask"] == 0o077
    finally:
        os.umask(old)


def test_a_declared_required_flag_is_exit_2_naming_it_and_nothing_runs(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path / "home"))
    needs = Needs(state=True, required=(("--format", "nothing", "what this test asks for"),))
    seen = _main_with(monkeypatch, needs, ["version"])
    assert seen == {"rc": 2}
    assert "--format: required by `clustercert version`: what this test asks for" in capsys.readouterr().err
    assert not (tmp_path / "home").exists()
    with pytest.raises(InputError):
        cli.prepare(argparse.Namespace(verb="certify", out=None), cli.command("certify").NEEDS)
