"""A fake transport for benchmarks/scale.py: N lab-profile nodes that answer the validators' commands and the
probes as healthy simulated nodes do, without a process, a connection or a lab.

The GPU outputs (nvidia-smi -q -x, topo -m, nvlink -s/-e), lspci and dmidecode are the lab simulator's own
renderers (clustercert_lab.sim.labsim) over each node's simulated hardware (clustercert_lab.hardware.build),
so every node has its own serials, UUIDs and GUIDs; the rest is the text a healthy lab node prints. The
probes answer as tests/test_probe_run.py's fake fabric does. Every call holds one of the node's sessions
(clustercert.collect.ssh.node_session) and the transport counts how many are open at once.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for p in (
    REPO / "src",
    REPO / "clustercert-lab" / "src",
    REPO / "clustercert-lab" / "src" / "clustercert_lab" / "sim",
):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import shlex  # noqa: E402

import yaml  # noqa: E402
from labsim import common as labcommon  # noqa: E402
from labsim import nvbw, nvsmi  # noqa: E402

from clustercert.collect import ssh  # noqa: E402
from clustercert.collect.ssh import ProbeRun  # noqa: E402
from clustercert.model.evidence import CommandResult, NodeEvidence  # noqa: E402
from clustercert.model.inventory import HostView, Inventory, InventoryVars  # noqa: E402
from clustercert.model.profile import load_profile  # noqa: E402
from clustercert_lab import hardware  # noqa: E402

# the tool outputs a healthy link gives, as the probe tests' fake fabric writes them (one definition)
sys.path.insert(0, str(REPO / "tests"))
from test_probe_run import FakeFabric, iperf3_out, perftest_out  # noqa: E402

from clustercert.probes.commands import UTIL_MARK  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"
# what the fixtures give where the lab simulator's renderer needs a lab node (all_reduce_perf, ib_write_lat)
NCCL_OUT = (FIXTURES / "nccl-tests" / "all_reduce_perf-old-format-2x-dgx-a100-k8s.txt").read_text()
LAT_SEP = "-" * 87
LAT_OUT = (f"{LAT_SEP}\n                    RDMA_Write Latency Test\n"
           f" Dual-port       : OFF\t\tDevice         : mlx5_0\n{LAT_SEP}\n"
           " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
           "t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]\n"
           " 2       10000         0.98           1.37         1.02               1.03           0.01       "
           f"     1.07                   1.32\n{LAT_SEP}\n")
_LABSIM = threading.Lock()  # the simulator's tools read their node from module state: one node at a time


def labsim_tool(tool, argv: list[str], hw: dict) -> str:
    """What a lab simulator tool (nvbw.nvbandwidth, nvbw.dcgmi) prints on a node with hardware ``hw``."""
    out: list[str] = []
    with _LABSIM:
        saved = labcommon.load_hw, labcommon.out, labcommon.loaded_driver_version
        labcommon.load_hw, labcommon.out = (lambda: hw), out.append
        labcommon.loaded_driver_version = lambda: hw["driver"]["version"]
        try:
            tool(argv)
        finally:
            labcommon.load_hw, labcommon.out, labcommon.loaded_driver_version = saved
    return "".join(out)


def inventory(n: int) -> Inventory:
    prof = load_profile("lab")
    hosts = {}
    for i in range(1, n + 1):
        name = f"node{i:05d}"
        a, b = divmod(i, 250)
        addrs = {"ib0": f"10.{100 + a}.{b}.1/16", "ib1": f"10.{200 + a % 50}.{b}.1/16"}
        hosts[name] = HostView(
            name,
            ["gpu"],
            InventoryVars(
                clustercert_profile="lab",
                clustercert_fabric_addresses=addrs,
                clustercert_cluster_name=f"fleet-{n}",
            ),
            prof,
            {"ansible_host": f"10.0.{a}.{b}"},
        )
    return Inventory(Path(f"/fleet/{n}/hosts.yml"), hosts, [])


class Fleet(FakeFabric):
    """The transport (tests/test_probe_run.py's fake fabric with these nodes): collect_node for the validators
    (and the probes' node phase), the probe functions for the pair rounds. ``peak``: the most sessions open at
    once, over every node."""

    def __init__(self, inv: Inventory, all_probes: bool = False):
        self.inv = inv
        # answer every node probe the lab profile plans (else the loopbacks only)
        self.all_probes = all_probes
        self.profile = yaml.safe_load(
            (REPO / "clustercert-lab/src/clustercert_lab/profiles/lab.yml").read_text()
        )
        self.index = {n: i for i, n in enumerate(inv.hosts, 1)}
        self.ip = {}
        for n, h in inv.hosts.items():
            for f, netdev in enumerate(("ib0", "ib1")):
                self.ip[h.vars.clustercert_fabric_addresses[netdev].split("/")[0]] = (n, f)
        self.lock = threading.Lock()
        self.open = self.peak = 0
        self.cpu_s = 0.0  # the fake's own CPU: rendering the nodes' outputs (each thread's, summed)
        self.runner_limit = ssh.runner_limit

    def spent(self, t0: float) -> None:
        dt = time.thread_time() - t0
        with self.lock:
            self.cpu_s += dt

    @contextlib.contextmanager
    def session(self, node: str):
        with ssh.node_session(node):
            with self.lock:
                self.open += 1
                self.peak = max(self.peak, self.open)
            try:
                yield
            finally:
                with self.lock:
                    self.open -= 1

    # -- the validators' commands ------------------------------------------------------------------------
    def outputs(self, node: str) -> dict[str, str]:
        hw = hardware.build(self.profile, node, self.index[node])
        gpus = hw["gpus"]
        sysfs = []
        for h in hw["hcas"]:
            sysfs.append(f"{h['name']}/fw_ver:{h['fw_ver']}")
            for p in h["ports"]:
                base = f"{h['name']}/ports/{p['port']}"
                sysfs += [
                    f"{base}/state:4: {p['state']}",
                    f"{base}/phys_state:5: {p['phys_state']}",
                    f"{base}/rate:{p['rate_gbit_per_s']} Gb/sec (4X NDR)",
                    f"{base}/link_layer:{p['link_layer']}",
                    f"{base}/sm_lid:0x{p['sm_lid']:x}",
                    f"{base}/lid:0x{p['lid']:x}",
                ]
                sysfs += [f"{base}/counters/{k}:{v}" for k, v in p["counters"].items()]
        ident = []
        for h in hw["hcas"]:
            ident += [f"{h['name']}/fw_ver:{h['fw_ver']}", f"{h['name']}/node_guid:{h['node_guid']}",
                      f"{h['name']}/board_id:{h['board_id']}", f"{h['name']}/hca_type:{h['hca_type']}"]
        links = [{"ifindex": 1, "ifname": "lo", "operstate": "UNKNOWN", "mtu": 65536}]
        addrs = []
        for f, netdev in enumerate(("ib0", "ib1")):
            addr = self.inv.hosts[node].vars.clustercert_fabric_addresses[netdev]
            links.append(
                {
                    "ifindex": 3 + f,
                    "ifname": netdev,
                    "operstate": "UP",
                    "mtu": 2044,
                    "master": "bond0",
                    "link_type": "infiniband",
                    "flags": ["BROADCAST", "MULTICAST", "SLAVE", "UP", "LOWER_UP"],
                }
            )
            addrs.append({"ifname": netdev, "operstate": "UP", "addr_info": [
                {"family": "inet", "local": addr.split("/")[0], "prefixlen": int(addr.split("/")[1])}]})
        svc = "LoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\n"
        drv = hw["driver"]["version"]
        xml = (nvsmi.q_xml(hw, gpus).replace("<persistence_mode>Disabled<", "<persistence_mode>Enabled<")
               .replace("<state>In Progress</state>", "<state>Completed</state>")
               .replace("<status>N/A</status>", "<status>Success</status>"))  # as a bootstrapped node's
        return {
            "nvsmi_xml": xml,
            "nvsmi_nvlink": nvsmi.nvlink_status(gpus),
            "nvsmi_nvlink_errors": nvsmi.nvlink_errors(gpus),
            "nvsmi_topo": nvsmi.topo(hw, gpus),
            "kernel_log": "[    0.000000] Linux version 6.1.0 (clustercert lab)\n"
            f"[    4.120000] nvidia: loading out-of-tree module taints kernel.\n"
            f"[    4.200000] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  {drv}\n",
            "svc_fabricmanager": svc,
            "svc_persistenced": svc,
            "driver_loaded": drv + "\n",
            "driver_installed": drv + "\n",
            "nccl_pkg": "2.26.2-1+cuda12.8",
            "lsmod": "Module                  Size  Used by\nnvidia_peermem         16384  0\n"
            "nvidia_uvm           1790  0\nnvidia_drm             12288  0\n"
            "nvidia_modeset       1724416  1 nvidia_drm\n"
            "nvidia              60563456  3 nvidia_uvm,nvidia_peermem,nvidia_modeset\n"
            "ib_ipoib              135168  0\nmlx5_ib               466944  0\n"
            "mlx5_core            2109440  1 mlx5_ib\n",
            "ofed_info": "OFED-internal-24.10-1.1.4:\n",
            "doca_pkg": "2.10.0",
            "ib_sysfs": "\n".join(sysfs) + "\n",
            "ip_link": json.dumps(links),
            "ip_addr": json.dumps(addrs),
            "nccl_conf": "NCCL_IB_HCA==mlx5_0,mlx5_1\nNCCL_SOCKET_IFNAME=bond0\n",
            "bonding": "/sys/class/net/bond0/bonding/mode:active-backup 1\n"
            "/sys/class/net/bond0/bonding/slaves:ib0 ib1\n"
            "/sys/class/net/bond0/bonding/primary:ib0\n"
            "/sys/class/net/bond0/bonding/active_slave:ib0\n"
            "/sys/class/net/bond0/bonding/miimon:100\n/sys/class/net/bond0/bonding/mii_status:up\n"
            "/sys/class/net/bond0/bonding/fail_over_mac:active 1\n"
            "/sys/class/net/ib0/bonding_slave/state:active\n"
            "/sys/class/net/ib1/bonding_slave/state:backup\n"
            "/sys/class/net/ib0/bonding_slave/mii_status:up\n"
            "/sys/class/net/ib1/bonding_slave/mii_status:up\n",
            "bonding_proc": "==> /proc/net/bonding/bond0 <==\nEthernet Channel Bonding Driver: v6.1.0\n\n"
            "Bonding Mode: fault-tolerance (active-backup) (fail_over_mac active)\n"
            "Primary Slave: ib0 (primary_reselect always)\nCurrently Active Slave: ib0\n"
            "MII Status: up\nMII Polling Interval (ms): 100\nUp Delay (ms): 0\n"
            "Down Delay (ms): 0\n\nSlave Interface: ib0\nMII Status: up\nSpeed: 200000 Mbps\n"
            "Duplex: full\nLink Failure Count: 0\nSlave queue ID: 0\n\nSlave Interface: ib1\n"
            "MII Status: up\nSpeed: 200000 Mbps\nDuplex: full\nLink Failure Count: 0\n"
            "Slave queue ID: 0\n",
            "runtime_config": "==> /etc/containerd/config.toml <==\nversion = 2\n"
            'imports = ["/etc/containerd/conf.d/*.toml"]\n'
            "==> /etc/containerd/conf.d/99-nvidia.toml <==\n"
            '[plugins."io.containerd.grpc.v1.cri".containerd]\n'
            '  default_runtime_name = "nvidia"\n',
            "cdi_stat": "/etc/cdi/nvidia.yaml 1764900000\nnvidia-smi 1764800000\n",
            "memlock": "8192\nDefaultLimitMEMLOCK=8388608\n",
            "hugepages": "0\n",
            "governor": "",
            "sysctl": "net.ipv4.conf.all.arp_announce = 2\nnet.ipv4.conf.all.arp_ignore = 1\n"
                      "net.ipv4.conf.all.rp_filter = 2\n",
            "chrony": "Reference ID    : 0A000001 (10.0.0.1)\nStratum         : 3\n"
            "System time     : 0.000012 seconds fast of NTP time\n"
            "Last offset     : +0.000004 seconds\nLeap status     : Normal\n",
            "pins": "",
            "pkg_versions": "",
            "pkg_holds": "",
            "lspci": "",
            "hca_identity": "\n".join(ident) + "\n",
            "dmi": "",
            "findmnt": json.dumps(
                {
                    "filesystems": [
                        {
                            "target": "/",
                            "source": "/dev/vda1",
                            "fstype": "ext4",
                            "options": "rw,relatime",
                            "avail": 50 << 30,
                        }
                    ]
                }
            ),
            "lsblk": json.dumps(
                {
                    "blockdevices": [
                        {"name": "vda", "type": "disk", "tran": None, "size": 100 << 30, "model": None}
                    ]
                }
            ),
        }

    def probe_outputs(self, node: str, commands: dict) -> dict[str, str]:
        """The node probes the lab simulator renders (nvbandwidth, dcgmi diag, nvidia-smi topo) on this node's
        hardware, all_reduce_perf from a fixture with the utilisation samples of 8 busy GPUs."""
        out: dict[str, str] = {}
        if not any(k in commands for k in ("nvbandwidth", "dcgmi_diag", "topo", "nccl")):
            return out  # the validators' collection, the probes' other phases
        hw = hardware.build(self.profile, node, self.index[node])
        if "nvbandwidth" in commands:
            out["nvbandwidth"] = labsim_tool(
                nvbw.nvbandwidth, shlex.split(commands["nvbandwidth"][0])[1:], hw
            )
        if "dcgmi_diag" in commands:
            level = str(self.profile.get("dcgm_diag", {}).get("level", 1))
            out["dcgmi_diag"] = labsim_tool(nvbw.dcgmi, ["diag", "-r", level], hw)
        if "topo" in commands:
            out["topo"] = nvsmi.topo(hw, hw["gpus"])
        if "nccl" in commands:
            out["nccl"] = (
                NCCL_OUT
                + f"{UTIL_MARK}\n"
                + "".join(f"{g}, {97 + g % 3}\n" for _ in range(3) for g in range(8))
            )
        return out

    def collect_node(self, node, conn, commands, **_):
        with self.session(node):
            t0 = time.thread_time()
            out = self.outputs(node) if any(k in commands for k in ("nvsmi_xml", "ib_sysfs")) else {}
            if self.all_probes:
                out |= self.probe_outputs(node, commands)
            results = {}
            for name, spec in commands.items():
                line = spec[0]
                if name.startswith("reach"):
                    text = "1 packets transmitted, 1 received"
                elif name.startswith(("loopback", "gdr")):
                    text = perftest_out(392.0)
                else:
                    text = out.get(name, "KILLED=")
                results[name] = CommandResult(0, text, "", False, 0.01, line)
            self.spent(t0)
            return NodeEvidence(node, True, results=results, seconds=0.5)

    # -- the probes (collect_many, start_server and stop_server: the fake fabric's)
    # ---------------------------
    def finish_probe(self, srv, client, timeout, **_):
        node, _conn, line = client
        with self.session(node):
            words = line.split()
            if words[0] == "iperf3":
                return ProbeRun(None, CommandResult(0, iperf3_out(26.0), "", False, 2.0, line))
            if words[0] == "ib_write_lat":
                return ProbeRun(None, CommandResult(0, LAT_OUT, "", False, 2.0, line))
            return ProbeRun(None, CommandResult(0, perftest_out(390.0), "", False, 2.0, line))

    def run_server_client(self, server, client, timeout, **_):
        """The pair probes launched from one node (NCCL across the pair under mpirun, the DDP smoke test):
        all_reduce_perf's output from a fixture; the rest as a tool that printed nothing."""
        node, _conn, line = client
        with self.session(node):
            text = NCCL_OUT if "all_reduce_perf" in line else ""
            return ProbeRun(None, CommandResult(0, text, "", False, 2.0, line))
