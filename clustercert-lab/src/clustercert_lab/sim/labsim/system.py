"""Simulated system pieces: nvidia-ctk, nvidia-persistenced, nv-fabricmanager, lsmod/modprobe
helpers and the kernel log (dmesg)."""

from __future__ import annotations

import json
import os
import re
import time
import tomllib

from . import common

CTK_VERSION = os.environ.get("CLUSTERCERT_LAB_CTK_VERSION", "1.17.8")
CRI = 'plugins."io.containerd.grpc.v1.cri"'
CONTAINERD_NVIDIA = f"""
[{CRI}.containerd.runtimes.nvidia]
  privileged_without_host_devices = false
  runtime_engine = ""
  runtime_root = ""
  runtime_type = "io.containerd.runc.v2"

[{CRI}.containerd.runtimes.nvidia.options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
"""


def _log(level: str, msg: str) -> None:
    common.err(f"{level}[0000] {msg:<40}\n")


def containerd_has_nvidia(text: str) -> bool:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return False
    cri = data.get("plugins", {}).get("io.containerd.grpc.v1.cri", {})
    runtimes = cri.get("containerd", {}).get("runtimes", {})
    return "nvidia" in runtimes


def remove_containerd_nvidia(text: str) -> str:
    """Drop every [..runtimes.nvidia*] table and a default_runtime_name = "nvidia" line."""
    out, skip = [], False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("["):
            skip = s.startswith(f"[{CRI}.containerd.runtimes.nvidia")
        if skip:
            continue
        if re.match(r'\s*default_runtime_name\s*=\s*"nvidia"', line):
            line = line.replace('"nvidia"', '"runc"')
        out.append(line)
    return "\n".join(out).rstrip("\n") + "\n"


def _configure_containerd(path: str, set_default: bool) -> None:
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    _log("INFO", "Using config version 2")
    _log("INFO", 'Using CRI runtime plugin name "io.containerd.grpc.v1.cri"')
    if not text.strip():
        text = "version = 2\n"
    if not containerd_has_nvidia(text):
        text = text.rstrip("\n") + "\n" + CONTAINERD_NVIDIA
    if set_default and not re.search(r'default_runtime_name\s*=\s*"nvidia"', text):
        hdr = f"[{CRI}.containerd]"
        if hdr in text:
            text = re.sub(r'(?m)^(\s*default_runtime_name\s*=.*\n)', "", text)
            text = text.replace(hdr, hdr + '\n  default_runtime_name = "nvidia"', 1)
        else:
            text += f'\n{hdr}\n  default_runtime_name = "nvidia"\n'
    tomllib.loads(text)  # never write a config containerd cannot read
    common.write_text(path, text)
    _log("INFO", f"Wrote updated config to {path}")
    _log("INFO", "It is recommended that containerd daemon be restarted.")


def _configure_docker(path: str, set_default: bool) -> None:
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        data = {}
    data.setdefault("runtimes", {})["nvidia"] = {"args": [], "path": "nvidia-container-runtime"}
    if set_default:
        data["default-runtime"] = "nvidia"
    common.write_text(path, json.dumps(data, indent=4) + "\n")
    _log("INFO", f"Wrote updated config to {path}")
    _log("INFO", "It is recommended that docker daemon be restarted.")


def _configure_crio(path: str, set_default: bool) -> None:
    text = ('[crio]\n\n  [crio.runtime]\n' + ('    default_runtime = "nvidia"\n' if set_default else "")
            + '\n    [crio.runtime.runtimes]\n\n      [crio.runtime.runtimes.nvidia]\n'
              '        runtime_path = "/usr/bin/nvidia-container-runtime"\n        runtime_type = "oci"\n')
    common.write_text(path, text)
    _log("INFO", f"Wrote updated config to {path}")
    _log("INFO", "It is recommended that crio daemon be restarted.")


def cdi_spec(hw: dict) -> str:
    gpus = common.present_gpus(hw)
    drv = common.loaded_driver_version() or hw["driver"]["version"]
    lines = ["---", 'cdiVersion: 0.5.0', "containerEdits:", "  deviceNodes:", "  - path: /dev/nvidia-modeset",
             "  - path: /dev/nvidia-uvm", "  - path: /dev/nvidia-uvm-tools", "  - path: /dev/nvidiactl",
             "  env:", "  - NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu",
             "  hooks:", "  - args:", "    - nvidia-cdi-hook", "    - create-symlinks", "    - --link",
             f"    - libcuda.so.{drv}::/usr/lib/x86_64-linux-gnu/libcuda.so", "    hookName: createContainer",
             "    path: /usr/bin/nvidia-cdi-hook", "  mounts:", "  - containerPath: /usr/bin/nvidia-smi",
             "    hostPath: /usr/bin/nvidia-smi", "    options:", "    - ro", "    - nosuid", "    - nodev",
             "    - bind", "devices:"]
    for g in gpus:
        for name in (str(g["index"]), g["uuid"]):
            lines += ["- containerEdits:", "    deviceNodes:", f"    - path: /dev/nvidia{g['index']}",
                      f"  name: \"{name}\"" if name.startswith("GPU-") else f"  name: \"{name}\""]
    lines += ["- containerEdits:", "    deviceNodes:"]
    lines += [f"    - path: /dev/nvidia{g['index']}" for g in gpus]
    lines += ['  name: all', "kind: nvidia.com/gpu"]
    return "\n".join(lines) + "\n"


