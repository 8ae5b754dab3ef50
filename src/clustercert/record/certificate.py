"""The signed certificate: canonical form, Ed25519 signing key, sign and verify.

A certificate (schema ``clustercert.certificate/v1``; its JSON Schema is docs/schemas/certificate.schema.json,
which also documents the file's findings and links tables) is a JSON object. Its signature covers the
*content*, not the file's layout:

* ``signed_bytes(cert)`` / ``canonical_bytes(cert)`` is the certificate as its file holds it (``packed``)
  without its ``"signature"`` member, in the JSON Canonicalization Scheme (RFC 8785, JCS; serialised by the
  ``rfc8785`` library): keys sorted by their UTF-16 code units at every level, no whitespace, strings UTF-8
  with only ``"``, ``\\`` and control characters escaped, numbers as ECMAScript writes them (``388.0`` is
  ``388``, ``1e-07`` is ``1e-7``, ``-0.0`` is ``0``). Any language's JCS implementation gives the same bytes.
  NaN and Infinity are refused (they are not JSON); an integer beyond +-(2**53 - 1), which JSON readers
  cannot hold exactly, is written (and signed) as its decimal string, as RFC 8785 section 6 advises.
* ``signature.canonicalization`` is ``"rfc8785"``; ``signature.value`` is base64 of the 64-byte Ed25519
  signature over those bytes; ``signature.public_key`` is base64 of the signer's raw 32-byte public key
  (informative: ``verify`` trusts only the key file it is given).
* Certificates signed before (no ``canonicalization`` member) were signed over Python's
  ``json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)`` of the same
  content (``legacy_canonical_bytes``); ``verify`` checks them that way, so they verify as they did. The
  member is outside the signed bytes, but choosing the other form gains a forger nothing: both forms are
  faithful JSON serialisations, so equal bytes mean equal content.

So re-indenting the file keeps it valid, while any change to a key, a value, a string's content
(whitespace inside a string included), an added or removed member, or the signature itself makes
``verify`` fail. Files that a JSON reader could read two ways (duplicate keys) are refused.

The signing key is an Ed25519 private key. ``init_key`` (``clustercert key init``) makes
``<state>/keys/signing.key`` (OpenSSH private key format, mode 0600) and ``signing.pub`` (OpenSSH
public key line, as ``ssh-keygen`` writes it); ``load_or_create_key`` loads it, or a PEM/OpenSSH key
given with --key, and never makes one. The private key is never logged and never written anywhere else.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import rfc8785
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from clustercert.errors import InputError
from clustercert.model.bounded import MAX_OUTPUT_BYTES, check_json_depth, read_bounded

SCHEMA = "clustercert.certificate/v1"
ALGORITHM = "ed25519"
CANONICALIZATION = "rfc8785"  # signature.canonicalization of what sign() makes; absent: the legacy form
JCS_INT_MAX = 2**53 - 1       # RFC 8785: integers beyond this (either sign) are not exact in JSON readers
KEY_DIR = "keys"
KEY_NAME = "signing.key"
PUB_NAME = "signing.pub"


# ---- canonical form ---------------------------------------------------------------------------

def canonicalization_of(cert: dict) -> str | None:
    """The canonical form the certificate's signature names: ``"rfc8785"``, or None (signed before it had the
    member: ``legacy_canonical_bytes``)."""
    sig = cert.get("signature")
    return sig.get("canonicalization") if isinstance(sig, dict) else None


def canonical_bytes(cert: dict, canonicalization: str | None = None) -> bytes:
    """The bytes that are signed: ``cert`` minus ``"signature"`` in the canonical form ``canonicalization``
    names (default: the one ``cert``'s signature names; none named: the legacy form).

    Raises ValueError for content that is not JSON (NaN, Infinity, non-string keys) or an unknown form.
    """
    form = canonicalization if canonicalization is not None else canonicalization_of(cert)
    if form is None:
        return legacy_canonical_bytes(cert)
    if form != CANONICALIZATION:
        raise ValueError(f"unknown canonicalization {form!r} (want {CANONICALIZATION!r})")
    return jcs_bytes({k: v for k, v in cert.items() if k != "signature"})


def legacy_canonical_bytes(cert: dict) -> bytes:
    """The form certificates were signed over before ``signature.canonicalization``: Python's json.dumps with
    sorted keys, no whitespace, UTF-8 as-is, numbers as Python writes them. Kept to verify those."""
    body = {k: v for k, v in cert.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def jcs_bytes(value: Any) -> bytes:
    """``value`` in RFC 8785 (JCS). ValueError for what JCS cannot write (NaN, Infinity, an integer beyond
    +-(2**53 - 1), a non-string key)."""
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as e:
        raise ValueError(str(e)) from None


def _jcs_order(keys) -> list[str]:
    """Object keys in RFC 8785's order: by their UTF-16 code units."""
    return sorted(keys, key=lambda k: k.encode("utf-16-be"))


def signed_bytes(cert: dict) -> bytearray:
    """``canonical_bytes(packed(cert), "rfc8785")``, built member by member and node by node: the one full
    copy of a fleet's certificate that signing needs, without the packed certificate or its text held beside
    it. ``cert`` is normalised (``_normalise``): its keys are strings."""
    body = {k: v for k, v in cert.items() if k != "signature"}
    out = bytearray(b"{")
    for i, k in enumerate(_jcs_order(body)):
        out += (b"," if i else b"") + jcs_bytes(k) + b":"
        nodes = body[k]
        if k != "nodes" or not isinstance(nodes, dict) or not nodes:
            out += jcs_bytes(packed({k: nodes})[k] if k in ("nodes", "links") else nodes)
            continue
        for j, name in enumerate(_jcs_order(nodes)):
            node = packed({"nodes": {name: nodes[name]}})["nodes"][name]
            out += (b"{" if j == 0 else b",") + jcs_bytes(name) + b":" + jcs_bytes(node)
        out += b"}"
    out += b"}"
    return out


def _json_key(k: Any) -> str:
    """A dict key as json.dumps writes it."""
    if isinstance(k, str):
        return str(k)
    if k is True or k is False or k is None:
        return {True: "true", False: "false", None: "null"}[k]
    if isinstance(k, int):
        return int.__repr__(k)
    if isinstance(k, float):
        return float.__repr__(k)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")


def _normalise_float(value: float) -> float:
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("Out of range float values are not JSON compliant")
    return 0.0 if value == 0 and math.copysign(1.0, value) < 0 else value  # -0.0: JCS and the file write 0


def _normalise_dict(value: dict) -> dict:
    """Copied from the first member that changes (a key made a string, a value normalised); else ``value``."""
    out = None
    for i, (k, v) in enumerate(value.items()):
        nk, nv = (k if type(k) is str else _json_key(k)), _normalise(v)
        if out is None and (nk is not k or nv is not v):
            out = dict(list(value.items())[:i])
        if out is not None:
            out[nk] = nv
    return value if out is None else out


def _normalise_subclass(value: Any) -> Any:
    """A subclass of str, bool, int or float as its plain type; TypeError for what is not JSON."""
    for plain in (str, bool, int, float):
        if isinstance(value, plain):
            return _normalise(plain(value))
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _normalise(value: Any) -> Any:
    """What ``value`` becomes once written and read back (tuples -> lists, int keys -> str, str/int/float
    subclasses -> the plain type, -0.0 -> 0.0, an integer JSON readers cannot hold exactly -> its decimal
    string), so that the bytes signed now are the bytes verified later. Copy on write:
    a part that is already what it reads back as is returned as it is (no second copy of a fleet's
    certificate in memory). ValueError for NaN/Infinity, TypeError for what is not JSON."""
    t = type(value)
    if t is str or t is bool or value is None:
        return value
    if t is int:  # beyond what a JSON reader holds exactly: its decimal text (RFC 8785 section 6)
        return value if -JCS_INT_MAX <= value <= JCS_INT_MAX else str(value)
    if t is float:
        return _normalise_float(value)
    if isinstance(value, dict):
        return _normalise_dict(value)
    if isinstance(value, list | tuple):
        new = [_normalise(v) for v in value]
        if t is list and all(a is b for a, b in zip(new, value, strict=True)):
            return value
        return new
    return _normalise_subclass(value)


# ---- keys -----------------------------------------------------------------------------------

def public_raw(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def openssh_public_line(key: Ed25519PublicKey, comment: str = "clustercert") -> str:
    line = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return f"{line} {comment}\n" if comment else line + "\n"


def fingerprint(key: Ed25519PublicKey | bytes) -> str:
    """OpenSSH-style fingerprint (``SHA256:...``, as ``ssh-keygen -l`` prints it)."""
    if isinstance(key, bytes | bytearray):
        key = Ed25519PublicKey.from_public_bytes(bytes(key))
    line = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    blob = base64.b64decode(line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _load_private(path: Path) -> Ed25519PrivateKey:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(str(path), None, "signing key file not found") from None
    except OSError as e:
        raise InputError(str(path), None, f"cannot read signing key: {e.strerror or e}") from None
    key: Any = None
    problem = "not a PEM or OpenSSH private key"
    loaders = (serialization.load_pem_private_key, serialization.load_ssh_private_key)
    if b"PRIVATE KEY-----" not in data:
        problem = "not a PEM or OpenSSH private key (expected a '-----BEGIN ... PRIVATE KEY-----' block)"
    else:
        for loader in loaders:
            try:
                key = loader(data, password=None)
                break
            except TypeError:
                # the key is encrypted; clustercert signs unattended and takes no passphrase
                problem = "the private key is encrypted; give an unencrypted Ed25519 key"
            except (ValueError, UnsupportedAlgorithm):
                continue
    if key is None:
        raise InputError(str(path), None, problem)
    if not isinstance(key, Ed25519PrivateKey):
        kind = type(key).__name__.lstrip("_").replace("PrivateKey", "") or "unknown"
        raise InputError(str(path), None, f"not an Ed25519 key ({kind}); clustercert signs with Ed25519 only")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """An Ed25519 public key from an OpenSSH line (``ssh-ed25519 AAAA... comment``) or a PEM file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(str(path), None, "public key file not found") from None
    except OSError as e:
        raise InputError(str(path), None, f"cannot read public key: {e.strerror or e}") from None
    if b"PRIVATE KEY" in data:
        raise InputError(str(path), None, "this is a private key; give the public key (signing.pub)")
    key: Any = None
    text = data.strip()
    try:
        if text.startswith(b"-----BEGIN"):
            key = serialization.load_pem_public_key(text)
        elif text.startswith(b"ssh-"):
            key = serialization.load_ssh_public_key(b" ".join(text.split()[:2]))
    except (ValueError, UnsupportedAlgorithm, binascii.Error, IndexError):
        key = None
    if key is None:
        raise InputError(str(path), None, "not an OpenSSH or PEM public key")
    if not isinstance(key, Ed25519PublicKey):
        raise InputError(str(path), None, "not an Ed25519 public key; clustercert signs with Ed25519 only")
    return key


def _write_exclusive(path: Path, data: bytes, mode: int) -> bool:
    """Create ``path`` with ``data`` atomically, only if it does not exist. False if it already did."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # fails if another process created it first
        except FileExistsError:
            return False
        except OSError:  # a filesystem without hard links: exclusive create instead
            try:
                fd2 = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            except FileExistsError:
                return False
            with os.fdopen(fd2, "wb") as f:
                f.write(data)
        return True
    finally:
        os.unlink(tmp)


def key_paths(state_dir: Path) -> tuple[Path, Path]:
    """(private key, public key) of the default signing key under the state directory."""
    keys = Path(state_dir) / KEY_DIR
    return keys / KEY_NAME, keys / PUB_NAME


def init_key(state_dir: Path, force: bool = False) -> Path:
    """``clustercert key init``: make the Ed25519 signing key ``<state>/keys/signing.key`` (0600,
    OpenSSH private key format) and ``signing.pub``. InputError if a key is there already and
    ``force`` is not given (a new key orphans every certificate signed with the old one)."""
    priv_path, pub = key_paths(state_dir)
    priv_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(priv_path.parent, 0o700)
    new = Ed25519PrivateKey.generate()
    pem = new.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                            serialization.NoEncryption())
    if force:
        fd, tmp = tempfile.mkstemp(prefix=f".{priv_path.name}.", dir=priv_path.parent)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, priv_path)
    elif not _write_exclusive(priv_path, pem, 0o600):
        raise InputError(str(priv_path), None, "a signing key is already there; certificates signed with it "
                         "verify only against it: keep it, or replace it with `clustercert key init --force`")
    _write_public(pub, new.public_key())
    return priv_path


def load_or_create_key(path: Path | None, state_dir: Path) -> tuple[Ed25519PrivateKey, Path]:
    """The signing key and the path of its public key (OpenSSH format). Never creates a key.

    With ``path``: load that PEM/OpenSSH Ed25519 private key. Its public key is ``<path>.pub`` when that
    file holds the matching key (``ssh-keygen``'s convention); otherwise it is written to
    ``<state>/keys/<name>.pub``. Without ``path``: load ``<state>/keys/signing.key``, which
    ``clustercert key init`` makes; InputError saying so when it is not there. (The name stays for the
    callers: a key made silently by the first certify, in whatever directory it ran, is what it no
    longer does.)
    """
    keys = Path(state_dir) / KEY_DIR
    if path is not None:
        path = Path(path)
        key = _load_private(path)
        line = openssh_public_line(key.public_key(), comment="")
        beside = path.with_name(path.name + ".pub")
        try:
            if beside.read_text().split()[:2] == line.split()[:2]:
                return key, beside
        except (OSError, UnicodeDecodeError):
            pass
        keys.mkdir(parents=True, exist_ok=True, mode=0o700)
        pub = keys / (path.name.removesuffix(".key").removesuffix(".pem") + ".pub")
        _write_public(pub, key.public_key())
        return key, pub

    priv_path, pub = key_paths(state_dir)
    if not priv_path.exists():
        raise InputError(str(priv_path), None, "no signing key: make one with `clustercert key init` "
                         "(or pass --key FILE); certify never makes one by itself")
    key = _load_private(priv_path)
    _write_public(pub, key.public_key())
    return key, pub


def _write_public(pub: Path, key: Ed25519PublicKey) -> None:
    line = openssh_public_line(key)
    try:
        if pub.read_text().split()[:2] == line.split()[:2]:
            return
    except (OSError, UnicodeDecodeError):
        pass
    fd, tmp = tempfile.mkstemp(prefix=f".{pub.name}.", dir=pub.parent)
    with os.fdopen(fd, "w") as f:  # mkstemp: 0600, like everything under the state directory
        f.write(line)
    os.replace(tmp, pub)


# ---- evidence: once per node, referenced by its findings ------------------------------------------

EVIDENCE_REF_CHARS = 16  # hex digits of SHA-256: a node has a few dozen texts, 64 bits never collide there


def evidence_ref(text: str) -> str:
    """The reference a finding carries for ``text``: the first EVIDENCE_REF_CHARS hex digits of its SHA-256
    (UTF-8). ``verify`` recomputes it, so a reference always names the very text that was signed."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:EVIDENCE_REF_CHARS]


def pack_evidence(nodes: dict[str, dict]) -> dict[str, dict]:
    """The certificate's ``nodes`` with each distinct evidence text stored once per node (``evidence``: ref ->
    text) and each finding naming its text by ``evidence_ref`` instead of carrying it (the findings of one
    command share its output: ``ib.port_state`` and ``ib.port_rate`` read the same sysfs). In place; returns
    ``nodes``. A finding without evidence gets no reference."""
    for body in nodes.values():
        table: dict[str, str] = body.get("evidence") or {}
        for f in body.get("findings") or ():
            text = f.pop("evidence", None)
            if text:  # texts and references shared with other nodes' equal ones (sys.intern): fleet memory
                ref = sys.intern(evidence_ref(text))
                table.setdefault(ref, sys.intern(text))
                f["evidence_ref"] = ref
        if table:
            body["evidence"] = table
    return nodes


def finding_evidence(node: dict, finding: dict) -> str:
    """A finding's evidence text, inline (certificates before pack_evidence, validate's documents) or by its
    ``evidence_ref`` into the node's ``evidence``."""
    text = finding.get("evidence")
    if text is not None:
        return text
    ref = finding.get("evidence_ref")
    return (node.get("evidence") or {}).get(ref, "") if ref else ""


