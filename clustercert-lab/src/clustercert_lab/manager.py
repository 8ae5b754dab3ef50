"""`clustercert lab up|down|status|fault|heal|inventory|slurm`: the lab's life cycle.

State lives in ``$CLUSTERCERT_LAB_DIR`` (default /var/lib/clustercert/lab):

  spec.json                the normalised spec the running lab was built from
  ssh/                     the lab's key pair, known_hosts (every node's host key), ssh config
  inventory/hosts.yml      the Ansible inventory (`-i lab`), group_vars/all.yml next to it
  inventory-user/hosts.yml the same nodes as the non-root operator (node.LAB_USER) with sudo
  nodes/<name>/            node.json, upper/ work/ root/ (overlay), sim/ (bind-mounted into the node),
                           faults.json, state, supervisor.pid, init.pid, console.log, supervisor.log
  proxy/                   apt proxy and repo server configuration, logs and pids

`up` twice with the same spec is a no-op (it only restarts nodes whose supervisor died). With another
node count (same profile and link_mbit) it adds or removes nodes at the end; anything else asks the
user to run `down` first.

The lab's Slurm (clustercert_lab.slurm: the spec's ``slurm: true``, `up --slurm`, `slurm up|down` on a
running lab) is recorded in spec.json ("slurm"); while it is up the inventory's group_vars carry
``clustercert_slurm: true``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from clustercert.errors import InputError
from clustercert.model.profile import load_profile
from clustercert_lab import faults, hardware, image, network, node, proxy, sim, slurm
from clustercert_lab import spec as spec_mod
from clustercert_lab.errors import LabError
from clustercert_lab.paths import inventory_path, lab_dir, ssh_dir, user_inventory_path

log = logging.getLogger("clustercert.lab")

MARKER = ".clustercert-lab"
SSH_WAIT_S = 90


# ------------------------------------------------------------------------------------------- helpers


def _require_root() -> None:
    if os.geteuid() != 0:
        raise InputError("clustercert lab", None, "must run as root (creates namespaces, bridges and mounts)")


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    d = lab_dir()
    d.parent.mkdir(parents=True, exist_ok=True)
    with open(d.parent / f".{d.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _read_json(path: Path, default=None):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def _write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def _handles(names: list[str] | None = None) -> list[node.NodeHandle]:
    nodes_dir = lab_dir() / "nodes"
    out = []
    if not nodes_dir.is_dir():
        return out
    for d in sorted(nodes_dir.iterdir()):
        cfg = _read_json(d / "node.json")
        if cfg and (names is None or cfg["name"] in names):
            out.append(node.NodeHandle(lab_dir(), cfg["name"], int(cfg["index"])))
    return sorted(out, key=lambda h: h.index)


def handle(name: str) -> node.NodeHandle:
    for h in _handles():
        if h.name == name:
            return h
    known = ", ".join(h.name for h in _handles()) or "none: the lab is not up"
    raise InputError("clustercert lab", name, f"no such lab node (nodes: {known})")


def _profile(name: str) -> dict:
    return load_profile(name).model_dump(mode="json")


def _public_spec(sp: dict) -> dict:
    return {k: sp[k] for k in ("nodes", "profile", "link_mbit", "faults", "slurm", "source") if k in sp}


# ---------------------------------------------------------------------------------------------- ssh


def _keygen(path: Path, comment: str) -> None:
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip


def _control_path() -> str:
    p = ssh_dir() / "cm-%C"
    return str(p) if len(str(p)) + 40 < 100 else "/tmp/cclab-cm-%C"


def ssh_common_args() -> str:
    return (
        f"-o UserKnownHostsFile={ssh_dir() / 'known_hosts'} -o StrictHostKeyChecking=yes "
        "-o IdentitiesOnly=yes -o KexAlgorithms=curve25519-sha256 -o ConnectTimeout=10"
    )


def _write_ssh_files(handles: list[node.NodeHandle]) -> None:
    sdir = ssh_dir()
    lines = []
    for h in handles:
        pub = (h.state_dir / "hostkey" / "ssh_host_ed25519_key.pub").read_text().split()
        lines.append(f"{h.name},{h.mgmt_ip} {pub[0]} {pub[1]}")
    (sdir / "known_hosts").write_text("\n".join(lines) + "\n")
    cfg = ["# clustercert lab: use with `ssh -F` or testinfra --ssh-config (generated)", ""]
    for h in handles:
        cfg += [f"Host {h.name}", f"  HostName {h.mgmt_ip}", ""]
    cfg += [
        "Host " + " ".join(h.name for h in handles) + " 10.250.0.*",
        "  User root",
        f"  IdentityFile {sdir / 'id_ed25519'}",
        "  IdentitiesOnly yes",
        f"  UserKnownHostsFile {sdir / 'known_hosts'}",
        "  StrictHostKeyChecking yes",
        "  BatchMode yes",
        "  ConnectTimeout 10",
        "  KexAlgorithms curve25519-sha256",
        "  ControlMaster auto",
        f"  ControlPath {_control_path()}",
        "  ControlPersist 60s",
        "  LogLevel ERROR",
        "",
    ]
    (sdir / "config").write_text("\n".join(cfg))


def _write_inventory(handles: list[node.NodeHandle], sp: dict) -> None:
    key = str(ssh_dir() / "id_ed25519")
    hosts = {}
    for h in handles:
        hosts[h.name] = {
            "ansible_host": h.mgmt_ip,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": key,
            "ansible_ssh_common_args": ssh_common_args(),
            "ansible_python_interpreter": "/usr/bin/python3",
            "clustercert_fabric_addresses": {
                "ib0": f"{network.fabric_ip(h.index, 0)}/24",
                "ib1": f"{network.fabric_ip(h.index, 1)}/24",
            },
            # the bond's address, as a site sets the ib_redundancy role's variable per host: the role
            # configures it on bond0; the bond failover test (validate --disruptive) pings it from a peer
            "ib_redundancy_bond_address": f"{network.bond_ip(h.index)}/24",
        }
    inv = {"all": {"children": {"lab": {"hosts": hosts}}}}
    gv = {
        "clustercert_cluster_name": "clustercert-lab",
        "clustercert_profile": sp["profile"],
        "clustercert_package_mirror": f"http://{image.MGMT_HOST_IP}:{image.REPO_PORT}",
        # the repo server also answers NTP on the management address, as a site's time server would
        "clustercert_ntp_servers": [image.MGMT_HOST_IP],
        # the nodes' cluster key pair (roles/cluster_ssh) lives with the lab, as a site keeps it in one
        # place: bootstrap and drift then use the same key whatever CLUSTERCERT_HOME each runs with
        "cluster_ssh_key_dir": str(ssh_dir() / "cluster_ssh"),
    }
    if sp.get("slurm"):
        # the lab's Slurm is up (clustercert_lab.slurm): the nodes are Slurm nodes, named as the hosts
        gv["clustercert_slurm"] = True
    if int(sp.get("link_mbit", 1000)) != 1000:
        # the IPoIB floor follows the fabric links' shaped rate, overridden as a site overrides a profile
        rated = int(sp["link_mbit"]) / 1000
        gv["clustercert_profile_overrides"] = {"thresholds": {"iperf3_ipoib": {"rated": rated}}}
    d = inventory_path().parent
    (d / "group_vars").mkdir(parents=True, exist_ok=True)
    header = "# clustercert lab inventory (generated by `clustercert lab up`; rewritten on every up)\n"
    inventory_path().write_text(header + yaml.safe_dump(inv, sort_keys=False))
    (d / "group_vars" / "all.yml").write_text(header + yaml.safe_dump(gv, sort_keys=False))
    as_user = {"all": {"children": {"lab": {"hosts": {
        name: {**hv, "ansible_user": node.LAB_USER, "ansible_become": True} for name, hv in hosts.items()}}}}}
    ud = user_inventory_path().parent
    (ud / "group_vars").mkdir(parents=True, exist_ok=True)
    uheader = header.replace("inventory", f"inventory as {node.LAB_USER} with sudo", 1)
    user_inventory_path().write_text(uheader + yaml.safe_dump(as_user, sort_keys=False))
    (ud / "group_vars" / "all.yml").write_text(header + yaml.safe_dump(gv, sort_keys=False))


def _ssh_banner(ip: str) -> bool:
    try:
        with socket.create_connection((ip, 22), timeout=1) as s:
            s.settimeout(2)
            return s.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def wait_ssh(handles: list[node.NodeHandle], timeout: float = SSH_WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    pending = {h.name: h for h in handles}

    def probe(h: node.NodeHandle) -> str | None:
        return h.name if _ssh_banner(h.mgmt_ip) else None

    with ThreadPoolExecutor(max_workers=16) as pool:
        while pending and time.monotonic() < deadline:
            for name in pool.map(probe, list(pending.values())):
                if name:
                    pending.pop(name, None)
            if pending:
                dead = [n for n,
                        h in pending.items() if h.state() not in ("starting", "running", "rebooting")]
                if dead:
                    raise LabError(f"node(s) {', '.join(dead)} stopped while booting (see "
                                   f"{lab_dir()}/nodes/*/console.log)")
                time.sleep(0.1)
    if pending:
        raise LabError(
            f"node(s) {', '.join(sorted(pending))} did not answer SSH within {timeout:.0f} s "
            f"(see {lab_dir()}/nodes/<name>/console.log)"
        )


# ------------------------------------------------------------------------------------------- nodes


def _create_node(name: str, index: int, sp: dict, profile: dict) -> node.NodeHandle:
    h = node.NodeHandle(lab_dir(), name, index)
    h.state_dir.mkdir(parents=True, exist_ok=True)
    _write_json(
        h.state_dir / "node.json",
        {
            "name": name,
            "index": index,
            "mgmt_ip": network.mgmt_ip(index),
            "link_mbit": sp["link_mbit"],
            "lowerdirs": image.lowerdirs(),
            "uuid": str(uuid.uuid4()),
        },
    )
    (h.state_dir / "state").write_text("created\n")
    _keygen(h.state_dir / "hostkey" / "ssh_host_ed25519_key", f"root@{name}")
    h.sim_dir.mkdir(exist_ok=True)
    sim.prepare_node(h.sim_dir, hardware.build(profile, name, index, _public_spec(sp)))
    return h


def _remove_node(h: node.NodeHandle) -> None:
    h.power_off()
    node.nspawn_runtime_cleanup(h)
    _umount(h.root)
    shutil.rmtree(h.state_dir, ignore_errors=True)


def _umount(path: Path) -> None:
    if node.is_mountpoint(path):
        proc = subprocess.run(["umount", str(path)], capture_output=True, timeout=30)
        if proc.returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def _personalise_all(handles: list[node.NodeHandle]) -> None:
    pub = (ssh_dir() / "id_ed25519.pub").read_text()
    all_nodes = {h.name: h.index for h in handles}
    for h in handles:
        node.mount_root(h, image.lowerdirs())
        node.personalise(h, all_nodes, pub, h.state_dir / "hostkey")


def _power_on_all(handles: list[node.NodeHandle]) -> None:
    todo = [h for h in handles if not h.is_running()]
    # a node whose supervisor died is restarted; one powered off by a node_down fault stays off
    todo = [h for h in todo if not any(f["kind"] == "node_down" for f in _faults_of(h))]
    errors = []

    def start(h: node.NodeHandle) -> None:
        try:
            h.power_on(timeout=45)
        except RuntimeError as exc:
            errors.append(str(exc))

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(start, todo))
    if errors:
        raise LabError("; ".join(errors))


def _faults_of(h: node.NodeHandle) -> list[dict]:
    return _read_json(h.state_dir / "faults.json", []) or []


# ------------------------------------------------------------------------------------------------ up


def up(nodes: int | None = None, spec_path: str | None = None, slurm: bool = False) -> dict:
    """Bring the lab up (idempotent) and return its status; ``slurm`` (or the spec's ``slurm: true``): with
    Slurm on the nodes once they answer SSH."""
    sp = spec_mod.load(spec_path, nodes, slurm)  # bad input is reported first, root or not
    _require_root()
    with _lock():
        _up_locked(sp)
    return status()


def _check_running(sp: dict, current: dict) -> None:
    """A lab already up (``current``, its spec.json) can take ``sp`` in place: same profile and link rate,
    no node at another address."""
    for key in ("profile", "link_mbit"):
        if current[key] != sp[key]:
            raise InputError(
                sp.get("source", spec_mod.EMBEDDED), key,
                f"a lab with {key} {current[key]!r} is running: run `clustercert lab down` first",
            )  # fmt: skip
    existing = {h.name: h.index for h in _handles()}
    wanted = {n: i for i, n in enumerate(sp["nodes"], start=1)}
    moved = [n for n, i in existing.items() if n in wanted and wanted[n] != i]
    if moved:
        raise InputError(
            sp.get("source", spec_mod.EMBEDDED), "nodes",
            f"node(s) {', '.join(moved)} would change address: run `clustercert lab down` first",
        )  # fmt: skip


def _apply_spec_faults(handles: list, sp: dict) -> None:
    """The spec's faults, each on its node unless it is there already."""
    for f in sp["faults"]:
        h = next(x for x in handles if x.name == f["node"])
        if not any(a["kind"] == f["kind"] and a["params"] == f["params"] for a in _faults_of(h)):
            _apply_fault(h, f["kind"], f["params"])


def _up_locked(sp: dict) -> None:
    d = lab_dir()
    current = _read_json(d / "spec.json")
    if current:
        _check_running(sp, current)
    profile = _profile(sp["profile"])
    image.ensure_image(sp["profile"], profile)
    d.mkdir(parents=True, exist_ok=True)
    (d / MARKER).write_text("clustercert lab state directory: `clustercert lab down` removes it\n")
    network.setup_bridges()
    network.setup_isolation()
    try:
        proxy.start_proxy(d)
        proxy.start_repo_server(d, image.repo_dir(sp["profile"]))
    except RuntimeError as exc:
        raise LabError(str(exc)) from None
    _keygen(ssh_dir() / "id_ed25519", "clustercert-lab")

    existing = {h.name: h for h in _handles()}
    for name, h in existing.items():
        if name not in sp["nodes"]:
            _remove_node(h)
    handles = []
    for i, name in enumerate(sp["nodes"], start=1):
        handles.append(existing.get(name) or _create_node(name, i, sp, profile))
    # Slurm stays as it is (up, or not) until it is brought up below
    slurm_was_up = bool(current and current.get("slurm"))
    public = {**_public_spec(sp), "slurm": slurm_was_up}
    _personalise_all(handles)
    _write_ssh_files(handles)
    _write_inventory(handles, public)
    try:
        _power_on_all(handles)
        wait_ssh([h for h in handles if not any(f["kind"] == "node_down" for f in _faults_of(h))])
    except RuntimeError as exc:
        raise LabError(str(exc)) from None
    first_up = not current
    _write_json(d / "spec.json", public)
    # asked for (slurm.up does nothing costly where it is up already), or up on another set of nodes
    # (slurm.conf names them all)
    if sp["slurm"] or (slurm_was_up and set(existing) != set(sp["nodes"])):
        _slurm_up(handles, public)
    if first_up or current.get("faults") != public["faults"]:
        _apply_spec_faults(handles, sp)


# --------------------------------------------------------------------------------------------- slurm


def _slurm_up(handles: list[node.NodeHandle], sp: dict) -> dict:
    """slurm.up on the lab's nodes, then recorded: spec.json's "slurm", the inventory's clustercert_slurm."""
    result = slurm.up(handles, load_profile(sp["profile"]).gpu.count)
    sp["slurm"] = True
    _write_json(lab_dir() / "spec.json", sp)
    _write_inventory(handles, sp)
    return result


def _running_spec(command: str) -> dict:
    sp = _read_json(lab_dir() / "spec.json")
    if not sp or not _handles():
        raise InputError(command, None, "the lab is not up: start it with `clustercert lab up`")
    return sp


def slurm_up() -> dict:
    """Slurm on the running lab (idempotent: what is in place already is left as it is): slurmctld on the
    first node, slurmd on every node, every node idle. Returns slurm.up's summary."""
    _require_root()
    with _lock():
        return _slurm_up(_handles(), _running_spec("clustercert lab slurm up"))


def slurm_down() -> None:
    """Slurm stopped and disabled on the running lab's nodes (slurm.down); the inventory without
    clustercert_slurm."""
    _require_root()
    with _lock():
        sp = _running_spec("clustercert lab slurm down")
        handles = _handles()
        slurm.down([h for h in handles if h.is_running()])
        sp["slurm"] = False
        _write_json(lab_dir() / "spec.json", sp)
        _write_inventory(handles, sp)


def _slurm_status(sp: dict, handles: list[node.NodeHandle]) -> dict:
    """{"state": "up" | "not running" (brought up, slurmctld not active now) | "off", "controller": node}"""
    if not sp.get("slurm") or not handles:
        return {"state": "off", "controller": None}
    return {"state": "up" if slurm.is_up(handles[0]) else "not running", "controller": handles[0].name}


# ---------------------------------------------------------------------------------------------- down


def _ssh_masters() -> list[int]:
    """ssh ControlMaster processes still connected to lab nodes (they would outlive the nodes)."""
    pids = []
    marker_dir = str(ssh_dir())
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if (p / "comm").read_text().strip() != "ssh":
                continue
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker_dir in cmd or "10.250.0." in cmd or "cclab-cm-" in cmd:
            pids.append(int(p.name))
    return pids


def down() -> None:
    """Stop every node, supervisor, proxy and repo server; remove mounts, veths, bridges, iptables
    rules, cgroups and the lab's state directory. The image cache stays."""
    _require_root()
    with _lock():
        d = lab_dir()
        handles = _handles()
        pids = {h.name: h.request_power_off() for h in handles}
        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(lambda h: h.wait_power_off(pids[h.name], timeout=6), handles))
        for pid in _ssh_masters():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        proxy.stop(d)
        for h in handles:
            node.nspawn_runtime_cleanup(h)
        if d.is_dir():
            for m in sorted(node.lab_mounts(d), key=len, reverse=True):
                _umount(Path(m))
        for h in handles:
            node.kill_cgroups(h.name, timeout=2)
        node.remove_cgroup_parents()
        network.teardown_isolation()
        network.teardown_bridges()
        if d.is_dir() and (d / MARKER).exists() and not node.lab_mounts(d):
            shutil.rmtree(d, ignore_errors=True)


