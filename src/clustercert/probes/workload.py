"""Evaluation of what a training job needs besides host-memory bandwidth (issue 22), pure: GPUDirect RDMA
(the GPU-NIC mapping against ``nvidia-smi topo -m``; ib_write_bw --use_cuda is judged by
evaluate.eval_perftest), the transport NCCL really chose, the per-GPU NVLink aggregate, checkpoint
storage (fio) and the DDP smoke test (torchrun). Each turns a command's output into Measurements; a
command that did not run, timed out or printed nothing readable is ``error``, never ``pass``.
"""

from __future__ import annotations

import statistics

from clustercert.checks import rails as rails_checks
from clustercert.model.evidence import CommandResult
from clustercert.model.profile import Profile, Threshold
from clustercert.parsers import ParseError, parse
from clustercert.probes.commands import NVLINK_TESTS
from clustercert.probes.evaluate import (
    Measurement,
    _excerpt,
    _outcome,
    _why,
    bound_text,
    host_of,
    judge_value,
)

# nvidia-smi topo -m link types from nearest to farthest (NV# is GPU-GPU only)
TOPO_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC")
GDR_NEAR = ("PIX", "PXB")  # GPUDirect RDMA's paths: at most PCIe switches between GPU and NIC


# ---- GPUDirect RDMA: the profile's GPU-NIC pairs against topo -m ------------------------------------

def eval_gdr_topology(node: str, profile: Profile, pairs, res: CommandResult | None,
                      timeout: float) -> list[Measurement]:
    """One measurement per GPU-rail pair (``pairs``: the node's rails, clustercert.checks.rails.Rail; subject
    ``GPUg-hca topology``), on the probes' own topo -m: passes when it shows the HCA behind the GPU's PCIe
    switch (PIX or PXB), no other HCA nearer, and the GPU on the NUMA node the pair was pinned to (where both
    show one)."""
    src = profile.gpudirect.source if profile.gpudirect else ""

    def m(p, status: str, observed: str, evidence: str = "") -> Measurement:
        return Measurement(
            "ib_write_bw_gdr",
            node,
            subject=f"GPU{p.gpu}-{p.hca} topology",
            status=status,
            expected=f"{p.hca} PIX/PXB to GPU{p.gpu}, nearest of the HCAs, NUMA node "
            f"{p.numa if p.numa is not None else 'as topo -m shows'} "
            f"(gpudirect: {src})",
            observed=observed,
            evidence=evidence,
            relative=False,
        )

    rec, why = _outcome(res, timeout, "nvidia-smi-topo", "nvidia-smi topo -m")
    if why:
        return [m(p, "error", why, _excerpt(res)) for p in pairs]
    nic_col = {}
    for d in rec["devices"]:
        if d["kind"] == "nic":
            nic_col[d.get("nic_name") or d["name"]] = d["name"]
    out = []
    for p in pairs:
        row = rec["matrix"].get(f"GPU{p.gpu}")
        if row is None or p.hca not in nic_col:
            missing = f"GPU{p.gpu}" if row is None else p.hca
            out.append(m(p, "fail", f"{missing} is not in nvidia-smi topo -m", _excerpt(res)))
            continue
        cell = row.get(nic_col[p.hca])
        links = {nic: row.get(col) for nic, col in nic_col.items() if row.get(col) in TOPO_ORDER}
        best = min((TOPO_ORDER.index(v) for v in links.values()), default=len(TOPO_ORDER))
        nearer = sorted(n for n, v in links.items() if TOPO_ORDER.index(v) < TOPO_ORDER.index(cell)) \
            if cell in TOPO_ORDER else []
        numa = (rec["affinity"].get(f"GPU{p.gpu}") or {}).get("numa_affinity")
        problems = []
        if cell not in GDR_NEAR:
            problems.append(f"{p.hca} is {cell} to GPU{p.gpu} (GPUDirect RDMA needs PIX or PXB)")
        if nearer and TOPO_ORDER.index(cell) > best:
            problems.append(f"nearer to GPU{p.gpu}: {', '.join(f'{n} ({links[n]})' for n in nearer)}")
        if numa not in (None, "", "N/A") and p.numa is not None and numa != str(p.numa):
            problems.append(f"GPU{p.gpu} is on NUMA node {numa}, the pair was pinned to {p.numa}")
        shown = f"GPU{p.gpu}-{p.hca} {cell}, NUMA {numa if numa not in (None, '') else 'not shown'}"
        out.append(m(p, "fail" if problems else "pass", "; ".join(problems) or shown, shown))
    return out


