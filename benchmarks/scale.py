"""Fleet scale: the real pipeline with a fake transport (--pipeline, --json), and report sizes and render times
of synthetic certificates.

Usage: python benchmarks/scale.py --nodes N --json
       python benchmarks/scale.py --pipeline [--nodes 16,128,1024,4096,10000] [--forks 25] [--all-probes]
       python benchmarks/scale.py [--nodes 64,256,1024] [--repeat 3] [--fail-fraction 0.03] [--out DIR]

--json / --pipeline: N lab-profile nodes (benchmarks/fleet.py answers as healthy simulated nodes, with each
node's own serials and UUIDs) through the validators (clustercert.checks.run, every component, at --forks),
the probe round loop (clustercert.probes.run: ib_write_bw and iperf3 on both fabrics, loopback per rail),
the certificate (clustercert.record.results, signed), report.html, junit.xml and the store; one process per
size. --json prints one object: nodes, cpu_s (process CPU, user + system), rss_mb (peak), certificate_bytes,
html_bytes, junit_bytes, store_bytes (the store after this one run), fake_cpu_s (the fake transport's own
CPU rendering the nodes' outputs, part of cpu_s), peak_sessions (sessions open at once),
and per-stage CPU seconds and the peak RSS reached by the end of each stage. --pipeline runs each size in its
own process and prints each figure per node and as a ratio against 1,024 nodes.

Without them:

Each certificate is shaped like certify's: every node with the validators' 34 check ids (some with a
finding per GPU or HCA, each with a few hundred characters of evidence) and its node probes (loopback
per rail, NCCL on the node, GPU utilisation per GPU); a few nodes fail (a GPU missing, a port down, a
slow rail on fabric 0, low NCCL) and one in 256 is unreachable. The links are what the round schedule
produces: a matching of the reachable nodes per round (N/2 pairs), 2 rounds, and per pair ib_write_bw,
iperf3 and ib_write_lat on each of the two fabrics and NCCL across the pair (7 measurements); the
pairs with a slow-rail node fail on fabric 0, one link in 128 pairs is slow by itself. Localisation,
schedule, thresholds and timing are filled in as certify fills them.

Prints one line per size (with --worst, a second with every node and link failing): links, failing
nodes, and for report.html, junit.xml and summary.md the size and the best
render time of --repeat runs. With --out, the reports of each size are written to DIR/<N>/.
"""  # noqa: E501

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from clustercert.checks import all_check_ids  # noqa: E402
from clustercert.report.files import write_html, write_reports  # noqa: E402
from clustercert.report.html import render_html  # noqa: E402
from clustercert.report.junit import junit_parts, render_junit  # noqa: E402
from clustercert.report.markdown import render_summary  # noqa: E402

GPUS, RAILS = 8, 2
THRESHOLDS = {
    "ib_write_bw_loopback": {
        "floor": 380.0,
        "ceiling": None,
        "unit": "gbit_per_s",
        "source": "AzNHC loopback",
    },
    "ib_write_bw_pair": {
        "floor": 320.0,
        "ceiling": None,
        "unit": "gbit_per_s",
        "source": "80% of NDR 400 Gb/s",
    },
    "ib_write_lat_p99": {"floor": None, "ceiling": 4.2, "unit": "usec", "source": "Imbue p99"},
    "iperf3_ipoib": {"floor": 20.0, "ceiling": None, "unit": "gbit_per_s", "source": "clustercert default"},
    "nccl_allreduce_1node": {
        "floor": 460.0,
        "ceiling": None,
        "unit": "gbyte_per_s",
        "source": "AzNHC 8xH100",
    },
    "nccl_allreduce_pair": {
        "floor": 320.0,
        "ceiling": None,
        "unit": "gbyte_per_s",
        "source": "80% of 400 GB/s",
    },
    "gpu_util_under_load": {"floor": 70.0, "ceiling": None, "unit": "percent", "source": "seed guide"},
}
# per pair: (probe, fabric, threshold, unit, healthy value, spread)
PAIR_PROBES = [("ib_write_bw", f, "ib_write_bw_pair", "gbit_per_s", 388.0, 8.0) for f in range(RAILS)] + \
              [("iperf3", f, "iperf3_ipoib", "gbit_per_s", 26.0, 3.0) for f in range(RAILS)] + \
              [("ib_write_lat", f, "ib_write_lat_p99", "usec", 2.1, 0.3) for f in range(RAILS)] + \
              [("nccl_allreduce", None, "nccl_allreduce_pair", "gbyte_per_s", 360.0, 10.0)]


