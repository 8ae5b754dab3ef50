"""The lab's Slurm: Debian's slurm-wlm and munge on every lab node, slurmctld on the first node and slurmd on
all, as a site runs them (`clustercert lab up --slurm`, the spec's ``slurm: true``, `clustercert lab slurm
up|down`).

``up`` installs the two packages (apt, through the lab's apt proxy, as every node's apt does), writes one
munge key to every node, slurm.conf and gres.conf, starts the daemons and waits until `sinfo` shows every node
idle. It is idempotent: apt only where dpkg-query finds a package missing, a file only where it differs, a
daemon restarted only where its configuration changed or it is not running (and then the wait). ``down``
stops and disables the daemons and removes the GPU stand-in files; the packages and configuration stay,
so that a later ``up`` is quick. Commands run inside the nodes with NodeHandle.exec, each with its timeout.
"""

from __future__ import annotations

import base64
import secrets
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from clustercert_lab.errors import LabError
from clustercert_lab.node import NodeHandle

PACKAGES = ("slurm-wlm", "munge")
UNITS = ("slurmd", "slurmctld", "munge")
CLUSTER_NAME = "clustercert-lab"
PARTITION = "lab"
SLURM_CONF = "/etc/slurm/slurm.conf"
GRES_CONF = "/etc/slurm/gres.conf"
MUNGE_KEY = "/etc/munge/munge.key"
SLURMCTLD_LOG = "/var/log/slurm/slurmctld.log"
SLURMD_LOG = "/var/log/slurm/slurmd.log"
STATE_DIR = "/var/lib/slurm/slurmctld"

INSTALL_TIMEOUT_S = 900  # apt-get install of slurm-wlm and munge (their dependencies through the proxy)
COMMAND_TIMEOUT_S = 60  # any other command inside a node
IDLE_WAIT_S = 120  # until `sinfo` shows every node idle after a (re)start
SINFO_TIMEOUT_S = 30
# every node's CPUs as slurm.conf states them (RealMemory is the node's own: see slurm_conf)
NODE_HARDWARE = "CPUs=16 Boards=1 SocketsPerBoard=2 CoresPerSocket=8 ThreadsPerCore=1"

T = TypeVar("T")


# ------------------------------------------------------------------------------------ configuration


def slurm_conf(nodes: Sequence[tuple[str, str]], real_memory: dict[str, int], gpus: int) -> str:
    """slurm.conf for the lab: ``nodes`` as (name, management address), the first the controller;
    ``real_memory`` what `slurmd -C` reports per node (MB), so that no node is downed for it."""
    controller, controller_ip = nodes[0]
    lines = [
        "# clustercert lab: a minimal Slurm (`clustercert lab slurm up`; rewritten by it)",
        f"ClusterName={CLUSTER_NAME}",
        f"SlurmctldHost={controller}({controller_ip})",
        "AuthType=auth/munge",
        "SlurmUser=slurm",
        f"StateSaveLocation={STATE_DIR}",
        "SlurmdSpoolDir=/var/lib/slurm/slurmd",
        f"SlurmctldLogFile={SLURMCTLD_LOG}",
        f"SlurmdLogFile={SLURMD_LOG}",
        "MpiDefault=none",
        # containers: no cgroup plugins
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        # GPUs as a GRES (gres.conf: one device file per GPU)
        "GresTypes=gpu",
        "ReturnToService=2",
        # the containers see the host's few CPUs; a real 8-GPU node has far more cores: the probes' NCCL
        # step (one task per GPU) needs 8 CPUs per node, so the configured count stands
        "SlurmdParameters=config_overrides",
    ]
    for name, ip in nodes:
        lines.append(f"NodeName={name} NodeAddr={ip} {NODE_HARDWARE} RealMemory={real_memory[name]} "
                     f"Gres=gpu:{gpus} State=UNKNOWN")
    lines.append(f"PartitionName={PARTITION} Nodes={','.join(n for n, _ in nodes)} Default=YES "
                 "MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def gres_conf(gpus: int) -> str:
    # slurmd's gpu plugin counts a GPU per device file; the lab simulates GPUs without device nodes, so
    # empty files stand in for them (no cgroup device constraint here: nothing opens them)
    return ("# clustercert lab: the lab simulates GPU device files (/dev/nvidiaN, empty) for slurmd's GRES "
            "count\n"
            f"Name=gpu File=/dev/nvidia[0-{gpus - 1}]\n")


def parse_real_memory(slurmd_c: str) -> int:
    """RealMemory from `slurmd -C`'s first line (``NodeName=node01 CPUs=2 ... RealMemory=7936
    UpTime=...``)."""
    fields = dict(f.split("=", 1) for f in (slurmd_c.splitlines() or [""])[0].split() if "=" in f)
    try:
        return int(fields["RealMemory"])
    except (KeyError, ValueError):
        raise LabError(f"slurmd -C printed no RealMemory: {slurmd_c.strip()[:300]!r}") from None


def parse_sinfo(text: str) -> dict[str, str]:
    """`sinfo -h -N -o '%N %T'` as {node: state}."""
    return dict(x.split() for x in text.splitlines() if len(x.split()) == 2)


# ---------------------------------------------------------------------------------- inside the nodes


def _run(h: NodeHandle, script: str, timeout: float = COMMAND_TIMEOUT_S, input: str | None = None
         ) -> subprocess.CompletedProcess:
    try:
        return h.exec(["sh", "-c", script], timeout=timeout, input=input)
    except subprocess.TimeoutExpired:
        raise LabError(f"{h.name}: `{script[:120]}` did not finish within {timeout:.0f} s") from None
    except RuntimeError as exc:  # the node is not running
        raise LabError(str(exc)) from None


def _check(h: NodeHandle, script: str, timeout: float = COMMAND_TIMEOUT_S, input: str | None = None) -> str:
    r = _run(h, script, timeout, input)
    if r.returncode != 0:
        raise LabError(f"{h.name}: `{script[:120]}` failed (exit {r.returncode}): "
                       f"{((r.stderr or '') + (r.stdout or '')).strip()[-1500:]}")
    return r.stdout or ""


def _on_all(handles: Sequence[NodeHandle], fn: Callable[[NodeHandle], T]) -> dict[str, T]:
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(handles)))) as pool:
        return dict(zip([h.name for h in handles], pool.map(fn, handles), strict=True))


