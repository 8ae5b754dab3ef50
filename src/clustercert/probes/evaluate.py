"""Probe evaluation: pure functions from a probe's output and its threshold to a Measurement.

A probe that did not run, timed out, exited non-zero, stopped part way or printed something
unparseable is ``error`` -- never ``pass``. Every measurement keeps its raw output as evidence and the
key of the profile threshold that judged it (``Measurement.threshold``), so reports never re-read the
"expected" text.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
from dataclasses import dataclass, field

from clustercert.checks import Finding
from clustercert.model.evidence import CommandResult
from clustercert.model.profile import DcgmDiag, Profile, Threshold
from clustercert.parsers import ParseError, parse, parse_once
from clustercert.probes.catalog import NVBW_TESTS, Channel
from clustercert.probes.commands import UTIL_INTERVAL_MS, UTIL_MARK, dcgmi_diag_label


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
    status: str = "error"  # pass | fail | error | skip
    expected: str = ""
    observed: str = ""
    evidence: str = ""
    round: int | None = None
    notes: list[str] = field(default_factory=list)
    lower_is_better: bool = False   # judged against a ceiling (latency)
    relative: bool = True           # subject to the cluster-relative outlier rule (bandwidths only)
    # seconds the tool ran (a command behind several values carries it on one only)
    elapsed: float | None = None
    # node probes: the stage of the node's probes it ran in (a stage's run at once)
    stage: int | None = None
    # the profile threshold's key that judges it ("" where none does: dcgmi diag)
    threshold: str = ""

    @property
    def channel(self) -> Channel:
        """(probe, fabric): what localisation reasons over (catalog)."""
        return (self.probe, self.fabric)

    def finding(self) -> Finding:
        return Finding(
            f"probe.{self.probe}",
            self.status,
            self.subject,
            self.expected,
            self.observed,
            self.evidence,
            self.value,
            self.unit,
            self.threshold,
        )

    def link(self) -> dict:
        return {"a": self.a, "b": self.b, "fabric": self.fabric, "probe": self.probe, "value": self.value,
                "unit": self.unit, "status": self.status, "round": self.round, "threshold": self.threshold}

    def link_record(self) -> dict:
        """The certificate's entry for a node-to-node measurement: link() with what was expected and
        seen, and the tool's output, so a failing or errored link carries its evidence; ``seconds``: how
        long its tool ran (None: it did not run)."""
        return self.link() | {"subject": self.subject, "expected": self.expected, "observed": self.observed,
                              "evidence": self.evidence, "seconds": self.elapsed}

    def error(self, why: str, t: Threshold | None = None) -> Measurement:
        """This measurement as an error saying ``why`` (not run, not reachable, ...)."""
        self.status, self.observed, self.value = "error", why, None
        if t is not None:
            self.expected = bound_text(t)
        return self


def bound_text(t: Threshold) -> str:
    if t.floor is not None:
        return f">= {t.floor:g} {t.unit} ({t.source})"
    return f"<= {t.max:g} {t.unit} ({t.source})"


def within(t: Threshold, value: float) -> bool:
    if t.floor is not None and value < t.floor:
        return False
    return not (t.max is not None and value > t.max)


def _excerpt(res: CommandResult | None, limit: int = 1500) -> str:
    """The evidence of a measurement from ``res``: one string for every measurement of one output (nvbandwidth
    gives each GPU's of each testcase theirs: a fleet held dozens of copies of each node's excerpt)."""
    return sys.intern(res.excerpt(limit)) if res is not None else ""


def _why(res: CommandResult | None, timeout: float) -> str | None:
    """Why a probe command gave no output to read (None when it ran to its end): it did not run,
    timed out, or its tool is missing."""
    if res is None:
        return "did not run"
    if res.timed_out:
        return f"timed out after {timeout:g} s: {res.command}"
    if res.rc == 127 or ": not found" in res.stderr:
        return f"tool not found: {res.command}"
    return None


def _outcome(res: CommandResult | None, timeout: float, kind: str, label: str, text: str | None = None,
             nonzero_ok: bool = False) -> tuple[dict | None, str | None]:
    """(parsed record, None) for a probe command that finished, or (None, why it is an error). A tool
    that stopped part way is an error, never a pass, whatever its output says: a non-zero exit status
    (``nonzero_ok``: the status reports results, as dcgmi diag's does), a record the parser marks
    failed, unparseable output, and for nccl-tests a sweep that did not reach its end. The tool's own
    failure message, where it printed one, is the reason given."""
    why = _why(res, timeout)
    if why:
        return None, why
    rec, unparsed = None, None
    try:
        rec = parse_once(kind, res.stdout if text is None else text)
    except ParseError as exc:
        unparsed = f"unparseable {label} output: {exc.reason}"
    status = f" (exit status {res.rc})" if res.rc else ""
    if rec is not None and rec.get("ok") is False:  # parsers without an "ok" member say so by raising
        return None, f"{label} failed: {rec.get('error') or 'wrong results'}{status}"
    if res.rc != 0 and not nonzero_ok:
        return None, f"exited with status {res.rc} (did not finish): {res.command}"
    if unparsed:
        return None, unparsed
    if kind == "nccl-tests":
        short = _short_sweep(rec)
        if short:
            return None, short
    return rec, None


def _short_sweep(rec: dict) -> str | None:
    """Why a parsed nccl-tests run did not finish its sweep (None when it did): the closing summary
    ("# Out of bounds values", "# Avg bus bandwidth") is missing, or the last size measured is below
    the maxBytes its own header says it was asked for -- what a crash part way through leaves."""
    if not rec.get("complete"):
        return "nccl-tests output incomplete: no closing summary (the run stopped part way through its sweep)"
    asked = (rec.get("header") or {}).get("maxBytes")
    top = rec.get("max_size_bytes")
    if asked and (top is None or top < asked):
        return (
            f"nccl-tests sweep incomplete: the last size measured is {top} bytes, the run was asked for "
            f"{asked}"
        )
    return None


def judge_value(
    m: Measurement, t: Threshold, value: float | None, unit: str, res: CommandResult | None
) -> Measurement:
    m.expected = bound_text(t)
    m.lower_is_better = t.floor is None and t.max is not None
    if m.lower_is_better:
        m.relative = False
    m.evidence = _excerpt(res)
    if value is None:
        m.status, m.observed = "error", "no value in the output"
        return m
    m.value, m.unit = round(float(value), 3), unit
    m.status = "pass" if within(t, value) else "fail"
    m.observed = f"{value:g} {unit}"
    return m


def _parsed(
    m: Measurement, t: Threshold, res: CommandResult | None, timeout: float, kind: str, label: str
) -> dict | None:
    """The parsed record of a probe's output, or None with ``m`` set to an error saying why."""
    text = None
    if res is not None and kind == "perftest" and res.stderr:
        text = res.stdout + "\n" + res.stderr
    rec, why = _outcome(res, timeout, kind, label, text)
    if why:
        m.status, m.observed, m.evidence, m.expected = "error", why, _excerpt(res), bound_text(t)
        return None
    return rec


def eval_perftest(
    m: Measurement, t: Threshold, client: CommandResult | None, timeout: float, lat: bool = False
) -> Measurement:
    rec = _parsed(m, t, client, timeout, "perftest", "perftest")
    if rec is None:
        return m
    if lat:
        return _judge_latency(m, t, rec, client)
    return judge_value(m, t, rec.get("bw_avg_gbit_per_s"), "gbit_per_s", client)


def _judge_latency(m: Measurement, t: Threshold, rec: dict, client: CommandResult | None) -> Measurement:
    """The 99th percentile of the smallest message size. Where perftest printed no 99% column the
    99.9% one is used (stricter, said so); with neither (a -D run prints t_avg only) it is an error:
    a typical or average latency is no stand-in for a p99 bound."""
    rows = [r for r in rec.get("rows") or [] if "t_p99_usec" in r or "t_typical_usec" in r]
    if rec.get("test") != "lat" or not rows:
        m.status, m.observed, m.expected = "error", "no latency table in the output", bound_text(t)
        m.evidence = _excerpt(client)
        return m
    row = min(rows, key=lambda r: r["bytes"])
    value, note = row.get("t_p99_usec"), None
    if value is None and row.get("t_p99_9_usec") is not None:
        value, note = row["t_p99_9_usec"], "no 99% column: judged on the 99.9% percentile"
    if value is None:
        m.status, m.expected = "error", bound_text(t)
        m.observed = (
            "no 99th percentile in the latency table (perftest prints percentiles only with -n, not -D)"
        )
        m.evidence = _excerpt(client)
        return m
    m = judge_value(m, t, value, "usec", client)
    m.observed += f" p99 at {row['bytes']} B (typical {row.get('t_typical_usec')} usec)"
    if note:
        m.notes.append(note)
        m.observed += f"; {note}"
    return m


# ---- iperf3 --------------------------------------------------------------------------------------


def eval_iperf3(m: Measurement, t: Threshold, client: CommandResult | None, timeout: float) -> Measurement:
    rec = _parsed(m, t, client, timeout, "iperf3-json", "iperf3")
    if rec is None:
        return m
    sender, receiver = rec.get("sender") or {}, rec.get("receiver") or {}
    value = receiver.get("gbit_per_s") or sender.get("gbit_per_s")
    m = judge_value(m, t, value, "gbit_per_s", client)
    m.evidence = (f"iperf3 {m.a} -> {m.b}: sender {sender.get('gbit_per_s')} Gb/s, receiver "
                  f"{receiver.get('gbit_per_s')} Gb/s, retransmits {sender.get('retransmits')}")
    return m


# ---- NCCL, nvbandwidth -------------------------------------------------------------------------


def host_of(host: str, nodes: dict[str, str]) -> str | None:
    """The node a tool's host name is: its inventory name, short name or address (``nodes``: name ->
    address)."""
    for name, address in nodes.items():
        if host in (name, address) or host.split(".")[0] == name.split(".")[0]:
            return name
    return None


def _rank_span(ranks: list[int]) -> str:
    ranks = sorted(set(ranks))
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}" \
        if ranks == list(range(ranks[0], ranks[-1] + 1)) else "ranks " + ",".join(map(str, ranks))


