"""Hooks the lab core calls to put the hardware simulator into the image and into each node.

* ``prepare_image(rootfs)`` - once per image build: installs the agent's systemd unit and the
  lab's replacements of ``dmesg``, ``lsmod``, ``lspci``, ``dmidecode`` and ``numactl`` (dpkg diversions,
  the way a site replaces a distribution file) because a container has no kernel ring buffer of its own,
  this kernel has no loadable modules, the node's PCI devices and firmware tables are simulated and the
  simulated hardware's NUMA nodes are not the host's.
* ``prepare_node(sim_dir, hw)`` - when a node's directory is created: copies the node-side
  simulator (``labsim``, stdlib only) and writes ``hw.json`` and a README saying what is simulated.
  The lab bind-mounts ``sim_dir`` at /var/lib/clustercert-lab inside the node.
"""

from __future__ import annotations

import compileall
import shutil
import subprocess
import sys
from pathlib import Path

from clustercert_lab import hardware

NODE_SIM_DIR = "/var/lib/clustercert-lab"
LABSIM = f"{NODE_SIM_DIR}/labsim"
AGENT_UNIT = "clustercert-lab-agent.service"
SOURCE = Path(__file__).resolve().parent / "labsim"

AGENT_UNIT_TEXT = f"""[Unit]
Description=clustercert lab hardware simulator (simulated GPUs, HCAs, bonding; not real hardware)
Documentation=file://{NODE_SIM_DIR}/README
After=local-fs.target
Before=nvidia-persistenced.service nvidia-fabricmanager.service
ConditionPathExists={NODE_SIM_DIR}/hw.json

[Service]
Type=simple
ExecStartPre=/usr/bin/python3 {LABSIM} agent --boot
ExecStart=/usr/bin/python3 {LABSIM} agent
Restart=always
RestartSec=2

[Install]
WantedBy=multi-user.target
"""

README = """clustercert lab simulation
==========================

This node is a clustercert lab node. Its operating system, systemd, sshd, apt and network are
real; its hardware is SIMULATED:

* GPUs (nvidia-smi, nvbandwidth, dcgmi, nccl-tests), NVSwitches and the NVIDIA driver's kernel
  modules (lsmod, /sys/module/nvidia*, modprobe via /etc/modprobe.d install directives);
* InfiniBand HCAs (/sys/class/infiniband, read by the real ibstat; ibv_devinfo, ibdev2netdev,
  perftest);
* the bonding driver (bond0 and /sys/class/net/bond0/bonding/*, following systemd-networkd's
  configuration);
* the kernel log (dmesg shows the driver's messages and Xid events);
* the PCI devices (lspci lists the GPUs, NVSwitches and HCAs) and the firmware tables (dmidecode
  prints the system, baseboard and chassis records).

hw.json here is the simulated hardware state; the lab host edits it to inject faults.
The simulated tools come from the lab's apt repository and run {labsim}.
"""


def prepare_image(rootfs: Path) -> None:
    """Install the agent unit and the dmesg/lsmod/lspci/dmidecode replacements into the image at
    ``rootfs``."""
    rootfs = Path(rootfs)
    (rootfs / NODE_SIM_DIR.lstrip("/")).mkdir(parents=True, exist_ok=True)
    unit = rootfs / "etc/systemd/system" / AGENT_UNIT
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text(AGENT_UNIT_TEXT)
    wants = rootfs / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    link = wants / AGENT_UNIT
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(f"/etc/systemd/system/{AGENT_UNIT}")
    # the node's kernel log, module list, PCI devices, firmware tables and NUMA placement come from the
    # simulator
    for pkg_path, tool in (("/bin/dmesg", "dmesg"), ("/bin/lsmod", "lsmod"), ("/sbin/lsmod", "lsmod"),
                           ("/usr/bin/lspci", "lspci"), ("/usr/sbin/dmidecode", "dmidecode"),
                           ("/usr/bin/numactl", "numactl")):
        _divert(rootfs, pkg_path, tool)
    (rootfs / "etc/modules-load.d").mkdir(parents=True, exist_ok=True)
    # the node's clock is the host's kernel clock (no CAP_SYS_TIME in a container): chrony, once a role
    # installs it, runs in measure-only mode against the site's servers instead of refusing to start
    dropin = rootfs / "etc/systemd/system/chrony.service.d/10-clustercert-lab.conf"
    dropin.parent.mkdir(parents=True, exist_ok=True)
    dropin.write_text(CHRONY_DROPIN)


CHRONY_DROPIN = """\
# clustercert lab: nodes share the host's kernel clock and have no CAP_SYS_TIME, so chronyd runs
# with -x: it synchronises to its servers and reports offsets, but never adjusts the clock.
[Unit]
ConditionCapability=

[Service]
ExecStart=
ExecStart=!/usr/sbin/chronyd -x $DAEMON_OPTS
"""


def _divert(rootfs: Path, pkg_path: str, tool: str) -> None:
    listed = subprocess.run(["chroot", str(rootfs), "dpkg-divert", "--list", pkg_path],
                            capture_output=True, text=True, timeout=60)
    if pkg_path not in listed.stdout:
        subprocess.run(["chroot", str(rootfs), "dpkg-divert", "--local", "--rename", "--divert",
                        pkg_path + ".distrib", "--add", pkg_path], check=True, capture_output=True,
                        timeout=60)
    target = rootfs / pkg_path.lstrip("/")
    if target.is_symlink() or target.exists():
        target.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(wrapper(tool, "the node's kernel interface is simulated by the clustercert lab"))
    target.chmod(0o755)


# how a simulated tool starts: isolated (-I: no PYTHON* variables, no user site) and without the site
# module (-S: the simulator is stdlib only), running its entry file itself (not the package through
# runpy): a tenth of each call's start-up, on CPUs every lab node shares
LABSIM_EXEC = f"/usr/bin/python3 -I -S {LABSIM}/__main__.py"


def wrapper(tool: str, note: str, env: dict[str, str] | None = None) -> str:
    """A thin shell wrapper exec'ing the node-side simulator."""
    lines = ["#!/bin/sh", f"# clustercert lab simulation: {note}.", f"# See {NODE_SIM_DIR}/README."]
    for k, v in (env or {}).items():
        lines.append(f"export {k}={v}")
    lines.append(f'exec {LABSIM_EXEC} {tool} "$@"')
    return "\n".join(lines) + "\n"


def _compile(dest: Path) -> None:
    """Byte-compile the simulator where the node can use it: the node sees it read-only, so without
    this every simulated tool call compiles its modules again (most of its start-up, on CPUs every
    node shares). Compiled for this interpreter and for the host's /usr/bin/python3 (a Debian 12 host
    runs the image's Python version); a node whose Python differs compiles in memory, as before."""
    compileall.compile_dir(str(dest), quiet=1)
    system = Path("/usr/bin/python3")
    if system.exists() and system.resolve() != Path(sys.executable).resolve():
        subprocess.run([str(system), "-m", "compileall", "-q", str(dest)], capture_output=True, timeout=60)


def prepare_node(sim_dir: Path, hw: dict) -> None:
    """Copy the node-side simulator into ``sim_dir`` and write the node's hw.json."""
    sim_dir = Path(sim_dir)
    sim_dir.mkdir(parents=True, exist_ok=True)
    dest = sim_dir / "labsim"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(SOURCE, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _compile(dest)
    (sim_dir / "README").write_text(README.format(labsim=LABSIM))
    hardware.save(sim_dir, hw)