# ---- NCCL's transport across a pair ----------------------------------------------------------------

def _bad_connection(c: dict, mine: list[str]) -> str | None:
    """What is wrong with one NET connection of a node whose rails are ``mine`` (None: NET/IB as wanted)."""
    net = c["net"] or "?"
    if net == "Socket":
        return "NET/Socket (TCP) instead of InfiniBand"
    if not net.startswith("IB"):
        return f"NET/{net}, not InfiniBand"
    if not c["gdr"] and (c["hca"] in mine or c["hca"] is None):
        return f"{c['hca'] or 'NET/' + net + '/' + str(c['device'])} without GDRDMA"
    return None


def _node_transport(name: str, hs: list[dict], mine: list[str], problems: list[str], shown: list[str]) -> int:
    """One end's connections judged (problems and the lines that show them added); returns how many NET
    connections it printed."""
    conns = [c for h in hs for c in h["connections"] if c["transport"] == "NET"]
    devices = {k: v for h in hs for k, v in h["net_devices"].items()}
    bad = [(c, w) for c in conns if (w := _bad_connection(c, mine)) is not None]
    for what in dict.fromkeys(w for _c, w in bad):
        lines = [c["line"] for c, w in bad if w == what]
        problems.append(f"{name}: {what} ({len(lines)} connection{'s' if len(lines) > 1 else ''})")
        shown += lines[:4]
    if devices and conns:
        used = {c["hca"] for c in conns}
        unused = [r for r in mine if r not in used]
        if unused:
            problems.append(f"{name}: {', '.join(unused)} not used by NCCL (its NICs: "
                            f"{', '.join(devices[k] for k in sorted(devices, key=int))})")
    return len(conns)


def eval_nccl_transport(a: str, b: str, profile: Profile, res: CommandResult | None, timeout: float,
                        addresses: dict[str, str] | None = None, note: str = "",
                        rails_by_node: dict[str, list[str]] | None = None) -> Measurement:
    """The pair NCCL run's NCCL_DEBUG=INFO lines, per end: every inter-node connection uses NCCL's
    InfiniBand transport, with GDRDMA on each of that node's rails (``rails_by_node``: its compute rails,
    clustercert.checks.rails), and each rail is used. NET/Socket, another network, or IB without GDRDMA on a
    rail fails with the lines that show it; a run that printed no connection line is an error."""
    if rails_by_node is None:
        fixed = rails_checks.node_rails(profile, None, None).names or []
        rails_by_node = {a: fixed, b: fixed}
    rails = list(dict.fromkeys(r for n in (a, b) for r in rails_by_node.get(n, [])))
    m = Measurement("nccl_transport", a, b, subject=f"{a}+{b}", relative=False,
                    expected=f"NET/IB with GDRDMA on {', '.join(rails)} at both ends "
                             f"(gpudirect: {profile.gpudirect.source if profile.gpudirect else 'not set'})")
    why = _why(res, timeout)
    text = "" if res is None else res.stdout + "\n" + res.stderr
    try:
        rec = parse("nccl-info-transport", text)
    except ParseError as exc:
        m.status = "error"
        m.observed = why or f"no NCCL_DEBUG=INFO transport lines in the pair run's output ({exc.reason})"
        m.evidence = note + _excerpt(res)
        return m
    nodes = addresses or {a: a, b: b}
    per_node: dict[str, list[dict]] = {}
    for host, h in rec["hosts"].items():
        per_node.setdefault(host_of(host, nodes) or host, []).append(h)
    problems: list[str] = []
    shown: list[str] = []
    count = sum(_node_transport(name, per_node[name], rails_by_node.get(name, rails), problems, shown)
                for name in sorted(per_node))
    missing = [n for n in (a, b) if not any(c["transport"] == "NET" for h in per_node.get(n, [])
                                            for c in h["connections"])]
    if count and missing and set(per_node) & {a, b}:
        problems.append(f"no inter-node connection line from {', '.join(missing)}")
    if not count:
        m.status = "error"
        m.observed = (
            why + "; " if why else ""
        ) + "no inter-node connection line (Channel ... via NET/...) in the output"
        m.evidence = note + _excerpt(res)
        return m
    m.status = "fail" if problems else "pass"
    m.observed = "; ".join(problems) if problems else (
        f"NET/IB with GDRDMA on {', '.join(rails) or 'every rail'} at both ends ({count} connections)")
    m.evidence = note + ("\n".join(shown) if shown else "\n".join(
        c["line"] for h in rec["hosts"].values() for c in h["connections"] if c["transport"] == "NET")[:1500])
    return m