def nccl_rank_problem(rec: dict, nodes: dict[str, str], gpus: int) -> str | None:
    """Why a parsed nccl-tests run did not run where it was launched (None when it did): its "# Rank ..
    on HOST" lines must number ``len(nodes) x gpus`` ranks 0..N-1, each once, ``gpus`` on each node asked
    for (``nodes``: inventory name -> address; a host is matched by name, short name or address). An
    nccl-tests built without MPI, or a launcher that put every rank on one host, prints fewer ranks or
    one host only; two runs' outputs joined print the same ranks twice."""
    want = len(nodes) * gpus
    devices = rec.get("devices") or []
    ranks = [d["rank"] for d in devices]
    twice = sorted({r for r in ranks if ranks.count(r) > 1})
    per_node = {name: 0 for name in nodes}
    strangers: dict[str, int] = {}
    alone = next(iter(nodes)) if len(nodes) == 1 and len({d["host"] for d in devices}) == 1 else None
    for d in devices:  # one node's own run can only be on that node, whatever its host name
        name = alone or host_of(d["host"], nodes)
        if name is None:
            strangers[d["host"]] = strangers.get(d["host"], 0) + 1
        else:
            per_node[name] += 1
    if not twice and sorted(ranks) == list(range(want)) and not strangers and \
            all(n == gpus for n in per_node.values()):
        return None
    parts = [
        f"{n} rank{'s' if n != 1 else ''} on {name}" if n else f"none on {name}"
        for name, n in per_node.items()
    ]
    parts += [f"{n} on {host} (not a node asked for)" for host, n in strangers.items()]
    if twice:
        parts.append(f"{_rank_span(twice)} printed more than once (more than one run's output)")
    where = f"{len(nodes)} node{'s' if len(nodes) > 1 else ''} x {gpus} GPUs = {want} ranks"
    return f"nccl-tests ran {len(set(ranks))} of the {where} asked for: {', '.join(parts)}"


