"""The node-side simulator run on the host (no lab): each simulated tool's output goes through the
project's parser for the real tool, and the values must be the simulated hardware's.

The tools run with the system's /usr/bin/python3 when present (what a node has: stdlib only),
against a temp CLUSTERCERT_LAB_SIM_DIR (hw.json), CLUSTERCERT_LAB_RUN_DIR (module table, kernel log)
and CLUSTERCERT_LAB_ROOT (a prefix for /sys, /etc, /run the tools read or write).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest
import yaml

from clustercert_lab import faults, hardware
from clustercert_lab.sim import SOURCE

PROFILE = Path(__file__).resolve().parents[2] / "clustercert-lab/src/clustercert_lab/profiles/lab.yml"
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
LAB_H100_BUS = ["00000000:19:00.0", "00000000:3B:00.0", "00000000:4C:00.0", "00000000:5D:00.0",
                "00000000:9B:00.0", "00000000:BB:00.0", "00000000:CB:00.0", "00000000:DB:00.0"]


def parse(kind: str, text: str) -> dict:
    from clustercert import parsers

    if kind not in parsers.REGISTRY:
        pytest.fail(f"parser kind {kind!r} is not registered yet (clustercert.parsers): cannot check the "
                    "simulated output against it")
    return parsers.parse(kind, text)


class Sim:
    def __init__(self, tmp: Path, name: str = "node01", index: int = 1):
        self.tmp = tmp
        self.sim = tmp / "sim"
        self.run_dir = tmp / "run"
        self.root = tmp / "root"
        self.profile = yaml.safe_load(PROFILE.read_text())
        self.hw = hardware.build(self.profile, name, index, {"link_mbit": 1000})
        hardware.save(self.sim, self.hw)
        for nd, state in (("ib0", "up"), ("ib1", "up")):
            d = self.root / "sys/class/net" / nd
            d.mkdir(parents=True)
            (d / "operstate").write_text(state + "\n")
        self.procs: list[subprocess.Popen] = []

    def env(self, **extra: str) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CLUSTERCERT_LAB_")}
        env.update(CLUSTERCERT_LAB_SIM_DIR=str(self.sim), CLUSTERCERT_LAB_RUN_DIR=str(self.run_dir),
                   CLUSTERCERT_LAB_ROOT=str(self.root), CLUSTERCERT_LAB_STATE_DIR=str(self.tmp / "state"),
                   CLUSTERCERT_LAB_NCCL_VERSION="2.26.2-1+cuda12.8", PYTHONDONTWRITEBYTECODE="1")
        env.update(extra)
        return env

    def run(self, tool: str, *args: str, timeout: float = 30, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([PY, str(SOURCE), tool, *args], capture_output=True, text=True,
                              timeout=timeout, env=self.env(**env))

    def ok(self, tool: str, *args: str, **env: str) -> str:
        r = self.run(tool, *args, **env)
        assert r.returncode == 0, f"{tool} {args} -> {r.returncode}: {r.stdout}{r.stderr}"
        return r.stdout

    def background(self, tool: str, *args: str) -> subprocess.Popen:
        # its own process group, which close() ends whole: a simulated daemon is a shell loop whose
        # `sleep 3600` child would outlive the shell
        p = subprocess.Popen([PY, str(SOURCE), tool, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=self.env(), start_new_session=True)
        self.procs.append(p)
        return p

    def fault(self, kind: str, **params) -> None:
        hw = hardware.load(self.sim)
        p = faults.validate(kind, params, hw)
        faults._apply_hw(hw, kind, p, faults._key(kind, p))
        hardware.save(self.sim, hw)

    def driver_loaded(self) -> None:
        self.ok("modload", "nvidia")

    def start_daemon(self, tool: str, pidfile: str) -> None:
        fg = {"nvidia-persistenced": "--foreground", "nv-hostengine": "-n"}
        self.background(tool, fg[tool]) if tool in fg else self.background(tool)
        for _ in range(100):
            if (self.root / pidfile.lstrip("/")).exists():
                return
            time.sleep(0.05)
        raise AssertionError(f"{tool} did not write {pidfile}")

    def close(self) -> None:
        """End every background tool with its whole process group (SIGTERM, then SIGKILL for what is left)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in self.procs:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
            for p in self.procs:
                try:
                    p.communicate(timeout=5)
                except subprocess.TimeoutExpired:
                    pass


@pytest.fixture
def sim(tmp_path):
    s = Sim(tmp_path)
    yield s
    s.close()


def test_build_is_deterministic_and_per_node():
    profile = yaml.safe_load(PROFILE.read_text())
    a = hardware.build(profile, "node01", 1, {})
    b = hardware.build(profile, "node01", 1, {})
    c = hardware.build(profile, "node02", 2, {})
    assert a == b
    assert len(a["gpus"]) == 8
    assert [g["bus_id"] for g in a["gpus"]] == LAB_H100_BUS
    assert {g["uuid"] for g in a["gpus"]}.isdisjoint({g["uuid"] for g in c["gpus"]})
    assert len({g["uuid"] for g in a["gpus"]}) == 8
    assert a["gpus"][0]["memory"]["total_mib"] == 81559
    assert [h["name"] for h in a["hcas"]] == ["mlx5_0", "mlx5_1"]
    assert a["hcas"][0]["ports"][0]["netdev"] == "ib0" and a["hcas"][1]["ports"][0]["fabric"] == 1
    assert a["hcas"][0]["node_guid"] != c["hcas"][0]["node_guid"]
    assert a["performance"]["ib_write_bw_gbit_per_s"]["value"] == 392.3
    assert a["performance"]["nccl_allreduce_busbw_gbyte_per_s"]["value"] == 479.0
    assert all(v["source"] for v in a["performance"].values())
    assert a["simulated"] is True and a["driver"]["version"] == "570.172.08"


def test_nvidia_smi_needs_the_driver_loaded(sim):
    r = sim.run("nvidia-smi")
    assert r.returncode == 9
    assert "couldn't communicate with the NVIDIA driver" in r.stdout


def test_nvidia_smi_library_mismatch(sim):
    sim.driver_loaded()
    r = sim.run("nvidia-smi", CLUSTERCERT_LAB_LIB_VERSION="570.158.01")
    assert r.returncode == 18
    assert (
        r.stdout
        == "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.158\n"
    )


def test_nvidia_smi_default_table(sim):
    sim.driver_loaded()
    out = sim.ok("nvidia-smi")
    widths = {len(line) for line in out.splitlines()[1:] if line.startswith(("|", "+"))}
    assert widths == {91}
    rec = parse("nvidia-smi-table", out)
    assert rec["driver_version"] == "570.172.08" and rec["cuda_version"] == "12.8"
    assert [g["bus_id"] for g in rec["gpus"]] == LAB_H100_BUS
    assert rec["gpus"][3]["memory_total_mib"] == 81559
    assert rec["gpus"][0]["persistence_mode"] is False
    sim.start_daemon("nvidia-persistenced", "/run/nvidia-persistenced/nvidia-persistenced.pid")
    assert parse("nvidia-smi-table", sim.ok("nvidia-smi"))["gpus"][0]["persistence_mode"] is True


