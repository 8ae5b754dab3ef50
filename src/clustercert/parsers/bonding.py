"""Linux bonding evidence parsers: ``/proc/net/bonding/bondX`` and the bonding sysfs attributes.

``bonding`` (``cat /proc/net/bonding/bond0``)::

    {"driver_version": "v3.7.1" | None,
     "mode": "active-backup" | "802.3ad" | "balance-rr" | "balance-xor" | "broadcast" | "balance-tlb"
             | "balance-alb",            # the kernel's short name (same as sysfs ``mode``)
     "mode_description": "fault-tolerance (active-backup)",
     "fail_over_mac": "active" | None,   # shown by the kernel only when not "none"
     "primary_slave": "eth2" | None,     # "None" -> None
     "primary_reselect": "always" | None,
     "currently_active_slave": "ib0" | None,
     "mii_status": "up" | "down",
     "mii_polling_interval_ms": 100, "up_delay_ms": 0 | None, "down_delay_ms": 0 | None,
     "transmit_hash_policy": "layer2 (0)" | None, "lacp_rate": "fast" | None,
     # 802.3ad only: the "Active Aggregator Info:" block (None where the kernel printed none);
     # "bond bond0 has no active aggregator" sets no_active_aggregator
     "active_aggregator": {"aggregator_id": 2, "number_of_ports": 1, "actor_key": 9, "partner_key": 3,
                           "partner_mac_address": "..."} | None,
     "no_active_aggregator": False,
     "slaves": [{"name": "eth0", "mii_status": "up", "speed_mbps": 10000 | None, "duplex": "full" | None,
                 "link_failure_count": 2, "permanent_hw_addr": "3c:ec:..." | None,
                 "slave_queue_id": 0 | None, "aggregator_id": 2 | None, "state": None}]}

  Missing ``Bonding Mode:`` or ``MII Status:`` raises ParseError; so does a slave block without ``MII
  Status``.

``bonding-files`` (``tail -v -n +1 /proc/net/bonding/*``: each file after a ``==> PATH <==`` header)::

    {"bonds": {"bond0": <a bonding record, as above>, ...}}

  Text before the first header, a header naming no file, or a file that does not parse raises ParseError
  (naming the bond). An empty input is no bond at all: ``{"bonds": {}}``.

``bonding-sysfs``: ``grep -r . /sys/class/net/bondX/bonding/{mode,slaves,active_slave,mii_status,primary,
miimon,fail_over_mac} /sys/class/net/bondX/lower_*/bonding_slave/ 2>/dev/null`` output, one ``PATH:VALUE``
per line (``slave_*`` directories of older kernels and ``/sys/class/net/bonding_masters`` are understood
too). Empty attributes (no active slave) are simply absent, as grep prints nothing for them::

    {"bonding_masters": ["bond0", ...] | None,
     "bonds": {"bond0": {"mode": "active-backup" | None, "mode_id": 1 | None, "fail_over_mac": "active" |
     None,
                         "primary_slave": str | None, "currently_active_slave": str | None,
                         "mii_status": "up" | None, "mii_polling_interval_ms": 100 | None,
                         "ad_aggregator": 2 | None, "ad_num_ports": 2 | None,  # 802.3ad only
                         "slaves": [{"name", "mii_status", "link_failure_count", "permanent_hw_addr",
                                     "state" ("active"/"backup"), "speed_mbps": None, "duplex": None,
                                     "slave_queue_id", "aggregator_id"}]}}}

``bond-failover``: the ``key=value`` lines of clustercert's bond failover step
(clustercert.checks.bond_failover), first ``format=clustercert-bond-failover 1``, last ``end=1``::

    {"bond": "bond0",
     "outcome": "tested" | "no_bond" | "no_active" | "backup_down" | "down_failed",
     "mode": "active-backup" | None, "slaves": ["ib0", "ib1"], "primary": "ib0" | None,
     "addresses": ["10.253.0.11/24"], "active_before": "ib0" | None, "backup": ["ib1"],
     "peer": "10.253.0.12" | None, "watchdog_s": 37 | None, "down_error": str | None,
     "failover_ms": 41.3 | None (None: not within the bound), "failover_bound_ms": 2000.0 | None,
     "active_during": "ib1" | None,
     "ping_before" / "ping": {"rc": 0, "transmitted": 3 | None, "received": 3 | None, "message": str} | None,
     "ping_before_error" / "ping_error": "ping not found" | None,
     "restored": True | False | None, "restore_error": str | None,
     "return_ms": 20.4 | None, "return_bound_ms": 10000.0 | None, "active_after": "ib0" | None}

  A missing header or ``end=1`` (the step did not finish), a line that is not ``key=value``, a key given
  twice, an unknown outcome, a number that is not one, or a tested outcome without its measurements
  raises ParseError.
"""

