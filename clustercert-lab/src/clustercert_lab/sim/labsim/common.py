"""Shared helpers of the node-side simulator: where state lives, hw.json, the module table."""

from __future__ import annotations

import os
import sys
import time

try:  # json's C half: the json package itself imports re, a third of a simulated tool's start-up
    import _json
except ImportError:  # another Python: the json package
    _json = None

BANNER = "clustercert lab simulation (simulated hardware; not a real device)"


def sim_dir() -> str:
    return os.environ.get("CLUSTERCERT_LAB_SIM_DIR", "/var/lib/clustercert-lab")


def run_dir() -> str:
    """Volatile node state (loaded modules...): lost on reboot, as a kernel's state is."""
    return os.environ.get("CLUSTERCERT_LAB_RUN_DIR", "/run/clustercert-lab")


def state_dir() -> str:
    """Persistent node-local state of the simulator (backups taken by faults)."""
    return os.environ.get("CLUSTERCERT_LAB_STATE_DIR", "/var/lib/clustercert-lab-node")


def root(path: str) -> str:
    """``path`` under the test root (CLUSTERCERT_LAB_ROOT, empty inside a node)."""
    return os.environ.get("CLUSTERCERT_LAB_ROOT", "") + path


class _DecoderSettings:
    """What the C scanner reads from a json.JSONDecoder: json.loads's defaults."""
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}.__getitem__


_scanner = None


def loads(text: str):
    """json.loads(text), through json's C scanner where there is one. Bad JSON: ValueError."""
    global _scanner
    if _json is None:
        import json
        return json.loads(text)
    if _scanner is None:
        _scanner = _json.make_scanner(_DecoderSettings())
    start = len(text) - len(text.lstrip())
    try:
        obj, end = _scanner(text, start)
    except StopIteration as exc:
        raise ValueError(f"no JSON value at character {exc.value}") from None
    if text[end:].strip():
        raise ValueError(f"extra data after JSON at character {end}")
    return obj


def _unserialisable(o):
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def dumps(data) -> str:
    """json.dumps(data), through json's C encoder where there is one."""
    if _json is None:
        import json
        return json.dumps(data)
    encode = _json.make_encoder(None, _unserialisable, _json.encode_basestring_ascii, None, ": ", ", ", False,
                                False, True)
    return "".join(encode(data, 0))


def load_hw() -> dict:
    with open(os.path.join(sim_dir(), "hw.json")) as f:
        return loads(f.read())