def _f(check, status, subject="", expected="", observed="", evidence="", value=None, unit=None, threshold=""):
    f = {"check": check, "status": status, "subject": subject, "expected": expected, "observed": observed,
         "evidence": evidence, "threshold": threshold}
    if value is not None:
        f["value"], f["unit"] = value, unit
    return f


def _findings(name: str, fault: str | None, rng: random.Random) -> list[dict]:
    fs = []
    gpus = GPUS - 1 if fault == "gpu_missing" else GPUS
    smi = "".join(
        f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{rng.getrandbits(64):016x})\n" for i in range(gpus)
    )
    for check in all_check_ids():
        if check == "gpu.count":
            fs.append(
                _f(
                    check,
                    "fail" if gpus < GPUS else "pass",
                    "",
                    str(GPUS),
                    str(gpus),
                    "$ nvidia-smi -L\n" + smi,
                )
            )
        elif check.startswith("ib.port"):
            for r in range(RAILS):
                down = fault == "port_down" and r == 1
                fs.append(_f(check, "fail" if down and check == "ib.port_state" else "pass", f"mlx5_{r}/1",
                             "Active / LinkUp", "Down / Polling" if down else "Active / LinkUp",
                             f"CA 'mlx5_{r}'\n\tPort 1:\n\t\tState: {'Down' if down else 'Active'}\n"
                             "\t\tRate: 400\n"))
        elif check == "ib.bond":
            fs.append(
                _f(check, "skip", "", "bond0 over ib0/ib1", "no bond in this profile", "ipoib_bond: false\n")
            )
        else:
            fs.append(_f(check, "pass", "", "as the profile says", "as the profile says",
                         f"$ {check.replace('.', '-')} --query\n" + "ok " * 40 + "\n"))
    for r in range(RAILS):
        v = round(rng.uniform(386, 396), 2)
        fs.append(
            _f(
                "probe.ib_write_bw_loopback",
                "pass",
                f"mlx5_{r}",
                ">= 380 gbit_per_s",
                f"{v} Gb/s",
                f" 8388608    5000    {v + 1:.2f}    {v:.2f}    0.005790\n",
                v,
                "gbit_per_s",
                "ib_write_bw_loopback",
            )
        )
    busbw = round(rng.uniform(402, 430) if fault == "nccl_low" else rng.uniform(468, 482), 1)
    fs.append(
        _f(
            "probe.nccl_allreduce",
            "fail" if busbw < 460 else "pass",
            "all_reduce_perf -g 8",
            ">= 460 gbyte_per_s",
            f"{busbw} GB/s",
            f"# Avg bus bandwidth    : {busbw:.3f}\n",
            busbw,
            "gbyte_per_s",
            "nccl_allreduce_1node",
        )
    )
    for g in range(GPUS):
        u = round(rng.uniform(92, 100), 1)
        fs.append(
            _f(
                "probe.gpu_util_under_load",
                "pass",
                f"GPU{g}",
                ">= 70 percent",
                f"{u}%",
                "",
                u,
                "percent",
                "gpu_util_under_load",
            )
        )
    if fault == "slow_rail":  # localised to the node: certify adds its probe.pairs finding
        fs.append(_f("probe.pairs", "fail", "fabric 0", "passes node-to-node probes with its partners",
                     "fails fabric 0 with every partner"))
    return fs


def _matching(nodes: list[str], rng: random.Random) -> list[tuple[str, str]]:
    order = nodes[:]
    rng.shuffle(order)
    return [tuple(sorted(order[i:i + 2])) for i in range(0, len(order) - 1, 2)]


