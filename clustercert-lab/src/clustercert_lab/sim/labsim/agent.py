"""The node-side hardware agent (systemd unit clustercert-lab-agent.service, runs at boot).

It maintains the kernel surfaces a real node's drivers would provide, inside the node's own
mount namespace:

* /sys/class/infiniband/<hca>/... (a tmpfs over /sys/class with every real class re-bound under
  it), enough for infiniband-diags' real ``ibstat``/``ibstatus`` and for sysfs readers;
* /sys/module/<m>/{initstate,version,refcnt} for simulated modules (an overlay over /sys/module);
  at boot it "loads" the driver stack of the installed packages, so the loaded driver version is
  the one installed at boot;
* bond0: emulates the bonding driver. bond0 exists once the node's systemd-networkd config
  declares a Kind=bond netdev (noticed within a second of the config changing on disk or networkd
  restarting: `networkctl reload` itself leaves no trace); the agent creates a netdev named bond0 (a
  bridge) and writes /sys/class/net/bond0/bonding/* (+ bonding_slave/* on the slaves); the active
  slave moves when its link goes down and back to the primary when it returns. Between its 1 s
  ticks the agent waits for the kernel's link notifications (rtnetlink) and, after one, watches
  the slaves' operstate every 25 ms until the next tick, so a failover takes tens of milliseconds,
  like a bond with miimon=100, and an idle node's agent wakes once a second. The bond's data path
  is the lab's `bondlink` veth (host end on the lab's bond bridge): the agent enslaves it to bond0
  and keeps its link up while at least one slave is up (active-backup reachability). networkd cannot configure
  a bond0 whose kind is not bond, so the agent applies the Address= entries of bond0's .network file itself.
  /proc/net/bonding cannot be simulated (procfs, no bonding module), see docs/lab-faults.md.
* IB port state changes (ib_port_down) take the port's IPoIB netdev down, as losing the link does.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import select
import socket
import subprocess
import time

from . import common, faultops
from .ibtools import PHYS_NUM, STATE_NUM


def sh(*argv: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=30)


def is_mount(path: str, fstype: str | None = None) -> bool:
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                parts = line.split()
                if parts[4] == path:
                    if fstype is None:
                        return True
                    sep = parts.index("-")
                    if parts[sep + 1] == fstype:
                        return True
    except OSError:
        pass
    return False


# ---------------------------------------------------------------- mounts

def setup_sys_class() -> None:
    sysclass = common.root("/sys/class")
    if os.path.exists(os.path.join(sysclass, ".clustercert-lab")):
        return
    orig = os.path.join(common.run_dir(), "sysclass-orig")
    os.makedirs(orig, exist_ok=True)
    names = sorted(os.listdir(sysclass))
    sh("mount", "--bind", sysclass, orig, check=True)
    # private, or the tmpfs mounted on /sys/class below would propagate onto this copy (same peer group)
    sh("mount", "--make-private", orig, check=True)
    sh("mount", "-t", "tmpfs", "-o", "mode=755,size=4m", "clustercert-lab-sysclass", sysclass, check=True)
    for n in names:
        d = os.path.join(sysclass, n)
        os.makedirs(d, exist_ok=True)
        sh("mount", "--bind", os.path.join(orig, n), d)
    os.makedirs(os.path.join(sysclass, "infiniband"), exist_ok=True)
    with open(os.path.join(sysclass, ".clustercert-lab"), "w") as f:
        f.write(common.BANNER + "\n")


def setup_sys_module() -> None:
    """/sys/module/<m>/ for the simulated modules.

    systemd-nspawn's /sys is a read-only tmpfs holding bind mounts of sysfs subtrees and no
    /sys/module: create it (briefly remounting /sys read-write) as a tmpfs. On a system whose /sys
    has a module directory, overlay it instead.
    """
    target = common.root("/sys/module")
    if is_mount(target, "tmpfs") or is_mount(target, "overlay"):
        return
    if not os.path.isdir(target):
        sysdir = os.path.dirname(target)
        r = sh("mount", "-o", "remount,bind,rw", sysdir)
        try:
            os.makedirs(target, exist_ok=True)
        finally:
            if r.returncode == 0:
                sh("mount", "-o", "remount,bind,ro", sysdir)
        r = sh("mount", "-t", "tmpfs", "-o", "mode=755,size=1m", "clustercert-lab-sysmodule", target)
    else:
        base = os.path.join(common.run_dir(), "sysmodule")
        os.makedirs(base + "/upper", exist_ok=True)
        os.makedirs(base + "/work", exist_ok=True)
        r = sh("mount", "-t", "overlay", "clustercert-lab-sysmodule", "-o",
               f"lowerdir={target},upperdir={base}/upper,workdir={base}/work", target)
    if r.returncode != 0:
        common.err(f"clustercert-lab-agent: cannot provide {target}: {r.stderr.strip()}\n")


def overlay_netdev(name: str) -> str | None:
    """A writable overlay over /sys/devices/virtual/net/<name>; returns the merged dir."""
    real = os.path.realpath(common.root(f"/sys/class/net/{name}"))
    if not os.path.isdir(real):
        return None
    if not is_mount(real, "overlay"):
        base = os.path.join(common.run_dir(), "netdev", name)
        for d in ("upper", "work"):
            os.makedirs(os.path.join(base, d), exist_ok=True)
        r = sh("mount", "-t", "overlay", f"clustercert-lab-{name}", "-o",
               f"lowerdir={real},upperdir={base}/upper,workdir={base}/work", real)
        if r.returncode != 0:
            common.err(f"clustercert-lab-agent: overlay on {real}: {r.stderr.strip()}\n")
            return None
    return real


# ---------------------------------------------------------------- InfiniBand sysfs

def ib_files(hw: dict) -> dict[str, str]:
    files: dict[str, str] = {}
    for h in hw["hcas"]:
        b = f"{h['name']}/"
        files[b + "node_type"] = "1: CA\n"
        files[b + "fw_ver"] = h["fw_ver"] + "\n"
        files[b + "hw_rev"] = h["hw_rev"] + "\n"
        files[b + "hca_type"] = h["hca_type"] + "\n"
        files[b + "board_id"] = h["board_id"] + "\n"
        files[b + "node_guid"] = h["node_guid"] + "\n"
        files[b + "sys_image_guid"] = h["sys_image_guid"] + "\n"
        files[b + "node_desc"] = f"{hw['node']} {h['name']}\n"
        for p in h["ports"]:
            pb = b + f"ports/{p['port']}/"
            st = p["state"]
            files[pb + "state"] = f"{STATE_NUM.get(st, 1)}: {st}\n"
            files[pb + "phys_state"] = f"{PHYS_NUM.get(p['phys_state'], 2)}: {p['phys_state']}\n"
            if st == "ACTIVE":
                files[pb + "rate"] = f"{p['rate_gbit_per_s']} Gb/sec ({p['width']} {p['speed']})\n"
            else:
                files[pb + "rate"] = "40 Gb/sec (4X QDR)\n"  # what a port without a link reports
            files[pb + "link_layer"] = p["link_layer"] + "\n"
            files[pb + "lid"] = f"{p['lid'] if st == 'ACTIVE' else 0:#x}\n"
            files[pb + "sm_lid"] = f"{p['sm_lid'] if st == 'ACTIVE' else 0:#x}\n"
            files[pb + "lid_mask_count"] = "0\n"
            files[pb + "sm_sl"] = "0\n"
            files[pb + "cap_mask"] = "0xa751e848\n"
            g = h["node_guid"].split(":")
            files[pb + "gids/0"] = f"fe80:0000:0000:0000:{g[0]}:{g[1]}:{g[2]}:{g[3]}\n"
            files[pb + "pkeys/0"] = "0xffff\n"
            for k, v in p["counters"].items():
                files[pb + f"counters/{k}"] = f"{v}\n"
    return files


def sync_ib(hw: dict) -> None:
    base = common.root("/sys/class/infiniband")
    want = ib_files(hw)
    for rel, text in want.items():
        common.write_text(os.path.join(base, rel), text)
    names = {h["name"] for h in hw["hcas"]}
    for d in glob.glob(os.path.join(base, "*")):
        if os.path.basename(d) not in names:
            sh("rm", "-rf", d)


def sync_ib_netdevs(hw: dict, state: dict) -> None:
    """A port that lost its link takes its IPoIB netdev down; healing brings it back."""
    downed = state.setdefault("downed_netdevs", [])
    want_down = set(hw.get("netdevs_down", []))
    for h in hw["hcas"]:
        for p in h["ports"]:
            if p.get("netdev") and p["state"] != "ACTIVE":
                want_down.add(p["netdev"])
    for nd in sorted(want_down | set(downed)):
        if not os.path.exists(common.root(f"/sys/class/net/{nd}")):
            continue
        if nd in want_down and nd not in downed:
            sh("ip", "link", "set", nd, "down")
            downed.append(nd)
        elif nd not in want_down and nd in downed:
            sh("ip", "link", "set", nd, "up")
            downed.remove(nd)


# ---------------------------------------------------------------- bonding

NETWORKD_DIRS = ["/etc/systemd/network", "/run/systemd/network", "/usr/lib/systemd/network"]


def _read_unit(path: str):
    import configparser  # only when networkd restarts: keeps the idle agent small

    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment]
    try:
        cp.read(path)
    except configparser.Error:
        pass
    return cp


def _unit_entries(path: str) -> list[tuple[str, str, str]]:
    """(section, key, value) of a unit file, repeated keys kept (configparser keeps only the last)."""
    out: list[tuple[str, str, str]] = []
    section = ""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for raw in lines:
        ln = raw.strip()
        if not ln or ln[0] in "#;":
            continue
        if ln.startswith("[") and ln.endswith("]"):
            section = ln[1:-1].strip()
            continue
        key, sep, value = ln.partition("=")
        if sep:
            out.append((section, key.strip(), value.strip()))
    return out


def _sec(value: str) -> int:
    """systemd time span -> milliseconds (100ms, 0.1s, 1s, 100)."""
    v = value.strip()
    for suffix, mult in (("ms", 1), ("msec", 1), ("us", 0.001), ("s", 1000), ("sec", 1000), ("min", 60000)):
        if v.endswith(suffix) and v[: -len(suffix)].replace(".", "", 1).isdigit():
            return int(float(v[: -len(suffix)]) * mult)
    try:
        return int(float(v) * 1000)  # a bare number is seconds
    except ValueError:
        return 0


def networkd_bond_config() -> dict | None:
    files: dict[str, str] = {}
    for d in reversed(NETWORKD_DIRS):
        for f in glob.glob(common.root(d) + "/*"):
            files[os.path.basename(f)] = f
    bonds = _netdev_bonds(files)
    if not bonds:
        return None
    for name in sorted(files):
        if name.endswith(".network"):
            _network_file(files[name], bonds)
    for b in bonds.values():
        b.setdefault("addresses", [])
    return bonds.get("bond0") or next(iter(bonds.values()))


def _netdev_bonds(files: dict[str, str]) -> dict[str, dict]:
    """The bonds the .netdev files create (the first file naming one wins), their slaves still empty."""
    bonds: dict[str, dict] = {}
    for name in sorted(files):
        if not name.endswith(".netdev"):
            continue
        cp = _read_unit(files[name])
        bn = cp.get("NetDev", "Name", fallback="") if cp.get("NetDev", "Kind", fallback="") == "bond" else ""
        if bn and bn not in bonds:
            bonds[bn] = {"name": bn, "mode": cp.get("Bond", "Mode", fallback="balance-rr"),
                         "miimon": _sec(cp.get("Bond", "MIIMonitorSec", fallback="0")),
                         "fail_over_mac": cp.get("Bond", "FailOverMACPolicy", fallback="none"),
                         "slaves": [], "primary": "",
                         "primary_reselect": cp.get("Bond", "PrimaryReselectPolicy", fallback="always")}
    return bonds


def _network_file(path: str, bonds: dict[str, dict]) -> None:
    """What one .network file gives ``bonds``: a bond's addresses, or slaves (and its primary)."""
    cp = _read_unit(path)
    matched = cp.get("Match", "Name", fallback="").split()
    for bn, b in bonds.items():
        # the first .network file matching the bond configures it (networkd's rule): its addresses
        if "addresses" not in b and any(fnmatch.fnmatchcase(bn, pat) for pat in matched):
            b["addresses"] = [v for sec, k, v in _unit_entries(path)
                              if k == "Address" and sec in ("Network", "Address") and v]
    bond = cp.get("Network", "Bond", fallback="")
    if bond not in bonds:
        return
    primary = cp.get("Network", "PrimarySlave", fallback="no").lower() in ("yes", "true", "1", "on")
    for nd in matched:
        if nd not in bonds[bond]["slaves"]:
            bonds[bond]["slaves"].append(nd)
        if primary:
            bonds[bond]["primary"] = nd