# ---- findings and links: tables in the certificate file -----------------------------------------------

# the columns of a node's findings table, in this order (a key outside them follows, sorted)
FINDING_COLUMNS = (
    "check",
    "status",
    "subject",
    "expected",
    "observed",
    "evidence_ref",
    "value",
    "unit",
    "threshold",
    "evidence",
)
# columns whose null cell, where every finding of the node has a value there, repeats the value of the last
# finding above with the same check (a check's findings per GPU or HCA share their status, expected text and,
# when healthy, what was observed)
REPEAT_COLUMNS = ("status", "expected", "observed")
# the links table: its columns, and those that repeat the last link above of the same probe
LINK_COLUMNS = (
    "a",
    "b",
    "fabric",
    "probe",
    "round",
    "status",
    "value",
    "unit",
    "threshold",
    "subject",
    "expected",
    "observed",
    "seconds",
    "evidence",
)
LINK_REPEAT_COLUMNS = ("status", "unit", "threshold", "expected")
TABLE_MEMBERS = frozenset({"columns", "repeat", "rows"})


def _table(items: list[dict], order: tuple[str, ...], key: str, repeatable: tuple[str, ...]) -> dict | list:
    """``items`` (objects) as ``{"columns": [...], "repeat": [...], "rows": [[...], ...]}``: a row per item,
    in order, with its values in the columns' order (``order``, then any other key, sorted). A null cell is a
    member the item does not have or has as null, except in a ``repeat`` column: there a null ``key`` is the
    row above's, and a null in another (those of ``repeatable`` that every item has a value in) is the value
    of the last row above with the same ``key``; a row ends at its last value. An empty list stays a list."""
    if not items:
        return items
    keys: set = set().union(*items)
    cols = [c for c in order if c in keys] + sorted(keys.difference(order), key=str)
    keyed = all(isinstance(f.get(key), str) for f in items)
    repeat = ([key] if keyed else []) + [
        c for c in repeatable if keyed and all(f.get(c) is not None for f in items)
    ]
    rows, last, prev = [], {}, None
    at = cols.index(key) if key in cols else None
    again = [(i, c) for i, c in enumerate(cols) if c != key and c in repeat]
    for f in items:
        row = [f.get(c) for c in cols]
        if at is not None and prev is not None and f[key] == prev[key]:
            row[at] = None
        above = last.get(f.get(key))
        if above is not None:
            for i, c in again:
                v, w = f[c], above[c]
                if v == w and type(v) is type(w):
                    row[i] = None
        prev = f
        while row and row[-1] is None:
            row.pop()
        rows.append(row)
        if keyed:
            last[f[key]] = f
    out: dict = {"columns": cols, "rows": rows}
    if repeat:
        out["repeat"] = repeat
    return out


