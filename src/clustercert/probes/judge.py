"""Judges: what makes a pair's measurement good, for the verb that runs the probes. Pure.

The round loop (clustercert.probes.run) asks its judge of every measurement whether it passes; the
pairs' channels pass or fail on that, and localisation reasons over them. certify and probe judge
against the profile's thresholds (and, once every round is done, the cluster-relative outlier rule);
drift judges against the baseline certificate's values.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from clustercert.probes.evaluate import Measurement, apply_outlier_rule


class ThresholdJudge:
    """certify, probe: a measurement passes when it met its profile threshold (evaluate set its status)."""

    def __init__(self, outlier_ratio=None):
        self.outlier_ratio = outlier_ratio  # the profile's outlier_ratio Threshold, or None

    @classmethod
    def for_inventory(cls, inv) -> ThresholdJudge:
        """With the outlier ratio of the inventory's profile (the first host's; one cluster, one rule)."""
        return cls(next((h.profile.thresholds.get("outlier_ratio") for h in inv.hosts.values()), None))

    def ok(self, m: Measurement) -> bool:
        return m.status == "pass"

    def note(self, m: Measurement) -> str | None:
        return None if self.ok(m) else f"{m.probe} {m.subject}: {m.status}: {m.observed}"

    def finish(self, measurements: list[Measurement]) -> None:
        """After every round: bandwidths far below the cluster's median fail too."""
        t = self.outlier_ratio
        if t is not None and t.floor:
            apply_outlier_rule(measurements, t.floor, t.source)


class BaselineJudge:
    """drift: a measurement passes unless it dropped more than the node's tolerance from the baseline's
    median of the same probe and fabric (a latency: rose more than it), or could not be measured."""

    def __init__(self, baseline_links: list[dict], tolerance_of: Callable[[str], float]):
        groups: dict[tuple[str, int | None], list[float]] = {}
        for lk in baseline_links:
            if lk.get("value") is not None and lk.get("status") == "pass":
                groups.setdefault((lk["probe"], lk["fabric"]), []).append(lk["value"])
        self.median = {k: statistics.median(v) for k, v in groups.items()}
        self.tolerance_of = tolerance_of

    def note(self, m: Measurement) -> str | None:
        """Why ``m`` drifted, or None."""
        fab = "" if m.fabric is None else f" fabric {m.fabric}"
        if m.status == "error" or m.value is None:
            return f"{m.probe}{fab}: {m.observed}"
        ref, tol = self.median.get((m.probe, m.fabric)), self.tolerance_of(m.a)
        if ref and m.lower_is_better and m.value > ref * (1 + tol):
            return (f"{m.probe}{fab}: {m.value:g} {m.unit} vs baseline median {ref:g} "
                    f"(+{(m.value / ref - 1) * 100:.0f}%, tolerance {tol * 100:.0f}%)")
        if ref and not m.lower_is_better and m.value < ref * (1 - tol):
            return (f"{m.probe}{fab}: {m.value:g} {m.unit} vs baseline median {ref:g} "
                    f"(-{(1 - m.value / ref) * 100:.0f}%, tolerance {tol * 100:.0f}%)")
        return None

    def ok(self, m: Measurement) -> bool:
        return self.note(m) is None

    def finish(self, measurements: list[Measurement]) -> None:
        pass
