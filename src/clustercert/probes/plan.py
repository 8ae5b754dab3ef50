"""What the probes run, pure: per node its own probes (commands, stages), per pair its jobs (server,
client, port, threshold), and the reachability pass. clustercert.probes.run runs what this plans.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from clustercert.checks import rails as rails_checks
from clustercert.probes import commands as cmd
from clustercert.probes.catalog import NVBW_TESTS, PAIR_THRESHOLD, PROBE_NAMES
from clustercert.probes.evaluate import Measurement

# a port's client gets this much more than its command's own limit (its server's start)
CLIENT_START_S = 5
# each server's own bound covers the pair's stages before its own, and this much more
SERVER_MARGIN_S = 15
REACH_TIMEOUT_S = 3.0


@dataclass
class ProbeSettings:
    seconds: int = 5          # duration of each bandwidth probe
    timeout: float = 60.0     # hard limit of one probe (server and client are killed after it)
    # probe names (catalog.PROBE_NAMES) to run; None: all the profile asks for
    only: frozenset[str] | None = None
    # each node's own probes (loopback, NCCL on the node, nvbandwidth, dcgmi); drift: off
    node_probes: bool = True
    # the DDP smoke test and NCCL's transport check (correctness, no figure); drift: off
    training: bool = True
    # torchrun --nproc_per_node for the DDP smoke test; None: the profile's ranks
    ddp_nproc: int | None = None
    # each node's compute rails (clustercert.checks.rails.NodeRails), discovered before the probes (certify
    # and drift: by the validators' collection; probe: probes.rails.discover); a node not in it: not
    # discovered
    rails: dict | None = None
    # probe.nccl_cluster: beside the all-rails run, one per fabric where the compute rails span several
    # (--nccl-cluster per-fabric); False: the all-rails run alone (all-rails)
    per_fabric: bool = True

    @property
    def limit(self) -> float:
        return self.seconds + self.timeout

    def thresholds(self, prof) -> dict:
        """The profile's thresholds of the probes to run (the outlier ratio always stays)."""
        if self.only is None:
            return prof.thresholds
        keep = {k for name in self.only for k in PROBE_NAMES[name]} | {"outlier_ratio"}
        return {k: v for k, v in prof.thresholds.items() if k in keep}

    def dcgm_diag(self, prof):
        return prof.dcgm_diag if self.only is None or "dcgmi" in self.only else None

    def wants(self, name: str) -> bool:
        return self.only is None or name in self.only

    def transport(self, prof) -> bool:
        """Whether the pair NCCL run is also judged on its transport (probe.nccl_transport): the profile
        names GPUDirect-capable rails (gpudirect) and NCCL is among the probes."""
        return self.training and prof.gpudirect is not None and self.wants("nccl")

    def ddp(self, prof) -> bool:
        """Whether the DDP smoke test runs across each pair: the profile has a ddp section, ddp is asked."""
        return self.training and prof.ddp is not None and self.wants("ddp")


def addr(h) -> str:
    """The address other nodes reach ``h`` at (its management address)."""
    return str(h.connection.get("ansible_host") or h.name)


def fabric_ip(h, fabric: int) -> str | None:
    """``h``'s IPoIB address on ``fabric``: its netdev's, or its bond's where the bond enslaves it."""
    netdevs = [x.netdev for x in h.profile.ib.hcas if x.fabric == fabric]
    bond = h.profile.ib.bond
    addrs = h.vars.clustercert_fabric_addresses
    for nd in netdevs:
        if nd in addrs:
            return addrs[nd].split("/")[0]
    if bond and bond.name in addrs and any(nd in bond.slaves for nd in netdevs):
        return addrs[bond.name].split("/")[0]
    return None


# ---- the compute rails --------------------------------------------------------------------------------

def rails_of(h, cfg: ProbeSettings) -> rails_checks.NodeRails:
    """``h``'s rails: as discovered before the probes, else what its profile alone says (fixed names, or
    unknown: the profile states its rails but they were not discovered)."""
    if cfg.rails is not None and h.name in cfg.rails:
        return cfg.rails[h.name]
    return rails_checks.node_rails(h.profile, None, None, "not discovered before the probes")


def unknown_rails(nr: rails_checks.NodeRails) -> str | None:
    """Why the node's rail probes cannot run (its rails are unknown), or None."""
    if nr.source == "none" or nr.rails is not None:
        return None
    return "the node's compute rails are unknown: " + "; ".join(nr.problems)


# ---- a node's own probes ---------------------------------------------------------------------------

@dataclass
class NodePlan:
    th: dict
    rails: list                      # the compute rails looped back (clustercert.checks.rails.Rail)
    commands: dict[str, tuple]       # name -> (command, timeout[, server]) for collect.ssh.collect_node
    stages: list[list[str]]
    unknown: str | None = None       # why the node's rails are unknown (then each rail probe is an error)
    expected: int = 0                # how many rails the profile states


