"""One lab node: an overlayfs root on the cached image, booted with ``systemd-nspawn -b`` in its own
network namespace and cgroups, kept alive by a small supervisor process.

The supervisor is a generated shell script (``$LAB/nodes/<name>/supervise.sh``, ~1 MB resident, not
a Python interpreter per idle node) run as a daemon (double fork, own session) so it outlives the
CLI that started it. It starts systemd-nspawn in the node's cgroups, calls the short-lived hooks
``python -m clustercert_lab.node prestart|wire|poststop LAB_DIR NAME`` (overlay mount; veths onto
the lab bridges and fabric shaping; final state), and starts nspawn again when it exits with status
133 (a ``reboot`` inside the node), which is what systemd-nspawn@.service does on a systemd host.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from clustercert_lab import network

NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_NAME = "clustercert-lab"
EXIT_REBOOT = 133
SUPERVISOR = "supervise.sh"  # the per-node supervisor script in the node's state dir


# --------------------------------------------------------------------------------------------- utils


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def pid_alive(pid: int | None, marker: str | None = None) -> bool:
    """True when ``pid`` runs (not a zombie) and, if given, its command line contains ``marker``."""
    if not pid:
        return False
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it happens to be our child
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return False
        if marker is not None:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            return marker in cmdline
        return True
    except (OSError, IndexError):
        return False


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return not pid_alive(pid)


def spawn_daemon(argv: list[str], log_path: Path, env: dict | None = None) -> None:
    """Start ``argv`` detached from us (double fork via ``setsid -f``): it survives our exit and
    is reaped by init, never left a zombie of a long-lived caller. The daemon writes its own pid file."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as logf:
        subprocess.run(
            ["setsid", "-f", *argv],
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=logf,
            env=env,
            check=True,
            timeout=30,
        )


def python_env() -> dict:
    """Environment for our own daemons: the same interpreter must import this very package, and the
    clustercert beside it (the lab is a distribution of its own: clustercert-lab/src in a checkout, the
    product's src beside it)."""
    import clustercert

    roots = (Path(__file__).resolve().parents[1], Path(clustercert.__file__).resolve().parents[1])
    src = os.pathsep.join(dict.fromkeys(str(r) for r in roots))
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "HOME")}
    env["PATH"] = env.get("PATH", "") + ":" + ":".join(("/usr/sbin", "/sbin"))
    env["PYTHONPATH"] = src
    for key in ("CLUSTERCERT_LAB_DIR", "CLUSTERCERT_LAB_CACHE"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


def is_mountpoint(path: Path) -> bool:
    target = str(path.resolve())
    try:
        with open("/proc/self/mountinfo") as fh:
            return any(line.split()[4] == target for line in fh)
    except OSError:
        return False


def lab_mounts(lab_dir: Path) -> list[str]:
    prefix = str(lab_dir.resolve()) + "/"
    with open("/proc/self/mountinfo") as fh:
        return [line.split()[4] for line in fh if line.split()[4].startswith(prefix)]


# ------------------------------------------------------------------------------------------- cgroups


def cgroup_dirs(name: str) -> list[Path]:
    """The node's cgroup in every mounted hierarchy (each v1 controller, name=systemd, unified)."""
    dirs = []
    if not CGROUP_ROOT.is_dir():
        return dirs
    for h in sorted(CGROUP_ROOT.iterdir()):
        if h.is_dir() and not h.is_symlink() and (h / "cgroup.procs").exists():
            dirs.append(h / CGROUP_NAME / name)
    if (CGROUP_ROOT / "cgroup.procs").exists() and not dirs:  # pure cgroup2 host
        dirs.append(CGROUP_ROOT / CGROUP_NAME / name)
    return dirs


def _cpuset_init(d: Path) -> None:
    for f in ("cpuset.cpus", "cpuset.mems"):
        target = d / f
        if target.exists() and not target.read_text().strip():
            target.write_text((d.parent / f).read_text().strip() or "0")


def make_cgroups(name: str) -> list[Path]:
    dirs = cgroup_dirs(name)
    for d in dirs:
        for level in (d.parent, d):
            level.mkdir(exist_ok=True)
            if "cpuset" in d.parent.parent.name:
                _cpuset_init(level)
    return dirs


def join_cgroups(dirs: list[Path]) -> None:
    """Move the calling process into ``dirs`` (runs in the child between fork and exec)."""
    for d in dirs:
        with contextlib.suppress(OSError):
            (d / "cgroup.procs").write_text("0")


def cgroup_pids(name: str) -> set[int]:
    pids: set[int] = set()
    for d in cgroup_dirs(name):
        if not d.is_dir():
            continue
        for root, _dirs, files in os.walk(d):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError, ValueError):
                    pids |= {int(x) for x in Path(root, "cgroup.procs").read_text().split()}
    return pids


