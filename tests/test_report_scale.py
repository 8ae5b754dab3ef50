"""The reports at fleet scale (issue 23.7): a 1,024-node certificate's report.html stays under 10 MB,
and a 256-node report reads in a browser."""

from __future__ import annotations

import subprocess
import time
from html.parser import HTMLParser

import pytest
from test_report_junit import scale_module
from test_reports import _chromium, read_png, screenshot, screenshot_heatmap

from clustercert.report.files import write_reports
from clustercert.report.html import render_html


def _pairs(cert: dict) -> int:
    """Pairs measured, summed over the rounds."""
    return len({(lk["a"], lk["b"], lk["round"]) for lk in cert["links"]})


def test_a_1024_node_certificate_renders_to_at_most_10_mb():
    cert = scale_module().synthetic_certificate(1024)
    t0 = time.process_time()  # CPU time: parallel test workers beside it do not count against the bound
    page = render_html(cert)
    took = time.process_time() - t0
    size = len(page.encode("utf-8"))
    assert size <= 10_000_000, size
    assert took < 20, took
    # what was measured, not an N x N grid: one row per pair that ran in each round (a matching of the
    # 1,020 reachable nodes), failing pairs listed, every node that did not pass in the table
    assert page.count("<tr><th>gpu") == _pairs(cert) == 2 * 510
    failing = sorted(n for n, v in cert["nodes"].items() if v["verdict"] != "pass")
    matrix = page[
        page.index('<section id="matrix">') : page.index("</section>", page.index('<section id="matrix">'))
    ]
    assert [h for h in failing if f"<th>{h}<br>" in matrix] == failing


def test_the_worst_1024_node_certificate_stays_under_10_mb():
    """Every node fails and every link fails with 600 characters of output: the largest page."""
    scale = scale_module()
    cert = scale.worst_case(scale.synthetic_certificate(1024))
    page = render_html(cert)
    assert len(page.encode("utf-8")) <= 10_000_000
    # every pair of both rounds, in words
    assert page.count('<li class="pair-bad"') == _pairs(cert) == 2 * 510
    assert "more did not pass (each is listed with its values under its round" in page


class VisibleText(HTMLParser):
    """The text a reader sees without opening anything: outside <head>, and outside closed <details>
    except their <summary>."""

    def __init__(self):
        super().__init__()
        self.details: list[list[bool]] = []  # [open, inside its summary]
        self.hidden = 0
        self.parts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in ("head", "style", "title", "script"):
            self.hidden += 1
        elif tag == "details":
            self.details.append(["open" in dict(attrs), False])
        elif tag == "summary" and self.details:
            self.details[-1][1] = True

    def handle_endtag(self, tag):
        if tag in ("head", "style", "title", "script"):
            self.hidden -= 1
        elif tag == "details" and self.details:
            self.details.pop()
        elif tag == "summary" and self.details:
            self.details[-1][1] = False

    def handle_data(self, data):
        outer_open = all(d[0] for d in self.details[:-1])
        here = not self.details or self.details[-1][0] or self.details[-1][1]
        if not self.hidden and outer_open and here:
            self.parts.append(data)

    @classmethod
    def of(cls, dom: str) -> str:
        p = cls()
        p.feed(dom)
        return " ".join(" ".join(p.parts).split())


@pytest.mark.slow
def test_a_256_node_report_reads_in_headless_chromium(tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    cert = scale_module().synthetic_certificate(256)
    paths = write_reports(cert, tmp_path / "out")
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-background-networking", f"--user-data-dir={tmp_path / 'profile-dom'}",
                          "--dump-dom", paths["html"].resolve().as_uri()],
                         capture_output=True, text=True, timeout=120, check=False).stdout
    assert 'id="verdict">FAIL</div>' in dom, dom[:500]
    seen = VisibleText.of(dom)
    failing = sorted(n for n, v in cert["nodes"].items() if v["verdict"] != "pass")
    assert failing and all(n in seen for n in failing), [n for n in failing if n not in seen]
    for item in cert["localisation"]:  # what was localised, with its fabric and partners
        subject = item.get("node") or item["link"].replace("<->", " ↔ ")
        assert subject in seen
        assert all(p in seen for p in item["partners"])
    assert "Round 1 · 127 pairs measured · a matching of every node" in seen
    bad_link = next(lk for lk in cert["links"] if lk["status"] == "fail" and lk["probe"] == "ib_write_bw")
    assert "below the floor of 320 Gb/s" in seen and f"{bad_link['value']} Gb/s" in seen
    assert "passed every check (above 64 nodes only the nodes that did not pass are shown)" in seen
    # the first screen is a page, not a blank: the red verdict in the header, text, several colours
    width, height, rows = read_png(screenshot(browser, paths["html"], tmp_path))
    red = (0xDC, 0x26, 0x26)
    assert sum(px == red for row in rows[:80] for px in row) > 500, "no red FAIL badge in the header"
    background = {(0xF6, 0xF7, 0xF9), (0xFF, 0xFF, 0xFF)}
    inked = sum(px not in background for row in rows for px in row)
    assert inked > 0.1 * width * height
    assert len({px for row in rows[::4] for px in row[::4]}) > 50


@pytest.mark.slow
def test_a_healthy_8_node_lab_report_paints_its_pair_cells_on_the_first_screen(tmp_path):
    """What tests/certify checks on the lab (screenshot_heatmap, > 5,000 pixels of pair cells on the
    first screen), on a lab-shaped healthy certificate: one round of 4 pairs x 7 channels."""
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    cert = scale_module().synthetic_certificate(8, fail_fraction=0.0, rounds=1)
    assert cert["verdict"] == "pass" and len(cert["links"]) == 4 * 7
    paths = write_reports(cert, tmp_path / "out")
    _w, _h, _rows, hits = screenshot_heatmap(browser, cert, paths["html"], tmp_path)
    assert len(hits) > 5_000, len(hits)