def networkd_pid() -> int | None:
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(d + "/comm") as f:
                if f.read().strip() == "systemd-network":
                    return int(os.path.basename(d))
        except OSError:
            continue
    return None


MODE_NUM = {"balance-rr": 0, "active-backup": 1, "balance-xor": 2, "broadcast": 3, "802.3ad": 4,
            "balance-tlb": 5, "balance-alb": 6}
FOM_NUM = {"none": 0, "active": 1, "follow": 2}


def _oper(nd: str) -> bool:
    try:
        with open(common.root(f"/sys/class/net/{nd}/operstate")) as f:
            return f.read().strip() in ("up", "unknown")
    except OSError:
        return False


def networkd_applied_stamp() -> float:
    """When networkd last (re)configured links: it rewrites its per-link state files on a restart,
    on `networkctl reload` and on `networkctl reconfigure`."""
    newest = 0.0
    for f in glob.glob("/run/systemd/netif/links/*"):
        try:
            newest = max(newest, os.stat(f).st_mtime)
        except OSError:
            continue
    return newest


def networkd_config_signature() -> tuple:
    """(dir, file, mtime, size) of every networkd configuration file: cheap (a few stat calls)."""
    sig = []
    for d in NETWORKD_DIRS:
        base = common.root(d)
        try:
            names = sorted(os.listdir(base))
        except OSError:
            continue
        for n in names:
            try:
                st = os.stat(os.path.join(base, n))
            except OSError:
                continue
            sig.append((d, n, st.st_mtime_ns, st.st_size))
    return tuple(sig)


