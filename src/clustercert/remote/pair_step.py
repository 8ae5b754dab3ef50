"""clustercert's pair step: the probes between two nodes as processes of ONE Slurm job step across both.

clustercert.collect.srun (``--backend slurm``) starts this file's text as the task of each of the two nodes of
``srun --jobid=J --overlap --nodes=2 --label --input=all python3 -c <text>``, through the launch node's agent,
and keeps the step's stdin open: every probe of the pair (each server, each client, one after another as over
ssh) is a line sent there, so the server's start, its port listening and its client's start keep their order
without a channel between the two tasks -- the controller sees the server's output (through srun) before it
sends the client. Both tasks read every line (--input=all); each runs what names its own node
(SLURMD_NODENAME). python3 >= 3.6, stdlib only, no file of clustercert's on the node (as
clustercert/remote/runner.py).

On stdin, one JSON object per line:

* ``{"node": NAME, "id": K, "run": SCRIPT}``: start ``/bin/sh -c SCRIPT`` on node NAME (the script bounds
  itself: clustercert.collect.ssh.bounded; it prints ``PGID=<group>`` first).
* ``{"node": NAME, "id": K, "kill": true}``: SIGKILL K's process group (the one its PGID= line named, and its
  own).

On stdout, lines of at most about 640 characters (srun --label keeps a short line whole): first
``MARK - step <job>.<step>`` (the step's id, for the evidence); ``MARK K o <base64>`` (a piece of K's output,
in order), ``MARK K e <base64>`` (of its stderr), and once it has ended ``MARK K rc <status> <seconds>``. At
the end of stdin (the pair is done, or the controller gone) every process still running is killed and the task
exits.
"""

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time

MARK = "CLUSTERCERT_PAIR "
PIECE = 450  # bytes of output per line: 600 base64 characters


class Step:
    def __init__(self, me, out):
        self.me, self.out = me, out
        self.lock = threading.Lock()
        self.procs = {}  # id -> (Popen, [pgid the script named])

    def send(self, text):
        with self.lock:
            self.out.write(MARK + text + "\n")
            self.out.flush()

    def pump(self, rid, stream, kind, pgid):
        first = True
        while True:
            data = os.read(stream.fileno(), PIECE)
            if not data:
                return
            if first and kind == "o" and data.startswith(b"PGID="):
                line = data.split(b"\n", 1)[0][5:].strip()
                if line.isdigit():
                    pgid.append(int(line))
            first = False
            self.send(f"{rid} {kind} {base64.b64encode(data).decode('ascii')}")

    def start(self, rid, script):
        t0 = time.time()
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", script],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            self.send(f"{rid} e {base64.b64encode(str(exc).encode()).decode('ascii')}")
            self.send(f"{rid} rc - 0.0")
            return
        pgid = []
        self.procs[rid] = (proc, pgid)
        readers = [threading.Thread(target=self.pump, args=(rid, s, k, pgid)) for s, k in
                   ((proc.stdout, "o"), (proc.stderr, "e"))]
        for r in readers:
            r.daemon = True
            r.start()
        for r in readers:
            r.join()
        rc = proc.wait()
        self.procs.pop(rid, None)
        self.send(f"{rid} rc {rc} {time.time() - t0:.3f}")

    def kill(self, rid):
        proc, pgid = self.procs.get(rid, (None, []))
        if proc is None:
            return
        for group in pgid + [proc.pid]:
            try:
                os.killpg(group, signal.SIGKILL)
            except OSError:
                pass


def main(stdin=None, stdout=None):
    stdin = sys.stdin if stdin is None else stdin
    step = Step(os.environ.get("SLURMD_NODENAME", ""), sys.stdout if stdout is None else stdout)
    step.send(f"- step {os.environ.get('SLURM_JOB_ID', '?')}.{os.environ.get('SLURM_STEP_ID', '?')}")
    threads = []
    for line in stdin:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        if req.get("node") != step.me:
            continue
        rid = str(int(req["id"]))
        if req.get("kill"):
            step.kill(rid)
        elif "run" in req:
            t = threading.Thread(target=step.start, args=(rid, req["run"]))
            t.daemon = True
            t.start()
            threads.append(t)
    for rid in list(step.procs):  # the pair is done, or the controller gone: nothing of it runs on
        step.kill(rid)
    for t in threads:
        t.join(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
