"""Issue 23.2: Ansible's habits on the command line. -v/-vv/-vvv anywhere, --skip-tags, --list-hosts,
-u/--user, --private-key, -K, --version, -e @file / JSON / key=value; one-line errors without a doubled
prefix; a help line on every option of every verb; an example in every verb's help; shared options
defined once (clustercert.cmdoptions)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from clustercert import cli, cmdoptions
from clustercert.cli import build_parser, main
from clustercert.collect import engine
from clustercert.errors import InputError
from clustercert_lab import cli as lab_cli

REPO = Path(__file__).resolve().parent.parent


def _leaf_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(path, parser) for the top parser, every verb and every lab command (the `lab` verb's words are the
    lab's own program's to parse: its parser stands for the verb's)."""
    if getattr(parser, "passthrough", False):
        parser = lab_cli.build_parser()
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _leaf_parsers(sub, (*path, name))


ALL_PARSERS = list(_leaf_parsers(build_parser()))


def parse_as_typed(argv: list[str]) -> argparse.Namespace:
    """``clustercert ARGV`` parsed as the program that runs it parses it: `lab ...` by the lab's."""
    if argv[:1] == ["lab"]:
        return lab_cli.build_parser().parse_args(argv[1:])
    return build_parser().parse_args(argv)


def test_every_option_of_every_verb_has_help():
    missing = []
    for path, parser in ALL_PARSERS:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:  # the verb list's own lines
                    if not (choice.help or "").strip():
                        missing.append((path, choice.dest))
                continue
            if action.help is argparse.SUPPRESS or not (action.help or "").strip():
                missing.append((path, action.option_strings or action.dest))
    assert not missing, missing


