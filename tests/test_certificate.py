"""The certificate: canonical bytes, signing key handling, sign/verify, verify_command.

``sample_certificate()`` (also used by test_reports.py) builds a realistic certificate: 8 H100 nodes on
two InfiniBand fabrics; gpu-node-03 sees 7 of 8 GPUs (gpu.count fails, and its 1-node NCCL busbw is
low), the gpu-node-05 <-> gpu-node-06 link on fabric 1 is slow in both rounds, one fabric-0 pair errored,
and gpu-node-08 is unreachable.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from clustercert.commands import verify
from clustercert.errors import InputError
from clustercert.record import certificate as cc


def verify_command(cert: str, key: str) -> int:
    """`clustercert verify CERT --key KEY` as its command runs it."""
    return verify.run(SimpleNamespace(certificate=cert, key=key))


NODES = [f"gpu-node-{i:02d}" for i in range(1, 9)]
REACHABLE = NODES[:7]
HCAS = ("mlx5_0", "mlx5_1")

NVIDIA_SMI_L_7 = (
    "\n".join(
        f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:x}1c7a2e0-5b3d-4e8f-9a6c-{i:012x})" for i in range(7)
    )
    + "\n"
)
NVIDIA_SMI_L_8 = (
    "\n".join(
        f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:x}1c7a2e0-5b3d-4e8f-9a6c-{i:012x})" for i in range(8)
    )
    + "\n"
)


def _finding(
    check, status, subject="", expected="", observed="", evidence="", value=None, unit=None, threshold=None
):
    f = {"check": check, "status": status, "subject": subject, "expected": expected, "observed": observed,
         "evidence": evidence}
    if value is not None:
        f["value"], f["unit"] = value, unit
    if threshold:
        f["threshold"] = threshold
    return f


def _node_findings(name: str, idx: int) -> list[dict]:
    bad = name == "gpu-node-03"
    fs = [
        _finding("gpu.count", "fail" if bad else "pass", "", "8", "7" if bad else "8",
                 ("$ nvidia-smi -L\n" + (NVIDIA_SMI_L_7 if bad else NVIDIA_SMI_L_8)
                  + ("\n$ dmesg | grep -i xid\n[ 8123.441092] NVRM: Xid (PCI:0000:9a:00): 79, pid=0, "
                     "GPU has fallen off the bus.\n" if bad else ""))),
        _finding("gpu.model", "pass", "", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3",
                 "name\nNVIDIA H100 80GB HBM3\n" * (7 if bad else 8)),
        _finding("gpu.ecc", "pass", "", "0 uncorrectable volatile ECC errors", "0",
                 "ecc.errors.uncorrected.volatile.total\n" + "0\n" * (7 if bad else 8)),
        _finding("driver.version", "pass", "", "550.90.07", "550.90.07",
                 "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024\n"),
    ]
    for hca in HCAS:
        fs.append(_finding("ib.port_state", "pass", f"{hca}/1", "Active / LinkUp", "Active / LinkUp",
                           f"CA '{hca}'\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n"
                           "\t\tRate: 400\n"))
    for hca in HCAS:
        fs.append(_finding("ib.port_rate", "pass", f"{hca}/1", "400 Gb/s (NDR)", "400 Gb/s (NDR)",
                           f"{hca} port 1 rate: 400 Gb/sec (4X NDR)\n"))
    fs.append(_finding("ib.bond", "skip", "", "bond0 over ib0/ib1", "no bond configured in this profile",
                       "profile sets ipoib_bond: false\n"))
    for h, hca in enumerate(HCAS):
        v = 388.0 + ((idx * 7 + h * 3) % 9)
        fs.append(_finding("perf.ib_loopback", "pass", hca, ">= 380 gbit_per_s", f"{v:.2f} Gb/s",
                           " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   "
                           "MsgRate[Mpps]\n"
                           f" 8388608    5000             {v + 1.2:.2f}             {v:.2f}                 "
                           "0.005790\n",
                           value=v, unit="gbit_per_s", threshold="ib_write_bw_loopback"))
    busbw = 401.7 if bad else 470.0 + (idx * 5) % 11
    fs.append(
        _finding(
            "nccl.allreduce_1node",
            "fail" if bad else "pass",
            "all_reduce_perf -g 8" if not bad else "all_reduce_perf -g 7",
            ">= 460 gbyte_per_s",
            f"{busbw} GB/s",
            "#       size         count      type   redop    root     time   algbw   busbw "
            "#wrong\n"
            f"  8589934592    2147483648     float     sum      -1    36510  235.27  {busbw:.2f}  "
            f"    0\n# Avg bus bandwidth    : {busbw:.3f}\n",
            value=busbw,
            unit="gbyte_per_s",
            threshold="nccl_allreduce_1node",
        )
    )
    fs.append(_finding("time.sync", "pass", "", "synchronised, offset < 10 ms", "offset 0.000021 s",
                       "Reference ID    : A9FE A97B (169.254.169.123)\n"
                       "System time     : 0.000021 seconds fast of NTP time\n"))
    if name == "gpu-node-02":
        # untrusted tool output: markup and a URL must come out as text; ANSI colour must not break XML
        fs[1]["evidence"] += ('\x1b[31mWARN\x1b[0m <script>alert("x")</script>'
                              '<img src="https://evil.example/x.png"> see https://docs.example/h100\n')
    return fs


def _links() -> list[dict]:
    links = []
    for a, b in itertools.combinations(REACHABLE, 2):
        ia, ib = NODES.index(a), NODES.index(b)
        for fabric in (0, 1):
            v = round(384.0 + ((ia * 5 + ib * 3 + fabric * 7) % 12), 1)
            status = "pass"
            if (a, b, fabric) == ("gpu-node-05", "gpu-node-06", 1):
                v, status = 212.4, "fail"
            if (a, b, fabric) == ("gpu-node-02", "gpu-node-07", 0):
                v, status = None, "error"
            links.append({"a": a, "b": b, "fabric": fabric, "probe": "ib_write_bw", "value": v,
                          "unit": "gbit_per_s", "status": status, "round": 1})
    links.append({"a": "gpu-node-05", "b": "gpu-node-06", "fabric": 1, "probe": "ib_write_bw", "value": 208.9,
                  "unit": "gbit_per_s", "status": "fail", "round": 2})
    for i, a in enumerate(REACHABLE):
        b = REACHABLE[(i + 1) % len(REACHABLE)]
        links.append({"a": a, "b": b, "fabric": 0, "probe": "iperf3", "value": 24.0 + (i * 1.7) % 6,
                      "unit": "gbit_per_s", "status": "pass", "round": 1})
    return links


def sample_certificate() -> dict:
    nodes: dict = {}
    for idx, name in enumerate(NODES):
        if name == "gpu-node-08":
            nodes[name] = {"verdict": "unreachable", "findings": []}
        else:
            nodes[name] = {"verdict": "fail" if name == "gpu-node-03" else "pass",
                           "findings": _node_findings(name, idx)}
    # gpu-node-05 and -06 pass as nodes: the slow link is localised to the link, not to either end
    return {
        "schema": "clustercert.certificate/v1",
        "cluster": "lab-h100-a",
        "profiles": {
            "h100-sxm-8x-ndr": {
                "name": "h100-sxm-8x-ndr",
                "gpu": {"count": 8, "model": "NVIDIA H100 80GB HBM3"},
                "ib": {"ports": 2, "rate_gbps": 400},
            }
        },
        "started": "2024-06-12T08:14:03Z",
        "finished": "2024-06-12T08:41:57Z",
        "versions": {
            "clustercert": "0.1.0",
            "ansible-core": "2.17.4",
            "nodes": {
                n: (
                    {"driver": None, "nccl": None, "ofed": None}
                    if n == "gpu-node-08"
                    else {"driver": "550.90.07", "nccl": "2.21.5", "ofed": "MLNX_OFED_LINUX-24.04-0.7.0.0"}
                )
                for n in NODES
            },
        },
        "verdict": "fail",
        "rounds": 2,
        "nodes": nodes,
        "links": _links(),
        "localisation": [
            {
                "node": "gpu-node-03",
                "kind": "bad_node",
                "reason": "gpu.count: 7 of 8 GPUs visible (Xid 79, fallen off the bus)",
            },
            {
                "link": {"a": "gpu-node-05", "b": "gpu-node-06", "fabric": 1},
                "kind": "bad_link",
                "reason": "ib_write_bw 212.4 then 208.9 Gb/s (floor 320) while both ends reach >= 384 Gb/s "
                          "with other peers",
            },
            {
                "node": "gpu-node-08",
                "kind": "bad_node",
                "reason": "unreachable over SSH (connection timed out)",
            },
        ],
        "thresholds": {
            "ib_write_bw": {
                "floor": 320.0,
                "unit": "gbit_per_s",
                "source": "seed guide: InfiniBand >= 80% of rated; NDR rated 400 Gb/s",
            },
            "iperf3": {
                "floor": 20.0,
                "unit": "gbit_per_s",
                "source": "clustercert default for single-stream IPoIB",
            },
            "ib_write_lat": {
                "ceiling": 4.2,
                "unit": "usec",
                "source": "Imbue: p99 latency above 4.2 us fails",
            },
            "ib_write_bw_loopback": {"floor": 380.0, "unit": "gbit_per_s", "source": "seed guide: loopback"},
            "nccl_allreduce_1node": {
                "floor": 460.0,
                "unit": "gbyte_per_s",
                "source": "seed guide: NCCL in a node",
            },
        },
    }


# ---- helpers ---------------------------------------------------------------------------------

def new_key(state: Path):
    """`clustercert key init` in ``state``, then the key as certify loads it."""
    cc.init_key(state)
    return cc.load_or_create_key(None, state)


@pytest.fixture
def signed(tmp_path):
    key, pub = new_key(tmp_path / "state")
    cert = cc.sign(sample_certificate(), key)
    path = cc.write_certificate(cert, tmp_path / "certificate.json")
    return path, pub, key


def _replace_once(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) >= 1, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


# ---- canonical form ---------------------------------------------------------------------------

def test_canonical_bytes_sorted_compact_utf8_without_signature():
    cert = {"schema": "x", "b": [1, 2.5, None], "a": {"z": "é ü", "y": True}, "signature": {"value": "AAAA"}}
    assert cc.canonical_bytes(cert) == '{"a":{"y":true,"z":"é ü"},"b":[1,2.5,null],"schema":"x"}'.encode()
    with pytest.raises(ValueError):
        cc.canonical_bytes({"v": float("nan")})


# ---- keys ------------------------------------------------------------------------------------

def test_no_key_is_made_silently_and_init_refuses_to_overwrite(tmp_path):
    with pytest.raises(InputError) as ei:
        cc.load_or_create_key(None, tmp_path)
    assert "clustercert key init" in str(ei.value) and "\n" not in str(ei.value)
    assert not (tmp_path / "keys" / "signing.key").exists()
    priv = cc.init_key(tmp_path)
    before = priv.read_bytes()
    with pytest.raises(InputError, match="already there.*--force"):
        cc.init_key(tmp_path)
    assert priv.read_bytes() == before
    cc.init_key(tmp_path, force=True)
    assert priv.read_bytes() != before and stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700


def test_key_created_once_0600_openssh_pub_and_reused(tmp_path):
    key, pub = new_key(tmp_path)
    priv = tmp_path / "keys" / "signing.key"
    assert pub == tmp_path / "keys" / "signing.pub"
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert priv.read_text().startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    line = pub.read_text()
    assert line.startswith("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5") and line.endswith("\n")
    before = priv.read_bytes()
    key2, pub2 = cc.load_or_create_key(None, tmp_path)
    assert priv.read_bytes() == before and pub2 == pub
    assert cc.public_raw(key2.public_key()) == cc.public_raw(key.public_key())
    # the private key is written nowhere else
    assert sorted(p.name for p in (tmp_path / "keys").iterdir()) == ["signing.key", "signing.pub"]
    if shutil.which("ssh-keygen"):
        out = subprocess.run(
            ["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True
        ).stdout
        assert out.split()[1] == cc.fingerprint(key.public_key())


def test_given_pem_and_openssh_keys_load(tmp_path):
    k = Ed25519PrivateKey.generate()
    pem = tmp_path / "site.pem"
    pem.write_bytes(k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    loaded, pub = cc.load_or_create_key(pem, tmp_path / "state")
    assert cc.public_raw(loaded.public_key()) == cc.public_raw(k.public_key())
    assert pub == tmp_path / "state" / "keys" / "site.pub"
    assert pub.read_text().split()[1] == cc.openssh_public_line(k.public_key()).split()[1]

    ssh = tmp_path / "id_ed25519"
    ssh.write_bytes(k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                    serialization.NoEncryption()))
    (tmp_path / "id_ed25519.pub").write_text(cc.openssh_public_line(k.public_key(), "me@host"))
    loaded, pub = cc.load_or_create_key(ssh, tmp_path / "state")
    assert pub == tmp_path / "id_ed25519.pub"  # ssh-keygen's convention: the .pub beside it
    assert cc.public_raw(loaded.public_key()) == cc.public_raw(k.public_key())


@pytest.mark.parametrize("kind,reason", [
    ("missing", "signing key file not found"),
    ("garbage", "not a PEM or OpenSSH private key"),
    ("rsa", "not an Ed25519 key"),
    ("encrypted", "encrypted"),
])
def test_bad_private_keys_are_one_line_input_errors(tmp_path, kind, reason):
    p = tmp_path / "k"
    if kind == "garbage":
        p.write_text("hello\n")
    elif kind == "rsa":
        r = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        p.write_bytes(r.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    elif kind == "encrypted":
        p.write_bytes(Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret")))
    with pytest.raises(InputError) as ei:
        cc.load_or_create_key(p, tmp_path / "state")
    msg = str(ei.value)
    assert reason in msg and "\n" not in msg and msg.startswith(str(p))


# ---- sign / verify ---------------------------------------------------------------------------

def test_sign_verify_round_trip(signed, capsys):
    path, pub, key = signed
    cert = json.loads(path.read_text())
    assert cert["signature"]["algorithm"] == "ed25519"
    assert base64.b64decode(cert["signature"]["public_key"]) == cc.public_raw(key.public_key())
    assert len(base64.b64decode(cert["signature"]["value"])) == 64
    assert cc.verify(path, pub) == (True, "")
    assert verify_command(str(path), str(pub)) == 0
    out = capsys.readouterr().out
    assert out == f"certificate OK: lab-h100-a, verdict fail, signed by {cc.fingerprint(key.public_key())}\n"


def test_pem_public_key_accepted(signed, tmp_path):
    path, _pub, key = signed
    pem = tmp_path / "signing.pem"
    pem.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    assert cc.verify(path, pem) == (True, "")


def test_reformatting_whitespace_between_tokens_keeps_it_valid(signed):
    path, pub, _ = signed
    cert = json.loads(path.read_text())
    path.write_text(json.dumps(cert, separators=(",", ":")))  # layout only: same content
    assert cc.verify(path, pub) == (True, "")


@pytest.mark.parametrize("old,new", [
    # a value (the failing GPU count, in its node's findings table)
    ('"fail","","8","7"', '"fail","","8","8"'),
    ('"fail",212.4]', '"fail",212.5]'),                  # a number (a link's value, in the links table)
    ('"verdict": "fail",\n  "versions"', '"verdict": "pass",\n  "versions"'),  # the top-level verdict
    ('"columns": ["a","b"', '"columns": ["b","a"'),     # the links table's columns: the two ends swapped
    ('"columns": ["check"', '"columns": ["checks"'),     # a findings table's column name
    ('GPU 0: NVIDIA H100', 'GPU 0:  NVIDIA H100'),       # whitespace inside a string: one more space
    ('GPU 1: NVIDIA H100', 'GPU 1:\u00a0NVIDIA H100'),   # whitespace inside a string: a different space
    ('"rounds": 2', '"rounds": 1'),
])
def test_changed_content_fails(signed, old, new):
    path, pub, _ = signed
    _replace_once(path, old, new)
    ok, reason = cc.verify(path, pub)
    assert ok is False
    assert "signature does not match the content" in reason


def test_added_and_removed_keys_fail(signed):
    path, pub, _ = signed
    original = path.read_text()
    cert = json.loads(original)
    cert["note"] = "approved"
    path.write_text(json.dumps(cert))
    assert cc.verify(path, pub)[0] is False
    cert = json.loads(original)
    # a finding's evidence (its table's last column)
    del cert["nodes"]["gpu-node-03"]["findings"]["rows"][0][-1]
    path.write_text(json.dumps(cert))
    assert cc.verify(path, pub)[0] is False
    cert = json.loads(original)
    cert["localisation"] = []
    path.write_text(json.dumps(cert))
    assert cc.verify(path, pub)[0] is False


def test_flipped_signature_bytes_fail(signed):
    path, pub, _ = signed
    original = path.read_text()
    value = json.loads(original)["signature"]["value"]
    for pos in (0, 20, 43, 70):
        chars = list(value)
        chars[pos] = "B" if chars[pos] != "B" else "C"
        path.write_text(original.replace(value, "".join(chars)))
        ok, reason = cc.verify(path, pub)
        assert ok is False, pos
        assert reason
    path.write_text(original.replace(value, value[:-4] + "@@@="))
    assert cc.verify(path, pub) == (False, "signature value is not valid base64 (altered)")


def test_every_byte_of_a_value_and_key_matters(signed):
    """Flip each byte of one key and of one string value (keeping the JSON valid): every flip fails."""
    path, pub, _ = signed
    original = path.read_bytes()
    for needle in (b'"reason": "unreachable over SSH', b'"cluster": "lab-h100-a"'):
        start = original.index(needle)
        for off in range(start + 1, start + len(needle) - 1):
            if original[off:off + 1] in (b'"', b":", b" "):
                continue
            flipped = bytearray(original)
            flipped[off] ^= 0x01
            if flipped[off] in b'"\\' or flipped[off] < 0x20:
                continue
            path.write_bytes(bytes(flipped))
            assert cc.verify(path, pub)[0] is False, (needle, off)


def test_different_key_fails(signed, tmp_path):
    path, _pub, _ = signed
    _other, other_pub = new_key(tmp_path / "other")
    ok, reason = cc.verify(path, other_pub)
    assert ok is False and "signed by a different key" in reason


def test_resigned_with_other_key_and_embedded_key_swapped_fails(signed, tmp_path):
    path, pub, key = signed
    other, _ = new_key(tmp_path / "attacker")
    forged = sample_certificate()
    forged["verdict"] = "pass"
    forged = cc.sign(forged, other)
    forged["signature"]["public_key"] = base64.b64encode(cc.public_raw(key.public_key())).decode()
    cc.write_certificate(forged, path)
    ok, reason = cc.verify(path, pub)
    assert ok is False and "signature does not match" in reason


def test_verify_command_failure_is_one_line_on_stderr(signed, capsys):
    path, pub, _ = signed
    _replace_once(path, '"fail","","8","7"', '"fail","","8","8"')
    assert verify_command(str(path), str(pub)) == 1
    cap = capsys.readouterr()
    assert cap.out == ""
    assert cap.err.startswith("clustercert: error: ") and cap.err.count("\n") == 1
    assert "signature does not match" in cap.err


def test_findings_are_a_table_in_the_file_and_read_back_as_they_were(tmp_path):
    key, pub = new_key(tmp_path)
    cert = sample_certificate()
    signed = cc.sign(cert, key)
    assert signed["nodes"] == json.loads(json.dumps(cert["nodes"]))  # in memory: the findings stay objects
    path = cc.write_certificate(signed, tmp_path / "c.json")
    raw = json.loads(path.read_text())
    table = raw["nodes"]["gpu-node-03"]["findings"]
    assert table["columns"][:5] == ["check", "status", "subject", "expected", "observed"]
    assert "\"expected\":" not in path.read_text()  # no key repeated per finding
    assert raw["links"]["columns"][:4] == ["a", "b", "fabric", "probe"]
    back = cc.expanded(raw)
    for name, body in signed["nodes"].items():  # every finding as it was (a null member reads as absent)
        assert back["nodes"][name]["findings"] == [{k: v for k, v in f.items() if v is not None}
                                                   for f in body["findings"]]
    columns = raw["links"]["columns"]  # every link as it was, each with every column (null where it had none)
    assert back["links"] == [{c: lk.get(c) for c in columns} for lk in signed["links"]]
    assert cc.verify(path, pub) == (True, "")


def test_signed_bytes_are_the_canonical_bytes_of_the_file_form():
    cert = json.loads(json.dumps(sample_certificate()))
    assert bytes(cc.signed_bytes(cert)) == cc.canonical_bytes(cc.packed(cert), "rfc8785")
    cert["nodes"] = {}
    assert bytes(cc.signed_bytes(cert)) == cc.canonical_bytes(cc.packed(cert), "rfc8785")


def test_a_certificate_signed_before_the_findings_table_still_verifies(tmp_path):
    key, pub = new_key(tmp_path)
    cert = json.loads(json.dumps(sample_certificate()))
    cert["signature"] = {
        "algorithm": "ed25519",
        "public_key": base64.b64encode(cc.public_raw(key.public_key())).decode(),
        # findings as objects
        "value": base64.b64encode(key.sign(cc.canonical_bytes(cert))).decode(),
    }
    path = tmp_path / "old.json"
    path.write_text(json.dumps(cert, indent=2))
    assert cc.verify(path, pub) == (True, "")
    assert cc.expanded(cc.load_certificate(path))["nodes"] == cert["nodes"]


def test_a_malformed_findings_table_is_refused(tmp_path):
    key, pub = new_key(tmp_path)
    cert = sample_certificate()
    cert["nodes"]["gpu-node-01"]["findings"] = {"columns": ["check"], "rows": [[None]], "repeat": ["check"]}
    path = cc.write_certificate(cc.sign(cert, key), tmp_path / "c.json")
    ok, why = cc.verify(path, pub)
    assert not ok and "nodes.gpu-node-01.findings" in why
    cert["nodes"]["gpu-node-01"]["findings"] = {"columns": ["check"], "rows": [], "note": 1}
    ok, why = cc.verify(cc.write_certificate(cc.sign(cert, key), path), pub)
    assert not ok and "unknown member 'nodes.gpu-node-01.findings.note'" in why
    cert["nodes"]["gpu-node-01"]["findings"] = []
    cert["links"] = {
        "columns": ["a", "probe", "expected"],
        "rows": [["x", "nccl", None]],
        "repeat": ["expected"],
    }
    ok, why = cc.verify(cc.write_certificate(cc.sign(cert, key), path), pub)
    assert not ok and why.startswith("evidence references do not hold: links: row 0 repeats the expected")


def test_sign_output_survives_json_round_trip(tmp_path):
    key, pub = new_key(tmp_path)
    cert = sample_certificate()
    cert["links"][0]["extra"] = (1, 2)          # tuple -> list once written
    cert["profiles"]["h100-sxm-8x-ndr"]["ports"] = {10: "a", 2: "b"}  # int keys -> str once written
    path = cc.write_certificate(cc.sign(cert, key), tmp_path / "c.json")
    assert cc.verify(path, pub) == (True, "")


@pytest.mark.parametrize("case,fragment", [
    ("missing", "certificate file not found"),
    ("not-json", "not JSON"),
    ("unsigned", "not signed"),
    ("schema", "expected 'clustercert.certificate/v1'"),
    ("duplicate", "duplicate key"),
    ("array", "top level is not a JSON object"),
    ("algorithm", "unsupported algorithm"),
])
def test_bad_input_raises_input_error(signed, tmp_path, case, fragment):
    path, pub, _ = signed
    text = path.read_text()
    if case == "missing":
        path = tmp_path / "nope.json"
    elif case == "not-json":
        path.write_text(text[:-20])
    elif case == "unsigned":
        cert = json.loads(text)
        del cert["signature"]
        path.write_text(json.dumps(cert))
    elif case == "schema":
        path.write_text(text.replace("clustercert.certificate/v1", "clustercert.certificate/v2"))
    elif case == "duplicate":
        path.write_text(
            text.replace(
                '"verdict": "fail",\n  "versions"', '"verdict": "fail", "verdict": "pass",\n  "versions"'
            )
        )
    elif case == "array":
        path.write_text("[]")
    elif case == "algorithm":
        path.write_text(text.replace('"algorithm": "ed25519"', '"algorithm": "rsa"'))
    with pytest.raises(InputError) as ei:
        cc.verify(path, pub)
    assert fragment in str(ei.value) and "\n" not in str(ei.value)
    with pytest.raises(InputError):
        verify_command(str(path), str(pub))


def test_bad_public_key_input_errors(signed, tmp_path):
    path, pub, _ = signed
    with pytest.raises(InputError, match="public key file not found"):
        cc.verify(path, tmp_path / "missing.pub")
    priv = pub.with_name("signing.key")
    with pytest.raises(InputError, match="this is a private key"):
        cc.verify(path, priv)
    r = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    rsa_pub = tmp_path / "rsa.pub"
    rsa_pub.write_bytes(r.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH))
    with pytest.raises(InputError, match="not an Ed25519 public key"):
        cc.verify(path, rsa_pub)
    junk = tmp_path / "junk.pub"
    junk.write_text("ssh-ed25519 !!!notbase64\n")
    with pytest.raises(InputError, match="not an OpenSSH or PEM public key"):
        cc.verify(path, junk)


def test_key_file_mode_ignores_umask(tmp_path):
    old = os.umask(0)
    try:
        new_key(tmp_path)
    finally:
        os.umask(old)
    for name in ("signing.key", "signing.pub"):
        assert stat.S_IMODE((tmp_path / "keys" / name).stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700


# ---- unknown members: refused wherever they are, the unsigned signature block included -----------

def test_the_sample_certificate_has_no_unknown_member():
    assert cc.unknown_member(cc.sign(sample_certificate(), Ed25519PrivateKey.generate())) is None


@pytest.mark.parametrize("where,member", [
    ("top", "note"),
    ("signature", "signature.comment"),
    ("node", "nodes.gpu-node-01.approved"),
    ("threshold", "thresholds.iperf3.override"),
    ("versions", "versions.patched"),
    ("localisation", "localisation[0].waived"),
])
def test_unknown_members_fail_verify_even_when_signed(tmp_path, where, member):
    key, pub = new_key(tmp_path / "state")
    cert = sample_certificate()
    if where == "top":
        cert["note"] = "approved by ops"
    elif where == "node":
        cert["nodes"]["gpu-node-01"]["approved"] = True
    elif where == "threshold":
        cert["thresholds"]["iperf3"]["override"] = 1.0
    elif where == "versions":
        cert["versions"]["patched"] = "yes"
    elif where == "localisation":
        cert["localisation"][0]["waived"] = True
    signed_cert = cc.sign(cert, key)  # signed by the right key: the content verifies, the schema does not
    if where == "signature":
        signed_cert["signature"]["comment"] = "looks fine"
    path = cc.write_certificate(signed_cert, tmp_path / "certificate.json")
    ok, reason = cc.verify(path, pub)
    assert ok is False and f"unknown member {member!r}" in reason and "\n" not in reason
    r = subprocess.run([sys.executable, "-m", "clustercert", "verify", str(path), "--key", str(pub)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and r.stdout == "" and r.stderr.count("\n") == 1 and member in r.stderr
    if where == "signature":  # the same certificate without the extra member is valid
        del signed_cert["signature"]["comment"]
        assert cc.verify(cc.write_certificate(signed_cert, path), pub) == (True, "")


# ---- the canonical form: RFC 8785 (JCS) since signature.canonicalization; the Python form before ---------

CERTIFICATES = Path(__file__).parent / "certificates"


def test_a_certificate_signed_by_an_earlier_clustercert_still_verifies(tmp_path, capsys):
    """tests/certificates/v1-python-json.*: written and signed by clustercert at commit 007c05b (main before
    RFC 8785), over Python's json.dumps form; it has numbers whose text differs in JCS (390.0, 1e-07, 1e+16,
    -0.0, an integer beyond 2**53) and a non-BMP character. It verifies with its key, the legacy path; the
    same content under the new form would not."""
    path, pub = CERTIFICATES / "v1-python-json.certificate.json", CERTIFICATES / "v1-python-json.signing.pub"
    assert cc.verify(path, pub) == (True, "")
    assert verify_command(str(path), str(pub)) == 0
    assert "certificate OK: lab-h100-a" in capsys.readouterr().out
    raw = cc.load_certificate(path)
    assert "canonicalization" not in raw["signature"]
    assert cc.canonical_bytes(raw) == cc.legacy_canonical_bytes(raw)
    with pytest.raises(ValueError, match="exceeds safe integer domain"):  # JCS cannot even write it
        cc.canonical_bytes(raw, "rfc8785")
    rows = raw["links"]["rows"]
    small = dict(
        raw,
        links=dict(raw["links"], rows=[r for r in rows if not (isinstance(r[-1], int) and r[-1] > 2**53)]),
    )
    assert cc.legacy_canonical_bytes(small) != cc.canonical_bytes(small, "rfc8785")
    # changed after signing: refused, as before
    copy = tmp_path / "old.json"
    copy.write_text(path.read_text().replace('"pass",390.0,', '"pass",390.5,', 1))
    ok, why = cc.verify(copy, pub)
    assert not ok and "signature does not match" in why
    # claiming the new form for it does not make it verify either
    claimed = dict(raw, signature=dict(raw["signature"], canonicalization="rfc8785"))
    copy.write_text(json.dumps(claimed))
    assert cc.verify(copy, pub)[0] is False


def test_new_certificates_are_signed_over_rfc8785_bytes_any_jcs_implementation_reproduces(signed):
    """The signature covers rfc8785.dumps of the file's content without "signature": checked here with the
    library and cryptography alone, not through clustercert's verify."""
    import rfc8785
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    path, pub, key = signed
    raw = json.loads(path.read_text())
    assert raw["signature"]["canonicalization"] == "rfc8785" and raw["signature"]["algorithm"] == "ed25519"
    body = rfc8785.dumps({k: v for k, v in raw.items() if k != "signature"})
    public = Ed25519PublicKey.from_public_bytes(base64.b64decode(raw["signature"]["public_key"]))
    public.verify(base64.b64decode(raw["signature"]["value"]), body)  # raises if it does not verify
    # a number written with ".0": Python's form of 390.0, not JCS's (390)
    whole = re.compile(rb"[0-9]\.0[,\]}]")
    assert whole.search(cc.legacy_canonical_bytes(raw)) and not whole.search(body)
    # the marker removed, the verifier reads it as an old certificate: the Python form's bytes do not match
    del raw["signature"]["canonicalization"]
    path.write_text(json.dumps(raw))
    ok, why = cc.verify(path, pub)
    assert not ok and "signature does not match" in why


