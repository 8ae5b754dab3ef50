"""Bad input -> exit 2 and ONE line naming the file, the key and the reason; no traceback."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from clustercert.cli import main

GOOD_GROUP_VARS = "clustercert_profile: lab\n"


def write_inventory(
    tmp: Path, hosts_yml: str, group_vars: str | None = GOOD_GROUP_VARS, extra: dict | None = None
) -> Path:
    d = tmp / "inv"
    (d / "group_vars").mkdir(parents=True)
    (d / "hosts.yml").write_text(textwrap.dedent(hosts_yml))
    if group_vars is not None:
        (d / "group_vars" / "all.yml").write_text(textwrap.dedent(group_vars))
    for rel, text in (extra or {}).items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return d


HOSTS = """\
all:
  hosts:
    n1: {ansible_host: 10.0.0.1}
    n2: {ansible_host: 10.0.0.2}
"""

# (id, hosts.yml, group_vars/all.yml, extra files, expected file-name fragment, expected key, reason fragment)
CASES = [
    (
        "malformed-yaml",
        "all:\n  hosts:\n    n1: {ansible_host: [\n",
        GOOD_GROUP_VARS,
        None,
        "hosts.yml",
        "line",
        "malformed YAML",
    ),
    ("empty-inventory", "", GOOD_GROUP_VARS, None, "hosts.yml", None, "empty"),
    ("no-hosts", "all:\n  children:\n    gpu: {}\n", GOOD_GROUP_VARS, None, "inv", None, "no hosts"),
    (
        "duplicate-host",
        "all:\n  hosts:\n    n1: {}\n    n1: {}\n",
        GOOD_GROUP_VARS,
        None,
        "hosts.yml",
        "line 4",
        "duplicate key 'n1'",
    ),
    (
        "unknown-group-key",
        "all:\n  hostz:\n    n1: {}\n",
        GOOD_GROUP_VARS,
        None,
        "hosts.yml",
        "all.hostz",
        "unknown key",
    ),
    (
        "unknown-profile",
        HOSTS,
        "clustercert_profile: h900-imaginary\n",
        None,
        "all.yml",
        "clustercert_profile",
        "unknown profile 'h900-imaginary'",
    ),
    (
        "missing-profile",
        HOSTS,
        "ansible_user: root\n",
        None,
        "inv",
        "clustercert_profile",
        "required variable is missing",
    ),
    (
        "unknown-clustercert-var",
        HOSTS,
        GOOD_GROUP_VARS + "clustercert_max_paralel_reboots: 2\n",
        None,
        "all.yml",
        "clustercert_max_paralel_reboots",
        "did you mean clustercert_max_parallel_reboots",
    ),
    (
        "wrong-type",
        HOSTS,
        GOOD_GROUP_VARS + "clustercert_max_parallel_reboots: two\n",
        None,
        "all.yml",
        "clustercert_max_parallel_reboots",
        "integer",
    ),
    (
        "out-of-range",
        HOSTS,
        GOOD_GROUP_VARS + "clustercert_sm_priority: 99\n",
        None,
        "all.yml",
        "clustercert_sm_priority",
        "less than or equal to 15",
    ),
    (
        "override-unknown-key",
        HOSTS,
        GOOD_GROUP_VARS + "clustercert_profile_overrides: {gpu: {cuont: 4}}\n",
        None,
        "all.yml",
        "clustercert_profile_overrides.gpu.cuont",
        "unknown key",
    ),
    (
        "override-wrong-type",
        HOSTS,
        GOOD_GROUP_VARS + "clustercert_profile_overrides: {gpu: {count: lots}}\n",
        None,
        "all.yml",
        "clustercert_profile_overrides.gpu.count",
        "integer",
    ),
    (
        "override-threshold-without-source",
        HOSTS,
        GOOD_GROUP_VARS
        + "clustercert_profile_overrides: {thresholds: {iperf3_ipoib: {min: 5, unit: gbit_per_s, source: "
          "''}}}\n",
        None,
        "all.yml",
        "clustercert_profile_overrides.thresholds.iperf3_ipoib.source",
        "at least 5",
    ),
    (
        "bad-fabric-address",
        HOSTS,
        GOOD_GROUP_VARS,
        {"host_vars/n1.yml": "clustercert_fabric_addresses: {ib0: 10.1.2}\n"},
        "n1.yml",
        "clustercert_fabric_addresses",
        "not an address with prefix",
    ),
    (
        "bad-bond-address",
        HOSTS,
        GOOD_GROUP_VARS,
        {"host_vars/n1.yml": "ib_redundancy_bond_address: 10.253.0/24\n"},
        "n1.yml",
        "ib_redundancy_bond_address",
        "not an address with prefix",
    ),
    (
        "bond-address-not-text",
        HOSTS,
        GOOD_GROUP_VARS,
        {"host_vars/n2.yml": "ib_redundancy_bond_address: [10.253.0.2/24]\n"},
        "n2.yml",
        "ib_redundancy_bond_address",
        "got a list",
    ),
    (
        "host-vars-not-mapping",
        HOSTS,
        GOOD_GROUP_VARS,
        {"host_vars/n2.yml": "- a\n- b\n"},
        "n2.yml",
        None,
        "must be a YAML mapping",
    ),
    (
        "group-vars-malformed",
        HOSTS,
        "clustercert_profile: lab\n  bad: indent\n",
        None,
        "all.yml",
        "line",
        "malformed YAML",
    ),
    (
        "bad-mirror-url",
        HOSTS,
        GOOD_GROUP_VARS + "clustercert_package_mirror: mirror.local/nvidia\n",
        None,
        "all.yml",
        "clustercert_package_mirror",
        "pattern",
    ),
    (
        "bad-slurm-gres",
        HOSTS,
        GOOD_GROUP_VARS + "clustercert_slurm_gres: 'gpu:8'\n",
        None,
        "all.yml",
        "clustercert_slurm_gres",
        "without a count",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_inventory(case, tmp_path, capsys):
    _id, hosts, gvars, extra, fname, key, reason = case
    inv = write_inventory(tmp_path, hosts, gvars, extra)
    rc = main(["inventory", "-i", str(inv)])
    out, err = capsys.readouterr()
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert "Traceback" not in err
    assert fname in line, line
    if key:
        assert key in line, line
    assert reason in line, line
    assert out == ""


def test_unreadable_inventory(tmp_path, capsys):
    inv = write_inventory(tmp_path, HOSTS)
    f = inv / "hosts.yml"
    f.chmod(0)
    try:
        if os.access(f, os.R_OK):  # root reads anything: use a directory where a file is expected instead
            f.chmod(0o644)
            target = tmp_path / "adir.yml"
            target.mkdir()
            rc = main(["inventory", "-i", str(target / "missing.yml")])
            err = capsys.readouterr().err
            assert rc == 2 and "missing.yml: inventory not found" in err
            rc = main(["parse", "nvidia-smi-xml", str(target)])
            err = capsys.readouterr().err
            assert rc == 2 and "is a directory" in err
        else:
            rc = main(["inventory", "-i", str(inv)])
            assert rc == 2 and "not readable" in capsys.readouterr().err
    finally:
        f.chmod(0o644)


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (
            ["bootstrap", "-i", "inventory/h100-sample", "--forks", "zero"],
            "-f/--forks: expected a positive integer",
        ),
        (
            ["bootstrap", "-i", "inventory/h100-sample", "-e", "novalue"],
            "-e/--extra-vars: novalue: expected key=value",
        ),
        (["validate", "-i", "inventory/h100-sample", "--format", "xml"], "invalid choice: 'xml'"),
        (["bootstrap"], "the following arguments are required: -i/--inventory"),
        (["nosuchverb"], "invalid choice: 'nosuchverb'"),
        (
            ["inventory", "-i", "inventory/h100-sample", "-l", "nosuchhost"],
            "--limit: pattern 'nosuchhost' matches no host",
        ),
        (["lab", "fault", "node01", "gpu_missing", "gpu"], "gpu: parameters are KEY=VALUE"),
        (["parse", "no-such-kind", "x"], "unknown kind 'no-such-kind'"),
        (["inventory", "-i", "/nonexistent/inventory"], "/nonexistent/inventory: inventory not found"),
        (
            ["bootstrap", "-i", "inventory/h100-sample", "-e", "@/nonexistent.yml"],
            "/nonexistent.yml: file not found",
        ),
    ],
)
def test_bad_flags(argv, fragment, capfd):
    rc = main(argv)
    err = capfd.readouterr().err  # fd 2: `lab` runs the lab's program in a child
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert fragment in err


def test_no_traceback_from_a_real_process(cli, tmp_path):
    inv = write_inventory(tmp_path, "all:\n  hosts:\n    n1: {}\n    n1: {}\n")
    r = cli("inventory", "-i", str(inv))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1
