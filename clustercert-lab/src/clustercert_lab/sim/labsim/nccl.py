"""Simulated nccl-tests (all_reduce_perf and friends), -b/-e/-f/-i/-g honoured, on one node or as
the ranks of an mpirun/srun launch across nodes.

busbw at sizes >= 1 GiB is the profile's healthy figure x the node's health factors; below it the
curve falls off the way NVLS all_reduce does on small messages.

Under a launcher (OMPI_COMM_WORLD_RANK/SIZE, or SLURM_PROCID/NTASKS) every process drives -g GPUs
of its node (local rank L: GPUs L*g .. L*g+g-1, as the real tool picks them) and, like the real
tool, only process 0 prints the table, one "Rank" line per GPU. Ranks > 0 connect
to rank 0 over TCP (like the simulated perftest's out-of-band exchange) and send their node's health;
rank 0 reports the figure the slowest part allows: each node's NVLink figure and, across nodes, the
compute rails x the slowest end's per-rail rate (health factors and link_slow of EITHER node), and
tells the ranks when it is done. NCCL_IB_HCA selects the rails as NCCL's IB transport reads it
(ib_hca_selected). Faults: nccl_one_host (any rank's node) puts every rank on rank 0's host; nccl_scale_slow
scales a run across more than two nodes. Rank 0's address comes from the launcher: OpenMPI's
OMPI_MCA_orte_hnp_uri (mpirun runs where rank 0 runs), Slurm's SLURM_LAUNCH_NODE_IPADDR or the first
node of SLURM_STEP_NODELIST. Nothing is measured on the lab's virtual links.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time

from . import common
from .perftest import _exchange_recv, _exchange_send, _factor, _link_factor, gdr_available

BUS_FACTOR = {  # busbw = algbw * f(n), nccl-tests PERFORMANCE.md
    "all_reduce_perf": lambda n: 2 * (n - 1) / n,
    "all_gather_perf": lambda n: (n - 1) / n,
    "reduce_scatter_perf": lambda n: (n - 1) / n,
    "alltoall_perf": lambda n: (n - 1) / n,
    "broadcast_perf": lambda n: 1.0,
    "reduce_perf": lambda n: 1.0,
    "sendrecv_perf": lambda n: 1.0,
}
HAS_ROOT = {"broadcast_perf", "reduce_perf"}
HAS_REDOP = {"all_reduce_perf", "reduce_scatter_perf", "reduce_perf"}
SATURATION = 1 << 30


def _bytes(text: str) -> int:
    t = text.strip().upper()
    mult = 1
    if t and t[-1] in "KMGT":
        mult = 1024 ** ("KMGT".index(t[-1]) + 1)
        t = t[:-1]
    return int(float(t) * mult)


def _cuda_fail(node: str, msg: str, line: int = 1065) -> str:
    return (f"{node}: Test CUDA failure common.cu:{line} '{msg}'\n"
            f" .. {node} pid {os.getpid()}: Test failure common.cu:1159\n")


def busbw_curve(peak: float, size: int) -> float:
    if size >= SATURATION:
        return peak
    return peak * (size / SATURATION) ** 0.35


RANK_PORT = int(os.environ.get("CLUSTERCERT_LAB_NCCL_RANK_PORT") or 18600)  # rank 0 listens here
INTER_NODE_EFFICIENCY = 0.96  # busbw across nodes vs the rails' line rate (NCCL over IB, large messages)


def launch_env(env=None) -> dict | None:
    """This process's place in an mpirun/srun launch, or None when not launched by one."""
    env = os.environ if env is None else env

    def num(*names, default=None):
        for n in names:
            v = env.get(n, "")
            digits = v[:len(v) - len(v.lstrip("0123456789"))]  # its leading digits
            if digits:
                return int(digits)
        return default

    rank = num("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
    size = num("OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "SLURM_NPROCS")
    if rank is None or size is None:
        return None
    local_rank = num("OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", default=0)
    local_size = num("OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE",
                     default=size)
    nodes = num("OMPI_MCA_orte_num_nodes", "SLURM_STEP_NUM_NODES", "SLURM_NNODES",
                default=max(1, size // max(1, local_size)))
    return {"rank": rank, "size": size, "local_rank": local_rank, "local_size": local_size, "nodes": nodes,
            "root": root_addresses(env)}


def root_addresses(env) -> list[str]:
    """Where rank 0 runs, as the launcher says."""
    out = []
    for entry in env.get("OMPI_MCA_orte_hnp_uri", "").split(";")[1:]:
        if entry.startswith("tcp://"):
            out += entry[len("tcp://"):].rpartition(":")[0].split(",")
    if env.get("SLURM_LAUNCH_NODE_IPADDR"):
        out.append(env["SLURM_LAUNCH_NODE_IPADDR"])
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
    # the first node: "n1,n2" -> n1; "node[01-04,07]" -> node01
    name, bracket, rest = nodelist.split(",")[0].partition("[")
    if name:
        out.append(name + (rest[:len(rest) - len(rest.lstrip("0123456789"))] if bracket else ""))
    return [a for a in out if a]


def ib_hca_selected(names: list[str], spec: str | None) -> list[str]:
    """The HCAs of ``names`` NCCL's IB transport uses under NCCL_IB_HCA=``spec``, as it reads the variable: a
    comma-separated list of HCA[:port] entries, matched as name prefixes; a leading "=" makes them exact
    names, a leading "^" excludes them instead (both: "^="). Unset or empty: every HCA."""
    spec = (spec or "").strip()
    if not spec:
        return list(names)
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    wanted = [e.split(":")[0].strip() for e in spec.split(",") if e.strip()]

    def hit(name: str) -> bool:
        return any(name == w if exact else name.startswith(w) for w in wanted)

    return [n for n in names if hit(n) != exclude]


def _rail_rates(hw: dict, env=None) -> list[float]:
    """GB/s each compute rail of this node carries to other nodes (health factors and link_slow); under
    NCCL_IB_HCA only the rails it selects."""
    env = os.environ if env is None else env
    chosen = set(ib_hca_selected([h["name"] for h in hw.get("hcas", [])], env.get("NCCL_IB_HCA")))
    rates = []
    for hca in hw.get("hcas", []):
        if hca["name"] not in chosen:
            continue
        port = hca["ports"][0]
        up = port.get("state") == "ACTIVE"
        rates.append(port["rated_gbit_per_s"] / 8 * _factor(hw, hca, port) * _link_factor(hw, port)
                     if up else 0.0)
    return rates


def _options(argv: list[str]) -> dict | None:
    """nccl-tests' options, by their one-letter keys, defaults filled in; None: --version was asked."""
    o = {"b": "33554432", "e": "33554432", "f": None, "i": None, "g": "1", "t": "1", "n": "20", "w": "5",
         "c": "1", "G": "0", "d": "float", "o": "sum"}
    longs = {"--minbytes": "b", "--maxbytes": "e", "--stepfactor": "f", "--stepbytes": "i", "--ngpus": "g",
             "--nthreads": "t", "--iters": "n", "--warmup_iters": "w", "--check": "c", "--cudagraph": "G",
             "--datatype": "d", "--op": "o"}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--version", "-V"):
            return None
        key = None
        val = None
        if a.startswith("--") and "=" in a:
            k, val = a.split("=", 1)
            key = longs.get(k)
        elif a in longs:
            key = longs[a]
        elif len(a) == 2 and a[0] == "-" and a[1] in o:
            key = a[1]
        if key is not None:
            if val is None and i + 1 < len(argv):
                val = argv[i + 1]
                i += 1
            o[key] = val
        i += 1
    return o


def main(tool: str, argv: list[str]) -> int:
    hw = common.load_hw()
    common.hang_if_configured(tool, hw)
    launch = launch_env()
    if tool not in BUS_FACTOR:
        tool = "all_reduce_perf"
    o = _options(argv)
    if o is None:
        common.out(f"nccl-tests 2.14.1 ({common.BANNER})\n")
        return 0
    minb, maxb = _bytes(o["b"]), _bytes(o["e"])
    ngpus = int(o["g"])
    node = socket.gethostname()
    ranked = launch is not None and launch["size"] > 1
    nccl_version = _nccl_version()
    if nccl_version is None:
        common.err(f"{tool}: error while loading shared libraries: libnccl.so.2: cannot open shared object "
                   "file: No such file or directory\n")
        return 127
    if common.loaded_driver_version() is None:
        common.out(_cuda_fail(node, "no CUDA-capable device is detected"))
        return 1
    gpus = common.present_gpus(hw)
    if ((launch["local_rank"] + 1) * ngpus if ranked else ngpus) > len(gpus):
        common.out(_cuda_fail(node, "invalid device ordinal"))
        return 1
    if hw.get("nvswitches") and not common.fabricmanager_running():
        common.out(_cuda_fail(node, "system not yet initialized"))
        return 1
    if ranked:
        return _ranked(tool, o, hw, hw.get("node") or node, launch, ngpus, minb, maxb, nccl_version)
    pid = os.getpid()
    devices = [{"rank": r, "pid": pid, "node": node, "gpu": r, "bus": _bus(gpus[r]), "name": gpus[r]["name"]}
               for r in range(ngpus)]
    lines = _head(tool, o, ngpus, minb, maxb, devices, nccl_version)
    h = hw["health"]
    peak = hw["performance"]["nccl_allreduce_busbw_gbyte_per_s"]["value"] * h.get("node_factor", 1.0) * \
        h.get("nccl_factor", 1.0)
    active = min((g["nvlink"]["links"] - len(set(g["nvlink"]["down"]))) / g["nvlink"]["links"]
                 for g in gpus[:ngpus]) if ngpus else 1.0
    peak *= active
    fac = BUS_FACTOR[tool](ngpus) if ngpus > 0 else 0.0
    marker = common.mark_busy([g["index"] for g in gpus[:ngpus]])
    try:
        return _run(tool, o, node, lines, _sizes(o, minb, maxb), peak, fac, _wsize(o), ngpus)
    finally:
        common.clear_busy(marker)


def _bus(g: dict) -> str:
    return g["bus_id"][4:].lower()[:-2]


def _wsize(o: dict) -> int:
    d = o["d"]
    if d in ("float", "int32", "uint32", "int", "float32"):
        return 4
    return 8 if "64" in d or d == "double" else 2


def _sizes(o: dict, minb: int, maxb: int) -> list[int]:
    sizes, s = [], minb
    while s <= maxb and len(sizes) < 64:
        sizes.append(s)
        if o["i"] is not None:
            s += _bytes(o["i"])
        else:
            f = int(o["f"] or 2)
            if f <= 1:
                break
            s *= f
    return sizes or [minb]


def _head(tool: str, o: dict, ngpus, minb: int, maxb: int, devices: list[dict],
          nccl_version: str) -> list[str]:
    step_desc = f"{_bytes(o['i'])}(bytes)" if o["i"] is not None else f"{int(o['f'] or 2)}(factor)"
    lines = [f"# Collective test starting: {tool}",
             f"# nThread {o['t']} nGpus {ngpus} minBytes {minb} maxBytes {maxb} step: {step_desc} warmup "
             f"iters: {o['w']} "
             f"iters: {o['n']} agg iters: 1 validation: {o['c']} graph: {o['G']}",
             "#", "# Using devices"]
    for d in devices:
        lines.append(f"#  Rank {d['rank']:>2} Group  0 Pid {d['pid']:>6} on {d['node']:>10} device "
                     f"{d['gpu']:>2} "
                     f"[{d['bus']}] {d['name']}")
    lines.append(f"NCCL version {nccl_version}")
    lines += ["#",
              "#                                                              out-of-place                   "
              "    in-place          ",
              "#       size         count      type   redop    root     time   algbw   busbw #wrong     time "
              "  algbw   busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us) "
              " (GB/s)  (GB/s)       "]
    return lines


def _run(tool: str, o: dict, node: str, lines: list[str], sizes: list[int], peak: float, fac: float,
         wsize: int, ngpus: int) -> int:
    total = 0.0
    took = 0.0
    check = "N/A" if o["c"] == "0" else "0"
    iters = int(o["n"]) + int(o["w"])
    for s in sizes:
        count = s // wsize
        if ngpus > 1 and fac > 0:
            bus = busbw_curve(peak, s)
            alg = bus / fac
            t_us = s / (alg * 1e3)
        else:
            bus = 0.0
            alg = s / 1e3 / 5.0
            t_us = s / (alg * 1e3)
        jitter = (int(hashlib.sha256(f"{node}{s}".encode()).hexdigest()[:4], 16) % 7) / 1000.0
        ip_t = t_us * (1 + jitter)
        ip_alg = alg / (1 + jitter)
        ip_bus = bus / (1 + jitter)
        redop = o["o"] if tool in HAS_REDOP else "none"
        root = "0" if tool in HAS_ROOT else "-1"
        lines.append(f"{s:>12}  {count:>12}  {o['d']:>8}  {redop:>6}  {root:>6}  {_t(t_us):>7}  {alg:>6.2f}  "
                     f"{bus:>6.2f}  "
                     f"{check:>5}  {_t(ip_t):>7}  {ip_alg:>6.2f}  {ip_bus:>6.2f}  {check:>5}")
        total += bus
        # about the time the size takes (warm-up + timed iterations, out-of-place and in-place), capped
        # so that a sweep to 8G takes ~2 s: long enough for nvidia-smi -lms to sample the GPUs busy
        took += min(0.25, max(0.02, 2 * iters * t_us / 1e6))
    # one sleep for the sweep (the report is printed whole at the end anyway): on a host whose CPUs
    # every lab node shares, one wake-up per size would add the host's scheduling delay 30 times
    time.sleep(took)
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {total / len(sizes):.6g} ", "#",
              f"# Collective test concluded: {tool}", ""]
    common.out("\n".join(lines))
    return 0


def _t(us: float) -> str:
    if us >= 10000:
        return f"{us:.0f}"
    if us >= 100:
        return f"{us:.1f}"
    return f"{us:.2f}"


def _nccl_version() -> str | None:
    """The installed libnccl2 (2.26.2-1+cuda12.8 -> 2.26.2+cuda12.8), as the library would say."""
    v = os.environ.get("CLUSTERCERT_LAB_NCCL_VERSION") or common.dpkg_version("libnccl2")
    if not v:
        return None
    base, _, rest = v.partition("-")
    cuda = rest.partition("+")[2]
    return f"{base}+{cuda}" if cuda else base


def _node_info(hw: dict, node: str, first: int, ngpus: int) -> dict:
    """What one rank tells rank 0: its node, its GPUs (first .. first+ngpus-1 of the node), the NVLink
    figure the slowest of them allows and its node's rails."""
    gpus = common.present_gpus(hw)
    h = hw["health"]
    peak = hw["performance"]["nccl_allreduce_busbw_gbyte_per_s"]["value"] * h.get("node_factor", 1.0) * \
        h.get("nccl_factor", 1.0)
    mine = gpus[first:first + ngpus]
    if mine:
        peak *= min((g["nvlink"]["links"] - len(set(g["nvlink"]["down"]))) / g["nvlink"]["links"]
                    for g in mine)
    return {"node": node, "pid": os.getpid(), "peak": peak, "rails": _rail_rates(hw),
            "one_host": bool(h.get("nccl_one_host")), "scale": float(h.get("nccl_scale_factor", 1.0)),
            "devices": [{"gpu": first + k, "bus": _bus(g), "name": g["name"]} for k, g in enumerate(mine)]}


def nearest_gpus(hw: dict) -> dict[int, int]:
    """GPU index -> the index of the HCA nearest it (PIX in the simulated topo -m: the first GPU of each
    HCA's NUMA node, in order), for the GPUs that have one."""
    gpus, near = hw.get("gpus", []), {}
    for i, h in enumerate(hw.get("hcas", [])):
        cand = [g["index"] for g in gpus if g["numa_node"] == h.get("numa_node") and g["index"] not in near]
        if cand:
            near[cand[0]] = i
    return near


def info_lines(hw: dict, launch: dict, first: int, ngpus: int) -> list[str]:
    """NCCL_DEBUG=INFO: what NCCL prints of its network and of each connection of this process's GPUs. The
    ring enters and leaves the node at the GPU nearest each HCA (NET/IB, with GDRDMA where GPUDirect RDMA
    works on this node); the node's other GPUs reach their neighbours over NVLink (P2P/CUMEM)."""
    if os.environ.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        return []
    host, pid = socket.gethostname(), os.getpid()
    hcas = hw.get("hcas", [])
    gdr = gdr_available(hw)
    near = nearest_gpus(hw)
    total = launch["size"] * ngpus
    nics = " ".join(f"[{i}]{h['name']}:{h['ports'][0]['port']}/IB" for i, h in enumerate(hcas))
    out = []
    for k, g in enumerate(common.present_gpus(hw)[first:first + ngpus]):
        idx, r = g["index"], launch["rank"] * ngpus + k
        pre = f"{host}:{pid}:{pid + 60 + idx} [{idx}] NCCL INFO "
        out += [pre + f"NET/IB : Using {nics} ; OOB eth0:<0>", pre + "Using network IB"]
        if not gdr:
            out += [pre + f"NET/IB : GPU Direct RDMA Disabled for HCA {i} '{h['name']}'" for i,
                    h in enumerate(hcas)]
        if idx in near:
            n, peer, prev = near[idx], (r + ngpus) % total, (r - ngpus) % total
            flag = "/GDRDMA" if gdr else ""
            for ch in (2 * n, 2 * n + 1):
                out += [pre + f"Channel {ch:02d}/0 : {prev}[{idx}] -> {r}[{idx}] [receive] via "
                              f"NET/IB/{n}{flag}",
                        pre + f"Channel {ch:02d}/0 : {r}[{idx}] -> {peer}[{idx}] [send] via NET/IB/{n}{flag}"]
        elif k + 1 < ngpus:
            out.append(pre + f"Channel 00/0 : {r}[{idx}] -> {r + 1}[{idx + 1}] via P2P/CUMEM")
    return out


def _ranked(tool: str, o: dict, hw: dict, node: str, launch: dict, ngpus: int, minb: int, maxb: int,
            nccl_version: str) -> int:
    """One process of a launch, driving ``ngpus`` GPUs of its node (-g; local rank L drives GPUs
    L*ngpus ..); process 0 gathers and prints, numbering the GPUs as NCCL ranks process by process."""
    first = launch["local_rank"] * ngpus
    me = dict(_node_info(hw, node, first, ngpus), rank=launch["rank"])
    debug = info_lines(hw, launch, first, ngpus)
    if debug:  # NCCL prints them while it connects, before any result
        common.out("\n".join(debug) + "\n")
    marker = common.mark_busy([g["index"] for g in common.present_gpus(hw)[first:first + ngpus]])
    try:
        if launch["rank"] == 0:
            return _root(tool, o, node, launch, me, ngpus, minb, maxb, nccl_version)
        return _member(node, launch, me)
    finally:
        common.clear_busy(marker)


def _fail(node: str, what: str) -> int:
    common.out(f"{node}: Test NCCL failure common.cu:1005 'remote process exited or there was a network "
               f"error' ({what})\n .. {node} pid {os.getpid()}: Test failure common.cu:1159\n")
    return 1


def _member(node: str, launch: dict, me: dict) -> int:
    deadline = time.time() + 30
    sock = None
    while sock is None:
        for addr in launch["root"] or ["127.0.0.1"]:
            try:
                sock = socket.create_connection((addr, RANK_PORT), timeout=2)
                break
            except OSError:
                continue
        if sock is None:
            if time.time() > deadline:
                return _fail(node, f"cannot reach rank 0 at {', '.join(launch['root']) or '?'}:{RANK_PORT}")
            time.sleep(0.05)
    with sock:
        try:
            _exchange_send(sock, me)
            _exchange_recv(sock, timeout=3600)  # rank 0 says when the collective is over
        except (OSError, ValueError, ConnectionError):
            return _fail(node, "rank 0 went away")
    return 0


def _cluster_peak(peers: list[dict]) -> float:
    """The bus bandwidth a run across ``peers`` reaches: the slowest rank's own, and across nodes the
    slowest rails' (and, across more than two nodes, the slowest path's scale)."""
    nodes: dict[str, dict] = {}
    for p in peers:
        nodes.setdefault(p["node"], p)
    peak = min(p["peak"] for p in peers)
    if len(nodes) > 1:
        n_rails = min(len(p["rails"]) for p in nodes.values())
        per_rail = [min(p["rails"][i] for p in nodes.values()) for i in range(n_rails)]
        peak = min(peak, n_rails * min(per_rail, default=0.0) * INTER_NODE_EFFICIENCY)
    if len(nodes) > 2:  # nccl_scale_slow: a path only a run across more than two nodes crosses
        peak *= min(p.get("scale", 1.0) for p in nodes.values())
    return peak


def _root(tool: str, o: dict, node: str, launch: dict, me: dict, ngpus: int, minb: int, maxb: int,
          nccl_version: str) -> int:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        srv.bind(("0.0.0.0", RANK_PORT))
    except OSError:
        return _fail(node, f"cannot listen on port {RANK_PORT}")
    srv.listen(256)
    srv.settimeout(30)
    peers, conns = [me], []
    try:
        while len(peers) < launch["size"]:
            try:
                c, _a = srv.accept()
            except OSError:
                return _fail(node, f"{launch['size'] - len(peers)} of {launch['size']} ranks never connected")
            conns.append(c)
            try:
                peers.append(_exchange_recv(c, timeout=30))
            except (OSError, ValueError, ConnectionError):
                return _fail(node, "a rank went away")
        peers.sort(key=lambda p: p["rank"])
        # nccl_one_host: the launch put every rank on the first host
        if any(p.get("one_host") for p in peers):
            peers = [dict(p, node=me["node"]) for p in peers]
        peak = _cluster_peak(peers)
        size = launch["size"] * ngpus  # NCCL ranks: every GPU of every process
        devices = [{"rank": p["rank"] * ngpus + k, "pid": p["pid"], "node": p["node"], **d}
                   for p in peers for k, d in enumerate(p["devices"])]
        lines = _head(tool, o, ngpus, minb, maxb, devices, nccl_version)
        rc = _run(tool, o, node, lines, _sizes(o, minb, maxb), peak, BUS_FACTOR[tool](size), _wsize(o), size)
        for c in conns:
            try:
                _exchange_send(c, {"done": True})
            except OSError:
                pass
        return rc
    finally:
        for c in conns:
            c.close()
        srv.close()