def eval_nccl(m: Measurement, t: Threshold, res: CommandResult | None, timeout: float,
              nodes: dict[str, str] | None = None, gpus: int | None = None) -> Measurement:
    """nccl-tests' bus bandwidth at its largest size against ``t``; where ``nodes`` (inventory name ->
    address) and ``gpus`` (per node) are given, first its rank lines against them (nccl_rank_problem):
    a run that did not cover them is an error, whatever its figure."""
    rec = _parsed(m, t, res, timeout, "nccl-tests", "nccl-tests")
    if rec is None:
        return m
    if nodes is not None and gpus is not None:
        why = nccl_rank_problem(rec, nodes, gpus)
        if why:
            m.status, m.observed, m.evidence, m.expected = "error", why, _excerpt(res), bound_text(t)
            return m
    return judge_value(m, t, rec.get("busbw_at_max_size_gbyte_per_s"), "gbyte_per_s", res)


# ---- GPU utilisation sampled during the NCCL run --------------------------------------------------

def split_util(res: CommandResult | None, command: str = "") -> tuple[CommandResult | None, str | None]:
    """(the sampled command's own result, the sampler's output or None when it was never printed).
    ``command``: the sampled command, named in the result instead of the whole script."""
    if res is None:
        return None, None
    head, sep, tail = res.stdout.partition(UTIL_MARK)
    main = dataclasses.replace(
        res, stdout=head, command=f"{command} (GPU utilisation sampled alongside)" if command else res.command
    )
    return main, (tail[1:] if tail.startswith("\n") else tail) if sep else None


