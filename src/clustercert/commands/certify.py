"""`clustercert certify`: validators + probes -> verdicts, a signed certificate, reports.

Glue only: the validators' run is clustercert.checks.run, the probes and their rounds clustercert.probes
(run with the threshold judge), the certificate's body clustercert.record.results, signing
clustercert.record.certificate, the reports clustercert.report.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from clustercert import paths
from clustercert.checks import COMPONENT_ORDER
from clustercert.checks import run as check_run
from clustercert.collect import slurm
from clustercert.commands import Needs
from clustercert.commands.context import Run, rails_found, reachable
from clustercert.commands.output import emit, exit_code
from clustercert.probes import run as probe_run
from clustercert.probes.judge import ThresholdJudge
from clustercert.probes.plan import ProbeSettings
from clustercert.record import certificate
from clustercert.record.results import certificate_body
from clustercert.record.settle import settle, settle_every, settling
from clustercert.report import prom
from clustercert.report.documents import certify_document
from clustercert.report.files import write_reports
from clustercert.report.terminal import print_certify

NEEDS = Needs(state=True, sessions=True,
              required=(("--out", "out", "the directory for certificate.json and its reports"),))


def run(args) -> int:
    ctx = Run(args, "certify")
    if args.drain == "slurm":
        slurm.check_inventory(ctx.inv)
    signing_key, pub_path = certificate.load_or_create_key(
        Path(args.key) if args.key else None, paths.state_dir()
    )
    with ctx.locked(), settling():
        return _certify(ctx, Path(args.out), signing_key, pub_path)


def _certify(ctx: Run, out_dir: Path, signing_key, pub_path: Path) -> int:
    args, inv = ctx.args, ctx.inv
    started = datetime.now(UTC)
    run_id = ctx.start({"limit": args.limit, "all_pairs": args.all_pairs, "backend": ctx.backend_name,
                        "nccl_cluster": args.nccl_cluster})
    settle()
    with ctx.progress() as progress, ctx.opened() as io:
        t_validate = time.monotonic()
        validation = check_run.validate_nodes(inv, list(COMPONENT_ORDER), ctx.forks, keep_outputs=False,
                                              after_node=settle_every(), io=io, progress=progress)
        validate_s = round(time.monotonic() - t_validate, 2)
        settle()
        settings = ProbeSettings(args.probe_seconds, args.probe_timeout, rails=rails_found(validation),
                                 per_fabric=args.nccl_cluster == "per-fabric")
        outcome = probe_run.run(inv, reachable(validation), settings,
                                ThresholdJudge.for_inventory(inv), ctx.forks, args.all_pairs, io=io,
                                progress=progress)
    settle()
    cert = certificate_body(inv, validation, outcome, started, validate_s, consume=True)  # empties validation
    if args.drain == "slurm":  # after the verdicts, before signing: what was done is part of the certificate
        cert["slurm"] = slurm.apply(inv, cert["nodes"], paths.control_dir())
    cert = certificate.sign(cert, signing_key)
    settle()
    out_dir.mkdir(parents=True, exist_ok=True)
    certificate.write_certificate(cert, out_dir / "certificate.json")
    (out_dir / "signing.pub").write_text(pub_path.read_text())
    write_reports(cert, out_dir)
    ctx.finish(cert["verdict"], cert["nodes"], cert["links"],
               actions={"slurm": cert["slurm"]} if "slurm" in cert else None)
    if args.prom:
        prom.write_certify(args.prom, cert, ctx.source)
    emit(args, lambda: certify_document(cert, run_id, out_dir, ctx.source),
         lambda: print_certify(cert, out_dir, run_id, outcome.seconds))
    return exit_code(cert["verdict"] == "pass" and all(a["ok"] for a in cert.get("slurm", [])))
