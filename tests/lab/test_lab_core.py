"""The lab's machinery against a real running lab: SSH/Ansible with host-key checking, distinct root
filesystems, real apt through the proxy, shaped fabric links measured with iperf3, reboot, power,
idempotent up, growing/shrinking, and a `down` that leaves nothing behind."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from clustercert_lab import image, network, node

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.usefixtures("fresh_lab")]

LAB_NODES = 4  # what the session `lab` fixture brings up


def ansible_bin() -> str:
    local = Path(sys.executable).parent / "ansible"
    return str(local) if local.exists() else (shutil.which("ansible") or "ansible")


def _ansible(inventory: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [ansible_bin(), "all", "-i", str(inventory), *args],
        capture_output=True, text=True, timeout=180,
        env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "ANSIBLE_HOST_KEY_CHECKING": "True",
             "ANSIBLE_NOCOLOR": "1", "HOME": "/root"},
    )  # fmt: skip


def test_inventory_and_ssh_files(lab):
    inv = yaml.safe_load(lab.inventory.read_text())
    hosts = inv["all"]["children"]["lab"]["hosts"]
    assert sorted(hosts) == ["node01", "node02", "node03", "node04"]
    h2 = hosts["node02"]
    assert h2["ansible_host"] == "10.250.0.12"
    assert h2["ansible_user"] == "root"
    assert h2["ansible_python_interpreter"] == "/usr/bin/python3"
    assert h2["clustercert_fabric_addresses"] == {"ib0": "10.251.0.12/24", "ib1": "10.252.0.12/24"}
    assert h2["ib_redundancy_bond_address"] == "10.253.0.12/24"
    assert f"UserKnownHostsFile={lab.dir}/ssh/known_hosts" in h2["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=no" not in h2["ansible_ssh_common_args"]
    gv = yaml.safe_load((lab.inventory.parent / "group_vars" / "all.yml").read_text())
    assert gv == {
        "clustercert_cluster_name": "clustercert-lab",
        "clustercert_profile": "lab",
        "clustercert_package_mirror": "http://10.250.0.1:8081",
        "clustercert_ntp_servers": ["10.250.0.1"],
        # the lab's cluster key pair stays with the lab, whatever CLUSTERCERT_HOME a command runs
        # under
        "cluster_ssh_key_dir": f"{lab.dir}/ssh/cluster_ssh",
    }
    known = (lab.dir / "ssh" / "known_hosts").read_text().splitlines()
    assert len(known) == 4 and known[0].startswith("node01,10.250.0.11 ssh-ed25519 ")
    assert "StrictHostKeyChecking yes" in lab.ssh_config.read_text()


def test_ansible_ping_with_host_key_checking(lab):
    proc = _ansible(lab.inventory, "-m", "ping", "-o")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in lab.nodes:
        assert re.search(rf"^{name} \| SUCCESS", proc.stdout, re.M), proc.stdout


def test_wrong_host_key_is_refused(lab, tmp_path):
    """Host-key checking is really on: a known_hosts with another key for node01 makes it unreachable."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    pub = (tmp_path / "k.pub").read_text().split()
    (tmp_path / "known_hosts").write_text(f"node01,10.250.0.11 {pub[0]} {pub[1]}\n")
    key = lab.dir / "ssh" / "id_ed25519"
    proc = subprocess.run(
        ["ssh", "-o", f"UserKnownHostsFile={tmp_path / 'known_hosts'}", "-o", "StrictHostKeyChecking=yes",
         "-o", "BatchMode=yes", "-o", "ControlMaster=no", "-o", "ControlPath=none", "-i", str(key),
         "root@10.250.0.11", "true"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert proc.returncode == 255
    assert (
        "Host key verification failed" in proc.stderr
        or "REMOTE HOST IDENTIFICATION HAS CHANGED" in proc.stderr
    )


def test_nodes_boot_systemd_with_their_own_identity(lab):
    out = {n: lab.ssh(n, "hostname; cat /etc/machine-id; systemctl is-system-running || true").stdout.split()
           for n in lab.nodes[:2]}  # fmt: skip
    assert out["node01"][0] == "node01" and out["node02"][0] == "node02"
    assert out["node01"][1] != out["node02"][1]  # distinct machine-ids
    assert out["node01"][2] == "running", out
    addrs = lab.ssh("node02", "ip -4 -o addr show").stdout
    for cidr in ("10.250.0.12/24", "10.251.0.12/24", "10.252.0.12/24"):
        assert cidr in addrs
    # the emulated bond's data path: a fourth veth, its host end on the bond bridge
    assert lab.ssh("node02", "test -e /sys/class/net/bondlink", check=False).returncode == 0
    host_end = subprocess.run(
        ["ip", "-o", "link", "show", "dev", "cc02b"], capture_output=True, text=True
    ).stdout
    assert "master ccbond" in host_end, host_end
    # the sim dir is bind-mounted where the node-side simulator expects it
    (lab.handle("node02").sim_dir / "probe-bind").write_text("visible\n")
    try:
        assert lab.ssh("node02", "cat /var/lib/clustercert-lab/probe-bind").stdout == "visible\n"
    finally:
        (lab.handle("node02").sim_dir / "probe-bind").unlink()


def test_root_filesystems_are_distinct(lab):
    token = f"cc-distinct-{uuid.uuid4().hex}"
    lab.ssh("node01", f"echo {token} > /root/{token}")
    assert lab.ssh("node01", f"cat /root/{token}").stdout.strip() == token
    assert lab.ssh("node02", f"test -e /root/{token}", check=False).returncode == 1
    # the write landed in node01's own overlay upper layer, not in the shared image
    assert (lab.handle("node01").state_dir / "upper" / "root" / token).exists()
    assert not (image.base_dir() / "root" / token).exists()
    assert not (lab.handle("node02").state_dir / "upper" / "root" / token).exists()


def _iperf(lab, client: str, server_ip: str, server: str) -> float:
    for _attempt in range(3):
        lab.ssh(server, "pkill -x iperf3 || true; iperf3 -s -1 -D")
        time.sleep(0.3)
        proc = lab.ssh(client, f"iperf3 -c {server_ip} -t 4 -J", check=False, timeout=60)
        if proc.returncode == 0:
            return json.loads(proc.stdout)["end"]["sum_received"]["bits_per_second"] / 1e6
        time.sleep(0.5)
    raise AssertionError(f"iperf3 {client} -> {server_ip} failed: {proc.stdout[-500:]} {proc.stderr[-500:]}")


def _apt_install(lab, name: str, pkg: str) -> None:
    cmd = f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q {pkg}"
    if lab.ssh(name, cmd, check=False, timeout=300).returncode != 0:
        lab.ssh(name, f"apt-get update -q && {cmd}", timeout=600)  # the image's lists went stale


def test_iperf3_over_fabric_follows_link_rate(lab):
    for n in ("node01", "node02"):
        _apt_install(lab, n, "iperf3")
    # real apt through the host's proxy: the proxy's log shows the package it served
    proxy_log = (lab.dir / "proxy" / "log" / "apt-cacher.log").read_text()
    assert "iperf3" in proxy_log
    link = lab.link_mbit
    full = _iperf(lab, "node01", "10.251.0.12", "node02")
    assert full >= 0.8 * link, f"{full:.0f} Mbit/s on a {link} Mbit/s link"
    h = lab.handle("node02")
    try:
        h.set_link_rate(0, 0.3 * link)
        assert h.link_rates()[0] == pytest.approx(0.3 * link)
        slow = _iperf(lab, "node01", "10.251.0.12", "node02")
        assert slow < 0.4 * link, f"{slow:.0f} Mbit/s after shaping node02 fabric 0 to 30%"
        assert slow > 0.1 * link
        # the other fabric is untouched
        other = _iperf(lab, "node01", "10.252.0.12", "node02")
        assert other >= 0.8 * link
    finally:
        h.set_link_rate(0, link)
    assert _iperf(lab, "node01", "10.251.0.12", "node02") >= 0.8 * link


def test_reboot_inside_a_node_brings_it_back(lab):
    h = lab.handle("node03")
    boots = int((h.state_dir / "boots").read_text())
    init_before = h.init_pid()
    lab.ssh("node03", "touch /run/cc-before-reboot")
    t0 = time.monotonic()
    lab.ssh("node03", "systemctl reboot", check=False)
    # the old boot's sshd may still answer while systemd shuts down: wait for the new boot first
    def boot_count() -> int:
        try:
            return int((h.state_dir / "boots").read_text())
        except ValueError:  # being rewritten
            return boots

    while boot_count() == boots and time.monotonic() - t0 < 60:
        time.sleep(0.2)
    lab.wait_ssh("node03", timeout=60)
    assert time.monotonic() - t0 < 30
    assert lab.ssh("node03", "test -e /run/cc-before-reboot", check=False, fresh=True).returncode == 1
    assert int((h.state_dir / "boots").read_text()) == boots + 1
    assert h.init_pid() not in (None, init_before)
    # the new boot is wired and shaped like the first one
    qdisc = subprocess.run(["tc", "qdisc", "show", "dev", "cc03i0"], capture_output=True, text=True).stdout
    assert "tbf" in qdisc and "rate 1Gbit" in qdisc
    assert "10.251.0.13/24" in lab.ssh("node03", "ip -4 -o addr show dev ib0", fresh=True).stdout


def test_power_off_and_on(lab):
    h = lab.handle("node04")
    h.power_off()
    assert not h.is_running()
    assert h.state() == "off"
    assert lab.ssh("node04", "true", check=False, fresh=True, timeout=30).returncode == 255
    assert not network.link_exists("cc04m") and not network.link_exists("cc04b")
    h.power_on()
    assert h.is_running()
    lab.wait_ssh("node04", timeout=60)


def test_up_twice_is_idempotent(lab):
    before = {n: lab.handle(n).init_pid() for n in lab.nodes}
    t0 = time.monotonic()
    st = lab.up(LAB_NODES)
    assert time.monotonic() - t0 < 10
    assert {n: lab.handle(n).init_pid() for n in lab.nodes} == before
    assert sorted(st["nodes"]) == ["node01", "node02", "node03", "node04"]
    assert all(n["state"] == "running" for n in st["nodes"].values())
    # the same through the CLI
    from clustercert_lab import manager

    env_cli = subprocess.run(
        [sys.executable, "-m", "clustercert", "lab", "up", "--nodes", str(LAB_NODES)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert env_cli.returncode == 0, env_cli.stderr
    assert {n: lab.handle(n).init_pid() for n in lab.nodes} == before
    assert manager.status()["running"] is True


def test_up_with_more_then_fewer_nodes(lab):
    try:
        st = lab.up(5)
        assert sorted(st["nodes"]) == ["node01", "node02", "node03", "node04", "node05"]
        assert lab.ssh("node05", "hostname").stdout.strip() == "node05"
        assert "10.250.0.15\tnode05" in lab.ssh("node01", "cat /etc/hosts").stdout
        inv = yaml.safe_load(lab.inventory.read_text())
        assert "node05" in inv["all"]["children"]["lab"]["hosts"]
    finally:
        st = lab.up(LAB_NODES)
    assert sorted(st["nodes"]) == ["node01", "node02", "node03", "node04"]
    assert not network.link_exists("cc05m") and not network.link_exists("cc05b")
    assert not (lab.dir / "nodes" / "node05").exists()
    assert not any("/nodes/node05/" in m for m in node.lab_mounts(lab.dir))


def _lab_processes(lab_dir: Path) -> list[str]:
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            continue  # an exited process init has not reaped yet
        if (
            "systemd-nspawn" in cmd
            or "clustercert_lab.node" in cmd
            or "clustercert_lab.repo_server" in cmd
            or str(lab_dir) in cmd
            or ("ssh" in cmd and "10.250.0." in cmd)
        ):
            found.append(f"{p.name}: {cmd}")
    return found


def test_down_leaves_nothing_behind(lab):
    lab_dir = lab.dir
    try:
        t0 = time.monotonic()
        lab.manager.down()
        assert time.monotonic() - t0 < 10
        time.sleep(0.5)
        assert _lab_processes(lab_dir) == []
        mounts = Path("/proc/self/mountinfo").read_text()
        assert str(lab_dir) not in mounts
        links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
        names = [line.split(":")[1].strip().split("@")[0] for line in links.splitlines()]
        assert [
            n for n in names if n.startswith(("ccmgmt", "ccfab", "ccbond")) or re.match(r"cc\d\d", n)
        ] == []
        assert network.leftovers() == {"links": [], "iptables": []}
        rules = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
        assert (
            "CCLAB" not in rules and "ccmgmt" not in rules and "ccfab" not in rules and "ccbond" not in rules
        )
        assert not any(Path("/sys/fs/cgroup").glob("*/clustercert-lab"))
        assert not [p for p in Path("/run/systemd/nspawn/propagate").glob("*") if p.name in lab.nodes]
        assert not lab_dir.exists()
        assert (image.base_dir() / "usr/sbin/sshd").exists()  # the image cache stays
        assert lab.manager.status()["running"] is False
    finally:
        lab.up(LAB_NODES)
    assert lab.ssh("node01", "true", fresh=True).returncode == 0
