"""benchmarks/corpus.py: manifest mapping, counting, exit status (run on a temporary mini corpus)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from clustercert.parsers import REGISTRY, ParserSpec

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
HEADER = "file\ttool\tcommand\tsource\thardware/version\tstatus\tnotes\tuse\n"


@pytest.fixture(scope="module")
def corpus():
    spec = importlib.util.spec_from_file_location("corpus", ROOT / "benchmarks" / "corpus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_corpus(tmp_path: Path, rows: list[tuple[str, str, str, str]]) -> Path:
    for file, *_ in rows:
        if file.endswith("/"):
            continue
        dest = tmp_path / file
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(FIXTURES / file, dest)
    lines = [HEADER] + [f"{f}\t{t}\t{c}\tsrc\thw\t{s}\tnote\tcopy-ok\n" for f, t, c, s in rows]
    (tmp_path / "MANIFEST.tsv").write_text("".join(lines))
    return tmp_path


def test_kind_mapping(corpus):
    assert corpus.kinds_for("nvidia-smi", "nvidia-smi -q -x", "a.xml") == ["nvidia-smi-xml"]
    assert corpus.kinds_for("nvidia-smi", "nvidia-smi --query-gpu=name --format=csv", "a.csv") == [
        "nvidia-smi-csv"
    ]
    assert corpus.kinds_for("nvidia-smi", "nvidia-smi topo -m", "a.txt") == ["nvidia-smi-topo"]
    assert corpus.kinds_for("nvidia-smi", "nvidia-smi nvlink -s", "a.txt") == ["nvidia-smi-nvlink"]
    assert corpus.kinds_for("nvidia-smi", "nvidia-smi -q", "a.txt") == ["nvidia-smi-q"]
    assert corpus.kinds_for("nvidia-smi", "nvidia-smi", "a.txt") == ["nvidia-smi-table"]
    assert corpus.kinds_for("iperf3", "iperf3 -c x -J", "a.json") == ["iperf3-json"]
    assert corpus.kinds_for("iperf3", "iperf3 -s", "a.txt") == ["iperf3"]
    assert corpus.kinds_for("ofed_info", "/etc/init.d/openibd restart", "a.txt") == []
    assert corpus.kinds_for("sysfs-bonding", "ttar", "x.ttar") == ["bonding-sysfs"]
    assert corpus.kinds_for("mlxlink", "mlxlink -d x", "a.txt") == []


def test_run_counts_and_exit_zero(corpus, tmp_path, capsys):
    root = make_corpus(tmp_path, [
        ("ibstat/ibstat-9x-mt4126-a100-hdr-all-active.txt", "ibstat", "ibstat", "healthy"),
        ("perftest/ib_write_bw-bidir-use_cuda-completion-error-status4-syndrom-0x51.txt", "perftest",
         "ib_write_bw -b", "failure"),
        ("sysfs/node_exporter-sys-class-infiniband.ttar", "sysfs-infiniband", "ttar", "healthy"),
        ("ibstatus/ibstatus-8x-a100-hdr-all-active.txt", "mlxlink", "mlxlink", "healthy"),
    ])
    assert corpus.main([str(root)]) == 0
    out = capsys.readouterr().out
    assert "ibstat                           1         0      0" in out
    assert "sysfs-infiniband                 1         0      0" in out
    assert "skipped (no parser for this tool): mlxlink (1)" in out


def test_healthy_parse_error_and_crash_exit_one(corpus, tmp_path, capsys, monkeypatch):
    def boom(text: str) -> dict:
        raise ZeroDivisionError("boom in parser")

    monkeypatch.setitem(REGISTRY, "ibdev2netdev", ParserSpec("ibdev2netdev", "crashes", boom))
    root = make_corpus(tmp_path, [
        # ibstatus text labelled as ibstat output: ParseError on a healthy sample
        ("ibstatus/ibstatus-8x-a100-hdr-all-active.txt", "ibstat", "ibstat", "healthy"),
        ("ibdev2netdev/ibdev2netdev-mlx5-roce-ens64np1.txt", "ibdev2netdev", "ibdev2netdev", "healthy"),
    ])
    assert corpus.main([str(root)]) == 1
    out = capsys.readouterr().out
    assert "ZeroDivisionError: boom in parser" in out
    assert "healthy samples that did not parse:" in out
    assert "ibstatus/ibstatus-8x-a100-hdr-all-active.txt [ibstat] (healthy): ibstat:" in out


def test_kind_mapping_issue21_kinds(corpus):
    assert corpus.kinds_for("nvidia-smi", "nvidia-smi nvlink -e", "a.txt") == ["nvidia-smi-nvlink-errors"]
    assert corpus.kinds_for("nvidia-smi", "nvidia-smi nvlink --errorcounters -i 0", "a.txt") == [
        "nvidia-smi-nvlink-errors"
    ]
    assert corpus.kinds_for("nvidia-smi", "nvidia-smi nvlink -s", "a.txt") == ["nvidia-smi-nvlink"]
    assert corpus.kinds_for("nvidia-smi", "nvidia-smi topo -p2p r", "a.txt") == ["nvidia-smi-topo-p2p"]
    assert corpus.kinds_for("nvidia-smi", "nvidia-smi topo -mp", "a.txt") == ["nvidia-smi-topo"]
    assert corpus.kinds_for("dcgmi", "dcgmi diag -r 2 -j", "a.json") == ["dcgmi-diag-json"]
    assert corpus.kinds_for("dcgmi", "dcgmi nvlink -e -g 0", "a.txt") == ["dcgmi-nvlink"]
    assert corpus.kinds_for("dcgmi", "dcgmi nvlink --link-status", "a.txt") == ["dcgmi-nvlink"]
    assert corpus.kinds_for("perftest", "ib_write_bw --out_json", "a.json") == ["perftest-json"]
    assert corpus.kinds_for("perftest", "ib_write_bw -a", "a.txt") == ["perftest"]


def test_project_fixtures_have_a_manifest_and_parse(corpus, capsys):
    """tests/fixtures carries its own MANIFEST.tsv: every fixture file has a row, the corpus benchmark
    runs over it with no crash and every healthy sample parsed."""
    import csv

    with (FIXTURES / "MANIFEST.tsv").open(newline="") as fh:
        listed = {r["file"] for r in csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)}
    present = {str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*") if p.is_file()} - {
        "SOURCES.md",
        "MANIFEST.tsv",
    }
    assert present == listed
    assert corpus.main([str(FIXTURES)]) == 0
    out = capsys.readouterr().out
    assert "crashes:" not in out and "healthy samples that did not parse" not in out