def _networkd_changed(state: dict) -> None:
    """Read the bond's configuration again where networkd (re)started, reconfigured links, or its
    configuration changed: the bonding driver sees the config on disk now. A changed configuration counts
    as applied: `networkctl reload` (what the roles run right after writing it) leaves no trace to watch,
    and would create a real bond there and then."""
    pid = networkd_pid()
    stamp = networkd_applied_stamp()
    sig = networkd_config_signature()
    if pid is not None and (pid != state.get("networkd_pid") or stamp != state.get("networkd_stamp")
                            or sig != state.get("networkd_config")):
        state["networkd_pid"] = pid
        state["networkd_stamp"] = stamp
        state["networkd_config"] = sig
        state["bond_config"] = networkd_bond_config()


def _ensure_bond(name: str, state: dict) -> bool:
    """The bond's netdev (a bridge standing in for it), made where it is missing; False: it could not be."""
    if os.path.exists(common.root(f"/sys/class/net/{name}")):
        return True
    r = sh("ip", "link", "add", name, "type", "bridge", "stp_state", "0", "forward_delay", "0")
    if r.returncode != 0:
        return False
    sh("ip", "link", "set", name, "up")
    state["bond_created"] = True
    state["bond_active"] = ""
    state["link_failures"] = {}
    state["bond_addresses"] = None
    return True