def kill_cgroups(name: str, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = {p for p in cgroup_pids(name) if pid_alive(p)}
        if not pids:
            break
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        time.sleep(0.05)
    for d in cgroup_dirs(name):
        if not d.is_dir():
            continue
        for root, _dirs, _files in os.walk(d, topdown=False):
            with contextlib.suppress(OSError):
                os.rmdir(root)


def remove_cgroup_parents() -> None:
    for d in cgroup_dirs("x"):
        with contextlib.suppress(OSError):
            d.parent.rmdir()


def storage_device(path: Path) -> str:
    """MAJOR:MINOR of the whole disk holding ``path`` (a partition's parent: the throttles take disks)."""
    st = os.stat(path)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    sysdev = Path("/sys/dev/block") / dev
    if (sysdev / "partition").exists():
        with contextlib.suppress(OSError):
            return (sysdev.resolve().parent / "dev").read_text().strip()
    return dev


def apply_io_limit(name: str, device: str, write_bps: int | None) -> int:
    """Write limit of node ``name``'s cgroup (and every cgroup below it: v1 throttles do not inherit) on
    ``device``; None lifts it. Returns how many cgroups took it."""
    took = 0
    for d in cgroup_dirs(name):
        if not d.is_dir():
            continue
        v1 = d / "blkio.throttle.write_bps_device"
        v2 = d / "io.max"
        for root, _dirs, _files in os.walk(d):
            if v1.exists():
                target, line = Path(root) / v1.name, f"{device} {write_bps or 0}"
            elif v2.exists():
                target, line = Path(root) / v2.name, f"{device} wbps={write_bps or 'max'}"
            else:
                break
            with contextlib.suppress(OSError):
                target.write_text(line)
                took += 1
    return took


CPU_PERIOD_US = 10000  # a short CFS period: a throttled node is slow in every 10 ms, not in bursts of 100 ms


def apply_cpu_limit(name: str, factor: float | None) -> int:
    """Cap node ``name``'s cgroup at 1/``factor`` of one CPU (cgroup v1 cpu.cfs_quota_us/cfs_period_us,
    or v2 cpu.max; hierarchical: everything below it shares the cap); None lifts it. Returns how many
    cgroups took it."""
    took = 0
    for d in cgroup_dirs(name):
        quota = int(CPU_PERIOD_US / factor) if factor else None
        writes = []
        if (d / "cpu.cfs_quota_us").exists():
            writes = [(d / "cpu.cfs_period_us", str(CPU_PERIOD_US)),
                      (d / "cpu.cfs_quota_us", str(quota or -1))]
        elif (d / "cpu.max").exists():
            writes = [(d / "cpu.max", f"{quota or 'max'} {CPU_PERIOD_US}")]
        for target, value in writes:
            with contextlib.suppress(OSError):
                target.write_text(value)
                took += 1
    return took


def cgroup_memory_bytes(name: str) -> int | None:
    """Memory charged to the node (v1 memory controller: rss + cache - inactive_file; or cgroup2
    memory.current)."""
    for d in cgroup_dirs(name):
        stat = d / "memory.stat"
        if d.parent.parent.name == "memory" and stat.exists():
            vals = dict(line.split() for line in stat.read_text().splitlines())
            return int(vals.get("total_rss", 0)) + int(vals.get("total_cache", 0)) - int(
                vals.get("total_inactive_file", 0)
            )
        cur = d / "memory.current"
        if cur.exists():
            return int(cur.read_text())
    return None


# ---------------------------------------------------------------------------------------- node state


class NodeHandle:
    """A lab node as the lab, faults and tests see it."""

    def __init__(self, lab_dir: Path, name: str, index: int):
        self.lab_dir = Path(lab_dir)
        self.name = name
        self.index = index
        self.state_dir = self.lab_dir / "nodes" / name
        self.sim_dir = self.state_dir / "sim"

    # paths and recorded facts
    @property
    def root(self) -> Path:
        return self.state_dir / "root"

    @property
    def config(self) -> dict:
        return json.loads((self.state_dir / "node.json").read_text())

    @property
    def mgmt_ip(self) -> str:
        return network.mgmt_ip(self.index)

    @property
    def link_mbit(self) -> float:
        return float(self.config["link_mbit"])

    def link_rates(self) -> dict[int, float]:
        """Current rate of each fabric link in Mbit/s (what set_link_rate last set, else link_mbit)."""
        rates = {0: self.link_mbit, 1: self.link_mbit}
        with contextlib.suppress(OSError, ValueError):
            for k, v in json.loads((self.state_dir / "links.json").read_text()).items():
                rates[int(k)] = float(v)
        return rates

    def supervisor_pid(self) -> int | None:
        return read_pid(self.state_dir / "supervisor.pid")

    def init_pid(self) -> int | None:
        pid = read_pid(self.state_dir / "init.pid")
        return pid if pid_alive(pid) else None

    def state(self) -> str:
        try:
            recorded = (self.state_dir / "state").read_text().strip()
        except OSError:
            recorded = "absent"
        if recorded in ("starting", "running", "rebooting") and not pid_alive(
            self.supervisor_pid(), SUPERVISOR
        ):
            return "dead"
        return recorded

    def agent_applied(self) -> int:
        """The hw.json generation the node's agent last brought onto the node's surfaces (-1: unknown)."""
        pid = self.init_pid()
        if pid is None:
            return -1
        try:
            return int(Path(f"/proc/{pid}/root/run/clustercert-lab/agent.applied").read_text().strip() or -1)
        except (OSError, ValueError):
            return -1

    def is_running(self) -> bool:
        return self.state() == "running" and self.init_pid() is not None

    # running things inside the node
    def exec(
        self, argv: list[str], timeout: float = 60, input: str | None = None
    ) -> subprocess.CompletedProcess:
        pid = self.init_pid()
        if pid is None:
            raise RuntimeError(f"{self.name} is not running")
        cmd = [
            "nsenter", "-t", str(pid), "-m", "-u", "-i", "-n", "-p", "-r", "-w",
            "env", "-i", f"PATH={NODE_PATH}", "HOME=/root", "LANG=C.UTF-8", "TERM=dumb", *argv,
        ]  # fmt: skip
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
        )  # fmt: skip

    # storage: the lab's shared mount (one host directory every node binds) and the node's own scratch
    @property
    def shared_dir(self) -> Path:
        return self.lab_dir / "storage" / "shared"

    @property
    def scratch_dir(self) -> Path:
        return self.state_dir / "scratch"

    def io_limit(self) -> int | None:
        """The write limit (bytes/s) set_io_limit last set (None: none)."""
        with contextlib.suppress(OSError, ValueError):
            v = json.loads((self.state_dir / "io.json").read_text()).get("write_bps")
            return int(v) if v else None
        return None

    def set_io_limit(self, write_bps: int | None) -> None:
        """Throttle (or, with None, release) the node's writes to the disk that holds the lab's storage
        directories: its cgroup's blkio.throttle.write_bps_device (cgroup v1) or io.max (v2). Remembered
        across reboots (prestart applies it again)."""
        tmp = self.state_dir / "io.json.tmp"
        tmp.write_text(json.dumps({"write_bps": write_bps}))
        tmp.replace(self.state_dir / "io.json")
        device = storage_device(self.lab_dir)
        if not apply_io_limit(self.name, device, write_bps) and write_bps:
            from clustercert_lab.errors import LabError

            raise LabError(f"{self.name}: no blkio/io cgroup of the node took a write limit on {device} "
                           "(the lab's storage must be on a block device the host's cgroups can throttle)")

    def cpu_limit(self) -> float | None:
        """The slow-down factor set_cpu_limit last set (None: none)."""
        with contextlib.suppress(OSError, ValueError):
            v = json.loads((self.state_dir / "cpu.json").read_text()).get("factor")
            return float(v) if v else None
        return None

    def set_cpu_limit(self, factor: float | None) -> None:
        """Cap (or, with None, release) the node's CPU at 1/``factor`` of one CPU (apply_cpu_limit).
        Remembered across reboots (prestart applies it again)."""
        tmp = self.state_dir / "cpu.json.tmp"
        tmp.write_text(json.dumps({"factor": factor}))
        tmp.replace(self.state_dir / "cpu.json")
        if not apply_cpu_limit(self.name, factor) and factor:
            from clustercert_lab.errors import LabError

            raise LabError(f"{self.name}: no cpu cgroup of the node took a CPU cap (cpu.cfs_quota_us or "
                           "cpu.max)")

    def set_link_rate(self, fabric: int, mbit: float) -> None:
        """Re-shape the node's fabric link (both directions); remembered across reboots."""
        if fabric not in (0, 1):
            raise ValueError(f"fabric: must be 0 or 1, not {fabric}")
        if mbit <= 0:
            raise ValueError(f"mbit: must be > 0, not {mbit}")
        rates = self.link_rates()
        rates[fabric] = float(mbit)
        tmp = self.state_dir / "links.json.tmp"
        tmp.write_text(json.dumps({str(k): v for k, v in rates.items()}))
        tmp.replace(self.state_dir / "links.json")
        pid = self.init_pid()
        if pid is not None:
            network.shape(network.host_ifaces(self.index)[1 + fabric], mbit)
            network.shape(network.NODE_IFACES[1 + fabric], mbit, netns_pid=pid)

    # power
    def power_on(self, timeout: float = 30) -> None:
        if pid_alive(self.supervisor_pid(), SUPERVISOR):
            return
        (self.state_dir / "state").write_text("starting\n")
        (self.state_dir / "supervisor.pid").unlink(missing_ok=True)
        script = self.state_dir / SUPERVISOR
        script.write_text(supervisor_script(self))
        script.chmod(0o755)
        spawn_daemon(["/bin/sh", str(script)], self.state_dir / "supervisor.log", env=python_env())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = (self.state_dir / "state").read_text().strip()
            if st == "running" and self.init_pid():
                return
            if st.startswith("failed"):
                raise RuntimeError(f"{self.name}: {st} (see {self.state_dir / 'supervisor.log'})")
            time.sleep(0.05)
        raise RuntimeError(f"{self.name}: did not start within {timeout:.0f} s (see "
                           f"{self.state_dir}/console.log)")

    def request_power_off(self) -> int | None:
        """Ask the supervisor to shut the node down (returns its pid; use wait_power_off)."""
        pid = self.supervisor_pid()
        if pid_alive(pid, SUPERVISOR):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            return pid
        return None

    def wait_power_off(self, pid: int | None, timeout: float = 8) -> None:
        if pid is not None and not wait_gone(pid, timeout):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            wait_gone(pid, 2)
        kill_cgroups(self.name)
        (self.state_dir / "state").write_text("off\n")
        (self.state_dir / "init.pid").unlink(missing_ok=True)

    def power_off(self) -> None:
        self.wait_power_off(self.request_power_off())


