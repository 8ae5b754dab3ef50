"""certify: validators + probes on the two-round schedule -> verdicts, a signed certificate, reports.

Glue only: collection is clustercert.collect, scheduling clustercert.schedule, evaluation
clustercert.checks / clustercert.probes, recording clustercert.store, rendering clustercert.reports.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from clustercert import paths, probes, schedule
from clustercert.checks import Finding, node_verdict
from clustercert.collect import (
    collect_many,
    collect_node,
    finish_probe,
    run_server_client,
    runner_limit,
    start_server,
    stop_server,
)
from clustercert.inventory import HostView, Inventory
from clustercert.probes import Measurement
from clustercert.slurm import accepts_step, read_states, slurm_name


@dataclass
class ProbeSettings:
    seconds: int = 5          # duration of each bandwidth probe
    timeout: float = 60.0     # hard limit of one probe (server and client are killed after it)
    only: frozenset[str] | None = None  # probe names (probes.PROBE_NAMES) to run; None: all the profile asks for

    @property
    def limit(self) -> float:
        return self.seconds + self.timeout

    def thresholds(self, prof) -> dict:
        """The profile's thresholds of the probes to run (the outlier ratio always stays)."""
        if self.only is None:
            return prof.thresholds
        keep = {k for name in self.only for k in probes.PROBE_NAMES[name]} | {"outlier_ratio"}
        return {k: v for k, v in prof.thresholds.items() if k in keep}

    def dcgm_diag(self, prof):
        return prof.dcgm_diag if self.only is None or "dcgmi" in self.only else None


def _addr(h: HostView) -> str:
    return str(h.connection.get("ansible_host") or h.name)


def _fabric_ip(h: HostView, fabric: int) -> str | None:
    netdevs = [x.netdev for x in h.profile.ib.hcas if x.fabric == fabric]
    bond = h.profile.ib.bond
    addrs = h.vars.clustercert_fabric_addresses
    for nd in netdevs:
        if nd in addrs:
            return addrs[nd].split("/")[0]
    if bond and bond.name in addrs and any(nd in bond.slaves for nd in netdevs):
        return addrs[bond.name].split("/")[0]
    return None


def node_probes(h: HostView, cfg: ProbeSettings, cp: Path, down: set[str] | None = None,
                hcas_free: Callable[[str], None] | None = None) -> list[Measurement]:
    """Probes on one node, in one connection: loopback ib_write_bw per compute HCA (the rails at once,
    each server started on the node before its client) and, on an NVSwitch node, NCCL on the node
    beside them (nccl_beside_loopback); then one after another: NCCL on the node with GPU utilisation
    sampled while it runs (where it did not run beside the rails), nvbandwidth, dcgmi diag.
    ``hcas_free(node)`` is called once the node's loopback tests have ended (its HCAs carry none of
    its own probes any more), while its other probes may still run."""
    prof, out = h.profile, []
    th, rails, cmds, stages = _node_commands(h, cfg)
    sample_util = "gpu_util_under_load" in th
    diag = cfg.dcgm_diag(prof)
    stage_of = {n: i for i, st in enumerate(stages) for n in st}
    on_done, loops = None, {n for n in cmds if n.startswith("loopback")}
    if hcas_free is not None and loops:
        def on_done(name: str) -> None:
            loops.discard(name)
            if not loops:
                hcas_free(h.name)
    elif hcas_free is not None:
        hcas_free(h.name)
    ev = None
    if cmds:
        ev = collect_node(h.name, h.connection, cmds, control_dir=cp, stages=stages, on_done=on_done)
        if not ev.reachable and down is not None:
            down.add(h.name)
    if hcas_free is not None:
        hcas_free(h.name)
    results = ev.results if ev is not None else {}
    for i, hca in enumerate(rails):
        m = Measurement("ib_write_bw_loopback", h.name, subject=hca.name, fabric=hca.fabric)
        m = probes.eval_perftest(m, th["ib_write_bw_loopback"], results.get(f"loopback{i}"), cfg.limit)
        if ev is not None and not ev.reachable:
            m.observed = f"{h.name} did not answer: {ev.error or m.observed}"
        _charge([m], results.get(f"loopback{i}"), stage_of.get(f"loopback{i}"))
        out.append(m)
    if "nccl" in cmds:
        first = len(out)
        nccl = probes.nccl_1node_cmd(prof.gpu.count)  # the command inside the sampling wrapper
        res, samples = (probes.split_util(results.get("nccl"), nccl) if sample_util else (results.get("nccl"), None))
        if "nccl_allreduce_1node" in th:
            m = Measurement("nccl_allreduce", h.name, subject=f"1 node, {prof.gpu.count} GPUs")
            out.append(probes.eval_nccl(m, th["nccl_allreduce_1node"], res, cfg.limit))
        if sample_util:
            out += probes.eval_gpu_util(h.name, th["gpu_util_under_load"], prof.gpu.count, res, samples, cfg.limit)
        _charge(out[first:], results.get("nccl"), stage_of["nccl"])
    if "nvbandwidth" in cmds:
        first = len(out)
        out += probes.eval_nvbandwidth(h.name, prof, results.get("nvbandwidth"), cfg.limit)
        _charge(out[first:], results.get("nvbandwidth"), stage_of["nvbandwidth"])
    if cfg.only is None or "dcgmi" in cfg.only:
        diag_res = results.get("dcgmi_diag") if "dcgmi_diag" in cmds else None
        first = len(out)
        out += probes.eval_dcgmi_diag(h.name, diag, diag_res, diag.limit_s if diag else 0)
        _charge(out[first:], diag_res, stage_of.get("dcgmi_diag"))
    return out


