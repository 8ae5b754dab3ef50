"""Simulated perftest (ib_write_bw, ib_read_bw, ib_send_bw, *_lat), server and client.

Like perftest, the client really connects to the server over TCP (port 18515 by default) for the
out-of-band exchange of queue-pair data, so a missing server makes the client fail the way
perftest does. The reported figures are the node's healthy reference x health factors of both
ends (hw.json), never a measurement of the lab's virtual links. Latency is the healthy reference divided
by that factor. Between two nodes a slowed fabric link (link_slow) counts too.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time

from . import common
from .ibtools import find_hca, port_of

TITLES = {"ib_write_bw": "RDMA_Write BW Test", "ib_read_bw": "RDMA_Read BW Test",
          "ib_send_bw": "Send BW Test",
          "ib_write_lat": "RDMA_Write Latency Test", "ib_read_lat": "RDMA_Read Latency Test",
          "ib_send_lat": "Send Latency Test"}
SEP = "-" * 87


def _size(text: str) -> int:
    return int(text)


# the options that take a value, and the option names they set
TAKES = {"-d": "dev", "--ib-dev": "dev", "-i": "ib_port", "--ib-port": "ib_port", "-p": "port",
         "--port": "port", "-s": "size", "--size": "size", "-n": "iters", "--iters": "iters",
         "-D": "duration", "--duration": "duration", "-q": "qps", "--qp": "qps", "-x": "gid",
         "--gid-index": "gid",
         "-m": "mtu", "--mtu": "mtu", "-t": "tx", "--tx-depth": "tx"}
# the options that take none: the option name each sets, and to what
FLAGS = {"-a": ("all", True), "--all": ("all", True), "--report_gbits": ("gbits", True),
         "-b": ("bidir", True), "--bidirectional": ("bidir", True), "-R": ("rdma_cm", True),
         "--rdma_cm": ("rdma_cm", True), "--use_cuda": ("cuda", "0")}


def _long_value(o: dict, a: str) -> None:
    """--name=value."""
    k, v = a.split("=", 1)
    if k == "--use_cuda":
        o["cuda"] = v
    elif k in TAKES:
        o[TAKES[k]] = v


def parse_args(argv: list[str]) -> dict:
    o = {"dev": None, "ib_port": 1, "port": 18515, "size": None, "iters": None, "all": False,
         "gbits": False, "bidir": False, "duration": None, "host": None, "qps": 1, "cuda": None,
         "rdma_cm": False}
    i = 0
    while i < len(argv):
        a = argv[i]
        if "=" in a and a.startswith("--"):
            _long_value(o, a)
        elif a in TAKES and i + 1 < len(argv):
            o[TAKES[a]] = argv[i + 1]
            i += 1
        elif a in FLAGS:
            key, value = FLAGS[a]
            o[key] = value
        elif not a.startswith("-"):
            o["host"] = a
        i += 1
    for k in ("ib_port", "port", "qps"):
        o[k] = int(o[k])
    return o


def _factor(hw: dict, hca: dict, port: dict) -> float:
    h = hw["health"]
    f = h.get("node_factor", 1.0) * h.get("hca_factor", {}).get(hca["name"], 1.0)
    f *= h.get("fabric_factor", {}).get(str(port.get("fabric", 0)), 1.0)
    rated = port.get("rated_gbit_per_s", port["rate_gbit_per_s"]) or 1
    return f * min(1.0, port["rate_gbit_per_s"] / rated)


GDR_BOUNCE = 0.3  # gdr_disabled: GPU memory crosses the CPU's root complex instead of the PCIe switch


def gdr_available(hw: dict) -> bool:
    """GPUDirect RDMA works on this node: nvidia_peermem is loaded and nothing keeps it off (gdr_disabled)."""
    return "nvidia_peermem" in common.modules() and hw["health"].get("gdr", True)


def _cuda_lines(hw: dict, gpu: dict) -> list[str]:
    """What perftest prints when it puts its buffer on a GPU (--use_cuda)."""
    bus = gpu["bus_id"][9:16].lower()
    return ["initializing CUDA", "Listing all CUDA devices in system:",
            f"CUDA device {gpu['index']}: PCIe address is {bus[:5]}", "",
            f"Picking device No. {gpu['index']}",
            f"[pid = {os.getpid()}, dev = {gpu['index']}] device name = [{gpu['name']}]",
            "creating CUDA Ctx", "making it the current CUDA Ctx",
            "cuMemAlloc() of a 131072 bytes GPU buffer",
            f"allocated GPU buffer address at {0x7f2a4c000000 + gpu['index'] * 0x200000:016x} "
            "pointer=0x7f2a4c000000"]


def _link_factor(hw: dict, port: dict) -> float:
    """link_slow: the node's link to its fabric is slowed. It carries traffic to other nodes only; a
    loopback (server and client on the same node) stays inside the HCA."""
    return hw["health"].get("link_factor", {}).get(str(port.get("fabric", 0)), 1.0)


def _hexid(*parts) -> int:
    return int(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:8], 16)


def _header(tool: str, o: dict, hca: dict, port: dict) -> list[str]:
    lat = tool.endswith("_lat")
    lines = [SEP, f"                    {TITLES[tool]}",
             f" Dual-port       : OFF\t\tDevice         : {hca['name']}",
             f" Number of qps   : {o['qps']}\t\tTransport type : IB",
             " Connection type : RC\t\tUsing SRQ      : OFF",
             f" PCIe relax order: {'OFF' if lat else 'ON'}\t\tLock-free      : OFF",
             " ibv_wr* API     : ON\t\tUsing Enhanced Reorder      : OFF",
             f" TX depth        : {1 if lat else 128}"]
    if not lat:
        lines += [" CQ Moderation   : 1", " CQE Poll Batch  : Dynamic"]
    lines += [" Mtu             : 4096[B]", " Link type       : IB",
              f" Max inline data : {'220' if lat else '0'}[B]",
              " rdma_cm QPs\t : OFF", " Data ex. method : Ethernet", SEP]
    return lines


def _addr(lid: int, seed: int) -> str:
    return (f"LID {lid:#04x} QPN {seed & 0xffff:#06x} PSN {seed >> 8 & 0xffffff:#08x} RKey 0x1fff00 "
            f"VAddr 0x{(seed * 4096) & 0xffffffffffff:014x}")


def _bw_rows(o: dict, peak_gbit: float, node: str) -> list[tuple[int, int, float, float, float]]:
    if o["all"]:
        sizes = [2 ** k for k in range(1, 24)]
    else:
        sizes = [int(o["size"] or 65536)]
    iters = int(o["iters"] or 5000)
    rows = []
    for s in sizes:
        scale = min(1.0, (s / 65536.0) ** 0.5) if s < 65536 else 1.0
        avg = peak_gbit * scale * (2 if o["bidir"] else 1)
        pk = avg + (_hexid(node, s) % 5) / 100.0
        rate = avg * 1e9 / 8 / s / 1e6
        rows.append((s, iters, pk, avg, rate))
    return rows


def _fmt_bw(v_gbit: float, gbits: bool) -> float:
    return v_gbit if gbits else v_gbit * 1e9 / 8 / 1048576


def _report_bw(tool: str, o: dict, hca: dict, port: dict, rows, local: str, remote: str) -> str:
    unit = "Gb/sec" if o["gbits"] else "MB/sec"
    lines = _header(tool, o, hca, port)
    lines += [f" local address: {local}", f" remote address: {remote}", SEP,
              f" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]"]
    for s, it, pk, avg, rate in rows:
        lines.append(f" {s:<10} {it:<10}       {_fmt_bw(pk, o['gbits']):>8.2f}           "
                     f"{_fmt_bw(avg, o['gbits']):>8.2f} \t\t     {rate:.6f}")
    lines.append(SEP)
    return "\n".join(lines) + "\n"


def _report_lat(tool: str, o: dict, hca: dict, port: dict, typ: float, local: str, remote: str) -> str:
    lines = _header(tool, o, hca, port)
    s = int(o["size"] or 2)
    it = int(o["iters"] or 1000)
    lines += [f" local address: {local}", f" remote address: {remote}", SEP,
              " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
              "t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ",
              f" {s:<7} {it:<10}    {typ - 0.04:.2f}           {typ + 0.35:.2f}         {typ:.2f}     \t"
              f"       {typ + 0.01:.2f}        \t0.01   \t\t{typ + 0.05:.2f}    \t\t{typ + 0.3:.2f}   ",
              SEP]
    return "\n".join(lines) + "\n"


def usage(tool: str, hw: dict) -> str:
    """perftest's usage text (its usage() in src/perftest_parameters.c, the options the simulator takes), with
    the --use_cuda lines a perftest built with CUDA prints: the lab's perftest is such a build on a node with
    GPUs (its CUDA memory is the simulated GPUs')."""
    lines = ["Usage:", f"  {tool}            start a server and wait for connection",
             f"  {tool} <host>     connect to server at <host>", "", "Options:",
             "  -a, --all  Run sizes from 2 till 2^23",
             "  -d, --ib-dev=<dev>  Use IB device <dev> (default first device found)",
             "  -D, --duration  Run test for a customized period of seconds.",
             "  -F, --CPU-freq  Do not show a warning even if cpufreq_ondemand module is loaded, and "
             "cpu-freq is not on max.",
             "  -h, --help  Show this help screen.",
             "  -i, --ib-port=<port>  Use port <port> of IB device (default 1)",
             "  -n, --iters=<iters>  Number of exchanges (at least 5, default 5000)",
             "  -p, --port=<port>  Listen on/connect to port <port> (default 18515)",
             "  -V, --version  Display version number", "",
             "      --report_gbits  Report Max/Average BW of test in Gbit/sec (instead of MiB/sec)"]
    if hw.get("gpus"):
        lines += ["      --use_cuda=<cuda device id> Use CUDA specific device for GPUDirect RDMA testing",
                  "      --use_cuda_bus_id=<cuda full BUS id> Use CUDA specific device, based on its full "
                  "PCIe address, for GPUDirect RDMA testing"]
    return "\n".join(lines) + "\n\n"


def _gpu_buffer(hw: dict, o: dict, me: dict) -> bool:
    """--use_cuda: the buffer on a GPU, which GPUDirect RDMA registers with the HCA (through the CPU's root
    complex, slower, where GPUDirect is not available); False where it cannot be (said)."""
    gpus = {str(g["index"]): g for g in common.present_gpus(hw)}
    gpu = gpus.get(str(o["cuda"]).strip())
    if gpu is None or common.loaded_driver_version() is None:
        common.err(f"No CUDA device {o['cuda']} found (cuInit failed or invalid device ordinal)\n"
                   " Couldn't create CUDA context\n")
        return False
    if "nvidia_peermem" not in common.modules():
        common.out("\n".join(_cuda_lines(hw, gpu)) + "\n")
        common.err(" Couldn't allocate MR\n failed to create mr\n Failed to create MR\n")
        return False
    common.out("\n".join(_cuda_lines(hw, gpu)) + "\n")
    if not gdr_available(hw):
        me["factor"] *= GDR_BOUNCE
    return True


def main(tool: str, argv: list[str]) -> int:
    hw = common.load_hw()
    common.hang_if_configured(tool, hw)
    if "--version" in argv or "-V" in argv:
        common.out(f"Version: 6.22 ({common.BANNER})\n")
        return 0
    if "--help" in argv or "-h" in argv:
        common.out(usage(tool, hw))
        return 0
    o = parse_args(argv)
    hca = find_hca(hw, o["dev"])
    if hca is None:
        common.err(f" IB device {o['dev']} not found\n Unable to find the Infiniband/RoCE device\n")
        return 1
    port = port_of(hca, o["ib_port"])
    if port is None:
        common.err(f" Invalid port {o['ib_port']} requested\n")
        return 1
    if port["state"] != "ACTIVE":
        common.err(f" Port number {o['ib_port']} state is {port['state'].capitalize()}\n"
                   " Couldn't set the link layer\n Couldn't get context for the device\n")
        return 1
    me = {"factor": _factor(hw, hca, port), "link_factor": _link_factor(hw, port), "lid": port["lid"],
          "seed": _hexid(hw["node"], hca["name"], time.time()),
          "tool": tool, "bidir": o["bidir"], "all": o["all"], "size": o["size"], "iters": o["iters"],
          "node": hw["node"]}
    if o["cuda"] is not None and not _gpu_buffer(hw, o, me):
        return 1
    if o["host"] is None:
        return _server(tool, o, hw, hca, port, me)
    return _client(tool, o, hw, hca, port, me)


def _exchange_send(sock: socket.socket, data: dict) -> None:
    sock.sendall((common.dumps(data) + "\n").encode())


def _exchange_recv(sock: socket.socket, timeout: float = 60) -> dict:
    sock.settimeout(timeout)
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("peer closed")
        buf += chunk
    return common.loads(buf.decode())


def _result(tool: str, o: dict, hw: dict, hca: dict, port: dict, me: dict, peer: dict, server: bool) -> str:
    factor = min(me["factor"], peer["factor"])
    if peer.get("node") != me["node"]:
        factor = min(me["factor"] * me["link_factor"], peer["factor"] * peer.get("link_factor", 1.0))
    local = _addr(me["lid"], me["seed"])
    remote = _addr(peer["lid"], peer["seed"])
    if tool.endswith("_lat"):
        typ = hw["performance"]["ib_write_lat_usec"]["value"] / max(factor, 0.05)
        return _report_lat(tool, o, hca, port, typ, local, remote)
    peak = hw["performance"]["ib_write_bw_gbit_per_s"]["value"] * factor
    if tool == "ib_read_bw":
        peak *= 0.985
    rows = _bw_rows(o, peak, hw["node"])
    total_bytes = sum(s * it for s, it, *_ in rows)
    time.sleep(min(3.0, total_bytes * 8 / max(peak * 1e9, 1e6)))
    return _report_bw(tool, o, hca, port, rows, local, remote)


def _server(tool: str, o: dict, hw: dict, hca: dict, port: dict, me: dict) -> int:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        srv.bind(("0.0.0.0", o["port"]))
    except OSError:
        common.err(f" Couldn't bind to port {o['port']}\n Unable to open file descriptor for socket "
                   "connection Unable to init the socket connection\n")
        return 1
    srv.listen(1)
    common.out("\n************************************\n* Waiting for client to connect... *\n"
               "************************************\n")
    conn, _addr_ = srv.accept()
    with conn:
        try:
            peer = _exchange_recv(conn)
            _exchange_send(conn, me)
            o = dict(o, all=peer.get("all", o["all"]), size=peer.get("size") or o["size"],
                     iters=peer.get("iters") or o["iters"], bidir=peer.get("bidir", o["bidir"]))
            text = _result(tool, o, hw, hca, port, me, peer, True)
            _exchange_recv(conn, timeout=600)  # the client says when it is done
        except (OSError, ValueError, ConnectionError):
            common.err(" Failed to exchange data between server and clients\n")
            return 1
    common.out(text)
    return 0


def _client(tool: str, o: dict, hw: dict, hca: dict, port: dict, me: dict) -> int:
    host = o["host"]
    deadline = time.time() + 2.0
    while True:
        try:
            sock = socket.create_connection((host, o["port"]), timeout=5)
            break
        except OSError:
            if time.time() > deadline:
                common.err(f"Couldn't connect to {host}:{o['port']}\n"
                           "Unable to open file descriptor for socket connection Unable to init the socket "
                           "connection\n")
                return 1
            time.sleep(0.05)
    with sock:
        try:
            _exchange_send(sock, me)
            peer = _exchange_recv(sock)
            text = _result(tool, o, hw, hca, port, me, peer, False)
            _exchange_send(sock, {"done": True})
        except (OSError, ValueError, ConnectionError):
            common.err(" Failed to exchange data between server and clients\n")
            return 1
    common.out(text)
    return 0