NSPAWN_RUN = Path("/run/systemd/nspawn")


def nspawn_runtime_cleanup(handle: NodeHandle, locks: bool = True) -> None:
    """Remove what systemd-nspawn leaves in /run for a node (its propagate dir, its image lock file).
    On a host whose /run is no tmpfs nspawn cannot remove them itself."""
    shutil.rmtree(NSPAWN_RUN / "propagate" / handle.name, ignore_errors=True)
    if locks and is_mountpoint(handle.root):
        with contextlib.suppress(OSError):
            st = os.stat(handle.root)
            (NSPAWN_RUN / "locks" / f"inode-{st.st_dev}:{st.st_ino}").unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------ creation


def networkd_files(index: int) -> dict[str, str]:
    """The node's site base network config (systemd-networkd), keyed by file name."""
    common = "LinkLocalAddressing=no\nIPv6AcceptRA=no\nConfigureWithoutCarrier=yes\n"
    files = {
        "10-eth0.network": (
            "# clustercert lab: management network\n[Match]\nName=eth0\n\n[Network]\n"
            f"Address={network.mgmt_ip(index)}/24\nGateway=10.250.0.1\n{common}"
        )
    }
    for fabric in (0, 1):
        # 00-: sorts before any site/role file, so the port keeps its fabric address even once a role
        # enslaves it to bond0 (the lab's bond0 is emulated by the node's agent: the per-port addresses
        # are the lab's IPoIB data path for probes; the bond's own address, from the node's config, is
        # reached through the agent's `bondlink` veth)
        files[f"00-lab-ib{fabric}.network"] = (
            f"# clustercert lab: fabric {fabric} (IPoIB netdev)\n[Match]\nName=ib{fabric}\n\n[Network]\n"
            f"Address={network.fabric_ip(index, fabric)}/24\n{common}"
        )
    # the emulated bond's data path belongs to the node's hardware agent (it enslaves the veth to bond0
    # and sets its link up or down with the bond's slaves): networkd must leave it alone
    files["00-lab-bondlink.network"] = (
        f"# clustercert lab: data path of the emulated bond0 (driven by clustercert-lab-agent)\n"
        f"[Match]\nName={network.NODE_IFACES[3]}\n\n[Link]\nUnmanaged=yes\n"
    )
    return files