def _node_commands(h: HostView, cfg: ProbeSettings) -> tuple[dict, list, dict, list[list[str]]]:
    """node_probes' commands: (thresholds, loopback rails, {name: command}, stages)."""
    prof = h.profile
    th = cfg.thresholds(prof)
    rails = [x for x in prof.ib.hcas if x.role == "compute"] if "ib_write_bw_loopback" in th else []
    cmds: dict[str, tuple] = {}
    for i, hca in enumerate(rails):
        port = probes.PERFTEST_PORT + 100 + i
        server = {"cmd": probes.perftest_cmd("ib_write_bw", hca.name, hca.port, port, cfg.seconds),
                  "port": port, "timeout": cfg.limit + 5}
        cmds[f"loopback{i}"] = (probes.perftest_cmd("ib_write_bw", hca.name, hca.port, port, cfg.seconds, "localhost"),
                                cfg.limit, server)
    sample_util = "gpu_util_under_load" in th
    if "nccl_allreduce_1node" in th or sample_util:
        nccl = probes.nccl_1node_cmd(prof.gpu.count)
        cmds["nccl"] = (probes.with_util_sampling(nccl) if sample_util else nccl, cfg.limit)
    if any(k in th for k in probes.NVBW_TESTS):
        cmds["nvbandwidth"] = (probes.nvbandwidth_cmd(), cfg.limit)
    diag = cfg.dcgm_diag(prof)
    if diag is not None and diag.level > 0:
        cmds["dcgmi_diag"] = (probes.dcgmi_diag_cmd(diag.level), diag.limit_s)
    stage0 = [n for n in cmds if n.startswith("loopback") or (n == "nccl" and nccl_beside_loopback(prof))]
    stages = ([stage0] if stage0 else []) + [[n] for n in cmds if n not in stage0]
    return th, rails, cmds, stages


def nccl_beside_loopback(prof) -> bool:
    """Whether NCCL on one node may run at the same time as the node's loopback bandwidth probes. On
    an NVSwitch node all of NCCL's traffic between the node's GPUs crosses NVLink: it uses neither
    the HCAs nor PCIe, which carry the loopback traffic, so neither measurement disturbs the other.
    Without NVSwitch NCCL's peer-to-peer and shared-memory paths cross PCIe and host memory, as the
    loopback traffic does: the two run one after the other."""
    return bool(prof.gpu.nvswitch)


