"""Parsers for the NVIDIA container stack and Docker.

``nvidia-ctk`` accepts the outputs of ``nvidia-ctk --version``, ``nvidia-container-runtime-hook
--version`` (both: ``<Component> version X`` + ``commit: ...``), ``nvidia-ctk cdi list`` (CDI device
names) and the logrus logs of ``nvidia-ctk cdi generate`` / ``runtime configure``::

    {"mode": "version"|"cdi-list"|"log",
     "ok": bool,                      # False on a Go panic or any ERRO/FATA/PANI log line
     "component": str|None, "version": str|None, "commit": str|None,   # mode "version"
     "cdi_devices": [str],            # "nvidia.com/gpu=0", ... (mode "cdi-list")
     "driver_version": str|None,      # "Using driver version X" (log)
     "selected_devices": [str],       # "Selecting /dev/nvidia0 as ..." (log)
     "log": {"info": int, "warning": int, "error": int},  # counts per level
     "errors": [str],                 # ERRO/FATA/PANI messages
     "panic": str|None}               # "runtime error: invalid memory address ..." after "panic:"

``nvidia-container-cli-info`` (``nvidia-container-cli info``, with or without ``--debug`` lines)::

    {"nvrm_version": str|None, "cuda_version": str|None,   # None for "(null)"
     "devices": [{"index": int, "minor": int|None, "model": str|None, "brand": str|None,
                  "uuid": str|None, "bus_id": str|None, "architecture": str|None}],
     "ok": bool}     # False when NVRM version or a device UUID/bus is "(null)" (driver not visible)

``docker-info`` (``docker info``)::

    {"server_version": str|None, "runtimes": [str], "default_runtime": str|None,
     "nvidia_runtime": bool, "cgroup_driver": str|None, "cgroup_version": str|None,
     "kernel_version": str|None, "storage_driver": str|None, "server_error": str|None}

Unrecognised text raises ParseError.
"""

from __future__ import annotations

import re

from clustercert.parsers._nvutil import bus_id, na, require_text
from clustercert.parsers.base import ParseError, register

_VERSION_RE = re.compile(
    r"^(?P<comp>NVIDIA Container [A-Za-z ]+?|nvidia-ctk|[\w-]+) version (?P<ver>\S+)\s*$"
)
_COMMIT_RE = re.compile(r"^commit:\s*(\S+)")
_LOGRUS_RE = re.compile(r"^(?P<lvl>INFO|WARN|ERRO|FATA|PANI|DEBU|TRAC)\[\d+\]\s*(?P<msg>.*?)\s*$")
_CDI_RE = re.compile(r"^[a-z0-9.-]+\.[a-z]+/[a-z0-9._-]+=\S+$")


def _logrus_line(out: dict, lvl: str, msg: str) -> None:
    """A logrus line: counted by level (an error also kept, and the output not ok), and the driver version
    and the devices selected that the runtime hook logs."""
    if lvl == "INFO" or lvl in ("DEBU", "TRAC"):
        out["log"]["info"] += 1
    elif lvl == "WARN":
        out["log"]["warning"] += 1
    else:
        out["log"]["error"] += 1
        out["errors"].append(msg)
        out["ok"] = False
    dm = re.match(r"^Using driver version (\S+)", msg)
    if dm:
        out["driver_version"] = dm.group(1)
    sm = re.match(r"^Selecting (\S+) as ", msg)
    if sm:
        out["selected_devices"].append(sm.group(1))


@register("nvidia-ctk", "nvidia-ctk / runtime hook: --version, cdi list, logrus logs (errors, panics)")
def parse_nvidia_ctk(text: str) -> dict:
    kind = "nvidia-ctk"
    text = require_text(kind, text, "nvidia-ctk output ('... version X', CDI device names or logrus lines)")
    out: dict = {
        "mode": None,
        "ok": True,
        "component": None,
        "version": None,
        "commit": None,
        "cdi_devices": [],
        "driver_version": None,
        "selected_devices": [],
        "log": {"info": 0, "warning": 0, "error": 0},
        "errors": [],
        "panic": None,
    }
    lines = [ln.rstrip() for ln in text.split("\n")]
    log_lines = 0
    for ln in lines:
        s = ln.strip()
        if not s:
            continue
        m = _VERSION_RE.match(s)
        if m and out["version"] is None and not _LOGRUS_RE.match(s):
            out["component"] = m.group("comp")
            out["version"] = m.group("ver")
            continue
        m = _COMMIT_RE.match(s)
        if m:
            out["commit"] = m.group(1)
            continue
        if s.startswith("panic:"):
            out["panic"] = s[len("panic:") :].strip()
            out["ok"] = False
            continue
        m = _LOGRUS_RE.match(s)
        if m:
            log_lines += 1
            _logrus_line(out, m.group("lvl"), m.group("msg"))
            continue
        if _CDI_RE.match(s):
            out["cdi_devices"].append(s)
            continue
    out["mode"] = _ctk_mode(out, log_lines)
    return out