from __future__ import annotations

import re

from clustercert.parsers._text import grep_dump_entries, int_or_none, text_lines
from clustercert.parsers.base import ParseError, register

_MODES = [
    ("round-robin", "balance-rr"),
    ("active-backup", "active-backup"),
    ("xor", "balance-xor"),
    ("broadcast", "broadcast"),
    ("802.3ad", "802.3ad"),
    ("transmit load balancing", "balance-tlb"),
    ("adaptive load balancing", "balance-alb"),
]

_SLAVE_KEYS = ("name", "mii_status", "speed_mbps", "duplex", "link_failure_count", "permanent_hw_addr",
               "slave_queue_id", "aggregator_id", "state")


# the "Active Aggregator Info:" block of an 802.3ad bond (drivers/net/bonding/bond_procfs.c)
_AGGREGATOR_KEYS = {"Aggregator ID": "aggregator_id", "Number of ports": "number_of_ports",
                    "Actor Key": "actor_key", "Partner Key": "partner_key",
                    "Partner Mac Address": "partner_mac_address"}
_NO_AGGREGATOR_RE = re.compile(r"^bond \S+ has no active aggregator$")


def _mode_name(description: str) -> str | None:
    d = description.lower()
    for needle, name in _MODES:
        if needle in d:
            return name
    return None


def _none_if(value: str | None) -> str | None:
    if value is None:
        return None
    v = value.strip()
    return None if v in ("", "None", "none") else v


def _new_slave(name: str) -> dict:
    slave = dict.fromkeys(_SLAVE_KEYS)
    slave["name"] = name
    return slave


def _speed_mbps(value: str) -> int | None:
    m = re.match(r"(\d+)\s*Mbps", value)
    return int(m.group(1)) if m else None


def _verbatim(value: str) -> str:
    return value


# "key: value" lines of a slave's section: the record field and how the value is read
_SLAVE_LINES = {
    "MII Status": ("mii_status", _verbatim),
    "Speed": ("speed_mbps", _speed_mbps),
    "Duplex": ("duplex", lambda v: None if v.lower() == "unknown" else v),
    "Link Failure Count": ("link_failure_count", int),
    "Permanent HW addr": ("permanent_hw_addr", lambda v: v or None),
    "Slave queue ID": ("slave_queue_id", int),
    "Aggregator ID": ("aggregator_id", int_or_none),
}
# the bond's own "key: value" lines with one field each (Bonding Mode and Primary Slave: below)
_BOND_LINES = {
    "Ethernet Channel Bonding Driver": ("driver_version", lambda v: v.split()[0] if v else None),
    "Currently Active Slave": ("currently_active_slave", _none_if),
    "MII Status": ("mii_status", _verbatim),
    "MII Polling Interval (ms)": ("mii_polling_interval_ms", int),
    "Up Delay (ms)": ("up_delay_ms", int),
    "Down Delay (ms)": ("down_delay_ms", int),
    "Transmit Hash Policy": ("transmit_hash_policy", _verbatim),
    "LACP rate": ("lacp_rate", _verbatim),
}
_DRIVER_KEY = "Ethernet Channel Bonding Driver"


