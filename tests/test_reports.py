"""report.html, junit.xml and summary.md rendered from the sample certificate (see test_certificate.py)."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_certificate import NODES, sample_certificate

from clustercert.record import certificate as cc
from clustercert.report.common import HEAT_ERROR, HEAT_MISSING, heat_colour, threshold_for
from clustercert.report.files import write_reports
from clustercert.report.html import render_html
from clustercert.report.junit import render_junit
from clustercert.report.markdown import render_summary


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    key, _ = cc.load_or_create_key(cc.init_key(out / "state"), out / "state")
    cert = cc.sign(sample_certificate(), key)
    return cert, write_reports(cert, out / "cert"), key


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the text inside each element with a class."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _tags(html_text: str) -> list[tuple[str, dict]]:
    p = _Tags()
    p.feed(html_text)
    return p.tags


# ---- junit.xml ---------------------------------------------------------------------------------

def test_write_reports_returns_the_three_files(written):
    _cert, paths, _ = written
    assert {k: p.name for k, p in paths.items()} == {"html": "report.html", "junit": "junit.xml",
                                                     "summary": "summary.md"}
    assert all(p.stat().st_size > 0 for p in paths.values())


def test_junit_counts(written):
    _cert, paths, _ = written
    root = ET.parse(paths["junit"]).getroot()
    cases = root.findall(".//testcase")
    # 7 reachable nodes x 10 checks + 1 node.status for the unreachable node + 50 link measurements
    assert len(cases) == 121
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("121", "4", "2")
    # the JUnit schema has no skipped on <testsuites>; each suite has its own
    assert "skipped" not in root.attrib
    assert len(root.findall(".//testcase/failure")) == 4
    assert len(root.findall(".//testcase/error")) == 2
    assert len(root.findall(".//testcase/skipped")) == 7
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert suites["nodes"].get("tests") == "71" and suites["links"].get("tests") == "50"
    assert suites["nodes"].get("skipped") == "7" and suites["links"].get("skipped") == "0"
    assert root.get("time") == "1674.000"  # 08:14:03 -> 08:41:57


def test_junit_aggregates_one_check_on_one_node(written):
    _cert, paths, _ = written
    root = ET.parse(paths["junit"]).getroot()
    by = {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}
    gc = by[("gpu-node-03", "gpu.count")]
    assert gc.find("failure").get("message") == "expected 8, observed 7"
    assert "GPU has fallen off the bus" in gc.find("failure").text
    # two HCAs -> two findings of ib.port_state on one node -> one passing testcase
    assert by[("gpu-node-01", "ib.port_state")].find("failure") is None
    assert sum(1 for k in by if k == ("gpu-node-01", "ib.port_state")) == 1
    assert by[("gpu-node-04", "ib.bond")].find("skipped") is not None
    assert by[("gpu-node-08", "node.status")].find("error").get("message") == "node unreachable"
    slow = by[("link.fabric1.ib_write_bw", "gpu-node-05 <-> gpu-node-06 round 2")]
    assert slow.find("failure").get("message") == "208.9 Gb/s, below the floor of 320 Gb/s"
    err = by[("link.fabric0.ib_write_bw", "gpu-node-02 <-> gpu-node-07 round 1")]
    assert err.find("error").get("message") == "no value"
    ok = by[("link.fabric0.iperf3", "gpu-node-07 <-> gpu-node-01 round 1")]
    assert ok.find("failure") is None and ok.find("error") is None


def test_junit_survives_control_characters_in_evidence(written):
    _cert, paths, _ = written
    raw = paths["junit"].read_bytes()
    assert b"\x1b" not in raw  # not well-formed XML 1.0; shown as text instead
    root = ET.fromstring(raw)
    model = next(
        c
        for c in root.iter("testcase")
        if (c.get("classname"), c.get("name")) == ("gpu-node-02", "gpu.model")
    )
    assert '\\x1b[31mWARN\\x1b[0m <script>alert("x")</script>' in model.find("system-out").text


def test_junit_failure_when_fail_and_error_mixed():
    cert = sample_certificate()
    fs = cert["nodes"]["gpu-node-01"]["findings"]
    ports = [f for f in fs if f["check"] == "ib.port_state"]
    ports[0]["status"], ports[1]["status"] = "error", "fail"
    root = ET.fromstring(render_junit(cert))
    tc = next(
        c
        for c in root.iter("testcase")
        if (c.get("classname"), c.get("name")) == ("gpu-node-01", "ib.port_state")
    )
    assert tc.find("failure") is not None and tc.find("error") is None
    assert root.get("failures") == "5"


# ---- summary.md ----------------------------------------------------------------------------------

def test_summary_names_failing_node_check_and_link(written):
    _cert, paths, key = written
    md = paths["summary"].read_text()
    assert md.startswith("# clustercert certificate: lab-h100-a — **FAIL**\n")
    assert "- **gpu-node-03** — fail\n  - `gpu.count` fail: expected 8, observed 7\n" in md
    assert (
        "`nccl.allreduce_1node` fail: all_reduce_perf -g 7: expected >= 460 gbyte_per_s, observed 401.7 GB/s"
        in md
    )
    assert "- **gpu-node-08** — unreachable\n  - no check could run\n" in md
    assert "gpu-node-01** —" not in md  # passing nodes are not listed as failing
    assert "| nodes | 8 | 6 | 1 | 0 | 1 (unreachable 1) |" in md
    assert "| node × check | 70 | 61 | 2 | 0 | 7 (skip 7) |" in md
    assert "| links | 50 | 47 | 2 | 1 | 0 |" in md
    assert (
        "| 1 | ib_write_bw | gpu-node-05 | gpu-node-06 | 2 | 208.9 Gb/s | floor 320 Gb/s | **fail** |" in md
    )
    assert "| 0 | ib_write_bw | gpu-node-02 | gpu-node-07 | 1 | no value | floor 320 Gb/s | **error** |" in md
    assert "- bad_link: **gpu-node-05 ↔ gpu-node-06 (fabric 1)** — ib_write_bw 212.4 then 208.9" in md
    assert f"- signed by {cc.fingerprint(key.public_key())}\n" in md


def test_summary_escapes_markdown_table_breakers():
    cert = sample_certificate()
    cert["links"][0]["a"] = "evil|node\nx"
    md = render_summary(cert)
    row = next(line for line in md.splitlines() if "evil" in line)
    assert "evil\\|node x" in row and row.count(" | ") == 7


# ---- report.html ---------------------------------------------------------------------------------

def test_html_loads_nothing_remote_and_escapes_evidence(written):
    _cert, paths, _ = written
    text = paths["html"].read_text()
    for tag, attrs in _tags(text):
        for name in ("src", "href", "srcset", "data", "action", "poster"):
            val = (attrs.get(name) or "").strip().lower()
            assert not val.startswith(("http:", "https:", "//")), (tag, attrs)
        assert tag not in ("script", "link", "iframe", "object", "embed", "img"), tag
    assert not re.search(r"url\(\s*['\"]?\s*(https?:)?//", text)
    assert "@import" not in text
    assert "default-src 'none'" in text  # the CSP forbids any load a future change might add
    # the untrusted evidence is text, not markup
    assert "<script>alert" not in text and '<img src="https://evil' not in text
    assert (
        "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;img src=&#34;https://evil.example/x.png&#34;&gt;"
        in text
    )
    assert "\\x1b[31mWARN" in text


def _round_block(text: str, k: int) -> str:
    start = text.index(f'<div class="round" id="round-{k}"')
    return text[start:text.index("</table></div>", start)]


def test_html_pairs_are_drawn_per_round_as_measured(written):
    """No N x N grid: each round shows the pairs that ran, failing first, a cell per channel it measured
    (gpu-node-08, unreachable, has no row at all); what did not pass is said in words with its units."""
    _cert, paths, _ = written
    text = paths["html"].read_text()
    assert 'class="hm"' not in text and "not measured</" not in text
    r1 = _round_block(text, 1)
    heads = re.findall(r'<th class="channel" data-fabric="(-?\d)" data-probe="([a-z0-9_]+)"', r1)
    # one probe's fabrics side by side
    assert heads == [("0", "ib_write_bw"), ("1", "ib_write_bw"), ("0", "iperf3")]
    rows = re.findall(r'<tr class="st-row-([a-z]+)"><th class="pair">([^<]+)</th>(.*?)</tr>', r1)
    assert len(rows) == 21  # the 7 reachable nodes' pairs, each once
    assert [(st, pair) for st, pair, _ in rows[:2]] == [("fail", "gpu-node-05 ↔ gpu-node-06"),
                                                        ("error", "gpu-node-02 ↔ gpu-node-07")]
    assert all(st == "pass" for st, _, _ in rows[2:]) and "gpu-node-08" not in r1
    cells = [re.findall(r'data-status="([a-z]+)"', body) for _, _, body in rows]
    assert all(len(c) == 3 for c in cells)
    assert sum(c.count("missing") for c in cells) == 14  # iperf3 ran on a 7-pair ring
    assert cells[0][:2] == ["pass", "fail"]  # the slow link is slow on fabric 1 only
    slow = re.search(
        r'data-status="fail" style="background:([^;]+);[^"]*" title="([^"]+)">([^<]+)</td>', rows[0][2]
    )
    assert slow.group(3) == "212.4" and slow.group(1) == heat_colour(212.4, {"floor": 320.0}, "fail")
    assert "round 1: 212.4 Gb/s, below the floor of 320 Gb/s" in slow.group(2)
    assert re.search(r'data-status="pass"[^>]*>387</td>', rows[2][2])  # values are printed in the cells
    # what did not pass, in words, failing before errors, with the pair's other rounds
    bad = re.findall(
        r'<div class="m" data-fabric="(-?\d)" data-probe="([a-z0-9_]+)" data-status="([a-z]+)">(.*?)</div>',
        r1,
    )
    assert [(f, p, st) for f, p, st, _ in bad] == [
        ("1", "ib_write_bw", "fail"),
        ("0", "ib_write_bw", "error"),
    ]
    assert ("Fabric 1 · ib_write_bw (RDMA write bandwidth): 212.4 Gb/s, below the floor of 320 Gb/s "
            '<span class="note">(also round 2: 208.9 Gb/s (fail))</span>') in bad[0][3]
    assert bad[1][3].endswith("ib_write_bw (RDMA write bandwidth): no value")
    r2 = _round_block(text, 2)
    assert re.findall(r'<th class="pair">([^<]+)</th>', r2)[1:] == ["gpu-node-05 ↔ gpu-node-06"]
    assert "208.9 Gb/s, below the floor of 320 Gb/s" in r2


def test_html_shows_the_schedule_and_the_localisation_evidence():
    cert = sample_certificate()
    cert["schedule"] = [
        {"round": 1, "pairs": 21, "question": "every pair: round 1 of 7"},
        {"round": 2, "pairs": 1, "question": "gpu-node-05 <-> gpu-node-06 on fabric 1 with good partners"},
    ]
    cert["timing"] = {
        "rounds": [{"round": 1, "wall_s": 10.2, "tool_s": 9.9}, {"round": 2, "wall_s": 2.1, "tool_s": 2.0}]
    }
    cert["localisation"][1] = {
        "link": "gpu-node-05<->gpu-node-06",
        "kind": "bad_link",
        "reason": "slow on fabric 1",
        "fabric": 1,
        "probes": ["ib_write_bw"],
        "partners": ["gpu-node-06", "gpu-node-05"],
    }
    cert["localisation"].append(
        {
            "node": "gpu-node-02",
            "kind": "suspect",
            "reason": "<b>one</b> failing pair",
            "fabric": 0,
            "probes": ["ib_write_bw", "iperf3"],
            "partners": ["gpu-node-07"],
        }
    )
    text = render_html(cert)
    sched = text[
        text.index('<table class="plain schedule">') : text.index(
            "</table>", text.index('class="plain schedule"')
        )
    ]
    rows = re.findall(
        r"<tr><td><a [^>]+>(\d)</a></td><td>(\d+)</td><td>([^<]+)</td><td>([^<]+)</td><td>(\d+)</td></tr>",
        sched,
    )
    assert rows == [
        ("1", "21", "every pair: round 1 of 7", "10.2 s", "2"),
        ("2", "1", "gpu-node-05 &lt;-&gt; gpu-node-06 on fabric 1 with good partners", "2.1 s", "1"),
    ]
    assert (
        "Round 2 · 1 pair measured · gpu-node-05 &lt;-&gt; gpu-node-06 on fabric 1 with good partners" in text
    )
    loc = text[
        text.index('<section id="localisation">') : text.index("</section>", text.index('id="localisation"'))
    ]
    assert ('<span class="what">gpu-node-05 ↔ gpu-node-06</span><span class="note">slow on fabric 1</span>\n'
            '<div class="why"><span><b>fabric</b> Fabric 1</span><span><b>probes</b> ib_write_bw</span>'
            '<span><b>partners</b> gpu-node-05, gpu-node-06</span></div>') in loc
    assert (
        '<li data-kind="suspect"><span class="pill st-fail">suspect</span><span class="what">gpu-node-02</'
        'span>'
        in loc
    )
    assert "&lt;b&gt;one&lt;/b&gt; failing pair" in loc and "<b>one</b>" not in loc


def test_heat_colour_scale():
    th = {"floor": 320.0}
    assert heat_colour(None, th, None) == HEAT_MISSING
    assert heat_colour(None, th, "error") == HEAT_ERROR
    assert heat_colour(320.0, th, "pass") == "#c7e9c0"
    assert heat_colour(416.0, th, "pass") == "#238b45"   # +30 %
    assert heat_colour(160.0, th, "fail") == "#cb181d"   # half the floor
    assert heat_colour(2.1, {"ceiling": 4.2}, "pass") == "#238b45"  # latency: lower is better
    assert heat_colour(8.4, {"ceiling": 4.2}, "fail") == "#cb181d"
    below, above = heat_colour(300.0, th, "fail"), heat_colour(330.0, th, "pass")
    assert below != above and int(below[1:3], 16) > int(below[3:5], 16)  # reddish below, greenish above
    assert int(above[3:5], 16) > int(above[1:3], 16)


def test_html_matrix_bars_and_sections(written):
    _cert, paths, _ = written
    text = paths["html"].read_text()
    # node x check: gpu.count on gpu-node-03 is a failing cell showing expected/observed
    row = re.search(r'<tr><th class="check">gpu\.count</th>(.*?)</tr>', text, re.S).group(1)
    cells = re.findall(r'<td class="st-([a-z]+)"', row)
    assert cells == ["pass", "pass", "fail", "pass", "pass", "pass", "pass", "unreachable"]
    assert '<div class="eo">expected 8, observed 7</div>' in row
    assert "pass 2/2" in text  # two HCAs aggregated into one cell
    # per-node bars: 7 nodes x 2 HCAs of loopback bandwidth, 7 NCCL 1-node values, a threshold line each
    charts = re.findall(r'<div class="barchart"><h3>([^<]+) .*?</svg>', text, re.S)
    assert charts == ["perf.ib_loopback", "nccl.allreduce_1node"]
    bars = re.findall(r'<g class="bar" data-status="([a-z]+)">', text)
    assert len(bars) == 21 and bars.count("fail") == 1
    assert text.count('class="threshold"') == 2
    assert "floor 380 Gb/s" in text and "floor 460 GB/s" in text
    # localisation and evidence
    assert re.search(
        r"bad link</span><span class=\"what\">gpu-node-05 ↔ gpu-node-06 \(fabric 1\)</span>", text
    )
    assert text.count('<details class="ev"') == 7 * 13 + 3  # 13 findings on 7 nodes; 3 links did not pass
    assert 'GPU 6: NVIDIA H100 80GB HBM3' in text
    assert '<div class="verdict fail" id="verdict">FAIL</div>' in text


def test_html_without_links_or_values_still_renders():
    cert = sample_certificate()
    cert["links"], cert["localisation"], cert["thresholds"] = [], [], {}
    for node in cert["nodes"].values():
        for f in node["findings"]:
            f.pop("value", None)
            f.pop("unit", None)
    text = render_html(cert)
    assert "No pairwise link measurements" in text and "No per-node measurements" in text
    assert "Nothing localised" in text and "unsigned" in text


# ---- the rendered page -------------------------------------------------------------------------

def read_png(path: Path) -> tuple[int, int, list[list[tuple[int, int, int]]]]:
    """A small PNG decoder (8-bit RGB/RGBA, not interlaced: what Chromium writes) -> rows of RGB."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = bpp = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, ctype, _c, _f, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    rows = []
    i = 0
    for _ in range(height):
        ftype, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if ftype == 1:
                line[x] = (line[x] + a) & 0xFF
            elif ftype == 2:
                line[x] = (line[x] + b) & 0xFF
            elif ftype == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, bpp)])
        prev = line
    return width, height, rows


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def screenshot(browser: str, html: Path, tmp_path: Path, size: tuple[int, int] = (1400, 1000)) -> Path:
    """Open ``html`` in headless Chromium (offline: nothing to fetch); the screenshot's path."""
    png = tmp_path / "shot.png"
    subprocess.run(
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
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={png}",
            f"--window-size={size[0]},{size[1]}",
            html.resolve().as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert png.is_file(), "chromium wrote no screenshot"
    return png


def cell_fills(cert: dict) -> set[str]:
    """The fills the report paints its pair cells in: each measurement's colour against its threshold,
    and the grey of a channel a pair did not measure in a round."""
    fills = {HEAT_MISSING}
    for link in cert.get("links") or []:
        th = threshold_for(cert, str(link.get("threshold") or link.get("probe")))
        fills.add(heat_colour(link.get("value"), th, link.get("status")))
    return fills


def screenshot_heatmap(
    browser: str, cert: dict, html: Path, tmp_path: Path, size: tuple[int, int] = (1400, 1000)
):
    """Open ``html`` in headless Chromium; return the screenshot's size, pixels and the pixels painted
    in the pair cells' fills (the name is older than the per-round pair matrix: tests/certify uses it)."""
    width, height, rows = read_png(screenshot(browser, html, tmp_path, size))
    assert (width, height) == size
    rgb = {tuple(int(f[i:i + 2], 16) for i in (1, 3, 5)) for f in cell_fills(cert)}
    hits = [(x, y) for y in range(height) for x, px in enumerate(rows[y]) if px in rgb]
    return width, height, rows, hits


@pytest.mark.slow
def test_screenshot_renders_the_pair_matrix(written, tmp_path):
    """The first screen shows round 1's pair cells: the slow link's red, the errored pair's grey, the
    grey of the pairs iperf3 did not measure, greens."""
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    cert, paths, _ = written
    width, height, rows, hits = screenshot_heatmap(browser, cert, paths["html"], tmp_path, (1400, 1400))
    assert len(hits) > 20_000, "pair cells are not on the first screen"
    x0, x1 = min(x for x, _ in hits), max(x for x, _ in hits)
    y0, y1 = min(y for _, y in hits), max(y for _, y in hits)
    assert x1 - x0 > 300 and y1 - y0 > 250, (x0, y0, x1, y1)
    painted = {rows[y][x] for x, y in hits}
    fail_fill = tuple(int(heat_colour(212.4, {"floor": 320.0}, "fail")[i:i + 2], 16) for i in (1, 3, 5))
    missing = tuple(int(HEAT_MISSING[i:i + 2], 16) for i in (1, 3, 5))
    error = tuple(int(HEAT_ERROR[i:i + 2], 16) for i in (1, 3, 5))
    # the slow link, iperf3's unmeasured pairs, the errored pair
    assert {fail_fill, missing, error} <= painted
    assert len(painted) >= 5  # several greens besides


def test_new_probes_show_up_with_the_thresholds_certify_records(tmp_path):
    """certify keys thresholds by the profile's names (ib_write_lat_p99); links and findings name the
    probe. Latency links are held to the ceiling, node probes are testcases like any check."""
    cert = sample_certificate()
    cert["thresholds"] = {
        "ib_write_lat_p99": {"floor": None, "ceiling": 2.0, "unit": "usec", "source": "lab"},
        "ib_write_bw_pair": {"floor": 320.0, "ceiling": None, "unit": "gbit_per_s", "source": "seed"},
    }
    a, b = NODES[0], NODES[1]
    cert["links"] += [{"a": a, "b": b, "fabric": 0, "probe": "ib_write_lat", "value": 1.07, "unit": "usec",
                       "status": "pass", "round": 1},
                      {"a": a, "b": b, "fabric": 0, "probe": "ib_write_lat", "value": 3.45, "unit": "usec",
                       "status": "fail", "round": 1}]
    cert["nodes"][a]["findings"] += [
        {
            "check": "probe.dcgmi_diag",
            "status": "fail",
            "subject": "GPU Memory",
            "expected": "every test passes",
            "observed": "fail on GPU 3",
            "evidence": "",
        },
        {
            "check": "probe.gpu_util_under_load",
            "status": "pass",
            "subject": "GPU0",
            "expected": ">= 70 percent",
            "observed": "100.0%",
            "evidence": "",
            "value": 100.0,
            "unit": "percent",
        },
    ]
    assert threshold_for(cert, "ib_write_lat")["ceiling"] == 2.0
    key, _ = cc.load_or_create_key(cc.init_key(tmp_path / "state"), tmp_path / "state")
    paths = write_reports(cc.sign(cert, key), tmp_path / "out")
    html_text = paths["html"].read_text()
    assert 'data-probe="ib_write_lat"' in html_text and "ceiling 2 µs" in html_text
    assert (
        f"{a} ↔ {b} · Fabric 0 · ib_write_lat (RDMA write latency) · round 1: 3.45 µs, above the ceiling of "
        "2 µs"
        in html_text
    )
    # the worst of the pair's two latency results is the one its cell shows: the highest
    assert re.search(r'data-status="fail" style="[^"]*" title="[^"]*ib_write_lat[^"]*">3.45</td>', html_text)
    junit = paths["junit"].read_text()
    assert 'classname="link.fabric0.ib_write_lat"' in junit and "probe.dcgmi_diag" in junit
    assert "probe.gpu_util_under_load" in junit
    md = paths["summary"].read_text()
    assert "| 0 | ib_write_lat |" in md


def test_certify_console_output_states_probe_timing(capsys, tmp_path):
    from clustercert.report.terminal import print_certify

    cert = sample_certificate()
    cert["timing"] = {
        "validate_s": 1.4,
        "probe_wall_s": 21.3,
        "probe_tool_s": 20.1,
        "control_overhead_s": 1.2,
        "control_overhead_pct": 5.6,
        "node_probes": {"wall_s": 9.0, "tool_s": 8.7},
        "rounds": [],
    }
    print_certify(cert, tmp_path, "r1", 21.3)
    assert (
        "probes: 21.3 s wall, 20.1 s in the tools, control overhead 1.2 s (5.6%)" in capsys.readouterr().out
    )
    cert.pop("timing")
    print_certify(cert, tmp_path, "r1", 21.3)  # certificates written before the timing object
    assert "control overhead" not in capsys.readouterr().out


def test_failing_links_and_slurm_actions_are_shown_with_their_evidence():
    cert = sample_certificate()
    err = next(lk for lk in cert["links"] if lk["status"] == "error")
    err.update(
        subject="gpu-node-02+gpu-node-07, 16 GPUs",
        expected=">= 80 gbyte_per_s (lab)",
        observed="timed out after 22 s: all_reduce_perf",
        evidence="launched with mpirun over ssh: Slurm cannot start a step now (gpu-node-07: IDLE+DRAIN)\n"
                 "<rank 3> hung",
    )
    cert["slurm"] = [
        {
            "node": "gpu-node-03",
            "slurm_node": "gn03",
            "action": "drain",
            "reason": "clustercert: gpu.count",
            "ok": True,
            "detail": "was IDLE; scontrol on gpu-node-01",
        },
        {
            "node": "gpu-node-04",
            "slurm_node": "gn04",
            "action": "resume",
            "reason": "clustercert: ib.bond",
            "ok": False,
            "detail": "scontrol update on gpu-node-01 failed: Invalid node state specified",
        },
    ]
    page = render_html(cert)
    section = page[page.index('<section id="link-evidence">'):]
    assert "timed out after 22 s: all_reduce_perf" in section and "&lt;rank 3&gt; hung" in section
    assert "gpu-node-07: IDLE+DRAIN" in section
    slurm = page[
        page.index('<section id="slurm">') : page.index("</section>", page.index('<section id="slurm">'))
    ]
    assert (
        "clustercert: gpu.count" in slurm and "not done" in slurm and "Invalid node state specified" in slurm
    )
    md = render_summary(cert)
    assert (
        f"- {err['probe']} gpu-node-02 → gpu-node-07 (round {err['round']}) error: timed out after 22 s: "
        "all_reduce_perf"
        in md
    )
    assert (
        "## Slurm (--drain slurm)\n\n"
        "- gpu-node-03 (gn03): drain (clustercert: gpu.count): was IDLE; scontrol on gpu-node-01\n"
        in md
    )
    assert "- gpu-node-04 (gn04): resume — **not done**: scontrol update on gpu-node-01 failed" in md
    # a passing cluster without Slurm has neither section
    clean = sample_certificate()
    clean["links"] = [lk for lk in clean["links"] if lk["status"] == "pass"]
    assert 'id="link-evidence"' not in render_html(clean) and 'id="slurm"' not in render_html(clean)
