"""Probe evaluation on real tool output: values against the profile's threshold, failures as errors."""

from __future__ import annotations

from pathlib import Path

from clustercert.collect import CommandResult
from clustercert.probes import Measurement, apply_outlier_rule, eval_nccl, eval_perftest
from clustercert.profile import load_profile

FIX = Path(__file__).parent / "fixtures"
TH = load_profile("h100-sxm-8x-ndr").thresholds


def res(stdout: str, rc: int | None = 0, timed_out: bool = False) -> CommandResult:
    return CommandResult(rc, stdout, "", timed_out, 1.0, "tool")


def test_perftest_value_against_threshold():
    text = (FIX / "perftest" / "ib_read_bw-a-report_gbits-client-result-excerpt.txt").read_text()
    m = eval_perftest(Measurement("ib_write_bw", "a", "b"), TH["ib_write_bw_pair"], res(text), 30)
    assert m.status in ("pass", "fail") and m.unit == "gbit_per_s" and m.value > 0
    assert m.status == ("pass" if m.value >= 320 else "fail")
    assert "seed guide" in m.expected


def test_timeouts_and_failures_are_errors_never_passes():
    m = eval_perftest(Measurement("ib_write_bw", "a", "b"), TH["ib_write_bw_pair"], res("", rc=None, timed_out=True), 22)
    assert m.status == "error" and m.observed == "timed out after 22 s: tool"
    failed = (FIX / "nccl-tests" / "all_reduce_perf-2node-GH200-slingshot-wrong-96-32-FAILED.txt").read_text()
    m = eval_nccl(Measurement("nccl_allreduce", "a"), TH["nccl_allreduce_1node"], res(failed), 60)
    assert m.status == "error" and "nccl-tests failed" in m.observed
    m = eval_nccl(Measurement("nccl_allreduce", "a"), TH["nccl_allreduce_1node"], res("garbage\n"), 60)
    assert m.status == "error" and "unparseable" in m.observed


def test_outlier_rule_fails_a_slow_member_that_meets_the_floor():
    ms = []
    for i, v in enumerate([395.0, 392.0, 394.0, 340.0]):
        m = Measurement("ib_write_bw", f"n{i}", "x", value=v, unit="gbit_per_s", status="pass", observed=f"{v} gbit_per_s")
        ms.append(m)
    apply_outlier_rule(ms, 0.9, "test")
    assert [m.status for m in ms] == ["pass", "pass", "pass", "fail"]
    assert "outlier" in ms[3].observed