def _charge(ms: list[Measurement], res, stage: int | None = None) -> None:
    """Carry the run time of the command behind ``ms`` on the first of them (timing counts it once),
    with the node stage it ran in (the commands of a stage run at once)."""
    if ms and res is not None:
        ms[0].elapsed, ms[0].stage = res.seconds, stage


@dataclass
class PairPlan:
    """The node-to-node probes of one pair (pair_probes), in stages: (jobs, threshold key) per stage,
    a job being (measurement, server, client, port, evaluate). Every server may start ahead of its
    client: a listening server carries no traffic."""
    a: HostView
    b: HostView
    th: dict
    stages: list[tuple[list, str]]
    bound: float                  # each server's limit, from the pair's first stage on
    servers: list[list[Future]] | None = None  # per stage, once started
    taken: bool = False           # pair_probes ran it (and ended its servers)

    def start_servers(self, ex: ThreadPoolExecutor, cp: Path, ahead: float = 0.0) -> None:
        """Start every server in ``ex``; ``ahead``: seconds more than ``bound`` they may wait for the pair."""
        self.servers = [[ex.submit(start_server, job[1], self.bound + ahead, control_dir=cp, server_port=job[3])
                         for job in jobs] for jobs, _ in self.stages]


def pair_plan(a: HostView, b: HostView, rnd: int, cfg: ProbeSettings) -> PairPlan:
    th = cfg.thresholds(a.profile)
    rails = [x for x in a.profile.ib.hcas if x.role == "compute"]

    def perftest(tool: str, key: str, port0: int) -> list:  # one job per rail
        jobs = []
        for i, hca in enumerate(rails if key in th else []):
            port = port0 + i
            server = (b.name, b.connection, probes.perftest_cmd(tool, hca.name, hca.port, port, cfg.seconds))
            client = (a.name, a.connection, probes.perftest_cmd(tool, hca.name, hca.port, port, cfg.seconds, _addr(b)))
            m = Measurement(tool, a.name, b.name, subject=f"{hca.name} {a.name}->{b.name}", fabric=hca.fabric, round=rnd)
            jobs.append((m, server, client, port, lambda m, r: probes.eval_perftest(m, th[key], r.client, cfg.limit,
                                                                                   lat=tool.endswith("_lat"))))
        return jobs

    bw = perftest("ib_write_bw", "ib_write_bw_pair", probes.PERFTEST_PORT)
    lat = perftest("ib_write_lat", "ib_write_lat_p99", probes.PERFTEST_PORT + 200)
    iperf = []
    for f in sorted({x.fabric for x in a.profile.ib.hcas}) if "iperf3_ipoib" in th else []:
        sa, sb = _fabric_ip(a, f), _fabric_ip(b, f)
        if not sa or not sb:
            continue
        port = probes.IPERF_PORT + f
        server = (b.name, b.connection, probes.iperf3_server_cmd(sb, port))
        client = (a.name, a.connection, probes.iperf3_client_cmd(sb, sa, port, cfg.seconds))
        m = Measurement("iperf3", a.name, b.name, subject=f"fabric {f} {sa}->{sb}", fabric=f, round=rnd)
        iperf.append((m, server, client, port, lambda m, r: probes.eval_iperf3(m, th["iperf3_ipoib"], r.client, cfg.limit)))
    stages = [(s, key) for s, key in ((bw, "ib_write_bw_pair"), (iperf, "iperf3_ipoib"), (lat, "ib_write_lat_p99")) if s]
    # each server's own bound covers the stages before its own
    return PairPlan(a, b, th, stages, len(stages) * (cfg.limit + 5) + 15)