def _untable(table: Any, key: str, keep_nulls: bool) -> list:
    """``_table``'s items back. ``keep_nulls``: a null cell is the member as null (links), else the member is
    absent (findings). ValueError: a malformed table."""
    if not isinstance(table, dict):
        return table or []
    cols, rows, repeat = table.get("columns"), table.get("rows"), table.get("repeat") or []
    if not (
        isinstance(cols, list)
        and isinstance(rows, list)
        and isinstance(repeat, list)
        and all(isinstance(c, str) for c in cols)
        and set(repeat) <= set(cols)
        and (not repeat or key in cols)
        and all(isinstance(r, list) and len(r) <= len(cols) for r in rows)
    ):
        raise ValueError("a table needs columns (names), rows (lists no longer than the columns) and repeat "
                         f"(some of the columns, with {key} among them)")
    out: list[dict] = []
    last: dict = {}
    k = None
    for n, row in enumerate(rows):
        f = {c: v for c, v in zip(cols, row, strict=False) if v is not None}
        if repeat:
            if key in repeat and key not in f and k is not None:
                f[key] = k
            k = f.get(key)
            if not isinstance(k, str):
                raise ValueError(f"row {n} has no {key}")
            for c in repeat:
                if c not in f and c != key:
                    if k not in last:
                        raise ValueError(
                            f"row {n} repeats the {c} of an earlier row of {k}, and there is none"
                        )
                    f[c] = last[k][c]
            last[k] = f
        out.append({c: f.get(c) for c in cols if keep_nulls or c in f})
    return out