def _loopback_commands(rails: list, cfg: ProbeSettings) -> dict[str, tuple]:
    """Loopback ib_write_bw per compute rail, its server started on the node before its client."""
    cmds = {}
    for i, r in enumerate(rails):
        port = cmd.PERFTEST_PORT + 100 + i
        server = {"cmd": cmd.perftest_cmd("ib_write_bw", r.hca, r.port, port, cfg.seconds),
                  "port": port, "timeout": cfg.limit + CLIENT_START_S}
        client = cmd.perftest_cmd("ib_write_bw", r.hca, r.port, port, cfg.seconds, "localhost")
        cmds[f"loopback{i}"] = (client, cfg.limit, server)
    return cmds


def _gdr_commands(gdr: list, cfg: ProbeSettings) -> dict[str, tuple]:
    """GPUDirect RDMA loopback per GPU-NIC pair, GPU memory at both ends; topo -m and the preflight."""
    cmds = {}
    for i, p in enumerate(gdr):
        port = cmd.GDR_PORT + i
        server = {"cmd": cmd.gdr_perftest_cmd(p.hca, p.port, port, cfg.seconds, p.gpu, p.numa),
                  "port": port, "timeout": cfg.limit + CLIENT_START_S}
        cmds[f"gdr{i}"] = (cmd.gdr_perftest_cmd(p.hca, p.port, port, cfg.seconds, p.gpu, p.numa, "localhost"),
                           cfg.limit, server)
    if gdr:
        cmds["topo"] = (cmd.topo_cmd(), cfg.limit)
        cmds["gdr_help"] = (cmd.perftest_help_cmd(), min(cfg.limit, 15.0))  # the GPUDirect preflight
    return cmds


def _node_stages(cmds: dict[str, tuple], gdr: list, prof) -> list[list[str]]:
    """The loopbacks at once (with NCCL beside them on an NVSwitch node), then the GPUDirect loopbacks,
    then every other command one after another."""
    stage0 = [n for n in cmds if n.startswith("loopback") or (n == "nccl" and nccl_beside_loopback(prof))]
    # the GPUDirect loopbacks use the rails the host-memory ones use: the stage after them, one pair per HCA
    # at a time (with topo -m beside the first)
    gdr_stages: list[list[str]] = []
    for i, p in enumerate(gdr):
        k = sum(1 for q in gdr[:i] if q.hca == p.hca)
        while len(gdr_stages) <= k:
            gdr_stages.append([])
        gdr_stages[k].append(f"gdr{i}")
    if gdr_stages:
        gdr_stages[0].append("topo")
        stage0.append("gdr_help")  # before the GPUDirect loopbacks, beside the host-memory ones
    staged = set(stage0) | {n for st in gdr_stages for n in st}
    return ([stage0] if stage0 else []) + gdr_stages + [[n] for n in cmds if n not in staged]


def node_plan(h, cfg: ProbeSettings) -> NodePlan:
    """Loopback ib_write_bw per compute HCA (the rails at once, each server started on the node before
    its client) and, on an NVSwitch node, NCCL on the node beside them (nccl_beside_loopback); then one
    after another: NCCL on the node with GPU utilisation sampled while it runs, nvbandwidth, dcgmi diag."""
    prof = h.profile
    th = cfg.thresholds(prof) if cfg.node_probes else {}
    nr = rails_of(h, cfg)
    rails = list(nr.rails or ()) if "ib_write_bw_loopback" in th else []
    cmds: dict[str, tuple] = _loopback_commands(rails, cfg)
    if "nccl_allreduce_1node" in th or "gpu_util_under_load" in th:
        nccl = cmd.nccl_1node_cmd(prof.gpu.count)
        cmds["nccl"] = (cmd.with_util_sampling(nccl) if "gpu_util_under_load" in th else nccl, cfg.limit)
    gdr = gdr_pairs(h, cfg) if "ib_write_bw_gdr_loopback" in th else []
    cmds |= _gdr_commands(gdr, cfg)
    nvlink = cmd.NVLINK_TESTS if "nvlink_aggregate" in th else ()
    if any(k in th for k in NVBW_TESTS) or nvlink:
        cmds["nvbandwidth"] = (cmd.nvbandwidth_cmd(nvlink, any(k in th for k in NVBW_TESTS)), cfg.limit)
    diag = cfg.dcgm_diag(prof) if cfg.node_probes else None
    if diag is not None and diag.level > 0:
        cmds["dcgmi_diag"] = (cmd.dcgmi_diag_cmd(diag.level), diag.limit_s)
    for i, path in enumerate(checkpoint_paths(prof, th)):
        cmds[f"checkpoint{i}"] = (cmd.checkpoint_cmd(path, h.name, prof.storage.checkpoint_size_mib,
                                                     max(2, cfg.seconds)), cfg.limit)
    stages = _node_stages(cmds, gdr, prof)
    return NodePlan(th, rails, cmds, stages, unknown_rails(nr), nr.expected)