def write_json(path: str, data, pretty: bool = True) -> None:
    """``data`` as JSON at ``path``, replaced at once; ``pretty``: indented, keys sorted (json)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    if pretty:
        import json
        text = json.dumps(data, indent=1, sort_keys=True)
    else:
        text = dumps(data)
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def read_json(path: str, default):
    try:
        with open(path) as f:
            return loads(f.read())
    except (OSError, ValueError):
        return default


def write_text(path: str, text: str, always: bool = False) -> bool:
    """Write if changed (``always``: write anyway, as a tool that saves its output does -- the file's
    mtime moves); returns True when it wrote."""
    try:
        with open(path) as f:
            if f.read() == text and not always:
                return False
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        # sysfs-like tmpfs files can always be replaced; fall back to writing in place
        with open(path, "w") as f:
            f.write(text)
    return True


def hang_if_configured(tool: str, hw: dict) -> None:
    """probe_hang fault: the named tool never returns (until killed)."""
    if tool in hw.get("hanging_tools", []):
        while True:
            time.sleep(3600)


def out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def err(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


# ---- module table (what `lsmod` shows, what /sys/module/<m> holds) -----------------------------

MODULES_FILE = "modules.json"

# name -> (size, dependencies that must be loaded first)
KNOWN_MODULES: dict[str, tuple[int, list[str]]] = {
    "nvidia": (11309056, []),
    "nvidia_uvm": (4911104, ["nvidia"]),
    "nvidia_modeset": (1515520, ["nvidia"]),
    "nvidia_drm": (126976, ["nvidia_modeset"]),
    "nvidia_peermem": (16384, ["nvidia", "ib_uverbs"]),
    "ib_core": (495616, []),
    "ib_uverbs": (196608, ["ib_core"]),
    "mlx5_core": (2465792, []),
    "mlx5_ib": (495616, ["mlx5_core", "ib_uverbs", "ib_core"]),
    "ib_ipoib": (155648, ["ib_core"]),
}


def modules() -> dict:
    return read_json(os.path.join(run_dir(), MODULES_FILE), {})


def _sys_module(name: str) -> str:
    return root(f"/sys/module/{name}")


def _write_module_sysfs(name: str, info: dict) -> None:
    base = _sys_module(name)
    try:
        os.makedirs(base, exist_ok=True)
        write_text(base + "/initstate", "live\n")
        write_text(base + "/refcnt", f"{len(info.get('used_by', []))}\n")
        if info.get("version"):
            write_text(base + "/version", info["version"] + "\n")
    except OSError:
        pass  # no writable /sys/module overlay (e.g. on a host): the table is still right


def _remove_module_sysfs(name: str) -> None:
    base = _sys_module(name)
    for f in ("initstate", "refcnt", "version"):
        try:
            os.unlink(os.path.join(base, f))
        except OSError:
            pass
    try:
        os.rmdir(base)
    except OSError:
        pass


def module_load(name: str, version: str | None = None) -> tuple[bool, str]:
    """Load a simulated module. Returns (ok, error message in modprobe's words)."""
    table = modules()
    if name in table:
        return True, ""
    if name not in KNOWN_MODULES:
        return False, (f"modprobe: FATAL: Module {name} not found in directory "
                       f"/lib/modules/{os.uname().release}")
    size, deps = KNOWN_MODULES[name]
    missing = [d for d in deps if d not in table]
    if name == "nvidia_peermem" and any(d.startswith("ib_") for d in missing):
        # real symptom: nvidia_peermem needs ib_core symbols from the OFED stack
        return False, ("modprobe: ERROR: could not insert 'nvidia_peermem': Unknown symbol in module, or "
                       "unknown parameter (see dmesg)")
    for d in missing:
        ok, msg = module_load(d, version if d.startswith("nvidia") else None)
        if not ok:
            return ok, msg
        table = modules()
    info = {"size": size, "used_by": [], "version": version or ""}
    table[name] = info
    for d in deps:
        if name not in table[d]["used_by"]:
            table[d]["used_by"].append(name)
    write_json(os.path.join(run_dir(), MODULES_FILE), table)
    for m, i in table.items():
        _write_module_sysfs(m, i)
    return True, ""


def module_unload(name: str) -> tuple[bool, str]:
    table = modules()
    if name not in table:
        return False, f"modprobe: FATAL: Module {name} is not currently loaded"
    if table[name]["used_by"]:
        return False, f"modprobe: FATAL: Module {name} is in use."
    del table[name]
    for i in table.values():
        if name in i["used_by"]:
            i["used_by"].remove(name)
    write_json(os.path.join(run_dir(), MODULES_FILE), table)
    _remove_module_sysfs(name)
    for m, i in table.items():
        _write_module_sysfs(m, i)
    return True, ""


def loaded_driver_version() -> str | None:
    info = modules().get("nvidia")
    return info.get("version") if info else None


def library_version(hw: dict) -> str:
    """Version of the installed user-space driver (set by the package's wrapper)."""
    return os.environ.get("CLUSTERCERT_LAB_LIB_VERSION") or hw["driver"]["version"]


def pid_alive(pidfile: str) -> bool:
    try:
        with open(root(pidfile)) as f:
            pid = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---- GPUs busy with a simulated workload -----------------------------------------------------------

BUSY_DIR = "busy"


def mark_busy(gpu_indices: list[int]) -> str:
    """A running workload (all_reduce_perf) claims GPUs for as long as its process lives: what the
    simulated nvidia-smi reports as utilisation. Returns the marker to pass to clear_busy()."""
    for stale, _rec in _busy_markers(stale=True):  # left by a workload killed at its timeout
        clear_busy(stale)
    path = os.path.join(run_dir(), BUSY_DIR, f"{os.getpid()}.json")
    write_json(path, {"pid": os.getpid(), "gpus": list(gpu_indices)}, pretty=False)
    return path


def clear_busy(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def busy_gpus() -> set[int]:
    """Indices of GPUs a live workload process has claimed (markers of dead processes are ignored:
    a workload killed at its timeout stops using its GPUs)."""
    out: set[int] = set()
    for _path, rec in _busy_markers():
        out.update(int(i) for i in rec.get("gpus", []))
    return out


def _alive(pid) -> bool:
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


def _busy_markers(stale: bool = False) -> list[tuple[str, dict]]:
    """(path, record) of the live workload markers, or of the dead ones with ``stale``."""
    d = os.path.join(run_dir(), BUSY_DIR)
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return []
    out = []
    for name in names:
        path = os.path.join(d, name)
        rec = read_json(path, None)
        if isinstance(rec, dict) and _alive(rec.get("pid")) != stale:
            out.append((path, rec))
    return out


PERSISTENCED_PID = "/run/nvidia-persistenced/nvidia-persistenced.pid"
FABRICMANAGER_PID = "/run/nvidia-fabricmanager/nv-fabricmanager.pid"
HOSTENGINE_PID = "/run/nvidia-dcgm/nv-hostengine.pid"


def persistence_on() -> bool:
    return pid_alive(PERSISTENCED_PID)


def fabricmanager_running() -> bool:
    return pid_alive(FABRICMANAGER_PID)


def present_gpus(hw: dict) -> list[dict]:
    return [g for g in hw["gpus"] if g.get("present", True)]


def fabric_state(hw: dict, gpu: dict) -> str:
    if not hw.get("nvswitches"):
        return "N/A"
    return "Completed" if fabricmanager_running() else "In Progress"


def fabric_status(hw: dict, gpu: dict, state: str | None = None) -> str:
    """The fabric registration's status: Success once Completed -- unless the GPU's registration failed
    (gpu_fabric_degraded: its ``fabric_error``, an NVML error string) --, N/A before."""
    state = state or fabric_state(hw, gpu)
    if state != "Completed":
        return "N/A"
    return gpu.get("fabric_error") or "Success"


def dpkg_version(package: str) -> str | None:
    """Installed version of a Debian package, read from dpkg's status file (None if not installed)."""
    try:
        with open(root("/var/lib/dpkg/status")) as f:
            text = f.read()
    except OSError:
        return None
    for stanza in text.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            k, _, v = line.partition(":")
            fields[k] = v.strip()
        if fields.get("Package") == package and fields.get("Status", "").endswith(" installed"):
            return fields.get("Version")
    return None


def upstream(version: str | None) -> str | None:
    """Debian version -> upstream part (570.172.08-1 -> 570.172.08; 1:2.3-4 -> 2.3)."""
    if not version:
        return None
    v = version.split(":", 1)[-1]
    return v.rsplit("-", 1)[0] if "-" in v else v


DRIVER_KMOD_PACKAGES = ("nvidia-kernel-open-dkms", "nvidia-kernel-dkms")


def installed_driver_version() -> str | None:
    """Version of the installed NVIDIA kernel module package (what `modprobe nvidia` would load)."""
    if os.environ.get("CLUSTERCERT_LAB_KMOD_VERSION"):
        return os.environ["CLUSTERCERT_LAB_KMOD_VERSION"]
    for p in DRIVER_KMOD_PACKAGES:
        v = upstream(dpkg_version(p))
        if v:
            return v
    return None


# ---- kernel log ---------------------------------------------------------------------------------

def boot_time() -> float:
    try:
        with open(os.path.join(run_dir(), "boot_time")) as f:
            return float(f.read().strip())
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except OSError:
        pass
    return time.time()


def kmsg(msg: str, level: int = 6) -> None:
    os.makedirs(run_dir(), exist_ok=True)
    with open(os.path.join(run_dir(), "kmsg.log"), "a") as f:
        f.write(dumps([time.time(), level, msg]) + "\n")


def xid_line(hw: dict, ev: dict) -> str:
    g = next((g for g in hw["gpus"] if g["index"] == ev.get("gpu", 0)), hw["gpus"][0])
    pci = g["bus_id"][4:-2].lower()
    return f"NVRM: Xid (PCI:{pci}): {ev['xid']}, pid='<unknown>', name=<unknown>, {ev.get('message', '')}"


def kmsg_records(hw: dict) -> list[tuple[float, int, str]]:
    recs: list[tuple[float, int, str]] = []
    boot = boot_time()
    recs.append((boot, 5, f"Linux version {os.uname().release} (clustercert lab node kernel log; {BANNER})"))
    try:
        with open(os.path.join(run_dir(), "kmsg.log")) as f:
            for line in f:
                try:
                    t, lvl, msg = loads(line)
                except ValueError:
                    continue
                recs.append((float(t), int(lvl), msg))
    except OSError:
        pass
    for ev in hw.get("xid_events", []):
        t = float(ev.get("time", boot))
        if t >= boot - 1:  # a reboot empties the kernel ring buffer, as on a real node
            recs.append((t, 4, xid_line(hw, ev)))
    recs.sort(key=lambda r: r[0])
    return recs