def _active_slave(cfg: dict, slaves: list[str], up: dict[str, bool], active: str) -> str:
    """The active slave of an active-backup bond (the primary where it is up and reselected, else the
    current one while it is up, else the first up); "" in the other modes."""
    if cfg["mode"] != "active-backup":
        return ""
    if cfg["primary"] and up.get(cfg["primary"]) and cfg.get("primary_reselect", "always") == "always":
        return cfg["primary"]
    if not active or not up.get(active):
        return next((s for s in slaves if up[s]), "")
    return active


def _write_bond_files(merged: str, cfg: dict, slaves: list[str], active: str, mii: str, up: dict[str, bool],
                      fails: dict[str, int]) -> None:
    """The bond's /sys/class/net/<bond>/bonding and each slave's bonding_slave."""
    b = os.path.join(merged, "bonding")
    os.makedirs(b, exist_ok=True)
    files = {"mode": f"{cfg['mode']} {MODE_NUM.get(cfg['mode'], 0)}",
             "slaves": " ".join(slaves), "active_slave": active, "mii_status": mii,
             "primary": cfg["primary"], "miimon": str(cfg["miimon"]),
             "fail_over_mac": f"{cfg['fail_over_mac']} {FOM_NUM.get(cfg['fail_over_mac'], 0)}",
             "primary_reselect": f"{cfg.get('primary_reselect', 'always')} 0", "updelay": "0",
             "downdelay": "0"}
    for k, v in files.items():
        common.write_text(os.path.join(b, k), v + "\n")
    for s in slaves:
        sm = overlay_netdev(s)
        if sm is None:
            continue
        d = os.path.join(sm, "bonding_slave")
        os.makedirs(d, exist_ok=True)
        common.write_text(os.path.join(d, "state"), ("active" if s == active else "backup") + "\n")
        common.write_text(os.path.join(d, "mii_status"), ("up" if up[s] else "down") + "\n")
        common.write_text(os.path.join(d, "link_failure_count"), f"{fails.get(s, 0)}\n")


