"""clustercert's node runner: runs a request's commands on a node, at once, and prints one JSON document.

clustercert.collect.ssh.collect_node sends this file's text over SSH as ``python3 -c <text>`` (or runs it
locally for ``ansible_connection=local``), perhaps behind ``sudo``. It runs on the node: python3 >= 3.6,
stdlib only, and no file of clustercert's is there. Keep it so: no syntax newer than Python 3.6 and no
annotations (tests/test_remote_runner.py compiles it for 3.6).

The request, on stdin: ``{"commands": {name: [cmd, timeout] or [cmd, timeout, server]}, "parallel": N,
"stages": [[name, ...], ...] (optional), "marks": true/false, "path": "DIR:DIR" (optional)}``. Where ``sudo
-S`` reads a become password from the same stdin, the request follows REQUEST_MARK; what stands before the
mark (what sudo did not read) is dropped.

Each command runs under ``/bin/sh -c`` in its own session, with the environment LC_ALL=C, a fixed PATH
(the request's "path" before it, where given) and CLUSTERCERT_PYTHON (this interpreter), and is killed at its
timeout; its leftovers in its process group are killed when it ends. A server (``{"cmd", "port", "timeout"}``)
is started first, in its own session under ``timeout -s KILL``; the command (its client) starts once the port
listens here (at most 2 s), and its run time is the client's alone; afterwards the server gets 0.2 s to exit
(none when the client failed: nobody will come), and its group is killed -- its traffic ended with its
client's. With "stages", the stages run one after another, each stage's commands at once; without,
``parallel`` at a time. With "marks", a line DONE_MARK<name> is written as each command ends, before the JSON
document.

With "nodes" instead (``{"nodes": {Slurm NodeName: request}}``), the request is one srun step's, the same
stdin for every task (srun --input=all): each node runs its own (SLURMD_NODENAME) and writes its document
framed, in short lines (PART_MARK, base64 of zlib) that srun --label keeps whole (clustercert.collect.srun).

The output, on stdout: ``{"results": {name: {"rc", "stdout", "stderr", "timed_out", "seconds"[, "server":
{"rc", "stdout", "stderr"}]}}, "hostname": ...}`` (rc null when the command timed out or did not start).
"""

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

REQUEST_MARK = "\nCLUSTERCERT_REQUEST\n"  # the request follows it (before it: what sudo -S did not read)
DONE_MARK = "CLUSTERCERT_DONE="  # DONE_MARK<name>: the command <name> has ended
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SERVER_WAIT_S = 2.0
PART_MARK = "CLUSTERCERT_PART="  # PART_MARK<node> <i> <n> <piece>: piece i of n of a node's framed document
# base64 characters per framed line (srun's I/O messages are 1 KiB)  # how long a client waits for its
# server's port to listen
FRAME_CHARS = 800


def read_request(data):
    """The request in ``data`` (all of stdin): what follows REQUEST_MARK, or all of it."""
    at = data.find(REQUEST_MARK)
    return json.loads(data[at + len(REQUEST_MARK):] if at >= 0 else data)


def command_env(path=""):
    """The environment the commands run in; ``path``: directories searched before the fixed PATH."""
    return dict(os.environ, LC_ALL="C", LANG="C", PATH=(path + ":" if path else "") + PATH,
                CLUSTERCERT_PYTHON=sys.executable)


def start(argv, env):
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=env, start_new_session=True)


