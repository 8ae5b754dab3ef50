"""Configuration faults, applied INSIDE a node the way a person or an upgrade would change it.

``labsim fault apply KIND JSON`` / ``labsim fault heal KIND JSON`` (run by faults.py through
NodeHandle.exec). When the thing to break is not there yet (a fault in the spec is applied right
after `lab up`, before any role installed the software), the fault is recorded as pending and the
agent applies it as soon as its target appears; it is then a one-off change, like a person's: a
later role run may repair it.
"""

from __future__ import annotations

import json
import os
import subprocess

from . import common

LIMITS_FILE = "/etc/security/limits.d/zz-local-memlock.conf"
RUNTIME_FILES = ["/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml",
                 "/etc/docker/daemon.json",
                 "/etc/crio/crio.conf.d/99-nvidia.toml"]
TIME_UNITS = ["chrony.service", "chronyd.service", "systemd-timesyncd.service", "ntpsec.service",
              "ntp.service"]
DRIVER_PACKAGES = ["nvidia-driver", "nvidia-open", "cuda-drivers", "cuda-drivers-570", "nvidia-smi",
                   "libnvidia-ml1",
                   "nvidia-persistenced", "nvidia-kernel-open-dkms", "nvidia-kernel-dkms", "libcuda1",
                   "nvidia-fabricmanager-570", "nvidia-fabricmanager"]


def _pending_path() -> str:
    return os.path.join(common.state_dir(), "pending.json")


def _backup_path(kind: str) -> str:
    return os.path.join(common.state_dir(), "backup", kind + ".json")


