"""Every report opens with the nodes that did not pass and why (issue 35.2): report.html, summary.md and the
terminal output of certify, validate and probe; the page is opened in headless Chromium at 8 and 256 nodes and
the failing node's row must be on its first screen."""

from __future__ import annotations

import json
import random
import re
import subprocess
from pathlib import Path

import pytest
from test_report_junit import scale_module
from test_reports import _chromium, read_png, screenshot

from clustercert.report.files import write_reports
from clustercert.report.html import render_html
from clustercert.report.markdown import render_summary

SIZE = (1280, 800)


def one_bad_certificate(n: int) -> tuple[dict, str, str]:
    """A synthetic certify certificate of ``n`` healthy nodes but one missing a GPU, deep in the name order
    (two thirds of the way), and the last one unreachable: (certificate, the failing node, the unreachable
    one)."""
    m = scale_module()
    cert = m.synthetic_certificate(n, fail_fraction=0.0, rounds=2)
    names = sorted(cert["nodes"])
    bad, gone = names[2 * n // 3], names[-1]
    findings = m._findings(bad, "gpu_missing", random.Random(3))
    cert["nodes"][bad] = {"verdict": "fail", "findings": findings}
    cert["nodes"][gone] = {"verdict": "unreachable", "findings": [], "detail": "ssh: connect timed out"}
    cert["links"] = [lk for lk in cert["links"] if gone not in (lk["a"], lk["b"])]
    cert["versions"]["nodes"].pop(gone, None)
    cert["verdict"] = "fail"
    assert {x for x, v in cert["nodes"].items() if v["verdict"] != "pass"} == {bad, gone}
    return cert, bad, gone


# ---- the three renderings ------------------------------------------------------------------------

@pytest.mark.parametrize("n", [8, 256])
def test_summary_md_opens_with_the_nodes_that_did_not_pass_and_why(n):
    cert, bad, gone = one_bad_certificate(n)
    md = render_summary(cert)
    lines = md.splitlines()
    assert lines[0].startswith("# clustercert certificate: ") and lines[0].endswith("**FAIL**")
    headings = [x for x in lines if x.startswith("## ")]
    assert headings[0] == f"## Did not pass: 2 of {n} nodes (1 fail, 1 unreachable)", headings
    first = md[:md.index(headings[1])]
    assert f"| **{bad}** | fail | `gpu.count` | expected 8, observed 7 |" in first
    assert f"| **{gone}** | unreachable | — | ssh: connect timed out |" in first
    assert first.index(bad) < first.index(gone)  # failing before unreachable
    assert md.index("## Counts") > md.index(gone)


def test_summary_md_of_a_passing_cluster_says_so_first():
    cert = scale_module().synthetic_certificate(8, fail_fraction=0.0, rounds=1)
    md = render_summary(cert)
    assert md.splitlines()[2] == "## Every node passed (8 nodes)"
    assert "| node | status |" not in md


def test_the_first_failing_check_is_the_node_verdicts_and_counts_the_others():
    cert, bad, _gone = one_bad_certificate(8)
    node = cert["nodes"][bad]
    node["findings"].insert(
        0,
        {
            "check": "driver.version",
            "status": "error",
            "subject": "",
            "expected": "550",
            "observed": "tool not found: nvidia-smi",
        },
    )
    node["findings"].append({"check": "ib.port_state", "status": "fail", "subject": "mlx5_1/1",
                             "expected": "Active / LinkUp", "observed": "Down / Polling"})
    md = render_summary(cert)
    # the verdict is fail: its first fail (not the error before it) is the reason; two other checks did not
    # pass
    assert f"| **{bad}** | fail | `gpu.count` | expected 8, observed 7 | +2 more failing checks |" in md
    node["verdict"] = "error"
    node["findings"] = [f for f in node["findings"] if f["status"] != "fail"]
    md = render_summary(cert)
    assert f"| **{bad}** | error | `driver.version` | tool not found: nvidia-smi |  |" in md


@pytest.mark.parametrize("n", [8, 256])
def test_report_html_opens_with_the_table_of_nodes_that_did_not_pass(n):
    cert, bad, gone = one_bad_certificate(n)
    page = render_html(cert)
    main = page[page.index("<main>"):]
    assert re.match(r'<main>\n<section id="not-passing" class="bad"><h2>Did not pass: 2 of \d+ nodes', main)
    first = main[:main.index("</section>")]
    rows = re.findall(r'<tr data-node="([^"]+)">(.*?)</tr>', first)
    assert [r[0] for r in rows] == [bad, gone]
    assert "<code>gpu.count</code>" in rows[0][1] and "expected 8, observed 7" in rows[0][1]
    assert "ssh: connect timed out" in rows[1][1]
    assert main.index('class="cards"') > main.index("</section>")  # the counts come after


def test_report_html_of_a_passing_cluster_says_so_in_one_line():
    page = render_html(scale_module().synthetic_certificate(8, fail_fraction=0.0, rounds=1))
    assert '<section id="not-passing" class="good"><h2>Every node passed (8 nodes)</h2>' in page
    assert "<tr data-node=" not in page


def test_certify_and_probe_terminal_output_opens_with_the_nodes_that_did_not_pass(capsys, tmp_path):
    from clustercert.report.terminal import print_certify, print_probe

    cert, bad, gone = one_bad_certificate(256)
    print_certify(cert, tmp_path, "r1", 21.3)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "certify r1: FAIL — did not pass: 2 of 256 nodes (1 fail, 1 unreachable)", out[:3]
    row = next(i for i, x in enumerate(out) if f"│ {bad} " in x)
    assert "gpu.count" in out[row] and "expected 8, observed 7" in out[row]
    assert row < next(i for i, x in enumerate(out) if f"│ {gone} " in x) < 12
    assert "ssh: connect timed out" in "\n".join(out[:12])
    doc = {"run": "r2", "verdict": "fail", "rounds": 1, "seconds": 3.0, "links": [], "schedule": [],
           "localisation": [], "nodes": {"a": {"verdict": "unreachable", "findings": [], "detail": "refused"},
                                         "b": {"verdict": "pass", "findings": []}}}
    print_probe(doc)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "probe r2: FAIL — did not pass: 1 of 2 nodes (1 unreachable)"
    assert "│ a " in out[4] and "refused" in out[4]


# ---- in a real browser ---------------------------------------------------------------------------

_PROBE_JS = """<script>
const out = {height: innerHeight, width: innerWidth, rows: {}};
for (const name of NAMES) {  // the first text on the page that names the node, and the row around it
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let n;
  while ((n = walk.nextNode()) && !n.data.includes(name)) {}
  if (!n) { out.rows[name] = null; continue; }
  const el = n.parentElement.closest("tr,li,p,section") || n.parentElement;
  const r = el.getBoundingClientRect();
  out.rows[name] = {top: r.top, bottom: r.bottom, left: r.left, right: r.right, text: el.textContent};
}
document.title = "FIRST-SCREEN " + JSON.stringify(out);
</script>"""


def first_screen(browser: str, html: Path, names: list[str], tmp_path: Path) -> dict:
    """Where the first text naming each of ``names`` is laid out in headless Chromium at SIZE: a test-only
    copy of the page (its Content-Security-Policy, which forbids any script, taken out) runs a script that
    writes the rectangles into the title, read back with --dump-dom."""
    page = html.read_text()
    page = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page, count=1)
    page = page.replace("</body>", _PROBE_JS.replace("NAMES", json.dumps(names)) + "</body>", 1)
    copy = tmp_path / "first-screen-probe.html"
    copy.write_text(page)
    dom = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile-dom'}",
            f"--window-size={SIZE[0]},{SIZE[1]}",
            "--dump-dom",
            copy.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    ).stdout
    m = re.search(r"<title>FIRST-SCREEN (.*?)</title>", dom)
    assert m, f"the probe script did not run: {dom[:300]}"
    return json.loads(m.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/usr/bin/chromium").exists() and _chromium() is None,
                    reason="chromium is not installed (scripts/setup.sh installs Debian's chromium)")
