"""--backend slurm without a cluster: collect.srun's backend and remote/slurm_agent.py, over a stand-in srun.

The stand-in (FAKE_SRUN below, put on PATH as ``srun`` with ``scontrol`` and ``scancel``) does what the
backend relies on of the real one: one task per node of --nodelist with SLURMD_NODENAME set, stdin to every
task with
--input=all (else to the first) as it comes, each line of a task's output prefixed ``<task>: `` with --label,
its exit status the worst task's. It logs each invocation, so a test sees how many steps ran. The real srun
runs in the lab test (tests/certify/test_drain_slurm_lab.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from clustercert.checks import run as check_run
from clustercert.collect import srun, ssh
from clustercert.collect.slurm import NodeState, takes_jobs
from clustercert.errors import InputError
from clustercert.remote import runner

FAKE_SRUN = textwrap.dedent("""\
    #!{python}
    import json, os, signal, subprocess, sys, threading, time
    args, opts, i = sys.argv[1:], {{}}, 0
    while i < len(args) and args[i].startswith("-"):
        k, _, v = args[i].partition("=")
        opts[k] = v
        i += 1
    cmd = args[i:]
    with open(os.environ["FAKE_SRUN_LOG"], "a+") as f:
        f.write(json.dumps({{"opts": opts, "cmd": cmd[0]}}) + "\\n")
        f.seek(0)
        step_id = str(len(f.readlines()) - 1)  # the steps of job 42, numbered from 0
    if os.environ.get("FAKE_SRUN_FAIL"):
        sys.stderr.write(os.environ["FAKE_SRUN_FAIL"] + "\\n")
        sys.exit(1)
    nodes = opts["--nodelist"].split(",")
    lock, procs, rcs = threading.Lock(), [], []
    def stop(*_):
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
        sys.exit(143)
    signal.signal(signal.SIGTERM, stop)
    def task(idx, node):
        env = dict(os.environ, SLURMD_NODENAME=node, SLURM_JOB_ID="42", SLURM_STEP_ID=step_id, SLURM_PROCID=str(idx))
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             start_new_session=True)
        procs.append(p)
        if idx != 0 and opts.get("--input") != "all":
            p.stdin.close()
        label = ("%d: " % idx).encode() if "--label" in opts else b""
        for line in p.stdout:
            with lock:
                sys.stdout.buffer.write(label + line)
                sys.stdout.flush()
        err = p.stderr.read()
        with lock:
            sys.stderr.buffer.write(b"".join(label + ln for ln in err.splitlines(True)))
        rcs.append(p.wait())
    ts = [threading.Thread(target=task, args=(i, n)) for i, n in enumerate(nodes)]
    [t.start() for t in ts]
    while len(procs) < len(nodes):
        time.sleep(0.01)
    for line in iter(sys.stdin.buffer.readline, b""):  # as it comes, as srun forwards it
        for p in procs:
            try:
                if not p.stdin.closed:
                    p.stdin.write(line)
                    p.stdin.flush()
            except OSError:
                pass
    for p in procs:
        try:
            p.stdin.close()
        except OSError:
            pass
    [t.join() for t in ts]
    sys.exit(max(rcs))
    """)  # noqa: E501
FAKE_SCONTROL = textwrap.dedent("""\
    #!{python}
    # a stand-in scontrol that keeps Slurm's state in a file: show node / show reservation (--oneliner), create and
    # delete a reservation, update a node (RESUME, DRAIN with Reason=, one leading and trailing '"' stripped as
    # src/scontrol/update_node.c does); every invocation logged, one JSON argv a line
    import json, os, sys
    log, path = os.environ["FAKE_SRUN_LOG"] + ".scontrol", os.environ["FAKE_SRUN_LOG"] + ".state"
    args = sys.argv[1:]
    with open(log, "a") as f:
        f.write(json.dumps(args) + "\\n")
    if os.path.exists(path):
        db = json.load(open(path))
    else:
        reasons = json.loads(os.environ.get("FAKE_SLURM_REASONS") or "{{}}")
        db = {{"nodes": {{}}, "resv": json.loads(os.environ.get("FAKE_SLURM_RESERVATIONS") or "{{}}")}}
        for kv in os.environ["FAKE_SLURM_STATES"].split(","):
            n, st = kv.split("=")
            db["nodes"][n] = [st, reasons.get(n)]
    def save():
        json.dump(db, open(path, "w"))
    def fail(text):
        sys.stderr.write(text + "\\n")
        sys.exit(1)
    kv = dict(a.split("=", 1) for a in args if "=" in a)
    if args[:2] == ["show", "node"]:
        for n, (st, reason) in db["nodes"].items():
            line = f"NodeName={{n}} Arch=x86_64 CPUTot=16 State={{st}} Partitions=lab"
            print(line + (f" Reason={{reason}} [root@2026-12-07T13:01:12]" if reason else ""))
    elif args[:2] == ["show", "reservation"]:
        if not db["resv"]:
            print("No reservations in the system")
        for name, r in db["resv"].items():
            print(f"ReservationName={{name}} StartTime=2026-12-07T13:40:00 EndTime=2026-12-07T21:40:00 "
                  f"Duration=08:00:00 Nodes={{r['nodes']}} NodeCnt=3 CoreCnt=48 Features=(null) PartitionName=(null) "
                  f"Flags={{r['flags']}} TRES=cpu=48 Users={{r['users']}} Groups=(null) Accounts=(null) "
                  f"Licenses=(null) State={{r.get('state', 'ACTIVE')}} BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)")
    elif args[:2] == ["create", "reservation"]:
        if os.environ.get("FAKE_CREATE_REFUSE"):
            fail("Error creating the reservation: " + os.environ["FAKE_CREATE_REFUSE"])
        db["resv"][kv["ReservationName"]] = {{"nodes": kv["Nodes"], "flags": kv["Flags"] + ",SPEC_NODES",
                                             "users": kv["Users"]}}
        save()
        print("Reservation created: " + kv["ReservationName"])
    elif args[0] == "delete":
        busy = os.environ["FAKE_SRUN_LOG"] + ".busy"
        if int(os.environ.get("FAKE_DELETE_BUSY") or 0) > os.path.getsize(busy if os.path.exists(busy) else os.devnull):
            open(busy, "a").write("x")
            fail("Error deleting the reservation: Requested reservation is in use")
        if db["resv"].pop(kv["ReservationName"], None) is None:
            fail("Error deleting the reservation: Requested reservation is invalid")
        save()
    elif args[0] == "update":
        n = kv["NodeName"]
        if n not in db["nodes"]:
            fail("slurm_update error: Invalid node name specified")
        st = db["nodes"][n][0].split("+")
        if kv["State"] == "RESUME":
            if os.environ.get("FAKE_RESUME_REFUSE") == n:
                fail("slurm_update error: Invalid node state specified")
            db["nodes"][n] = ["+".join(f for f in st if f != "DRAIN"), None]
        else:
            reason = kv["Reason"]
            reason = reason[1:] if reason.startswith('"') else reason
            reason = reason[:-1] if reason.endswith('"') else reason
            db["nodes"][n] = ["+".join(st + (["DRAIN"] if "DRAIN" not in st else [])), reason]
        save()
    else:
        fail("invalid command: " + " ".join(args))
    """)  # noqa: E501
FAKE_SALLOC = textwrap.dedent("""\
    #!/bin/sh
    echo "$@" >> "$FAKE_SRUN_LOG.salloc"
    printf '["salloc", "%s"]\\n' "$*" >> "$FAKE_SRUN_LOG.scontrol"
    [ -n "$FAKE_SALLOC_REFUSE" ] && { echo "salloc: error: $FAKE_SALLOC_REFUSE" >&2; exit 1; }
    echo "salloc: Granted job allocation 42" >&2
    """)
FAKE_SCANCEL = ("#!/bin/sh\necho \"$@\" >> \"$FAKE_SRUN_LOG.scancel\"\n"
                "printf '[\"scancel\", \"%s\"]\\n' \"$*\" >> \"$FAKE_SRUN_LOG.scontrol\"\n")


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    """A stand-in Slurm on PATH; returns the log of its srun invocations (a function)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (
        ("srun", FAKE_SRUN.format(python=sys.executable)),
        ("scontrol", FAKE_SCONTROL.format(python=sys.executable)),
        ("salloc", FAKE_SALLOC),
        ("scancel", FAKE_SCANCEL),
    ):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "srun.log"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SRUN_LOG", str(log))
    monkeypatch.setenv("FAKE_SLURM_STATES", "node01=IDLE,node02=MIXED,node03=DOWN+DRAIN")
    monkeypatch.setenv("CLUSTERCERT_HOME", str(tmp_path / "home"))
    return lambda: [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def inventory(tmp_path, hosts=("node01", "node02", "node03"), slurm_hosts=None):
    from clustercert.model.inventory import load_inventory

    slurm_hosts = hosts if slurm_hosts is None else slurm_hosts
    d = tmp_path / "inv"
    (d / "group_vars").mkdir(parents=True, exist_ok=True)
    lines = "".join(
        f"    {n}: {{ansible_connection: local{', clustercert_slurm: true' if n in slurm_hosts else ''}}}\n"
        for n in hosts
    )
    (d / "hosts.yml").write_text("all:\n  hosts:\n" + lines)
    (d / "group_vars" / "all.yml").write_text("clustercert_profile: lab\nclustercert_command_timeout_s: 20\n")
    return load_inventory(str(d))


@pytest.mark.parametrize(("state", "takes"), [
    ("IDLE", True), ("MIXED", True), ("ALLOCATED", False), ("IDLE+DRAIN", False), ("MIXED+DRAIN", False),
    ("IDLE*", False), ("DOWN+NOT_RESPONDING", False), ("IDLE+RESERVED", False), ("IDLE+COMPLETING", True),
])
def test_takes_jobs(state, takes):
    why = takes_jobs(NodeState("gpu01", state, "admin: fan" if "DRAIN" in state else None))
    assert (why is None) is takes
    if not takes:
        assert why.startswith(f"Slurm starts no job on gpu01 now: it is {state}")


def test_framed_documents_survive_labels_and_interleaving():
    docs = {"node01": json.dumps({"x": "a" * 5000}), "node02": json.dumps({"y": list(range(3000))})}
    lines = {n: runner.framed(n, d).splitlines() for n, d in docs.items()}
    assert all(len(ln) < 1000 for ls in lines.values() for ln in ls)  # under srun's 1 KiB I/O messages
    mixed = [
        f"{i}: {ln}" for pair in zip(*(lines[n] for n in docs), strict=False) for i, ln in enumerate(pair)
    ]
    mixed += [f"1: {ln}" for ln in lines["node02"][len(lines["node01"]):]]
    assert srun.unframe(mixed) == docs
    assert srun.unframe(mixed[:-1]) == {"node01": docs["node01"]}  # a node whose last piece is missing: none


def test_one_job_now_or_never_and_its_steps():
    argv = srun.salloc_argv(["node01", "node02"], "clustercert-x", "gpu:8")
    assert argv[:3] == ["salloc", "--no-shell", "--exclusive"] and "--nodelist=node01,node02" in argv
    assert f"--immediate={srun.IMMEDIATE_S}" in argv and argv[-1] == "--gres=gpu:8"
    argv = srun.srun_argv("42", ["node01", "node02"], label=True, input_all=True)
    assert argv[:6] == [
        "srun",
        "--jobid=42",
        "--overlap",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--nodelist=node01,node02",
    ]
    assert "--kill-on-bad-exit=0" in argv and "--label" in argv and "--input=all" in argv


def test_a_non_slurm_host_is_refused_before_anything_runs(tmp_path):
    inv = inventory(tmp_path, slurm_hosts=("node01",))
    with pytest.raises(InputError) as exc:
        srun.check_inventory(inv)
    assert exc.value.key == "clustercert_slurm" and "node02, node03 not a Slurm node" in exc.value.reason


def test_every_node_in_one_step_each_running_its_own_commands(slurm, tmp_path):
    inv = inventory(tmp_path)
    with srun.SlurmBackend.open(inv) as io:
        assert io.launch == "node01" and set(io.blocked) == {"node03"} and io.job_id == "42"
        assert io.blocked["node03"].startswith(
            "Slurm starts no job on node03 now: it is DOWN+DRAIN; not resumed"
        )
        t0 = time.monotonic()
        cmds = {
            n: {
                "who": (f"echo {n} on $SLURMD_NODENAME", 10),
                "big": ("head -c 300000 /dev/zero | tr '\\0' x", 10),
            }
            for n in inv.hosts
        }
        seen = []
        ev = io.collect_many({n: {} for n in inv.hosts}, cmds, each=lambda n, e: seen.append(n) or e)
        assert time.monotonic() - t0 < 15
    steps = [s for s in slurm() if s["cmd"] != "/bin/sh"]
    assert len(steps) == 1 and steps[0]["opts"]["--nodelist"] == "node01,node02"  # one step; node03 not asked
    assert steps[0]["opts"]["--jobid"] == "42"
    # the job: node03 not asked for, the lab profile's 8 GPUs per node as GRES; cancelled at the end
    salloc = (tmp_path / "srun.log.salloc").read_text()
    assert "--nodes=2 --nodelist=node01,node02" in salloc and "--gres=gpu:8" in salloc, salloc
    assert (tmp_path / "srun.log.scancel").read_text().split("\n")[0] == "42"
    for n in ("node01", "node02"):
        assert ev[n].reachable and ev[n].results["who"].stdout == f"{n} on {n}\n", ev[n]
        assert len(ev[n].results["big"].stdout) == 300000
    assert not ev["node03"].reachable and "DOWN+DRAIN" in ev["node03"].error
    assert sorted(seen) == ["node01", "node02", "node03"]


def _echo_server(port: int, tag: str = "") -> str:
    return (f"{sys.executable} -c \"import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, "
            f"socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', {port})); s.listen(1); c, _ = s.accept(); "
            f"print('{tag}got', c.recv(16).decode())\"")


def test_a_pairs_probes_run_in_one_step_server_first(slurm, tmp_path):
    """A pair's servers and clients are processes of ONE step across its two nodes, each client sent once its
    server listens (a client sent before would find the port closed); a client alone is a step of its own."""
    inv = inventory(tmp_path, hosts=("node01", "node02"))
    port = 20000 + os.getpid() % 20000
    client = (f"{sys.executable} -c \"import socket; c = socket.create_connection(('127.0.0.1', {{port}})); "
              "c.sendall(b'hello'); e = __import__('os').environ; print('sent', e.get('SLURM_JOB_ID') == "
              "'42' and e.get('SLURM_OVERLAP') == '1' and 'SLURM_PROCID' not in e)\"")
    with srun.SlurmBackend.open(inv) as io:
        r = io.run_server_client(
            ("node02", {}, _echo_server(port)), ("node01", {}, client.format(port=port)), 20, server_port=port
        )
        assert r.reachable and r.server_reachable and r.client.ok, r
        # of the step's SLURM_* only the job's id stays (with SLURM_OVERLAP): an srun inside it is a step of
        # the job
        assert r.client.stdout == "sent True\n"
        assert r.server.stdout.strip() == "got hello", r.server
        assert r.where == "the pair's Slurm step 42.0"  # what the measurement's evidence says (probes.run)
        # two probes of one pair at once (two rails): still the one step, each server with its own client
        srvs = [io.start_server(("node02", {}, _echo_server(port + k, f"rail{k} ")), 20, server_port=port + k,
                                peer="node01") for k in (1, 2)]
        assert len(io.pairs) == 1
        runs = [
            io.finish_probe(srv, ("node01", {}, client.format(port=port + k)), 20)
            for k, srv in zip((1, 2), srvs, strict=True)
        ]
        assert [x.server.stdout.strip() for x in runs] == ["rail1 got hello", "rail2 got hello"]
        assert {x.where for x in runs} == {"the pair's Slurm step 42.1"}
        assert io.pairs == {}  # the last of the pair waited for: its step has ended
        t0 = time.monotonic()
        hung = io.run_server_client(None, ("node01", {}, "sleep 60"), 2)
        assert hung.reachable and hung.client.timed_out and not hung.client.ok and hung.where == ""
        assert time.monotonic() - t0 < 10
    steps = [(s["cmd"], s["opts"]["--nodelist"]) for s in slurm()]
    assert steps == [("python3", "node01,node02"), ("python3", "node01,node02"), ("/bin/sh", "node01")]


def test_a_client_outside_its_servers_pair_runs_in_a_step_of_its_own(slurm, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_SLURM_STATES", "node01=IDLE,node02=IDLE,node03=IDLE")
    inv = inventory(tmp_path)
    port = 21000 + os.getpid() % 20000
    client = (
        f"{sys.executable} -c \"import socket; socket.create_connection(('127.0.0.1', "
        f"{port})).sendall(b'hi')\""
    )
    with srun.SlurmBackend.open(inv) as io:
        srv = io.start_server(("node02", {}, _echo_server(port)), 20, server_port=port, peer="node01")
        r = io.finish_probe(srv, ("node03", {}, client), 20)
        assert r.client.ok and r.where == "" and r.server.stdout.strip() == "got hi", r
    steps = [(s["cmd"], s["opts"]["--nodelist"]) for s in slurm()]
    assert steps == [("python3", "node01,node02"), ("/bin/sh", "node03")]


def test_a_server_its_client_leaves_hanging_is_killed_with_its_step(slurm, tmp_path):
    """A server that does not end when its client has is killed in the pair's step within seconds, and nothing
    of the pair runs on after it; a client that outlives its bound is ended at it."""
    inv = inventory(tmp_path, hosts=("node01", "node02"))
    tag = f"cc-hang-{os.getpid()}"
    with srun.SlurmBackend.open(inv) as io:
        t0 = time.monotonic()
        srv = io.start_server(("node02", {}, f"sleep 300 # {tag}"), 120, peer="node01")
        r = io.finish_probe(srv, ("node01", {}, f"sleep 300 # {tag}-client"), 2)
        assert r.client.timed_out and r.server_reachable and r.server is not None
        assert time.monotonic() - t0 < 12, time.monotonic() - t0
        assert io.pairs == {}
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True).stdout
    assert left == "", left


def test_a_pairs_step_that_cannot_start_fails_its_probes_at_once(slurm, tmp_path, monkeypatch):
    """srun refusing the pair's step (a node gone since the job began): the server and the client say why
    in seconds, not at their bound."""
    inv = inventory(tmp_path, hosts=("node01", "node02"))
    monkeypatch.setenv(
        "FAKE_SRUN_FAIL", "srun: error: Unable to create step for job 42: Invalid node name specified"
    )
    with srun.SlurmBackend.open(inv) as io:
        t0 = time.monotonic()
        r = io.run_server_client(("node02", {}, "sleep 30"), ("node01", {}, "true"), 30, server_port=40000)
        assert not r.server_reachable and not r.reachable
        assert "Unable to create step for job 42" in r.error, r.error
        assert time.monotonic() - t0 < 20


def test_a_node_slurm_keeps_jobs_off_fails_at_once(slurm, tmp_path):
    inv = inventory(tmp_path)
    with srun.SlurmBackend.open(inv) as io:
        t0 = time.monotonic()
        r = io.run_server_client(("node03", {}, "sleep 30"), ("node01", {}, "true"), 30)
        assert not r.server_reachable and "DOWN+DRAIN" in r.server.stderr
        c = io.finish_probe(None, ("node03", {}, "true"), 30)
        assert not c.reachable and "DOWN+DRAIN" in c.error
        assert time.monotonic() - t0 < 5  # not the probes' 30 s, nor srun's --immediate


def test_no_launch_node_makes_every_node_unreachable_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no srun anywhere
    inv = inventory(tmp_path, hosts=("node01", "node02"))
    with srun.SlurmBackend.open(inv) as io:
        ev = io.collect_many({n: {} for n in inv.hosts}, {n: {"x": ("true", 5)} for n in inv.hosts})
    assert {n: e.reachable for n, e in ev.items()} == {"node01": False, "node02": False}
    assert (
        ev["node01"].error == "no Slurm node could start srun (node01: no srun there; node02: no srun there)"
    )


def test_a_job_slurm_does_not_give_makes_every_node_say_why(slurm, tmp_path, monkeypatch):
    monkeypatch.setenv(
        "FAKE_SALLOC_REFUSE", "Unable to allocate resources: Requested node configuration is not available"
    )
    inv = inventory(tmp_path)
    with srun.SlurmBackend.open(inv) as io:
        assert io.job_id is None
        ev = io.collect_many({n: {} for n in inv.hosts}, {n: {"x": ("true", 5)} for n in inv.hosts})
    assert not any(e.reachable for e in ev.values()) and slurm() == []
    assert ev["node01"].error.startswith(
        "Slurm did not give the run's job (--no-shell --exclusive --nodes=2 "
    )
    assert ev["node01"].error.endswith("salloc: error: Unable to allocate resources: Requested node "
                                       "configuration is not available")
    assert "DOWN+DRAIN" in ev["node03"].error


def test_validators_over_slurm_find_what_they_find_over_ssh(slurm, tmp_path, monkeypatch):
    """The same checks on the same machine: the findings agree, check by check."""
    monkeypatch.setenv("FAKE_SLURM_STATES", "node01=IDLE,node02=IDLE")
    inv = inventory(tmp_path, hosts=("node01", "node02"))
    comps = ["gpu", "time", "tuning"]
    over_ssh = check_run.validate_nodes(inv, comps, io=ssh.SshBackend())
    sessions = []
    real_agent = srun.Agent
    monkeypatch.setattr(srun, "Agent", lambda argv: sessions.append(argv) or real_agent(argv))
    monkeypatch.setattr(ssh, "collect_node", lambda *a, **k: pytest.fail("a node reached without Slurm"))
    with srun.SlurmBackend.open(inv) as io:
        over_slurm = check_run.validate_nodes(inv, comps, io=io)
    assert len(sessions) == 1  # the controller's one session: the launch node's agent

    def table(results):
        return {
            n: (r.verdict, sorted((f.check, f.subject, f.status) for f in r.findings))
            for n, r in results.items()
        }

    assert table(over_slurm) == table(over_ssh)
    assert len([s for s in slurm() if s["cmd"] != "/bin/sh"]) == 1


def test_cli_refuses_backend_slurm_for_non_slurm_hosts(tmp_path):
    inv = inventory(tmp_path, slurm_hosts=("node01",))
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "clustercert",
            "validate",
            "-i",
            str(inv.source),
            "--backend",
            "slurm",
            "--checks",
            "time",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "clustercert_slurm" in p.stderr and "node02, node03 not a Slurm node" in p.stderr


# ---- drained nodes: the maintenance reservation (collect.maintenance) --------------------------------------

ADMIN_REASON = 'admin: "fan" swap, ticket 12 [see it]'


def ops(tmp_path) -> list[list[str]]:
    """What was done to Slurm, in order: scontrol's changes (not its reads), salloc, scancel."""
    log = tmp_path / "srun.log.scontrol"
    lines = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return [a for a in lines if a[0] in ("salloc", "scancel", "create", "delete", "update")]


def slurm_state(tmp_path) -> dict:
    return json.loads((tmp_path / "srun.log.state").read_text())


def drained_fixture(monkeypatch, states="node01=IDLE,node02=IDLE,node03=IDLE+DRAIN", reasons=None):
    monkeypatch.setenv("FAKE_SLURM_STATES", states)
    monkeypatch.setenv("FAKE_SLURM_REASONS", json.dumps(reasons or {"node03": ADMIN_REASON}))


def reach_all(io, inv):
    ev = io.collect_many(
        {n: {} for n in inv.hosts}, {n: {"who": ("echo $SLURMD_NODENAME", 10)} for n in inv.hosts}
    )
    return {n: e.reachable for n, e in ev.items()}


def test_a_drained_node_is_certified_in_a_reservation_and_drained_again_with_its_reason(
    slurm, tmp_path, capsys
):
    drained_fixture(monkeypatch := pytest.MonkeyPatch())
    try:
        inv = inventory(tmp_path)
        with srun.SlurmBackend.open(inv) as io:
            name = io.reservation
            assert name.startswith("clustercert-") and io.blocked == {}
            assert reach_all(io, inv) == dict.fromkeys(inv.hosts, True)
            # while it runs: node03 resumed, its reason saved (0600) under the state directory
            saved = list((tmp_path / "home" / "slurm-reservations").glob("*.json"))
            assert len(saved) == 1 and saved[0].stat().st_mode & 0o777 == 0o600
            assert json.loads(saved[0].read_text())["drained"] == {"node03": ADMIN_REASON}
            assert slurm_state(tmp_path)["nodes"]["node03"] == ["IDLE", None]
    finally:
        monkeypatch.undo()
    user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    assert ops(tmp_path)[6:] in ([], [["scancel", "42"]])  # the agent's own, as its session ends
    assert ops(tmp_path)[:6] == [
        ["create", "reservation", f"ReservationName={name}", "Nodes=node01,node02,node03", "StartTime=now",
         "Duration=480", f"Users={user}", "Flags=MAINT,IGNORE_JOBS"],
        ["update", "NodeName=node03", "State=RESUME"],  # only the drained node
        ["salloc", f"--no-shell --exclusive --nodes=3 --nodelist=node01,node02,node03 --job-name={name} "
                   f"--immediate=20 --gres=gpu:8 --reservation={name}"],
        ["scancel", "42"],
        ["update", "NodeName=node03", "State=DRAIN", f'Reason="{ADMIN_REASON}"'],
        ["delete", f"ReservationName={name}"],
    ]
    after = slurm_state(tmp_path)
    # the reason verbatim
    assert after["nodes"]["node03"] == ["IDLE+DRAIN", ADMIN_REASON] and after["resv"] == {}
    assert not list((tmp_path / "home" / "slurm-reservations").glob("*.json"))
    err = capsys.readouterr().err
    assert (
        f"node03 resumed in reservation {name}" in err
        and f"drains restored on node03; reservation {name} deleted" in err
    )


@pytest.mark.parametrize("failure", [RuntimeError, KeyboardInterrupt])
def test_a_run_that_fails_midway_still_restores_the_drain_and_deletes_its_reservation(
    slurm, tmp_path, monkeypatch, failure
):
    drained_fixture(monkeypatch)
    inv = inventory(tmp_path)
    with pytest.raises(failure), srun.SlurmBackend.open(inv) as io:
        assert reach_all(io, inv)["node03"]
        raise failure("stopped")
    done = [a[:3] for a in ops(tmp_path)]
    assert done[3:6] == [["scancel", "42"], ["update", "NodeName=node03", "State=DRAIN"],
                         ["delete", f"ReservationName={io.reservation}"]]
    assert slurm_state(tmp_path)["nodes"]["node03"] == ["IDLE+DRAIN", ADMIN_REASON]
    assert slurm_state(tmp_path)["resv"] == {}


def test_a_job_slurm_refuses_in_the_reservation_still_restores(slurm, tmp_path, monkeypatch):
    drained_fixture(monkeypatch)
    monkeypatch.setenv(
        "FAKE_SALLOC_REFUSE", "Unable to allocate resources: Requested node configuration is not available"
    )
    inv = inventory(tmp_path)
    with srun.SlurmBackend.open(inv) as io:
        assert io.job_id is None and not any(reach_all(io, inv).values())
    # no job: no scancel
    assert [a[0] for a in ops(tmp_path)] == ["create", "update", "salloc", "update", "delete"]
    assert slurm_state(tmp_path) == {"nodes": {"node01": ["IDLE", None], "node02": ["IDLE", None],
                                               "node03": ["IDLE+DRAIN", ADMIN_REASON]}, "resv": {}}


def test_a_reservation_busy_with_the_ending_job_is_deleted_once_free(slurm, tmp_path, monkeypatch):
    drained_fixture(monkeypatch)
    monkeypatch.setenv("FAKE_DELETE_BUSY", "1")
    inv = inventory(tmp_path)
    with srun.SlurmBackend.open(inv) as io:
        name = io.reservation
    assert [a for a in ops(tmp_path) if a[0] == "delete"] == [["delete", f"ReservationName={name}"]] * 2
    assert slurm_state(tmp_path)["resv"] == {}


def test_no_drained_node_no_reservation(slurm, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_SLURM_STATES", "node01=IDLE,node02=MIXED,node03=DOWN+DRAIN")
    inv = inventory(tmp_path)
    with srun.SlurmBackend.open(inv) as io:
        assert io.reservation is None and set(io.blocked) == {"node03"}
    assert [a[0] for a in ops(tmp_path)][:2] == ["salloc", "scancel"]
    assert {a[0] for a in ops(tmp_path)} == {"salloc", "scancel"}
    assert "--reservation" not in (tmp_path / "srun.log.salloc").read_text()


def test_a_reservation_slurm_refuses_to_make_leaves_the_drained_node_out(slurm, tmp_path, monkeypatch):
    drained_fixture(monkeypatch)
    monkeypatch.setenv("FAKE_CREATE_REFUSE", "Access/permission denied")
    inv = inventory(tmp_path)
    with srun.SlurmBackend.open(inv) as io:
        assert set(io.blocked) == {"node03"} and io.reservation is None
        assert reach_all(io, inv) == {"node01": True, "node02": True, "node03": False}
    assert io.blocked["node03"] == (f"node03 is drained (Reason={ADMIN_REASON}); the maintenance reservation "
                                    "for its drain could not be made: Error creating the reservation: "
                                    "Access/permission denied")
    # nothing resumed, nothing to restore
    assert {a[0] for a in ops(tmp_path)} == {"create", "salloc", "scancel"}
    assert not list((tmp_path / "home" / "slurm-reservations").glob("*.json"))


def test_a_leftover_reservation_of_a_killed_run_is_restored_first(slurm, tmp_path, monkeypatch, capsys):
    """A run killed outright left node03 resumed in clustercert-dead: the next run drains it again with the
    saved reason and deletes that reservation before anything else; another controller's clustercert-* is left
    alone."""
    import socket

    drained_fixture(monkeypatch, states="node01=IDLE,node02=IDLE,node03=IDLE,node04=IDLE", reasons={})
    monkeypatch.setenv(
        "FAKE_SLURM_RESERVATIONS",
        json.dumps(
            {
                "clustercert-dead": {
                    "nodes": "node[01-03]",
                    "flags": "MAINT,IGNORE_JOBS,SPEC_NODES",
                    "users": "root",
                },
                "clustercert-other": {
                    "nodes": "node04",
                    "flags": "MAINT,IGNORE_JOBS,SPEC_NODES",
                    "users": "root",
                },
            }
        ),
    )
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid no process has now
    d = tmp_path / "home" / "slurm-reservations"
    d.mkdir(parents=True)
    (d / "clustercert-dead.json").write_text(json.dumps({
        "reservation": "clustercert-dead", "created": True, "drained": {"node03": ADMIN_REASON},
        "pid": gone.pid, "host": socket.gethostname()}))
    inv = inventory(tmp_path)
    with srun.SlurmBackend.open(inv) as io:
        assert reach_all(io, inv) == dict.fromkeys(inv.hosts, True)
        name = io.reservation
    done = [a[:3] for a in ops(tmp_path)]
    assert done[:3] == [
        ["update", "NodeName=node03", "State=DRAIN"],
        ["delete", "ReservationName=clustercert-dead"],
        ["create", "reservation", f"ReservationName={name}"],
    ]
    after = slurm_state(tmp_path)
    assert after["nodes"]["node03"] == ["IDLE+DRAIN", ADMIN_REASON] and list(after["resv"]) == [
        "clustercert-other"
    ]
    err = capsys.readouterr().err
    assert (
        f"reservation clustercert-dead was left by a run that did not end (pid {gone.pid}): restoring the "
        "drains of node03 and deleting it" in err
    )
    assert "reservation clustercert-other is clustercert's but not this state directory's" in err
    assert not list(d.glob("*.json"))


ADMIN_RESV = {"maint-jan": {"nodes": "node[01-03]", "flags": "MAINT,IGNORE_JOBS,SPEC_NODES", "users": "root"}}


def test_the_admins_reservation_is_used_and_never_changed(slurm, tmp_path, monkeypatch):
    drained_fixture(monkeypatch, states="node01=IDLE+MAINT+RESERVED,node02=IDLE+MAINT+RESERVED,"
                                        "node03=IDLE+DRAIN+MAINT+RESERVED")
    monkeypatch.setenv("FAKE_SLURM_RESERVATIONS", json.dumps(ADMIN_RESV))
    inv = inventory(tmp_path)
    with srun.SlurmBackend.open(inv, reservation="maint-jan") as io:
        assert io.reservation == "maint-jan" and reach_all(io, inv) == dict.fromkeys(inv.hosts, True)
    assert [a[:3] for a in ops(tmp_path)][:4] == [
        ["update", "NodeName=node03", "State=RESUME"], ["salloc", ops(tmp_path)[1][1]], ["scancel", "42"],
        ["update", "NodeName=node03", "State=DRAIN"]]
    assert {a[0] for a in ops(tmp_path)[4:]} <= {"scancel"}
    assert ops(tmp_path)[1][1].endswith(" --reservation=maint-jan")
    after = slurm_state(tmp_path)
    assert after["resv"] == ADMIN_RESV  # neither changed nor deleted
    assert after["nodes"]["node03"] == ["IDLE+MAINT+RESERVED+DRAIN", ADMIN_REASON]


@pytest.mark.parametrize(("resv", "why"), [
    ({}, "--reservation maint-jan: Slurm has no such reservation"),
    ({"maint-jan": {**ADMIN_RESV["maint-jan"], "state": "INACTIVE"}},
     "--reservation maint-jan: it is INACTIVE, not ACTIVE (it has not started or has ended)"),
    ({"maint-jan": {**ADMIN_RESV["maint-jan"], "nodes": "node[01-02]"}},
     "--reservation maint-jan: it does not hold node03"),
])
def test_an_admins_reservation_that_does_not_hold_the_run_reaches_no_node(
    slurm, tmp_path, monkeypatch, resv, why
):
    drained_fixture(monkeypatch)
    monkeypatch.setenv("FAKE_SLURM_RESERVATIONS", json.dumps(resv))
    inv = inventory(tmp_path)
    with srun.SlurmBackend.open(inv, reservation="maint-jan") as io:
        assert io.blocked == dict.fromkeys(inv.hosts, why)
    assert ops(tmp_path) == []  # nothing resumed, no job asked for


def test_cli_refuses_reservation_without_backend_slurm_and_a_bad_name(tmp_path):
    inv = inventory(tmp_path)
    base = [sys.executable, "-m", "clustercert", "validate", "-i", str(inv.source), "--checks", "time"]
    p = subprocess.run([*base, "--reservation", "maint-jan"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "--reservation" in p.stderr and "only with --backend slurm" in p.stderr
    p = subprocess.run(
        [*base, "--backend", "slurm", "--reservation=maint jan;x"], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 2 and "not a reservation name: 'maint jan;x'" in p.stderr, p.stderr