def findings_table(findings: list[dict]) -> dict | list:
    """A node's findings as the certificate file holds them (``_table`` by check: a null cell is a member the
    finding does not have; status, expected and observed repeat the last finding above of the same check).
    ``node_findings`` reads it back."""
    return _table(findings, FINDING_COLUMNS, "check", REPEAT_COLUMNS)


def node_findings(body: dict) -> list[dict]:
    """A node's findings as a list of objects, whether the certificate holds them as a list (before the
    table, and every certificate in memory) or as ``packed_node``'s table (each ``evidence_ref`` there the
    index of its text in the node's ``evidence`` list: back to the text's reference). ValueError: a malformed
    table or an index that names no text."""
    findings = _untable(body.get("findings"), "check", keep_nulls=False)
    texts = body.get("evidence")
    if not isinstance(body.get("findings"), dict) or not isinstance(texts, list):
        return findings
    refs = [evidence_ref(t) if isinstance(t, str) else None for t in texts]
    for n, f in enumerate(findings):
        i = f.get("evidence_ref")
        if i is None:
            continue
        if type(i) is not int or not 0 <= i < len(refs) or refs[i] is None:
            raise ValueError(f"row {n}: evidence_ref {i!r} is not the index of a text of the node's evidence")
        f["evidence_ref"] = refs[i]
    return findings