def _util_series(text: str) -> dict[int, list[float | None]]:
    """Per GPU index, its samples in order. Raises ParseError."""
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]  # the sampler was stopped in the middle of a line
    rec = parse("nvidia-smi-csv", text)
    series: dict[int, list[float | None]] = {}
    for row in rec["rows"]:
        cells = [row.get("index"), row.get("utilization.gpu")] if isinstance(row, dict) else row
        if len(cells) != 2:
            raise ParseError(
                "nvidia-smi-csv", f"expected 'index, utilization.gpu' rows, got {len(cells)} columns"
            )
        idx, util = cells
        try:
            series.setdefault(int(idx), []).append(None if util is None else float(util))
        except (TypeError, ValueError):
            raise ParseError("nvidia-smi-csv", f"not an index and a percentage: {cells!r}") from None
    return series


def _load_problem(res: CommandResult | None, timeout: float) -> str | None:
    """Why the all_reduce_perf run did not complete (None when it did)."""
    return _outcome(res, timeout, "nccl-tests", "nccl-tests")[1]


def eval_gpu_util(node: str, t: Threshold, gpus: int, res: CommandResult | None, samples: str | None,
                  timeout: float) -> list[Measurement]:
    """GPU utilisation under the NCCL load, per GPU 0..gpus-1 (the GPUs all_reduce_perf -g uses).

    Judged value: the mean of a GPU's samples over the busy window (from the first to the last sample
    in which any GPU of the node was busy), so NCCL's start-up and the sampler's own start and stop
    do not count, while a GPU that sat idle while the others worked does. With no busy sample at all
    every sample counts (and the mean is 0). No samples, an unreadable sampler output, or a load
    that did not complete (timed out, failed, unparseable) is an error."""
    def err(subject: str, why: str) -> Measurement:
        return Measurement(
            "gpu_util_under_load",
            node,
            subject=subject,
            status="error",
            expected=bound_text(t),
            threshold="gpu_util_under_load",
            observed=why,
            evidence=(samples or "")[:1500] or _excerpt(res),
            relative=False,
        )

    problem = _load_problem(res, timeout)
    if problem:
        return [err("GPUs", f"not measured: the NCCL run it samples did not complete ({problem})")]
    if samples is None:
        return [err("GPUs", "no utilisation samples in the output (the sampler's section is missing)")]
    try:
        series = _util_series(samples)
    except ParseError as exc:
        return [err("GPUs", f"unreadable utilisation samples: {exc.reason}")]
    want = list(range(gpus))
    ticks = min((len(series[g]) for g in want if g in series), default=0)
    busy = [k for k in range(ticks) if any((series[g][k] or 0) > 0 for g in want if g in series)]
    lo, hi = (busy[0], busy[-1]) if busy else (0, ticks - 1)
    out = []
    for g in want:
        if g not in series:
            out.append(err(f"GPU{g}", f"GPU {g} is missing from the utilisation samples"))
            continue
        vals = [v for v in series[g][lo:hi + 1] if v is not None]
        if not vals:
            out.append(err(f"GPU{g}", "utilisation not reported (N/A) while NCCL ran"))
            continue
        mean = sum(vals) / len(vals)
        m = judge_value(Measurement("gpu_util_under_load", node, subject=f"GPU{g}", relative=False,
                                    threshold="gpu_util_under_load"), t, mean, "percent", None)
        how = (f"mean of {len(vals)} samples over the busy window ({hi - lo + 1} of {ticks} ticks every "
               f"{UTIL_INTERVAL_MS} ms), max {max(vals):g}%" if busy else
               f"no GPU was busy in any of the {ticks} samples")
        m.observed = f"{mean:.1f}% ({how})"
        m.evidence = f"GPU{g} samples: {', '.join('N/A' if v is None else f'{v:g}' for v in series[g])}"
        out.append(m)
    return out