def pair_probes(a: HostView, b: HostView, rnd: int, cfg: ProbeSettings, cp: Path,
                slurm_states: dict | None = None, plan: PairPlan | None = None) -> tuple[list[Measurement], set[str]]:
    """Node-to-node probes between a (client) and b (server), one kind after another so that no two
    measurements share an HCA: ib_write_bw per rail (the rails at once), then iperf3 over IPoIB per
    fabric (the fabrics at once; IPoIB runs on the same HCAs), then ib_write_lat per rail, then NCCL
    across both nodes. Every server starts with the first stage and waits (a listening server carries
    no traffic), or earlier: ``plan`` (pair_plan) with its servers started. A later stage starts with
    its clients; a server is ended once its client is done, beside the next stage. Returns the
    measurements and the nodes that did not answer."""
    plan = plan or pair_plan(a, b, rnd, cfg)
    plan.taken = True
    th, stages = plan.th, plan.stages
    down: set[str] = set()

    def finish(job_srv):
        (m, _server, client, _port, evaluate), srv = job_srv
        r = finish_probe(srv, client, cfg.limit, control_dir=cp, background=ends)
        if not r.reachable:
            down.add(a.name)
        if not r.server_reachable:
            down.add(b.name)
        m = evaluate(m, r)
        m.elapsed = r.client.seconds
        return m

    out: list[Measurement] = []
    n = max(1, sum(len(s) for s, _ in stages))
    # ``ends``: each server is ended there once its client is done, while the next stage runs
    with ThreadPoolExecutor(max_workers=n) as ex, ThreadPoolExecutor(max_workers=2 * n) as ends:
        if plan.servers is None:
            plan.start_servers(ex, cp)
        for (jobs, key), futures in zip(stages, plan.servers, strict=True):
            started = [f.result() for f in futures]
            if down:  # a node stopped answering: do not wait out each remaining probe's timeout
                list(ex.map(stop_server, started))
                for m, *_ in jobs:
                    m.status, m.expected = "error", probes.bound_text(th[key])
                    m.observed = f"not run: {', '.join(sorted(down))} stopped answering during the earlier probes"
                    out.append(m)
            else:
                out += list(ex.map(finish, zip(jobs, started, strict=True)))
        if "nccl_allreduce_pair" in th:  # last: it uses every rail, so it overlaps no other probe
            out.append(nccl_pair(a, b, rnd, cfg, cp, th["nccl_allreduce_pair"], down, slurm_states))
    return out, down


def nccl_pair(a: HostView, b: HostView, rnd: int, cfg: ProbeSettings, cp: Path, t, down: set[str],
              slurm_states: dict | None = None) -> Measurement:
    """all_reduce_perf across a and b, launched from a, one process per node driving its GPUs; then
    the ranks (and launch daemons) the launch left on either node are killed. Where the inventory
    says Slurm it is an srun step when Slurm can start one on both nodes now (``slurm_states``:
    inventory name -> Slurm state, read before the rounds); a node being certified is usually
    drained, and then the launch is mpirun over ssh, the evidence says why."""
    gpus = a.profile.gpu.count
    m = Measurement("nccl_allreduce", a.name, b.name, subject=f"{a.name}+{b.name}, {2 * gpus} GPUs", round=rnd)
    if down & {a.name, b.name}:
        m.status, m.expected = "error", probes.bound_text(t)
        m.observed = f"not run: {', '.join(sorted(down & {a.name, b.name}))} stopped answering during the other probes"
        return m
    tag = uuid.uuid4().hex[:12]
    slurm, launch = bool(getattr(a.vars, "clustercert_slurm", False)), ""
    if slurm:
        blocked = []
        for h in (a, b):
            st = (slurm_states or {}).get(h.name, "state not read")
            if not accepts_step(st):
                blocked.append(f"{slurm_name(h)}: {st if isinstance(st, str) else st.state}")
        slurm = not blocked
        launch = "srun" if slurm else f"mpirun over ssh: Slurm cannot start a step now ({'; '.join(blocked)})"
    if slurm:
        cmd = probes.nccl_pair_srun_cmd([slurm_name(h) for h in (a, b)], gpus, tag, cfg.limit,
                                        a.vars.clustercert_slurm_gres)
    else:
        cmd = probes.nccl_pair_mpirun_cmd([_addr(a), _addr(b)], gpus, tag)
    r = run_server_client(None, (a.name, a.connection, cmd), cfg.limit, control_dir=cp)
    if not r.reachable:
        down.add(a.name)
    cleanup = {"cleanup": (probes.nccl_pair_cleanup_cmd(tag, slurm), 15.0)}
    collect_many({h.name: h.connection for h in (a, b)}, {a.name: cleanup, b.name: cleanup}, control_dir=cp)
    m = probes.eval_nccl(m, t, r.client, cfg.limit)
    m.elapsed = r.client.seconds
    if not r.reachable:
        m.observed = f"{a.name} did not answer: {r.error or m.observed}"
    if launch:
        m.evidence = f"launched with {launch}\n{m.evidence}"
    return m


