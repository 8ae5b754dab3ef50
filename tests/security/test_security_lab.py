"""Lab acceptance of issue 19.1 and 19.3 (root; the lab lock via the fixtures):

- a forged host key for node01 in known_hosts: bootstrap (check mode and real), validate, probe, certify and
  drift each report node01 `unreachable` with the host-key reason, exit 1, and sshd on node01 logs no new
  session; the ssh command lines that Ansible, mitogen and the collector run have StrictHostKeyChecking yes
  as the effective value (`ssh -G`, through a wrapper ssh on PATH); with the right key the same verbs pass.
- as the lab's non-root operator (node.LAB_USER, password-less sudo) with root login refused by sshd:
  bootstrap (an idempotent re-run on the suite's bootstrapped lab), validate and certify of 2 nodes pass;
  sudo that wants a password, with none given, gives one clear line.
Two nodes of the bootstrapped 4-node lab; short probes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from clustercert.collect.ssh import HOST_KEY_FAILURE
from clustercert.record.certificate import expanded  # the file keeps findings and links as tables
from clustercert_lab import node as lab_node

pytestmark = [pytest.mark.lab, pytest.mark.slow]

PAIR = ("node01", "node02")
PROBE = ("--probe-seconds", "2", "--probe-timeout", "20")


def cc(env: dict, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clustercert", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **env})


@pytest.fixture
def short_home():
    """A state directory with a short path: ssh control sockets live under it (108-byte limit)."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="ccsec-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _key_init(env: dict) -> None:
    # `clustercert key init` where this build has it (issue 19.4: certify no longer makes a key by itself)
    cc(env, "key", "init", timeout=60)


