"""Issue 36 (b): a 10,000-host inventory loads in seconds, and the fast variable merge is Ansible's.

The timing test guards against quadratic behaviour only (a ratio against 1,000 hosts, not an absolute
time); the figure itself comes from benchmarks/inventory.py (docs/benchmarks.md).
"""

from __future__ import annotations

import importlib.util
import json
import textwrap
import time
from pathlib import Path

from clustercert.cli import main
from clustercert.model import inventory as inventory_mod

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "inventory.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_inventory", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cpu_load(inv: Path, runs: int = 1):
    best = float("inf")
    for _ in range(runs):
        t0 = time.process_time()
        loaded = inventory_mod.load_inventory(str(inv))
        best = min(best, time.process_time() - t0)
    return best, loaded


def test_10000_hosts_load_linearly(tmp_path):
    bench = _bench()
    small = bench.write_inventory(tmp_path, 1000)
    large = bench.write_inventory(tmp_path, 10000)
    inventory_mod.load_inventory(str(small))  # Ansible's imports and plugin scans, once
    t_small, inv_small = _cpu_load(small, runs=3)
    t_large, inv_large = _cpu_load(large)
    assert len(inv_small.hosts) == 1000 and len(inv_large.hosts) == 10000
    h = inv_large.hosts["gpu09999"]
    assert h.connection["ansible_host"] == "10.0.39.15" and h.vars.clustercert_rack == "rack0312"
    assert inv_large.hosts["gpu00100"].vars.clustercert_command_timeout_s == 60  # host_vars/ read
    assert inv_large.hosts["gpu00101"].vars.clustercert_command_timeout_s == 30
    # linear is 10x the hosts for about 10x the time; quadratic would be 100x
    assert t_large / t_small < 25, (t_small, t_large)


def test_10000_host_ini_inventory_through_the_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path / "home"))
    inv = _bench().write_inventory(tmp_path, 10000, "ini")
    assert main(["inventory", "-i", str(inv), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["hosts"]) == 10000
    assert out["hosts"]["gpu04242"]["groups"] == ["gpu_nodes", "rack0132"]


def _ansible(inv: Path):
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    im = InventoryManager(loader=loader, sources=[str(inv)])
    return im, loader, VariableManager(loader=loader, inventory=im)


def test_fast_variable_merge_is_ansibles(tmp_path):
    """_host_variables merges as VariableManager.get_vars does: group depth, ansible_group_priority, names,
    group_vars/ and host_vars/ files, inline host and group variables."""
    d = tmp_path / "inv"
    files = {
        "hosts.yml": """\
            all:
              vars: {clustercert_command_timeout_s: 11, ansible_user: fromall}
              children:
                gpu:
                  vars: {clustercert_command_timeout_s: 22}
                  children:
                    rack_a:
                      hosts:
                        n1: {ansible_host: 192.0.2.1}
                        n2: {ansible_host: 192.0.2.2, clustercert_command_timeout_s: 99}
                    rack_b:
                      vars: {ansible_group_priority: 5, ansible_user: rackb}
                      hosts:
                        n3: {ansible_host: 192.0.2.3}
                        n1: {}
                storage:
                  hosts:
                    n4: {ansible_host: 192.0.2.4}
            """,
        "group_vars/all.yml": "clustercert_profile: lab\nclustercert_rack: r0\n",
        "group_vars/rack_a.yml": "clustercert_rack: ra\nansible_user: racka\n",
        "group_vars/storage/main.yml": "clustercert_rack: st\n",
        "host_vars/n3.yml": "clustercert_rack: own\nansible_port: 2222\n",
    }
    for rel, text in files.items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    im, loader, vm = _ansible(d)
    fast = {h.name: {k: v for k, v in hv.items() if inventory_mod._wanted(k)}
            for h, hv in inventory_mod._host_variables(im, loader, vm)}
    slow = {
        h.name: {
            k: v for k, v in vm.get_vars(host=h, include_hostvars=False).items() if inventory_mod._wanted(k)
        }
        for h in im.get_hosts(pattern="all")
    }
    assert fast == slow
    # group_vars/ files outrank inline group vars and fast["n2"]["clustercert_command_timeout_s"] == 99
    assert fast["n1"]["ansible_user"] == "racka"
    assert fast["n3"]["clustercert_rack"] == "own" and fast["n4"]["clustercert_rack"] == "st"