def slurm_launch_states(inv: Inventory, nodes: list[str], cfg: ProbeSettings, cp: Path) -> dict | None:
    """Slurm states of the nodes whose pair NCCL may launch with srun (inventory name -> state, or the
    error text of reading it); None where no pair NCCL runs through Slurm."""
    hosts = {n: inv.hosts[n] for n in nodes if getattr(inv.hosts[n].vars, "clustercert_slurm", False)
             and "nccl_allreduce_pair" in cfg.thresholds(inv.hosts[n].profile)}
    if len(nodes) < 2 or not hosts:
        return None
    names = {n: slurm_name(h) for n, h in hosts.items()}
    _runner, states, tried = read_states(inv, names, control_dir=cp)
    why = "; ".join(tried) or "no Slurm node answered"
    return {n: states.get(sn, f"scontrol could not read it ({why})") for n, sn in names.items()}


def _pair_ok(ms: list[Measurement]) -> bool:
    return bool(ms) and all(m.status == "pass" for m in ms)


def node_phase_limit(h: HostView, cfg: ProbeSettings) -> float:
    """The longest a node's own probes (node_probes) may take: its runner's limit."""
    _th, _rails, cmds, stages = _node_commands(h, cfg)
    return runner_limit(cmds, stages) if cmds else 0.0