def sync_bond(state: dict) -> None:
    _networkd_changed(state)
    cfg = state.get("bond_config")
    if cfg is None:
        if os.path.exists(common.root("/sys/class/net/bond0")) and state.get("bond_created"):
            sh("ip", "link", "del", "bond0")
            state["bond_created"] = False
        sync_bond_link(None, False)
        return
    name = cfg["name"]
    if not _ensure_bond(name, state):
        return
    sync_bond_addresses(name, cfg.get("addresses", []), state)
    merged = overlay_netdev(name)
    if merged is None:
        return
    slaves = [s for s in cfg["slaves"] if os.path.exists(common.root(f"/sys/class/net/{s}"))]
    up = {s: _oper(s) for s in slaves}
    prev_up = state.setdefault("slave_up", {})
    fails = state.setdefault("link_failures", {})
    for s in slaves:
        if prev_up.get(s, True) and not up[s]:
            fails[s] = fails.get(s, 0) + 1
    state["slave_up"] = up
    active = _active_slave(cfg, slaves, up, state.get("bond_active", ""))
    state["bond_active"] = active
    mii = "up" if any(up.values()) else "down"
    sync_bond_link(name, mii == "up")
    _write_bond_files(merged, cfg, slaves, active, mii, up, fails)


BOND_LINK = "bondlink"  # the veth the lab gives every node as its emulated bond's data path
FAST_WATCH_S = 0.025    # how often the slaves' operstate is read between the 1 s ticks