# ---- GPUDirect preflight: does this node's perftest take --use_cuda ------------------------------------

GDR_FIX = ("install a perftest built with CUDA (the nccl_tools role: nccl_tools_perftest_version set to the "
           "site mirror's CUDA build, nccl_tools_perftest_cuda: true; docs/provisioning.md)")


def gdr_preflight(res: CommandResult | None, timeout: float) -> str | None:
    """Why ib_write_bw --use_cuda cannot be judged on this node (None: its perftest takes --use_cuda):
    ``ib_write_bw --help`` did not run or printed no usage text, or its usage lists no --use_cuda (a
    perftest built without CUDA, as the distributions ship it), with the fix."""
    why = _why(res, timeout)
    if why:
        return f"GPUDirect preflight (ib_write_bw --help): {why}"
    try:
        rec = parse("perftest-help", res.stdout + "\n" + res.stderr)
    except ParseError as exc:
        return f"GPUDirect preflight: ib_write_bw --help printed no usage text ({exc})"
    if not rec["use_cuda"]:
        return ("this node's perftest was built without CUDA: ib_write_bw --help lists no --use_cuda, so "
                f"GPUDirect RDMA cannot be measured; {GDR_FIX}")
    return None


# ---- NVLink: per GPU, both directions --------------------------------------------------------------

def _per_gpu_total(tc: dict, into: bool) -> dict[str, float]:
    """Per GPU the bandwidth of an all_to_one (``into``) or one_to_all testcase: nvbandwidth prints one
    row holding each GPU's total; a full matrix is summed per column (into) or row (out of the GPU)."""
    mats = [x for x in tc.get("matrices", []) if x.get("unit") == "gbyte_per_s"]
    if not mats:
        return {}
    mat = mats[-1]
    cols, rows = [str(c) for c in mat.get("columns") or []], mat.get("rows") or {}
    if len(rows) == 1:
        row = next(iter(rows.values()))
        return {c: v for c, v in zip(cols, row, strict=False) if v is not None}
    out: dict[str, float] = {}
    for r, vals in rows.items():
        for c, v in zip(cols, vals, strict=False):
            if v is not None:
                key = c if into else str(r)
                out[key] = out.get(key, 0.0) + v
    return out


def eval_nvlink_aggregate(
    node: str, t: Threshold, res: CommandResult | None, timeout: float
) -> list[Measurement]:
    """Per GPU: what all its peers write into it (all_to_one_write_ce) plus what it writes into all of them
    (one_to_all_write_ce), summed as NVIDIA quotes NVLink bandwidth (both directions)."""
    def err(why: str) -> list[Measurement]:
        return [Measurement("nvlink_aggregate", node, subject="GPUs", status="error", expected=bound_text(t),
                            observed=why, evidence=_excerpt(res), threshold="nvlink_aggregate")]

    rec, why = _outcome(res, timeout, "nvbandwidth", "nvbandwidth")
    if why:
        return err(why)
    tcs = {x.get("name"): x for x in rec.get("testcases", [])}
    into_name, out_name = NVLINK_TESTS
    for name in NVLINK_TESTS:
        tc = tcs.get(name)
        if tc is None or tc.get("status") not in (None, "passed"):
            return err(f"testcase {name} {'missing' if tc is None else tc.get('status')}"
                       + (f": {tc.get('message')}" if tc and tc.get("message") else ""))
    into, out_of = _per_gpu_total(tcs[into_name], True), _per_gpu_total(tcs[out_name], False)
    gpus = sorted(set(into) & set(out_of), key=int)
    if not gpus:
        return err("no per-GPU values in the all_to_one/one_to_all testcases")
    out = []
    for g in gpus:
        mm = judge_value(
            Measurement("nvlink_aggregate", node, subject=f"GPU{g}", threshold="nvlink_aggregate"),
            t,
            into[g] + out_of[g],
            "gbyte_per_s",
            res,
        )
        mm.observed += f" ({into[g]:g} in from all peers + {out_of[g]:g} out to all peers)"
        out.append(mm)
    return out