def test_nvidia_smi_xml_and_text_agree_with_hw(sim):
    sim.driver_loaded()
    for kind, args in (("nvidia-smi-xml", ("-q", "-x")), ("nvidia-smi-q", ("-q",))):
        rec = parse(kind, sim.ok("nvidia-smi", *args))
        assert rec["driver_version"] == "570.172.08"
        assert len(rec["gpus"]) == 8
        assert rec["gpus"][5]["uuid"] == sim.hw["gpus"][5]["uuid"]
        assert rec["gpus"][5]["serial"] == sim.hw["gpus"][5]["serial"]
        assert rec["gpus"][0]["memory_total_mib"] == 81559
        assert rec["gpus"][0]["ecc_errors"]["volatile"]["dram_uncorrectable"] == 0
    sim.fault("gpu_ecc_uncorrectable", gpu="2")
    sim.fault("gpu_row_remap_pending", gpu="3")
    for kind, args in (("nvidia-smi-xml", ("-q", "-x")), ("nvidia-smi-q", ("-q",))):
        rec = parse(kind, sim.ok("nvidia-smi", *args))
        assert rec["gpus"][2]["ecc_errors"]["volatile"]["dram_uncorrectable"] == 1
        assert rec["gpus"][2]["ecc_errors"]["aggregate"]["dram_uncorrectable"] == 1
        rr = rec["gpus"][3]["remapped_rows"]
        assert rr["pending"] is True and rr["uncorrectable"] == 1
        assert rec["gpus"][0]["remapped_rows"]["pending"] is False


def test_nvidia_smi_csv_query_and_gpu_missing(sim):
    sim.driver_loaded()
    out = sim.ok("nvidia-smi", "--query-gpu=index,name,pci.bus_id,memory.total,power.draw", "--format=csv")
    rec = parse("nvidia-smi-csv", out)
    assert out.splitlines()[0] == "index, name, pci.bus_id, memory.total [MiB], power.draw [W]"
    assert [r["pci.bus_id"] for r in rec["rows"]] == LAB_H100_BUS
    assert rec["rows"][0]["memory.total"] == 81559
    assert sim.ok("nvidia-smi", "--query-gpu=index", "--format=csv,noheader").splitlines() == [
        str(i) for i in range(8)
    ]
    sim.fault("gpu_missing")
    lines = sim.ok("nvidia-smi", "--query-gpu=index", "--format=csv,noheader").splitlines()
    assert lines == [str(i) for i in range(7)]
    assert (
        sim.ok("nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits").splitlines()[0]
        == "81559"
    )
    bad = sim.run("nvidia-smi", "--query-gpu=bogus.field", "--format=csv")
    assert bad.returncode == 2 and 'Field "bogus.field" is not a valid field to query.' in bad.stdout


def test_nvidia_smi_topo_and_nvlink(sim):
    sim.driver_loaded()
    rec = parse("nvidia-smi-topo", sim.ok("nvidia-smi", "topo", "-m"))
    assert rec["matrix"]["GPU0"]["GPU1"] == "NV18"
    assert {d["nic_name"] for d in rec["devices"] if d["kind"] == "nic"} == {"mlx5_0", "mlx5_1"}
    nv = parse("nvidia-smi-nvlink", sim.ok("nvidia-smi", "nvlink", "-s"))
    assert len(nv["gpus"]) == 8 and len(nv["gpus"][0]["links"]) == 18
    assert nv["gpus"][0]["links"][0]["gbyte_per_s"] == 26.562
    sim.fault("nvlink_down", gpu="1", port="4")
    nv = parse("nvidia-smi-nvlink", sim.ok("nvidia-smi", "nvlink", "-s"))
    assert [link["link"] for link in nv["gpus"][1]["links"] if link["inactive"]] == [4]
    assert not any(link["inactive"] for link in nv["gpus"][0]["links"])
    rec = parse("nvidia-smi-topo", sim.ok("nvidia-smi", "topo", "-m"))
    assert rec["matrix"]["GPU0"]["GPU1"] == "NV17" and rec["matrix"]["GPU0"]["GPU2"] == "NV18"


def test_nvidia_smi_list(sim):
    sim.driver_loaded()
    rec = parse("nvidia-smi-list", sim.ok("nvidia-smi", "-L"))
    assert [g["uuid"] for g in rec["gpus"]] == [g["uuid"] for g in sim.hw["gpus"]]