@pytest.mark.parametrize("n", [8, 256])
def test_the_failing_and_unreachable_nodes_are_on_the_first_screen_in_chromium(n, tmp_path):
    browser = _chromium() or "/usr/bin/chromium"
    cert, bad, gone = one_bad_certificate(n)
    paths = write_reports(cert, tmp_path / "out")
    seen = first_screen(browser, paths["html"], [bad, gone], tmp_path)
    assert seen["width"] == SIZE[0] and 500 <= seen["height"] <= SIZE[1], seen
    for name, why in ((bad, "expected 8, observed 7"), (gone, "ssh: connect timed out")):
        r = seen["rows"][name]
        assert r is not None, f"{name} is not on the page"
        assert name in r["text"] and why in r["text"], r  # the first mention is the row that says why
        assert 0 <= r["top"] < r["bottom"] <= seen["height"], (name, r, seen["height"])
    assert "gpu.count" in seen["rows"][bad]["text"]
    # the screenshot a person looks at (kept under the test's tmp dir) shows the same: the failing row's
    # "fail" pill and the unreachable row's grey pill painted in their rows' bands, the red FAIL badge above
    png = screenshot(browser, paths["html"], tmp_path, SIZE)
    width, height, rows = read_png(png)
    assert (width, height) == SIZE

    def painted(name: str, rgb: tuple[int, int, int]) -> int:
        r = seen["rows"][name]
        return sum(px == rgb for row in rows[int(r["top"]):int(r["bottom"]) + 1] for px in row)

    assert painted(bad, (0xFD, 0xE0, 0xDD)) > 100, "no fail pill in the failing node's row"
    assert painted(gone, (0xE5, 0xE7, 0xEB)) > 100, "no unreachable pill in the unreachable node's row"
    assert sum(px == (0xDC, 0x26, 0x26) for row in rows[:100] for px in row) > 500, "no red FAIL badge"
