"""Probe command lines: pure builders, every value quoted (clustercert.shell.q) where it is built.

Nothing here runs anything: clustercert.probes.run hands these strings to clustercert.collect.ssh.
"""

from __future__ import annotations

from clustercert.probes.catalog import NVBW_TESTS
from clustercert.shell import q

PERFTEST_PORT = 18515
IPERF_PORT = 5201
LAT_ITERS = 10000
CONNECT_TIMEOUT_MS = 3000   # iperf3 --connect-timeout: a dead path fails in seconds, not at the probe timeout
REACH_WAIT_S = 1            # ping -W: how long the reachability pass waits for an echo reply


# ---- ib_write_bw / ib_write_lat ----------------------------------------------------------------

def perftest_cmd(
    tool: str, hca: str, port: int, tcp_port: int, duration: int, server_addr: str | None = None
) -> str:
    """Bandwidth tests run for ``duration`` seconds (-D). Latency tests run a fixed number of iterations
    (-n): perftest prints the percentile columns only in iteration mode (with -D it prints t_avg alone)."""
    if tool.endswith("_lat"):
        cmd = f"{q(tool)} -d {q(hca)} -i {q(port)} -p {q(tcp_port)} -n {LAT_ITERS} -F"
    else:
        cmd = f"{q(tool)} -d {q(hca)} -i {q(port)} -p {q(tcp_port)} --report_gbits -D {q(duration)} -F"
    return cmd + (f" {q(server_addr)}" if server_addr else "")


# ---- iperf3 over IPoIB -----------------------------------------------------------------------------

def iperf3_server_cmd(bind: str, port: int) -> str:
    return f"iperf3 -s -1 -B {q(bind)} -p {q(port)}"


def iperf3_client_cmd(server: str, bind: str, port: int, duration: int) -> str:
    """The client bound to its own fabric address; --connect-timeout: a server that cannot be reached
    fails the client in seconds (without it a connect through a downed interface waits out the
    probe's whole timeout)."""
    return (f"iperf3 -c {q(server)} -B {q(bind)} -p {q(port)} -t {q(duration)} "
            f"--connect-timeout {CONNECT_TIMEOUT_MS} -J")


# ---- reachability pass -------------------------------------------------------------------------

def reach_cmd(src: str, dst: str) -> str:
    """One echo from the fabric address ``src`` to ``dst`` (ping -I binds the source), waiting at most
    REACH_WAIT_S for the reply: a link that is down fails here in about a second."""
    return f"ping -n -q -c 1 -W {REACH_WAIT_S} -I {q(src)} {q(dst)}"


# ---- NCCL on one node, and across two nodes (mpirun, or srun on a Slurm cluster) -----------------

NCCL_SIZES = "-b 8 -e 8G -f 2"
PROBE_TAG_VAR = "CLUSTERCERT_PROBE_TAG"
LAUNCH_DAEMONS = ("orted", "prted")  # OpenMPI's per-node launch daemons (4.x: orted; 5.x: prted)


def nccl_1node_cmd(gpus: int) -> str:
    return f"all_reduce_perf {NCCL_SIZES} -g {q(gpus)}"


NCCL_DEBUG_ENV = "NCCL_DEBUG=INFO"  # the pair run prints its transport lines (probe.nccl_transport)


def nccl_pair_mpirun_cmd(hosts: list[str], gpus: int, tag: str, debug: bool = False) -> str:
    """all_reduce_perf across ``hosts`` with OpenMPI's mpirun: one process per host (-H host:1, rank 0
    on the first host, where mpirun runs) driving all ``gpus`` GPUs of its node (-g), the nccl-tests
    README's "-np <nodes> ... -g <gpus per node>" form: NCCL gets one rank per GPU all the same, and
    a node starts one process instead of one per GPU. mpirun reaches the other hosts over SSH in batch
    mode (the cluster_ssh role's key, host keys checked). ``tag`` is exported to every process (-x) so
    that the cleanup can find them."""
    spec = q(",".join(f"{h}:1" for h in hosts))
    return (f"mpirun --allow-run-as-root -np {len(hosts)} -H {spec} --map-by slot --bind-to none "
            f"--mca plm_rsh_args '-o BatchMode=yes' -x {PROBE_TAG_VAR}={q(tag)} "
            + (f"-x {NCCL_DEBUG_ENV} " if debug else "") + f"all_reduce_perf {NCCL_SIZES} -g {q(gpus)}")


