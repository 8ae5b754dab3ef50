"""Inventory loading at fleet size: `clustercert inventory -i DIR --format json` on generated inventories.

Usage: python benchmarks/inventory.py [--hosts 1000,10000] [--repeat 3] [--form yaml|ini]

Each size is a directory inventory like a site's: hosts.yml (or an INI ``hosts`` file) with every host's
ansible_host and clustercert_rack (32 hosts a rack), the hosts in one group per rack under ``gpu_nodes``,
group_vars/all.yml with clustercert_profile, and host_vars/ for one host in 100. The verb runs in its own
process (imports included); per size the best of --repeat runs is printed, wall and CPU (user + system of
the child), then each size's CPU as a ratio against the smallest: linear loading is a ratio near the host
ratio, quadratic loading its square.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def write_inventory(root: Path, hosts: int, form: str = "yaml") -> Path:
    d = root / f"inv-{hosts}-{form}"
    (d / "group_vars").mkdir(parents=True)
    (d / "host_vars").mkdir()
    racks: dict[str, list[str]] = {}
    for i in range(hosts):
        racks.setdefault(f"rack{i // 32:04d}", []).append(f"gpu{i:05d}")
    addr = {f"gpu{i:05d}": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(hosts)}
    if form == "yaml":
        lines = ["all:", "  children:", "    gpu_nodes:", "      children:"]
        for rack, names in racks.items():
            lines += [f"        {rack}:", "          hosts:"]
            lines += [
                f"            {n}: {{ansible_host: {addr[n]}, clustercert_rack: {rack}}}" for n in names
            ]
        (d / "hosts.yml").write_text("\n".join(lines) + "\n")
    else:
        lines = []
        for rack, names in racks.items():
            lines.append(f"[{rack}]")
            lines += [f"{n} ansible_host={addr[n]} clustercert_rack={rack}" for n in names]
            lines.append("")
        lines.append("[gpu_nodes:children]")
        lines += list(racks)
        (d / "hosts").write_text("\n".join(lines) + "\n")
    (d / "group_vars" / "all.yml").write_text("clustercert_profile: lab\nansible_user: root\n")
    for i in range(0, hosts, 100):
        (d / "host_vars" / f"gpu{i:05d}.yml").write_text("clustercert_command_timeout_s: 60\n")
    return d


def run_once(inv: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) of one `clustercert inventory` run."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "CLUSTERCERT_HOME": str(inv.parent / "home")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "clustercert", "inventory", "-i", str(inv), "--format", "json"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"clustercert inventory -i {inv} exited {proc.returncode}: {proc.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="1000,10000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--form", choices=("yaml", "ini"), default="yaml")
    args = ap.parse_args(argv)
    sizes = [int(n) for n in args.hosts.split(",")]
    results: dict[int, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            inv = write_inventory(Path(tmp), n, args.form)
            runs = [run_once(inv) for _ in range(args.repeat)]
            results[n] = (min(r[0] for r in runs), min(r[1] for r in runs))
            print(f"{n:>6} hosts ({args.form}): wall {results[n][0]:.2f} s, CPU {results[n][1]:.2f} s "
                  f"(best of {args.repeat})", flush=True)
    base = sizes[0]
    for n in sizes[1:]:
        print(f"{n} / {base} hosts: CPU ratio {results[n][1] / results[base][1]:.2f} "
              f"(host ratio {n / base:.0f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