# -------------------------------------------------------------------------------------------- status


def status() -> dict:
    d = lab_dir()
    sp = _read_json(d / "spec.json")
    nodes = {}
    handles = _handles()
    for h in handles:
        nodes[h.name] = {
            "state": h.state(),
            "mgmt_ip": h.mgmt_ip,
            "pid": h.init_pid(),
            "faults": _faults_of(h),
        }
    return {
        "running": bool(sp) and any(n["state"] == "running" for n in nodes.values()),
        "nodes": nodes,
        "inventory": str(inventory_path()) if inventory_path().exists() else None,
        "user_inventory": str(user_inventory_path()) if user_inventory_path().exists() else None,
        "ssh_config": str(ssh_dir() / "config") if (ssh_dir() / "config").exists() else None,
        "spec": sp or {},
        "slurm": _slurm_status(sp or {}, handles),
    }


# -------------------------------------------------------------------------------------- fault, heal


def _hw(h: node.NodeHandle) -> dict:
    return hardware.load(h.sim_dir)


def _apply_fault(h: node.NodeHandle, kind: str, params: dict) -> None:
    try:
        faults.apply(h, kind, params)  # returns once the node shows it
    except faults.NotApplied as exc:
        raise LabError(str(exc)) from None
    active = [f for f in _faults_of(h) if not (f["kind"] == kind and f["params"] == params)]
    active.append({"kind": kind, "params": params})
    _write_json(h.state_dir / "faults.json", active)