def _flags_up(nd: str) -> bool:
    try:
        with open(common.root(f"/sys/class/net/{nd}/flags")) as f:
            return bool(int(f.read().strip(), 16) & 0x1)
    except (OSError, ValueError):
        return False


def _master(nd: str) -> str | None:
    link = common.root(f"/sys/class/net/{nd}/master")
    return os.path.basename(os.path.realpath(link)) if os.path.islink(link) else None


def sync_bond_link(bond: str | None, carrier: bool) -> None:
    """The bond's data path: bondlink is a port of ``bond`` (the bridge standing in for the bond) and
    its link is up while the bond has a slave up (``carrier``), as an active-backup bond forwards
    while one slave is up. Without a bond it is down and nobody's port. Calls ip only on a change."""
    if not os.path.exists(common.root(f"/sys/class/net/{BOND_LINK}")):
        return
    master = _master(BOND_LINK)
    if bond is None:
        if master is not None:
            sh("ip", "link", "set", BOND_LINK, "nomaster")
        if _flags_up(BOND_LINK):
            sh("ip", "link", "set", BOND_LINK, "down")
        return
    if master != bond:
        sh("ip", "link", "set", BOND_LINK, "master", bond)
    if _flags_up(BOND_LINK) != carrier:
        sh("ip", "link", "set", BOND_LINK, "up" if carrier else "down")


def sync_bond_addresses(bond: str, want: list[str], state: dict) -> None:
    """The bond's addresses from its .network file. networkd itself cannot configure the emulated bond
    (a bridge where its .netdev says bond: "wrong KIND"), so the agent applies Address= as networkd would
    for a real bond; only when the configuration or the bond changed."""
    have = state.get("bond_addresses")
    if have == want:
        return
    for addr in have or []:
        if addr not in want:
            sh("ip", "addr", "del", addr, "dev", bond)
    for addr in want:
        sh("ip", "addr", "replace", addr, "dev", bond)
    state["bond_addresses"] = list(want)


def bond_slaves_changed(state: dict) -> bool:
    """Cheap (two sysfs reads): has a bond slave's link gone up or down since the last sync_bond?"""
    cfg = state.get("bond_config")
    if not cfg or not state.get("bond_created"):
        return False
    seen = state.get("slave_up", {})
    # a slave sync_bond has not seen yet is left to the next tick (no retry storm if a sync fails)
    return any(s in seen and _oper(s) != seen[s] for s in cfg["slaves"])


RTMGRP_LINK = 0x1  # rtnetlink's multicast group of link changes (flags, carrier, operstate)


def link_events() -> socket.socket | None:
    """A socket that turns readable when a netdev of the node's network namespace changes (what
    `ip monitor link` shows), or None where it cannot be opened: then the slaves are polled."""
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK, socket.NETLINK_ROUTE)
    except (OSError, AttributeError):
        return None
    try:
        sock.bind((0, RTMGRP_LINK))
    except OSError:
        sock.close()
        return None
    return sock


def _drain(events) -> None:
    """Read every queued notification; their content is not needed, the slaves' sysfs is read next.
    An overflow (ENOBUFS: notifications were dropped) is a change all the same."""
    while True:
        try:
            if not events.recv(65536):
                return
        except OSError:  # BlockingIOError: nothing left; ENOBUFS
            return


def watch_bond(state: dict, seconds: float, events=None, hw_changed=None) -> None:
    """Wait ``seconds``, re-syncing the bond within FAST_WATCH_S of a slave's link change. With
    ``events`` (link_events()) the slaves are read only after the kernel reported a link change, and
    then every FAST_WATCH_S until the deadline: operstate can follow the notification (linkwatch).
    Without, they are read every FAST_WATCH_S; either way the next tick's sync_bond catches the rest.
    ``hw_changed()``: looked at every HW_WATCH_S; True ends the wait (a fault was injected or healed:
    the next tick applies it at once)."""
    deadline = time.monotonic() + seconds
    polling = events is None
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or (hw_changed is not None and hw_changed()):
            return
        if polling:
            time.sleep(min(FAST_WATCH_S, left))
        else:
            try:
                ready, _, _ = select.select([events], [], [], min(left, HW_WATCH_S))
            except (OSError, ValueError):
                ready, polling = [], True
            if not ready:
                continue
            _drain(events)
            polling = True
        try:
            if bond_slaves_changed(state):
                sync_bond(state)
        except Exception as exc:  # keep the agent alive; say what failed
            common.err(f"clustercert-lab-agent: {type(exc).__name__}: {exc}\n")