# ---- dcgmi diag --------------------------------------------------------------------------------


def _diag_test_verdict(test: dict, level: int) -> tuple[str, str] | None:
    """(status, observed) of one dcgmi diag test that did not pass everywhere; None for a pass on every GPU.
    A test skipped (on some GPUs, or all) is an error, a Fail or Warn a fail."""
    result = test["result"]
    msgs = "; ".join(x["text"] for x in test["messages"] if x.get("text"))
    if result == "pass":
        skipped = sorted((g for g, r in test["gpus"].items() if r == "skip"), key=int)
        if not skipped:
            return None
        # the summary says Pass: the GPUs it skipped were not tested all the same
        ran = sorted((g for g, r in test["gpus"].items() if r == "pass"), key=int)
        return "error", (
            f"skipped by dcgmi on GPU {', '.join(skipped)}"
            + (f" (passed on GPU {', '.join(ran)})" if ran else "")
            + f": a test of level {level} that did not run there"
            + (f" ({msgs})" if msgs else "")
        )
    bad = sorted((g for g, r in test["gpus"].items() if r != "pass"), key=int)
    where = f" on GPU {', '.join(bad)}" if bad else (" on all GPUs" if test["all_gpus"] else "")
    if result == "skip":
        return "error", (f"skipped by dcgmi{where}: a test of level {level} that did not run"
                         + (f" ({msgs})" if msgs else ""))
    return "fail", f"{result}{where}" + (f": {msgs}" if msgs else "")