def gdr_pairs(h, cfg: ProbeSettings) -> list:
    """The GPU-rail pairs GPUDirect RDMA is measured on: the node's rails where its profile has a gpudirect
    section (none without one, or while its rails are unknown)."""
    return list(rails_of(h, cfg).rails or ()) if h.profile.gpudirect is not None else []


def checkpoint_paths(prof, th: dict) -> list[str]:
    """Where probe.checkpoint_write writes: the profile's storage paths, where a checkpoint floor is
    judged."""
    if prof.storage is None or not ({"checkpoint_write", "checkpoint_read"} & set(th)):
        return []
    return prof.storage.checkpoint_paths


def nccl_beside_loopback(prof) -> bool:
    """Whether NCCL on one node may run at the same time as the node's loopback bandwidth probes. On
    an NVSwitch node all of NCCL's traffic between the node's GPUs crosses NVLink: it uses neither
    the HCAs nor PCIe, which carry the loopback traffic, so neither measurement disturbs the other.
    Without NVSwitch NCCL's peer-to-peer and shared-memory paths cross PCIe and host memory, as the
    loopback traffic does: the two run one after the other."""
    return bool(prof.gpu.nvswitch)


# ---- a pair's probes -----------------------------------------------------------------------------

@dataclass
class Job:
    """One server/client probe of a pair: ``evaluate(m, ProbeRun) -> Measurement``."""

    m: Measurement
    server: tuple[str, dict, str]   # (node, connection, command)
    client: tuple[str, dict, str]
    port: int
    evaluate: Callable
    fabric: int | None = None
    ipoib: bool = False             # carried over IPoIB: the reachability pass gates it


@dataclass
class PairPlan:
    """The node-to-node probes of one pair, in stages (jobs, threshold key) run one kind after another;
    every server may start ahead of its client: a listening server carries no traffic."""
    a: object
    b: object
    th: dict
    stages: list[tuple[list[Job], str]]
    bound: float                               # each server's limit, from the pair's first stage on
    reach: dict[int, tuple[str, str]] = field(default_factory=dict)  # fabric -> (a's address, b's address)
    nccl: bool = False                         # NCCL across the pair, after the perftest stages
    transport: bool = False                    # ... run with NCCL_DEBUG=INFO and judged on its transport too
    ddp: bool = False                          # the DDP smoke test across the pair, last
    servers: list | None = None                # per stage, once started (run)
    taken: bool = False                        # run ran it (and ended its servers)
    errors: list = field(default_factory=list)  # rail probes that cannot run: an end's rails are unknown


def _gdr_jobs(a, b, rnd: int, cfg: ProbeSettings, evaluators, th: dict, rails: list, asked) -> list[Job]:
    """GPUDirect RDMA across the pair, one job per rail (where a's profile has a gpudirect section)."""
    jobs = []
    if a.profile.gpudirect is None or "ib_write_bw_gdr_pair" not in th:
        return []
    for i, (p, q) in enumerate(rails):
        if not asked("ib_write_bw_gdr", p.fabric):
            continue
        port = cmd.GDR_PORT + 50 + i
        server = (b.name, b.connection, cmd.gdr_perftest_cmd(q.hca, q.port, port, cfg.seconds, q.gpu, q.numa))
        client = (a.name, a.connection,
                  cmd.gdr_perftest_cmd(p.hca, p.port, port, cfg.seconds, p.gpu, p.numa, addr(b)))
        m = Measurement("ib_write_bw_gdr", a.name, b.name, subject=f"GPU{p.gpu}-{p.hca} {a.name}->{b.name}",
                        fabric=p.fabric, round=rnd, threshold="ib_write_bw_gdr_pair")
        jobs.append(Job(m, server, client, port, lambda m, r: evaluators.eval_perftest(
            m, th["ib_write_bw_gdr_pair"], r.client, cfg.limit), p.fabric))
    return jobs