def kill(p):
    """Kills ``p``'s process group (its session: start() made it the leader)."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass


def listening(port):
    """Whether something listens on TCP ``port`` here (a LISTEN row in /proc/net/tcp or tcp6)."""
    want = f":{port:04X}"
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as fh:
                for line in fh:
                    f = line.split()
                    if len(f) > 3 and f[1].endswith(want) and f[3] == "0A":
                        return True
        except OSError:
            pass
    return False


def ended(p, wait):
    """((stdout, stderr), timed out) of ``p``, killed (its group) after ``wait`` seconds."""
    try:
        return p.communicate(timeout=wait), False
    except subprocess.TimeoutExpired:
        kill(p)
        try:
            return p.communicate(timeout=5), True
        except subprocess.TimeoutExpired:
            return (b"", b""), True


def not_started(message):
    return {"rc": None, "stdout": "", "stderr": message, "timed_out": False, "seconds": 0.0}


def run_command(spec, env):
    """Runs one command, ``spec`` = [cmd, timeout] or [cmd, timeout, server]; returns its result."""
    cmd, timeout = spec[0], spec[1]
    server = spec[2] if len(spec) > 2 else None
    srv = None
    if server:
        try:
            srv = start(
                ["timeout", "-s", "KILL", str(int(server["timeout"])), "/bin/sh", "-c", server["cmd"]], env
            )
        except OSError as exc:
            return not_started(f"server: {exc}")
        until = time.time() + SERVER_WAIT_S
        while time.time() < until and srv.poll() is None and not listening(server["port"]):
            time.sleep(0.02)
    t0 = time.time()
    try:
        p = start(["/bin/sh", "-c", cmd], env)
    except OSError as exc:
        if srv is not None:
            kill(srv)
            srv.communicate()
        return not_started(str(exc))
    (out, err), timed_out = ended(p, timeout)
    seconds = round(time.time() - t0, 3)
    kill(p)
    res = {"rc": None if timed_out else p.returncode,
           "stdout": out.decode("utf-8", "replace")[:2000000],
           "stderr": err.decode("utf-8", "replace")[:20000],
           "timed_out": timed_out, "seconds": seconds}
    if srv is not None:  # its end, not its pipes' (a child of the server may hold them open)
        try:
            srv.wait(timeout=0.2 if res["rc"] == 0 else 0.01)
        except subprocess.TimeoutExpired:
            pass
        kill(srv)
        try:
            sout, serr = srv.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            sout, serr = b"", b""
        res["server"] = {"rc": srv.returncode, "stdout": sout.decode("utf-8", "replace")[:200000],
                         "stderr": serr.decode("utf-8", "replace")[:20000]}
    return res


def run_request(req, out=None):
    """Runs the commands of ``req`` (see the module's text) and returns the document to print. With
    req["marks"], a line DONE_MARK<name> is written to ``out`` (default: sys.stdout) as each one ends."""
    out = sys.stdout if out is None else out
    env = command_env(req.get("path") or "")
    marks = threading.Lock() if req.get("marks") else None

    def run(item):
        name, spec = item
        res = run_command(spec, env)
        if marks is not None:
            with marks:
                out.write(DONE_MARK + name + "\n")
                out.flush()
        return name, res

    results = {}
    for stage in req.get("stages") or [list(req["commands"])]:
        with ThreadPoolExecutor(max_workers=max(1, min(req.get("parallel", 8), len(stage)))) as ex:
            results.update(ex.map(run, [(n, req["commands"][n]) for n in stage]))
    return {"results": results, "hostname": os.uname()[1]}


def own_request(req, env=None):
    """(this node's name, its request): a request with "nodes" ({Slurm NodeName: request}: one srun step
    across nodes, the same stdin to every task) holds each node's own, picked by SLURMD_NODENAME; "nodes_z" is
    that mapping's JSON compressed (zlib, then base64)."""
    if "nodes_z" in req:  # the same, zlib-compressed and base64-encoded: the nodes' requests are nearly alike
        req = {"nodes": json.loads(zlib.decompress(base64.b64decode(req["nodes_z"])).decode("utf-8"))}
    if "nodes" not in req:
        return "", req
    env = os.environ if env is None else env
    name = env.get("SLURMD_NODENAME") or os.uname()[1].split(".")[0]
    mine = req["nodes"].get(name)
    if mine is None:
        raise KeyError(f"no request for Slurm node {name!r} in this step")
    return name, mine


def framed(name, text, size=FRAME_CHARS):
    """``text`` as lines ``PART_MARK<name> <i> <n> <base64 piece>``, each under srun's line buffer: a step's
    tasks write through srun --label, which keeps a short line whole and breaks a long one."""
    data = base64.b64encode(zlib.compress(text.encode("utf-8"), 6)).decode("ascii")
    pieces = [data[i:i + size] for i in range(0, len(data), size)] or [""]
    return "".join(f"{PART_MARK}{name} {i} {len(pieces)} {piece}\n" for i, piece in enumerate(pieces))


def main(stdin=None, stdout=None):
    """Reads the request from ``stdin``, runs it, writes the marks and then the JSON document to ``stdout``
    (default: the process's own); a request with "nodes" runs this node's own and writes the document framed
    (framed()). Returns the exit status, 0 (2 where a step's request holds nothing for this node)."""
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    try:
        name, req = own_request(read_request(stdin.read()))
    except KeyError as exc:
        sys.stderr.write(f"clustercert runner: {exc.args[0]}\n")
        return 2
    doc = run_request(req, stdout)
    stdout.write(framed(name, json.dumps(doc)) if name else json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