def eval_dcgmi_diag(
    node: str, diag: DcgmDiag | None, res: CommandResult | None, timeout: float
) -> list[Measurement]:
    """One measurement per test that did not pass (subject: the test's name), or one pass when every
    test passed. The output is ``dcgmi diag -j`` JSON (DCGM 3.x/4.x layouts, dcgmi-diag-json) or the text
    table (dcgmi-diag), whichever the node's DCGM printed (probes.commands.dcgmi_diag_cmd). Fail and Warn
    fail; a test dcgmi skipped did not run at the configured level and is an error (never a pass) -- also
    where it skipped some GPUs and passed on the others (the per-GPU results are read, not only the test's
    summary); an Error row or an error instead of a table is an error. Level 0 or no dcgm_diag in the profile:
    one skip saying so."""
    if diag is None or diag.level == 0:
        why = ("not run: the profile sets no dcgm_diag" if diag is None else
               f"not run: the profile's dcgm_diag.level is 0 ({diag.source})")
        return [Measurement("dcgmi_diag", node, subject="dcgmi diag", status="skip", observed=why)]
    cmd = dcgmi_diag_label(diag.level)
    expected = f"every test of `{cmd}` passes ({diag.source})"

    def m(subject: str, status: str, observed: str) -> Measurement:
        return Measurement(
            "dcgmi_diag",
            node,
            subject=subject,
            status=status,
            expected=expected,
            observed=observed,
            evidence=_excerpt(res, 4000),
            relative=False,
        )

    text = None if res is None or res.stdout.strip() else res.stderr
    kind = "dcgmi-diag-json" if res is not None and res.stdout.lstrip().startswith("{") else "dcgmi-diag"
    rec, why = _outcome(res, timeout, kind, "dcgmi diag", text, nonzero_ok=True)
    if why:
        return [m(cmd, "error", why)]
    out = []
    for test in rec["tests"]:
        verdict = _diag_test_verdict(test, diag.level)
        if verdict is not None:
            out.append(m(test["name"], *verdict))
    for msg in rec["messages"]:
        where = f"dcgmi diag ({msg.get('category') or 'general'})"
        if msg["level"] == "error":
            out.append(m(where, "error", f"Error: {msg['text']}"))
        elif msg["level"] == "warning":
            out.append(m(where, "fail", f"Warning: {msg['text']}"))
    if not out:
        out.append(m(cmd, "pass", f"all {len(rec['tests'])} tests passed"))
    return out


def nvbw_testcases(rec: dict, order: list[str]) -> dict[str, dict]:
    """The parsed testcases by name. A testcase nvbandwidth waived without naming it (a bare ``Waived:`` line,
    name None) is matched to ``order`` -- the ``-t`` testcases of the command, which nvbandwidth runs in that
    order -- by its position, where the output has one testcase per ``-t`` and the named ones sit at their own
    positions; otherwise it stays unmatched."""
    tcs = list(rec.get("testcases") or [])
    out = {tc["name"]: tc for tc in tcs if tc.get("name")}
    if len(tcs) == len(order) and all(
        tc.get("name") in (None, name) for tc, name in zip(tcs, order, strict=True)
    ):
        for tc, name in zip(tcs, order, strict=True):
            if tc.get("name") is None:
                out[name] = dict(tc, name=name, name_inferred=True)
    return out


def _waived(m: Measurement, t: Threshold, tc: dict, profile: Profile, testcase: str, res) -> Measurement:
    """A testcase nvbandwidth waived: a skip with its reason where the profile explains it (device-to-device
    on a node of one GPU), else an error (the node should have run it)."""
    how = "waived by nvbandwidth" + (
        " (unnamed `Waived:` line, matched to the -t order)" if tc.get("name_inferred") else ""
    )
    why = f"{how}: {tc.get('message') or 'no reason printed'}"
    m.expected, m.evidence = bound_text(t), _excerpt(res)
    if testcase.startswith("device_to_device") and profile.gpu.count < 2:
        m.status, m.observed = "skip", f"{why} (profile gpu.count is {profile.gpu.count}: no peer GPU)"
    else:
        m.status, m.observed = "error", f"{why}, although the profile has {profile.gpu.count} GPUs"
    return m