def _bonding_mode(rec: dict, value: str) -> None:
    m = re.search(r"\(fail_over_mac (\w+)\)", value)
    if m:
        rec["fail_over_mac"] = m.group(1)
        value = value[: m.start()].strip()
    rec["mode_description"] = value
    rec["mode"] = _mode_name(value)
    if rec["mode"] is None:
        raise ParseError("bonding", f"unrecognised bonding mode {value!r}")


def _primary_slave(rec: dict, value: str) -> None:
    m = re.match(r"^(\S+)(?:\s*\(primary_reselect (\w+)\))?", value)
    rec["primary_slave"] = _none_if(m.group(1)) if m else None
    rec["primary_reselect"] = m.group(2) if m else None


def _bond_line(rec: dict, key: str, value: str) -> None:
    if key == "Bonding Mode":
        _bonding_mode(rec, value)
    elif key == "Primary Slave":
        _primary_slave(rec, value)
    elif key in _BOND_LINES:
        field, read = _BOND_LINES[key]
        rec[field] = read(value)


def _aggregator_line(rec: dict, key: str, value: str) -> bool:
    """The "Active Aggregator Info:" block (802.3ad, before the first slave); whether the line was its."""
    if key == "Active Aggregator Info":
        rec["active_aggregator"] = dict.fromkeys(_AGGREGATOR_KEYS.values())
        return True
    aggregator = rec["active_aggregator"]
    if aggregator is not None and key in _AGGREGATOR_KEYS:
        field = _AGGREGATOR_KEYS[key]
        aggregator[field] = value if field == "partner_mac_address" else int_or_none(value)
        return True
    return False


def _require_mii(rec: dict) -> None:
    if rec["mode"] is None:
        raise ParseError("bonding", "expected 'Bonding Mode:' line")
    if rec["mii_status"] is None:
        raise ParseError("bonding", "truncated: no bond-level 'MII Status:' line")
    for s in rec["slaves"]:
        if s["mii_status"] is None:
            raise ParseError("bonding", f"truncated: slave {s['name']} has no 'MII Status:' line")


@register("bonding", "/proc/net/bonding/bondX: mode, active/primary slave, MII status, per-slave state")
def parse_bonding(text: str) -> dict:
    kind = "bonding"
    rec: dict = {
        "driver_version": None, "mode": None, "mode_description": None, "fail_over_mac": None,
        "primary_slave": None, "primary_reselect": None, "currently_active_slave": None,
        "mii_status": None, "mii_polling_interval_ms": None, "up_delay_ms": None, "down_delay_ms": None,
        "transmit_hash_policy": None, "lacp_rate": None, "active_aggregator": None,
        "no_active_aggregator": False, "slaves": [],
    }
    slave: dict | None = None  # the section of the last "Slave Interface:" line
    for raw in text_lines(kind, text, "/proc/net/bonding/bondX content ('Bonding Mode: ...')"):
        ln = raw.strip()
        if slave is None and _NO_AGGREGATOR_RE.match(ln):
            rec["no_active_aggregator"] = True
            continue
        if not ln or ":" not in ln:
            continue
        key, value = (p.strip() for p in ln.split(":", 1))
        if slave is None and _aggregator_line(rec, key, value):
            continue
        if key == "Slave Interface":
            slave = _new_slave(value)
            rec["slaves"].append(slave)
        elif slave is not None and key != _DRIVER_KEY:
            if key in _SLAVE_LINES:
                field, read = _SLAVE_LINES[key]
                slave[field] = read(value)
        else:
            _bond_line(rec, key, value)
    _require_mii(rec)
    return rec


_TAIL_HEADER_RE = re.compile(r"^==> (.*) <==$")