def run_probes(inv: Inventory, nodes: list[str], cfg: ProbeSettings, all_pairs: bool, forks: int) -> dict:
    cp = paths.state_dir() / "cp"
    hosts = inv.hosts
    t0 = time.monotonic()
    down: set[str] = set()
    # round 1 is known before any probe runs: the servers of its pairs that start at once (``forks``
    # of them) are started as soon as their node's loopback tests have ended, while the node's GPU
    # probes still run (a listening server carries no traffic); the round then begins with its
    # clients. Such a server may wait for its pair past the whole node phase.
    first: list[tuple[str, str]] = []
    spare = None
    if len(nodes) >= 2:
        first, spare = (schedule.circle_rounds(nodes)[0], None) if all_pairs else schedule.round1(nodes)
    plans = {p: pair_plan(hosts[p[0]], hosts[p[1]], 1, cfg) for p in first[:max(1, forks)]}
    waiting: dict[str, list[PairPlan]] = {}
    for plan in plans.values():
        waiting.setdefault(plan.b.name, []).append(plan)
    ahead = max((node_phase_limit(hosts[n], cfg) for n in nodes), default=0.0)
    early = ThreadPoolExecutor(max_workers=max(1, sum(len(jobs) for p in plans.values() for jobs, _ in p.stages)))
    lock = threading.Lock()

    def hcas_free(node: str) -> None:
        with lock:
            ready = waiting.pop(node, [])
        for plan in ready:
            plan.start_servers(early, cp, ahead)

    try:
        with ThreadPoolExecutor(max_workers=max(1, min(forks, len(nodes) or 1))) as ex:
            per_node = dict(zip(nodes, ex.map(lambda n: node_probes(hosts[n], cfg, cp, down, hcas_free), nodes),
                                strict=True))
        node_wall = time.monotonic() - t0
        round_times: list[dict] = []
        pair_ms: list[Measurement] = []
        outcomes: list[tuple[str, str, bool]] = []

        slurm_states = slurm_launch_states(inv, [n for n in nodes if n not in down], cfg, cp)

        def run_round(pairs: list[tuple[str, str]], rnd: int) -> dict[tuple[str, str], bool]:
            t_round = time.monotonic()
            with ThreadPoolExecutor(max_workers=max(1, min(forks, len(pairs) or 1))) as ex:
                results = list(ex.map(lambda p: pair_probes(hosts[p[0]], hosts[p[1]], rnd, cfg, cp, slurm_states,
                                                            plans.get(p) if rnd == 1 else None), pairs))
            round_times.append({"round": rnd, "wall_s": round(time.monotonic() - t_round, 2),
                                "tool_s": probes.pair_round_tool_seconds([m for ms, _ in results for m in ms])})
            verdicts = {}
            for p, (ms, d) in zip(pairs, results, strict=True):
                pair_ms.extend(ms)
                down.update(d)
                verdicts[p] = _pair_ok(ms)
                outcomes.append((p[0], p[1], verdicts[p]))
            return verdicts

        rounds_run = 0
        if all_pairs and first:
            for i, pairs in enumerate(schedule.circle_rounds(nodes), 1):
                run_round(pairs, i)
                rounds_run = i
        elif first:
            r1 = run_round(first, 1)
            rounds_run = 1
            for extra in schedule.round2(r1, spare):
                rounds_run += 1
                run_round(extra, rounds_run)
    except BaseException:  # servers started for pairs that never ran are ended here
        early.shutdown(wait=True, cancel_futures=True)
        for plan in (p for p in plans.values() if not p.taken):
            for f in (f for stage in plan.servers or [] for f in stage):
                if not f.cancelled() and f.exception() is None:
                    stop_server(f.result())
        raise
    finally:
        early.shutdown(wait=True)
    loc = schedule.localise(outcomes)
    all_ms = [m for ms in per_node.values() for m in ms] + pair_ms
    ratio_t = next((h.profile.thresholds.get("outlier_ratio") for h in hosts.values()), None)
    if ratio_t is not None and ratio_t.floor:
        probes.apply_outlier_rule(all_ms, ratio_t.floor, ratio_t.source)
    wall = time.monotonic() - t0
    return {"per_node": per_node, "pairs": pair_ms, "localisation": loc, "rounds": rounds_run,
            "down": down, "seconds": round(wall, 2), "timing": probes.probe_timing(per_node, node_wall, round_times, wall)}


def build_nodes(validation: dict, probe_out: dict) -> dict[str, dict]:
    """The certificate's ``nodes`` object: validator findings + node probes + localisation."""
    nodes = {}
    bad_nodes = {x.subject: x for x in probe_out["localisation"] if x.kind == "bad_node"}
    for name, r in validation.items():
        if r.verdict == "unreachable" or name in probe_out["down"]:
            detail = r.detail or "stopped answering during the probes"
            nodes[name] = {"verdict": "unreachable", "findings": [f.to_json() for f in r.findings], "detail": detail}
            continue
        findings: list[Finding] = list(r.findings)
        findings += [m.finding() for m in probe_out["per_node"].get(name, [])]
        if name in bad_nodes:
            findings.append(Finding("probe.pairs", "fail", name, "passes node-to-node probes", bad_nodes[name].reason))
        nodes[name] = {"verdict": node_verdict(findings), "findings": [f.to_json() for f in findings]}
    return nodes


def _versions(inv: Inventory, validation: dict) -> dict:
    from importlib.metadata import version

    from clustercert import __version__

    per_node = {}
    for name, r in validation.items():
        ev = r.evidence.results if r.evidence else {}
        drv = next((f.observed for f in r.findings if f.check == "driver.version" and f.status != "error"), None)
        nccl = ev.get("nccl_pkg").stdout.strip() if ev.get("nccl_pkg") and ev["nccl_pkg"].ok else None
        ofed = ev.get("ofed_info").stdout.strip() if ev.get("ofed_info") and ev["ofed_info"].ok else None
        per_node[name] = {"driver": drv, "nccl": nccl, "ofed": ofed}
    return {"clustercert": __version__, "ansible-core": version("ansible-core"), "nodes": per_node}