@pytest.mark.parametrize("path", [p for p, _ in ALL_PARSERS if p], ids=lambda p: " ".join(p))
def test_every_verb_and_lab_command_help_has_a_real_example(path, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_as_typed([*path, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    example = out.split("example:\n", 1)[1].split("\n\n", 1)[0]
    lines = [x.strip() for x in example.splitlines() if x.strip()]
    assert lines, out
    # each example is a command line of this verb (the lab inventory's example uses ansible)
    assert any(x.startswith(f"clustercert {' '.join(path)}") for x in lines) or path == (
        "lab",
        "inventory",
    ), lines
    # and every example parses (flags, choices, required options): it would run as written
    for line in lines:
        if line.startswith("clustercert "):
            argv = shlex.split(line.split(" > ")[0])[1:]
            parse_as_typed(argv)


def test_shared_options_are_defined_once():
    """-i, -l, --list-hosts, -u, --private-key, -K and -f read the same on every verb that takes them."""
    helps: dict[str, set[str]] = {}
    for _path, parser in ALL_PARSERS:
        for action in parser._actions:
            for flag in action.option_strings:
                if flag in (
                    "-i",
                    "-l",
                    "--list-hosts",
                    "-u",
                    "--private-key",
                    "-K",
                    "-f",
                    "-e",
                    "--skip-tags",
                    "--prom",
                ):
                    helps.setdefault(flag, set()).add(action.help)
    assert set(helps) >= {
        "-i",
        "-l",
        "--list-hosts",
        "-u",
        "--private-key",
        "-K",
        "-f",
        "-e",
        "--skip-tags",
        "--prom",
    }
    assert all(len(h) == 1 for h in helps.values()), {k: v for k, v in helps.items() if len(v) > 1}
    for verb in ("bootstrap", "validate", "probe", "certify", "drift"):
        flags = {s for a in dict(ALL_PARSERS)[(verb,)]._actions for s in a.option_strings}
        assert {"-i", "-l", "--list-hosts", "-u", "--user", "--private-key", "-K", "-f", "-v"} <= flags, verb
    assert {"--check", "--diff", "-e", "-t", "--skip-tags"} <= {
        s for a in dict(ALL_PARSERS)[("bootstrap",)]._actions for s in a.option_strings}
    assert cmdoptions.CONNECTION[0] is cmdoptions.INVENTORY


# ---- -v anywhere ----------------------------------------------------------------------------------

@pytest.fixture
def seen(monkeypatch):
    """Replace every verb's handler with one that records its args (nothing runs)."""
    got: dict = {}

    def fake(args):
        got["args"] = args
        got["env"] = {k: os.environ.get(k) for k in ("ANSIBLE_REMOTE_USER", "ANSIBLE_PRIVATE_KEY_FILE")}
        return 0

    monkeypatch.setattr(cli, "command", lambda name: SimpleNamespace(run=fake))
    return got


@pytest.mark.parametrize("argv, level", [
    (["-v", "validate", "-i", "x"], 1),
    (["validate", "-i", "x", "-vv"], 2),
    (["validate", "-vvv", "-i", "x"], 3),
    (["-v", "validate", "-i", "x", "-vv"], 3),
    (["--verbose", "bootstrap", "-i", "x", "-v", "--check"], 2),
    (["certify", "-i", "x", "--out", "o", "-vvvv"], 4),
])
def test_verbose_counts_anywhere_on_the_line(argv, level, seen, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0
    assert seen["args"].verbose == level


def test_verbose_counts_anywhere_on_a_lab_line(monkeypatch):
    """A -v before `lab` is passed on to the lab's program, which counts the rest of the line's."""
    ran = []
    monkeypatch.setattr(subprocess, "call", lambda argv, **kw: ran.append(argv) or 0)
    assert main(["-v", "lab", "-v", "status", "-v"]) == 0
    assert ran == [[sys.executable, "-m", "clustercert_lab", "-v", "-v", "status", "-v"]]
    assert cli.parse(lab_cli.build_parser(), ran[0][3:]).verbose == 3


def test_verbose_reaches_ansible_playbook(monkeypatch, tmp_path):
    got = {}
    import clustercert.collect.engine

    def fake_run_playbook(playbook, inventory, **kw):
        got.update(kw)
        return clustercert.collect.engine.RunResult(
            "r1", tmp_path, 0, "successful", {"gpu01": clustercert.collect.engine.HostStats(ok=1)}
        )

    monkeypatch.setattr(clustercert.collect.engine, "run_playbook", fake_run_playbook)
    vars_file = tmp_path / "site.yml"
    vars_file.write_text("site_var: 42\nshared: from-file\n")
    json_file = tmp_path / "more.json"
    json_file.write_text('{"from_json": [1, 2]}')
    rc = main(
        [
            "-v",
            "bootstrap",
            "-i",
            "sample:h100",
            "-l",
            "gpu01",
            "--check",
            "--diff",
            "-t",
            "nccl,tuning",
            "--skip-tags",
            "container_toolkit",
            "-f",
            "7",
            "-vv",
            "-e",
            f"@{vars_file}",
            "-e",
            f"@{json_file}",
            "-e",
            '{"shared": "from-json", "n": 3}',
            "-e",
            "k1=v1 msg='two words'",
            "--format",
            "json",
        ]
    )
    assert rc == 0
    assert got["verbosity"] == 3 and got["check"] and got["diff"] and got["forks"] == 7
    assert (
        got["tags"] == "nccl,tuning" and got["skip_tags"] == "container_toolkit" and got["limit"] == "gpu01"
    )
    assert got["extra_vars"] == {
        "site_var": 42,
        "shared": "from-json",
        "from_json": [1, 2],
        "n": 3,
        "k1": "v1",
        "msg": "two words",
    }


# ---- -e ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("item, fragment", [
    ("foo", "foo: expected key=value"),
    ("=x", "expected key=value"),
    ("a='unterminated", "-e/--extra-vars"),
    ("[1, 2]", "expected a mapping"),
    ("@", "@ names no file"),
    ("   ", "empty"),
])
def test_bad_extra_vars_are_one_line_naming_the_flag(item, fragment, capsys):
    rc = main(["bootstrap", "-i", "sample:h100", "-e", item])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith("clustercert: error: ") and fragment in err, err


def test_extra_vars_file_errors_name_the_file(tmp_path, capsys):
    missing = tmp_path / "nope.yml"
    assert main(["bootstrap", "-i", "sample:h100", "-e", f"@{missing}"]) == 2
    assert f"{missing}: file not found" in capsys.readouterr().err
    listy = tmp_path / "list.yml"
    listy.write_text("- a\n- b\n")
    assert main(["bootstrap", "-i", "sample:h100", "-e", f"@{listy}"]) == 2
    assert f"{listy}: extra-vars file must be a mapping" in capsys.readouterr().err


def test_extra_vars_forms_later_wins():
    assert engine.parse_extra_vars(["a=1 b=2", '{"b": 3}', "b=4 c='x y'"]) == {"a": "1", "b": "4", "c": "x y"}
    assert engine.parse_extra_vars(["{a: [1, 2], b: {c: d}}"]) == {"a": [1, 2], "b": {"c": "d"}}
    with pytest.raises(InputError):
        engine.parse_extra_vars(["a=1 stray"])


# ---- errors: one line, no doubled prefix ----------------------------------------------------------

@pytest.mark.parametrize("argv, names", [
    (["validate", "-i", "x", "--bogus"], "--bogus"),
    (["--bogus", "version"], "--bogus"),
    (["frob"], "frob"),
    (["validate"], "-i/--inventory"),
    (["validate", "-i", "x", "--format", "xml"], "--format"),
    (["validate", "-i", "x", "-f", "0"], "-f/--forks"),
    (["lab", "nope"], "nope"),
    (["bootstrap", "-i", "x", "--skip-tags"], "--skip-tags"),
    (["validate", "-i", "x", "-u"], "-u/--user"),
    (["report", "everything"], "what"),
])
def test_usage_errors_are_one_line_naming_the_flag(argv, names, capfd):
    rc = main(argv)
    err = capfd.readouterr().err  # fd 2: `lab` runs the lab's program in a child
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith("clustercert: error: ") and "clustercert: error: clustercert" not in err, err
    assert "usage:" not in err and "Traceback" not in err
    assert names in err, err


def test_unknown_argument_after_the_verb_in_a_real_process(cli):
    r = cli("validate", "-i", "sample:h100", "-vv", "--bogus-flag")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith(
        "clustercert: error: --bogus-flag: unrecognized argument for `clustercert validate`"
    )


def test_version_flag_prints_what_the_version_verb_prints(cli):
    a, b = cli("--version"), cli("version")
    assert a.returncode == b.returncode == 0
    assert a.stdout == b.stdout and a.stdout.startswith("clustercert 0.1.0\n")


# ---- --list-hosts -----------------------------------------------------------------------------

@pytest.mark.parametrize("verb", ["bootstrap", "validate", "probe", "certify", "drift", "inventory"])
def test_list_hosts_prints_the_selected_hosts_and_runs_nothing(verb, capsys, monkeypatch):
    def nothing(*a, **k):
        raise AssertionError("something ran")

    import clustercert.collect.engine
    import clustercert.collect.ssh

    monkeypatch.setattr(clustercert.collect.ssh, "collect_node", nothing)
    monkeypatch.setattr(clustercert.collect.engine, "run_playbook", nothing)
    rc = main([verb, "-i", "sample:h100", "-l", "gpu01:gpu03", "--list-hosts"])
    out = capsys.readouterr().out
    assert rc == 0
    assert out == "  hosts (2):\n    gpu01\n    gpu03\n"
    assert not (Path(os.environ["CLUSTERCERT_HOME"]) / "store.sqlite").exists()


def test_list_hosts_checks_the_inventory_and_the_limit(capsys):
    assert main(["validate", "-i", "sample:h100", "-l", "nosuch", "--list-hosts"]) == 2
    assert "--limit" in capsys.readouterr().err


# ---- -u/--user and --private-key -----------------------------------------------------------------

def test_user_and_private_key_set_the_ansible_environment_for_the_run_only(seen, tmp_path, monkeypatch):
    key = tmp_path / "id_ed25519"
    key.write_text("not really a key\n")
    monkeypatch.delenv("ANSIBLE_REMOTE_USER", raising=False)
    monkeypatch.delenv("ANSIBLE_PRIVATE_KEY_FILE", raising=False)
    assert main(["validate", "-i", "x", "-u", "ops", "--private-key", str(key)]) == 0
    assert seen["env"] == {"ANSIBLE_REMOTE_USER": "ops", "ANSIBLE_PRIVATE_KEY_FILE": str(key)}
    assert "ANSIBLE_REMOTE_USER" not in os.environ and "ANSIBLE_PRIVATE_KEY_FILE" not in os.environ
    assert main(["bootstrap", "-i", "x", "--user", "ops", "--key-file", str(key)]) == 0
    assert seen["env"]["ANSIBLE_REMOTE_USER"] == "ops"


@pytest.mark.parametrize("argv, fragment", [
    (["-u", "bad user"], "-u/--user: bad user:"),
    (["-u", "-rf"], "-u/--user"),
    (["--private-key", "/nonexistent/key"], "--private-key: /nonexistent/key: no such file"),
    (["--private-key", "/"], "--private-key: /: not a file"),
])
def test_bad_user_or_key_is_exit_2_before_anything(argv, fragment, capsys, seen):
    rc = main(["validate", "-i", "x", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and fragment in err, err
    assert "args" not in seen


def test_user_and_key_are_defaults_the_inventory_overrides(tmp_path, monkeypatch):
    from clustercert.model.inventory import load_inventory

    inv = tmp_path / "hosts.yml"
    inv.write_text(textwrap.dedent("""\
        all:
          vars: {clustercert_profile: lab}
          hosts:
            plain: {ansible_host: 192.0.2.1}
            own: {ansible_host: 192.0.2.2, ansible_user: admin, ansible_ssh_private_key_file: /keys/own}
            here: {ansible_connection: local}
        """))
    monkeypatch.setenv("ANSIBLE_REMOTE_USER", "ops")
    monkeypatch.setenv("ANSIBLE_PRIVATE_KEY_FILE", "/keys/cluster")
    hosts = load_inventory(str(inv)).hosts
    assert hosts["plain"].connection["ansible_user"] == "ops"
    assert hosts["plain"].connection["ansible_ssh_private_key_file"] == "/keys/cluster"
    assert hosts["own"].connection["ansible_user"] == "admin"
    assert hosts["own"].connection["ansible_ssh_private_key_file"] == "/keys/own"
    assert "ansible_user" not in hosts["here"].connection
    from clustercert.collect.ssh import ssh_argv

    argv = ssh_argv(hosts["plain"].connection, "192.0.2.1")
    assert argv[argv.index("-l") + 1] == "ops" and argv[argv.index("-i") + 1] == "/keys/cluster"
    monkeypatch.setenv("ANSIBLE_REMOTE_USER", "bad user")
    with pytest.raises(InputError) as exc:
        load_inventory(str(inv))
    assert exc.value.source == "ANSIBLE_REMOTE_USER"


def test_flags_reach_ansible_playbook_in_a_real_run(tmp_path, cli):
    """bootstrap against a host that refuses the connection (127.0.0.1 port 1): the command line and the
    environment ansible-runner recorded hold -vv, --check, --skip-tags, ANSIBLE_REMOTE_USER and the key."""
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        "all:\n  vars: {clustercert_profile: lab}\n  hosts:\n"
        "    gone: {ansible_host: 127.0.0.1, ansible_port: 1}\n"
    )
    key = tmp_path / "key"
    key.write_text("x\n")
    home = tmp_path / "state"
    r = cli(
        "bootstrap",
        "-i",
        str(inv),
        "--check",
        "--skip-tags",
        "nccl",
        "-u",
        "ops",
        "--private-key",
        str(key),
        "-e",
        "site_var=1",
        "--format",
        "json",
        "-vv",
        env={"CLUSTERCERT_HOME": str(home)},
        timeout=300,
    )
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["hosts"]["gone"]["unreachable"] == 1 and doc["ok"] is False
    (command,) = home.glob("runs/*/artifacts/*/command")
    recorded = json.loads(command.read_text())
    argv = recorded["command"]
    assert argv[argv.index("--skip-tags") + 1] == "nccl" and "--check" in argv and "-vv" in argv
    assert recorded["env"]["ANSIBLE_REMOTE_USER"] == "ops"
    assert recorded["env"]["ANSIBLE_PRIVATE_KEY_FILE"] == str(key)
    from jsonschema import validate

    from clustercert.report.documents import schema_for

    validate(doc, schema_for("bootstrap"))


# ---- -i sample:NAME ------------------------------------------------------------------------------

def test_sample_inventory_is_found_from_any_directory(cli, tmp_path):
    r = cli("inventory", "-i", "sample:h100", "--format", "json", cwd=tmp_path,
            env={"PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert sorted(doc["hosts"]) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    r = cli("inventory", "-i", "sample:nope", cwd=tmp_path)
    assert r.returncode == 2 and "sample:nope: no such sample inventory (samples: sample:h100" in r.stderr


def test_no_verb_prints_help_and_exit_2(cli):
    r = cli()
    assert r.returncode == 2 and "first steps:" in r.stdout and "clustercert init" in r.stdout


def test_module_runs_without_the_lab_package(tmp_path):
    """The product's CLI, catalogue, `lab` verb and `-i lab` never import clustercert_lab (the lab is a
    product beside it, with its own program)."""
    code = ("import sys; from clustercert import cli; from clustercert.report import catalogue; from "
            "clustercert.commands import common, lab; catalogue.document(); args = "
            "cli.parse(cli.build_parser(), ['lab', 'up', '--nodes', '3']); lab.command_line(args); "
            "print(common.inventory_path('lab')); print([m for m in sys.modules if "
            "m.startswith('clustercert_lab')])")
    (tmp_path / "inventory").mkdir()
    (tmp_path / "inventory" / "hosts.yml").write_text("all: {}\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "CLUSTERCERT_LAB_DIR": str(tmp_path)}).stdout
    assert out.splitlines() == [str(tmp_path / "inventory" / "hosts.yml"), "[]"]


def test_certify_needs_out_before_any_prompt(capsys, monkeypatch):
    import getpass

    monkeypatch.setattr(
        getpass, "getpass", lambda prompt="": pytest.fail("prompted before the flags were checked")
    )
    assert main(["certify", "-i", "sample:h100", "-K"]) == 2
    assert "--out: required by `clustercert certify`" in capsys.readouterr().err


def test_errors_that_name_a_command_are_not_prefixed_twice(capfd):
    assert main(["lab", "fault", "node01", "gpu_missing", "gpu"]) == 2  # the lab's program, in a child
    assert capfd.readouterr().err == "clustercert: error: lab fault: gpu: parameters are KEY=VALUE\n"
    assert main(["parse", "nope", "x"]) == 2
    assert capfd.readouterr().err.startswith("clustercert: error: parse: KIND: unknown kind 'nope'")
