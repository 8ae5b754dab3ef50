"""Run every evidence parser over a fixture corpus and report what parsed.

Usage: python benchmarks/corpus.py DIR [--kinds KIND,KIND...] [--verbose]

DIR is the shared corpus (/work/shared/fixtures) or the project's own tests/fixtures, which carries its
own MANIFEST.tsv (rows for every fixture file, same columns). DIR holds MANIFEST.tsv (columns: file tool
command source hardware/version status notes use) and the samples it names. Each sample is mapped to parser
kind(s) from its tool and command columns, parsed, and counted per tool as parsed / ParseError / crash (any
other exception, reported with the traceback's last line). Tools without a parser are listed as skipped; a
kind that is not registered yet is reported as "no parser". Exit status 1 when any sample crashed or any
``healthy`` sample did not parse.

Sysfs samples that are directory trees (``file`` ending in '/') or ``.ttar`` archives are converted to
the ``PATH:VALUE`` dump (``grep -r . DIR``) that the sysfs parsers read.
"""

from __future__ import annotations

import argparse
import csv
import sys
import traceback
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from clustercert.parsers import REGISTRY, ParseError  # noqa: E402
from clustercert.parsers._text import ttar_to_grep_dump  # noqa: E402

# Tools for which no parser exists (by design, for now).
SKIPPED_TOOLS = {
    "bandwidthTest", "p2pBandwidthLatencyTest", "mlxlink", "iblinkinfo", "ibnetdiscover", "nccl-debug",
    "fabricmanager", "nv-fabricmanager", "journalctl", "depmod",
}


def kinds_for(tool: str, command: str, file: str) -> list[str]:
    """Map a MANIFEST row to the parser kind(s) that should read it ([] = no parser for this tool)."""
    cmd = " ".join(command.split())
    is_json = file.endswith(".json")
    if tool == "nvidia-smi":
        if "-x" in cmd.split() or file.endswith(".xml"):
            return ["nvidia-smi-xml"]
        if "--query-" in cmd or file.endswith(".csv"):
            return ["nvidia-smi-csv"]
        if " topo" in f" {cmd}":
            return ["nvidia-smi-topo-p2p"] if "-p2p" in cmd.split() else ["nvidia-smi-topo"]
        if "nvlink" in cmd:
            # `nvlink -e` prints error counters, not link status
            errors = bool({"-e", "--errorcounters"} & set(cmd.split()))
            return ["nvidia-smi-nvlink-errors"] if errors else ["nvidia-smi-nvlink"]
        if "-q" in cmd.split():
            return ["nvidia-smi-q"]
        if "-L" in cmd.split() or "--list-gpus" in cmd:
            return ["nvidia-smi-list"]
        return ["nvidia-smi-table"]
    if tool in ("dmesg", "syslog"):
        return ["xid"]
    if tool == "nvbandwidth":
        return ["nvbandwidth-json" if is_json or " -j" in cmd else "nvbandwidth"]
    if tool == "dcgmi":
        if " nvlink" in f" {cmd}":
            return ["dcgmi-nvlink"]
        if "diag" not in cmd:
            return []
        return ["dcgmi-diag-json" if is_json or " -j" in cmd else "dcgmi-diag"]
    if tool == "perftest" and (is_json or "--out_json" in cmd):
        return ["perftest-json"]
    if tool == "nvidia-container-cli":
        return ["nvidia-container-cli-info"] if "info" in cmd else []
    if tool == "docker":
        return ["docker-info"] if "info" in cmd else []
    if tool == "systemctl":
        return ["systemctl-status"]
    if tool == "ofed_info":
        return ["ofed-info"] if cmd.startswith("ofed_info") else []
    if tool == "iperf3":
        return ["iperf3-json" if is_json or " -J" in cmd else "iperf3"]
    simple = {
        "lspci": "lspci",
        "nvidia-ctk": "nvidia-ctk",
        "lsmod": "lsmod",
        "modinfo": "modinfo",
        "ibstat": "ibstat",
        "ibstatus": "ibstatus",
        "ibv_devinfo": "ibv-devinfo",
        "ibdev2netdev": "ibdev2netdev",
        "perfquery": "perfquery",
        "perftest": "perftest",
        "nccl-tests": "nccl-tests",
        "bonding": "bonding",
        "rdma": "rdma-link",
        "sysfs-infiniband": "sysfs-infiniband",
        "sysfs-bonding": "bonding-sysfs",
        "nccl-info": "nccl-info-transport",
    }
    return [simple[tool]] if tool in simple else []