def packed_node(body: dict) -> dict:
    """A node as the certificate file holds it: its findings as a ``findings_table`` and, where its evidence
    is stored once by reference (``pack_evidence``), the texts as a list in the order of their first use, each
    finding's ``evidence_ref`` the index of its text there (the reference is the text's hash:
    ``node_findings`` computes it again)."""
    findings, texts = body["findings"], body.get("evidence")
    if isinstance(texts, dict) and all(isinstance(t, str) for t in texts.values()) and all(
            f.get("evidence_ref") is None or f["evidence_ref"] in texts for f in findings):
        order: dict = {}
        for f in findings:
            if f.get("evidence_ref") is not None:
                order.setdefault(f["evidence_ref"], len(order))
        for ref in texts:  # a text no finding names (none is made so): kept, after the others
            order.setdefault(ref, len(order))
        findings = [f if f.get("evidence_ref") is None else dict(f, evidence_ref=order[f["evidence_ref"]])
                    for f in findings]
        return dict(body, findings=findings_table(findings), evidence=[texts[ref] for ref in order])
    return dict(body, findings=findings_table(findings))


def _expanded_node(body: dict) -> dict:
    out = dict(body, findings=node_findings(body))
    if isinstance(body.get("evidence"), list):
        out["evidence"] = {evidence_ref(t): t for t in body["evidence"]}
    return out


def links_table(links: list[dict]) -> dict | list:
    """The certificate's links as its file holds them (``_table`` by probe: a null cell is a member that is
    null; status, unit, threshold and expected repeat the last link above of the same probe)."""
    return _table(links, LINK_COLUMNS, "probe", LINK_REPEAT_COLUMNS)


def certificate_links(cert: dict) -> list[dict]:
    """The certificate's links as a list of objects, from either form. ValueError: a malformed table."""
    return _untable(cert.get("links"), "probe", keep_nulls=True)


def _listed(items: Any) -> bool:
    return isinstance(items, list) and all(isinstance(f, dict) for f in items)