def synthetic_certificate(n: int, fail_fraction: float = 0.03, seed: int = 7, rounds: int = 2) -> dict:
    """A certify-shaped certificate of ``n`` nodes (see the module docstring)."""
    rng = random.Random(seed * 100_003 + n)
    names = [f"gpu{i:04d}" for i in range(1, n + 1)]
    faults = {}
    for name in rng.sample(names, round(n * fail_fraction)):
        faults[name] = rng.choice(("gpu_missing", "port_down", "slow_rail", "nccl_low"))
    for name in names[::256][1:] + ([names[-1]] if n >= 64 else []):
        faults[name] = "unreachable"
    nodes = {}
    for name in names:
        if faults.get(name) == "unreachable":
            nodes[name] = {"verdict": "unreachable", "findings": [], "detail": "ssh: connect timed out"}
            continue
        fs = _findings(name, faults.get(name), rng)
        nodes[name] = {
            "verdict": "fail" if any(f["status"] == "fail" for f in fs) else "pass",
            "findings": fs,
        }
    reachable = [x for x in names if faults.get(x) != "unreachable"]
    links, schedule, partners = [], [], {}
    bad_links = set()
    for k in range(1, rounds + 1):
        pairs = _matching(reachable, rng)
        schedule.append(
            {
                "round": k,
                "pairs": len(pairs),
                "question": "a matching of every node"
                if k == 1
                else "every node once more with another partner: each failing pair's ends with a partner "
                "known good",
            }
        )
        for i, (a, b) in enumerate(pairs):
            if k == 1 and i % 128 == 5:
                bad_links.add((a, b))
            for probe, fabric, th, unit, good, spread in PAIR_PROBES:
                v = round(rng.uniform(good - spread / 2, good + spread / 2), 2)
                slow = fabric == 0 and (
                    {a, b} & {x for x, f in faults.items() if f == "slow_rail"} or (a, b) in bad_links
                )
                if slow and probe != "ib_write_lat":
                    v = round(v * 0.55, 1)
                elif slow:
                    v = round(v * 2.4, 2)
                t = THRESHOLDS[th]
                ok = v >= t["floor"] if t["floor"] is not None else v <= t["ceiling"]
                status = "pass" if ok else "fail"
                if not ok:
                    partners.setdefault((a, fabric), set()).add(b)
                    partners.setdefault((b, fabric), set()).add(a)
                bound = (
                    f">= {t['floor']:g} {unit}" if t["floor"] is not None else f"<= {t['ceiling']:g} {unit}"
                )
                links.append(
                    {
                        "a": a,
                        "b": b,
                        "fabric": fabric,
                        "probe": probe,
                        "value": v,
                        "unit": unit,
                        "status": status,
                        "round": k,
                        "threshold": th,
                        "subject": f"{a}<->{b}",
                        "expected": bound,
                        "observed": f"{v} {unit}",
                        "evidence": f"{probe} {a} -> {b}: {v} {unit}\n",
                    }
                )
    localisation = []
    for name, fault in sorted(faults.items()):
        if fault == "unreachable":
            localisation.append(
                {
                    "node": name,
                    "kind": "bad_node",
                    "reason": "unreachable over SSH",
                    "fabric": None,
                    "probes": [],
                    "partners": [],
                }
            )
        elif fault == "slow_rail":
            localisation.append(
                {
                    "node": name,
                    "kind": "bad_node",
                    "reason": "fails fabric 0 with every partner",
                    "fabric": 0,
                    "probes": ["ib_write_bw", "iperf3", "ib_write_lat"],
                    "partners": sorted(partners.get((name, 0), ())),
                }
            )
    for a, b in sorted(bad_links):
        localisation.append(
            {
                "link": f"{a}<->{b}",
                "kind": "bad_link",
                "reason": "both ends pass fabric 0 with others",
                "fabric": 0,
                "probes": ["ib_write_bw", "iperf3", "ib_write_lat"],
                "partners": [a, b],
            }
        )
    verdict = "fail" if faults or any(lk["status"] != "pass" for lk in links) else "pass"
    return {
        "schema": "clustercert.certificate/v1",
        "cluster": f"synthetic-{n}",
        "profiles": {"h100-sxm-8x-ndr": {}},
        "started": "2026-12-05T08:00:00+00:00",
        "finished": "2026-12-05T08:09:30+00:00",
        "versions": {
            "clustercert": "0.1.0",
            "ansible-core": "2.17.4",
            "nodes": {
                x: {"driver": "550.90.07", "nccl": "2.21.5", "ofed": "24.04-0.7.0.0"} for x in reachable
            },
        },
        "verdict": verdict,
        "rounds": rounds,
        "schedule": schedule,
        "nodes": nodes,
        "links": links,
        "localisation": localisation,
        "thresholds": THRESHOLDS,
        "timing": {
            "validate_s": 41.0,
            "probe_wall_s": 520.0,
            "probe_tool_s": 500.0,
            "control_overhead_s": 20.0,
            "control_overhead_pct": 3.8,
            "node_probes": {"wall_s": 180.0, "tool_s": 176.0},
            "rounds": [{"round": k, "wall_s": 170.0, "tool_s": 162.0} for k in range(1, rounds + 1)],
        },
    }