def _installed(h: NodeHandle) -> bool:
    r = _run(h, f"dpkg-query -W -f='${{Status}}\\n' {' '.join(PACKAGES)}")
    return (r.returncode == 0
            and r.stdout.split("\n")[: len(PACKAGES)] == ["install ok installed"] * len(PACKAGES))


def _install(h: NodeHandle) -> bool:
    """apt-get install the packages where dpkg-query misses one (True: it ran)."""
    if _installed(h):
        return False
    pkgs = " ".join(PACKAGES)
    _check(h, f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q {pkgs} >/tmp/slurm-install.log 2>&1 "
              "|| { tail -30 /tmp/slurm-install.log; exit 1; }", timeout=INSTALL_TIMEOUT_S)
    return True


def _write_if_changed(h: NodeHandle, path: str, content: str, mode: str = "644",
                      owner: str = "root:root") -> bool:
    """``content`` at ``path`` unless it is there already (True: written)."""
    out = _check(h, f'f={path}; t="$f.clustercert-new"; mkdir -p "$(dirname "$f")" && base64 -d > "$t" && '
                    f'if cmp -s "$t" "$f"; then rm -f "$t"; echo same; else chown {owner} "$t" && chmod '
                    f'{mode} "$t" '
                    '&& mv -f "$t" "$f" && echo changed; fi',
                 input=base64.b64encode(content.encode()).decode())
    return out.strip() == "changed"


def _active(h: NodeHandle, unit: str) -> bool:
    return _run(h, f"systemctl is-active -q {unit}").returncode == 0


def _munge_key(handles: Sequence[NodeHandle]) -> bool:
    """One munge key on every node: kept where all nodes share one already, else a new one (True: written)."""
    sums = _on_all(handles, lambda h: _run(h, f"sha256sum {MUNGE_KEY} 2>/dev/null").stdout.split()[:1])
    if all(sums.values()) and len({tuple(s) for s in sums.values()}) == 1:
        return False
    key = base64.b64encode(secrets.token_bytes(1024)).decode()
    _on_all(handles,
            lambda h: _check(h, f"base64 -d > {MUNGE_KEY}.new && chown munge:munge {MUNGE_KEY}.new && "
                                f"chmod 400 {MUNGE_KEY}.new && mv -f {MUNGE_KEY}.new {MUNGE_KEY}", input=key))
    return True


def _stand_ins(h: NodeHandle, gpus: int) -> bool:
    """The spool and log directories, and an empty /dev/nvidiaN per GPU (True: a device file was missing)."""
    out = _check(h, "mkdir -p /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm && "
                    "chown slurm:slurm /var/lib/slurm/slurmctld /var/log/slurm && "
                    f"for i in $(seq 0 {gpus - 1}); do [ -e /dev/nvidia$i ] || {{ touch /dev/nvidia$i; echo "
                    f"created; }}; "
                    "done; true")
    return "created" in out