def test_rfc8785_examples_from_the_rfc():
    """RFC 8785 section 3.2.2's example (numbers as ECMAScript writes them, string escapes) and section
    3.2.3's key order (by UTF-16 code units), through canonical_bytes and through signed_bytes' node-by-node
    build."""
    doc = {"numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
           "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/", "literals": [None, True, False]}
    want = ('{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
            '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}').encode()
    assert cc.canonical_bytes(doc, "rfc8785") == want
    keys = ["\u20ac", "\r", "\ufb33", "1", "\U0001f600", "\u0080", "\u00f6"]
    order = ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]
    cert = {"schema": cc.SCHEMA, "nodes": {k: {"verdict": "pass", "findings": []} for k in keys}, "links": []}
    got = bytes(cc.signed_bytes(cert))
    assert got == cc.canonical_bytes(cert, "rfc8785")
    assert [got.index(json.dumps(k, ensure_ascii=False).encode() + b":{") for k in order] == sorted(
        got.index(json.dumps(k, ensure_ascii=False).encode() + b":{") for k in keys)


def test_certificate_numbers_survive_signing_writing_and_verifying(tmp_path):
    """1e21, 1e-7, 1e16, 0.1 + 0.2, the smallest double, -0.0 and an integer beyond 2**53 - 1: what is written
    is what was signed and reads back as the same number (-0.0 as 0.0: JCS does not tell them apart; the big
    integer as its decimal text, RFC 8785 section 6); NaN and Infinity are refused (not JSON)."""
    key, pub = new_key(tmp_path)
    cert = sample_certificate()
    values = [1e21, 1e-7, 1e16, 0.1 + 0.2, 5e-324, -0.0, 2**60, -(2**53) + 1]
    cert["links"] += [{"a": "gpu-node-01", "b": "gpu-node-02", "fabric": 0, "probe": "edge", "value": v,
                       "unit": "usec", "status": "pass", "round": 3} for v in values]
    path = cc.write_certificate(cc.sign(cert, key), tmp_path / "c.json")
    assert cc.verify(path, pub) == (True, "")
    back = [lk["value"] for lk in cc.certificate_links(cc.load_certificate(path)) if lk["probe"] == "edge"]
    assert back == [1e21, 1e-7, 1e16, 0.1 + 0.2, 5e-324, 0.0, str(2**60), -(2**53) + 1]
    assert [type(v) for v in back[:6]] == [float] * 6
    assert "-0.0" not in path.read_text()
    for bad in (float("nan"), float("inf")):
        cert["links"][-1]["value"] = bad
        with pytest.raises(ValueError, match="not JSON compliant"):
            cc.sign(cert, key)


def test_an_unknown_canonicalization_is_an_input_error(signed):
    path, pub, _ = signed
    path.write_text(
        path.read_text().replace('"canonicalization": "rfc8785"', '"canonicalization": "xml-c14n"')
    )
    with pytest.raises(InputError, match="unsupported canonicalization 'xml-c14n'"):
        cc.verify(path, pub)