def _tail_sections(kind: str, text: str):
    """(file name, its lines) for each '==> PATH <==' section of ``tail -v`` output, each given before the
    next header is read; a header naming no file or a file given twice is an error."""
    name: str | None = None
    body: list[str] = []
    given: set[str] = set()
    for ln in text.replace("\r\n", "\n").split("\n"):
        m = _TAIL_HEADER_RE.match(ln.strip())
        if m:
            if name is not None:
                yield name, body
                given.add(name)
            name, body = m.group(1).rsplit("/", 1)[-1], []
            if not name:
                raise ParseError(kind, f"header {ln.strip()!r} names no file")
            if name in given:
                raise ParseError(kind, f"{name} given twice")
        elif name is not None:
            body.append(ln)
        elif ln.strip():
            raise ParseError(
                kind, f"expected '==> /proc/net/bonding/BOND <==' first, got {ln.strip()[:80]!r}"
            )
    if name is not None:
        yield name, body


@register(
    "bonding-files",
    "tail -v -n +1 /proc/net/bonding/*: every bond's /proc/net/bonding file, parsed as 'bonding'",
)
def parse_bonding_files(text: str) -> dict:
    kind = "bonding-files"
    if not isinstance(text, str):
        raise ParseError(kind, f"expected text, got {type(text).__name__}")
    bonds: dict[str, dict] = {}
    for name, body in _tail_sections(kind, text):
        try:
            bonds[name] = parse_bonding("\n".join(body))
        except ParseError as exc:
            raise ParseError(kind, f"{name}: {exc.reason}") from None
    return {"bonds": bonds}


# --------------------------------------------------------------------------- sysfs

_BOND_ATTR_RE = re.compile(r"(?:^|/)(?P<bond>[^/]+)/bonding/(?P<attr>[a-z_]+)$")
_BOND_SLAVE_RE = re.compile(
    r"(?:^|/)(?P<bond>[^/]+)/(?:slave|lower)_(?P<slave>[^/]+)/bonding_slave/(?P<attr>[a-z_]+)$"
)
_OWN_SLAVE_RE = re.compile(r"(?:^|/)(?P<slave>[^/]+)/bonding_slave/(?P<attr>[a-z_]+)$")


def _new_bond() -> dict:
    return {"mode": None, "mode_id": None, "fail_over_mac": None, "primary_slave": None,
            "currently_active_slave": None, "mii_status": None, "mii_polling_interval_ms": None,
            "ad_aggregator": None, "ad_num_ports": None, "slaves": []}


def _apply_slave_attr(slave: dict, attr: str, value: str) -> None:
    if attr == "mii_status":
        slave["mii_status"] = value
    elif attr == "link_failure_count":
        slave["link_failure_count"] = int(value)
    elif attr == "perm_hwaddr":
        slave["permanent_hw_addr"] = value
    elif attr == "state":
        slave["state"] = value
    elif attr == "queue_id":
        slave["slave_queue_id"] = int(value)
    elif attr == "ad_aggregator_id":
        slave["aggregator_id"] = int_or_none(value)


def _sysfs_mode(bond: dict, value: str) -> None:
    parts = value.split()
    bond["mode"] = parts[0]
    bond["mode_id"] = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def _sysfs_slaves(bond: dict, value: str) -> None:
    for name in value.split():
        if not any(s["name"] == name for s in bond["slaves"]):
            bond["slaves"].append(_new_slave(name))


# /sys/class/net/<bond>/bonding/<attr> files read into one field each (mode and slaves: above)
_SYSFS_BOND_ATTRS = {
    "active_slave": ("currently_active_slave", _none_if),
    "primary": ("primary_slave", _none_if),
    "mii_status": ("mii_status", _verbatim),
    "miimon": ("mii_polling_interval_ms", int),
    "fail_over_mac": ("fail_over_mac", lambda v: v.split()[0]),
    "ad_aggregator": ("ad_aggregator", int_or_none),  # 802.3ad: the active aggregator's id
    "ad_num_ports": ("ad_num_ports", int_or_none),
}


def _apply_bond_attr(bond: dict, attr: str, value: str) -> None:
    if attr == "mode":
        _sysfs_mode(bond, value)
    elif attr == "slaves":
        _sysfs_slaves(bond, value)
    elif attr in _SYSFS_BOND_ATTRS:
        field, read = _SYSFS_BOND_ATTRS[attr]
        bond[field] = read(value)