def test_ibv_devinfo_and_ibdev2netdev(sim):
    rec = parse("ibv-devinfo", sim.ok("ibv_devinfo"))
    assert [d["hca_id"] for d in rec["devices"]] == ["mlx5_0", "mlx5_1"]
    assert rec["devices"][0]["fw_ver"] == "28.43.1014"
    assert rec["devices"][1]["ports"][0]["state"] == "PORT_ACTIVE"
    sim.fault("ib_port_down", hca="mlx5_1")
    rec = parse("ibv-devinfo", sim.ok("ibv_devinfo"))
    assert rec["devices"][1]["ports"][0]["state"] == "PORT_DOWN"
    assert rec["devices"][0]["ports"][0]["state"] == "PORT_ACTIVE"
    m = parse("ibdev2netdev", sim.ok("ibdev2netdev"))["mappings"]
    assert [(x["hca"], x["netdev"], x["state"]) for x in m] == [
        ("mlx5_0", "ib0", "Up"),
        ("mlx5_1", "ib1", "Down"),
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_perftest_client_server_over_tcp(sim):
    port = str(_free_port())
    server = sim.background("ib_write_bw", "-d", "mlx5_0", "--report_gbits", "-p", port)
    client = sim.ok("ib_write_bw", "-d", "mlx5_0", "--report_gbits", "-p", port, "127.0.0.1")
    out, _ = server.communicate(timeout=30)
    assert server.returncode == 0
    c = parse("perftest", client)
    s = parse("perftest", out)
    assert c["role"] == "client" and s["role"] == "server"
    assert c["rows"][0]["bw_avg_gbit_per_s"] == pytest.approx(392.3, abs=0.006)
    assert s["rows"][0]["bw_avg_gbit_per_s"] == c["rows"][0]["bw_avg_gbit_per_s"]
    # a degraded port on one end halves what both ends report
    sim.fault("ib_port_rate_degraded", hca="mlx5_0", rate="200")
    server = sim.background("ib_write_bw", "-d", "mlx5_0", "--report_gbits", "-p", port)
    c = parse("perftest", sim.ok("ib_write_bw", "-d", "mlx5_0", "--report_gbits", "-p", port, "127.0.0.1"))
    server.communicate(timeout=30)
    assert c["rows"][0]["bw_avg_gbit_per_s"] == pytest.approx(196.15, abs=0.006)


def test_perftest_help_lists_use_cuda_on_a_gpu_node(sim):
    """Issue 33: the GPUDirect preflight reads `ib_write_bw --help`; the lab's perftest answers with
    perftest's usage text, --use_cuda in it (a CUDA build on a node with GPUs), and the preflight lets the GDR
    probe run."""
    from clustercert.model.evidence import CommandResult
    from clustercert.probes import workload

    out = sim.ok("ib_write_bw", "--help")
    rec = parse("perftest-help", out)
    assert rec["use_cuda"] and "--report_gbits" in rec["options"], out
    assert workload.gdr_preflight(CommandResult(0, out, "", False, 0.1, "ib_write_bw --help"), 15) is None


def test_perftest_client_without_server_fails_like_perftest(sim):
    r = sim.run("ib_write_bw", "-p", str(_free_port()), "127.0.0.1")
    assert r.returncode == 1
    assert "Couldn't connect to 127.0.0.1:" in r.stderr
    sim.fault("ib_port_down", hca="mlx5_0")
    r = sim.run("ib_write_lat", "-d", "mlx5_0", "127.0.0.1")
    assert r.returncode == 1 and "Port number 1 state is Down" in r.stderr


def test_perftest_latency(sim):
    port = str(_free_port())
    server = sim.background("ib_write_lat", "-p", port)
    c = parse("perftest", sim.ok("ib_write_lat", "-p", port, "127.0.0.1"))
    server.communicate(timeout=30)
    assert c["test"] == "lat"
    assert c["rows"][0]["t_typical_usec"] == pytest.approx(1.02)


def test_nccl_all_reduce(sim):
    sim.driver_loaded()
    r = sim.run("all_reduce_perf", "-b", "8M", "-e", "2G", "-f", "2", "-g", "8")
    assert r.returncode == 1 and "system not yet initialized" in r.stdout  # no fabric manager yet
    sim.start_daemon("nv-fabricmanager", "/run/nvidia-fabricmanager/nv-fabricmanager.pid")
    rec = parse("nccl-tests", sim.ok("all_reduce_perf", "-b", "8M", "-e", "2G", "-f", "2", "-g", "8"))
    sizes = [row["size_bytes"] for row in rec["rows"]]
    assert sizes == [8388608 * 2 ** k for k in range(9)]
    assert rec["rows"][-1]["out_of_place"]["busbw_gbyte_per_s"] == 479.0
    assert rec["header"]["nGpus"] == 8 and len(rec["devices"]) == 8
    sim.fault("nccl_busbw_low", factor="0.5")
    rec = parse("nccl-tests", sim.ok("all_reduce_perf", "-b", "1G", "-e", "4G", "-f", "2", "-g", "8"))
    assert [row["out_of_place"]["busbw_gbyte_per_s"] for row in rec["rows"]] == [239.5, 239.5, 239.5]
    sim.fault("gpu_missing")
    r = sim.run("all_reduce_perf", "-g", "8")
    assert r.returncode == 1 and "invalid device ordinal" in r.stdout


def test_nvbandwidth(sim):
    sim.driver_loaded()
    rec = parse("nvbandwidth", sim.ok("nvbandwidth", "-t", "host_to_device_memcpy_ce"))
    tc = rec["testcases"][0]
    assert tc["name"] == "host_to_device_memcpy_ce" and tc["status"] == "passed"
    assert tc["matrices"][0]["rows"]["0"] == [53.0] * 8
    sim.fault("gpu_pcie_degraded", gpu="2")
    sim.fault("nvlink_down", gpu="0", port="0")
    rec = parse("nvbandwidth", sim.ok("nvbandwidth"))
    by = {t["name"]: t for t in rec["testcases"]}
    assert by["host_to_device_memcpy_ce"]["matrices"][0]["rows"]["0"][2] == 13.25
    d2d = by["device_to_device_memcpy_read_ce"]["matrices"][0]["rows"]
    assert d2d["1"][2] == 389.0 and d2d["0"][1] == round(389.0 * 17 / 18, 2)


def test_dcgmi_diag(sim):
    sim.driver_loaded()
    sim.start_daemon("nvidia-persistenced", "/run/nvidia-persistenced/nvidia-persistenced.pid")
    r = sim.run("dcgmi", "diag", "-r", "2")
    assert r.returncode != 0 and "Unable to connect to host engine" in r.stdout  # nvidia-dcgm not running
    sim.start_daemon("nv-hostengine", "/run/nvidia-dcgm/nv-hostengine.pid")
    r = sim.run("dcgmi", "diag", "-r", "2")
    rec = parse("dcgmi-diag", r.stdout)
    assert r.returncode == 0 and rec["overall"] == "pass"
    assert rec["driver_version"] == "570.172.08" and rec["gpu_device_ids"] == ["2330"] * 8
    sim.fault("gpu_row_remap_pending", gpu="3")
    r = sim.run("dcgmi", "diag", "-r", "2")
    rec = parse("dcgmi-diag", r.stdout)
    assert r.returncode != 0 and rec["overall"] == "fail"
    mem = next(t for t in rec["tests"] if t["name"] == "GPU Memory")
    assert mem["result"] == "fail"


def test_lsmod_and_module_dependencies(sim):
    r = sim.run("modload", "nvidia_peermem")
    assert r.returncode == 1 and "Unknown symbol in module" in r.stderr  # no RDMA stack loaded
    sim.ok("modload", "ib_uverbs")
    sim.ok("modload", "nvidia_peermem")
    rec = parse("lsmod", sim.ok("lsmod"))
    assert rec["modules"]["nvidia"]["used_by"] == ["nvidia_peermem"]
    assert rec["modules"]["ib_core"]["used_by"] == ["ib_uverbs"]
    r = sim.run("modunload", "nvidia")
    assert r.returncode == 1 and "in use" in r.stderr
    sim.ok("modunload", "nvidia_peermem")
    assert "nvidia_peermem" not in parse("lsmod", sim.ok("lsmod"))["modules"]
    assert (sim.root / "sys/module/nvidia/version").read_text() == "570.172.08\n"


def test_dmesg_shows_xid_events(sim):
    sim.driver_loaded()
    assert parse("xid", sim.ok("dmesg"))["events"] == []
    sim.fault("gpu_xid", gpu="4", xid="79")
    for args in ((), ("-T",)):
        events = parse("xid", sim.ok("dmesg", *args))["events"]
        assert [(e["xid"], e["bus_id"]) for e in events] == [(79, "00000000:9B:00.0")]


def test_nvidia_ctk_runtime_configure_and_cdi(sim):
    sim.driver_loaded()
    cfg = sim.root / "etc/containerd/config.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(
        'version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  snapshotter = "overlayfs"\n'
    )
    sim.ok("nvidia-ctk", "runtime", "configure", "--runtime=containerd", "--set-as-default")
    data = tomllib.loads(cfg.read_text())
    ctrd = data["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert ctrd["default_runtime_name"] == "nvidia" and ctrd["snapshotter"] == "overlayfs"
    assert ctrd["runtimes"]["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    before = cfg.read_text()
    sim.ok("nvidia-ctk", "runtime", "configure", "--runtime=containerd", "--set-as-default")
    assert cfg.read_text() == before  # idempotent, as the real tool
    sim.ok("nvidia-ctk", "cdi", "generate", "--output=/etc/cdi/nvidia.yaml")
    listed = sim.run("nvidia-ctk", "cdi", "list")
    rec = parse("nvidia-ctk", listed.stderr + listed.stdout)
    assert len(rec["cdi_devices"]) == 17 and "nvidia.com/gpu=all" in rec["cdi_devices"]
    # the container_runtime_unconfigured fault's edit (in-node code, run here on the temp root)
    r = sim.run("fault", "apply", "container_runtime_unconfigured", "{}")
    assert r.returncode == 0 and r.stdout.strip() == "applied"
    data = tomllib.loads(cfg.read_text())
    assert "nvidia" not in data["plugins"]["io.containerd.grpc.v1.cri"]["containerd"].get("runtimes", {})
    assert sim.ok("fault", "heal", "container_runtime_unconfigured", "{}").strip() == "healed"
    assert cfg.read_text() == before


def test_config_fault_is_pending_until_its_target_exists(sim):
    r = sim.run("fault", "apply", "container_runtime_unconfigured", "{}")
    assert r.stdout.strip() == "pending"
    assert "container_runtime_unconfigured" in sim.ok("fault", "pending")
    assert sim.ok("fault", "heal", "container_runtime_unconfigured", "{}").strip() == "healed"
    assert sim.ok("fault", "pending").strip() == "[]"


def test_memlock_fault_edits_limits(sim):
    assert sim.ok("fault", "apply", "memlock_limited", "{}").strip() == "applied"
    text = (sim.root / "etc/security/limits.d/zz-local-memlock.conf").read_text()
    assert "*\thard\tmemlock\t64" in text
    sim.ok("fault", "heal", "memlock_limited", "{}")
    assert not (sim.root / "etc/security/limits.d/zz-local-memlock.conf").exists()


def test_probe_hang(sim):
    sim.driver_loaded()
    sim.fault("probe_hang", tool="nvidia-smi")
    with pytest.raises(subprocess.TimeoutExpired):
        sim.run("nvidia-smi", "-L", timeout=3)
    assert sim.run("ibv_devinfo").returncode == 0


def test_agent_writes_infiniband_sysfs(sim):
    r = sim.run("agent", "--once", "--no-mounts")
    assert r.returncode == 0, r.stderr
    base = sim.root / "sys/class/infiniband"
    assert (base / "mlx5_0/ports/1/state").read_text() == "4: ACTIVE\n"
    assert (base / "mlx5_0/ports/1/rate").read_text() == "400 Gb/sec (4X NDR)\n"
    lines = []
    for f in sorted(base.rglob("*")):
        rel = f.relative_to(sim.root)
        if f.is_file() and (
            f.parent.name == "counters" or f.name in ("state", "phys_state", "rate", "link_layer", "fw_ver")
        ):
            lines.append(f"/{rel}:{f.read_text().strip()}")
    rec = parse("sysfs-infiniband", "\n".join(lines) + "\n")
    port = rec["hcas"]["mlx5_1"]["ports"]["1"]
    assert (
        port["state"] == "ACTIVE" and port["rate_gbit_per_s"] == 400 and port["counters"]["symbol_error"] == 0
    )
    assert rec["hcas"]["mlx5_0"]["fw_ver"] == "28.43.1014"
    hw = hardware.load(sim.sim)
    faults._apply_hw(hw, "ib_symbol_errors", {"hca": "mlx5_1", "port": 1}, "k")
    faults._apply_hw(hw, "ib_port_rate_degraded", {"hca": "mlx5_0", "port": 1, "rate": 200}, "k2")
    hardware.save(sim.sim, hw)
    sim.ok("agent", "--once", "--no-mounts")
    assert (base / "mlx5_1/ports/1/counters/symbol_error").read_text() == "1000\n"
    assert (base / "mlx5_0/ports/1/rate").read_text() == "200 Gb/sec (4X HDR)\n"
    # boot: the RDMA stack is loaded (inbox drivers), the NVIDIA one only once its package is installed
    assert "ib_core" in parse("lsmod", sim.ok("lsmod"))["modules"]
    assert "nvidia" not in parse("lsmod", sim.ok("lsmod"))["modules"]


def test_agent_reads_the_networkd_bond_config(tmp_path, monkeypatch):
    net = tmp_path / "etc/systemd/network"
    net.mkdir(parents=True)
    (net / "30-bond0.netdev").write_text("[NetDev]\nName=bond0\nKind=bond\n\n[Bond]\nMode=active-backup\n"
                                         "MIIMonitorSec=100ms\nFailOverMACPolicy=active\n")
    (net / "31-ib0.network").write_text("[Match]\nName=ib0\n\n[Network]\nBond=bond0\nPrimarySlave=true\n")
    (net / "31-ib1.network").write_text("[Match]\nName=ib1\n\n[Network]\nBond=bond0\n")
    monkeypatch.setenv("CLUSTERCERT_LAB_ROOT", str(tmp_path))
    monkeypatch.syspath_prepend(str(SOURCE.parent))
    from labsim import agent

    cfg = agent.networkd_bond_config()
    assert cfg == {"name": "bond0", "mode": "active-backup", "miimon": 100, "fail_over_mac": "active",
                   "slaves": ["ib0", "ib1"], "primary": "ib0", "primary_reselect": "always", "addresses": []}
    # the bond's own .network (the first matching one, as networkd picks it): its addresses, repeated keys
    # kept
    (net / "05-bond0.network").write_text("# Ansible managed\n[Match]\nName=bond0\n\n[Network]\n"
                                          "Address=10.253.0.11/24\nAddress=fd00::11/64\n"
                                          "ConfigureWithoutCarrier=yes\n")
    (net / "40-bond0.network").write_text("[Match]\nName=bond*\n\n[Network]\nAddress=10.9.9.9/24\n")
    assert agent.networkd_bond_config()["addresses"] == ["10.253.0.11/24", "fd00::11/64"]
    (net / "30-bond0.netdev").unlink()
    assert agent.networkd_bond_config() is None


def test_agent_drives_the_bond_data_path(tmp_path, monkeypatch):
    """bondlink is enslaved to bond0 and up while a slave is up; a slave's link change is noticed by the
    fast watch (no networkd, no ip: the calls are recorded)."""
    net = tmp_path / "sys/class/net"
    for nd in ("ib0", "ib1", "bondlink"):
        (net / nd).mkdir(parents=True)
        (net / nd / "operstate").write_text("up\n")
    (net / "bondlink" / "flags").write_text("0x1002\n")  # down, not enslaved
    monkeypatch.setenv("CLUSTERCERT_LAB_ROOT", str(tmp_path))
    monkeypatch.syspath_prepend(str(SOURCE.parent))
    from labsim import agent

    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(agent, "sh", lambda *argv, check=False: calls.append(argv))
    agent.sync_bond_link("bond0", True)
    assert calls == [
        ("ip", "link", "set", "bondlink", "master", "bond0"),
        ("ip", "link", "set", "bondlink", "up"),
    ]
    calls.clear()
    (net / "bondlink" / "flags").write_text("0x1003\n")
    (net / "bondlink" / "master").symlink_to(net / "bond0")
    agent.sync_bond_link("bond0", True)
    assert calls == []  # nothing changed: no ip call
    agent.sync_bond_link("bond0", False)  # no slave up: the data path goes down
    assert calls == [("ip", "link", "set", "bondlink", "down")]
    calls.clear()
    agent.sync_bond_link(None, False)  # the bond is gone
    assert calls == [("ip", "link", "set", "bondlink", "nomaster"), ("ip", "link", "set", "bondlink", "down")]

    calls.clear()
    st: dict = {"bond_addresses": None}
    agent.sync_bond_addresses("bond0", ["10.253.0.11/24"], st)
    agent.sync_bond_addresses("bond0", ["10.253.0.11/24"], st)  # unchanged: no ip call
    agent.sync_bond_addresses("bond0", ["10.253.0.21/24"], st)
    assert calls == [("ip", "addr", "replace", "10.253.0.11/24", "dev", "bond0"),
                     ("ip", "addr", "del", "10.253.0.11/24", "dev", "bond0"),
                     ("ip", "addr", "replace", "10.253.0.21/24", "dev", "bond0")]

    state = {
        "bond_config": {"slaves": ["ib0", "ib1"]},
        "bond_created": True,
        "slave_up": {"ib0": True, "ib1": True},
    }
    assert not agent.bond_slaves_changed(state)
    (net / "ib0" / "operstate").write_text("down\n")
    assert agent.bond_slaves_changed(state)
    synced = []
    monkeypatch.setattr(
        agent, "sync_bond", lambda st: synced.append(time.monotonic()) or st["slave_up"].update(ib0=False)
    )
    t0 = time.monotonic()
    agent.watch_bond(state, 0.3)
    assert len(synced) == 1 and synced[0] - t0 < 0.1  # within a few fast-watch periods, once

    # with the kernel's link notifications (a socketpair stands in for rtnetlink): no notification,
    # no read of the slaves until the tick; one notification, the change is synced at once
    state["slave_up"]["ib0"] = True
    kernel, events = socket.socketpair()
    events.setblocking(False)
    synced.clear()
    t0 = time.monotonic()
    agent.watch_bond(state, 0.2, events)
    assert synced == [] and time.monotonic() - t0 >= 0.2
    state["slave_up"]["ib0"] = True
    t0 = time.monotonic()  # before the timer starts: its 0.1 s are counted from here or later
    threading.Timer(0.1, kernel.send, (b"RTM_NEWLINK",)).start()
    agent.watch_bond(state, 0.5, events)
    assert len(synced) == 1 and 0.1 <= synced[0] - t0 < 0.2, [x - t0 for x in synced]
    kernel.close()
    events.close()
    real = agent.link_events()  # rtnetlink's link group opens unprivileged on Linux
    assert real is not None and real.fileno() >= 0
    real.close()
    assert not agent.bond_slaves_changed(
        {"bond_config": {"slaves": ["ib0"]}, "bond_created": True, "slave_up": {}}
    )


def test_agent_creates_the_bond_once_the_config_is_written(tmp_path, monkeypatch):
    """`networkctl reload` leaves no trace: a bond written to networkd's config is picked up on the next
    tick without a networkd restart, with its address, its data path and its sysfs files."""
    net = tmp_path / "etc/systemd/network"
    net.mkdir(parents=True)
    for nd in ("ib0", "ib1", "bondlink"):
        (tmp_path / "sys/class/net" / nd).mkdir(parents=True)
        (tmp_path / "sys/class/net" / nd / "operstate").write_text("up\n")
    (tmp_path / "sys/class/net/bondlink/flags").write_text("0x1002\n")
    monkeypatch.setenv("CLUSTERCERT_LAB_ROOT", str(tmp_path))
    monkeypatch.syspath_prepend(str(SOURCE.parent))
    from labsim import agent

    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(
        agent, "sh", lambda *argv, check=False: calls.append(argv) or subprocess.CompletedProcess(argv, 0)
    )
    monkeypatch.setattr(agent, "networkd_pid", lambda: 4242)  # the same networkd all along: no restart
    merged = tmp_path / "merged"
    monkeypatch.setattr(agent, "overlay_netdev", lambda name: str(merged / name))
    state: dict = {}
    agent.sync_bond(state)
    assert state["bond_config"] is None and not [c for c in calls if c[:3] == ("ip", "link", "add")]
    (net / "05-bond0.netdev").write_text(
        "[NetDev]\nName=bond0\nKind=bond\n\n[Bond]\nMode=active-backup\nMIIMonitorSec=100ms\n"
    )
    (net / "05-bond0.network").write_text("[Match]\nName=bond0\n\n[Network]\nAddress=10.253.0.11/24\n")
    (net / "05-ib0.network").write_text("[Match]\nName=ib0\n\n[Network]\nBond=bond0\nPrimarySlave=yes\n")
    (net / "05-ib1.network").write_text("[Match]\nName=ib1\n\n[Network]\nBond=bond0\n")
    agent.sync_bond(state)
    assert ("ip", "link", "add", "bond0", "type", "bridge", "stp_state", "0", "forward_delay", "0") in calls
    assert ("ip", "addr", "replace", "10.253.0.11/24", "dev", "bond0") in calls
    assert ("ip", "link", "set", "bondlink", "master", "bond0") in calls and (
        "ip",
        "link",
        "set",
        "bondlink",
        "up",
    ) in calls
    assert (merged / "bond0/bonding/active_slave").read_text() == "ib0\n"


def test_every_tool_says_it_is_simulated(sim):
    sim.driver_loaded()
    for tool in ("nvidia-smi", "ib_write_bw", "all_reduce_perf", "nvbandwidth", "dcgmi", "nvidia-ctk",
                 "ibv_devinfo", "nv-fabricmanager", "nvidia-persistenced"):
        out = sim.ok(tool, "--version")
        assert "clustercert lab simulation" in out, tool


def test_labsim_is_stdlib_only():
    """Every import in the node-side code is from the standard library (nodes have no venv)."""
    allowed = set(sys.stdlib_module_names) | {"labsim"}
    for f in SOURCE.glob("*.py"):
        for line in f.read_text().splitlines():
            s = line.strip()
            if s.startswith("import ") or (s.startswith("from ") and " import " in s):
                mod = s.split()[1].split(".")[0]
                assert mod in allowed or mod == "" or s.startswith("from ."), f"{f.name}: {s}"





def _sim_bin(sim, *tools: str) -> Path:
    """Executables named like the real tools that run the simulator (what a lab node has in /usr/bin)."""
    d = sim.tmp / "bin"
    d.mkdir(exist_ok=True)
    for t in tools:
        (d / t).write_text(f'#!/bin/sh\nexec {PY} {SOURCE} {t} "$@"\n')
        (d / t).chmod(0o755)
    return d


def test_nvidia_smi_loop_reports_gpus_busy_while_all_reduce_runs(sim):
    """The certify probe's script as it runs on a node: utilisation sampled while all_reduce_perf runs."""
    from clustercert.model.evidence import CommandResult
    from clustercert.model.profile import load_profile
    from clustercert.probes.commands import nccl_1node_cmd, with_util_sampling
    from clustercert.probes.evaluate import eval_gpu_util, split_util

    sim.driver_loaded()
    sim.start_daemon("nv-fabricmanager", "/run/nvidia-fabricmanager/nv-fabricmanager.pid")
    idle = sim.ok("nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits")
    assert idle.splitlines() == [f"{i}, 0" for i in range(8)]
    env = sim.env(PATH=f"{_sim_bin(sim, 'nvidia-smi', 'all_reduce_perf')}:{os.environ['PATH']}")
    th = load_profile("lab").thresholds["gpu_util_under_load"]

    def run(gpus: int):
        p = subprocess.run(
            ["/bin/sh", "-c", with_util_sampling(nccl_1node_cmd(gpus))],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        load, samples = split_util(CommandResult(p.returncode, p.stdout, p.stderr, False, 1.0, "x"))
        assert p.returncode == 0 and parse("nccl-tests", load.stdout)["ok"], p.stdout + p.stderr
        return eval_gpu_util("node01", th, 8, load, samples, 60)

    ms = run(8)
    assert [m.status for m in ms] == ["pass"] * 8, [m.observed for m in ms]
    assert all(m.value == 100 for m in ms)
    # all_reduce_perf on four GPUs: the other four stay idle and fail the rule
    ms = run(4)
    assert [m.status for m in ms] == ["pass"] * 4 + ["fail"] * 4
    # nothing claims the GPUs once the workload has ended
    assert (
        sim.ok("nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader").splitlines()
        == ["0 %"] * 8
    )


def test_nvidia_smi_loop_prints_the_header_once_and_rows_each_interval(sim):
    sim.driver_loaded()
    p = sim.background(
        "nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,nounits", "-lms", "100"
    )
    time.sleep(1.5)
    p.terminate()
    out, _ = p.communicate(timeout=10)
    lines = out.splitlines()
    assert lines[0] == "index, utilization.gpu [%]" and lines.count(lines[0]) == 1
    assert len(lines) >= 1 + 8 * 3 and set(lines[1:]) <= {f"{i}, 0" for i in range(8)}


def _two_nodes(tmp_path):
    a, b = Sim(tmp_path / "a", "node01", 1), Sim(tmp_path / "b", "node02", 2)
    return a, b


def _lat(server: Sim, client: Sim) -> float:
    port = str(_free_port())
    srv = server.background("ib_write_lat", "-d", "mlx5_0", "-p", port, "-n", "10000")
    rec = parse("perftest", client.ok("ib_write_lat", "-d", "mlx5_0", "-p", port, "-n", "10000", "127.0.0.1"))
    srv.communicate(timeout=30)
    return rec["rows"][0]["t_p99_usec"]


def test_perftest_latency_between_nodes_reflects_a_slowed_link(tmp_path):
    a, b = _two_nodes(tmp_path)
    try:
        assert _lat(a, b) == pytest.approx(1.07)
        b.fault("link_slow", fabric="0", factor="0.3")
        assert _lat(a, b) == pytest.approx(1.02 / 0.3 + 0.05, abs=0.006)  # both ends see the slow link
        assert _lat(b, a) == pytest.approx(1.02 / 0.3 + 0.05, abs=0.006)
        assert _lat(b, b) == pytest.approx(1.07)  # a loopback never leaves the HCA
    finally:
        a.close()
        b.close()


def test_dcgmi_diag_levels(sim):
    from clustercert.model.profile import load_profile
    from clustercert.probes.evaluate import eval_dcgmi_diag

    sim.driver_loaded()
    sim.start_daemon("nvidia-persistenced", "/run/nvidia-persistenced/nvidia-persistenced.pid")
    sim.start_daemon("nv-hostengine", "/run/nvidia-dcgm/nv-hostengine.pid")
    names = {}
    for level in (1, 2, 3, 4):
        rec = parse("dcgmi-diag", sim.ok("dcgmi", "diag", "-r", str(level)))
        names[level] = [t["name"] for t in rec["tests"]]
    assert "PCIe" not in names[1] and {"PCIe", "GPU Memory"} <= set(names[2])
    assert "Targeted Power" in names[3] and {"Memtest", "Pulse Test"} <= set(names[4])
    assert parse("dcgmi-diag", sim.ok("dcgmi", "diag", "-r", "medium"))["tests"] == parse(
        "dcgmi-diag", sim.ok("dcgmi", "diag", "-r", "2"))["tests"]
    bad = sim.run("dcgmi", "diag", "-r", "7")
    assert bad.returncode != 0 and bad.stdout.startswith("Error:")
    # a degraded PCIe link passes the level-1 deployment checks and fails level 2
    sim.fault("gpu_pcie_degraded", gpu="5")
    diag = load_profile("lab").dcgm_diag
    assert [
        m.status for m in eval_dcgmi_diag("node01", diag.model_copy(update={"level": 1}), _res(sim, 1), 60)
    ] == ["pass"]
    ms = eval_dcgmi_diag("node01", diag, _res(sim, 2), 60)
    assert [(m.subject, m.status) for m in ms] == [("PCIe", "fail")] and "GPU 5" in ms[0].observed
    # uncorrectable memory errors fail the deployment check, GPU Memory and (level 4) Memtest
    sim.fault("gpu_ecc_uncorrectable", gpu="2")
    ms = eval_dcgmi_diag("node01", diag.model_copy(update={"level": 4}), _res(sim, 4), 60)
    assert {m.subject for m in ms if m.status == "fail"} == {
        "Page Retirement/Row Remap",
        "PCIe",
        "GPU Memory",
        "Memtest",
    }
    assert {m.subject for m in ms if m.status == "error"} == {"EUD Test"}  # skipped by dcgmi: never a pass


def _res(sim, level: int):
    from clustercert.model.evidence import CommandResult

    r = sim.run("dcgmi", "diag", "-r", str(level))
    return CommandResult(r.returncode, r.stdout, r.stderr, False, 1.0, f"dcgmi diag -r {level}")


def _allreduce_2nodes(
    a: Sim, b: Sim, per_node: int = 2, slurm: bool = False, g: int = 1
) -> tuple[list, dict]:
    """all_reduce_perf as the processes of a 2-node launch (per_node on each, -g GPUs each), with the
    environment OpenMPI 4.1's mpirun gives its ranks (checked against Debian 12's openmpi-bin) or Slurm's
    srun."""
    port = str(_free_port())
    size = 2 * per_node
    procs = []
    for rank in range(size):
        node, local = (a, b)[rank // per_node], rank % per_node
        if slurm:
            env = {"SLURM_PROCID": str(rank), "SLURM_NTASKS": str(size), "SLURM_LOCALID": str(local),
                   "SLURM_NTASKS_PER_NODE": str(per_node), "SLURM_STEP_NUM_NODES": "2",
                   "SLURM_LAUNCH_NODE_IPADDR": "127.0.0.1", "SLURM_STEP_NODELIST": "localhost"}
        else:
            env = {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(size),
                   "OMPI_COMM_WORLD_LOCAL_RANK": str(local), "OMPI_COMM_WORLD_LOCAL_SIZE": str(per_node),
                   "OMPI_MCA_orte_num_nodes": "2",
                   "OMPI_MCA_orte_hnp_uri": "1792212992.0;tcp://192.0.2.254,127.0.0.1:59653;tcp6://"
                                            "[fd00::2]:38349"}
        env["CLUSTERCERT_LAB_NCCL_RANK_PORT"] = port
        procs.append(
            subprocess.Popen(
                [PY, str(SOURCE), "all_reduce_perf", "-b", "1G", "-e", "2G", "-f", "2", "-g", str(g)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=node.env(**env),
            )
        )
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * size, outs
    assert all(not o for o, _ in outs[1:]), "only rank 0 prints"
    return outs, parse("nccl-tests", outs[0][0])


@pytest.mark.parametrize("slurm", [False, True])
@pytest.mark.parametrize("per_node,g", [(2, 1), (1, 8)], ids=["2procs-g1", "1proc-g8"])
def test_nccl_all_reduce_across_nodes_is_bounded_by_the_rails_of_both_ends(tmp_path, slurm, per_node, g):
    a, b = _two_nodes(tmp_path)
    try:
        for s in (a, b):
            s.driver_loaded()
            s.start_daemon("nv-fabricmanager", "/run/nvidia-fabricmanager/nv-fabricmanager.pid")
        _outs, rec = _allreduce_2nodes(a, b, per_node, slurm, g)
        n = 2 * per_node * g  # NCCL ranks: one per GPU, numbered process by process
        assert [d["rank"] for d in rec["devices"]] == list(range(n))
        assert [(d["host"], d["device"]) for d in rec["devices"]] == [
            (node, gpu) for node in ("node01", "node02") for gpu in range(per_node * g)]
        assert f"nGpus {g} " in _outs[0][0]
        healthy = rec["busbw_at_max_size_gbyte_per_s"]
        assert healthy == pytest.approx(2 * 400 / 8 * 0.96, abs=0.2)  # 2 NDR rails, both ends healthy
        b.fault("link_slow", fabric="0", factor="0.3")  # the far end's link slows the pair
        _outs, rec = _allreduce_2nodes(a, b, per_node, slurm, g)
        assert rec["busbw_at_max_size_gbyte_per_s"] == pytest.approx(2 * 50 * 0.3 * 0.96, abs=0.2)
    finally:
        a.close()
        b.close()


# ---- issue 22: GPUDirect RDMA, NCCL's transport lines, NVLink aggregate, numactl ---------------------------

def _gdr_loopback(sim: Sim, gpu: str = "0") -> subprocess.CompletedProcess:
    port = str(_free_port())
    server = sim.background("ib_write_bw", "-d", "mlx5_0", "--report_gbits", "-p", port, f"--use_cuda={gpu}")
    r = sim.run("ib_write_bw", "-d", "mlx5_0", "--report_gbits", "-p", port, f"--use_cuda={gpu}", "127.0.0.1")
    server.communicate(timeout=30)
    return r


def test_perftest_use_cuda_needs_peermem_and_gdr(sim):
    sim.driver_loaded()
    r = sim.run("ib_write_bw", "-d", "mlx5_0", "--use_cuda=0", "127.0.0.1")
    assert r.returncode == 1 and "Couldn't allocate MR" in r.stderr and "initializing CUDA" in r.stdout
    sim.ok("modload", "ib_uverbs")
    sim.ok("modload", "nvidia_peermem")
    r = _gdr_loopback(sim)
    assert r.returncode == 0, r.stderr
    rec = parse("perftest", r.stdout)
    assert "Picking device No. 0" in r.stdout and rec["bw_avg_gbit_per_s"] == pytest.approx(392.3, abs=0.006)
    sim.fault("gdr_disabled")
    assert parse("perftest", _gdr_loopback(sim).stdout)["bw_avg_gbit_per_s"] == pytest.approx(
        117.69, abs=0.006
    )
    r = sim.run("ib_write_bw", "-d", "mlx5_0", "--use_cuda=9", "127.0.0.1")
    assert r.returncode == 1 and "No CUDA device 9" in r.stderr


def test_nccl_prints_its_transport_lines_with_nccl_debug_info(tmp_path):
    """Across two nodes with NCCL_DEBUG=INFO each process prints what real NCCL prints: its IB NICs and, for
    the GPU nearest each HCA, the connections via NET/IB/<n>/GDRDMA; gdr_disabled on one node drops GDRDMA on
    its lines only, and clustercert's transport check names that node."""
    from clustercert.model.evidence import CommandResult
    from clustercert.model.profile import load_profile
    from clustercert.probes.workload import eval_nccl_transport

    a, b = _two_nodes(tmp_path)
    for s in (a, b):
        s.driver_loaded()
        s.ok("modload", "ib_uverbs")
        s.ok("modload", "nvidia_peermem")
        s.start_daemon("nv-fabricmanager", "/run/nvidia-fabricmanager/nv-fabricmanager.pid")

    def run() -> str:
        port, procs = str(_free_port()), []
        for rank, node in enumerate((a, b)):
            env = {
                "OMPI_COMM_WORLD_RANK": str(rank),
                "OMPI_COMM_WORLD_SIZE": "2",
                "OMPI_COMM_WORLD_LOCAL_RANK": "0",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
                "OMPI_MCA_orte_num_nodes": "2",
                "NCCL_DEBUG": "INFO",
                "OMPI_MCA_orte_hnp_uri": "1.0;tcp://127.0.0.1:59653",
                "CLUSTERCERT_LAB_NCCL_RANK_PORT": port,
            }
            procs.append(
                subprocess.Popen(
                    [PY, str(SOURCE), "all_reduce_perf", "-b", "1G", "-e", "1G", "-g", "8"],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=node.env(**env),
                )
            )
        outs = [p.communicate(timeout=60) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        return outs[0][0] + outs[1][0]

    try:
        host = socket.gethostname()
        text = run()
        # the INFO lines do not disturb it
        assert parse("nccl-tests", text)["busbw_at_max_size_gbyte_per_s"] > 0
        rec = parse("nccl-info-transport", text)
        conns = rec["hosts"][host]["connections"]
        net = [c for c in conns if c["transport"] == "NET"]
        assert net and all(c["gdr"] and c["net"] == "IB" for c in net)
        assert {c["hca"] for c in net} == {"mlx5_0", "mlx5_1"} and any(c["transport"] == "P2P" for c in conns)
        b.fault("gdr_disabled")
        text = run()
        net = [
            c
            for c in parse("nccl-info-transport", text)["hosts"][host]["connections"]
            if c["transport"] == "NET"
        ]
        assert sorted(c["gdr"] for c in net) == [False] * (len(net) // 2) + [True] * (len(net) // 2)
        assert "GPU Direct RDMA Disabled for HCA 0 'mlx5_0'" in text
        m = eval_nccl_transport(
            host, "other", load_profile("lab"), CommandResult(0, text, "", False, 1.0, "x"), 60
        )
        assert m.status == "fail" and "mlx5_0 without GDRDMA" in m.observed
    finally:
        a.close()
        b.close()


def test_nvbandwidth_nvlink_aggregate_and_nvlink_down(sim):
    from clustercert.model.evidence import CommandResult
    from clustercert.model.profile import load_profile
    from clustercert.probes.workload import eval_nvlink_aggregate

    sim.driver_loaded()
    sim.fault("nvlink_down", gpu="0", port="5")
    out = sim.ok("nvbandwidth", "-t", "all_to_one_write_ce", "-t", "one_to_all_write_ce")
    ms = eval_nvlink_aggregate("n", load_profile("lab").thresholds["nvlink_aggregate"],
                               CommandResult(0, out, "", False, 1.0, "nvbandwidth"), 30)
    assert [(m.subject, m.status) for m in ms] == [("GPU0", "fail")] + [
        (f"GPU{g}", "pass") for g in range(1, 8)
    ]
    assert ms[1].value == 840.0 and ms[0].value == pytest.approx(840 * 17 / 18, abs=0.02)


def test_numactl_checks_the_simulated_numa_nodes(sim):
    assert "available: 2 nodes (0-1)" in sim.ok("numactl", "-H")
    assert sim.ok("numactl", "--cpunodebind=1", "--membind=1", "echo", "pinned") == "pinned\n"
    r = sim.run("numactl", "-N", "2", "-m", "2", "echo", "x")
    assert r.returncode == 1 and "node argument 2 is out of range" in r.stderr


# ---- issue 33: a launch across N nodes, NCCL_IB_HCA, nccl_one_host, nccl_scale_slow
# --------------------------

def _allreduce_nodes(sims: list, **extra: str) -> dict:
    """all_reduce_perf as one process per node (-g 8) of an mpirun launch across ``sims``, ``extra`` exported
    to every process (mpirun -x); the parsed output of rank 0."""
    port, size, procs = str(_free_port()), len(sims), []
    for rank, node in enumerate(sims):
        env = {
            "OMPI_COMM_WORLD_RANK": str(rank),
            "OMPI_COMM_WORLD_SIZE": str(size),
            "OMPI_COMM_WORLD_LOCAL_RANK": "0",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
            "OMPI_MCA_orte_num_nodes": str(size),
            "OMPI_MCA_orte_hnp_uri": "1792212992.0;tcp://127.0.0.1:59653",
            "CLUSTERCERT_LAB_NCCL_RANK_PORT": port,
            **extra,
        }
        procs.append(
            subprocess.Popen(
                [PY, str(SOURCE), "all_reduce_perf", "-b", "1G", "-e", "2G", "-f", "2", "-g", "8"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=node.env(**env),
            )
        )
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * size, outs
    return parse("nccl-tests", outs[0][0])


def test_nccl_across_three_nodes_honours_nccl_ib_hca_and_the_launch_and_scaling_faults(tmp_path):
    from clustercert.probes.evaluate import nccl_rank_problem

    sims = [Sim(tmp_path / f"n{i}", f"node0{i}", i) for i in (1, 2, 3)]
    addrs = {f"node0{i}": f"10.0.0.{i}" for i in (1, 2, 3)}  # inventory name -> address
    try:
        for s in sims:
            s.driver_loaded()
            s.start_daemon("nv-fabricmanager", "/run/nvidia-fabricmanager/nv-fabricmanager.pid")
        rec = _allreduce_nodes(sims)
        assert nccl_rank_problem(rec, addrs, 8) is None
        assert rec["busbw_at_max_size_gbyte_per_s"] == pytest.approx(2 * 50 * 0.96, abs=0.2)  # 2 NDR rails
        # NCCL_IB_HCA as NCCL reads it: "=" exact names -> one rail of two; a prefix "mlx5" -> both
        one = _allreduce_nodes(sims, NCCL_IB_HCA="=mlx5_0")
        assert one["busbw_at_max_size_gbyte_per_s"] == pytest.approx(50 * 0.96, abs=0.2)
        both = _allreduce_nodes(sims, NCCL_IB_HCA="mlx5")
        assert both["busbw_at_max_size_gbyte_per_s"] == pytest.approx(2 * 50 * 0.96, abs=0.2)
        # a slow spine: only a run across more than two nodes with node03 in it is slowed
        sims[2].fault("nccl_scale_slow", factor="0.5")
        assert _allreduce_nodes(sims)["busbw_at_max_size_gbyte_per_s"] == pytest.approx(50 * 0.96, abs=0.2)
        assert _allreduce_nodes(sims[1:])["busbw_at_max_size_gbyte_per_s"] == pytest.approx(
            2 * 50 * 0.96, abs=0.2
        )
        # every rank on the first host: the rank lines name node01 only, the figure is the NVLink one
        sims[1].fault("nccl_one_host")
        rec = _allreduce_nodes(sims)
        assert {d["host"] for d in rec["devices"]} == {"node01"} and len(rec["devices"]) == 24
        assert "24 ranks on node01, none on node02, none on node03" in nccl_rank_problem(rec, addrs, 8)
        assert rec["busbw_at_max_size_gbyte_per_s"] > 2 * 50
    finally:
        for s in sims:
            s.close()
