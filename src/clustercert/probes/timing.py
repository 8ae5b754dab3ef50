"""Probe-phase timing: the wall clock against the critical path of the probe tools' own run time.
The difference is the control overhead (scheduling, ssh, starting servers, cleaning up)."""

from __future__ import annotations

from clustercert.probes.evaluate import Measurement


def tool_seconds(measurements: list[Measurement]) -> float:
    """Seconds the probe tools behind ``measurements`` ran on one node: the probes of one stage
    (Measurement.stage) ran at once (the longest counts), the stages one after another. Without a
    stage: the loopback bandwidth probes of the rails at once, the other probes one after another."""
    longest: dict[tuple, float] = {}
    for i, m in enumerate(measurements):
        if m.elapsed is None:
            continue
        key = (
            ("stage", m.stage)
            if m.stage is not None
            else ("loopback",)
            if m.probe == "ib_write_bw_loopback"
            else ("own", i)
        )
        longest[key] = max(longest.get(key, 0.0), m.elapsed)
    return round(sum(longest.values()), 3)


def pair_round_tool_seconds(measurements: list[Measurement]) -> float:
    """Critical path of the tools' own run time in one pair round: per pair, the longest
    ib_write_bw job (the rails at once), plus the longest iperf3 job (the fabrics at once), plus
    the longest latency job, plus the pair's NCCL all_reduce -- the stages run one after another;
    the round takes as long as its longest pair."""
    per_pair: dict[tuple[str, str], list[float]] = {}
    stage = {"iperf3": 1, "ib_write_lat": 2, "nccl_allreduce": 3}
    for m in measurements:
        if m.elapsed is None:
            continue
        t = per_pair.setdefault((m.a, m.b), [0.0, 0.0, 0.0, 0.0])
        i = stage.get(m.probe, 0)
        t[i] = max(t[i], m.elapsed)
    return round(max((sum(t) for t in per_pair.values()), default=0.0), 3)


def probe_timing(
    per_node: dict[str, list[Measurement]], node_wall: float, rounds: list[dict], wall: float
) -> dict:
    """Probe-phase timing: wall time against the critical path of the tools' own run time (node
    probes: the slowest node's tools one after another; each pair round: pair_round_tool_seconds).
    ``rounds``: [{"round", "wall_s", "tool_s"}]. The difference is the control overhead: what
    scheduling, ssh, starting servers and cleaning up add."""
    node_tool = max((tool_seconds(ms) for ms in per_node.values()), default=0.0)
    tool = round(node_tool + sum(r["tool_s"] for r in rounds), 2)
    overhead = round(wall - tool, 2)
    return {"probe_wall_s": round(wall, 2), "probe_tool_s": tool, "control_overhead_s": overhead,
            "control_overhead_pct": round(100 * overhead / wall, 1) if wall > 0 else 0.0,
            "node_probes": {"wall_s": round(node_wall, 2), "tool_s": round(node_tool, 2)},
            "rounds": rounds}
