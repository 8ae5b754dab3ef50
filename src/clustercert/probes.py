"""Probe definitions: command lines to run and pure evaluation of their output against thresholds.

Execution (servers, clients, timeouts, cleanup) is in clustercert.collect; scheduling in
clustercert.schedule. Every probe keeps its raw output as evidence; a probe that did not run, timed
out or printed something unparseable is ``error`` — never ``pass``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from clustercert.checks import Finding
from clustercert.collect import CommandResult
from clustercert.parsers import ParseError, parse
from clustercert.profile import Profile, Threshold

PERFTEST_PORT = 18515
IPERF_PORT = 5201


@dataclass
class Measurement:
    """One probe value: per node (``b`` empty) or per pair."""

    probe: str
    a: str
    b: str = ""
    subject: str = ""
    fabric: int | None = None
    value: float | None = None
    unit: str = ""
    status: str = "error"  # pass | fail | error
    expected: str = ""
    observed: str = ""
    evidence: str = ""
    round: int | None = None
    notes: list[str] = field(default_factory=list)

    def finding(self) -> Finding:
        return Finding(f"probe.{self.probe}", self.status, self.subject, self.expected, self.observed, self.evidence,
                       self.value, self.unit)

    def link(self) -> dict:
        return {"a": self.a, "b": self.b, "fabric": self.fabric, "probe": self.probe, "value": self.value,
                "unit": self.unit, "status": self.status, "round": self.round}


def bound_text(t: Threshold) -> str:
    if t.floor is not None:
        return f">= {t.floor:g} {t.unit} ({t.source})"
    return f"<= {t.max:g} {t.unit} ({t.source})"


def within(t: Threshold, value: float) -> bool:
    if t.floor is not None and value < t.floor:
        return False
    return not (t.max is not None and value > t.max)


def _excerpt(res: CommandResult | None, limit: int = 1500) -> str:
    return res.excerpt(limit) if res is not None else ""


def _why(res: CommandResult | None, timeout: float) -> str | None:
    if res is None:
        return "did not run"
    if res.timed_out:
        return f"timed out after {timeout:g} s: {res.command}"
    if res.rc == 127 or ": not found" in res.stderr:
        return f"tool not found: {res.command}"
    return None


def judge_value(m: Measurement, t: Threshold, value: float | None, unit: str, res: CommandResult | None) -> Measurement:
    m.expected = bound_text(t)
    m.evidence = _excerpt(res)
    if value is None:
        m.status, m.observed = "error", "no value in the output"
        return m
    m.value, m.unit = round(float(value), 3), unit
    m.status = "pass" if within(t, value) else "fail"
    m.observed = f"{value:g} {unit}"
    return m


# ---- ib_write_bw / ib_write_lat ----------------------------------------------------------------


def perftest_cmd(tool: str, hca: str, port: int, tcp_port: int, duration: int, server_addr: str | None = None) -> str:
    extra = "--report_gbits " if tool.endswith("_bw") else ""
    cmd = f"{tool} -d {hca} -i {port} -p {tcp_port} {extra}-D {duration} -F"
    return cmd + (f" {server_addr}" if server_addr else "")


def _parsed(m: Measurement, t: Threshold, res: CommandResult | None, timeout: float, kind: str, label: str) -> dict | None:
    """The parsed record of a probe's output, or None with ``m`` set to an error saying why."""
    why = _why(res, timeout)
    rec = None
    if not why:
        try:
            rec = parse(kind, res.stdout + ("\n" + res.stderr if kind == "perftest" and res.stderr else ""))
        except ParseError as exc:
            why = f"unparseable {label} output: {exc.reason}"
    if rec is not None and not rec.get("ok"):
        why = f"{label} failed: {rec.get('error') or 'wrong results'}"
    if why:
        m.status, m.observed, m.evidence, m.expected = "error", why, _excerpt(res), bound_text(t)
        return None
    return rec


def eval_perftest(m: Measurement, t: Threshold, client: CommandResult | None, timeout: float, lat: bool = False) -> Measurement:
    rec = _parsed(m, t, client, timeout, "perftest", "perftest")
    if rec is None:
        return m
    if lat:
        row = (rec.get("rows") or [{}])[0]
        value = row.get("t_p99_usec") or rec.get("t_typical_usec")
        return judge_value(m, t, value, "usec", client)
    return judge_value(m, t, rec.get("bw_avg_gbit_per_s"), "gbit_per_s", client)


# ---- iperf3 --------------------------------------------------------------------------------------


def iperf3_server_cmd(bind: str, port: int) -> str:
    return f"iperf3 -s -1 -B {bind} -p {port}"


def iperf3_client_cmd(server: str, bind: str, port: int, duration: int) -> str:
    return f"iperf3 -c {server} -B {bind} -p {port} -t {duration} -J"


