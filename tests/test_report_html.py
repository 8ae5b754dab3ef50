"""report.html from templates: a site's template directory, autoescape, and the sizes at which the
page draws lists instead of a matrix and shows only the nodes that did not pass."""

from __future__ import annotations

import re

import pytest
from test_certificate import sample_certificate
from test_report_junit import scale_module

from clustercert.errors import InputError
from clustercert.report import html as report_html
from clustercert.report.files import write_reports
from clustercert.report.html import TEMPLATES_ENV, check_templates, render_html
from clustercert.report.markdown import render_summary


def test_a_site_template_directory_replaces_single_templates(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "sections").mkdir(parents=True)
    (site / "sections" / "header.html.j2").write_text(
        '<header class="site">ACME acceptance · {{ report.header.cluster }} · '
        '<b id="verdict">{{ report.header.verdict }}</b>'
        "</header>\n"
    )
    (site / "report.css").write_text("body{background:#fff}\n")
    cert = sample_certificate()
    cert["cluster"] = 'lab<script>alert("c")</script>'
    page = render_html(cert, templates=site)
    assert (
        'ACME acceptance · lab&lt;script&gt;alert(&#34;c&#34;)&lt;/script&gt; · <b id="verdict">FAIL</b>'
        in page
    )
    assert "<script>" not in page  # the site's template is autoescaped like the built-in ones
    assert "body{background:#fff}" in page and "--accent" not in page  # its CSS replaces the built-in CSS
    assert '<section id="rounds">' in page  # the other sections are the built-in ones
    # the environment variable does the same for certify, which passes no argument
    monkeypatch.setenv(TEMPLATES_ENV, str(site))
    assert "ACME acceptance" in render_html(sample_certificate())
    paths = write_reports(sample_certificate(), tmp_path / "out")
    assert "ACME acceptance" in paths["html"].read_text()
    monkeypatch.delenv(TEMPLATES_ENV)
    assert "ACME acceptance" not in render_html(sample_certificate())


def test_a_missing_template_directory_is_an_input_error(tmp_path, monkeypatch):
    with pytest.raises(InputError, match="report template directory not found"):
        render_html(sample_certificate(), templates=tmp_path / "nope")
    with pytest.raises(InputError, match="nope: report template directory not found"):
        check_templates(tmp_path / "nope")  # what a caller runs before it starts
    check_templates(tmp_path)
    monkeypatch.setenv(TEMPLATES_ENV, str(tmp_path / "nope"))
    with pytest.raises(InputError, match=f"{TEMPLATES_ENV}: report template directory not found"):
        render_html(sample_certificate())
    with pytest.raises(InputError):
        check_templates()


def test_the_builtin_templates_are_package_data():
    base = report_html.BUILTIN_TEMPLATES
    assert (base / "report.html.j2").is_file() and (base / "report.css").is_file()
    env = report_html.environment()
    assert env.autoescape is True
    included = set(re.findall(r'include "([^"]+)"', (base / "report.html.j2").read_text()))
    assert included and all((base / name).is_file() for name in included)


@pytest.mark.parametrize("n,compact", [(32, True), (34, False)])
def test_pairs_are_a_matrix_up_to_32_nodes_and_lists_above(n, compact):
    cert = scale_module().synthetic_certificate(n, fail_fraction=0.1)
    page = render_html(cert)
    assert ('<table class="pairs compact"' in page) is compact
    assert ('<table class="plain channels">' in page) is not compact
    pairs_per_round = n // 2
    for k in (1, 2):
        start = page.index(f'<div class="round" id="round-{k}"')
        block = page[
            start : page.index('</div>\n<div class="round"', start)
            if k == 1
            else page.index("</section>", start)
        ]
        assert f"Round {k} · {pairs_per_round} pairs measured" in block
        # one row per pair that ran, never a row per node pair that did not
        assert (
            len(re.findall(r"<tr[^>]*><th(?: class=\"pair\")?>gpu\d+ ↔ gpu\d+</th>", block))
            == pairs_per_round
        )
        bad = {(lk["a"], lk["b"]) for lk in cert["links"] if lk["round"] == k and lk["status"] != "pass"}
        listed = re.findall(r'<li class="pair-bad" data-a="([^"]+)" data-b="([^"]+)"', block)
        assert set(listed) == bad and len(listed) == len(bad)


@pytest.mark.parametrize("n,collapsed", [(64, False), (66, True)])
def test_checks_by_nodes_collapses_to_the_failing_nodes_above_64(n, collapsed):
    cert = scale_module().synthetic_certificate(n, fail_fraction=0.05)
    page = render_html(cert)
    matrix = page[
        page.index('<section id="matrix">') : page.index("</section>", page.index('<section id="matrix">'))
    ]
    heads = re.findall(r"<th>(gpu\d+)<br>", matrix)
    failing = [name for name, node in cert["nodes"].items() if node["verdict"] != "pass"]
    assert failing
    if collapsed:
        assert heads == sorted(failing)
        assert (f"{len(failing)} nodes did not pass and are shown; {n - len(failing)} passed every check"
                in matrix)
        evidence = page[page.index('<section id="evidence">'):]
        assert re.findall(r'<details class="node" open><summary>(gpu\d+) ', evidence) == sorted(failing)
        assert (
            f"{n - len(failing)} nodes passed every check: their evidence is in certificate.json" in evidence
        )
    else:
        assert heads == sorted(cert["nodes"]) and "matrix-collapsed" not in matrix


def test_summary_lists_the_links_that_did_not_pass_above_64_nodes():
    cert = scale_module().synthetic_certificate(128)
    md = render_summary(cert)
    bad = [lk for lk in cert["links"] if lk["status"] != "pass"]
    rows = [line for line in md.splitlines() if re.match(r"\| (\d|all) \| [a-z0-9_]+ \| gpu", line)]
    assert len(rows) == len(bad) and all("**fail**" in r for r in rows)
    assert (
        f"{len(cert['links']) - len(bad)} of {len(cert['links'])} measurements passed; those that did not:"
        in md
    )
    f0 = [lk for lk in cert["links"] if (lk["fabric"], lk["probe"]) == (0, "ib_write_bw")]
    assert f"- Fabric 0 · ib_write_bw (RDMA write bandwidth): {len(f0)} measured, " in md
    assert (
        "## Rounds\n\n| round | pairs | question |\n|---:|---:|---|\n| 1 | 63 | a matching of every node |"
        in md
    )
