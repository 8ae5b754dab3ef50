"""Dispatch ``labsim TOOL ARGS`` to the simulated tool."""

from __future__ import annotations

import os
import sys

from . import common


def main(argv: list[str]) -> int:
    if not argv:
        common.err(f"usage: labsim TOOL [ARGS...]\n{common.BANNER}\n")
        return 2
    tool = os.path.basename(argv[0])
    args = argv[1:]
    try:
        return _run(tool, args)
    except BrokenPipeError:
        return 0
    except FileNotFoundError as exc:
        if exc.filename and str(exc.filename).endswith("hw.json"):
            common.err(f"{tool}: no simulated hardware here ({exc.filename} missing; {common.BANNER})\n")
            return 1
        raise


def _run(tool: str, args: list[str]) -> int:
    # each call imports only its own tool's module: every simulated tool starts a Python, on CPUs every
    # lab node shares (start-up measured: README, Benchmarks)
    if tool == "nvidia-smi":
        from . import nvsmi
        return nvsmi.main(args)
    if tool == "ibv_devinfo":
        from . import ibtools
        return ibtools.ibv_devinfo(common.load_hw(), args)
    if tool == "ibdev2netdev":
        from . import ibtools
        return ibtools.ibdev2netdev(common.load_hw(), args)
    if tool.startswith("ib_") and (tool.endswith("_bw") or tool.endswith("_lat")):
        from . import perftest
        if tool not in perftest.TITLES:
            common.err(f"{tool}: not simulated ({common.BANNER})\n")
            return 1
        return perftest.main(tool, args)
    if tool.endswith("_perf"):
        from . import nccl
        return nccl.main(tool, args)
    if tool == "nvbandwidth":
        from . import nvbw
        return nvbw.nvbandwidth(args)
    if tool == "dcgmi":
        from . import nvbw
        return nvbw.dcgmi(args)
    if tool == "nvidia-ctk":
        from . import system
        return system.nvidia_ctk(args)
    if tool == "nvidia-persistenced":
        from . import system
        return system.persistenced(args)
    if tool == "nv-hostengine":
        from . import system
        return system.hostengine(args)
    if tool == "nv-fabricmanager":
        from . import system
        return system.fabricmanager(args)
    if tool == "lsmod":
        from . import system
        return system.lsmod(args)
    if tool == "modload":
        from . import system
        return system.modload(args)
    if tool == "modunload":
        from . import system
        return system.modunload(args)
    if tool == "dmesg":
        from . import system
        return system.dmesg(args)
    if tool == "lspci":
        from . import pci
        return pci.lspci(args)
    if tool == "dmidecode":
        from . import pci
        return pci.dmidecode(args)
    if tool == "numactl":
        from . import numa
        return numa.numactl(args)
    if tool == "agent":
        from . import agent
        return agent.main(args)
    if tool == "fault":
        from . import faultops
        return faultops.main(args)
    common.err(f"labsim: unknown tool {tool!r} ({common.BANNER})\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