def _runtime_configure(opts: dict[str, str]) -> int:
    """nvidia-ctk runtime configure --runtime=R [--config=F] [--set-as-default]."""
    rt = opts.get("runtime", "docker")
    set_default = opts.get("set-as-default", "false") == "true"
    if rt == "containerd":
        _configure_containerd(common.root(opts.get("config", "/etc/containerd/config.toml")), set_default)
    elif rt == "docker":
        _configure_docker(common.root(opts.get("config", "/etc/docker/daemon.json")), set_default)
    elif rt == "crio":
        _configure_crio(common.root(opts.get("config", "/etc/crio/crio.conf.d/99-nvidia.toml")), set_default)
    else:
        common.err(f'ERRO[0000] unrecognized runtime \'{rt}\'\n')
        return 1
    return 0


def _cdi_generate(hw: dict, opts: dict[str, str]) -> int:
    """nvidia-ctk cdi generate [--output=F]."""
    if common.loaded_driver_version() is None:
        common.err("ERRO[0000] failed to generate CDI spec: failed to create device CDI specs: failed to "
                   "initalize NVML: ERROR_LIBRARY_NOT_FOUND\n")
        return 1
    spec = cdi_spec(hw)
    dest = opts.get("output")
    _log("INFO", f"Using driver version {common.loaded_driver_version()}")
    if dest:
        # nvidia-ctk saves the spec every time (its mtime is what container.cdi and the role compare
        # with the driver's install time): an unchanged spec is written again all the same
        common.write_text(common.root(dest), spec, always=True)
        _log("INFO", 'Generated CDI spec with version 0.5.0')
    else:
        common.out(spec)
    return 0


def _cdi_list() -> int:
    """nvidia-ctk cdi list: the devices of the CDI specs in /etc/cdi and /var/run/cdi."""
    names = []
    for d in ("/etc/cdi", "/var/run/cdi"):
        try:
            files = sorted(os.listdir(common.root(d)))
        except OSError:
            continue
        for fn in files:
            if not fn.endswith((".yaml", ".json")):
                continue
            with open(common.root(f"{d}/{fn}")) as f:
                text = f.read()
            kind = re.search(r"(?m)^kind: (\S+)", text)
            for n in re.findall(r'(?m)^  name: "?([^"\n]+)"?', text):
                names.append(f"{kind.group(1) if kind else 'nvidia.com/gpu'}={n}")
    _log("INFO", f"Found {len(names)} CDI devices")
    common.out("".join(n + "\n" for n in names))
    return 0


def nvidia_ctk(argv: list[str]) -> int:
    hw = common.load_hw()
    common.hang_if_configured("nvidia-ctk", hw)
    if not argv or argv[0] in ("--version", "-v", "version"):
        common.out(f"NVIDIA Container Toolkit CLI version {CTK_VERSION}\ncommit: clustercert-lab-simulation\n"
                   f"# {common.BANNER}\n")
        return 0
    opts = {}
    pos = []
    for a in argv:
        if a.startswith("--") and "=" in a:
            k, v = a[2:].split("=", 1)
            opts[k] = v
        elif a.startswith("--"):
            opts[a[2:]] = "true"
        else:
            pos.append(a)
    if pos[:2] == ["runtime", "configure"]:
        return _runtime_configure(opts)
    if pos[:2] == ["cdi", "generate"]:
        return _cdi_generate(hw, opts)
    if pos[:2] == ["cdi", "list"]:
        return _cdi_list()
    common.err("nvidia-ctk: the lab simulates 'runtime configure', 'cdi generate', 'cdi list' "
               f"({common.BANNER})\n")
    return 1


# ---------------------------------------------------------------- daemons