def run(inventory: str, *, limit: str | None = None, forks: int | None = None, out: str, all_pairs: bool = False,
        key: str | None = None, probe_seconds: int = 5, probe_timeout: float = 60.0, drain: str | None = None) -> int:
    from clustercert import certificate
    from clustercert.inventory import load_inventory
    from clustercert.store import Store

    inv = load_inventory(inventory, limit)
    if drain == "slurm":
        from clustercert import slurm

        slurm.check_inventory(inv)
    out_dir = Path(out)
    signing_key, pub_path = certificate.load_or_create_key(Path(key) if key else None, paths.state_dir())
    from clustercert.runlock import inventory_lock

    store = Store()
    with inventory_lock(str(inv.source), "certify"):
        return _certify(inv, store, out_dir, signing_key, pub_path, limit, forks, all_pairs, probe_seconds, probe_timeout,
                        drain)


def _certify(inv, store, out_dir: Path, signing_key, pub_path: Path, limit, forks, all_pairs, probe_seconds, probe_timeout,
             drain=None) -> int:
    from clustercert import certificate, reports, validate
    from clustercert.engine import new_run_id
    from clustercert.report_text import print_certify

    run_id = new_run_id()
    started = datetime.now(UTC)
    store.start_run(run_id, "certify", str(inv.source), {"limit": limit, "all_pairs": all_pairs})
    forks = forks or 25
    t_validate = time.monotonic()
    validation = validate.validate_nodes(inv, list(validate.COMPONENT_ORDER), forks)
    validate_s = round(time.monotonic() - t_validate, 2)
    reachable = [n for n, r in sorted(validation.items()) if r.verdict != "unreachable"]
    probe_out = run_probes(inv, reachable, ProbeSettings(probe_seconds, probe_timeout), all_pairs, forks)
    nodes = build_nodes(validation, probe_out)
    links = [m.link_record() for m in probe_out["pairs"]]
    thresholds = {}
    for h in inv.hosts.values():
        for tname, t in h.profile.thresholds.items():
            thresholds.setdefault(tname, {"floor": t.floor, "ceiling": t.max, "unit": t.unit, "source": t.source})
    verdict = "pass" if all(n["verdict"] == "pass" for n in nodes.values()) and all(lk["status"] == "pass" for lk in links) else "fail"
    cert = {
        "schema": "clustercert.certificate/v1",
        "cluster": next((h.vars.clustercert_cluster_name for h in inv.hosts.values() if h.vars.clustercert_cluster_name), None)
        or inv.source.name,
        "profiles": {h.profile.name: json.loads(h.profile.model_dump_json()) for h in inv.hosts.values()},
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "versions": _versions(inv, validation),
        "verdict": verdict,
        "rounds": probe_out["rounds"],
        "nodes": nodes,
        "links": links,
        "localisation": [x.to_json() for x in probe_out["localisation"]],
        "thresholds": thresholds,
        "timing": {"validate_s": validate_s, **probe_out["timing"]},
    }
    if drain == "slurm":  # after the verdicts, before signing: what was done is part of the certificate
        from clustercert import slurm

        cert["slurm"] = slurm.apply(inv, nodes, paths.state_dir() / "cp")
    cert = certificate.sign(cert, signing_key)
    out_dir.mkdir(parents=True, exist_ok=True)
    certificate.write_certificate(cert, out_dir / "certificate.json")
    (out_dir / "signing.pub").write_text(pub_path.read_text())
    reports.write_reports(cert, out_dir)
    store.finish_run(run_id, verdict, nodes, links, actions={"slurm": cert["slurm"]} if "slurm" in cert else None)
    print_certify(cert, out_dir, run_id, probe_out["seconds"])
    return 0 if verdict == "pass" and all(a["ok"] for a in cert.get("slurm", [])) else 1
