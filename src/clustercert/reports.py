"""Reports rendered from a certificate: report.html, junit.xml, summary.md.

The renderers live in the package clustercert.report (html: Jinja2 templates, junit, markdown); this
module re-exports them so ``from clustercert import reports`` keeps working.
"""

from __future__ import annotations

from clustercert.report import (  # noqa: F401
    COLLAPSE_NODES,
    COMPACT_PAIRS_NODES,
    HEAT_ERROR,
    HEAT_MISSING,
    TEMPLATES_ENV,
    aggregate,
    build_view,
    check_templates,
    counts,
    heat_colour,
    link_groups,
    pair_results,
    render_html,
    render_junit,
    render_junit_validation,
    render_summary,
    standing,
    threshold_for,
    write_reports,
)