def mount_root(handle: NodeHandle, lowerdirs: str) -> None:
    for sub in ("upper", "work", "root"):
        (handle.state_dir / sub).mkdir(parents=True, exist_ok=True)
    if not is_mountpoint(handle.root):
        opts = (f"lowerdir={lowerdirs},upperdir={handle.state_dir / 'upper'},"
                f"workdir={handle.state_dir / 'work'}")
        proc = subprocess.run(
            ["mount", "-t", "overlay", f"cclab-{handle.name}", "-o", opts, str(handle.root)],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"mount overlay for {handle.name}: {proc.stderr.strip()}")


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


# The lab's non-root operator: logs in with the lab's key, becomes root with password-less sudo (as a site's
# admin account does); `clustercert lab` writes an inventory for it next to root's
# (manager.user_inventory_path).
LAB_USER = "ccadmin"
LAB_UID = 1500
SUDOERS_FILE = "etc/sudoers.d/clustercert-lab"
SUDOERS_NOPASSWD = f"# clustercert lab: the operator account\n{LAB_USER} ALL=(ALL:ALL) NOPASSWD: ALL\n"


def _add_line(path: Path, name: str, line: str) -> None:
    text = path.read_text() if path.exists() else ""
    if not any(ln.split(":", 1)[0] == name for ln in text.splitlines()):
        path.write_text(text + ("" if not text or text.endswith("\n") else "\n") + line + "\n")