# ---- checkpoint storage -------------------------------------------------------------------------------

def _fio_says(rec: dict | None, res: CommandResult | None, job: str) -> str:
    """fio's own words about a failed job (its stderr and the lines around its JSON): the lines naming
    the job first (``read: you need to specify size=``), then its ``fio: ... err=`` lines; '' when none."""
    lines = [ln.strip() for ln in ((res.stderr if res is not None else "").splitlines()
                                   + list((rec or {}).get("messages") or [])) if ln.strip()]
    mine = [ln for ln in lines if ln.startswith(f"{job}:")]
    errs = [
        ln for ln in lines if ln.startswith("fio:") and ("err=" in ln or "error" in ln) and ln not in mine
    ]
    return "; ".join(dict.fromkeys(mine + errs))[:400]


def eval_checkpoint(node: str, path: str, size_mib: int, tw: Threshold | None, tr: Threshold | None,
                    res: CommandResult | None, timeout: float) -> list[Measurement]:
    """fio's write and read-back of the checkpoint on ``path``: GB/s (10^9 bytes/s) against the floors.
    A job fio could not run is an error naming fio's message; where fio exited non-zero, a job its JSON
    shows complete (error 0, data moved) is still judged, the others are errors."""
    out = []
    rec, why = _outcome(res, timeout, "fio-json", "fio")
    exited = res is not None and why is not None and why.startswith("exited with status")
    if exited:  # fio stopped part way: what its JSON says of each job, where it printed any
        try:
            parsed = parse("fio-json", res.stdout)
        except ParseError:
            parsed = None
        # judged job by job where a job says it failed; a non-zero exit with both jobs whole stays an error
        named = {j["name"]: j for j in parsed["jobs"]} if parsed is not None else {}
        if parsed is not None and any(n not in named or named[n]["error"] or not named[n][n]["bytes"]
                                      for n in ("write", "read")):
            rec, why = parsed, None
    for job, t, key in (("write", tw, "checkpoint_write"), ("read", tr, "checkpoint_read")):
        if t is None:
            continue
        m = Measurement("checkpoint_write", node, subject=f"{path} {job}", threshold=key, relative=False)
        if why:
            says = _fio_says(None, res, job) if exited else ""
            m.status, m.observed, m.expected = (
                "error",
                why + (f"; fio: {says}" if says else ""),
                bound_text(t),
            )
            m.evidence = _excerpt(res) + (
                f"\n{res.stderr.strip()[-500:]}" if res is not None and res.stderr.strip() else ""
            )
            out.append(m)
            continue
        j = next((x for x in rec["jobs"] if x["name"] == job), None)
        if j is None or j["error"] or not j[job]["bytes"]:
            says = _fio_says(rec, res, job)
            m.status, m.expected = "error", bound_text(t)
            m.observed = (
                f"fio {job} job {'missing' if j is None else 'failed (error ' + str(j['error']) + ')'}"
                if j is None or j["error"]
                else f"fio {job} job moved no data"
            )
            m.observed += (f": {says}" if says else "") + (
                f" (fio exited with status {res.rc})" if exited else ""
            )
            m.evidence = "\n".join(
                [*rec["messages"], *(res.stderr.strip().splitlines()[-8:] if res is not None else [])]
            ) or _excerpt(res)
            out.append(m)
            continue
        d = j[job]
        m = judge_value(m, t, d["bw_bytes_per_s"] / 1e9, "gbyte_per_s", res)
        moved = d["bytes"] / 1048576
        m.observed += f" ({moved:g} MiB in {d['runtime_ms'] / 1000:g} s"
        m.observed += (
            ")"
            if job == "read" or moved >= size_mib
            else f" of the {size_mib} MiB checkpoint: the probe's time ran out)"
        )
        m.evidence = (
            f"fio {job} {path}: {d['bytes']} bytes, {d['bw_bytes_per_s']:.0f} bytes/s, {d['runtime_ms']} ms"
        )
        out.append(m)
    return out


# ---- the DDP smoke test ---------------------------------------------------------------------------------

