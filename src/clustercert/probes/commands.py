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

def perftest_cmd(tool: str, hca: str, port: int, tcp_port: int, duration: int, server_addr: str | None = None) -> str:
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


def nccl_pair_mpirun_cmd(hosts: list[str], gpus: int, tag: str) -> str:
    """all_reduce_perf across ``hosts`` with OpenMPI's mpirun: one process per host (-H host:1, rank 0
    on the first host, where mpirun runs) driving all ``gpus`` GPUs of its node (-g), the nccl-tests
    README's "-np <nodes> ... -g <gpus per node>" form: NCCL gets one rank per GPU all the same, and
    a node starts one process instead of one per GPU. mpirun reaches the other hosts over SSH in batch
    mode (the cluster_ssh role's key, host keys checked). ``tag`` is exported to every process (-x) so
    that the cleanup can find them."""
    spec = q(",".join(f"{h}:1" for h in hosts))
    return (f"mpirun --allow-run-as-root -np {len(hosts)} -H {spec} --map-by slot --bind-to none "
            f"--mca plm_rsh_args '-o BatchMode=yes' -x {PROBE_TAG_VAR}={q(tag)} "
            f"all_reduce_perf {NCCL_SIZES} -g {q(gpus)}")


def nccl_pair_srun_cmd(nodes: list[str], gpus: int, tag: str, time_limit_s: float, gres: str | None) -> str:
    """all_reduce_perf across ``nodes`` (Slurm node names) as one srun step, one task per node driving
    its ``gpus`` GPUs (-g), given them by Slurm as ``gres`` (gpu, or gpu:TYPE; --gres=gpu:8 per node:
    where ConstrainDevices is set a step that asks for none sees none); ``gres`` None asks for no GRES.
    The job is named after ``tag`` (the cleanup cancels it by name) and carries its own time limit."""
    minutes = max(1, int((time_limit_s + 59) // 60))
    want = f"--gres={q(gres)}:{q(gpus)} " if gres else ""
    return (f"srun --nodes={len(nodes)} --ntasks-per-node=1 --nodelist={q(','.join(nodes))} {want}"
            f"--job-name=clustercert-nccl-{q(tag)} --time={minutes} --kill-on-bad-exit=1 "
            f"--export=ALL,{PROBE_TAG_VAR}={q(tag)} all_reduce_perf {NCCL_SIZES} -g {q(gpus)}")


def nccl_pair_cleanup_cmd(tag: str, slurm: bool = False) -> str:
    """Kills, on one node, what a launch tagged ``tag`` left behind: every process whose environment
    carries the tag (the ranks) and the launch daemon (orted/prted) that is the parent of one; on a
    Slurm cluster the job named after the tag is cancelled first. Prints KILLED=<pids> (may be empty).
    Processes of other launches (another tag, or none) are never touched."""
    want = q(f"{PROBE_TAG_VAR}={tag}")
    daemons = "|".join(LAUNCH_DAEMONS)
    scancel = f"scancel --name=clustercert-nccl-{q(tag)} 2>/dev/null; " if slurm else ""
    # one grep over every process's environment (NUL-separated entries: -z, the whole entry: -x)
    return (scancel + f"k=''; for f in $(grep -slzxF {want} /proc/[0-9]*/environ); do p=${{f#/proc/}}; p=${{p%/environ}}; "
            "[ \"$p\" = \"$$\" ] && continue; k=\"$k $p\"; "
            "pp=$(awk '/^PPid:/{print $2}' /proc/$p/status 2>/dev/null); "
            f"case \"$(cat /proc/$pp/comm 2>/dev/null)\" in {daemons}) k=\"$k $pp\";; esac; done; "
            "[ -n \"$k\" ] && kill -KILL $k 2>/dev/null; echo \"KILLED=$k\"; true")


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
    """``dcgmi diag -r LEVEL``, with ``-j`` where the installed DCGM prints a JSON layout the parser reads: the
    node's own ``dcgmi --version`` decides (DCGM 3.x and later: JSON; 1.x/2.x, or a version that cannot be
    told: the text table). The evaluator reads whichever came back."""
    base = dcgmi_diag_label(level)
    return f'case "$(dcgmi --version 2>/dev/null)" in {DCGM_JSON_PATTERN}) {base} -j;; *) {base};; esac'


def nvbandwidth_cmd() -> str:
    return "nvbandwidth " + " ".join(f"-t {q(t)}" for t in NVBW_TESTS.values())