def worst_case(cert: dict) -> dict:
    """``cert`` with every node failing and every link failing with 600 characters of tool output
    (a threshold set wrong for the whole fleet): the largest page the report makes."""
    for node in cert["nodes"].values():
        if node["verdict"] == "pass":
            node["verdict"] = "fail"
            node["findings"][0].update(status="fail", observed="7")
    for lk in cert["links"]:
        lk["value"] = round(lk["value"] * (3 if lk["probe"] == "ib_write_lat" else 0.5), 2)
        lk.update(status="fail", evidence="x" * 600 + "\n")
    return cert


def measure(cert: dict, repeat: int) -> dict[str, tuple[int, float]]:
    out = {}
    for name, fn in (("html", render_html), ("junit", render_junit), ("summary", render_summary)):
        best, size = float("inf"), 0
        for _ in range(repeat):
            t0 = time.perf_counter()
            text = fn(cert)
            best = min(best, time.perf_counter() - t0)
            size = len(text.encode("utf-8") if isinstance(text, str) else text)
        out[name] = (size, best)
    return out


def pipeline(
    n: int, forks: int = 25, all_probes: bool = False, keep: dict | None = None, home: Path | None = None
) -> dict:
    """One size through the real pipeline (see the module docstring); the figures --json prints.
    ``all_probes``: every probe the lab profile plans (the fleet answers nvbandwidth, dcgmi diag and topo with
    the lab simulator's renderings, all_reduce_perf and ib_write_lat from fixtures; fio and the DDP smoke test
    get no output and are errors). ``keep``: filled with the signed certificate and the paths written, under
    ``home`` (default: a temporary directory, removed at the end)."""
    from datetime import UTC, datetime

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import fleet

    from clustercert.checks import COMPONENT_ORDER
    from clustercert.checks import run as check_run
    from clustercert.collect import ssh
    from clustercert.probes import run as probe_run
    from clustercert.probes.judge import ThresholdJudge
    from clustercert.probes.plan import ProbeSettings
    from clustercert.record import certificate
    from clustercert.record.results import certificate_body
    from clustercert.record.settle import settle, settle_every
    from clustercert.record.store import Store

    if home is None:
        home = Path(tempfile.mkdtemp(prefix="cc-scale-"))
        try:
            return pipeline(n, forks, all_probes, keep, home)
        finally:
            shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True, exist_ok=True)
    os.environ["CLUSTERCERT_HOME"] = str(home)
    stages: dict[str, float] = {}

    peaks: dict[str, float] = {}

    def mark(name: str, t: float) -> float:
        now = time.process_time()
        stages[name] = round(now - t, 2)
        peaks[name] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        return now

    t0 = t = time.process_time()
    inv = fleet.inventory(n)
    transport = fleet.Fleet(inv, all_probes)
    # collect_many's pool (--forks) calls it: the transport is faked below it
    ssh.collect_node = transport.collect_node
    started = datetime.now(UTC)
    settle()  # as certify, after each stage below too
    t = mark("inventory", t)
    validation = check_run.validate_nodes(inv, list(COMPONENT_ORDER), forks, keep_outputs=False,  # as certify
                                          after_node=settle_every(), io=ssh.SshBackend())
    settle()
    t = mark("validate", t)
    reachable = [x for x, r in sorted(validation.items()) if r.verdict != "unreachable"]
    settings = (
        ProbeSettings(2, 20)
        if all_probes
        else ProbeSettings(2, 20, only=frozenset({"ib_write_bw", "iperf3"}))
    )
    outcome = probe_run.run(inv, reachable, settings, ThresholdJudge.for_inventory(inv), forks, io=transport)
    settle()
    t = mark("probes", t)
    body = certificate_body(inv, validation, outcome, started, 1.0, consume=True)  # as certify
    cert = certificate.sign(body, Ed25519PrivateKey.generate())
    del body
    settle()
    cert_path = certificate.write_certificate(cert, home / "certificate.json")  # as certify
    cert_bytes = cert_path.stat().st_size
    t = mark("certificate", t)
    html_path = write_html(cert, home / "report.html")  # as certify (write_reports)
    t = mark("html", t)
    with open(home / "junit.xml", "wb") as f:  # as certify (write_reports)
        for part in junit_parts(cert):
            f.write(part)
    junit_bytes = (home / "junit.xml").stat().st_size
    t = mark("junit", t)
    store = Store(home / "store.sqlite")
    store.start_run("bench", "certify", str(inv.source))
    store.finish_run("bench", cert["verdict"], cert["nodes"], cert["links"])
    t = mark("store", t)
    gc.unfreeze()  # as certify at its end
    if keep is not None:
        keep.update(cert=cert, certificate=cert_path, html=html_path.read_bytes(), home=home)
    statuses: dict[str, int] = {}
    for body in cert["nodes"].values():
        for f in body["findings"]:
            statuses[f["status"]] = statuses.get(f["status"], 0) + 1
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "nodes": n,
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
        "rss_mb": round(ru.ru_maxrss / 1024, 1),
        "certificate_bytes": cert_bytes,
        "html_bytes": html_path.stat().st_size,
        "junit_bytes": junit_bytes,
        "store_bytes": store.size(),
        "fake_cpu_s": round(transport.cpu_s, 2),
        "peak_sessions": transport.peak,
        "forks": forks,
        "links": len(cert["links"]),
        "verdicts": {
            v: sum(1 for b in cert["nodes"].values() if b["verdict"] == v)
            for v in sorted({b["verdict"] for b in cert["nodes"].values()})
        },
        "probe_checks": sorted(
            {
                f["check"]
                for b in cert["nodes"].values()
                for f in b["findings"]
                if f["check"].startswith("probe.")
            }
            | {"link." + lk["probe"] for lk in cert["links"]}
        ),
        "findings": statuses,
        "stages_cpu_s": stages,
        "peak_rss_mb_after": peaks,
        "pipeline_cpu_s": round(time.process_time() - t0, 2),
    }


