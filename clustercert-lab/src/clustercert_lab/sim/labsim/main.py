"""Dispatch ``labsim TOOL ARGS`` to the simulated tool."""

from __future__ import annotations

import importlib
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


# tool -> (its module, its function); each takes the arguments, those marked hw the node's hardware first
_TOOLS = {
    "nvidia-smi": ("nvsmi", "main"),
    "ibv_devinfo": ("ibtools", "ibv_devinfo", "hw"),
    "ibdev2netdev": ("ibtools", "ibdev2netdev", "hw"),
    "nvbandwidth": ("nvbw", "nvbandwidth"),
    "dcgmi": ("nvbw", "dcgmi"),
    "nvidia-ctk": ("system", "nvidia_ctk"),
    "nvidia-persistenced": ("system", "persistenced"),
    "nv-hostengine": ("system", "hostengine"),
    "nv-fabricmanager": ("system", "fabricmanager"),
    "lsmod": ("system", "lsmod"),
    "modload": ("system", "modload"),
    "modunload": ("system", "modunload"),
    "dmesg": ("system", "dmesg"),
    "lspci": ("pci", "lspci"),
    "dmidecode": ("pci", "dmidecode"),
    "numactl": ("numa", "numactl"),
    "agent": ("agent", "main"),
    "fault": ("faultops", "main"),
}


def _run(tool: str, args: list[str]) -> int:
    # each call imports only its own tool's module: every simulated tool starts a Python, on CPUs every
    # lab node shares (start-up measured: README, Benchmarks)
    if tool in _TOOLS:
        mod, func, *hw = _TOOLS[tool]
        run = getattr(importlib.import_module(f".{mod}", __package__), func)
        return run(common.load_hw(), args) if hw else run(args)
    if tool.startswith("ib_") and (tool.endswith("_bw") or tool.endswith("_lat")):
        from . import perftest
        if tool not in perftest.TITLES:
            common.err(f"{tool}: not simulated ({common.BANNER})\n")
            return 1
        return perftest.main(tool, args)
    if tool.endswith("_perf"):
        from . import nccl
        return nccl.main(tool, args)
    common.err(f"labsim: unknown tool {tool!r} ({common.BANNER})\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