def _apply_slave_attrs(bonds: dict[str, dict], slave_attrs: list[tuple[str | None, str, str, str]]) -> None:
    """Each slave attribute onto its slave: under the bond its path names, or (a slave's own
    bonding_slave directory) the bond that lists it; one no bond lists is left out."""
    for bond_name, slave_name, attr, value in slave_attrs:
        if bond_name is None:
            owners = [b for b in bonds.values() if any(s["name"] == slave_name for s in b["slaves"])]
            if not owners:
                continue
            target_bond = owners[0]
        else:
            target_bond = bonds.setdefault(bond_name, _new_bond())
        slave = next((s for s in target_bond["slaves"] if s["name"] == slave_name), None)
        if slave is None:
            slave = _new_slave(slave_name)
            target_bond["slaves"].append(slave)
        _apply_slave_attr(slave, attr, value)


def _slave_path(path: str, value: str) -> tuple[str | None, str, str, str] | None:
    m = _BOND_SLAVE_RE.search(path)
    if m:
        return (m.group("bond"), m.group("slave"), m.group("attr"), value)
    m = _OWN_SLAVE_RE.search(path)
    if m:
        return (None, m.group("slave"), m.group("attr"), value)
    return None


@register("bonding-sysfs", "grep dump of /sys/class/net/bondX/bonding/*: mode, slaves, active slave, MII")
def parse_bonding_sysfs(text: str) -> dict:
    kind = "bonding-sysfs"
    bonds: dict[str, dict] = {}
    masters: list[str] | None = None
    slave_attrs: list[tuple[str | None, str, str, str]] = []
    for path, value in grep_dump_entries(kind, text, "'/sys/class/net/bondX/bonding/<attr>:<value>' lines"):
        if path.endswith("bonding_masters"):
            masters = value.split()
            continue
        slave_attr = _slave_path(path, value)
        if slave_attr is not None:
            slave_attrs.append(slave_attr)
            continue
        m = _BOND_ATTR_RE.search(path)
        if m:
            _apply_bond_attr(bonds.setdefault(m.group("bond"), _new_bond()), m.group("attr"), value)
    _apply_slave_attrs(bonds, slave_attrs)
    for name in masters or []:
        bonds.setdefault(name, _new_bond())
    if not bonds:
        raise ParseError(kind, "no /sys/class/net/<bond>/bonding/<attr> paths found")
    return {"bonding_masters": masters, "bonds": bonds}


# --------------------------------------------------------------------------- failover step

_FAILOVER_HEADER = "clustercert-bond-failover 1"
_FAILOVER_OUTCOMES = ("tested", "no_bond", "no_active", "backup_down", "down_failed")
_KEY_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_PING_RE = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")


def _failover_number(kind: str, kv: dict[str, str], key: str) -> float | None:
    value = kv.get(key)
    if value is None or value == "":
        return None
    try:
        return float(value)
    except ValueError:
        raise ParseError(kind, f"{key}: expected a number of milliseconds, got {value!r}") from None


def _failover_ping(kind: str, kv: dict[str, str], prefix: str) -> dict | None:
    if f"{prefix}_rc" not in kv:
        return None
    try:
        rc = int(kv[f"{prefix}_rc"])
    except ValueError:
        raise ParseError(kind, f"{prefix}_rc: expected an exit status, got {kv[prefix + '_rc']!r}") from None
    summary = kv.get(f"{prefix}_summary", "")
    m = _PING_RE.search(summary)
    if summary and not m:
        raise ParseError(kind, f"{prefix}_summary: unrecognised ping summary {summary!r}")
    return {
        "rc": rc,
        "transmitted": int(m.group(1)) if m else None,
        "received": int(m.group(2)) if m else None,
        "message": kv.get(f"{prefix}_message", ""),
    }