def packed(cert: dict) -> dict:
    """The certificate as its file holds it and its signature covers it: each node's findings list as a
    ``findings_table`` and the links as a ``links_table``. Shares everything else with ``cert``; what is a
    table already, or absent, is as it is."""
    out = dict(cert)
    if _listed(cert.get("links")):
        out["links"] = links_table(cert["links"])
    nodes = cert.get("nodes")
    if isinstance(nodes, dict):
        out["nodes"] = {
            name: packed_node(body) if isinstance(body, dict) and _listed(body.get("findings")) else body
            for name, body in nodes.items()
        }
    return out


def expanded(cert: dict) -> dict:
    """A certificate read from its file with each node's findings and the links as lists of objects again
    (what the reports and the store read). ValueError: a malformed table."""
    out = dict(cert)
    if isinstance(cert.get("links"), dict):
        out["links"] = certificate_links(cert)
    nodes = cert.get("nodes")
    if isinstance(nodes, dict):
        out["nodes"] = {
            name: _expanded_node(body)
            if isinstance(body, dict) and isinstance(body.get("findings"), dict)
            else body
            for name, body in nodes.items()
        }
    return out


def _file_form_problem(name: str, body: dict, table: list) -> str | None:
    """A node in the file form (texts by index, findings as a table): every entry a text, the table sound."""
    if not all(isinstance(t, str) for t in table):
        return f"nodes.{name}.evidence: an entry that is not a text"
    try:
        node_findings(body)
    except ValueError as e:
        return f"nodes.{name}.findings: {e}"
    return None


def _node_evidence_problem(name: str, body: dict) -> str | None:
    """One node's evidence: each text under the reference its hash begins with, each finding's reference
    naming one of them."""
    table = body.get("evidence")
    if isinstance(table, list) and isinstance(body.get("findings"), dict):
        return _file_form_problem(name, body, table)
    if table is not None and not isinstance(table, dict):
        return f"nodes.{name}.evidence is not an object of reference -> text"
    table = table or {}
    for ref in sorted(table, key=str):
        text = table[ref]
        if not isinstance(text, str) or evidence_ref(text) != ref:
            return f"nodes.{name}.evidence.{ref}: the text's SHA-256 does not begin with its reference"
    try:
        findings = node_findings(body)
    except ValueError as e:
        return f"nodes.{name}.findings: {e}"
    for i, f in enumerate(findings):
        ref = f.get("evidence_ref") if isinstance(f, dict) else None
        if ref is not None and ref not in table:
            return f"nodes.{name}.findings[{i}].evidence_ref {ref!r} names no evidence of the node"
    return None


def evidence_problem(cert: dict) -> str | None:
    """Why the certificate's evidence references or tables do not hold (a text whose hash is not its
    reference, a reference or index with no text, a malformed table), or None. A certificate with inline
    evidence has nothing to check here."""
    try:
        certificate_links(cert)
    except ValueError as e:
        return f"links: {e}"
    nodes = cert.get("nodes")
    if not isinstance(nodes, dict):
        return None
    for name in sorted(nodes, key=str):
        body = nodes[name]
        problem = _node_evidence_problem(name, body) if isinstance(body, dict) else None
        if problem:
            return problem
    return None


# ---- sign / verify ------------------------------------------------------------------------------

def sign(cert: dict, private_key: Ed25519PrivateKey) -> dict:
    """``cert`` (as it will read back from JSON; its parts shared with ``cert`` where they already are) with
    ``"signature"`` added: over the RFC 8785 bytes of its file form (``packed``: each node's findings as a
    table), which is what ``dumps`` writes. The findings stay a list of objects in what is returned."""
    if cert.get("schema") != SCHEMA:
        raise InputError("certificate", "schema", f"expected {SCHEMA!r}, got {cert.get('schema')!r}")
    out = dict(_normalise({k: v for k, v in cert.items() if k != "signature"}))
    sig = private_key.sign(signed_bytes(out))
    out["signature"] = {
        "algorithm": ALGORITHM,
        "canonicalization": CANONICALIZATION,
        "public_key": base64.b64encode(public_raw(private_key.public_key())).decode(),
        "value": base64.b64encode(sig).decode(),
    }
    return out


LAYOUT_WIDTH = 160  # a member whose JSON is longer than this gets lines of its own (down to LAYOUT_DEPTH)
LAYOUT_DEPTH = 4    # no deeper than this: a node's hardware, a profile's sections


def dumps(cert: dict) -> str:
    """The certificate file's text: sorted keys, UTF-8 as-is, trailing newline; one line per finding, link,
    evidence text and other short member, indented by its depth (the signature covers the content, not the
    layout: at fleet scale the indentation of every key of every finding was a third of the file). The
    findings are each node's table (``packed``)."""
    return "".join(_chunks(packed(cert), 0)) + "\n"


def _flat(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(",", ": "))


