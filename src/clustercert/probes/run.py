"""The probe run: the one place that drives clustercert.collect for probes. certify, probe and drift
all call ``run`` with their own judge (clustercert.probes.judge).

1. node phase: each node's own probes in one connection per node (plan.node_plan), ``forks`` at a time.
   Round 1's pairs are known before it starts, so each of their servers starts on its node as soon as
   that node's loopback tests have ended (a listening server carries no traffic).
2. pair rounds (clustercert.probes.rounds decides them): every pair of a round at once, ``forks`` at a
   time. A pair runs one kind after another so that no two measurements share an HCA: ib_write_bw per
   rail, then iperf3 over IPoIB per fabric, then ib_write_lat, then NCCL across the pair (srun where
   Slurm can place the step now, else mpirun over ssh). Beside the first stage a reachability pass
   pings each fabric address (about a second): an iperf3 probe on a fabric its client cannot reach is
   not started, it fails with the reason. A node that stops answering leaves the schedule.
3. after each round the judge's verdicts feed localisation; the next round asks what is still open.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from clustercert import paths, remote
from clustercert.checks import rails as rails_checks
from clustercert.checks.ib import SYSFS_CMD
from clustercert.collect import DEFAULT_FORKS, ssh
from clustercert.collect.slurm import accepts_step, read_states, slurm_name
from clustercert.parsers import one_parse_per_output
from clustercert.probes import cluster, evaluate, workload
from clustercert.probes import commands as cmd
from clustercert.probes.evaluate import Measurement
from clustercert.probes.localise import Inference, Localisation, PairResult
from clustercert.probes.plan import (
    PairPlan,
    ProbeSettings,
    addr,
    checkpoint_paths,
    gdr_pairs,
    node_plan,
    pair_plan,
    rails_of,
    reach_commands,
)
from clustercert.probes.rounds import Round, Rounds
from clustercert.probes.timing import pair_round_tool_seconds, probe_timing

if TYPE_CHECKING:
    from clustercert.collect.backend import Backend


@dataclass
class ProbeOutcome:
    per_node: dict[str, list[Measurement]]
    pairs: list[Measurement]
    localisation: list[Localisation]
    rounds: list[Round]
    down: set[str]
    seconds: float
    timing: dict
    inference: Inference
    why_down: dict[str, str] = field(default_factory=dict)  # a node that stopped answering: why, where known
    cluster: list[Measurement] = field(default_factory=list)  # probe.nccl_cluster: the cluster-wide findings

    def schedule(self) -> list[dict]:
        """Per round: how many pairs, and the question it answered (the certificate's ``schedule``)."""
        return [{"round": r.number, "pairs": len(r.pairs), "question": r.question} for r in self.rounds]


def _charge(ms: list[Measurement], res, stage: int | None = None) -> None:
    """Carry the run time of the command behind ``ms`` on the first of them (timing counts it once),
    with the node stage it ran in (the commands of a stage run at once)."""
    if ms and res is not None:
        ms[0].elapsed, ms[0].stage = res.seconds, stage


# ---- a node's own probes ------------------------------------------------------------------------------

def node_probes(h, cfg: ProbeSettings, cp: Path, down: set[str] | None = None, hcas_free=None,
                *, io: Backend, why_down: dict | None = None) -> list[Measurement]:
    """Probes on one node, in one connection (plan.node_plan). ``hcas_free(node)`` is called once the
    node's loopback tests have ended (its HCAs carry none of its own probes any more), while its other
    probes may still run. Each of the node's outputs is parsed once (``one_parse_per_output``)."""
    with one_parse_per_output():
        return _node_probes(h, cfg, cp, down, hcas_free, io, why_down)


def _loops_done(h, cmds, hcas_free):
    """The callback told as each of the node's probes ends: once its loopback tests have all ended its HCAs
    are free (``hcas_free``); None where nothing waits on them (told at once where it has none)."""
    loops = {n for n in cmds if n.startswith(("loopback", "gdr"))}
    if hcas_free is None:
        return None
    if not loops:
        hcas_free(h.name)
        return None

    def on_done(name: str) -> None:
        loops.discard(name)
        if not loops:
            hcas_free(h.name)
    return on_done


def _unknown_rail_errors(h, np, th) -> list[Measurement]:
    """The profile states rails the node's discovery did not find: an error per rail probe."""
    out = []
    for key, tool in (("ib_write_bw_loopback", "ib_write_bw_loopback"),
                      ("ib_write_bw_gdr_loopback", "ib_write_bw_gdr")):
        if key in th and (key != "ib_write_bw_gdr_loopback" or h.profile.gpudirect is not None):
            out += [Measurement(tool, h.name, subject=f"rail {i}", threshold=key).error(np.unknown, th[key])
                    for i in range(max(np.expected, 1))]
    return out


def _loopback_ms(h, cfg, np, results, ev, stage_of) -> list[Measurement]:
    out = []
    for i, hca in enumerate(np.rails):
        m = Measurement("ib_write_bw_loopback", h.name, subject=hca.hca, fabric=hca.fabric,
                        threshold="ib_write_bw_loopback")
        m = evaluate.eval_perftest(m, np.th["ib_write_bw_loopback"], results.get(f"loopback{i}"), cfg.limit)
        if ev is not None and not ev.reachable:
            m.observed = f"{h.name} did not answer: {ev.error or m.observed}"
        _charge([m], results.get(f"loopback{i}"), stage_of.get(f"loopback{i}"))
        out.append(m)
    return out


def _nccl_1node_ms(h, cfg, th, results, stage_of) -> list[Measurement]:
    prof, out = h.profile, []
    sample_util = "gpu_util_under_load" in th
    nccl = cmd.nccl_1node_cmd(prof.gpu.count)  # the command inside the sampling wrapper
    res, samples = (evaluate.split_util(results.get("nccl"), nccl) if sample_util
                    else (results.get("nccl"), None))
    if "nccl_allreduce_1node" in th:
        m = Measurement("nccl_allreduce", h.name, subject=f"1 node, {prof.gpu.count} GPUs",
                        threshold="nccl_allreduce_1node")
        out.append(evaluate.eval_nccl(m, th["nccl_allreduce_1node"], res, cfg.limit, {h.name: addr(h)},
                                      prof.gpu.count))
    if sample_util:
        out += evaluate.eval_gpu_util(h.name, th["gpu_util_under_load"], prof.gpu.count, res, samples,
                                      cfg.limit)
    _charge(out, results.get("nccl"), stage_of["nccl"])
    return out


def _gdr_ms(h, cfg, th, results, stage_of) -> list[Measurement]:
    gdr = gdr_pairs(h, cfg) if "ib_write_bw_gdr_loopback" in th else []
    if not gdr:
        return []
    out = []
    no_gdr = workload.gdr_preflight(results.get("gdr_help"), cfg.limit)
    for i, p in enumerate(gdr):
        m = Measurement("ib_write_bw_gdr", h.name, subject=f"GPU{p.gpu}-{p.hca} loopback", fabric=p.fabric,
                        threshold="ib_write_bw_gdr_loopback")
        m = evaluate.eval_perftest(m, th["ib_write_bw_gdr_loopback"], results.get(f"gdr{i}"), cfg.limit)
        # its perftest cannot put a buffer on a GPU: whatever the run printed, an error with the fix
        if no_gdr:
            m.error(no_gdr, th["ib_write_bw_gdr_loopback"])
        _charge([m], results.get(f"gdr{i}"), stage_of.get(f"gdr{i}"))
        out.append(m)
    return out + workload.eval_gdr_topology(h.name, h.profile, gdr, results.get("topo"), cfg.limit)


def _nvbandwidth_ms(h, cfg, th, results, stage_of) -> list[Measurement]:
    out = []
    if any(k in th for k in evaluate.NVBW_TESTS):
        out += evaluate.eval_nvbandwidth(h.name, h.profile, results.get("nvbandwidth"), cfg.limit)
    if "nvlink_aggregate" in th:
        out += workload.eval_nvlink_aggregate(h.name, th["nvlink_aggregate"], results.get("nvbandwidth"),
                                              cfg.limit)
    _charge(out, results.get("nvbandwidth"), stage_of["nvbandwidth"])
    return out


def _checkpoint_ms(h, cfg, th, results, stage_of) -> list[Measurement]:
    out = []
    for i, path in enumerate(checkpoint_paths(h.profile, th)):
        ms = workload.eval_checkpoint(h.name, path, h.profile.storage.checkpoint_size_mib,
                                      th.get("checkpoint_write"), th.get("checkpoint_read"),
                                      results.get(f"checkpoint{i}"), cfg.limit)
        _charge(ms, results.get(f"checkpoint{i}"), stage_of.get(f"checkpoint{i}"))
        out += ms
    return out


def _dcgmi_ms(h, cfg, cmds, results, stage_of) -> list[Measurement]:
    if not cfg.node_probes or not (cfg.only is None or "dcgmi" in cfg.only):
        return []
    diag = cfg.dcgm_diag(h.profile)
    diag_res = results.get("dcgmi_diag") if "dcgmi_diag" in cmds else None
    ms = evaluate.eval_dcgmi_diag(h.name, diag, diag_res, diag.limit_s if diag else 0)
    _charge(ms, diag_res, stage_of.get("dcgmi_diag"))
    return ms


def _node_probes(h, cfg: ProbeSettings, cp: Path, down: set[str] | None, hcas_free, io,
                 why_down: dict | None) -> list[Measurement]:
    np = node_plan(h, cfg)
    th, cmds = np.th, np.commands
    stage_of = {n: i for i, st in enumerate(np.stages) for n in st}
    on_done = _loops_done(h, cmds, hcas_free)
    ev = None
    if cmds:
        ev = io.collect_node(h.name, h.connection, cmds, control_dir=cp, stages=np.stages, on_done=on_done)
        if not ev.reachable and down is not None:
            down.add(h.name)
            if why_down is not None:
                why_down[h.name] = ev.error
    if hcas_free is not None:
        hcas_free(h.name)
    results = ev.results if ev is not None else {}
    out = _unknown_rail_errors(h, np, th) if np.unknown else []
    out += _loopback_ms(h, cfg, np, results, ev, stage_of)
    if "nccl" in cmds:
        out += _nccl_1node_ms(h, cfg, th, results, stage_of)
    out += _gdr_ms(h, cfg, th, results, stage_of)
    if "nvbandwidth" in cmds:
        out += _nvbandwidth_ms(h, cfg, th, results, stage_of)
    out += _checkpoint_ms(h, cfg, th, results, stage_of)
    return out + _dcgmi_ms(h, cfg, cmds, results, stage_of)


def node_phase_limit(h, cfg: ProbeSettings) -> float:
    """The longest a node's own probes may take: its runner's limit."""
    np = node_plan(h, cfg)
    return ssh.runner_limit(np.commands, np.stages) if np.commands else 0.0


# ---- a pair's probes ------------------------------------------------------------------------------

def start_servers(plan: PairPlan, ex: ThreadPoolExecutor, cp: Path, ahead: float = 0.0, *,
                  io: Backend) -> None:
    """Start every server of ``plan`` in ``ex``; ``ahead``: seconds more than its bound it may wait."""
    plan.servers = [[ex.submit(io.start_server, job.server, plan.bound + ahead, control_dir=cp,
                               server_port=job.port,
                               peer=job.client[0]) for job in jobs] for jobs, _ in plan.stages]


def _unreachable(plan: PairPlan, ev) -> dict[int, str]:
    """Fabric -> why its address is not reachable, from the reachability pass (nothing where the pass
    could not tell: the node did not answer it, or ping is not there -- the probe then runs)."""
    out = {}
    if ev is None or not ev.reachable:
        return out
    for f, (sa, sb) in plan.reach.items():
        r = ev.results.get(f"reach{f}")
        if r is None or r.rc in (0, None, 127) and not r.timed_out or ": not found" in r.stderr:
            continue
        why = (r.stdout + r.stderr).strip().splitlines()
        out[f] = (f"fabric {f} not reachable: no answer from {sb} to {sa} within {cmd.REACH_WAIT_S} s"
                  + (f" ({why[-1][:200]})" if why else ""))
    return out


def _start_reach(a, plan: PairPlan, ex, cp: Path, io: Backend) -> Future | None:
    """The reachability pass from ``a`` over the pair's IPoIB paths, started in ``ex`` (None: no IPoIB
    probe)."""
    if any(job.ipoib for jobs, _ in plan.stages for job in jobs):
        return ex.submit(io.collect_node, a.name, a.connection, reach_commands(plan), control_dir=cp)
    return None


def _pair_stage(jobs, t, started, plan: PairPlan, reach: Future | None, down: set[str], ex, ends, finish,
                io: Backend) -> list[Measurement]:
    """One stage of a pair's probes, its servers ``started``: each job's client run and finished (``finish``),
    or an error where a node stopped answering earlier or the job's IPoIB path is not reachable."""
    if down:  # a node stopped answering: do not wait out each remaining probe's timeout
        list(ex.map(io.stop_server, started))
        return [job.m.error(f"not run: {', '.join(sorted(down))} stopped answering during the earlier probes",
                            t)
                for job in jobs]
    dead = _unreachable(plan, reach.result()) if reach is not None and any(j.ipoib for j in jobs) else {}
    out, run = [], []
    for j, s in zip(jobs, started, strict=True):
        if j.ipoib and j.fabric in dead:  # not started: a dead path fails in a second, not at the timeout
            ends.submit(io.stop_server, s)
            out.append(j.m.error(f"not run: {dead[j.fabric]}", t))
        else:
            run.append((j, s))
    return out + list(ex.map(finish, run))


def pair_probes(a, b, rnd: int, cfg: ProbeSettings, cp: Path, slurm_states: dict | None = None,
                plan: PairPlan | None = None, *, io: Backend,
                channels: set | None = None) -> tuple[list[Measurement], set[str]]:
    """Node-to-node probes between a (client) and b (server), one kind after another (see the module
    docstring); ``channels``: only those a later round asks about. Every server starts with the first
    stage and waits, or earlier (``plan`` with its servers started). A later stage starts with its
    clients; a server is ended once its client is done, beside the next stage. Returns the
    measurements and the nodes that did not answer."""
    plan = plan or pair_plan(a, b, rnd, cfg, evaluate, channels)
    plan.taken = True
    th, stages = plan.th, plan.stages
    down: set[str] = set()
    errors = list(plan.errors)  # rail probes that cannot run (an end's rails are unknown)

    def finish(job_srv):
        job, srv = job_srv
        r = io.finish_probe(srv, job.client, cfg.limit, control_dir=cp, background=ends)
        if not r.reachable:
            down.add(a.name)
        if not r.server_reachable:
            down.add(b.name)
        m = job.evaluate(job.m, r)
        m.elapsed = r.client.seconds
        if r.where:  # --backend slurm: the step, which the site's Slurm logs name
            m.evidence = f"ran in {r.where}\n{m.evidence}"
        if not r.reachable:  # why, in the node's own words (host key, refused, no route)
            m.observed = f"{a.name} did not answer: {r.error or m.observed}"
        return m

    out: list[Measurement] = errors
    n = max(1, sum(len(s) for s, _ in stages))
    # ``ends``: each server is ended there once its client is done, while the next stage runs
    with ThreadPoolExecutor(max_workers=n + 1) as ex, ThreadPoolExecutor(max_workers=2 * n) as ends:
        reach = _start_reach(a, plan, ex, cp, io)
        if plan.servers is None:
            start_servers(plan, ex, cp, io=io)
        for (jobs, key), futures in zip(stages, plan.servers, strict=True):
            out += _pair_stage(jobs, th[key], [f.result() for f in futures], plan, reach, down, ex, ends,
                               finish, io)
        if plan.nccl:  # after the perftests: it uses every rail, so it overlaps no other probe
            transport: list[Measurement] | None = [] if plan.transport else None
            out.append(nccl_pair(a, b, rnd, cfg, cp, th["nccl_allreduce_pair"], down, slurm_states, io=io,
                                 transport=transport))
            out += transport or []
        if plan.ddp:  # last: the job users run, on every rail and GPU as well
            out += ddp_pair(a, b, rnd, cfg, cp, down, slurm_states, io=io)
    return out, down


def _slurm_launch(a, b, slurm_states: dict | None, io: Backend) -> tuple[bool, str]:
    """(launch with srun, how it was launched in words ("" for plain mpirun/ssh without Slurm)). Over
    --backend slurm (an ``io`` with the run's job) always srun: a step of that job, started from a's step."""
    return _slurm_launch_all([a, b], slurm_states, io)


def _slurm_launch_all(hosts: list, slurm_states: dict | None, io: Backend) -> tuple[bool, str]:
    """_slurm_launch for a launch across ``hosts`` (from the first)."""
    a = hosts[0]
    if getattr(io, "job_id", None):
        return True, f"srun (a step of the run's Slurm job {io.job_id})"
    slurm, launch = bool(getattr(a.vars, "clustercert_slurm", False)), ""
    if slurm:
        blocked = []
        for h in hosts:
            st = (slurm_states or {}).get(h.name, "state not read")
            if not accepts_step(st):
                blocked.append(f"{slurm_name(h)}: {st if isinstance(st, str) else st.state}")
        slurm = not blocked
        launch = "srun" if slurm else f"ssh: Slurm cannot start a step now ({'; '.join(blocked)})"
    return slurm, launch


def nccl_pair(a, b, rnd: int, cfg: ProbeSettings, cp: Path, t, down: set[str],
              slurm_states: dict | None = None, *, io: Backend, transport: list | None = None) -> Measurement:
    """all_reduce_perf across a and b, launched from a, one process per node driving its GPUs; then
    the ranks (and launch daemons) the launch left on either node are killed. Where the inventory
    says Slurm it is an srun step when Slurm can start one on both nodes now (``slurm_states``:
    inventory name -> Slurm state, read before the rounds); a node being certified is usually
    drained, and then the launch is mpirun over ssh, the evidence says why."""
    gpus = a.profile.gpu.count
    m = Measurement("nccl_allreduce", a.name, b.name, subject=f"{a.name}+{b.name}, {2 * gpus} GPUs",
                    round=rnd, threshold="nccl_allreduce_pair")
    if down & {a.name, b.name}:
        why = (f"not run: {', '.join(sorted(down & {a.name, b.name}))} stopped answering during the other "
               "probes")
        if transport is not None:
            transport.append(Measurement("nccl_transport", a.name, b.name, subject=f"{a.name}+{b.name}",
                                         round=rnd, relative=False).error(why))
        return m.error(why, t)
    tag = uuid.uuid4().hex[:12]
    slurm, launch = _slurm_launch(a, b, slurm_states, io)
    if launch.startswith("ssh: "):
        launch = "mpirun over " + launch
    debug = transport is not None
    if slurm:
        line = cmd.nccl_pair_srun_cmd([slurm_name(h) for h in (a, b)], gpus, tag, cfg.limit,
                                      a.vars.clustercert_slurm_gres, debug)
    else:
        line = cmd.nccl_pair_mpirun_cmd([addr(a), addr(b)], gpus, tag, debug)
    r = io.run_server_client(None, (a.name, a.connection, line), cfg.limit, control_dir=cp)
    if not r.reachable:
        down.add(a.name)
    cleanup = {"cleanup": (cmd.nccl_pair_cleanup_cmd(tag, slurm), 15.0)}
    io.collect_many({h.name: h.connection for h in (a, b)}, {a.name: cleanup, b.name: cleanup},
                    control_dir=cp)
    # the bandwidth's evidence is the nccl-tests table: the INFO lines are the transport check's
    table = r.client if not debug else dataclasses.replace(r.client, stdout="".join(
        ln for ln in r.client.stdout.splitlines(keepends=True) if " NCCL INFO " not in ln))
    m = evaluate.eval_nccl(m, t, table, cfg.limit, {a.name: addr(a), b.name: addr(b)}, gpus)
    m.elapsed = r.client.seconds
    if not r.reachable:
        m.observed = f"{a.name} did not answer: {r.error or m.observed}"
    if launch:
        m.evidence = f"launched with {launch}\n{m.evidence}"
    if transport is not None:
        tm = workload.eval_nccl_transport(a.name, b.name, a.profile, r.client, cfg.limit,
                                          {a.name: addr(a), b.name: addr(b)},
                                          f"launched with {launch}\n" if launch else "",
                                          {h.name: rails_of(h, cfg).names or [] for h in (a, b)})
        tm.round = rnd
        if not r.reachable:
            tm.error(f"{a.name} did not answer: {r.error}")
        transport.append(tm)
    return m


def ddp_pair(a, b, rnd: int, cfg: ProbeSettings, cp: Path, down: set[str], slurm_states: dict | None = None,
             *, io: Backend) -> list[Measurement]:
    """The DDP test across a and b (clustercert.remote.ddp_smoke under torchrun, rendezvous on a): the launch
    and its all_reduce (probe.ddp_allreduce, of the pair) and each node's DDP steps (probe.ddp_step, of the
    node, its stragglers blamed on it alone);
    an srun step where the inventory says Slurm and Slurm can start one on both nodes now, else torchrun
    over ssh from a. Bounded by the profile's ddp.timeout_s; then whatever the launch left on either node
    (tagged processes, the step) is killed."""
    prof = a.profile
    ddp, want = prof.ddp, prof.ddp_ranks
    nproc = cfg.ddp_nproc or getattr(a.vars, "clustercert_ddp_nproc_per_node", None) or want
    m = Measurement("ddp_allreduce", a.name, b.name, subject=f"{a.name}+{b.name}, {2 * nproc} ranks",
                    round=rnd, lower_is_better=True, relative=False)
    if down & {a.name, b.name}:
        return [m.error(f"not run: {', '.join(sorted(down & {a.name, b.name}))} stopped answering during the "
                        "other probes")]
    tag = uuid.uuid4().hex[:12]
    slurm, launch = _slurm_launch(a, b, slurm_states, io)
    launch = launch or "torchrun over ssh"
    gpus = prof.gpu.count if ddp.backend == "nccl" else 0
    numel = max(1, int(ddp.tensor_mib * 1048576 // 4))
    args = cmd.ddp_script_args(ddp.backend, want, gpus, ddp.steps, numel, ddp.timeout_s) + cmd.ddp_train_args(
        ddp.steps, ddp.width, ddp.depth, ddp.batch)
    text = remote.source("ddp_smoke")
    if slurm:
        line = cmd.ddp_srun_cmd([slurm_name(h) for h in (a, b)], addr(a), ddp.launcher, ddp.python, text,
                                args, nproc, dict(ddp.env), tag, ddp.timeout_s, a.vars.clustercert_slurm_gres,
                                gpus or prof.gpu.count)
    else:
        line = cmd.ddp_launch_cmd([addr(a), addr(b)], ddp.launcher, ddp.python, text, args, nproc,
                                  dict(ddp.env), tag)
    r = io.run_server_client(None, (a.name, a.connection, line), ddp.timeout_s, control_dir=cp)
    if not r.reachable:
        down.add(a.name)
    cleanup = {"cleanup": (cmd.nccl_pair_cleanup_cmd(tag, slurm, cmd.DDP_JOB), 15.0)}
    io.collect_many({h.name: h.connection for h in (a, b)}, {a.name: cleanup, b.name: cleanup},
                    control_dir=cp)
    m = workload.eval_ddp(a.name, b.name, prof, nproc, r.client, ddp.timeout_s, f"launched with {launch}\n")
    m.round, m.elapsed = rnd, r.client.seconds
    steps = workload.eval_ddp_step(a.name, b.name, prof, nproc, r.client, ddp.timeout_s)
    for s in steps:
        s.round = rnd
    if not r.reachable:
        m.error(f"{a.name} did not answer: {r.error}")
        for s in steps:
            s.status, s.observed = "error", f"{a.name} did not answer: {r.error}"
    return [m, *steps]


def nccl_cluster(hosts: list, group: cluster.RailGroup, cfg: ProbeSettings, cp: Path, t, median: float | None,
                 slurm_states: dict | None = None, *, io: Backend) -> Measurement:
    """probe.nccl_cluster's run over one rail group (clustercert.probes.cluster): all_reduce_perf across every
    host of ``hosts`` at once, launched from the first as the pair run is (one srun step where Slurm can place
    it on all of them now, or over --backend slurm; else mpirun over ssh), bounded by the probe limit; then
    what the launch left on any of them is killed."""
    a, gpus = hosts[0], hosts[0].profile.gpu.count
    names = {h.name: addr(h) for h in hosts}
    tag = uuid.uuid4().hex[:12]
    slurm, launch = _slurm_launch_all(hosts, slurm_states, io)
    if launch.startswith("ssh: "):
        launch = "mpirun over " + launch
    if slurm:
        line = cmd.nccl_cluster_srun_cmd([slurm_name(h) for h in hosts], gpus, tag, cfg.limit,
                                         a.vars.clustercert_slurm_gres, group.env)
    else:
        line = cmd.nccl_cluster_mpirun_cmd([addr(h) for h in hosts], gpus, tag, group.env)
    r = io.run_server_client(None, (a.name, a.connection, line), cfg.limit, control_dir=cp)
    cleanup = {"cleanup": (cmd.nccl_pair_cleanup_cmd(tag, slurm), 15.0)}
    io.collect_many({h.name: h.connection for h in hosts}, {h.name: cleanup for h in hosts}, control_dir=cp)
    m = cluster.eval_cluster(a.name, group, names, gpus, t, r.client, cfg.limit, median)
    m.elapsed = r.client.seconds
    if not r.reachable:
        m.error(f"{a.name} did not answer: {r.error or m.observed}")
    m.evidence = (f"launched with {launch or 'mpirun over ssh'}"
                  + (f" ({', '.join(f'{k}={v}' for k, v in group.env.items())})" if group.env else "")
                  + f"\n{m.evidence}")
    return m


def cluster_probes(inv, nodes: list[str], cfg: ProbeSettings, cp: Path, pairs: list[Measurement],
                   node_bad: set[str], down: set[str], localisation, slurm_states: dict | None = None, *,
                   io: Backend) -> list[Measurement]:
    """probe.nccl_cluster after the pair rounds, per profile: its runs over the nodes the rounds cleared, one
    rail group after another (each uses the rails the next would measure), or one skip saying why not."""
    hosts = inv.hosts
    cleared = cluster.cleared_nodes(nodes, pairs, node_bad, down, localisation)
    by_profile: dict[str, list[str]] = {}
    for n in nodes:
        by_profile.setdefault(hosts[n].profile.name, []).append(n)
    out: list[Measurement] = []
    for members in by_profile.values():
        prof = hosts[members[0]].profile
        th = cfg.thresholds(prof)
        plan = cluster.cluster_plan(members, [n for n in cleared if n in members], prof, th, cfg.per_fabric)
        if plan is None:
            continue
        if plan.skip:
            out += cluster.skipped(plan, members[0], prof.gpu.count)
            continue
        median = cluster.median_pair(pairs, plan.nodes)
        for group in plan.groups:
            if median is None:  # nothing to scale against: an error, and nothing is run
                out.append(cluster.eval_cluster(plan.nodes[0], group, {n: addr(hosts[n]) for n in plan.nodes},
                                                prof.gpu.count, th[cluster.THRESHOLD], None, cfg.limit, None))
                continue
            out.append(nccl_cluster([hosts[n] for n in plan.nodes], group, cfg, cp, th[cluster.THRESHOLD],
                                    median, slurm_states, io=io))
    return out


def slurm_launch_states(inv, nodes: list[str], cfg: ProbeSettings, cp: Path) -> dict | None:
    """Slurm states of the nodes whose pair NCCL may launch with srun (inventory name -> state, or the
    error text of reading it); None where no pair NCCL runs through Slurm."""
    hosts = {n: inv.hosts[n] for n in nodes if getattr(inv.hosts[n].vars, "clustercert_slurm", False)
             and ("nccl_allreduce_pair" in cfg.thresholds(inv.hosts[n].profile)
                  or cfg.ddp(inv.hosts[n].profile))}
    if len(nodes) < 2 or not hosts:
        return None
    names = {n: slurm_name(h) for n, h in hosts.items()}
    _runner, states, tried = read_states(inv, names, control_dir=cp)
    why = "; ".join(tried) or "no Slurm node answered"
    return {n: states.get(sn, f"scontrol could not read it ({why})") for n, sn in names.items()}


NODE_OWN = frozenset({"ddp_step"})  # measurements of a pair's run that judge one node of it


def pair_result(a: str, b: str, rnd: int, ms: list[Measurement], judge) -> PairResult:
    """What a pair's measurements say per channel, as the judge sees them (an error fails its channel)."""
    passed: dict = {}
    detail: dict = {}
    for m in ms:
        if m.probe in NODE_OWN:  # a node's own finding from the pair's run (its straggler): not the pair's
            continue
        ok = judge.ok(m)
        passed[m.channel] = passed.get(m.channel, True) and ok
        if not ok and m.channel not in detail:
            detail[m.channel] = judge.note(m) or m.observed
    return PairResult(a, b, rnd, passed, detail)


# ---- the run ---------------------------------------------------------------------------------------

def _worst(ms: list[Measurement]) -> str:
    """For the progress display: fail, error or pass."""
    statuses = {m.status for m in ms}
    return next((s for s in ("fail", "error") if s in statuses), "pass")


def _early_plans(hosts, nodes: list[str], cfg: ProbeSettings, first,
                 forks: int) -> dict[tuple[str, str], PairPlan]:
    """Round 1 is known before any probe runs: the plans of its pairs that start at once (``forks`` of them),
    whose servers are started as soon as their node's loopback tests have ended, while the node's GPU probes
    still run; the round then begins with its clients. Such a server may wait past the whole node phase."""
    if first is None or not cfg.node_probes:
        return {}
    return {p: pair_plan(hosts[p[0]], hosts[p[1]], 1, cfg, evaluate) for p in first.pairs[:forks]}


def _stop_servers(plans: dict[tuple[str, str], PairPlan], io: Backend, *, failed: bool = False) -> None:
    """End the servers started early for pairs that never ran (their node went away, or the run failed)."""
    for plan in (p for p in plans.values() if not p.taken and p.servers):
        for f in (f for stage in plan.servers for f in stage):
            if not (failed and f.cancelled()) and f.exception() is None:
                io.stop_server(f.result())


def _node_phase(hosts, nodes: list[str], cfg: ProbeSettings, cp: Path, forks: int, down: set[str],
                why_down: dict[str, str], hcas_free, tell, io: Backend) -> dict[str, list[Measurement]]:
    """Every node's own probes, ``forks`` nodes at a time."""
    if not cfg.node_probes:
        return {}
    tell("nodes", phase="node probes", names=list(nodes), forks=forks)

    def one_node(n: str) -> list[Measurement]:
        ms = node_probes(hosts[n], cfg, cp, down, hcas_free, io=io, why_down=why_down)
        tell("node", name=n, status="unreachable" if n in down else _worst(ms))
        return ms

    with ThreadPoolExecutor(max_workers=min(forks, len(nodes) or 1)) as ex:
        return dict(zip(nodes, ex.map(one_node, nodes), strict=True))


def _pair_round(rnd, loop: Rounds, hosts, cfg: ProbeSettings, cp: Path, forks: int, down: set[str],
                slurm_states, plans, judge, tell, io: Backend, per_node, pair_ms) -> dict:
    """One pair round, ``forks`` pairs at a time; its measurements go to ``per_node`` (a node's own, from the
    pair's run) and ``pair_ms``, its verdicts to ``loop``. Returns the round's timing."""
    t_round = time.monotonic()
    pairs = [p for p in rnd.pairs if not set(p) & down]
    k = rnd.number
    tell("round", number=k, most=len(loop._circle) if loop._circle is not None else loop.max_rounds,
         pairs=pairs, question=rnd.question, forks=forks)

    def one_pair(p):
        out = pair_probes(hosts[p[0]], hosts[p[1]], k, cfg, cp, slurm_states,
                          plans.get(p) if k == 1 else None, io=io, channels=rnd.channels(*p))
        tell("pair", a=p[0], b=p[1], status=_worst(out[0]))
        return out

    with ThreadPoolExecutor(max_workers=min(forks, len(pairs) or 1)) as ex:
        results = list(ex.map(one_pair, pairs))
    timing = {"round": k, "wall_s": round(time.monotonic() - t_round, 2),
              "tool_s": pair_round_tool_seconds([m for ms, _ in results for m in ms])}
    verdicts = []
    for p, (ms, d) in zip(pairs, results, strict=True):
        for m in ms:  # a node's own measurement from the pair's run (probe.ddp_step) is the node's finding
            (per_node.setdefault(m.a, []) if m.probe in NODE_OWN else pair_ms).append(m)
        down.update(d)
        verdicts.append(pair_result(p[0], p[1], k, ms, judge))
    loop.record(rnd, verdicts, down)
    return timing


def _cluster_timing(timing: dict, clustered: list[Measurement], cluster_wall: float, wall: float) -> None:
    """probe.nccl_cluster's runs, one after another after the rounds: their tools' time is the tools'."""
    tool = round(sum(m.elapsed or 0.0 for m in clustered), 2)
    timing["cluster"] = {"wall_s": round(cluster_wall, 2), "tool_s": tool}
    timing["probe_tool_s"] = round(timing["probe_tool_s"] + tool, 2)
    timing["control_overhead_s"] = round(wall - timing["probe_tool_s"], 2)
    timing["control_overhead_pct"] = round(100 * timing["control_overhead_s"] / wall, 1) if wall > 0 else 0.0


def run(inv, nodes: list[str], cfg: ProbeSettings, judge, forks: int, all_pairs: bool = False,
        *, io: Backend, progress=None) -> ProbeOutcome:
    """Every probe on ``nodes`` (their own, then the pair rounds), judged by ``judge``; concurrency
    bounded by ``forks`` throughout. ``io``: the run's collect.backend.Backend (ssh or slurm; a fake in the
    tests). ``progress``: told as the node probes and each pair round begin, and as each node and pair ends
    (clustercert.report.progress.RunProgress)."""
    tell = progress or (lambda kind, **ev: None)
    cp = paths.control_dir()
    hosts = inv.hosts
    t0 = time.monotonic()
    down: set[str] = set()
    why_down: dict[str, str] = {}
    forks = max(1, forks)
    domains = {n: hosts[n].vars.clustercert_rack for n in nodes if getattr(hosts[n].vars, "clustercert_rack",
                                                                           None)}
    loop = Rounds(list(nodes), domains=domains or None, all_pairs=all_pairs)
    first = loop.first()
    plans = _early_plans(hosts, nodes, cfg, first, forks)
    waiting: dict[str, list[PairPlan]] = {}
    for plan in plans.values():
        waiting.setdefault(plan.b.name, []).append(plan)
    ahead = max((node_phase_limit(hosts[n], cfg) for n in nodes), default=0.0) if plans else 0.0
    early = ThreadPoolExecutor(max_workers=max(1, min(forks * 4, sum(len(j) for p in plans.values()
                                                                     for j, _ in p.stages) or 1)))
    lock = threading.Lock()

    def hcas_free(node: str) -> None:
        with lock:
            ready = waiting.pop(node, [])
        for plan in ready:
            start_servers(plan, early, cp, ahead, io=io)

    per_node: dict[str, list[Measurement]] = {}
    round_times: list[dict] = []
    pair_ms: list[Measurement] = []
    try:
        # before any probe: once round 1's servers start early they may hold every session a node allows
        # (MaxSessions - 2) until their clients come, and reading Slurm needs one of them
        slurm_states = None if getattr(io, "job_id", None) else slurm_launch_states(inv, list(nodes), cfg, cp)
        per_node = _node_phase(hosts, nodes, cfg, cp, forks, down, why_down, hcas_free, tell, io)
        node_wall = time.monotonic() - t0
        loop.node_bad = {n for n, ms in per_node.items() if any(m.status in ("fail", "error") for m in ms)}
        loop.down |= down
        rnd = first
        while rnd is not None:
            round_times.append(_pair_round(rnd, loop, hosts, cfg, cp, forks, down, slurm_states, plans, judge,
                                           tell, io, per_node, pair_ms))
            rnd = loop.next()
    except BaseException:  # servers started for pairs that never ran are ended here
        early.shutdown(wait=True, cancel_futures=True)
        _stop_servers(plans, io, failed=True)
        raise
    finally:
        early.shutdown(wait=True)
    _stop_servers(plans, io)  # a pair that never ran (its node went away)
    inference = loop.inference()
    judge.finish([m for ms in per_node.values() for m in ms] + pair_ms)
    t_cluster = time.monotonic()
    clustered = (cluster_probes(inv, list(nodes), cfg, cp, pair_ms, loop.node_bad, down, inference.findings,
                                slurm_states, io=io) if cfg.node_probes else [])
    cluster_wall = time.monotonic() - t_cluster
    wall = time.monotonic() - t0
    for m in pair_ms:  # a pair's client that did not answer says why in its observed text
        if m.a in down and m.a not in why_down and m.observed.startswith(f"{m.a} did not answer: "):
            why_down[m.a] = m.observed.removeprefix(f"{m.a} did not answer: ")
    timing = probe_timing(per_node, node_wall, round_times, wall)
    if clustered:
        _cluster_timing(timing, clustered, cluster_wall, wall)
    return ProbeOutcome(per_node, pair_ms, inference.findings, loop.done, down, round(wall, 2), timing,
                        inference, why_down, clustered)


# ---- the compute rails' discovery, before `clustercert probe` ---------------------------------------------

def discover_rails(inv, nodes: list[str], forks: int = DEFAULT_FORKS, *, io: Backend) -> dict:
    """{node: its clustercert.checks.rails.NodeRails} for ``nodes`` whose profile has compute rails: each
    node's ``nvidia-smi topo -m`` and /sys/class/infiniband read in one connection, then the one rule applied
    (certify and drift take the rails from the validators' collection pass instead). A node that did not
    answer, or whose evidence did not run or parse, has unknown rails: each of its rail probes is then an
    error."""
    hosts = {n: inv.hosts[n] for n in nodes if rails_checks.wanted(inv.hosts[n].profile)}
    if not hosts:
        return {}
    timeout = {n: float(h.vars.clustercert_command_timeout_s) for n, h in hosts.items()}
    cmds = {n: {"nvsmi_topo": (rails_checks.TOPO_CMD, timeout[n]), "ib_sysfs": (SYSFS_CMD, timeout[n])}
            for n in hosts}
    evidence = io.collect_many({n: h.connection for n, h in hosts.items()}, cmds, forks=max(1, forks),
                               control_dir=paths.control_dir())
    out = {}
    for n, h in hosts.items():
        ev = evidence.get(n)
        if ev is None or not ev.reachable:
            why = f"{n} did not answer: {ev.error if ev is not None else 'not collected'}"
            out[n] = rails_checks.node_rails(h.profile, None, None, why)
        else:
            out[n] = rails_checks.of_evidence(h.profile, ev.results.get("nvsmi_topo"),
                                              ev.results.get("ib_sysfs"), timeout[n])
    return out