def eval_iperf3(m: Measurement, t: Threshold, client: CommandResult | None, timeout: float) -> Measurement:
    rec = _parsed(m, t, client, timeout, "iperf3-json", "iperf3")
    if rec is None:
        return m
    sender, receiver = rec.get("sender") or {}, rec.get("receiver") or {}
    value = receiver.get("gbit_per_s") or sender.get("gbit_per_s")
    m = judge_value(m, t, value, "gbit_per_s", client)
    m.evidence = (f"iperf3 {m.a} -> {m.b}: sender {sender.get('gbit_per_s')} Gb/s, receiver {receiver.get('gbit_per_s')} Gb/s, "
                  f"retransmits {sender.get('retransmits')}")
    return m


# ---- NCCL, nvbandwidth -------------------------------------------------------------------------


def nccl_1node_cmd(gpus: int) -> str:
    return f"all_reduce_perf -b 8 -e 8G -f 2 -g {gpus}"


def eval_nccl(m: Measurement, t: Threshold, res: CommandResult | None, timeout: float) -> Measurement:
    rec = _parsed(m, t, res, timeout, "nccl-tests", "nccl-tests")
    if rec is None:
        return m
    return judge_value(m, t, rec.get("busbw_at_max_size_gbyte_per_s"), "gbyte_per_s", res)


NVBW_TESTS = {"nvbandwidth_h2d": "host_to_device_memcpy_ce", "nvbandwidth_d2h": "device_to_host_memcpy_ce",
              "nvbandwidth_d2d": "device_to_device_memcpy_read_ce"}


def nvbandwidth_cmd() -> str:
    return "nvbandwidth " + " ".join(f"-t {t}" for t in NVBW_TESTS.values())


def eval_nvbandwidth(node: str, profile: Profile, res: CommandResult | None, timeout: float) -> list[Measurement]:
    out = []
    why = _why(res, timeout)
    rec = None
    if not why:
        try:
            rec = parse("nvbandwidth", res.stdout)
        except ParseError as exc:
            why = f"unparseable nvbandwidth output: {exc.reason}"
    for probe, testcase in NVBW_TESTS.items():
        t = profile.thresholds.get(probe)
        if t is None:
            continue
        m = Measurement(probe, node, subject=testcase)
        if why:
            m.status, m.observed, m.evidence, m.expected = "error", why, _excerpt(res), bound_text(t)
            out.append(m)
            continue
        tc = next((x for x in rec.get("testcases", []) if x.get("name") == testcase), None)
        if tc is None or tc.get("status") not in (None, "passed"):
            m.status, m.observed, m.expected = "error", f"testcase {testcase} {'missing' if tc is None else tc.get('status')}", bound_text(t)
            m.evidence = _excerpt(res)
            out.append(m)
            continue
        per_gpu = _per_gpu(tc)
        if not per_gpu:
            m.status, m.observed, m.expected = "error", "no per-GPU values", bound_text(t)
            out.append(m)
            continue
        for gpu, value in sorted(per_gpu.items(), key=lambda kv: int(kv[0])):
            g = Measurement(probe, node, subject=f"GPU{gpu}")
            out.append(judge_value(g, t, value, "gbyte_per_s", res))
    return out


def _per_gpu(tc: dict) -> dict[str, float]:
    """Per-GPU bandwidth from a testcase matrix: the CPU row's cell for host<->device tests, the
    slowest peer in the GPU's row for device<->device tests."""
    mats = [m for m in tc.get("matrices", []) if m.get("unit") == "gbyte_per_s"]
    if not mats:
        return {}
    mat = mats[-1]
    cols, rows = mat.get("columns") or [], mat.get("rows") or {}
    if tc["name"].startswith(("host_to_device", "device_to_host")):
        row = next(iter(rows.values()), [])
        return {str(c): v for c, v in zip(cols, row, strict=False) if v is not None}
    out = {}
    for gpu, row in rows.items():
        vals = [v for v in row if v is not None]
        if vals:
            out[str(gpu)] = min(vals)
    return out


# ---- cluster-relative rule --------------------------------------------------------------------


def apply_outlier_rule(measurements: list[Measurement], ratio: float, source: str) -> None:
    """Below ``ratio`` x the median of the same probe (over the cluster) fails, beside the absolute threshold."""
    groups: dict[str, list[Measurement]] = {}
    for m in measurements:
        if m.value is not None and m.status != "error":
            groups.setdefault(m.probe, []).append(m)
    for ms in groups.values():
        if len(ms) < 3:
            continue
        med = statistics.median(x.value for x in ms)
        lower_is_better = ms[0].unit == "usec"
        for m in ms:
            bad = m.value > med / ratio if lower_is_better else m.value < med * ratio
            m.notes.append(f"cluster median {med:g} {m.unit}; outlier rule {ratio:g} x median ({source})")
            if bad and m.status == "pass":
                m.status = "fail"
                m.observed += f" (outlier: {'above' if lower_is_better else 'below'} {ratio:g} x cluster median {med:g})"
            m.expected += f"; and {'<=' if lower_is_better else '>='} {ratio:g} x cluster median"