def nccl_pair_srun_cmd(nodes: list[str], gpus: int, tag: str, time_limit_s: float, gres: str | None,
                       debug: bool = False) -> str:
    """all_reduce_perf across ``nodes`` (Slurm node names) as one srun step, one task per node driving
    its ``gpus`` GPUs (-g), given them by Slurm as ``gres`` (gpu, or gpu:TYPE; --gres=gpu:8 per node:
    where ConstrainDevices is set a step that asks for none sees none); ``gres`` None asks for no GRES.
    The job is named after ``tag`` (the cleanup cancels it by name) and carries its own time limit."""
    minutes = max(1, int((time_limit_s + 59) // 60))
    want = f"--gres={q(gres)}:{q(gpus)} " if gres else ""
    return (f"srun --nodes={len(nodes)} --ntasks-per-node=1 --nodelist={q(','.join(nodes))} {want}"
            f"--job-name=clustercert-nccl-{q(tag)} --time={minutes} --kill-on-bad-exit=1 "
            f"--export=ALL,{PROBE_TAG_VAR}={q(tag)}{',' + NCCL_DEBUG_ENV if debug else ''} "
            f"all_reduce_perf {NCCL_SIZES} -g {q(gpus)}")


def _env_assignments(env: dict[str, str]) -> str:
    return "".join(f"{q(f'{k}={v}')} " for k, v in env.items())


def nccl_cluster_mpirun_cmd(hosts: list[str], gpus: int, tag: str, env: dict[str, str] | None = None) -> str:
    """all_reduce_perf across every host of ``hosts`` at once (probe.nccl_cluster): the pair run's launch
    (nccl_pair_mpirun_cmd: one process per host driving its ``gpus`` GPUs, rank 0 on the first host) over
    N hosts, with ``env`` (NCCL_IB_HCA for one rail group) exported to every process by -x NAME=VALUE."""
    spec = q(",".join(f"{h}:1" for h in hosts))
    xs = "".join(f"-x {q(f'{k}={v}')} " for k, v in (env or {}).items())
    return (f"mpirun --allow-run-as-root -np {len(hosts)} -H {spec} --map-by slot --bind-to none "
            f"--mca plm_rsh_args '-o BatchMode=yes' -x {PROBE_TAG_VAR}={q(tag)} {xs}"
            f"all_reduce_perf {NCCL_SIZES} -g {q(gpus)}")


def nccl_cluster_srun_cmd(nodes: list[str], gpus: int, tag: str, time_limit_s: float, gres: str | None,
                          env: dict[str, str] | None = None) -> str:
    """The same run as ONE srun step over ``nodes`` (Slurm node names), one task per node (as
    nccl_pair_srun_cmd). ``env`` is set in srun's own environment and exported by name (--export=ALL,NAME):
    srun splits --export at commas, and NCCL_IB_HCA's value holds some."""
    minutes = max(1, int((time_limit_s + 59) // 60))
    want = f"--gres={q(gres)}:{q(gpus)} " if gres else ""
    env = env or {}
    names = "".join(f",{k}" for k in env)
    return (f"{'env ' + _env_assignments(env) if env else ''}"
            f"srun --nodes={len(nodes)} --ntasks-per-node=1 --nodelist={q(','.join(nodes))} {want}"
            f"--job-name=clustercert-nccl-{q(tag)} --time={minutes} --kill-on-bad-exit=1 "
            f"--export=ALL,{PROBE_TAG_VAR}={q(tag)}{names} all_reduce_perf {NCCL_SIZES} -g {q(gpus)}")


def nccl_pair_cleanup_cmd(tag: str, slurm: bool = False, job: str = "nccl") -> str:
    """Kills, on one node, what a launch tagged ``tag`` left behind: every process whose environment
    carries the tag (the ranks) and the launch daemon (orted/prted) that is the parent of one; on a
    Slurm cluster the job named after the tag is cancelled first. Prints KILLED=<pids> (may be empty).
    Processes of other launches (another tag, or none) are never touched."""
    want = q(f"{PROBE_TAG_VAR}={tag}")
    daemons = "|".join(LAUNCH_DAEMONS)
    scancel = f"scancel --name=clustercert-{job}-{q(tag)} 2>/dev/null; " if slurm else ""
    # one grep over every process's environment (NUL-separated entries: -z, the whole entry: -x)
    return (scancel + f"k=''; for f in $(grep -slzxF {want} /proc/[0-9]*/environ); do p=${{f#/proc/}}; "
            "p=${p%/environ}; [ \"$p\" = \"$$\" ] && continue; k=\"$k $p\"; pp=$(awk '/^PPid:/{print "
            f"$2}}' /proc/$p/status 2>/dev/null); case \"$(cat /proc/$pp/comm 2>/dev/null)\" in {daemons}) "
            "k=\"$k $pp\";; esac; done; [ -n \"$k\" ] && kill -KILL $k 2>/dev/null; echo \"KILLED=$k\"; "
            "true")


# ---- GPU utilisation sampled during the NCCL run --------------------------------------------------

UTIL_MARK = "# clustercert: GPU utilisation samples (nvidia-smi --query-gpu=index,utilization.gpu)"
UTIL_INTERVAL_MS = 200


def util_sampler_cmd(interval_ms: int = UTIL_INTERVAL_MS) -> str:
    return f"nvidia-smi --query-gpu=index,utilization.gpu --format=csv,noheader,nounits -lms {q(interval_ms)}"


def with_util_sampling(cmd: str, interval_ms: int = UTIL_INTERVAL_MS) -> str:
    """``cmd`` with nvidia-smi sampling GPU utilisation in the background while it runs, as one shell
    script (one remote command, one timeout): the samples go to a temp file unlinked as soon as it is
    open, so nothing is left behind even when the whole process group is killed at the timeout; the
    sampler is stopped when ``cmd`` ends and its samples are printed after ``cmd``'s output, below
    UTIL_MARK. The exit status is ``cmd``'s."""
    return ('t=$(mktemp) || exit 1; exec 3>"$t" 4<"$t"; rm -f "$t"; '
            f"{util_sampler_cmd(interval_ms)} >&3 2>&1 & s=$!; "
            f"{cmd}; rc=$?; kill $s 2>/dev/null; wait $s 2>/dev/null; "
            f"echo '{UTIL_MARK}'; cat <&4; exit $rc")


# ---- dcgmi diag, nvbandwidth -----------------------------------------------------------------------

# DCGM major versions whose `dcgmi diag -j` prints a layout the dcgmi-diag-json parser reads (3.x "DCGM GPU
# Diagnostic", 4.x "DCGM Diagnostic"); older ones print the text table (dcgmi-diag reads every layout).
DCGM_JSON_PATTERN = '*"version: "[3-9].*|*"version: "[1-9][0-9]*'


def dcgmi_diag_label(level: int) -> str:
    """What the diagnostic is called in findings: ``dcgmi diag -r LEVEL``."""
    return f"dcgmi diag -r {q(level)}"


def dcgmi_diag_cmd(level: int) -> str:
    """``dcgmi diag -r LEVEL``, with ``-j`` where the installed DCGM prints a JSON layout the parser reads:
    the node's own ``dcgmi --version`` decides (DCGM 3.x and later: JSON; 1.x/2.x, or a version that cannot be
    told: the text table). The evaluator reads whichever came back."""
    base = dcgmi_diag_label(level)
    return f'case "$(dcgmi --version 2>/dev/null)" in {DCGM_JSON_PATTERN}) {base} -j;; *) {base};; esac'


def nvbandwidth_cmd(extra: tuple[str, ...] = (), base: bool = True) -> str:
    """nvbandwidth with the testcases the per-GPU thresholds judge (``base``), and ``extra`` ones
    (NVLINK_TESTS)."""
    tests = (*(NVBW_TESTS.values() if base else ()), *extra)
    return "nvbandwidth " + " ".join(f"-t {q(t)}" for t in tests)


# ---- issue 22: GPUDirect RDMA, NVLink aggregate, checkpoint storage, the DDP smoke test --------------

# loopback and pair servers of ib_write_bw --use_cuda, one port per GPU-NIC pair
GDR_PORT = PERFTEST_PORT + 300
# per GPU: all its peers into it, it into all peers
NVLINK_TESTS = ("all_to_one_write_ce", "one_to_all_write_ce")


def gdr_perftest_cmd(hca: str, port: int, tcp_port: int, duration: int, gpu: int, numa: int | None,
                     server_addr: str | None = None) -> str:
    """ib_write_bw from GPU memory (--use_cuda=GPU: perftest registers a buffer on that GPU with the HCA,
    which only GPUDirect RDMA allows), pinned to the pair's NUMA node (numactl: the CPU and host memory
    next to the GPU and the NIC) where topo -m shows it (None: not pinned)."""
    return ((f"numactl --cpunodebind={q(numa)} --membind={q(numa)} " if numa is not None else "")
            + perftest_cmd("ib_write_bw", hca, port, tcp_port, duration, server_addr).replace(
                " -F", f" -F --use_cuda={q(gpu)}", 1))


def perftest_help_cmd() -> str:
    """The GPUDirect preflight: perftest's usage text, which lists --use_cuda only in a build made with
    CUDA."""
    return "ib_write_bw --help"


def topo_cmd() -> str:
    return "nvidia-smi topo -m"


CHECKPOINT_FILE = ".clustercert-checkpoint"


def checkpoint_cmd(path: str, node: str, size_mib: int, runtime_s: int) -> str:
    """fio writes a checkpoint-sized file to ``path`` with direct I/O (1 MiB blocks, fsync at the end), then
    a second fio reads back what was written (``--size=100%``: the file as the write left it) and the file
    is deleted; each run stops after ``runtime_s`` seconds, so a slow path reports its bandwidth instead of
    running out the probe's timeout. Two runs, not two jobs of one: every job of one fio needs its size
    when fio starts (a read job without one fails, ``you need to specify size=``), and a read job given the
    checkpoint's size first lays out, untimed, whatever part a slow write did not reach. Each prints its JSON
    document (fio-json reads both); the exit status is the write's, else the read's. The file is named
    after the node: many nodes share a mount."""
    f = q(f"{path.rstrip('/')}/{CHECKPOINT_FILE}.{node}")
    common = f"fio --output-format=json --direct=1 --ioengine=psync --bs=1M --fallocate=none --filename={f}"
    return (
        f"{common} --name=write --rw=write --size={q(size_mib)}M --runtime={q(runtime_s)} --end_fsync=1; "
        "w=$?; "
        f"{common} --name=read --rw=read --size=100% --runtime={q(runtime_s)}; r=$?; rm -f -- {f}; "
        '[ "$w" = 0 ] && exit "$r"; exit "$w"'
    )


DDP_JOB = "ddp"
DDP_MASTER_ENV = "CLUSTERCERT_DDP_PORT"


def free_port_cmd(python: str) -> str:
    """Prints a TCP port free on this node (the kernel picks it) for the rendezvous."""
    return f"{q(python)} -c 'import socket; s=socket.socket(); s.bind((\"\", 0)); print(s.getsockname()[1])'"


def _ddp_torchrun(launcher: tuple[str, ...], python: str, text: str, script_args: list[str], nproc: int,
                  master: str, node_rank: str) -> str:
    """One node's torchrun: its processes run ``python -c <text>`` (--no_python); the port is "$1". The agent
    looks at its workers every second (torchrun's default, 5 s, is the least a launch then takes)."""
    return (" ".join(q(w) for w in launcher)
            + f" --nnodes=2 --nproc_per_node={q(nproc)} --node_rank={node_rank} --master_addr={q(master)} "
            f'--master_port="$1" --max_restarts=0 --monitor_interval=1 --no_python {q(python)} -c {q(text)} '
            + " ".join(q(a) for a in script_args))


def ddp_script_args(backend: str, ranks_per_node: int, gpus: int, steps: int, numel: int, timeout_s: float,
                    nnodes: int = 2) -> list[str]:
    """The DDP smoke test's arguments: what it checks the launch against (clustercert.remote.ddp_smoke)."""
    return [
        "--backend",
        backend,
        "--nnodes",
        str(nnodes),
        "--ranks-per-node",
        str(ranks_per_node),
        "--gpus",
        str(gpus),
        "--steps",
        str(steps),
        "--numel",
        str(numel),
        "--timeout",
        f"{timeout_s:g}",
    ]


def ddp_train_args(steps: int, width: int, depth: int, batch: int) -> list[str]:
    """probe.ddp_step's part of the arguments: DDP training steps on a width x depth MLP, ``batch`` rows a
    rank."""
    return ["--train-steps", str(steps), "--width", str(width), "--depth", str(depth), "--batch", str(batch)]


def ddp_launch_cmd(
    hosts: list[str],
    launcher: tuple[str, ...],
    python: str,
    text: str,
    script_args: list[str],
    nproc: int,
    env: dict[str, str],
    tag: str,
) -> str:
    """torchrun on both nodes over ssh, launched from the first (its address ``hosts[0]`` is the rendezvous:
    MASTER_ADDR; MASTER_PORT a port free there). The second node's torchrun is started over ssh in batch
    mode (the cluster_ssh role's key, host keys checked), as mpirun starts its daemons. ``env`` (the
    profile's ddp.env) and the probe's tag reach every process. The exit status is the first node's, else
    the second's."""
    envs = " ".join(f"{k}={q(v)}" for k, v in {**env, PROBE_TAG_VAR: tag}.items())
    inner = {
        r: f"exec env {envs} " + _ddp_torchrun(launcher, python, text, script_args, nproc, hosts[0], str(r))
        for r in (0, 1)
    }
    remote = f"sh -c {q(inner[1])} clustercert-ddp"
    return (f"port=$({free_port_cmd(python)}) || exit 1; "
            f"ssh -o BatchMode=yes -o ConnectTimeout=10 {q(hosts[1])} {q(remote)} \"$port\" & b=$!; "
            f"sh -c {q(inner[0])} clustercert-ddp \"$port\"; ra=$?; wait $b; rb=$?; "
            '[ "$ra" = 0 ] && exit "$rb"; exit "$ra"')


def ddp_srun_cmd(nodes: list[str], master: str, launcher: tuple[str, ...], python: str, text: str,
                 script_args: list[str], nproc: int, env: dict[str, str], tag: str, time_limit_s: float,
                 gres: str | None, gpus: int) -> str:
    """The same launch as one srun step, one task per node (its torchrun; the node rank is Slurm's
    SLURM_NODEID), given the node's GPUs as ``gres``; the rendezvous on ``master`` (the first node)."""
    minutes = max(1, int((time_limit_s + 59) // 60))
    want = f"--gres={q(gres)}:{q(gpus)} " if gres else ""
    # the profile's env in the task's command line, not in --export: srun splits --export at commas, and
    # a value may hold some (GLOO_SOCKET_IFNAME=eth0,eth1)
    envs = " ".join(f"{k}={q(v)}" for k, v in env.items())
    inner = (f"exec env {envs} " if envs else "exec ") + _ddp_torchrun(
        launcher, python, text, script_args, nproc, master, '"$SLURM_NODEID"'
    )
    return (f"port=$({free_port_cmd(python)}) || exit 1; "
            f"srun --nodes=2 --ntasks-per-node=1 --nodelist={q(','.join(nodes))} {want}"
            f"--job-name=clustercert-{DDP_JOB}-{q(tag)} --time={minutes} --kill-on-bad-exit=1 "
            f"--export=ALL,{PROBE_TAG_VAR}={q(tag)} sh -c {q(inner)} clustercert-ddp \"$port\"")