PER_NODE = ("cpu_s", "rss_mb", "certificate_bytes", "html_bytes", "junit_bytes", "store_bytes")


def pipeline_table(sizes: list[int], forks: int, all_probes: bool = False) -> int:
    """Each size in a process of its own (its own peak RSS); per node, and as a ratio against 1,024 nodes."""
    rows = []
    for n in sizes:
        p = subprocess.run(
            [sys.executable, __file__, "--nodes", str(n), "--json", "--forks", str(forks)]
            + (["--all-probes"] if all_probes else []),
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(p.stdout))
        print(p.stdout.strip(), flush=True)
    ref = next((r for r in rows if r["nodes"] == 1024), rows[-1])
    print(f"\n{'nodes':>6} " + " ".join(f"{k + '/node':>22}" for k in PER_NODE) + f" {'peak_sessions':>14}")
    for r in rows:
        cells = []
        for k in PER_NODE:
            per, per_ref = r[k] / r["nodes"], ref[k] / ref["nodes"]
            cells.append(f"{per:>13.5g} ({per / per_ref:4.2f}x)")
        print(f"{r['nodes']:>6} " + " ".join(cells) + f" {r['peak_sessions']:>14}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--nodes", default=None, help="sizes, comma-separated")
    ap.add_argument("--json", action="store_true", help="one size through the real pipeline: one JSON object")
    ap.add_argument(
        "--pipeline", action="store_true", help="every size through the real pipeline, a table of ratios"
    )
    ap.add_argument("--forks", type=int, default=25, help="--forks of the pipeline run")
    ap.add_argument(
        "--all-probes", action="store_true", help="the pipeline with every probe the lab profile plans"
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--fail-fraction", type=float, default=0.03)
    ap.add_argument(
        "--worst", action="store_true", help="also each size with every node and every link failing"
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if args.json:
        print(json.dumps(pipeline(int(args.nodes or 1024), args.forks, args.all_probes)))
        return 0
    if args.pipeline:
        return pipeline_table(
            [int(x) for x in (args.nodes or "16,128,1024,4096,10000").split(",")], args.forks, args.all_probes
        )
    args.nodes = args.nodes or "64,256,1024"
    print(
        f"{'nodes':>6} {'links':>6} {'failing':>7} | {'report.html':>20} | {'junit.xml':>20} | "
        f"{'summary.md':>20}"
    )
    sizes = [
        (int(x), worst)
        for x in args.nodes.split(",")
        for worst in ((False, True) if args.worst else (False,))
    ]
    for n, worst in sizes:
        cert = synthetic_certificate(n, args.fail_fraction)
        if worst:
            cert = worst_case(cert)
        m = measure(cert, args.repeat)
        failing = sum(1 for v in cert["nodes"].values() if v["verdict"] != "pass")
        cells = " | ".join(f"{m[k][0] / 1e6:8.2f} MB {m[k][1]:7.3f} s" for k in ("html", "junit", "summary"))
        print(
            f"{n:>6} {len(cert['links']):>6} {failing:>7} | "
            f"{cells}{'  (every node and link failing)' if worst else ''}"
        )
        if args.out:
            write_reports(cert, args.out / f"{n}{'-worst' if worst else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