def _iperf_jobs(a, b, rnd: int, cfg: ProbeSettings, evaluators, th: dict,
                asked) -> tuple[list[Job], dict[int, tuple[str, str]]]:
    """iperf3 over IPoIB per fabric both ends have an address on, and those addresses (the reachability
    pass checks them first)."""
    jobs, reach = [], {}
    for f in sorted({x.fabric for x in a.profile.ib.hcas}) if "iperf3_ipoib" in th else []:
        sa, sb = fabric_ip(a, f), fabric_ip(b, f)
        if not sa or not sb or not asked("iperf3", f):
            continue
        reach[f] = (sa, sb)
        port = cmd.IPERF_PORT + f
        server = (b.name, b.connection, cmd.iperf3_server_cmd(sb, port))
        client = (a.name, a.connection, cmd.iperf3_client_cmd(sb, sa, port, cfg.seconds))
        m = Measurement("iperf3", a.name, b.name, subject=f"fabric {f} {sa}->{sb}", fabric=f, round=rnd,
                        threshold="iperf3_ipoib")
        jobs.append(Job(m, server, client, port,
                        lambda m, r: evaluators.eval_iperf3(m, th["iperf3_ipoib"], r.client, cfg.limit), f,
                        True))
    return jobs, reach


def pair_plan(a, b, rnd: int, cfg: ProbeSettings, evaluators, channels: set | None = None) -> PairPlan:
    """``evaluators``: the module with eval_perftest and eval_iperf3 (clustercert.probes.evaluate);
    ``channels``: only the probes of these (probe, fabric) channels -- what a later round asks -- or all."""
    th = cfg.thresholds(a.profile)
    na, nb = rails_of(a, cfg), rails_of(b, cfg)
    why = "; ".join(f"{h.name}: {w}" for h, w in ((a, unknown_rails(na)), (b, unknown_rails(nb))) if w)
    # rail i of the pair: a's rail of a GPU and b's rail of the same GPU, each end under its own node's name
    rb = {r.gpu: r for r in nb.rails or ()}
    rails = [] if why else [(r, rb[r.gpu]) for r in na.rails or () if r.gpu in rb]
    errors: list[Measurement] = []

    def asked(probe: str, fabric: int | None) -> bool:
        return channels is None or (probe, fabric) in channels

    def unknown(tool: str, key: str) -> None:  # one error per rail the profile states
        if why and key in th:
            for i in range(max(na.expected, 1)):
                errors.append(Measurement(tool, a.name, b.name, subject=f"rail {i} {a.name}->{b.name}",
                                          round=rnd, threshold=key).error(why, th[key]))

    def perftest(tool: str, port0: int) -> list[Job]:  # one job per rail
        key, lat = PAIR_THRESHOLD[tool], tool.endswith("_lat")
        unknown(tool, key)
        jobs = []
        for i, (ra, rb_) in enumerate(rails if key in th else []):
            if not asked(tool, ra.fabric):
                continue
            port = port0 + i
            server = (b.name, b.connection, cmd.perftest_cmd(tool, rb_.hca, rb_.port, port, cfg.seconds))
            client = (a.name, a.connection,
                      cmd.perftest_cmd(tool, ra.hca, ra.port, port, cfg.seconds, addr(b)))
            m = Measurement(tool, a.name, b.name, subject=f"{ra.hca} {a.name}->{b.name}", fabric=ra.fabric,
                            round=rnd, threshold=key)
            jobs.append(Job(m, server, client, port,
                            lambda m, r, key=key, lat=lat: evaluators.eval_perftest(
                                m, th[key], r.client, cfg.limit, lat=lat), ra.fabric))
        return jobs

    bw = perftest("ib_write_bw", cmd.PERFTEST_PORT)
    lat = perftest("ib_write_lat", cmd.PERFTEST_PORT + 200)
    if a.profile.gpudirect is not None:
        unknown("ib_write_bw_gdr", "ib_write_bw_gdr_pair")
    gdr = _gdr_jobs(a, b, rnd, cfg, evaluators, th, rails, asked)
    iperf, reach = _iperf_jobs(a, b, rnd, cfg, evaluators, th, asked)
    stages = [(s, key) for s,
              key in ((bw, "ib_write_bw_pair"), (gdr, "ib_write_bw_gdr_pair"), (iperf, "iperf3_ipoib"),
                      (lat, "ib_write_lat_p99")) if s]
    transport = cfg.transport(a.profile) and "nccl_allreduce_pair" in th
    nccl = "nccl_allreduce_pair" in th and (asked("nccl_allreduce", None)
                                            or transport and asked("nccl_transport", None))
    return PairPlan(a, b, th, stages, len(stages) * (cfg.limit + CLIENT_START_S) + SERVER_MARGIN_S, reach,
                    nccl, nccl and transport, cfg.ddp(a.profile) and asked("ddp_allreduce", None),
                    errors=errors)


def reach_commands(plan: PairPlan) -> dict[str, tuple[str, float]]:
    """The reachability pass of a pair, run on its client node: one echo per fabric address."""
    return {f"reach{f}": (cmd.reach_cmd(sa, sb), REACH_TIMEOUT_S) for f, (sa, sb) in plan.reach.items()}
