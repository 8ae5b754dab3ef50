"""Issue 19.2a and 19.6: bad input is refused at load, before anything runs.

Each case runs a real verb in-process (`validate`, which would connect to the hosts, or `inventory`) against
a small tmp inventory whose addresses are unreachable (TEST-NET-1): the verb must exit 2 with ONE line
naming the file or flag, the key and the reason, no traceback, no process started, no store written.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import textwrap
from pathlib import Path

import pytest

from clustercert.cli import main
from clustercert.model import names

HOSTS = """\
all:
  children:
    gpu:
      hosts:
        n1: {ansible_host: 192.0.2.1}
        n2: {ansible_host: 192.0.2.2}
"""
GV = "clustercert_profile: lab\n"


def inventory(tmp: Path, hosts: str = HOSTS, group_vars: str = GV, extra: dict | None = None) -> Path:
    d = tmp / "inv"
    (d / "group_vars").mkdir(parents=True)
    (d / "hosts.yml").write_text(textwrap.dedent(hosts))
    (d / "group_vars" / "all.yml").write_text(textwrap.dedent(group_vars))
    for rel, text in (extra or {}).items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return d


@pytest.fixture
def refused(tmp_path, monkeypatch, capsys):
    """run(argv) -> the one error line; asserts exit 2, one line, no traceback, no connection attempted, no
    store."""
    state = tmp_path / "state"
    monkeypatch.setenv("CLUSTERCERT_HOME", str(state))

    def no_process(*a, **k):
        raise AssertionError(f"a connection was attempted: {a[:1]}")

    import clustercert.collect.srun
    import clustercert.collect.ssh

    # every connection goes through ssh_argv / collect_node (collect_many and collect_in_turn use them), or
    # --backend slurm's agent on its launch node
    for mod, name in ((clustercert.collect.ssh, "ssh_argv"), (clustercert.collect.ssh, "collect_node"),
                      (clustercert.collect.ssh, "collect_many"), (clustercert.collect.ssh, "collect_in_turn"),
                      (clustercert.collect.srun, "Agent")):
        monkeypatch.setattr(mod, name, no_process)

    def run(*argv: str, store_expected: bool = False) -> str:
        rc = main(list(argv))
        out, err = capsys.readouterr()
        assert rc == 2, (rc, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert "Traceback" not in err and "internal error" not in err, err
        if not store_expected:
            assert not (state / "store.sqlite").exists()
        return lines[0]

    return run


def _expect(line: str, *fragments: str) -> None:
    for f in fragments:
        assert f in line, line


# ---------------------------------------------------------------- 19.2a: hostile values, each kind ----

HOSTILE = [
    "x;touch PWNED",
    "$(touch PWNED)",
    "`touch PWNED`",
    "ib 0",
    "-oProxyCommand=x",
    "ib0\ntouch PWNED",
    "",
]
KINDS = ["ifname", "hca", "sysctl_key", "sysctl_value", "host", "inventory_host", "slurm_node", "user",
         "remote_path", "interpreter", "kernel_arg", "version"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "value",
    HOSTILE,
    ids=["semicolon", "dollar-paren", "backticks", "space", "leading-dash", "newline", "empty"],
)
def test_hostile_value_is_refused_by_every_pattern(kind, value):
    if kind == "sysctl_value" and value == "ib 0":
        pytest.skip("a sysctl value may hold single spaces (4096 87380 16777216)")
    reason = names.CHECKS[kind](value)
    assert reason, (kind, value)
    with pytest.raises(ValueError):
        names.validate(kind, value)


@pytest.mark.parametrize(
    "kind, value",
    [
        ("ifname", "ib0"),
        ("ifname", "bond0.100"),
        ("ifname", "enp65s0f0np0"),
        ("hca", "mlx5_0"),
        ("hca", "irdma0"),
        ("sysctl_key", "net.ipv4.conf.all.rp_filter"),
        ("sysctl_key", "net/ipv4/ip_forward"),
        ("sysctl_value", "4096 87380 16777216"),
        ("sysctl_value", 1),
        ("host", "10.0.0.1"),
        ("host", "fe80::1%ib0"),
        ("host", "gpu01.example.com"),
        ("host", "2001:db8::5"),
        ("slurm_node", "gn01"),
        ("user", "svc-cert"),
        ("port", 22),
        ("port", "2222"),
        ("remote_path", "/usr/bin/python3"),
        ("interpreter", "python3"),
        ("interpreter", "auto_silent"),
        ("kernel_arg", "isolcpus=1-3,5"),
        ("version", "2.10.0"),
    ],
)
def test_good_values_pass(kind, value):
    assert names.CHECKS[kind](value) is None


@pytest.mark.parametrize("value", [0, 65536, -22, True, "ssh", 22.5, "22;id"])
def test_port_pattern(value):
    assert names.check_port(value)


def test_ifname_length_and_dots():
    assert names.check_ifname("a" * 16) and names.check_ifname("..") and not names.check_ifname("a" * 15)


def test_host_rules():
    assert names.check_host("10.1.2")  # all-numeric but not an address: a typo, not a name
    assert names.check_host("a_b.example")  # RFC 1123: no underscore
    assert names.check_host("fe80::1%x;id")


OV = "clustercert_profile_overrides:\n"
INJECT = [
    (
        "bond-name",
        GV + OV + "  ib: {bond: {name: 'x; touch PWNED; #'}}\n",
        None,
        "all.yml",
        "clustercert_profile_overrides.ib.bond.name",
        "not an interface name",
    ),
    (
        "bond-slave",
        GV + OV + "  ib: {bond: {slaves: [ib0, 'ib1$(touch PWNED)'], primary: ib0}}\n",
        None,
        "all.yml",
        "clustercert_profile_overrides.ib.bond.slaves",
        "not an interface name",
    ),
    (
        "netdev-leading-dash",
        GV + OV + "  ib: {bond: null, hcas: [{name: mlx5_0, netdev: '-ib0', fabric: 0, "
        "rate_gbit_per_s: 400, role: compute}]}\n",
        None,
        "all.yml",
        "hcas.0.netdev",
        "starts with '-'",
    ),
    (
        "hca-backticks",
        GV + OV + "  ib: {bond: null, hcas: [{name: 'mlx5_`id`', netdev: ib0, fabric: 0, "
        "rate_gbit_per_s: 400, role: compute}]}\n",
        None,
        "all.yml",
        "hcas.0.name",
        "not an HCA name",
    ),
    (
        "sysctl-key",
        GV + OV + "  tuning: {sysctl: {'net.ipv4.x;touch PWNED': '1'}}\n",
        None,
        "all.yml",
        "clustercert_profile_overrides.tuning.sysctl",
        "not a sysctl key",
    ),
    (
        "sysctl-value",
        GV + OV + "  tuning: {sysctl: {net.ipv4.ip_forward: '1; touch PWNED'}}\n",
        None,
        "all.yml",
        "clustercert_profile_overrides.tuning.sysctl",
        "not a sysctl value",
    ),
    (
        "kernel-cmdline",
        GV + OV + "  tuning: {kernel_cmdline: ['iommu=pt$(touch PWNED)']}\n",
        None,
        "all.yml",
        "tuning.kernel_cmdline.0",
        "not a kernel command-line parameter",
    ),
    (
        "ansible-host-semicolon",
        GV,
        {"host_vars/n1.yml": "ansible_host: '192.0.2.1;touch PWNED'\n"},
        "n1.yml",
        "ansible_host",
        "not a host name",
    ),
    (
        "ansible-host-option",
        GV,
        {"host_vars/n1.yml": "ansible_host: '-oProxyCommand=touch PWNED'\n"},
        "n1.yml",
        "ansible_host",
        "starts with '-'",
    ),
    (
        "ansible-host-space",
        GV,
        {"host_vars/n2.yml": "ansible_host: 'gpu 02'\n"},
        "n2.yml",
        "ansible_host",
        "not a host name",
    ),
    (
        "ansible-user",
        GV + "ansible_user: 'root$(touch PWNED)'\n",
        None,
        "all.yml",
        "ansible_user",
        "not a user name",
    ),
    (
        "ansible-key-newline",
        GV + 'ansible_ssh_private_key_file: "/k\\n-oProxyCommand=x"\n',
        None,
        "all.yml",
        "ansible_ssh_private_key_file",
        "control character",
    ),
    (
        "interpreter",
        GV + "ansible_python_interpreter: '/usr/bin/python3; touch PWNED'\n",
        None,
        "all.yml",
        "ansible_python_interpreter",
        "not an absolute path",
    ),
    (
        "slurm-node-name",
        GV,
        {"host_vars/n1.yml": "clustercert_slurm_node_name: 'gn01`touch PWNED`'\n"},
        "n1.yml",
        "clustercert_slurm_node_name",
        "not a Slurm node name",
    ),
    (
        "fabric-netdev-key",
        GV,
        {"host_vars/n1.yml": "clustercert_fabric_addresses: {'ib0;id': 10.1.0.5/24}\n"},
        "n1.yml",
        "clustercert_fabric_addresses",
        "not an interface name",
    ),
    (
        "ntp-server",
        GV + "clustercert_ntp_servers: ['$(touch PWNED)']\n",
        None,
        "all.yml",
        "clustercert_ntp_servers",
        "not a host name",
    ),
    # point 6: ansible_port that is not a port
    ("port-text", GV + "ansible_port: ssh\n", None, "all.yml", "ansible_port", "expected a port 1..65535"),
    ("port-zero", GV, {"host_vars/n1.yml": "ansible_port: 0\n"}, "n1.yml", "ansible_port", "got 0"),
    (
        "port-too-big",
        GV,
        {"host_vars/n1.yml": "ansible_port: 70000\n"},
        "n1.yml",
        "ansible_port",
        "got 70000",
    ),
    ("port-bool", GV + "ansible_port: true\n", None, "all.yml", "ansible_port", "boolean"),
]


@pytest.mark.parametrize("case", INJECT, ids=[c[0] for c in INJECT])
def test_hostile_inventory_value_refused_before_any_connection(case, tmp_path, refused):
    _id, gv, extra, fname, key, reason = case
    inv = inventory(tmp_path, group_vars=gv, extra=extra)
    line = refused("validate", "-i", str(inv))
    _expect(line, fname, key, reason)
    assert not list(tmp_path.rglob("PWNED"))


def test_hostile_inventory_host_name(tmp_path, refused):
    inv = inventory(tmp_path, hosts="all:\n  hosts:\n    'n1;touch PWNED': {}\n")
    _expect(refused("validate", "-i", str(inv)), "host 'n1;touch PWNED'", "not a host name")


# ---------------------------------------------------------------- 19.6: thresholds, units, gpu count ----

def _th(body: str) -> str:
    return GV + OV + f"  thresholds: {{{body}}}\n"


PROFILE_CASES = [
    (
        "threshold-negative",
        _th("iperf3_ipoib: {min: -5, unit: gbit_per_s, source: site baseline}"),
        "thresholds.iperf3_ipoib.min",
        "greater than or equal to 0",
    ),
    (
        "threshold-nan",
        _th("ib_write_lat_p99: {max: .nan, unit: usec, source: site baseline}"),
        "thresholds.ib_write_lat_p99.max",
        "finite number",
    ),
    (
        "threshold-inf",
        _th("nvbandwidth_h2d: {min: .inf, unit: gbyte_per_s, source: site baseline}"),
        "thresholds.nvbandwidth_h2d.min",
        "finite number",
    ),
    (
        "threshold-bool",
        _th("retired_pages: {max: true, unit: count, source: site baseline}"),
        "thresholds.retired_pages.max",
        "boolean",
    ),
    (
        "threshold-min-above-max",
        _th("gpu_util_under_load: {min: 90, max: 50, unit: percent, source: site baseline}"),
        "thresholds.gpu_util_under_load",
        "above the ceiling",
    ),
    (
        "threshold-ratio-nan",
        _th("ib_write_bw_pair: {rated: 400, ratio: .nan, unit: gbit_per_s, source: site baseline}"),
        "thresholds.ib_write_bw_pair.ratio",
        "finite number",
    ),
    (
        "unknown-unit",
        _th("ib_write_bw_pair: {rated: 400, ratio: 0.8, unit: mbit_per_s, source: site baseline}"),
        "thresholds.ib_write_bw_pair.unit",
        "unknown unit 'mbit_per_s'",
    ),
    (
        "wrong-magnitude-high",
        _th("ib_write_bw_loopback: {min: 400000, unit: gbit_per_s, source: site baseline}"),
        "thresholds.ib_write_bw_loopback.min",
        "outside the sane range",
    ),
    (
        "wrong-magnitude-low",
        _th("ib_write_bw_loopback: {min: 0.0004, unit: gbit_per_s, source: site baseline}"),
        "thresholds.ib_write_bw_loopback.min",
        "wrong unit magnitude",
    ),
    (
        "wrong-magnitude-rated",
        _th("ib_write_bw_pair: {rated: 400000, ratio: 0.8, unit: gbit_per_s, source: site baseline}"),
        "thresholds.ib_write_bw_pair.rated",
        "outside the sane range",
    ),
    (
        "latency-in-ns",
        _th("ib_write_lat_p99: {max: 4200, unit: nsec, source: site baseline}"),
        "thresholds.ib_write_lat_p99.unit",
        "its probe reports usec",
    ),
    (
        "gpu-count-zero",
        GV + OV + "  gpu: {count: 0}\n",
        "clustercert_profile_overrides.gpu.count",
        "greater than or equal to 1",
    ),
    (
        "gpu-count-bool",
        GV + OV + "  gpu: {count: true}\n",
        "clustercert_profile_overrides.gpu.count",
        "boolean",
    ),
    ("drift-tolerance-nan", GV + OV + "  drift_tolerance: .nan\n", "drift_tolerance", "finite number"),
]


@pytest.mark.parametrize("case", PROFILE_CASES, ids=[c[0] for c in PROFILE_CASES])
def test_bad_threshold_or_profile_value(case, tmp_path, refused):
    _id, gv, key, reason = case
    inv = inventory(tmp_path, group_vars=gv)
    _expect(refused("validate", "-i", str(inv)), "all.yml", key, reason)


def test_bad_profile_file(tmp_path, refused):
    prof = tmp_path / "site.yml"
    text = (
        Path(__file__).resolve().parents[2] / "clustercert-lab/src/clustercert_lab/profiles/lab.yml"
    ).read_text()
    prof.write_text(text.replace("count: 8\n", "count: 0\n", 1))
    inv = inventory(tmp_path, group_vars=f"clustercert_profile: {prof}\n")
    _expect(refused("validate", "-i", str(inv)), str(prof), "gpu.count", "greater than or equal to 1")


# ---------------------------------------------------------------- 19.6: inventory structure ----

def test_same_host_two_groups_different_profiles(tmp_path, refused):
    hosts = """\
    all:
      children:
        h100: {hosts: {n1: {ansible_host: 192.0.2.1}}}
        a100: {hosts: {n1: {}, n2: {ansible_host: 192.0.2.2}}}
    """
    inv = inventory(tmp_path, hosts=hosts, group_vars="ansible_user: root\n",
                    extra={"group_vars/h100.yml": "clustercert_profile: h100-sxm-8x-ndr\n",
                           "group_vars/a100.yml": "clustercert_profile: a100-sxm-8x-hdr\n"})
    _expect(
        refused("validate", "-i", str(inv)),
        "clustercert_profile",
        "host n1",
        "h100",
        "a100",
        "different profiles",
    )


def test_same_host_two_groups_inline_vars(tmp_path, refused):
    hosts = """\
    all:
      children:
        x: {hosts: {n1: {ansible_host: 192.0.2.1}}, vars: {clustercert_profile: lab}}
        y: {hosts: {n1: {}}, vars: {clustercert_profile: h100-sxm-8x-ndr}}
    """
    inv = inventory(tmp_path, hosts=hosts, group_vars="ansible_user: root\n")
    _expect(refused("inventory", "-i", str(inv)), "hosts.yml", "clustercert_profile", "different profiles")


def test_child_group_overriding_parent_profile_is_fine(tmp_path, capsys):
    hosts = """\
    all:
      children:
        gpu:
          vars: {clustercert_profile: h100-sxm-8x-ndr}
          children:
            lab_nodes: {hosts: {n1: {ansible_host: 192.0.2.1}}, vars: {clustercert_profile: lab}}
    """
    inv = inventory(tmp_path, hosts=hosts, group_vars="ansible_user: root\n")
    assert main(["inventory", "-i", str(inv), "--format", "json"]) == 0, capsys.readouterr().err


def test_host_range_too_large(tmp_path, refused):
    inv = inventory(tmp_path, hosts="all:\n  hosts:\n    'node[0001:99999]': {ansible_host: 192.0.2.1}\n")
    _expect(refused("inventory", "-i", str(inv)), "hosts.yml", "node[0001:99999]", "expands to 99999 hosts")


def test_host_range_too_large_ini(tmp_path, refused):
    d = tmp_path / "ini"
    d.mkdir()
    (d / "hosts").write_text("[gpu]\nrack[a:z]-n[000:999]\n\n[gpu:vars]\nclustercert_profile=lab\n")
    _expect(refused("inventory", "-i", str(d)), "hosts", "line 2", "expands to 26000 hosts")


def test_host_ranges_add_up(tmp_path, refused):
    hosts = "all:\n  hosts:\n" + "".join(f"    'g{i}n[0001:3000]': {{}}\n" for i in range(4))
    _expect(refused("inventory", "-i", str(inventory(tmp_path, hosts=hosts))), "more than 10000")


def test_symlink_loop_in_inventory_dir(tmp_path, refused):
    inv = inventory(tmp_path)
    (inv / "loop").symlink_to(inv)
    _expect(refused("inventory", "-i", str(inv)), "symlink loop")


def test_symlink_loop_in_group_vars(tmp_path, refused):
    inv = inventory(tmp_path)
    (inv / "group_vars" / "gpu").mkdir()
    (inv / "group_vars" / "gpu" / "back").symlink_to(inv / "group_vars")
    _expect(refused("validate", "-i", str(inv)), "group_vars", "symlink loop")


def test_self_referencing_symlink_file(tmp_path, refused):
    inv = inventory(tmp_path)
    (inv / "host_vars").mkdir()
    (inv / "host_vars" / "n1.yml").symlink_to(inv / "host_vars" / "n1.yml")
    _expect(refused("inventory", "-i", str(inv)), "n1.yml", "symlink loop")


# ---------------------------------------------------------------- 19.6: YAML bombs and nesting ----

BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9))


def test_alias_bomb_in_group_vars(tmp_path, refused):
    inv = inventory(tmp_path, group_vars=GV + "x_" + BOMB.replace("\n", "\nx_", BOMB.count("\n") - 1))
    _expect(refused("inventory", "-i", str(inv)), "all.yml", "alias bomb")


def test_alias_bomb_in_profile(tmp_path, refused):
    prof = tmp_path / "bomb.yml"
    prof.write_text(BOMB)
    inv = inventory(tmp_path, group_vars=f"clustercert_profile: {prof}\n")
    _expect(refused("inventory", "-i", str(inv)), "bomb.yml", "alias bomb")


def test_deep_nesting_refused_without_recursing(tmp_path, refused):
    inv = inventory(tmp_path, group_vars=GV + "deep: " + "[" * 50000 + "]" * 50000 + "\n")
    _expect(refused("inventory", "-i", str(inv)), "all.yml", "line 2", "nesting deeper than 64")


def test_deep_mapping_nesting(tmp_path, refused):
    deep = "".join("  " * i + f"k{i}:\n" for i in range(100)) + "  " * 100 + "v\n"
    inv = inventory(tmp_path, extra={"host_vars/n1.yml": deep})
    _expect(refused("inventory", "-i", str(inv)), "n1.yml", "nesting deeper")


# ---------------------------------------------------------------- 19.6: --limit never widens ----

@pytest.mark.parametrize("pattern, fragment", [
    ("", "empty pattern"),
    ("   ", "empty pattern"),
    ("nosuch", "'nosuch' matches no host"),
    ("n1,nosuch", "'nosuch' matches no host"),
    ("n1,", "empty part"),
    ("!nosuch", "'!nosuch' matches no host"),
    ("n[", "--limit"),
    ("n1\nn2", "control character"),
])
def test_limit_refused(pattern, fragment, tmp_path, refused):
    inv = inventory(tmp_path)
    line = refused("validate", "-i", str(inv), "--limit", pattern)
    _expect(line, "--limit", fragment)


def test_limit_selects_only_what_it_names(tmp_path, capsys):
    import json

    inv = inventory(tmp_path)
    assert main(["inventory", "-i", str(inv), "--limit", "n2", "--format", "json"]) == 0
    assert list(json.loads(capsys.readouterr().out)["hosts"]) == ["n2"]


# ---------------------------------------------------------------- 19.6: the store ----

def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _foreign(path: Path, wal: bool) -> None:
    db = sqlite3.connect(path)
    if wal:
        db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, body TEXT)")
    db.execute("INSERT INTO messages (body) VALUES ('keep me')")
    db.commit()
    db.close()


def _corrupt(path: Path) -> None:
    _foreign(path, wal=False)
    data = bytearray(path.read_bytes())
    data[100:] = os.urandom(len(data) - 100)
    path.write_bytes(bytes(data))


def _foreign_runs(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, recipe TEXT, cooked_at REAL)")
    db.commit()
    db.close()


def _newer(path: Path) -> None:
    from clustercert.record.store import SCHEMA_VERSION, Store

    Store(path)
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.execute("PRAGMA journal_mode=DELETE")
    db.commit()
    db.close()


STORES = {
    "foreign-runs-table": (
        _foreign_runs,
        "another program's SQLite file (table runs has columns cooked_at, recipe)",
    ),
    "newer-version": (_newer, "store of a newer clustercert (schema version 2"),
    "garbage": (lambda p: p.write_bytes(os.urandom(4096)), "not an SQLite file"),
    "text": (lambda p: p.write_text("runs: []\n"), "not an SQLite file"),
    "truncated-header": (lambda p: p.write_bytes(b"SQLite format 3\x00\x10"), "not an SQLite file"),
    "corrupt": (_corrupt, "corrupt"),
    "foreign-sqlite": (lambda p: _foreign(p, wal=False), "another program's SQLite file (messages)"),
    "foreign-sqlite-wal": (lambda p: _foreign(p, wal=True), "another program's SQLite file (messages)"),
}


@pytest.mark.parametrize("kind", sorted(STORES))
@pytest.mark.parametrize("verb", ["validate", "report"])
def test_store_that_is_not_ours_is_refused_untouched(kind, verb, tmp_path, refused):
    make, fragment = STORES[kind]
    state = tmp_path / "state"
    state.mkdir()
    store = state / "store.sqlite"
    make(store)
    before, listing, mtime = _digest(store), sorted(os.listdir(state)), store.stat().st_mtime_ns
    argv = ["validate", "-i", str(inventory(tmp_path))] if verb == "validate" else ["report", "runs"]
    _expect(refused(*argv, store_expected=True), str(store), fragment)
    assert _digest(store) == before and store.stat().st_mtime_ns == mtime
    assert sorted(os.listdir(state)) == listing  # no -journal, -wal or -shm beside it


def test_store_that_is_a_directory(tmp_path, refused):
    (tmp_path / "state" / "store.sqlite").mkdir(parents=True)
    _expect(
        refused("validate", "-i", str(inventory(tmp_path)), store_expected=True),
        "store.sqlite",
        "is a directory",
    )


def test_store_of_an_older_clustercert_is_migrated_in_place(tmp_path):
    """A store made before application_id/user_version (and before findings.evidence_ref) keeps its runs."""
    from clustercert.record.store import APPLICATION_ID, SCHEMA, SCHEMA_VERSION, Store

    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript(SCHEMA.replace("evidence_ref TEXT,", "").replace("evidence_ref TEXT", ""))
    db.execute(
        "INSERT INTO runs (id, kind, inventory, started, status) VALUES ('old1', 'validate', 'i', 1, 'done')"
    )
    db.commit()
    db.close()
    assert [r["id"] for r in Store(path).runs()] == ["old1"]
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()


def test_store_created_0600_and_reopened(tmp_path):
    from clustercert.record.store import Store

    s = Store(tmp_path / "s" / "store.sqlite")
    s.start_run("r1", "validate", "inv")
    assert (s.path.stat().st_mode & 0o777) == 0o600
    assert [r["id"] for r in Store(s.path).runs()] == ["r1"]