def _authorise(path: Path, key: str) -> None:
    """``key`` in the authorized_keys file ``path``, kept beside every key already there: the lab's key is
    one of a node's authorised keys, not the only one (the cluster_ssh role adds the cluster key, and a
    `lab up` of a running lab must not take it away)."""
    key = key.strip()
    text = path.read_text() if path.exists() else ""
    if key in (ln.strip() for ln in text.splitlines()):
        path.chmod(0o600)
        return
    _write(path, text + ("" if not text or text.endswith("\n") else "\n") + key + "\n", 0o600)


def ensure_lab_user(root: Path, authorized_key: str) -> None:
    """The operator account in a node's (mounted) root: passwd/shadow/group entries (no password: key login
    only), a home with the lab's key authorised, and password-less sudo."""
    etc = root / "etc"
    _add_line(etc / "passwd", LAB_USER,
              f"{LAB_USER}:x:{LAB_UID}:{LAB_UID}:clustercert lab operator:/home/{LAB_USER}:/bin/bash")
    _add_line(etc / "group", LAB_USER, f"{LAB_USER}:x:{LAB_UID}:")
    _add_line(etc / "shadow", LAB_USER, f"{LAB_USER}:*:20000:0:99999:7:::")
    if (etc / "gshadow").exists():
        _add_line(etc / "gshadow", LAB_USER, f"{LAB_USER}:!::")
    home = root / "home" / LAB_USER
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
    _authorise(ssh / "authorized_keys", authorized_key)
    for path, mode in ((home, 0o750), (ssh, 0o700)):
        path.chmod(mode)
    for path in (home, ssh, ssh / "authorized_keys"):
        os.chown(path, LAB_UID, LAB_UID)
    _write(root / SUDOERS_FILE, SUDOERS_NOPASSWD, 0o440)
    # GPUs are every user's (on real nodes /dev/nvidia* are 0666): the simulated workload's busy markers too,
    # so node-to-node probes run as the login user as they do on hardware
    _write(root / "etc/tmpfiles.d/clustercert-lab-user.conf",
           "d /run/clustercert-lab/busy 1777 root root -\n")