def eval_nvbandwidth(
    node: str, profile: Profile, res: CommandResult | None, timeout: float
) -> list[Measurement]:
    out = []
    rec, why = _outcome(res, timeout, "nvbandwidth", "nvbandwidth")
    by_name = nvbw_testcases(rec, list(NVBW_TESTS.values())) if rec is not None else {}
    for probe, testcase in NVBW_TESTS.items():
        t = profile.thresholds.get(probe)
        if t is None:
            continue
        m = Measurement(probe, node, subject=testcase, threshold=probe)
        if why:
            m.status, m.observed, m.evidence, m.expected = "error", why, _excerpt(res), bound_text(t)
            out.append(m)
            continue
        tc = by_name.get(testcase)
        if tc is not None and tc.get("status") == "waived":
            out.append(_waived(m, t, tc, profile, testcase, res))
            continue
        if tc is None or tc.get("status") not in (None, "passed"):
            m.status, m.observed, m.expected = (
                "error",
                f"testcase {testcase} {'missing' if tc is None else tc.get('status')}",
                bound_text(t),
            )
            m.evidence = _excerpt(res)
            out.append(m)
            continue
        per_gpu = _per_gpu(tc)
        if not per_gpu:
            m.status, m.observed, m.expected = "error", "no per-GPU values", bound_text(t)
            out.append(m)
            continue
        for gpu, value in sorted(per_gpu.items(), key=lambda kv: int(kv[0])):
            g = Measurement(probe, node, subject=f"GPU{gpu}", threshold=probe)
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


def apply_outlier_rule(measurements: list[Measurement], ratio: float, source: str) -> None:
    """Below ``ratio`` x the median of the same probe (over the cluster) fails, beside the absolute
    threshold; per-node and per-pair figures of one probe (NCCL on one node, NCCL across a pair) are
    separate groups. Bandwidths only (``Measurement.relative``): a latency depends on the path (switch hops)
    as much as on the health of its ends, so a 10 % band around the median would fail healthy
    multi-hop pairs; it is held to its absolute p99 ceiling. GPU utilisation is a bounded percentage
    held to the seed's absolute floor."""
    groups: dict[tuple[str, bool], list[Measurement]] = {}
    for m in measurements:
        if m.relative and m.value is not None and m.status != "error":
            groups.setdefault((m.probe, bool(m.b)), []).append(m)  # a pair figure is no peer of a node figure
    for ms in groups.values():
        if len(ms) < 3:
            continue
        med = statistics.median(x.value for x in ms)
        note = f"cluster median {med:g} {ms[0].unit}; outlier rule {ratio:g} x median ({source})"
        for m in ms:
            m.notes.append(note if m.unit == ms[0].unit else
                           f"cluster median {med:g} {m.unit}; outlier rule {ratio:g} x median ({source})")
            if m.value < med * ratio and m.status == "pass":
                m.status = "fail"
                m.observed += f" (outlier: below {ratio:g} x cluster median {med:g})"
            # one text per threshold
            m.expected = sys.intern(f"{m.expected}; and >= {ratio:g} x cluster median")


def probe_findings(node: str, measurements: list[Measurement], localisation) -> list[Finding]:
    """A node's findings from the probes: its own measurements, and where localisation put a pair fault
    on it, a ``probe.pairs`` finding naming the fabric, the probes and the partners it failed with (a
    suspect -- the node or its link, or which end of a pair, could not be told -- is an error: the node
    is not passed, nor blamed)."""
    out = [m.finding() for m in measurements]
    for loc in localisation:
        if loc.subject != node or loc.kind not in ("bad_node", "suspect"):
            continue
        where = f"fabric {loc.fabric}" if loc.fabric is not None else "rails and GPUs"
        status = "fail" if loc.kind == "bad_node" else "error"
        out.append(
            Finding("probe.pairs", status, where, "passes node-to-node probes with its partners", loc.reason)
        )
    return out
