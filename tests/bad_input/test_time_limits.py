"""Issue 36.2 (time): a parse or a load that runs too long is refused, naming the file (exit 2), and a tool
output whose parse runs too long during a run is an `error` finding naming the tool, not a hung run.

The budgets are wall-clock, checked inside the loaders' and parsers' loops (clustercert.parsers.base
time_budget/check_time: a context variable, so it holds in whichever thread parses). The tests make
the budget small (CLUSTERCERT_PARSE_TIME_LIMIT_S, CLUSTERCERT_INPUT_TIME_LIMIT_S) against inputs that are
within every size limit and take longer than that to read.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

from clustercert.cli import main

FIX = Path(__file__).resolve().parents[1] / "fixtures"
BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "inventory.py"


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path / "home"))

    def run(*argv: str) -> tuple[int, str, str, float]:
        t0 = time.monotonic()
        rc = main(list(argv))
        out, err = capsys.readouterr()
        return rc, out, err, time.monotonic() - t0

    return run


def _big_lspci(tmp_path: Path) -> Path:
    """Real lspci output repeated to 2.3 MB: within the 64 MiB output limit, a fraction of a second to
    parse."""
    p = tmp_path / "lspci-big.txt"
    p.write_text((FIX / "lspci" / "lspci-gb200-cx7-bridges.txt").read_text() * 300)
    return p


def test_parse_that_outruns_its_budget_is_refused_naming_the_file(tmp_path, monkeypatch, cli):
    big = _big_lspci(tmp_path)
    monkeypatch.setenv("CLUSTERCERT_PARSE_TIME_LIMIT_S", "0.01")
    rc, out, err, took = cli("parse", "lspci", str(big))
    assert rc == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert str(big) in line and "lspci" in line and "did not finish within 0.01 s" in line, line
    assert "Traceback" not in err and took < 5
    small = tmp_path / "lspci-small.txt"
    small.write_text((FIX / "lspci" / "lspci-gb200-cx7-bridges.txt").read_text())
    rc, out, err, _ = cli("parse", "lspci", str(small), "--json")
    assert rc == 0 and '"bus_id"' in out, err  # output that parses within the budget: parsed


def test_inventory_that_outruns_its_budget_is_refused_naming_it(tmp_path, monkeypatch, cli):
    spec = importlib.util.spec_from_file_location("bench_inventory", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    inv = bench.write_inventory(tmp_path, 10000)
    monkeypatch.setenv("CLUSTERCERT_INPUT_TIME_LIMIT_S", "0.3")
    rc, out, err, took = cli("inventory", "-i", str(inv), "--format", "json")
    assert rc == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert str(inv) in line and "took longer than 0.3 s" in line, line
    assert took < 10, took  # refused at the budget, not after the whole load
    monkeypatch.setenv("CLUSTERCERT_INPUT_TIME_LIMIT_S", "nonsense")
    rc, _out, err, _ = cli("inventory", "-i", str(inv))
    assert rc == 2 and "CLUSTERCERT_INPUT_TIME_LIMIT_S" in err and "positive number of seconds" in err


def test_yaml_file_budget_names_the_file_being_read(tmp_path, monkeypatch, cli):
    """A profile (any strict-YAML file) read under the budget: refused naming that file."""
    prof = tmp_path / "site.yml"
    text = (
        Path(__file__).resolve().parents[2] / "clustercert-lab/src/clustercert_lab/profiles/lab.yml"
    ).read_text()
    prof.write_text(text + "".join(f"# padding {i}\n" for i in range(1)) + "x_filler:\n" +
                    "".join(f"  k{i}: [{', '.join(str(j) for j in range(20))}]\n" for i in range(20000)))
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text("all:\n  hosts:\n    n1: {ansible_host: 192.0.2.1}\n")
    (inv / "group_vars" / "all.yml").write_text(f"clustercert_profile: {prof}\n")
    monkeypatch.setenv("CLUSTERCERT_INPUT_TIME_LIMIT_S", "0.05")
    rc, _out, err, _ = cli("inventory", "-i", str(inv))
    assert rc == 2, err
    (line,) = err.strip().splitlines()
    assert "took longer than 0.05 s" in line and (str(prof) in line or str(inv) in line), line


def test_a_runaway_parse_during_a_run_is_an_error_naming_the_tool(tmp_path, monkeypatch):
    """validate's run goes on: the node whose output outruns the parse budget gets an error finding that names
    the parser kind; the other node's same check is judged normally."""
    from clustercert.checks import run as check_run
    from clustercert.collect import ssh
    from clustercert.collect.ssh import NodeEvidence
    from clustercert.model.evidence import CommandResult
    from clustercert.model.inventory import HostView, Inventory, InventoryVars
    from clustercert.model.profile import load_profile

    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path))
    prof = load_profile("lab")
    inv = Inventory(
        Path("/nonexistent"),
        {
            n: HostView(
                n, ["lab"], InventoryVars(clustercert_profile="lab"), prof, {"ansible_host": f"192.0.2.{i}"}
            )
            for i, n in enumerate(["n1", "n2"], 1)
        },
        [],
    )
    lacp = (
        FIX / "bonding" / "proc-net-bonding-802.3ad-slave-in-other-aggregator-systemd-11635-excerpt.txt"
    ).read_text()
    one = f"==> /proc/net/bonding/bond0 <==\n{lacp}"
    # n1's output: 20,000 bonds' files (about 16 MB), far more than the budget lets it parse
    runaway = "\n".join(one.replace("bond0", f"bond{i}") for i in range(20000))

    def fake_many(nodes, commands_for, **kw):
        out = {}
        for n in nodes:
            text = runaway if n == "n1" else one
            out[n] = NodeEvidence(
                n,
                True,
                "",
                {
                    k: CommandResult(0, text if k == "bonding_proc" else "", "", False, 0.1, k)
                    for k in commands_for[n]
                },
            )
        return out

    monkeypatch.setattr(ssh, "collect_many", fake_many)
    monkeypatch.setenv("CLUSTERCERT_PARSE_TIME_LIMIT_S", "0.2")
    t0 = time.monotonic()
    results = check_run.validate_nodes(inv, ["bond"], selected={"net.bond_lacp"}, io=ssh.SshBackend())
    assert time.monotonic() - t0 < 30
    (f1,) = [f for f in results["n1"].findings if f.check == "net.bond_lacp"]
    assert (
        f1.status == "error"
        and "bonding-files" in f1.observed
        and "did not finish within 0.2 s" in f1.observed
    )
    (f2,) = [f for f in results["n2"].findings if f.check == "net.bond_lacp"]
    assert f2.status == "fail" and "enp7s0 in aggregator 1" in f2.observed