def _failover_kv(kind: str, lines: list[str]) -> dict[str, str]:
    """The key=value lines after the format line; each key once, and the last line ``end=1``."""
    if lines[0].strip() != f"format={_FAILOVER_HEADER}":
        raise ParseError(kind, f"expected 'format={_FAILOVER_HEADER}' first, got {lines[0][:80]!r}")
    kv: dict[str, str] = {}
    for n, ln in enumerate(lines[1:], 2):
        key, sep, value = ln.partition("=")
        if not sep or not _KEY_RE.match(key):
            raise ParseError(kind, f"line {n}: expected key=value, got {ln[:80]!r}")
        if key in kv:
            raise ParseError(kind, f"line {n}: {key} given twice")
        kv[key] = value.strip()
    if kv.get("end") != "1" or lines[-1].strip() != "end=1":
        raise ParseError(kind, "truncated: no final 'end=1' line (the step did not finish)")
    return kv


def _check_failover_values(kind: str, kv: dict[str, str]) -> None:
    outcome = kv.get("outcome")
    if outcome not in _FAILOVER_OUTCOMES:
        raise ParseError(kind, f"outcome: expected one of {', '.join(_FAILOVER_OUTCOMES)}, got {outcome!r}")
    if not kv.get("bond"):
        raise ParseError(kind, "no bond= line")
    restored = kv.get("restored")
    if restored not in (None, "0", "1"):
        raise ParseError(kind, f"restored: expected 0 or 1, got {restored!r}")
    watchdog = kv.get("watchdog_s")
    if watchdog is not None and not watchdog.isdigit():
        raise ParseError(kind, f"watchdog_s: expected whole seconds, got {watchdog!r}")


def _check_failover_outcome(kind: str, kv: dict[str, str], rec: dict) -> None:
    """What each outcome needs: a tested bond its active slave and times, down_failed its error."""
    if rec["outcome"] == "tested":
        missing = [
            k
            for k in ("active_before", "failover_ms", "failover_bound_ms", "active_during", "restored")
            if k not in kv
        ]
        if missing:
            raise ParseError(kind, f"outcome tested without {', '.join(missing)}")
        if not rec["active_before"]:
            raise ParseError(kind, "outcome tested without an active slave before the test")
    if rec["outcome"] == "down_failed" and rec["down_error"] is None:
        raise ParseError(kind, "outcome down_failed without down_error")


@register(
    "bond-failover",
    "clustercert's bond failover step: active slave before/during/after, failover and return times, "
    "peer ping",
)
def parse_bond_failover(text: str) -> dict:
    kind = "bond-failover"
    lines = [
        ln for ln in text_lines(kind, text, f"'format={_FAILOVER_HEADER}' and key=value lines") if ln.strip()
    ]
    kv = _failover_kv(kind, lines)
    _check_failover_values(kind, kv)
    outcome = kv["outcome"]
    restored = kv.get("restored")
    watchdog = kv.get("watchdog_s")
    rec = {
        "bond": kv["bond"],
        "outcome": outcome,
        "mode": kv.get("mode") or None,
        "slaves": kv.get("slaves", "").split(),
        "primary": kv.get("primary") or None,
        "addresses": kv.get("addresses", "").split(),
        "active_before": kv.get("active_before") or None,
        "backup": kv.get("backup", "").split(),
        "peer": kv.get("peer") or None,
        "watchdog_s": int(watchdog) if watchdog else None,
        "down_error": kv.get("down_error"),
        "failover_ms": _failover_number(kind, kv, "failover_ms"),
        "failover_bound_ms": _failover_number(kind, kv, "failover_bound_ms"),
        "active_during": kv.get("active_during") or None,
        "ping_before": _failover_ping(kind, kv, "ping_before"),
        "ping_before_error": kv.get("ping_before_error"),
        "ping": _failover_ping(kind, kv, "ping"),
        "ping_error": kv.get("ping_error"),
        "restored": None if restored is None else restored == "1",
        "restore_error": kv.get("restore_error"),
        "return_ms": _failover_number(kind, kv, "return_ms"),
        "return_bound_ms": _failover_number(kind, kv, "return_bound_ms"),
        "active_after": kv.get("active_after") or None,
    }
    _check_failover_outcome(kind, kv, rec)
    return rec