def _rank_problems(ranks: list[dict]) -> list[str]:
    """What the ranks reported wrong (each once, in order): their problems and their errors by host."""
    problems: list[str] = []
    for r in ranks:
        found = list(r.get("problems") or [])
        if r.get("error"):
            found.append(f"{r.get('host', '?')}: {r['error']}")
        problems += [p for p in dict.fromkeys(found) if p not in problems]
    return problems


def _ddp_problems(rec: dict, nproc: int, want: int, why: str | None) -> list[str]:
    """Why the launch fails: the ranks' problems, a --nproc_per_node the profile does not expect, torchrun or
    the rendezvous stopping it before any rank ran, ranks missing, or (nothing else wrong) ``why``."""
    ranks = rec["ranks"]
    problems = _rank_problems(ranks)
    if nproc != want and not any("LOCAL_WORLD_SIZE" in p for p in problems):
        problems.insert(0, f"launched with --nproc_per_node={nproc}, the profile expects {want} per node")
    if not ranks and rec.get("exceptions"):  # torchrun itself stopped (on either node) before any rank ran
        problems.append("torchrun stopped before any rank reported: " + "; ".join(rec["exceptions"][:3]))
    if rec["rendezvous_unreachable"] and not ranks:
        problems.append(
            "the rendezvous was not reached: "
            + next(
                (e for e in rec["errors"] if "endezvous" in e or "socket" in e or "onnect" in e),
                rec["errors"][0],
            )
        )
    reported = {r.get("rank") for r in ranks if r.get("rank") is not None}
    if not problems and len(reported) != 2 * nproc:
        problems.append(f"{len(reported)} of {2 * nproc} ranks reported"
                        + (f" ({why})" if why else "") + (f"; {rec['errors'][-1]}" if rec["errors"] else ""))
    if not problems and why:
        problems.append(why)
    return problems


def _ddp_evidence(rec: dict) -> str:
    """One line per rank (host, local rank, world size, torch, backend, all_reduce result), then the
    errors."""
    lines = [f"rank {r.get('rank')} {r.get('host')} local {r.get('local_rank')}/{r.get('local_world_size')} "
             f"world {r.get('world_size')} torch {r.get('torch')} {r.get('backend')}: all_reduce "
             f"{(r.get('allreduce') or {}).get('min')} (expected "
             f"{(r.get('allreduce') or {}).get('expected')})"
             for r in sorted(rec["ranks"], key=lambda r: (r.get("rank") is None, r.get("rank") or 0))]
    return "\n".join(lines + rec["errors"][:8])[:3000]


def eval_ddp(a: str, b: str, profile: Profile, nproc: int, res: CommandResult | None, timeout: float,
             note: str = "") -> Measurement:
    """The torchrun launch across a and b: passes when every one of the 2 x ranks_per_node ranks reported,
    torch.distributed's world size, ranks and local ranks are what the profile expects, and every rank's
    all_reduce came back right. A mismatch (processes per node, GPUs, world size), a rendezvous that was
    not reached, a wrong result, or a rank torch could not start is a fail with the reason; a launcher
    that is missing, or a launch that printed nothing of the test, is an error. Value: the median time
    of one all_reduce step over every rank (ms)."""
    ddp = profile.ddp
    want = profile.ddp_ranks
    m = Measurement("ddp_allreduce", a, b, subject=f"{a}+{b}, {2 * nproc} ranks", relative=False,
                    lower_is_better=True,
                    expected=(f"torchrun --nnodes=2 --nproc_per_node={want}: world size {2 * want}, ranks "
                              f"and local ranks complete, all_reduce right on every rank ({ddp.backend}; "
                              f"{ddp.source})"))
    m.evidence = note
    why = _why(res, timeout)
    text = "" if res is None else res.stdout + "\n" + res.stderr
    try:
        rec = parse("ddp-smoke", text) if text.strip() else None
    except ParseError:
        rec = None
    if rec is None or (why and why.startswith("tool not found")):
        m.status, m.observed = "error", why or "the launch printed nothing of the test"
        m.evidence += _excerpt(res)
        return m
    ranks = rec["ranks"]
    problems = _ddp_problems(rec, nproc, want, why)
    steps = [x for r in ranks for x in (r.get("allreduce") or {}).get("step_ms") or []]
    m.evidence += _ddp_evidence(rec)
    if steps:
        m.value, m.unit = round(statistics.median(steps), 3), "ms"
    if problems:
        m.status, m.observed = "fail", "; ".join(problems)
        return m
    r0 = ranks[0]
    m.status = "pass"
    m.observed = (f"world size {r0.get('world_size')} from torch {r0.get('torch')} ({r0.get('backend')}): "
                  f"all_reduce of {(r0.get('allreduce') or {}).get('bytes')} B gave "
                  f"{(r0.get('allreduce') or {}).get('expected'):g} on every rank; median step {m.value:g} "
                  "ms")
    return m