SHARED_STAGING = "/var/lib/clustercert-lab-storage/shared"
SHARED_MOUNT = "/shared"
FSTAB_LINE = f"{SHARED_STAGING} {SHARED_MOUNT} none bind 0 0"


def write_storage(root: Path) -> None:
    """The node's shared mount: its mount point and the /etc/fstab line that binds the lab's shared
    directory there at boot, as a site's fstab mounts its NFS or Lustre."""
    (root / SHARED_MOUNT.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (root / SHARED_STAGING.lstrip("/")).mkdir(parents=True, exist_ok=True)
    fstab = root / "etc/fstab"
    text = fstab.read_text() if fstab.exists() else ""
    if FSTAB_LINE not in text.splitlines():
        fstab.write_text(text + ("" if not text or text.endswith("\n") else "\n")
                         + "# clustercert lab: the shared mount every node sees\n" + FSTAB_LINE + "\n")


def personalise(handle: NodeHandle, all_nodes: dict[str, int], authorized_key: str,
                host_key_dir: Path) -> None:
    """Write the node's identity into its (mounted) root: hostname, hosts, machine-id, host key,
    authorized key (root's and the operator's, see ensure_lab_user), network config."""
    root = handle.root
    _write(root / "etc/hostname", handle.name + "\n")
    hosts = ["127.0.0.1\tlocalhost", f"127.0.1.1\t{handle.name}", "::1\tlocalhost ip6-localhost ip6-loopback",
             ""]
    hosts += [f"{network.mgmt_ip(i)}\t{n}" for n, i in sorted(all_nodes.items(), key=lambda kv: kv[1])]
    _write(root / "etc/hosts", "\n".join(hosts) + "\n")
    if not (root / "etc/machine-id").exists() or not (root / "etc/machine-id").read_text().strip():
        _write(root / "etc/machine-id", os.urandom(16).hex() + "\n", 0o444)
    for suffix, mode in (("", 0o600), (".pub", 0o644)):
        src = host_key_dir / f"ssh_host_ed25519_key{suffix}"
        _write(root / f"etc/ssh/ssh_host_ed25519_key{suffix}", src.read_text(), mode)
    ssh_dir = root / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    ssh_dir.chmod(0o700)
    _authorise(ssh_dir / "authorized_keys", authorized_key)
    ensure_lab_user(root, authorized_key)
    write_storage(root)
    for fname, text in networkd_files(handle.index).items():
        _write(root / "etc/systemd/network" / fname, text)


# ---------------------------------------------------------------------------------------- supervisor


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            with contextlib.suppress(OSError, ValueError):
                kids = [int(x) for x in (task / "children").read_text().split()]
                out += kids
                todo += kids
    return out


def _find_init(nspawn_pid: int) -> int | None:
    for p in _descendants(nspawn_pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("NSpid:"):
                    ids = line.split()[1:]
                    if len(ids) >= 2 and ids[-1] == "1":
                        return p
    return None


def nspawn_argv(h: NodeHandle, cfg: dict) -> list[str]:
    m, i0, i1, b = network.host_ifaces(h.index)
    return [
        "systemd-nspawn", "-q", "-b",
        "-D", str(h.root),
        "--register=no", "--keep-unit",
        f"--machine={h.name}",
        f"--uuid={cfg['uuid']}",
        "--console=pipe",
        "--resolv-conf=off", "--timezone=off", "--link-journal=no",
        f"--network-veth-extra={m}:eth0",
        f"--network-veth-extra={i0}:ib0",
        f"--network-veth-extra={i1}:ib1",
        f"--network-veth-extra={b}:{network.NODE_IFACES[3]}",
        f"--bind-ro={h.sim_dir}:/var/lib/clustercert-lab",
        # storage: the shared directory at a staging path the node's /etc/fstab binds to /shared at boot
        # (so the node itself can unmount and mount it: mount_missing), its own scratch directly
        f"--bind={h.shared_dir}:{SHARED_STAGING}",
        f"--bind={h.scratch_dir}:/scratch",
    ]  # fmt: skip


SUPERVISOR_SH = """\
#!/bin/sh
# clustercert lab: supervisor of node {name} (generated; a shell loop keeps an idle node small).
# Starts systemd-nspawn in the node's cgroups, lets `{py_mod} wire` put its veths on the bridges,
# and starts it again when it exits with status 133 (a reboot inside the node).
PY={py}
LAB={lab}
NAME={name}
STATE={state}
echo $$ > "$STATE/supervisor.pid"
stopping=0
child=
trap 'stopping=1; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null' TERM INT
rc=0
while [ "$stopping" = 0 ]; do
  "$PY" -m {py_mod} prestart "$LAB" "$NAME" || exit 1
  [ "$stopping" = 1 ] && break
  (
    for f in {cgroup_procs}; do echo 0 > "$f" 2>/dev/null; done
    exec {nspawn}
  ) </dev/null >>"$STATE/console.log" 2>&1 &
  child=$!
  echo "$child" > "$STATE/nspawn.pid"
  if ! "$PY" -m {py_mod} wire "$LAB" "$NAME" "$child"; then
    kill -KILL "$child" 2>/dev/null
    wait "$child"
    exit 1
  fi
  while :; do
    wait "$child"
    rc=$?
    kill -0 "$child" 2>/dev/null || break
  done
  child=
  [ "$rc" = {reboot} ] || break
done
exec "$PY" -m {py_mod} poststop "$LAB" "$NAME" "$rc" "$stopping"
"""


def supervisor_script(h: NodeHandle) -> str:
    cfg = h.config
    procs = " ".join(shlex.quote(str(d / "cgroup.procs")) for d in cgroup_dirs(h.name))
    return SUPERVISOR_SH.format(
        name=shlex.quote(h.name),
        py=shlex.quote(sys.executable),
        py_mod="clustercert_lab.node",
        lab=shlex.quote(str(h.lab_dir)),
        state=shlex.quote(str(h.state_dir)),
        cgroup_procs=procs,
        nspawn=" ".join(shlex.quote(a) for a in nspawn_argv(h, cfg)),
        reboot=EXIT_REBOOT,
    )


def _set_state(h: NodeHandle, text: str) -> None:
    tmp = h.state_dir / "state.tmp"
    tmp.write_text(text + "\n")
    tmp.replace(h.state_dir / "state")


def prestart(h: NodeHandle) -> int:
    """Before each boot: cgroups (with the node's write limit, if one is set), the storage directories, the
    overlay root, nspawn's leftovers from the previous boot."""
    make_cgroups(h.name)
    for d in (h.shared_dir, h.scratch_dir):
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o1777)
    if h.io_limit():
        apply_io_limit(h.name, storage_device(h.lab_dir), h.io_limit())
    if h.cpu_limit():
        apply_cpu_limit(h.name, h.cpu_limit())
    mount_root(h, h.config["lowerdirs"])
    nspawn_runtime_cleanup(h, locks=False)
    boots = read_pid(h.state_dir / "boots") or 0
    _set_state(h, "starting" if boots == 0 else "rebooting")
    return 0


def wire(h: NodeHandle, nspawn_pid: int, timeout: float = 20) -> int:
    """After nspawn started: find the node's init, put the host ends of its veths on the bridges,
    shape both ends of the fabric links, record init pid and boot count, state `running`."""
    ifaces = network.host_ifaces(h.index)
    bridges = (network.MGMT_BRIDGE, *network.FABRIC_BRIDGES, network.BOND_BRIDGE)
    deadline = time.monotonic() + timeout
    init = None
    try:
        while True:
            if not pid_alive(nspawn_pid):
                raise RuntimeError("systemd-nspawn exited while starting (see console.log)")
            init = init or _find_init(nspawn_pid)
            if init and all(network.link_exists(i) for i in ifaces):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the node's veths or init did not appear within {timeout:.0f} s")
            time.sleep(0.02)
        for iface, br in zip(ifaces, bridges, strict=True):
            network.attach(iface, br)
        for fabric, rate in h.link_rates().items():
            network.shape(ifaces[1 + fabric], rate)
            network.shape(network.NODE_IFACES[1 + fabric], rate, netns_pid=init)
    except (RuntimeError, network.NetError) as exc:
        _set_state(h, f"failed: {exc}")
        print(f"{h.name}: {exc}", file=sys.stderr)
        return 1
    (h.state_dir / "init.pid").write_text(f"{init}\n")
    boots = (read_pid(h.state_dir / "boots") or 0) + 1
    (h.state_dir / "boots").write_text(f"{boots}\n")
    _set_state(h, "running")
    return 0


def poststop(h: NodeHandle, rc: int, stopping: bool) -> int:
    (h.state_dir / "init.pid").unlink(missing_ok=True)
    _set_state(h, "off" if stopping or rc == 0 else f"stopped (systemd-nspawn exit status {rc})")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] in ("prestart", "wire", "poststop"):
        cfg = json.loads((Path(argv[1]) / "nodes" / argv[2] / "node.json").read_text())
        h = NodeHandle(Path(argv[1]), argv[2], int(cfg["index"]))
        if argv[0] == "prestart":
            return prestart(h)
        if argv[0] == "wire" and len(argv) == 4:
            return wire(h, int(argv[3]))
        if argv[0] == "poststop" and len(argv) == 5:
            return poststop(h, int(argv[3]), argv[4] == "1")
    print("usage: python -m clustercert_lab.node prestart|wire|poststop LAB_DIR NAME [ARGS]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