# ---------------------------------------------------------------- boot

def _wanted_modules() -> list[str]:
    """The modules /etc/modules-load.d/*.conf and /etc/modules name, in order."""
    wanted = []
    for f in sorted(glob.glob(common.root("/etc/modules-load.d/*.conf"))) + [common.root("/etc/modules")]:
        try:
            with open(f) as fh:
                for line in fh:
                    line = line.split("#", 1)[0].strip()
                    if line:
                        wanted.append(line.replace("-", "_"))
        except OSError:
            continue
    return wanted


def boot_modules() -> None:
    for m in ("ib_core", "mlx5_core", "ib_uverbs", "mlx5_ib", "ib_ipoib"):
        common.module_load(m)
    v = common.installed_driver_version()
    if v:
        for m in ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm"):
            common.module_load(m, v)
        common.kmsg(f"NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  {v}  Release Build")
    wanted = _wanted_modules()
    for m in wanted:
        if m in common.KNOWN_MODULES and (not m.startswith("nvidia") or v):
            ok, msg = common.module_load(m, v if m.startswith("nvidia") else None)
            if not ok:
                common.kmsg(msg, 3)


def boot(argv: list[str]) -> None:
    """What the kernel and udev did before userspace on a real node: sysfs, the loaded modules."""
    os.makedirs(common.run_dir(), exist_ok=True)
    bt = os.path.join(common.run_dir(), "boot_time")
    if not os.path.exists(bt):
        with open(bt, "w") as f:
            f.write(f"{time.time()}\n")
    if "--no-mounts" not in argv:
        setup_sys_class()
        setup_sys_module()
    if not os.path.exists(os.path.join(common.run_dir(), "modules.json")):
        common.write_json(os.path.join(common.run_dir(), "modules.json"), {})
        boot_modules()
    sync_ib(common.load_hw())


APPLIED = "agent.applied"  # the hw.json generation the agent last brought onto the node's surfaces
HW_WATCH_S = 0.1


def _mtime() -> int | None:
    try:
        return os.stat(os.path.join(common.sim_dir(), "hw.json")).st_mtime_ns
    except OSError:
        return None


def main(argv: list[str]) -> int:
    """``agent --boot``: the unit's ExecStartPre (sysfs and modules before the driver's services);
    ``agent``: the loop keeping sysfs, netdevs and bond0 in step with hw.json and the node's config."""
    boot(argv)
    if "--boot" in argv:
        return 0
    once = "--once" in argv
    state: dict = {}
    events = link_events()
    last_mtime = None
    hw = common.load_hw()
    while True:
        try:
            m = _mtime()
            if m != last_mtime:
                hw = common.load_hw()
                last_mtime = m
                sync_ib(hw)
            sync_ib_netdevs(hw, state)
            sync_bond(state)
            faultops.retry_pending()
        except Exception as exc:  # keep the agent alive; say what failed
            common.err(f"clustercert-lab-agent: {type(exc).__name__}: {exc}\n")
        common.write_text(os.path.join(common.run_dir(), "agent.heartbeat"), f"{time.time()}\n")
        # what the node's surfaces show now: the host's `lab fault` / `lab heal` wait for it
        common.write_text(os.path.join(common.run_dir(), APPLIED), f"{hw.get('generation', 0)}\n")
        if once:
            return 0
        watch_bond(state, 1.0, events, lambda seen=last_mtime: _mtime() != seen)