def _lay(value: Any, depth: int) -> tuple[str, str | None]:
    """(``value`` laid out at ``depth``, its one-line JSON when that is at most LAYOUT_WIDTH long, else None).
    A container goes on one line when its one-line form is short enough, which is known from its members'
    without serialising the container again at every depth."""
    # a findings table's rows: a line each
    deepest = LAYOUT_DEPTH + 1 if isinstance(value, list) else LAYOUT_DEPTH
    if depth >= deepest or not isinstance(value, dict | list) or not value:
        flat = _flat(value)
        return flat, flat if len(flat) <= LAYOUT_WIDTH else None
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, dict):
        keys = sorted(value, key=str)
        parts = [(json.dumps(str(k), ensure_ascii=False), _lay(value[k], depth + 1)) for k in keys]
        if all(f is not None for _, (_, f) in parts):
            flat = "{" + ",".join(f"{k}: {f}" for k, (_, f) in parts) + "}"
            if len(flat) <= LAYOUT_WIDTH:
                return flat, flat
        return "{\n" + ",\n".join(f"{inner}{k}: {laid}" for k, (laid, _) in parts) + f"\n{pad}}}", None
    # an entry of a list (a finding, a link, a localisation) is one line
    flats = [_flat(v) for v in value]
    flat = "[" + ",".join(flats) + "]"
    if len(flat) <= LAYOUT_WIDTH:
        return flat, flat
    return "[\n" + ",\n".join(f"{inner}{f}" for f in flats) + f"\n{pad}]", None


def _chunks(value: Any, depth: int):
    """``_lay``'s text in pieces: the top level and each member of the certificate's nodes and links apart, so
    that writing a fleet's certificate never holds its whole text (or several copies of it) at once."""
    if depth >= 2 or not isinstance(value, dict | list) or not value:
        yield _lay(value, depth)[0]
        return
    laid, flat = _lay(value, depth) if len(value) <= 4 and depth else (None, None)
    if flat is not None:
        yield flat
        return
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, dict):
        yield "{\n"
        for i, k in enumerate(sorted(value, key=str)):
            yield f"{',' + chr(10) if i else ''}{inner}{json.dumps(str(k), ensure_ascii=False)}: "
            yield from _chunks(value[k], depth + 1)
        yield f"\n{pad}}}"
    else:
        yield "[\n"
        for i, v in enumerate(value):
            yield f"{',' + chr(10) if i else ''}{inner}{_flat(v)}"
        yield f"\n{pad}]"