def load_sample(root: Path, file: str) -> str:
    path = root / file
    if path.is_dir():
        out = []
        for p in sorted(path.rglob("*")):
            if p.is_file() and not p.is_symlink():
                rel = p.relative_to(path)
                for line in p.read_text(errors="replace").splitlines():
                    if line.strip():
                        out.append(f"{rel}:{line}")
        return "\n".join(out) + "\n"
    text = path.read_text(errors="replace")
    if file.endswith(".ttar"):
        return ttar_to_grep_dump(text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--kinds", help="only samples mapped to these kinds (comma-separated)")
    ap.add_argument("--verbose", "-v", action="store_true", help="print every ParseError")
    args = ap.parse_args(argv)
    only = set(args.kinds.split(",")) if args.kinds else None

    manifest = args.dir / "MANIFEST.tsv"
    with manifest.open(newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))

    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    skipped: dict[str, int] = defaultdict(int)
    no_parser: dict[str, int] = defaultdict(int)
    crashes: list[str] = []
    healthy_failed: list[str] = []
    parse_errors: list[str] = []

    for row in rows:
        file, tool, command, status = row["file"], row["tool"], row["command"], row["status"]
        kinds = kinds_for(tool, command, file)
        if only is not None:
            kinds = [k for k in kinds if k in only]
            if not kinds:
                continue
        if not kinds:
            skipped[tool] += 1
            continue
        try:
            text = load_sample(args.dir, file)
        except OSError as exc:
            crashes.append(f"{file}: cannot read: {exc}")
            counts[tool]["crash"] += 1
            continue
        for kind in kinds:
            if kind not in REGISTRY:
                no_parser[kind] += 1
                continue
            label = f"{file} [{kind}] ({status})"
            try:
                REGISTRY[kind].func(text)
                counts[tool]["parsed"] += 1
            except ParseError as exc:
                counts[tool]["parse_error"] += 1
                parse_errors.append(f"{label}: {exc}")
                if status == "healthy":
                    healthy_failed.append(f"{label}: {exc}")
            except Exception:  # noqa: BLE001 - the point is to catch parser crashes
                counts[tool]["crash"] += 1
                last = traceback.format_exc().strip().splitlines()[-1]
                crashes.append(f"{label}: {last}")
                if status == "healthy":
                    healthy_failed.append(f"{label}: crash: {last}")

    print(f"{'tool':<26} {'parsed':>7} {'ParseErr':>9} {'crash':>6}")
    for tool in sorted(counts):
        c = counts[tool]
        print(f"{tool:<26} {c['parsed']:>7} {c['parse_error']:>9} {c['crash']:>6}")
    if skipped:
        print(
            "\nskipped (no parser for this tool): "
            + ", ".join(f"{t} ({n})" for t, n in sorted(skipped.items()))
        )
    if no_parser:
        print(
            "no parser (kind not registered yet): "
            + ", ".join(f"{k} ({n})" for k, n in sorted(no_parser.items()))
        )
    if args.verbose and parse_errors:
        print("\nParseError:")
        for line in parse_errors:
            print(f"  {line}")
    if crashes:
        print("\ncrashes:")
        for line in crashes:
            print(f"  {line}")
    if healthy_failed:
        print("\nhealthy samples that did not parse:")
        for line in healthy_failed:
            print(f"  {line}")
    return 1 if crashes or healthy_failed else 0


if __name__ == "__main__":
    sys.exit(main())
