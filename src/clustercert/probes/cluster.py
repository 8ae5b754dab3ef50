"""probe.nccl_cluster: one all_reduce across every node the pair rounds cleared, judged on how it scales.
Pure: which nodes and rail groups it runs over (``cluster_plan``), and the verdict of a run
(``eval_cluster``); clustercert.probes.run runs what this plans, after the pair rounds.

A pair's NCCL run (probe.nccl_allreduce) measures two nodes; a job spans many, and what only shows at scale (a
spine or uplink that is oversubscribed or slow, a node that slows a ring only once there are more than two) is
not in any pair. So after the pair rounds ONE all_reduce_perf runs across all the nodes that passed them (N
nodes x G GPUs ranks, the pair run's launcher: mpirun -H over ssh, or one srun step), and its bus bandwidth is
compared with the median pair figure. nccl-tests' bus bandwidth is normalised so that it reflects the hardware
bottleneck whatever the number of ranks (nccl-tests doc/PERFORMANCE.md): a healthy cluster's figure stays near
the pair's, and the ratio of the two is the scaling efficiency, held to the profile's nccl_allreduce_cluster
floor.

Where the profile's compute rails span several fabrics, each fabric (rail group) also gets a run of its own
with NCCL_IB_HCA set to its HCAs ("=" prefix: exact names, as NCCL's IB transport reads it), judged against
the median pair figure x that fabric's share of the rated compute-rail bandwidth: a fabric whose spine is slow
is named, not averaged away by the other rails.

The run's rank lines must show every node with G ranks each (evaluate.nccl_rank_problem): a launch that put
ranks elsewhere is an error, whatever its figure. Fewer than three cleared nodes: the probe is a skip with the
reason (a pair is already measured), never a pass.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from clustercert.model.evidence import CommandResult
from clustercert.model.profile import Threshold
from clustercert.probes import evaluate
from clustercert.probes.evaluate import Measurement

MIN_NODES = 3           # with two, the pair run already measured it
PROBE = "nccl_cluster"  # its check id: probe.nccl_cluster
THRESHOLD = "nccl_allreduce_cluster"
PAIR_PROBE = "nccl_allreduce"  # the pair figure it scales against


@dataclass
class ClusterMeasurement(Measurement):
    """A cluster-wide measurement: ``a`` is the node rank 0 ran on, ``nodes`` every node of the run."""

    nodes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RailGroup:
    """The rails one cluster run uses: every compute rail, or those of one fabric."""

    label: str                 # "all rails" | "fabric F"
    fabric: int | None
    hcas: tuple[str, ...]      # NCCL_IB_HCA's names; () for every rail (NCCL's own choice)
    share: float               # the group's share of the rated compute-rail bandwidth

    @property
    def env(self) -> dict[str, str]:
        """What the run exports: NCCL_IB_HCA with "=" (exact HCA names, not prefixes) for one fabric's
        rails."""
        return {"NCCL_IB_HCA": "=" + ",".join(self.hcas)} if self.hcas else {}


def rail_groups(profile) -> list[RailGroup]:
    """Every compute rail; and where the compute HCAs the profile names (ib.hcas, role compute) span several
    fabrics, each fabric's rails on their own. Rails the profile states only by count (hardware.rails, their
    names discovered per node) sit on one fabric: one run over all of them."""
    rails = [h for h in profile.ib.hcas if h.role == "compute"]
    groups = [RailGroup("all rails", None, (), 1.0)]
    fabrics = sorted({h.fabric for h in rails})
    total = sum(h.rate_gbit_per_s for h in rails)
    if len(fabrics) > 1 and total > 0:
        for f in fabrics:
            mine = [h for h in rails if h.fabric == f]
            groups.append(RailGroup(f"fabric {f}", f, tuple(h.name for h in mine),
                                    round(sum(h.rate_gbit_per_s for h in mine) / total, 6)))
    return groups


def cleared_nodes(nodes: list[str], pairs: list[Measurement], node_bad: set[str], down: set[str],
                  localisation) -> list[str]:
    """The nodes the pair rounds cleared, in ``nodes``' order: each answered, passed its own probes, passed
    every measurement of at least one pair, and no localisation finding names it (a bad node, a suspect,
    either end of a bad link)."""
    named: set[str] = set()
    for loc in localisation:
        named.update(loc.subject.split("<->"))
    by_pair: dict[frozenset, list[Measurement]] = {}
    for m in pairs:
        if m.b:
            by_pair.setdefault(frozenset((m.a, m.b, m.round)), []).append(m)
    passed: set[str] = set()
    for ms in by_pair.values():
        if all(m.status == "pass" for m in ms):
            passed.update((ms[0].a, ms[0].b))
    return [n for n in nodes if n in passed and n not in node_bad and n not in down and n not in named]


@dataclass
class ClusterPlan:
    nodes: list[str]           # the cleared nodes, in order (rank 0 on the first)
    groups: list[RailGroup]
    skip: str | None = None    # why it does not run (then one skip finding says so)


def cluster_plan(nodes: list[str], cleared: list[str], profile, th: dict,
                 per_fabric: bool = True) -> ClusterPlan | None:
    """What probe.nccl_cluster runs for the nodes of one profile (``nodes``, of which ``cleared`` passed the
    pair rounds); None where the profile sets no nccl_allreduce_cluster (or the probe was not asked for).
    ``per_fabric`` False (--nccl-cluster all-rails): the all-rails run alone."""
    if THRESHOLD not in th:
        return None
    groups = rail_groups(profile) if per_fabric else rail_groups(profile)[:1]
    if len(cleared) < MIN_NODES:
        which = f" ({', '.join(cleared)})" if cleared else ""
        return ClusterPlan(cleared, groups, f"not run: {len(cleared)} of {len(nodes)} nodes passed the pair "
                                            f"rounds{which}; the cluster run needs at least {MIN_NODES} (a "
                                            "pair is already measured by probe.nccl_allreduce)")
    return ClusterPlan(cleared, groups)


def median_pair(pairs: list[Measurement], nodes: list[str]) -> float | None:
    """The median busbw of the passing pair NCCL runs between ``nodes`` (None: there is none)."""
    inside = set(nodes)
    vals = [m.value for m in pairs if m.probe == PAIR_PROBE and m.status == "pass" and m.value is not None
            and {m.a, m.b} <= inside]
    return statistics.median(vals) if vals else None


def subject(n: int, gpus: int, group: RailGroup) -> str:
    return f"{n} nodes x {gpus} GPUs, {group.label}"


def skipped(plan: ClusterPlan, first: str, gpus: int) -> list[Measurement]:
    """The skip finding of a plan that does not run."""
    return [
        ClusterMeasurement(
            "nccl_cluster",
            first,
            subject=subject(len(plan.nodes), gpus, plan.groups[0]),
            status="skip",
            observed=plan.skip or "",
            relative=False,
            threshold=THRESHOLD,
            nodes=list(plan.nodes),
        )
    ]


def eval_cluster(first: str, group: RailGroup, nodes: dict[str, str], gpus: int, t: Threshold,
                 res: CommandResult | None, timeout: float, median: float | None) -> ClusterMeasurement:
    """One cluster run's verdict: its rank lines must cover ``nodes`` (inventory name -> address) with
    ``gpus`` ranks each, then its busbw at the largest size against ``t``'s floor x ``median`` (the median
    pair busbw) x the rail group's share. The value is the cluster busbw (GB/s); observed says N and the
    scaling efficiency."""
    n = len(nodes)
    m = ClusterMeasurement(
        "nccl_cluster",
        first,
        subject=subject(n, gpus, group),
        fabric=group.fabric,
        relative=False,
        threshold=THRESHOLD,
        nodes=list(nodes),
    )
    share = "" if group.share == 1.0 else f" x {group.label}'s share {group.share:g} of the rated rails"
    if median is None:
        m.expected = f">= {t.floor:g} x the median pair busbw{share} ({t.source})"
        return m.error(
            "no pair NCCL figure to scale against: no pair between these nodes passed probe.nccl_allreduce"
        )
    ref = median * group.share
    floor = round(t.floor * ref, 3)
    bound = Threshold(unit="gbyte_per_s", source=t.source, min=floor)
    m = evaluate.eval_nccl(m, bound, res, timeout, nodes, gpus)
    m.expected = (f">= {floor:g} gbyte_per_s: {t.floor:g} x the median pair busbw {median:g} "
                  f"gbyte_per_s{share} ({t.source})")
    if m.value is not None:
        eff = m.value / ref if ref else 0.0
        m.observed = (f"{m.value:g} gbyte_per_s across {n} nodes ({n * gpus} ranks): scaling efficiency "
                      f"{eff:.2f} of the median pair busbw {median:g} gbyte_per_s{share}")
    return m
