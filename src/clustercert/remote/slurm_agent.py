"""clustercert's Slurm agent: on the launch node, starts the srun commands the controller asks for, all at
once, and sends back what each printed.

clustercert.collect.srun (``--backend slurm``) sends this file's text over SSH as ``python3 -c <text>`` to ONE
node of the cluster where srun works (the launch node) and keeps that one session for the whole run: every
node's work is a Slurm job step started here, never a connection of the controller's own. It runs on that
node: python3 >= 3.6, stdlib only, no file of clustercert's there (as clustercert/remote/runner.py).

On stdin, one JSON object per line:

* ``{"op": "run", "id": N, "argv": [...], "stdin": TEXT or null, "timeout": S, "stream": BOOL, "hold":
  BOOL}``: start ``argv`` (salloc, srun, scontrol, scancel: no shell) with TEXT on its stdin. With ``stream``,
  each line it prints is sent as it comes. With ``hold``, its stdin stays open for ``input`` (a pair step:
  clustercert/remote/pair_step.py).
* ``{"op": "input", "id": N, "data": TEXT}``: TEXT to the stdin of N (held); ``{"op": "eof", "id": N}``: close
  it.
* ``{"op": "cancel", "id": N}``: end it: SIGTERM (srun passes it to the step's tasks, and Slurm ends every
  process of the step once they have ended), SIGKILL after GRACE_S.

On stdout, one JSON object per line: first ``{"hello": HOSTNAME, "srun": PATH or null}``; then ``{"id": N,
"line": TEXT}`` (stream) and, once it has ended, ``{"id": N, "rc": INT or null, "stdout": TEXT, "stderr":
TEXT, "timed_out": BOOL, "seconds": S[, "job": ID]}`` (``stdout`` empty where it was streamed; ``job``: the
job a salloc was granted). A request past its timeout is
ended and ends with timed_out true. At the end of stdin (the controller is done, or gone) every request still
running is ended, every job a salloc of it was granted is cancelled (scancel), and the agent exits.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

GRACE_S = 3.0  # after SIGTERM, how long srun gets to end before it is killed
GRANTED = re.compile(r"Granted job allocation (\d+)")


class Agent:
    def __init__(self, out):
        self.out = out
        self.lock = threading.Lock()
        self.running = {}  # id -> Popen
        self.jobs = []  # the jobs salloc was granted: cancelled at the end

    def send(self, doc):
        with self.lock:
            self.out.write(json.dumps(doc) + "\n")
            self.out.flush()

    def cancel(self, rid):
        proc = self.running.get(rid)
        if proc is None:
            return
        try:
            proc.terminate()
            proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
        except OSError:
            pass

    def write(self, rid, text, close=False):
        proc = self.running.get(rid)
        if proc is None:
            return
        try:
            if text:
                proc.stdin.write(text.encode("utf-8"))
                proc.stdin.flush()
            if close:
                proc.stdin.close()
        except (OSError, ValueError):  # it ended without reading: its status and stderr say why
            pass

    def end_jobs(self):
        for job in self.jobs:
            try:
                subprocess.run(
                    ["scancel", job], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=15
                )
            except (OSError, subprocess.TimeoutExpired):
                pass

    def start(self, req):
        """Start the request's process (before the next request is read: an ``input`` for it finds it there);
        None where it could not start (its answer sent)."""
        rid = req["id"]
        try:
            proc = subprocess.Popen(req["argv"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            self.send({"id": rid, "rc": None, "stdout": "", "stderr": f"cannot start {req['argv'][0]}: {exc}",
                       "timed_out": False, "seconds": 0.0})
            return None
        self.running[rid] = proc
        return proc

    def run(self, req, proc, t0):
        rid = req["id"]
        expired = threading.Event()

        def expire():
            expired.set()
            self.cancel(rid)

        timer = threading.Timer(float(req["timeout"]), expire)
        timer.daemon = True
        timer.start()
        err = []
        reader = threading.Thread(target=lambda: err.append(proc.stderr.read()))
        reader.daemon = True
        reader.start()
        self.write(rid, req.get("stdin") or "", close=not req.get("hold"))
        out = b""
        if req.get("stream"):
            for line in proc.stdout:
                self.send({"id": rid, "line": line.decode("utf-8", "replace")})
        else:
            out = proc.stdout.read()
        proc.wait()
        reader.join(10)
        timer.cancel()
        self.running.pop(rid, None)
        errors = b"".join(err).decode("utf-8", "replace")
        granted = GRANTED.search(errors) if os.path.basename(req["argv"][0]) == "salloc" else None
        if granted:
            self.jobs.append(granted.group(1))
        extra = {"job": granted.group(1)} if granted else {}
        self.send({"id": rid, "rc": None if expired.is_set() else proc.returncode,
                   "stdout": out.decode("utf-8", "replace"), "stderr": errors[-20000:], **extra,
                   "timed_out": expired.is_set(), "seconds": round(time.time() - t0, 3)})


def main(stdin=None, stdout=None):
    stdin = sys.stdin if stdin is None else stdin
    agent = Agent(sys.stdout if stdout is None else stdout)
    agent.send({"hello": os.uname()[1], "srun": shutil.which("srun")})
    threads = []
    for line in stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req.get("op") == "cancel":
            threading.Thread(target=agent.cancel, args=(req["id"],), daemon=True).start()
        elif req.get("op") in ("input", "eof"):
            agent.write(req["id"], req.get("data") or "", close=req["op"] == "eof")
        elif req.get("op") == "run":
            proc = agent.start(req)
            if proc is None:
                continue
            t = threading.Thread(target=agent.run, args=(req, proc, time.time()), daemon=True)
            t.start()
            threads.append(t)
    for rid in list(agent.running):  # the controller is done, or gone: nothing it started keeps running
        agent.cancel(rid)
    for t in threads:
        t.join(GRACE_S + 20)
    agent.end_jobs()
    return 0


if __name__ == "__main__":
    sys.exit(main())
