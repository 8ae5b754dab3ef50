"""clustercert's tether around ansible-playbook: a run dies with the clustercert process that started it.

ansible-runner starts ansible-playbook in a session of its own that ignores SIGHUP, so when clustercert dies
without cleaning up (SIGKILL, OOM killer, a cron timeout's KILL) the playbook would run on, orphaned, still
changing nodes. ansible-runner runs this program in the real one's place (see Usage): it asks the kernel for
SIGTERM when its parent dies (PR_SET_PDEATHSIG) and to inherit the run's orphans (PR_SET_CHILD_SUBREAPER),
starts the real ansible-playbook as its child, and on SIGTERM, SIGHUP (the pty closing) or SIGINT kills
every process under it: ansible-playbook, its workers (in sessions of their own), a strategy's helpers
(mitogen's connection multiplexer outlived a SIGTERMed ansible-playbook by minutes) and the commands their
tasks started. The same happens at the run's timeout (SIGALRM; the tether leaves its mark file):
ansible-runner's own job_timeout SIGKILLs one process group only, which leaves the workers and their
commands running. When ansible-playbook exits on its own the tether exits with its status and kills
nothing, so ssh ControlPersist masters live on as usual.

Usage: ``tether.py PARENT TIMEOUT MARK SECRETS PLAYBOOK [ARG...]``: PARENT, the pid of the process whose
death ends the run; TIMEOUT, seconds (0: none); MARK, the file created when the timeout ends the run;
SECRETS, "" or a FIFO (or file) holding a JSON object of environment variables for the playbook (never
on disk, never in ansible-runner's dump of its environment); PLAYBOOK, the real ansible-playbook, run
with the ARGs. The engine writes this file's text to ``<run_dir>/bin/tether.py``; the
``<run_dir>/bin/ansible-playbook`` that ansible-runner runs execs it with clustercert's interpreter and the
first five in front of ansible-runner's arguments.

Exit status: the playbook's (128 + N where signal N ended it), or 128 + N where signal N ended the run
(SIGALRM: the timeout). It runs on the controller and imports nothing of clustercert's.
"""

import ctypes
import json
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
END_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def descendants(root=None):
    """The pids of every process under ``root`` (default: this one), from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [os.getpid() if root is None else root]
    while todo:
        for pid in children.get(todo.pop(), []):
            found.append(pid)
            todo.append(pid)
    return found


def end_run(signum, frame):
    """Kills every process under this one, then exits 128 + ``signum``."""
    for _ in range(5):  # again, for whatever was forked while the pass before ran
        pids = descendants()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    os._exit(128 + signum)


def _arm(timeout, mark):
    """After ``timeout`` seconds (0: never) the run ends, marked as timed out (the file ``mark``)."""
    def timed_out(signum, frame):
        open(mark, "w").close()
        end_run(signum, frame)

    if timeout:
        signal.signal(signal.SIGALRM, timed_out)
        signal.alarm(timeout)


def _start(playbook, args, inherited):
    """Forks the real ansible-playbook, its signal handlers those this process inherited; returns its pid."""
    child = os.fork()
    if child == 0:
        for s, handler in inherited.items():
            if handler is not None:
                signal.signal(s, handler)
        os.execv(playbook, [playbook, *args])
    return child


def _exit_with(child):
    """Reaps every process of the run (its orphans too) until ``child`` ends, then exits with its status."""
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            os._exit(code if code >= 0 else 128 - code)


def main(argv=None):
    """Runs the playbook tethered (see the module's text); ``argv`` default: sys.argv[1:]. Never returns in
    the tether: it exits with the playbook's status, or ends the run."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    argv = sys.argv[1:] if argv is None else argv
    parent, timeout, mark, secrets, playbook, args = (
        int(argv[0]),
        int(argv[1]),
        argv[2],
        argv[3],
        argv[4],
        argv[5:],
    )

    inherited = {s: signal.getsignal(s) for s in END_SIGNALS}
    for s in inherited:
        signal.signal(s, end_run)
    _arm(timeout, mark)
    if os.getppid() != parent:  # the parent died before PR_SET_PDEATHSIG took effect
        end_run(signal.SIGTERM, None)
    if secrets:  # the secret variables, from a FIFO the engine feeds
        with open(secrets) as fh:
            os.environ.update(json.load(fh))
    _exit_with(_start(playbook, args, inherited))


if __name__ == "__main__":
    main()
