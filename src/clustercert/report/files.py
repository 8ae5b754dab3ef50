"""The files a verb writes besides the store: certify's reports, validate's ``--out`` and ``--junit``.

(``--prom`` textfiles: clustercert.report.prom.)
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from clustercert.report.documents import iso
from clustercert.report.html import html_chunks
from clustercert.report.junit import junit_parts, render_junit_validation
from clustercert.report.markdown import render_summary


def write_reports(cert: dict, out_dir: Path, templates: str | Path | None = None) -> dict[str, Path]:
    """Write report.html, junit.xml and summary.md into ``out_dir``; returns {"html"|"junit"|"summary": path}.
    ``templates``: a site's HTML template directory (else $CLUSTERCERT_REPORT_TEMPLATES)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "html": out_dir / "report.html",
        "junit": out_dir / "junit.xml",
        "summary": out_dir / "summary.md",
    }
    write_html(cert, paths["html"], templates)
    with open(paths["junit"], "wb") as f:
        for part in junit_parts(cert):
            f.write(part)
    paths["summary"].write_text(render_summary(cert), encoding="utf-8")
    return paths


def write_html(cert: dict, path: Path, templates: str | Path | None = None) -> Path:
    """report.html, written piece by piece as the template makes it (render_html's text)."""
    with open(path, "w", encoding="utf-8") as f:
        for chunk in html_chunks(cert, templates):
            f.write(chunk)
    return Path(path)


def write_validate_out(out: Path, results: dict, doc: dict | None = None) -> None:
    """``validate --out DIR``: validate.json (the run's document) and each node's raw evidence
    (evidence/NODE.json)."""
    out.mkdir(parents=True, exist_ok=True)
    doc = doc if doc is not None else {"nodes": {n: r.to_json() for n, r in sorted(results.items())}}
    (out / "validate.json").write_text(json.dumps(doc, indent=2))
    ev_dir = out / "evidence"
    ev_dir.mkdir(exist_ok=True)
    for n, r in results.items():
        if r.evidence is not None:
            (ev_dir / f"{n}.json").write_text(json.dumps(r.evidence.to_json(), indent=1))


def write_validate_junit(path: str, results: dict, cluster: str, started: float, wall_s: float) -> None:
    """``validate --junit FILE``: the run's findings as JUnit XML (report.junit.render_junit_validation), each
    node's checks charged the seconds its collection took (NodeEvidence.seconds). Written atomically: a
    temporary file beside ``path`` (mode 0600, as the run's other files), then renamed over it."""
    xml = render_junit_validation(dict(sorted(results.items())), cluster=cluster, timestamp=iso(started),
                                  wall_s=wall_s)
    target = Path(path).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(xml)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
