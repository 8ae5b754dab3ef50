"""Reports rendered from a certificate: report.html (Jinja2 templates), junit.xml and summary.md.
Pure: dict in, text out; ``write_reports`` writes the three files.

clustercert.report.html, .junit and .markdown hold one report each; .common what they share.
``render_junit_validation`` renders a ``validate`` run as JUnit (for ``validate --junit FILE``).
"""

from __future__ import annotations

from pathlib import Path

from clustercert.report.common import (
    COLLAPSE_NODES,
    COMPACT_PAIRS_NODES,
    HEAT_ERROR,
    HEAT_MISSING,
    aggregate,
    counts,
    heat_colour,
    link_groups,
    pair_results,
    standing,
    threshold_for,
)
from clustercert.report.html import TEMPLATES_ENV, build_view, check_templates, render_html
from clustercert.report.junit import render_junit, render_junit_validation
from clustercert.report.markdown import render_summary

__all__ = [
    "COLLAPSE_NODES", "COMPACT_PAIRS_NODES", "HEAT_ERROR", "HEAT_MISSING", "TEMPLATES_ENV", "aggregate", "build_view",
    "check_templates",
    "counts", "heat_colour", "link_groups", "pair_results", "render_html", "render_junit", "render_junit_validation",
    "render_summary", "standing", "threshold_for", "write_reports",
]


def write_reports(cert: dict, out_dir: Path, templates: str | Path | None = None) -> dict[str, Path]:
    """Write report.html, junit.xml and summary.md into ``out_dir``; returns {"html"|"junit"|"summary": path}.
    ``templates``: a site's HTML template directory (else $CLUSTERCERT_REPORT_TEMPLATES)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"html": out_dir / "report.html", "junit": out_dir / "junit.xml", "summary": out_dir / "summary.md"}
    paths["html"].write_text(render_html(cert, templates), encoding="utf-8")
    paths["junit"].write_bytes(render_junit(cert))
    paths["summary"].write_text(render_summary(cert), encoding="utf-8")
    return paths