def write_certificate(cert: dict, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        for chunk in _chunks(packed(cert), 0):
            f.write(chunk)
        f.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise _Duplicate(k)
        out[k] = v
    return out


class _Duplicate(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _bad_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def load_certificate(cert_path: Path) -> dict:
    """Read a certificate file. InputError: missing, unreadable, not JSON, duplicate keys, wrong schema."""
    cert_path = Path(cert_path)
    src = str(cert_path)
    try:
        raw = read_bounded(cert_path, MAX_OUTPUT_BYTES, "certificate")
    except InputError as e:
        raise InputError(src, None, "certificate file not found" if e.reason == "file not found"
                         else e.reason) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(src, None, f"not UTF-8 (byte {e.start})") from None
    check_json_depth(text, src)
    try:
        cert = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_bad_constant)
    except _Duplicate as e:
        raise InputError(src, e.key, "duplicate key: the file can be read two ways; refusing it") from None
    except json.JSONDecodeError as e:
        raise InputError(src, None, f"not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except ValueError as e:
        raise InputError(src, None, f"not JSON: {e}") from None
    if not isinstance(cert, dict):
        raise InputError(src, None, "not a certificate: the top level is not a JSON object")
    if cert.get("schema") != SCHEMA:
        raise InputError(src, "schema", f"expected {SCHEMA!r}, got {cert.get('schema')!r}")
    return cert


# The members clustercert.certificate/v1 defines. A member outside these is refused by verify, in
# the signed content (a certificate that some other program wrote and signed) as in the signature
# block (which the signature does not cover). A new member is added here first.
TOP_MEMBERS = frozenset(
    {
        "schema",
        "cluster",
        "profiles",
        "started",
        "finished",
        "versions",
        "verdict",
        "rounds",
        "schedule",
        "nodes",
        "links",
        "localisation",
        "thresholds",
        "timing",
        "slurm",
        "signature",
        "cluster_findings",
    }
)  # cluster_findings: probe.nccl_cluster (issue 33), a list
SIGNATURE_MEMBERS = frozenset({"algorithm", "canonicalization", "public_key", "value"})
NODE_MEMBERS = frozenset({"verdict", "findings", "detail", "hardware", "evidence", "rails"})
THRESHOLD_MEMBERS = frozenset({"floor", "ceiling", "unit", "source"})
LOCALISATION_MEMBERS = frozenset({"node", "link", "kind", "reason", "fabric", "probes", "partners"})
SCHEDULE_MEMBERS = frozenset({"round", "pairs", "question"})
VERSIONS_MEMBERS = frozenset({"clustercert", "ansible-core", "nodes"})


def _extra_member(obj: Any, allowed: frozenset, where: str) -> str | None:
    """The first key of ``obj`` (a dict; anything else has none) that ``allowed`` lacks, as a dotted path."""
    if not isinstance(obj, dict):
        return None
    for k in sorted(obj, key=str):
        if k not in allowed:
            return f"{where}.{k}" if where else str(k)
    return None


def _member_checks(cert: dict):
    """(object, its allowed members, its dotted path) for every object of the certificate the schema closes,
    in the order they are reported."""
    yield cert, TOP_MEMBERS, ""
    yield cert.get("signature"), SIGNATURE_MEMBERS, "signature"
    yield cert.get("versions"), VERSIONS_MEMBERS, "versions"
    for group, allowed in (("nodes", NODE_MEMBERS), ("thresholds", THRESHOLD_MEMBERS)):
        entries = cert.get(group)
        if isinstance(entries, dict):
            for name in sorted(entries, key=str):
                yield entries[name], allowed, f"{group}.{name}"
    yield cert.get("links"), TABLE_MEMBERS, "links"
    if isinstance(cert.get("nodes"), dict):
        for name in sorted(cert["nodes"], key=str):
            body = cert["nodes"][name]
            if isinstance(body, dict):
                yield body.get("findings"), TABLE_MEMBERS, f"nodes.{name}.findings"
    for group, allowed in (("localisation", LOCALISATION_MEMBERS), ("schedule", SCHEDULE_MEMBERS)):
        if isinstance(cert.get(group), list):
            for i, item in enumerate(cert[group]):
                yield item, allowed, f"{group}[{i}]"


def unknown_member(cert: dict) -> str | None:
    """The first member (as a dotted path) that the schema does not define, or None."""
    return next((found for obj, allowed, where in _member_checks(cert)
                 if (found := _extra_member(obj, allowed, where))), None)


def _signature_parts(cert: dict, src: str) -> tuple[bytes | None, bytes | None, str | None]:
    """(signature bytes, embedded public key bytes, problem). InputError if there is no signature."""
    sig = cert.get("signature")
    if sig is None:
        raise InputError(src, "signature", "the certificate is not signed")
    if not isinstance(sig, dict) or "value" not in sig:
        raise InputError(src, "signature", "malformed: expected an object with algorithm, public_key, value")
    if sig.get("algorithm") != ALGORITHM:
        raise InputError(
            src, "signature.algorithm", f"unsupported algorithm {sig.get('algorithm')!r} (want {ALGORITHM!r})"
        )
    if sig.get("canonicalization", CANONICALIZATION) != CANONICALIZATION:
        raise InputError(src, "signature.canonicalization", "unsupported canonicalization "
                         f"{sig.get('canonicalization')!r} (want {CANONICALIZATION!r}, or none: signed "
                         "before it)")
    try:
        value = base64.b64decode(str(sig["value"]), validate=True)
    except (binascii.Error, ValueError):
        return None, None, "signature value is not valid base64 (altered)"
    if len(value) != 64:
        return None, None, f"signature value has {len(value)} bytes, an Ed25519 signature has 64 (altered)"
    embedded = None
    if sig.get("public_key") is not None:
        try:
            embedded = base64.b64decode(str(sig["public_key"]), validate=True)
        except (binascii.Error, ValueError):
            return None, None, "signature public_key is not valid base64 (altered)"
    return value, embedded, None


def verify(cert_path: Path, pubkey_path: Path) -> tuple[bool, str]:
    """(True, "") when the certificate was signed by this key and not changed since; else (False, why).

    InputError for a missing/unreadable file, a file that is not JSON, a wrong schema, no signature,
    or a key file that is not an Ed25519 public key.
    """
    key = load_public_key(Path(pubkey_path))
    cert = load_certificate(Path(cert_path))
    if (member := unknown_member(cert)) is not None:
        return False, f"unknown member {member!r}: {SCHEMA} does not define it (refusing the certificate)"
    value, embedded, problem = _signature_parts(cert, str(cert_path))
    if problem:
        return False, problem
    want = public_raw(key)
    if embedded is not None and embedded != want:
        signer = fingerprint(embedded) if len(embedded) == 32 else "an invalid key"
        return False, f"signed by a different key ({signer}), not by {fingerprint(key)}"
    try:
        body = canonical_bytes(cert)  # the form signature.canonicalization names (none: the legacy form)
    except ValueError as e:
        return False, f"content is not canonical JSON: {e}"
    try:
        key.verify(value, body)
    except InvalidSignature:
        return (
            False,
            "signature does not match the content: the certificate was changed after signing, or not signed "
            f"by {fingerprint(key)}",
        )
    if (problem := evidence_problem(cert)) is not None:
        return False, f"evidence references do not hold: {problem} (refusing the certificate)"
    return True, ""