def fault(node_name: str, kind: str, params: dict[str, str]) -> None:
    _require_root()
    with _lock():
        h = handle(node_name)
        if kind not in faults.FAULTS:
            raise InputError("clustercert lab fault", kind,
                             f"unknown fault kind (known: {', '.join(sorted(faults.FAULTS))})")
        try:
            norm = faults.validate(kind, dict(params), _hw(h))
        except ValueError as exc:
            key, _, reason = str(exc).partition(": ")
            raise InputError("clustercert lab fault", key if reason else kind, reason or str(exc)) from None
        if kind != "node_down" and not h.is_running():
            raise InputError("clustercert lab fault", node_name, f"node is not running (state: {h.state()})")
        _apply_fault(h, kind, norm)


def heal(node_name: str, kind: str | None = None) -> None:
    _require_root()
    with _lock():
        h = handle(node_name)
        active = _faults_of(h)
        if kind is not None and not any(f["kind"] == kind for f in active):
            raise InputError("clustercert lab heal", kind, f"no active {kind} fault on {node_name}")
        todo = [f for f in active if kind is None or f["kind"] == kind]
        if not todo:
            return
            # node_down first: the other faults heal on a running node
        for f in sorted(todo, key=lambda f: f["kind"] != "node_down"):
            try:
                faults.heal(h, f["kind"], f["params"])  # returns once the node shows it healed
            except faults.NotApplied as exc:
                raise LabError(str(exc)) from None
            active = [a for a in active if a is not f]
            _write_json(h.state_dir / "faults.json", active)
            if f["kind"] == "node_down":
                try:
                    wait_ssh([h])
                except RuntimeError as exc:
                    raise LabError(str(exc)) from None