def _ctk_mode(out: dict, log_lines: int) -> str:
    """What the output was: a --version, a CDI device list, or logs (logrus lines or a panic)."""
    if out["version"] is not None and not log_lines and not out["cdi_devices"]:
        return "version"
    if out["cdi_devices"]:
        return "cdi-list"
    if log_lines or out["panic"]:
        return "log"
    raise ParseError("nvidia-ctk",
                     "expected '<component> version X', CDI device names or logrus 'INFO[0000] ...' lines")


_INFO_KV_RE = re.compile(
    r"^(?P<k>NVRM version|CUDA version|Device Index|Device Minor|Model|Brand|GPU UUID|Bus "
    r"Location|Architecture):\s*(?P<v>.*)$"
)


_DEVICE_KEYS = {"Device Minor": "minor", "Model": "model", "Brand": "brand", "GPU UUID": "uuid",
                "Bus Location": "bus_id", "Architecture": "architecture"}


def _device_field(cur: dict, k: str, val: str | None) -> None:
    key = _DEVICE_KEYS[k]
    if key == "minor":
        cur[key] = int(val) if val and val.isdigit() else None
    elif key == "bus_id":
        cur[key] = bus_id(val)
    else:
        cur[key] = val


@register("nvidia-container-cli-info", "nvidia-container-cli info: NVRM/CUDA versions and devices")
def parse_container_cli_info(text: str) -> dict:
    kind = "nvidia-container-cli-info"
    text = require_text(kind, text, "'NVRM version:' / 'CUDA version:' / 'Device Index:' lines")
    out: dict = {"nvrm_version": None, "cuda_version": None, "devices": [], "ok": True}
    cur = None
    seen = False
    for ln in text.split("\n"):
        m = _INFO_KV_RE.match(ln.strip())
        if not m:
            continue
        seen = True
        k, v = m.group("k"), m.group("v").strip()
        if k == "NVRM version":
            out["nvrm_version"] = na(v)
        elif k == "CUDA version":
            out["cuda_version"] = na(v)
        elif k == "Device Index":
            cur = {"index": int(v) if v.isdigit() else None, "minor": None, "model": None, "brand": None,
                   "uuid": None, "bus_id": None, "architecture": None}
            out["devices"].append(cur)
        elif cur is not None:
            _device_field(cur, k, na(v))
    if not seen:
        raise ParseError(
            kind, "expected 'NVRM version:' and 'Device Index:' lines from nvidia-container-cli info"
        )
    if (
        out["nvrm_version"] is None
        or not out["devices"]
        or any(d["uuid"] is None or d["bus_id"] is None for d in out["devices"])
    ):
        out["ok"] = False
    return out


@register("docker-info", "docker info: server version, runtimes (nvidia?), default runtime, cgroup driver")
def parse_docker_info(text: str) -> dict:
    kind = "docker-info"
    text = require_text(kind, text, "docker info output ('Runtimes:' / 'Server Version:' lines)")
    kv: dict[str, str] = {}
    server_error = None
    for ln in text.split("\n"):
        s = ln.strip()
        if s.startswith("ERROR:") or s.startswith("Cannot connect to the Docker daemon"):
            server_error = s
            continue
        if ":" in s:
            k, v = s.split(":", 1)
            k = k.strip()
            if k not in kv:
                kv[k] = v.strip()
    if "Runtimes" not in kv and "Server Version" not in kv and server_error is None:
        raise ParseError(kind, "expected docker info output with 'Server Version:' or 'Runtimes:'")
    runtimes = kv.get("Runtimes", "").split()
    return {
        "server_version": kv.get("Server Version") or None,
        "runtimes": runtimes,
        "default_runtime": kv.get("Default Runtime") or None,
        "nvidia_runtime": "nvidia" in runtimes,
        "cgroup_driver": kv.get("Cgroup Driver") or None,
        "cgroup_version": kv.get("Cgroup Version") or None,
        "kernel_version": kv.get("Kernel Version") or None,
        "storage_driver": kv.get("Storage Driver") or None,
        "server_error": server_error,
    }