def _inventory_copy(src: Path, dest: Path, hosts: tuple[str, ...], known_hosts: Path | None = None) -> Path:
    """The lab inventory (``src``: hosts.yml with group_vars/ beside it) limited to ``hosts``, optionally
    pointing at another known_hosts file."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src.parent / "group_vars", dest / "group_vars", dirs_exist_ok=True)
    doc = yaml.safe_load(src.read_text())
    allh = doc["all"]["children"]["lab"]["hosts"]
    doc["all"]["children"]["lab"]["hosts"] = {h: allh[h] for h in hosts}
    if known_hosts is not None:
        for hv in doc["all"]["children"]["lab"]["hosts"].values():
            args = hv["ansible_ssh_common_args"].split()
            hv["ansible_ssh_common_args"] = " ".join(
                f"UserKnownHostsFile={known_hosts}" if a.startswith("UserKnownHostsFile=") else a
                for a in args
            )
    (dest / "hosts.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest / "hosts.yml"


def _sshd_sessions_since(lab, name: str, since: float) -> int:
    p = lab.handle(name).exec(
        [
            "sh",
            "-c",
            f"journalctl -q -o cat SYSLOG_IDENTIFIER=sshd --since @{int(since)} | grep -c Accepted || true",
        ]
    )
    return int(p.stdout.strip() or 0)


def _ssh_wrapper(tmp: Path) -> tuple[Path, Path]:
    """A directory with an `ssh` that logs `ssh -G` of each command line, then runs the real ssh."""
    real = shutil.which("ssh")
    bindir, log = tmp / "bin", tmp / "ssh-G.log"
    bindir.mkdir()
    (bindir / "ssh").write_text(textwrap.dedent(f"""\
        #!/bin/sh
        {{ echo "=== $*" | head -c 600; echo; {real} -G "$@" 2>&1 | grep -E '^(stricthostkeychecking|userknownhostsfile|hostname) '; }} >> {log}
        exec {real} "$@"
        """))  # noqa: E501
    (bindir / "ssh").chmod(0o755)
    return bindir, log


def _effective_lines(log: Path) -> list[dict]:
    out, cur = [], None
    for line in log.read_text().splitlines():
        if line.startswith("=== "):
            cur = {"argv": line[4:]}
            out.append(cur)
        elif cur is not None and line.split(" ", 1)[0] in (
            "stricthostkeychecking",
            "userknownhostsfile",
            "hostname",
        ):
            k, v = line.split(" ", 1)
            cur[k] = v
    return [r for r in out if "stricthostkeychecking" in r]


def _unreachable_with_reason(p: subprocess.CompletedProcess, node: str) -> None:
    text = p.stdout + p.stderr
    assert p.returncode == 1, text[-3000:]
    assert HOST_KEY_FAILURE in text, text[-3000:]
    assert node in text


def test_forged_host_key_is_refused_by_every_verb(bootstrapped_lab, tmp_path, short_home):
    lab = bootstrapped_lab
    t0 = time.time()
    env = {"CLUSTERCERT_HOME": str(short_home / "s"), "ANSIBLE_SSH_CONTROL_PATH_DIR": str(short_home / "cp")}
    _key_init(env)
    # one inventory for every run (drift's baseline is keyed by the inventory's path); its known_hosts file
    # holds the right keys, then a forged one for node01, then the right keys again
    kh = tmp_path / "known_hosts"
    right = (lab.ssh_config.parent / "known_hosts").read_text()
    kh.write_text(right)
    # every node of the lab stays in the inventory (the cluster_ssh role's known-hosts file names them all,
    # so drift of the bootstrapped nodes is clean); the verbs run on the pair with --limit
    good = forged = _inventory_copy(lab.inventory, tmp_path / "inv", tuple(lab.nodes), kh)
    # the baseline drift compares with, made with the right keys
    out = tmp_path / "cert-good"
    p = cc(env, "certify", "-i", str(good), "--limit", ",".join(PAIR), "--out", str(out), *PROBE)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    # no shared ssh connection from that run may carry the next ones (a master was verified when it was made)
    for cp in (short_home / "s" / "cp", short_home / "cp"):
        shutil.rmtree(cp, ignore_errors=True)

    # node01's line in a copy of known_hosts gets another key (what a machine answering on its address shows)
    forged_key = tmp_path / "forged_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(forged_key)], check=True)
    forged_pub = forged_key.with_suffix(".pub").read_text().split()
    lines = []
    for line in (lab.ssh_config.parent / "known_hosts").read_text().splitlines():
        names = line.split()[0].split(",")
        lines.append(f"{line.split()[0]} {forged_pub[0]} {forged_pub[1]}" if "node01" in names else line)
    kh.write_text("\n".join(lines) + "\n")
    # --backend slurm's one connection, to its launch node (the first Slurm host: node01), is refused the same
    # way
    slurm_inv = _inventory_copy(lab.inventory, tmp_path / "inv-slurm", tuple(lab.nodes), kh)
    gv = slurm_inv.parent / "group_vars" / "all.yml"
    if "clustercert_slurm:" not in gv.read_text():
        gv.write_text(gv.read_text() + "clustercert_slurm: true\n")
    bindir, log = _ssh_wrapper(tmp_path)
    fenv = {**env, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    since = time.time() - 1

    runs = {
        "bootstrap --check": cc(fenv, "bootstrap", "-i", str(forged), "--limit", "node01", "--check"),
        "bootstrap": cc(fenv, "bootstrap", "-i", str(forged), "--limit", "node01"),
        "validate": cc(fenv, "validate", "-i", str(forged), "--limit", ",".join(PAIR)),
        "probe": cc(
            fenv, "probe", "-i", str(forged), "--limit", ",".join(PAIR), "--probes", "iperf3", *PROBE
        ),
        "certify": cc(
            fenv,
            "certify",
            "-i",
            str(forged),
            "--limit",
            ",".join(PAIR),
            "--out",
            str(tmp_path / "cert-forged"),
            *PROBE,
        ),
        # on node01 alone (its baseline is the certify above): node02's check-mode playbook would add nothing
        # here
        "drift": cc(fenv, "drift", "-i", str(forged), "--limit", "node01"),
        "validate --backend slurm": cc(
            fenv,
            "validate",
            "-i",
            str(slurm_inv),
            "--limit",
            ",".join(PAIR),
            "--backend",
            "slurm",
            "--checks",
            "time",
        ),
    }
    for verb, p in runs.items():
        try:
            _unreachable_with_reason(p, "node01")
        except AssertionError as exc:
            raise AssertionError(f"{verb}: {exc}") from None
    assert _sshd_sessions_since(lab, "node01", since) == 0, (
        "a session was opened on the node with the forged key"
    )
    assert _sshd_sessions_since(lab, "node02", since) > 0  # the check can see sessions: node02 had them
    v = json.loads(
        cc(fenv, "validate", "-i", str(forged), "--limit", ",".join(PAIR), "--format", "json").stdout
    )
    nodes = v.get("nodes", v)
    assert nodes["node01"]["verdict"] == "unreachable" and nodes["node02"]["verdict"] == "pass", v

    records = _effective_lines(log)
    to_node01 = [r for r in records if r.get("hostname") == lab.status["nodes"]["node01"]["mgmt_ip"]]
    assert to_node01, records[:3]
    assert all(r["stricthostkeychecking"] == "true" for r in records), [
        r for r in records if r["stricthostkeychecking"] != "true"
    ][:2]
    assert all("/dev/null" not in r.get("userknownhostsfile", "") for r in records)
    assert any("StrictHostKeyChecking yes" in r["argv"] for r in records), "mitogen's ssh line not seen"
    assert any("StrictHostKeyChecking=yes" in r["argv"] for r in records)

    # the right keys: node01 answers again (the baseline certify above passed with them: validate, probes and
    # the certificate; bootstrap and drift with the right keys are their own lab modules' -- CI time)
    kh.write_text(right)
    for cp in (short_home / "s" / "cp", short_home / "cp"):
        shutil.rmtree(cp, ignore_errors=True)
    good_runs = {"validate": cc(env, "validate", "-i", str(good), "--limit", ",".join(PAIR))}
    for verb, p in good_runs.items():
        assert p.returncode == 0, f"{verb}: {(p.stdout + p.stderr)[-3000:]}"
    print(f"host-key lab test: {time.time() - t0:.0f} s")


def _set_root_login(lab, names, allowed: bool) -> None:
    for n in names:
        h = lab.handle(n)
        if allowed:
            h.exec(["rm", "-f", "/etc/ssh/sshd_config.d/05-clustercert-test.conf"])
        else:
            h.exec(
                ["sh", "-c", "echo 'PermitRootLogin no' > /etc/ssh/sshd_config.d/05-clustercert-test.conf"]
            )
        r = h.exec(["systemctl", "reload", "ssh"])
        assert r.returncode == 0, r.stderr


def test_non_root_operator_with_sudo(bootstrapped_lab, tmp_path, short_home):
    lab = bootstrapped_lab
    t0 = time.time()
    user_inv = Path(lab.manager.user_inventory_path())
    assert user_inv.exists()
    # every node stays in the inventory and the verbs run on the pair with --limit: bootstrap writes the
    # cluster's known-hosts file from the inventory, and an inventory of two would leave the pair unable to
    # reach the other nodes (mpirun from node01 to node03 refused its host key in the later lab modules)
    inv = _inventory_copy(user_inv, tmp_path / "inv", tuple(lab.nodes))
    limit = ("--limit", ",".join(PAIR))
    env = {"CLUSTERCERT_HOME": str(short_home / "s"), "ANSIBLE_SSH_CONTROL_PATH_DIR": str(short_home / "cp")}
    env_nopass = {**env}
    os.environ.pop("ANSIBLE_BECOME_PASS", None)
    _key_init(env)
    _set_root_login(lab, PAIR, allowed=False)
    try:
        for n in PAIR:  # root is refused by sshd now; the operator gets in
            r = lab.ssh(n, "true", check=False, fresh=True, timeout=30)
            assert r.returncode == 255 and "Permission denied" in r.stderr, r.stderr
        p = cc(env, "bootstrap", "-i", str(inv), *limit, "--format", "json", timeout=1800)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
        doc = json.loads(p.stdout)
        assert set(doc["hosts"]) == set(PAIR) and not any(
            h["failed"] or h["unreachable"] for h in doc["hosts"].values()
        )
        p = cc(env, "validate", "-i", str(inv), *limit)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
        out = tmp_path / "cert"
        p = cc(env, "certify", "-i", str(inv), *limit, "--out", str(out), *PROBE)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
        cert = expanded(json.loads((out / "certificate.json").read_text()))
        assert cert["verdict"] == "pass" and set(cert["nodes"]) == set(PAIR)

        # sudo that wants a password, none given: one clear line, exit 1
        h = lab.handle("node01")
        h.exec(["sh", "-c", f"echo '{lab_node.LAB_USER} ALL=(ALL:ALL) ALL' > /{lab_node.SUDOERS_FILE}"])
        try:
            p = cc(env_nopass, "validate", "-i", str(inv), "--limit", "node01")
            assert p.returncode == 1
            said = [ln for ln in (p.stdout + p.stderr).splitlines() if "sudo needs a password" in ln]
            assert len(said) == 1 and "-K" in said[0], p.stdout + p.stderr
            assert "Traceback" not in p.stderr
        finally:
            h.exec(["sh", "-c", f"printf '%s' '{lab_node.SUDOERS_NOPASSWD}' > /{lab_node.SUDOERS_FILE}"])
    finally:
        _set_root_login(lab, PAIR, allowed=True)
    for n in PAIR:
        lab.wait_ssh(n, timeout=30)
    print(f"non-root lab test: {time.time() - t0:.0f} s")
