"""Lab spec validation: every bad spec is exit 2 with ONE line naming the file, the key and the reason.

These tests need no lab and no root. As root they run the CLI as `nobody`, so that a spec wrongly
accepted ends in "must run as root" (and a failed test) instead of starting a lab.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from clustercert.errors import InputError
from clustercert_lab import network, node, spec

REPO = Path(__file__).resolve().parents[2]
CLI_PREFIX = "clustercert: error: "  # how the CLI prints an InputError's one line


@pytest.fixture(scope="module")
def spec_dir():
    d = Path(tempfile.mkdtemp(prefix="cc-labspec-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _cli_up(*args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "clustercert", "lab", "up", *args]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "src"), "PYTHONDONTWRITEBYTECODE": "1",
           "CLUSTERCERT_LAB_DIR": "/nonexistent/cc-lab-must-not-be-created"}  # fmt: skip
    if os.geteuid() == 0 and shutil.which("setpriv"):
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd="/")


BAD_SPECS = [
    # (name, YAML text, expected key, expected fragment of the reason)
    ("malformed", "nodes: [1, 2\nprofile: lab\n", "line 2", "malformed YAML: expected ',' or ']'"),
    ("duplicate-key", "nodes: 2\nnodes: 3\n", "line 2", "duplicate key 'nodes'"),
    ("not-a-mapping", "- nodes\n- 4\n", None, "must be a YAML mapping, not list"),
    (
        "unknown-key",
        "nodes: 2\nnode_count: 3\n",
        "node_count",
        "unknown key (known: nodes, profile, link_mbit, faults, slurm)",
    ),
    ("zero-nodes", "nodes: 0\n", "nodes", "must be 1..64, not 0"),
    ("too-many-nodes", "nodes: 65\n", "nodes", "must be 1..64, not 65"),
    ("nodes-string", "nodes: four\n", "nodes", "must be an integer 1..64 or a list of node names, not str"),
    ("nodes-bool", "nodes: true\n", "nodes", "must be an integer 1..64 or a list of node names, not bool"),
    ("duplicate-name", "nodes: [gpu-a, gpu-b, gpu-a]\n", "nodes[2]", "duplicate node name 'gpu-a'"),
    ("bad-name", "nodes: [gpu-a, Gpu_B]\n", "nodes[1]", "invalid node name 'Gpu_B'"),
    ("empty-list", "nodes: []\n", "nodes", "an empty list"),
    ("unknown-profile", "profile: dgx-z9\n", "profile", "unknown profile 'dgx-z9' (known: "),
    ("link-too-slow", "link_mbit: 5\n", "link_mbit", "must be 10..10000, not 5"),
    ("link-string", "link_mbit: fast\n", "link_mbit", "must be an integer 10..10000, not str 'fast'"),
    (
        "faults-not-list",
        "faults: gpu_missing\n",
        "faults",
        "must be a list of {node, kind, ...params}, not str",
    ),
    ("slurm-string", "slurm: 'true'\n", "slurm", "must be true or false, not str 'true'"),
    ("slurm-int", "nodes: 2\nslurm: 1\n", "slurm", "must be true or false, not int 1"),
    (
        "fault-node-missing",
        "nodes: 2\nfaults:\n  - {kind: gpu_missing}\n",
        "faults[0].node",
        "required key is missing",
    ),
    (
        "fault-unknown-node",
        "nodes: 2\nfaults:\n  - {node: node03, kind: gpu_missing}\n",
        "faults[0].node",
        "no node 'node03' in this lab (nodes: node01, node02)",
    ),
]


@pytest.mark.parametrize(("name", "text", "key", "reason"), BAD_SPECS, ids=[b[0] for b in BAD_SPECS])
def test_bad_spec_is_one_line_exit_2(spec_dir, name, text, key, reason):
    f = spec_dir / f"{name}.yml"
    f.write_text(text)
    f.chmod(0o644)
    proc = _cli_up("--spec", str(f))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    expected_prefix = f"{f}: {key}: " if key else f"{f}: "
    assert lines[0].removeprefix(CLI_PREFIX).startswith(expected_prefix), lines[0]
    assert reason in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
    assert not Path("/nonexistent/cc-lab-must-not-be-created").exists()


def test_unknown_fault_kind_names_the_known_ones(spec_dir):
    f = spec_dir / "unknown-kind.yml"
    f.write_text("nodes: 2\nfaults:\n  - {node: node01, kind: foo}\n  - {node: node02, kind: gpu_missing}\n")
    f.chmod(0o644)
    proc = _cli_up("--spec", str(f))
    assert proc.returncode == 2
    line = proc.stderr.strip().removeprefix(CLI_PREFIX)
    assert "\n" not in line
    assert line.startswith(f"{f}: faults[0].kind: unknown fault kind 'foo' (known: ")
    for kind in ("gpu_missing", "ib_port_down", "link_slow", "node_down", "probe_hang", "package_drift"):
        assert kind in line


def test_missing_spec_file():
    proc = _cli_up("--spec", "/nonexistent/lab-spec.yml")
    assert proc.returncode == 2
    assert proc.stderr.strip().removeprefix(CLI_PREFIX) == "/nonexistent/lab-spec.yml: file not found"


def test_nodes_flag_out_of_range():
    with pytest.raises(InputError) as exc:
        spec.load(None, 0)
    assert exc.value.one_line() == "--nodes: must be an integer 1..64, not 0"


def test_embedded_default_spec():
    sp = spec.load()
    assert sp["nodes"] == ["node01", "node02", "node03", "node04"]
    assert sp["profile"] == "lab"
    assert sp["link_mbit"] == 1000
    assert sp["faults"] == []
    assert sp["slurm"] is False
    assert spec.load(None, 12)["nodes"][-1] == "node12"
    assert spec.load(None, None, slurm=True)["slurm"] is True  # `lab up --slurm`


def test_slurm_key(tmp_path):
    f = tmp_path / "lab.yml"
    f.write_text("nodes: 2\nslurm: true\n")
    assert spec.load(str(f))["slurm"] is True
    assert spec.load(str(f), None, slurm=False)["slurm"] is True  # the flag only turns it on
    f.write_text("slurm: false\n")
    assert spec.load(str(f))["slurm"] is False and spec.load(str(f), None, slurm=True)["slurm"] is True
    f.write_text("slurm: null\n")
    with pytest.raises(InputError) as exc:
        spec.load(str(f))
    assert exc.value.one_line() == f"{f}: slurm: must be true or false, not NoneType None"


def test_good_spec_is_normalised(tmp_path):
    f = tmp_path / "lab.yml"
    f.write_text("nodes: [gpu-a, gpu-b, gpu-c]\nlink_mbit: 400\n")
    sp = spec.load(str(f))
    assert sp["nodes"] == ["gpu-a", "gpu-b", "gpu-c"]
    assert sp["link_mbit"] == 400
    assert sp["profile"] == "lab"
    # --nodes overrides the count (names then follow the default pattern)
    assert spec.load(str(f), 2)["nodes"] == ["node01", "node02"]


def test_addresses_and_interface_names():
    assert network.mgmt_ip(1) == "10.250.0.11"
    assert network.fabric_ip(3, 0) == "10.251.0.13"
    assert network.fabric_ip(3, 1) == "10.252.0.13"
    assert network.mgmt_ip(64) == "10.250.0.74"
    assert network.bond_ip(3) == "10.253.0.13"
    assert network.host_ifaces(7) == ("cc07m", "cc07i0", "cc07i1", "cc07b")
    assert all(len(n) <= 15 for n in network.host_ifaces(64))
    # every lab bridge is isolated by the forward chain (the bond bridge too)
    assert network.BOND_BRIDGE in network.BRIDGES
    rules = network.isolation_rules()
    assert ["-i", "ccbond", "!", "-o", "ccbond", "-j", "DROP"] in rules
    assert ["-o", "ccbond", "!", "-i", "ccbond", "-j", "DROP"] in rules


def test_nspawn_gives_every_node_its_bond_data_path(tmp_path):
    h = node.NodeHandle(tmp_path, "node03", 3)
    argv = node.nspawn_argv(h, {"uuid": "00000000-0000-0000-0000-000000000000"})
    veths = [a.split("=", 1)[1] for a in argv if a.startswith("--network-veth-extra=")]
    assert veths == ["cc03m:eth0", "cc03i0:ib0", "cc03i1:ib1", "cc03b:bondlink"]


def test_tbf_arguments():
    assert network.tbf_args(1000) == ["tbf", "rate", "1000000kbit", "burst", "131072", "latency", "50ms"]
    assert network.tbf_args(300.0)[2] == "300000kbit"
    assert network.tbf_args(10000)[4] == "1250000"  # ~1 ms worth at 10 Gbit/s


def test_node_network_config():
    files = node.networkd_files(2)
    assert sorted(files) == [
        "00-lab-bondlink.network",
        "00-lab-ib0.network",
        "00-lab-ib1.network",
        "10-eth0.network",
    ]
    assert (
        "Name=bondlink" in files["00-lab-bondlink.network"]
        and "Unmanaged=yes" in files["00-lab-bondlink.network"]
    )
    assert "Name=eth0" in files["10-eth0.network"] and "Address=10.250.0.12/24" in files["10-eth0.network"]
    assert "Address=10.251.0.12/24" in files["00-lab-ib0.network"]
    assert "Address=10.252.0.12/24" in files["00-lab-ib1.network"]


def test_lab_key_is_added_beside_the_keys_a_node_already_authorises(tmp_path):
    """`lab up` of a running lab personalises every node again: root's authorized_keys keeps the cluster key
    the cluster_ssh role added (without it, mpirun between nodes was refused after the next module's up)."""
    ak = tmp_path / "root/.ssh/authorized_keys"
    ak.parent.mkdir(parents=True)
    ak.write_text("ssh-ed25519 AAAAlab clustercert-lab\nssh-ed25519 AAAAcluster clustercert-cluster\n")
    node._authorise(ak, "ssh-ed25519 AAAAlab clustercert-lab\n")
    assert ak.read_text().splitlines() == ["ssh-ed25519 AAAAlab clustercert-lab",
                                           "ssh-ed25519 AAAAcluster clustercert-cluster"]
    ak.write_text("ssh-ed25519 AAAAcluster clustercert-cluster")  # no final newline
    node._authorise(ak, "ssh-ed25519 AAAAlab clustercert-lab")
    assert ak.read_text().splitlines() == ["ssh-ed25519 AAAAcluster clustercert-cluster",
                                           "ssh-ed25519 AAAAlab clustercert-lab"]
    assert ak.stat().st_mode & 0o777 == 0o600
