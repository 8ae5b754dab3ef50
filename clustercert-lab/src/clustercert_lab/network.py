"""The lab's networks: one management bridge, one bridge per simulated InfiniBand fabric, one bridge
for the emulated IPoIB bonds' data path, the per-node veth pairs on them, tc tbf shaping of fabric
links, and the iptables rules that keep lab traffic on the lab (nothing is routed off a lab bridge;
``net.ipv4.ip_forward`` is never touched)."""

from __future__ import annotations

import subprocess

MGMT_BRIDGE = "ccmgmt"
FABRIC_BRIDGES = ("ccfab0", "ccfab1")
# The data path of each node's emulated bond0 (the node's agent enslaves its `bondlink` veth to bond0 and
# keeps it up while a bond slave is up): the "IPoIB subnet" the bonds' addresses live on.
BOND_BRIDGE = "ccbond"
BRIDGES = {
    MGMT_BRIDGE: "10.250.0.1/24",
    FABRIC_BRIDGES[0]: "10.251.0.1/24",
    FABRIC_BRIDGES[1]: "10.252.0.1/24",
    BOND_BRIDGE: "10.253.0.1/24",
}
IPT_CHAIN = "CCLAB-FWD"
# inside the node: management, fabric 0, fabric 1, the emulated bond's data path
NODE_IFACES = ("eth0", "ib0", "ib1", "bondlink")


class NetError(RuntimeError):
    pass


def _ip(*args: str, check: bool = True, timeout: float = 15) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise NetError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def link_exists(name: str) -> bool:
    return _ip("link", "show", "dev", name, check=False).returncode == 0


def mgmt_ip(index: int) -> str:
    return f"10.250.0.{10 + index}"


def fabric_ip(index: int, fabric: int) -> str:
    return f"10.{251 + fabric}.0.{10 + index}"


def bond_ip(index: int) -> str:
    """The address the lab inventory gives node ``index``'s bond0 (ib_redundancy_bond_address)."""
    return f"10.253.0.{10 + index}"


def host_ifaces(index: int) -> tuple[str, str, str, str]:
    """Host-side veth names of node ``index`` (management, fabric 0, fabric 1, bond data path); <= 15
    chars."""
    return (f"cc{index:02d}m", f"cc{index:02d}i0", f"cc{index:02d}i1", f"cc{index:02d}b")


def setup_bridges() -> None:
    for br, addr in BRIDGES.items():
        if not link_exists(br):
            _ip("link", "add", "name", br, "type", "bridge", "stp_state", "0", "forward_delay", "0")
        have = _ip("-o", "-4", "addr", "show", "dev", br).stdout
        if addr.split("/")[0] + "/" not in have:
            _ip("addr", "add", addr, "dev", br)
        _ip("link", "set", br, "up")


def teardown_bridges() -> None:
    for br in BRIDGES:
        if link_exists(br):
            _ip("link", "del", br, check=False)


def attach(host_if: str, bridge: str) -> None:
    _ip("link", "set", host_if, "master", bridge)
    _ip("link", "set", host_if, "up")


def tbf_args(mbit: float) -> list[str]:
    kbit = max(8, int(round(mbit * 1000)))
    # burst: at least 128 KiB (tbf needs burst >= rate/HZ) and ~1 ms worth at high rates.
    burst = max(128 * 1024, int(kbit * 1000 / 8 / 1000))
    return ["tbf", "rate", f"{kbit}kbit", "burst", str(burst), "latency", "50ms"]


def shape(dev: str, mbit: float, netns_pid: int | None = None) -> None:
    """Limit what leaves ``dev`` to ``mbit`` (replace any previous limit). In a node's netns if a pid is
    given."""
    argv = ["tc", "qdisc", "replace", "dev", dev, "root", *tbf_args(mbit)]
    if netns_pid is not None:
        argv = ["nsenter", "-t", str(netns_pid), "-n", *argv]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=15)
    if proc.returncode != 0:
        raise NetError(f"{' '.join(argv)}: {proc.stderr.strip()}")


def _ipt(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["iptables", "-w", "10", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise NetError(f"iptables {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def isolation_rules() -> list[list[str]]:
    rules = []
    for br in BRIDGES:
        rules.append(["-i", br, "!", "-o", br, "-j", "DROP"])
        rules.append(["-o", br, "!", "-i", br, "-j", "DROP"])
    return rules


def setup_isolation() -> None:
    """FORWARD: drop anything entering a lab bridge from elsewhere or leaving it for elsewhere."""
    if _ipt("-n", "-L", IPT_CHAIN, check=False).returncode != 0:
        _ipt("-N", IPT_CHAIN)
    _ipt("-F", IPT_CHAIN)
    for rule in isolation_rules():
        _ipt("-A", IPT_CHAIN, *rule)
    if _ipt("-C", "FORWARD", "-j", IPT_CHAIN, check=False).returncode != 0:
        _ipt("-I", "FORWARD", "1", "-j", IPT_CHAIN)


def teardown_isolation() -> None:
    for _ in range(10):
        if _ipt("-D", "FORWARD", "-j", IPT_CHAIN, check=False).returncode != 0:
            break
    if _ipt("-n", "-L", IPT_CHAIN, check=False).returncode == 0:
        _ipt("-F", IPT_CHAIN, check=False)
        _ipt("-X", IPT_CHAIN, check=False)


def leftovers() -> dict[str, list[str]]:
    """Lab links and iptables rules that still exist (empty lists when the lab is fully down)."""
    links = []
    out = _ip("-o", "link", "show", check=False).stdout
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@")[0]
        if name in BRIDGES or (name.startswith("cc") and name[2:4].isdigit()):
            links.append(name)
    rules = [
        line
        for line in _ipt("-S", check=False).stdout.splitlines()
        if IPT_CHAIN in line or any(br in line for br in BRIDGES)
    ]
    return {"links": links, "iptables": rules}