def _logs(controller: NodeHandle, others: Sequence[NodeHandle]) -> str:
    parts = [f"{controller.name} {SLURMCTLD_LOG}:\n" + _run(controller, f"tail -20 {SLURMCTLD_LOG}").stdout]
    for h in others:
        parts.append(f"{h.name} {SLURMD_LOG}:\n" + _run(h, f"tail -20 {SLURMD_LOG}").stdout)
    return "\n".join(p.rstrip() for p in parts)


def wait_idle(handles: Sequence[NodeHandle], timeout: float = IDLE_WAIT_S) -> float:
    """Seconds until `sinfo` on the controller (the first node) shows every node idle; LabError with the
    last answer and the logs' tails after ``timeout``."""
    controller, names = handles[0], sorted(h.name for h in handles)
    t0 = time.monotonic()
    seen, states = "", {}
    while time.monotonic() - t0 < timeout:
        p = _run(controller, "sinfo -h -N -o '%N %T'", timeout=SINFO_TIMEOUT_S)
        seen, states = (p.stdout + p.stderr).strip(), parse_sinfo(p.stdout)
        if p.returncode == 0 and sorted(states) == names and set(states.values()) == {"idle"}:
            return time.monotonic() - t0
        time.sleep(1)
    not_idle = [h for h in handles if states.get(h.name) != "idle"] or list(handles)
    raise LabError(f"Slurm nodes not idle after {timeout:.0f} s: {seen or 'sinfo printed nothing'}\n"
                   + _logs(controller, not_idle))


# ------------------------------------------------------------------------------------------- up, down


def up(handles: Sequence[NodeHandle], gpus: int) -> dict:
    """Slurm on ``handles`` (every one running; the first runs slurmctld), ``gpus`` GPUs per node as a GRES.
    Returns {"installed": [nodes apt ran on], "restarted": bool, "seconds": float}."""
    t0 = time.monotonic()
    if not handles or gpus < 1:
        raise LabError(f"Slurm: {'no lab nodes' if not handles else 'the profile has no GPUs for the GRES'}")
    off = [h.name for h in handles if not h.is_running()]
    if off:
        raise LabError(f"Slurm needs every lab node running: {', '.join(off)} not running "
                       "(heal a node_down fault first: `clustercert lab heal NODE`)")
    controller = handles[0]
    installed = [n for n, ran in _on_all(handles, _install).items() if ran]
    memory = _on_all(handles, lambda h: parse_real_memory(_check(h, "slurmd -C")))
    conf = slurm_conf([(h.name, h.mgmt_ip) for h in handles], memory, gpus)
    key_changed = _munge_key(handles)

    def files(h: NodeHandle) -> bool:
        written = [_write_if_changed(h, SLURM_CONF, conf), _write_if_changed(h, GRES_CONF, gres_conf(gpus))]
        return any(written)

    conf_changed = any(_on_all(handles, files).values())
    created = _on_all(handles, lambda h: _stand_ins(h, gpus))
    changed = key_changed or conf_changed

    def munge(h: NodeHandle) -> bool:
        _check(h, "systemctl enable -q munge slurmd")
        if key_changed or not _active(h, "munge"):
            _check(h, "systemctl restart munge")
            return True
        return False

    restarted = any(_on_all(handles, munge).values())
    _check(controller, "systemctl enable -q slurmctld")
    if changed or restarted or not _active(controller, "slurmctld"):
        _check(controller, "systemctl restart slurmctld")
        restarted = True

    def slurmd(h: NodeHandle) -> bool:
        if changed or created[h.name] or not _active(h, "slurmd"):
            _check(h, "systemctl restart slurmd")
            return True
        return False

    restarted = any(_on_all(handles, slurmd).values()) or restarted
    if restarted:
        wait_idle(handles)
    return {"installed": installed, "restarted": restarted, "seconds": round(time.monotonic() - t0, 1)}


def down(handles: Sequence[NodeHandle]) -> None:
    """Nothing of Slurm keeps running on ``handles``, nor starts on a reboot: slurmd, slurmctld and munge
    stopped and disabled, the GPU stand-in files and slurmctld's saved state (drains) removed. The packages,
    the key and the configuration stay."""
    _on_all(handles, lambda h: _run(h, f"systemctl disable --now {' '.join(UNITS)} >/dev/null 2>&1; "
                                       f"rm -f /dev/nvidia[0-9]*; rm -rf {STATE_DIR}/*; true"))


def is_up(controller: NodeHandle) -> bool:
    """slurmctld runs on the controller (the lab's first node)."""
    try:
        return controller.is_running() and _active(controller, "slurmctld")
    except LabError:
        return False