def sh(argv: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def _unit_known(unit: str) -> bool:
    r = sh(["systemctl", "show", "-p", "LoadState", "--value", unit], timeout=30)
    return r.stdout.strip() == "loaded"


# ---- each kind: apply() -> True (done) / False (target not there yet: pending) ---------------

def memlock_apply(p: dict) -> bool:
    path = common.root(LIMITS_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    common.write_text(path,
                      "# local change: memlock limited to 64 "
                      "KiB\n*\tsoft\tmemlock\t64\n*\thard\tmemlock\t64\n"
                      "root\tsoft\tmemlock\t64\nroot\thard\tmemlock\t64\n")
    return True


def memlock_heal(p: dict) -> None:
    try:
        os.unlink(common.root(LIMITS_FILE))
    except FileNotFoundError:
        pass


def _runtime_unconfigured(f: str, text: str) -> str | None:
    """A container runtime's configuration file ``f`` without its NVIDIA runtime (None: the file goes; the
    text as it is where it names none)."""
    # only this fault needs the system module (tomllib, re): the idle agent, which imports this module,
    # stays small (the lab's memory per idle node is a measured budget: README, The lab)
    from .system import containerd_has_nvidia, remove_containerd_nvidia

    if f.endswith("config.toml") and containerd_has_nvidia(text):
        return remove_containerd_nvidia(text)
    if f.endswith("99-nvidia.toml"):
        return None
    if f.endswith("daemon.json"):
        try:
            data = json.loads(text or "{}")
        except ValueError:
            return text
        if "nvidia" in data.get("runtimes", {}):
            data["runtimes"].pop("nvidia")
            if data.get("default-runtime") == "nvidia":
                data.pop("default-runtime")
            return json.dumps(data, indent=4) + "\n"
    return text


def runtime_apply(p: dict) -> bool:
    backup = {}
    for f in RUNTIME_FILES:
        path = common.root(f)
        try:
            with open(path) as fh:
                text = fh.read()
        except OSError:
            continue
        new = _runtime_unconfigured(f, text)
        if new != text:
            backup[f] = text
            if new is None:
                os.unlink(path)
            else:
                common.write_text(path, new)
    if not backup:
        return False
    common.write_json(common.root(_backup_path("container_runtime_unconfigured")), backup)
    for unit in ("containerd.service", "docker.service", "crio.service"):
        sh(["systemctl", "try-restart", unit], timeout=60)
    return True


def runtime_heal(p: dict) -> None:
    backup = common.read_json(common.root(_backup_path("container_runtime_unconfigured")), {})
    for f, text in backup.items():
        common.write_text(common.root(f), text)
    for unit in ("containerd.service", "docker.service", "crio.service"):
        sh(["systemctl", "try-restart", unit], timeout=60)


def peermem_apply(p: dict) -> bool:
    if "nvidia_peermem" not in common.modules():
        return False
    r = sh(["modprobe", "-r", "nvidia_peermem"], timeout=60)
    if r.returncode != 0:
        ok, _ = common.module_unload("nvidia_peermem")
        return ok
    return True


def peermem_heal(p: dict) -> None:
    r = sh(["modprobe", "nvidia_peermem"], timeout=60)
    if r.returncode != 0:
        common.module_load("nvidia_peermem", common.loaded_driver_version())


def clock_apply(p: dict) -> bool:
    stopped = []
    for u in TIME_UNITS:
        if _unit_known(u):
            active = sh(["systemctl", "is-active", u], timeout=30).stdout.strip() == "active"
            enabled = sh(["systemctl", "is-enabled", u], timeout=30).stdout.strip() == "enabled"
            sh(["systemctl", "disable", "--now", u], timeout=60)
            stopped.append({"unit": u, "active": active, "enabled": enabled})
    sh(["timedatectl", "set-ntp", "false"], timeout=30)
    if not stopped:
        return False
    common.write_json(common.root(_backup_path("clock_unsynced")), stopped)
    return True


def clock_heal(p: dict) -> None:
    for s in common.read_json(common.root(_backup_path("clock_unsynced")), []):
        if s.get("enabled"):
            sh(["systemctl", "enable", s["unit"]], timeout=60)
        if s.get("active"):
            sh(["systemctl", "start", s["unit"]], timeout=60)


def fm_apply(p: dict) -> bool:
    units = [u for u in ("nvidia-fabricmanager.service",) if _unit_known(u)]
    if not units:
        return False
    sh(["systemctl", "stop", units[0]], timeout=60)
    return True


def fm_heal(p: dict) -> None:
    sh(["systemctl", "start", "nvidia-fabricmanager.service"], timeout=60)


def _apt_install(specs: list[str]) -> tuple[bool, str]:
    r = sh(["apt-get", "install", "-y", "-q", "--allow-downgrades", "--allow-change-held-packages",
            "-o", "Dpkg::Options::=--force-confold"] + specs)
    return r.returncode == 0, (r.stdout[-2000:] + r.stderr[-2000:])


def _held(pkgs) -> list[str]:
    """Which of ``pkgs`` apt holds now."""
    r = sh(["apt-mark", "showhold"], timeout=60)
    return sorted(set(r.stdout.split()) & set(pkgs)) if r.returncode == 0 else []


def _save_packages(kind: str, installed: dict[str, str]) -> None:
    """What a package fault is about to change: the versions, and which of them apt held (an upgrade drops the
    hold; healing puts both back, as the node was)."""
    common.write_json(common.root(_backup_path(kind)), {"versions": installed, "held": _held(installed)})


def _move_packages(kind: str, installed: dict[str, str], version: str, what: str) -> None:
    """Every package of ``installed`` to ``version`` in one apt transaction, as an upgrade moves them, after
    saving what healing puts back."""
    _save_packages(kind, installed)
    ok, log = _apt_install([f"{q}={version}" for q in installed])
    if not ok:
        raise RuntimeError(f"{what} failed: {log}")


def _restore_packages(kind: str) -> None:
    b = common.read_json(common.root(_backup_path(kind)), None)
    if not b:
        return
    versions, held = (b["versions"], b.get("held", [])) if "versions" in b else (b, [])
    ok, log = _apt_install([f"{q}={v}" for q, v in versions.items()])
    if not ok:
        raise RuntimeError(f"apt-get install failed: {log}")
    if held:
        r = sh(["apt-mark", "hold", *held], timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"apt-mark hold {' '.join(held)} failed: {r.stderr[-500:]}")


def _dpkg_locked() -> bool:
    return sh(["fuser", "/var/lib/dpkg/lock-frontend"], timeout=10).returncode == 0


# packages pinned to each other's exact version move together, as an upgrade moves them
FAMILIES = [["libnccl2", "libnccl-dev"],
            ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
             "libnvidia-container1"]]


def drift_apply(p: dict) -> bool:
    pkg, ver = p["package"], p["version"]
    cur = common.dpkg_version(pkg)
    if cur is None:
        return False
    if cur == ver:
        return True
    family = next((f for f in FAMILIES if pkg in f), [pkg])
    installed = {q: common.dpkg_version(q) for q in family}
    installed = {q: v for q, v in installed.items() if v}
    _move_packages("package_drift", installed, ver, f"apt-get install {pkg}={ver}")
    return True


def drift_heal(p: dict) -> None:
    _restore_packages("package_drift")


def driver_apply(p: dict) -> bool:
    ver = p["version"]
    installed = {pkg: common.dpkg_version(pkg) for pkg in DRIVER_PACKAGES}
    installed = {k: v for k, v in installed.items() if v}
    if not installed or "nvidia-smi" not in installed:
        return False
    if all(v == ver for v in installed.values()):
        return True
    _move_packages("driver_version_mismatch", installed, ver, f"driver upgrade to {ver}")
    return True


def driver_heal(p: dict) -> None:
    _restore_packages("driver_version_mismatch")


SHARED_MOUNT = "/shared"  # the lab's shared mount (node.py binds it; /etc/fstab mounts it at boot)


def mount_apply(p: dict) -> bool:
    r = sh(["umount", SHARED_MOUNT], timeout=60)
    if r.returncode != 0 and sh(["mountpoint", "-q", SHARED_MOUNT], timeout=30).returncode == 0:
        raise RuntimeError(f"umount {SHARED_MOUNT} failed: {(r.stderr or r.stdout).strip()}")
    return True


def mount_heal(p: dict) -> None:
    if sh(["mountpoint", "-q", SHARED_MOUNT], timeout=30).returncode != 0:
        r = sh(["mount", SHARED_MOUNT], timeout=60)  # its /etc/fstab entry, as an admin would
        if r.returncode != 0:
            raise RuntimeError(f"mount {SHARED_MOUNT} failed: {(r.stderr or r.stdout).strip()}")


OPS = {
    "mount_missing": (mount_apply, mount_heal),
    "memlock_limited": (memlock_apply, memlock_heal),
    "container_runtime_unconfigured": (runtime_apply, runtime_heal),
    "peermem_unloaded": (peermem_apply, peermem_heal),
    "clock_unsynced": (clock_apply, clock_heal),
    "fabricmanager_stopped": (fm_apply, fm_heal),
    "package_drift": (drift_apply, drift_heal),
    "driver_version_mismatch": (driver_apply, driver_heal),
}


def _pending() -> list[dict]:
    return common.read_json(common.root(_pending_path()), [])


def _set_pending(items: list[dict]) -> None:
    common.write_json(common.root(_pending_path()), items)


def apply(kind: str, params: dict) -> str:
    done = OPS[kind][0](params)
    items = [i for i in _pending() if i["kind"] != kind]
    if not done:
        items.append({"kind": kind, "params": params})
    _set_pending(items)
    return "applied" if done else "pending"


def heal(kind: str, params: dict) -> str:
    items = _pending()
    was_pending = any(i["kind"] == kind for i in items)
    _set_pending([i for i in items if i["kind"] != kind])
    if not was_pending:
        OPS[kind][1](params)
    try:
        os.unlink(common.root(_backup_path(kind)))
    except FileNotFoundError:
        pass
    return "healed"


def retry_pending() -> None:
    items = _pending()
    if not items:
        return
    left = []
    for i in items:
        if i["kind"] in ("package_drift", "driver_version_mismatch") and _dpkg_locked():
            left.append(i)
            continue
        try:
            done = OPS[i["kind"]][0](i["params"])
        except Exception as exc:  # noqa: BLE001 - retried next round, reason in the journal
            common.err(f"clustercert-lab-agent: pending fault {i['kind']}: {exc}\n")
            done = False
        if done:
            common.kmsg(f"clustercert-lab: applied pending fault {i['kind']}", 5)
        else:
            left.append(i)
    if left != items:
        _set_pending(left)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("apply", "heal", "pending") or (argv[0] != "pending" and len(argv) < 2):
        common.err("usage: labsim fault apply|heal KIND [JSON] | labsim fault pending\n")
        return 2
    if argv[0] == "pending":
        common.out(json.dumps(_pending()) + "\n")
        return 0
    kind = argv[1]
    params = json.loads(argv[2]) if len(argv) > 2 else {}
    if kind not in OPS:
        common.err(f"labsim fault: {kind} is not a configuration fault\n")
        return 2
    try:
        result = apply(kind, params) if argv[0] == "apply" else heal(kind, params)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        common.err(f"labsim fault {argv[0]} {kind}: {exc}\n")
        return 1
    common.out(result + "\n")
    return 0