# ---- probe.ddp_step: DistributedDataParallel steps, stragglers --------------------------------------------

def _node_of(r: dict, nodes: tuple[str, str]) -> str | None:
    """The inventory node a rank ran on: torchrun's GROUP_RANK (its --node_rank) indexes the launch's
    nodes."""
    try:
        i = int((r.get("env") or {}).get("GROUP_RANK"))
    except (TypeError, ValueError):
        return None
    return nodes[i] if 0 <= i < len(nodes) else None


def eval_ddp_step(a: str, b: str, profile: Profile, nproc: int, res: CommandResult | None,
                  timeout: float) -> list[Measurement]:
    """One measurement per node of the launch: its ranks' DistributedDataParallel steps (forward, backward
    with the gradient buckets all-reduced, optimizer step). The value judged is the node's slowest rank's
    median forward pass (the rank's own work: backward waits for every rank's gradients, so whole steps
    take the same time everywhere) over the median of the OTHER node's ranks: in a pair half the ranks are
    the slow node's own, and the median of all would be pulled halfway to them. A ratio above the profile's
    ddp.straggler_ratio is a straggler, blamed on its node only. Where the ranks did not all report their
    steps (missing output, a rank that never finished, the launch's timeout) both nodes are errors: the one
    cannot be judged, the other has nothing whole to be judged against."""
    ddp, nodes = profile.ddp, (a, b)
    k = ddp.straggler_ratio
    expected = (f"every rank's median forward pass <= {k:g} x the median of the other node's ranks "
                f"({ddp.straggler_source})")
    why = _why(res, timeout)
    text = "" if res is None else res.stdout + "\n" + res.stderr
    try:
        rec = parse("ddp-smoke", text) if text.strip() else None
    except ParseError:
        rec = None
    ranks = rec["ranks"] if rec else []
    per: dict[str, list[dict]] = {n: [] for n in nodes}
    for r in ranks:
        n = _node_of(r, nodes)
        steps = (r.get("ddp") or {}).get("forward_ms") or []
        if n is not None and steps:
            per[n].append({**r, "_fwd": statistics.median(steps)})
    out = []
    for n in nodes:
        m = Measurement(
            "ddp_step",
            n,
            subject=f"{n} in {a}+{b}, DDP steps",
            relative=False,
            lower_is_better=True,
            expected=expected,
            unit="ratio",
        )
        mine, other = per[n], per[b if n == a else a]
        m.evidence = "\n".join(
            f"rank {r.get('rank')} {r.get('host')} ({n}): forward median {r['_fwd']:g} ms, steps "
            f"{r['ddp'].get('step_ms')}, {r['ddp'].get('dtype')} on {r['ddp'].get('device')}, loss "
            f"{r['ddp'].get('loss_first'):g} -> {r['ddp'].get('loss_last'):g}"
            for r in mine
        )[:2000] or _excerpt(res)
        # judged only against a partner whose ranks all reported
        if why or len(mine) < nproc or len(other) < nproc:
            short = ", ".join(f"{x}: {len(per[x])} of {nproc} ranks" for x in nodes if len(per[x]) < nproc)
            m.status = "error"
            m.observed = (
                "; ".join(x for x in (why, f"DDP steps not reported ({short})" if short else "") if x)
                or "no DDP step times"
            )
            out.append(m)
            continue
        base = statistics.median(r["_fwd"] for r in other)
        worst = max(mine, key=lambda r: r["_fwd"])
        ratio = worst["_fwd"] / base if base > 0 else float("inf")
        m.value = round(ratio, 3)
        m.status = "pass" if ratio <= k else "fail"
        m.observed = (f"slowest rank {worst.get('rank')}: forward {worst['_fwd']:g} ms median over "
                      f"{len(worst['ddp']['forward_ms'])} steps, {ratio:.2f} x the other node's median "
                      f"{base:g} ms" + (" (a straggler)" if ratio > k else ""))
        out.append(m)
    return out