def _daemon(pidfile: str, name: str, argv: list[str], banner: str) -> int:
    """Run as a daemon that holds ``pidfile``; after the checks it becomes a tiny shell loop (a
    simulated daemon should not cost a Python interpreter per node)."""
    foreground = any(a in ("-f", "--foreground") for a in argv) or name == "nv-fabricmanager"
    if "--version" in argv or "-v" in argv:
        common.out(banner)
        return 0
    path = common.root(pidfile)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if not foreground:
        if os.fork() > 0:
            # parent: wait until the child wrote its pid file (systemd Type=forking)
            for _ in range(100):
                if common.pid_alive(pidfile):
                    return 0
                time.sleep(0.05)
            return 1
        os.setsid()
    # on TERM it ends its `sleep` too (else orphaned: a real daemon leaves no child behind)
    script = ('echo $$ > "$1"; trap \'kill $! 2>/dev/null; rm -f "$1"; exit 0\' TERM INT; '
              'while :; do sleep 3600 & wait $!; done')
    os.execv("/bin/sh", [f"/usr/bin/{name}", "-c", script, name, path])
    return 1


def persistenced(argv: list[str]) -> int:
    hw = common.load_hw()
    if common.loaded_driver_version() is None and "--version" not in argv:
        common.err("nvidia-persistenced failed to initialize. Check syslog for more details.\n")
        return 1
    return _daemon(common.PERSISTENCED_PID, "nvidia-persistenced", argv,
                   f"nvidia-persistenced:  version {common.library_version(hw)}\n# {common.BANNER}\n")


def hostengine(argv: list[str]) -> int:
    """nv-hostengine, the DCGM daemon dcgmi talks to; ``-n`` keeps it in the foreground (its unit's way)."""
    if "--version" in argv or "-v" in argv:
        common.out(f"nv-hostengine version 3.3.9\n# {common.BANNER}\n")
        return 0
    return _daemon(common.HOSTENGINE_PID, "nv-hostengine", argv + (["--foreground"] if "-n" in argv else []),
                   "")


def fabricmanager(argv: list[str]) -> int:
    hw = common.load_hw()
    v = os.environ.get("CLUSTERCERT_LAB_FM_VERSION") or common.library_version(hw)
    if "--version" in argv or "-v" in argv:
        common.out(f"Fabric Manager version is : {v}\nBuild Info - Branch: rel/gpu_drv/r{v.split('.')[0]}, "
                   f"Changelist: 0\n# {common.BANNER}\n")
        return 0
    loaded = common.loaded_driver_version()
    if loaded is None or (v != loaded):
        common.err(f"fabric manager NVIDIA GPU driver interface version {v} don't match with driver version "
                   f"{loaded}. Please update with matching NVIDIA driver package.\n")
        return 1
    if not hw.get("nvswitches"):
        common.err("NV_WARN_NOTHING_TO_DO\n")
        return 1
    return _daemon(common.FABRICMANAGER_PID, "nv-fabricmanager", argv, "")


# ---------------------------------------------------------------- kernel modules and log

def lsmod(argv: list[str]) -> int:
    table = common.modules()
    lines = ["Module                  Size  Used by"]
    for name in reversed(list(table)):
        info = table[name]
        used = ",".join(info["used_by"])
        lines.append(f"{name:<19} {info['size']:>8}  {len(info['used_by'])}{(' ' + used) if used else ''}")
    common.out("\n".join(lines) + "\n")
    return 0


def modload(argv: list[str]) -> int:
    """Target of the driver packages' modprobe.d ``install`` directives."""
    if not argv:
        return 1
    name = argv[0].replace("-", "_")
    version = None
    if name.startswith("nvidia"):
        hw = common.load_hw()
        version = common.installed_driver_version() or common.library_version(hw)
    ok, msg = common.module_load(name, version)
    if not ok:
        common.err(msg + "\n")
        return 1
    common.kmsg(_load_message(name, version))
    return 0


def _load_message(name: str, version: str | None) -> str:
    if name == "nvidia":
        return (f"NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  "
                f"(dvs-builder@U16-I3-B03-4-3)  Thu Jul 24 18:01:35 UTC 2025")
    if name == "nvidia_peermem":
        return "nvidia-peermem nv_mem_client_init: loaded"
    return f"{name}: module loaded"


def modunload(argv: list[str]) -> int:
    if not argv:
        return 1
    ok, msg = common.module_unload(argv[0].replace("-", "_"))
    if not ok:
        common.err(msg + "\n")
        return 1
    return 0


def dmesg(argv: list[str]) -> int:
    hw = common.load_hw()
    ctime = any(a in ("-T", "--ctime") for a in argv)
    iso = any(a.startswith("--time-format") and "iso" in a for a in argv) or "iso" in argv
    boot = common.boot_time()
    records = common.kmsg_records(hw)
    for t, _level, msg in records:
        rel = max(0.0, t - boot)
        if ctime:
            prefix = "[" + time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(t)) + "] "
        elif iso:
            prefix = (time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))
                      + f",{int((t % 1) * 1e6):06d}+00:00 ")
        else:
            prefix = f"[{rel:12.6f}] "
        common.out(prefix + msg + "\n")
    return 0
