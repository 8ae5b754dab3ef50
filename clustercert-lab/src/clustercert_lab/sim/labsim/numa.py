"""Simulated numactl: the lab's NUMA nodes are the simulated hardware's (hw.json: the GPUs' and HCAs'
NUMA nodes), not the host kernel's (a lab host has fewer). ``numactl --cpunodebind=N --membind=N CMD``
checks N against them, as numactl checks its arguments against the machine, then runs CMD without
binding it (the lab's processes all share the host's CPUs); ``numactl -H`` prints the simulated nodes.
"""

from __future__ import annotations

import os

from . import common

USAGE = ("usage: numactl [--all | -a] [--interleave= | -i <nodes>] [--preferred= | -p <node>]\n"
         "               [--physcpubind= | -C <cpus>] [--cpunodebind= | -N <nodes>]\n"
         "               [--membind= | -m <nodes>] [--localalloc | -l] command args ...\n"
         "       numactl [--show | -s]\n       numactl [--hardware | -H]\n")
TAKES = {"--cpunodebind": "N", "-N": "N", "--membind": "m", "-m": "m", "--preferred": "p", "-p": "p",
         "--interleave": "i", "-i": "i", "--physcpubind": "C", "-C": "C"}


def _nodes(spec: str) -> list[int] | None:
    out = []
    for part in spec.replace("+", "").split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return None
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def _shown(a: str, have: list[int]) -> str:
    """What --hardware or --show prints."""
    if a in ("-H", "--hardware"):
        lines = [f"available: {len(have)} nodes ({have[0]}-{have[-1]})"]
        for n in have:
            lines += [f"node {n} cpus: (simulated)", f"node {n} size: 1031800 MB"]
        return "\n".join(lines) + "\n"
    nodes = " ".join(map(str, have))
    return f"policy: default\nnodebind: {nodes}\nmembind: {nodes}\n"


def _take_arg(argv: list[str], i: int, key: str, val: str | None, have: list[int]) -> int:
    """The option ``key`` at ``argv[i]`` with its value (``val``, or the next argument), checked: a node
    argument must name nodes the node has. The index after it; -1 where it is bad (said, with the usage)."""
    if val is None:
        if i + 1 >= len(argv):
            common.err(USAGE)
            return -1
        val, i = argv[i + 1], i + 1
    if TAKES[key] in "Nmpi":
        nodes = _nodes(val)
        bad = [n for n in nodes or [-1] if n not in have]
        if nodes is None or bad:
            common.err(f"libnuma: Warning: node argument {bad[0] if nodes else val} is out of range\n\n"
                       f"<{val}> is invalid\n" + USAGE)
            return -1
    return i + 1


def numactl(argv: list[str]) -> int:
    hw = common.load_hw()
    have = sorted({g.get("numa_node", 0) for g in hw.get("gpus", [])}
                  | {h.get("numa_node", 0) for h in hw.get("hcas", [])}) or [0]
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-H", "--hardware", "-s", "--show"):
            common.out(_shown(a, have))
            return 0
        key, val = a, None
        if a.startswith("--") and "=" in a:
            key, val = a.split("=", 1)
        if key in TAKES:
            i = _take_arg(argv, i, key, val, have)
            if i < 0:
                return 1
            continue
        if a in ("-l", "--localalloc", "-a", "--all"):
            i += 1
            continue
        if a == "--":
            i += 1
        break
    cmd = argv[i:]
    if not cmd:
        common.err(USAGE)
        return 1
    try:
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        common.err(f"numactl: execution of `{cmd[0]}': {exc.strerror}\n")
        return 1
    return 0
