"""InfiniBand evidence parsers: ibstat, ibstatus, ibv_devinfo, ibdev2netdev, perfquery, sysfs, rdma link.

Kinds and record shapes (all keys always present unless marked optional):

``ibstat`` (``ibstat``, ``ibstat -s``, ``ibstat CA PORT`` without indentation, ``ibstat -l``, ``ibstat -p``)::

    {"format": "full" | "short" | "ca_names" | "port_guids",
     "ok": bool,                 # False when ibstat printed ibpanic/ibwarn/iberror lines
     "errors": [str],            # those lines, verbatim
     "cas": [{"name": "mlx5_0", "type": "MT4129", "num_ports": 1, "firmware_version": "28.39.1002",
              "hardware_version": "0", "node_guid": "0x...", "system_image_guid": "0x...",
              "ports": [{"port": 1, "state": "Active", "physical_state": "LinkUp",
                         "rate_gbit_per_s": 400, "rate_note": None | "FDR10",
                         "base_lid": 75, "lmc": 0, "sm_lid": 334, "capability_mask": "0xa751e848",
                         "port_guid": "0x...", "link_layer": "InfiniBand" | "Ethernet"}]}],
     "ca_names": [str],          # -l format (also filled from "cas" for other formats)
     "port_guids": [str]}        # -p format (also filled from "cas")

  Error exit (e.g. ``ibpanic: ... stat of IB device 'mlx5_8' failed``): parsed into ``ok: False`` with
  the message in ``errors``; CAs printed before the panic are kept. CA fields missing in a variant
  (``ibstat CA PORT`` prints no CA type) are None. A port block without ``State`` raises ParseError.

``ibstatus``::

    {"ports": [{"device": "mlx5_0", "port": 1, "default_gid": str | None, "base_lid": int, "sm_lid": int,
                "state": "ACTIVE", "state_code": 4, "phys_state": "LinkUp", "phys_state_code": 5,
                "rate_gbit_per_s": 200, "rate_label": "4X HDR", "link_layer": "InfiniBand"}]}

``ibv-devinfo`` (``ibv_devinfo`` and ``ibv_devinfo -v``)::

    {"ok": bool, "error": str | None,   # "No IB devices found" -> ok False, devices []
     "devices": [{"hca_id", "transport", "fw_ver", "node_guid", "sys_image_guid", "vendor_id",
                  "vendor_part_id", "hw_ver", "board_id", "phys_port_cnt": int, "verbose": bool,
                  "ports": [{"port": 1, "state": "PORT_ACTIVE", "state_code": 4, "max_mtu": 4096,
                             "active_mtu": 4096, "sm_lid": int, "port_lid": int, "port_lmc": int,
                             "link_layer": str,
                             # -v only (None otherwise):
                             "active_width": "4X", "active_speed": "2.5 Gbps",
                             "active_speed_gbit_per_s": 2.5, "phys_state": "POLLING"}]}]}

``ibdev2netdev``::

    {"mappings": [{"hca": "mlx5_0", "port": 1, "netdev": "ib0", "state": "Up" | "Down",
                   "port_state": "ACTIVE" | None}]}      # port_state only with ``-v``

``perfquery`` (``perfquery [-x] [-E] ...``; one block per ``# ... counters: Lid L port P`` header)::

    {"ok": bool, "errors": [str],
     "ports": [{"lid": 134, "port": 1, "counter_set": "Port extended counters", "extended": bool,
                "cap_mask": "0x5A00" | None, "counters": {"SymbolErrorCounter": 0, ...}}],
     "error_counters": {"LinkDownedCounter": 1, ...}}   # non-zero ERROR_COUNTERS summed over ports

``sysfs-infiniband``: input is ``grep -r . /sys/class/infiniband/*/{fw_ver,hca_type,board_id,node_guid}
/sys/class/infiniband/*/ports/*/{state,phys_state,rate,link_layer} /sys/class/infiniband/*/ports/*/counters/``
output, i.e. one ``PATH:VALUE`` per line. Paths may be absolute (``/sys/class/infiniband/mlx5_0/...``) or
relative to the class directory (``mlx5_0/ports/1/state``)::

    {"hcas": {"mlx5_0": {"fw_ver": str | None, "hca_type": str | None, "board_id": str | None,
                         "node_guid": str | None,
                         "ports": {"1": {"state": "ACTIVE", "state_code": 4, "phys_state": "LinkUp",
                                         "phys_state_code": 5, "rate_gbit_per_s": 400,
                                         "rate_label": "4X NDR", "link_layer": "InfiniBand",
                                         "lid": 12, "sm_lid": 1,          # from sysfs hex, e.g. 0x1
                                         "counters": {"symbol_error": 0, ...},   # "N/A (no PMA)" -> None
                                         "counters_ext": {...}, "hw_counters": {...}}}}}}

``rdma-link`` (``rdma link [show]``)::

    {"links": [{"hca": "mlx5_0", "port": 1, "state": "ACTIVE", "physical_state": "LINK_UP",
                "netdev": "eno2np0" | None}]}
"""

from __future__ import annotations

import re

from clustercert.parsers._text import (
    grep_dump_entries,
    int_or_none,
    num,
    parse_coded_state,
    parse_rate,
    text_lines,
    to_int,
)
from clustercert.parsers.base import ParseError, register

# --------------------------------------------------------------------------- ibstat

_IBSTAT_CA_RE = re.compile(r"^CA:?\s+'([^']+)'\s*$")
_IBSTAT_PORT_RE = re.compile(r"^Port\s+(\d+):\s*$")
_IBSTAT_ERR_RE = re.compile(r"^(ibpanic|ibwarn|iberror|ibstat):", re.I)
_GUID_RE = re.compile(r"^0x[0-9a-fA-F]{16}$")
_NAME_RE = re.compile(r"^[A-Za-z][\w.-]*$")

_IBSTAT_CA_KEYS = {
    "CA type": "type",
    "Number of ports": "num_ports",
    "Firmware version": "firmware_version",
    "Hardware version": "hardware_version",
    "Node GUID": "node_guid",
    "System image GUID": "system_image_guid",
}
_IBSTAT_PORT_KEYS = {
    "State": "state",
    "Physical state": "physical_state",
    "Rate": "rate",
    "Base lid": "base_lid",
    "LMC": "lmc",
    "SM lid": "sm_lid",
    "Capability mask": "capability_mask",
    "Port GUID": "port_guid",
    "Link layer": "link_layer",
}


def _new_ca(name: str) -> dict:
    ca: dict = {"name": name}
    for key in _IBSTAT_CA_KEYS.values():
        ca[key] = None
    ca["ports"] = []
    return ca


def _finish_port(kind: str, ca: str, port: dict) -> dict:
    if port.get("state") is None:
        raise ParseError(kind, f"truncated: CA '{ca}' port {port['port']} has no 'State:' line")
    rate = port.pop("rate", None)
    port["rate_gbit_per_s"], port["rate_note"] = (None, None) if rate is None else parse_rate(rate)
    for key in ("base_lid", "lmc", "sm_lid"):
        if port.get(key) is not None:
            port[key] = to_int(port[key])
    for key in _IBSTAT_PORT_KEYS.values():
        if key != "rate":
            port.setdefault(key, None)
    return port


def _close_port(kind: str, ca: dict | None, port: dict | None) -> None:
    if port is not None and ca is not None:
        ca["ports"].append(_finish_port(kind, ca["name"], port))


def _ibstat_field(ca: dict, port: dict | None, ln: str) -> None:
    """A "key: value" line of a CA block, onto the port when it is a port key and a port is open.
    Unknown keys (future ibstat fields) are ignored."""
    key, value = (p.strip() for p in ln.split(":", 1))
    if port is not None and key in _IBSTAT_PORT_KEYS:
        port[_IBSTAT_PORT_KEYS[key]] = value
    elif key in _IBSTAT_CA_KEYS:
        ca[_IBSTAT_CA_KEYS[key]] = value


def _ibstat_blocks(kind: str, body: list[str]) -> list[dict]:
    """The "CA '<name>'" blocks, each with its finished ports; [] when there is none."""
    cas: list[dict] = []
    ca: dict | None = None
    port: dict | None = None
    for ln in body:
        m = _IBSTAT_CA_RE.match(ln)
        if m:
            _close_port(kind, ca, port)
            port = None
            ca = _new_ca(m.group(1))
            cas.append(ca)
            continue
        m = _IBSTAT_PORT_RE.match(ln)
        if m:
            if ca is None:
                raise ParseError(kind, "expected \"CA '<name>'\" before 'Port N:'")
            _close_port(kind, ca, port)
            port = {"port": int(m.group(1))}
            continue
        # before the first CA: a preamble (prompt, banner) or the -l / -p formats; no ':': a trailing prompt
        if ca is not None and ":" in ln:
            _ibstat_field(ca, port, ln)
    _close_port(kind, ca, port)
    return cas


def _ibstat_full(kind: str, cas: list[dict], errors: list[str]) -> dict:
    """The record of CA blocks: "full" with their ports (each CA printed all it declares), "short" without."""
    for c in cas:
        if c["num_ports"] is not None:
            c["num_ports"] = int(c["num_ports"])
    has_ports = any(c["ports"] for c in cas)
    for c in cas if has_ports else ():
        if c["num_ports"] is not None and len(c["ports"]) < c["num_ports"]:
            raise ParseError(
                kind,
                f"truncated: CA '{c['name']}' declares {c['num_ports']} ports, "
                f"{len(c['ports'])} printed",
            )
    return {
        "format": "full" if has_ports else "short",
        "ok": not errors,
        "errors": errors,
        "cas": cas,
        "ca_names": [c["name"] for c in cas],
        "port_guids": [p["port_guid"] for c in cas for p in c["ports"] if p["port_guid"]],
    }


@register("ibstat", "ibstat: CAs and ports (state, physical state, rate, LIDs, GUIDs, link layer)")
def parse_ibstat(text: str) -> dict:
    kind = "ibstat"
    lines = [ln.strip() for ln in text_lines(kind, text, "ibstat output (\"CA 'mlx5_0'\" blocks)")]
    errors = [ln for ln in lines if _IBSTAT_ERR_RE.match(ln)]
    body = [ln for ln in lines if ln and not _IBSTAT_ERR_RE.match(ln)]
    cas = _ibstat_blocks(kind, body)
    if cas:
        return _ibstat_full(kind, cas, errors)
    if body and all(_GUID_RE.match(ln) for ln in body):
        return {"format": "port_guids", "ok": not errors, "errors": errors, "cas": [], "ca_names": [],
                "port_guids": body}
    if body and all(_NAME_RE.match(ln) and re.search(r"\d", ln) for ln in body):
        return {"format": "ca_names", "ok": not errors, "errors": errors, "cas": [], "ca_names": body,
                "port_guids": []}
    if errors and not body:
        return {"format": "full", "ok": False, "errors": errors, "cas": [], "ca_names": [], "port_guids": []}
    raise ParseError(kind, "expected \"CA '<name>'\" blocks, a CA name list (-l) or a port GUID list (-p)")


# --------------------------------------------------------------------------- ibstatus

_IBSTATUS_HDR_RE = re.compile(r"^Infiniband device '([^']+)' port (\d+) status:\s*$")


def _ibstatus_field(cur: dict, key: str, value: str) -> None:
    if key == "default gid":
        cur["default_gid"] = None if value == "unknown" else value
    elif key in ("base lid", "sm lid"):
        cur[key.replace(" ", "_")] = to_int(value)
    elif key == "state":
        cur["state"], cur["state_code"] = parse_coded_state(value)
    elif key == "phys state":
        cur["phys_state"], cur["phys_state_code"] = parse_coded_state(value)
    elif key == "rate":
        cur["rate_gbit_per_s"], cur["rate_label"] = parse_rate(value)
    elif key == "link_layer":
        cur["link_layer"] = value


@register("ibstatus", "ibstatus: per device/port state, phys state, rate, link layer")
def parse_ibstatus(text: str) -> dict:
    kind = "ibstatus"
    ports: list[dict] = []
    cur: dict | None = None
    for raw in text_lines(kind, text, "\"Infiniband device '<dev>' port N status:\" blocks"):
        ln = raw.strip()
        m = _IBSTATUS_HDR_RE.match(ln)
        if m:
            cur = {"device": m.group(1), "port": int(m.group(2))}
            ports.append(cur)
        elif cur is not None and ":" in ln:
            _ibstatus_field(cur, *(p.strip() for p in ln.split(":", 1)))
    if not ports:
        raise ParseError(kind, "expected \"Infiniband device '<dev>' port N status:\" header")
    for p in ports:
        if "state" not in p or "phys_state" not in p:
            raise ParseError(kind, f"truncated: device {p['device']} port {p['port']} lacks state/phys state")
        for key in ("default_gid", "base_lid", "sm_lid", "rate_gbit_per_s", "rate_label", "link_layer",
                    "state_code", "phys_state_code"):
            p.setdefault(key, None)
    return {"ports": ports}


# --------------------------------------------------------------------------- ibv_devinfo

_DEV_INT_KEYS = {"phys_port_cnt"}
_PORT_KEYS_INT = {"sm_lid", "port_lid", "port_lmc"}
_SPEED_RE = re.compile(r"^([\d.]+)\s*Gbps")


def _devinfo_port_field(port: dict, key: str, value: str) -> None:
    if key == "state":
        port["state"], port["state_code"] = parse_coded_state(value)
    elif key in ("max_mtu", "active_mtu"):
        port[key] = int(value.split()[0])
    elif key in _PORT_KEYS_INT:
        port[key] = to_int(value)
    elif key == "link_layer":
        port["link_layer"] = value
    elif key == "active_width":
        port["active_width"] = parse_coded_state(value)[0]
    elif key == "active_speed":
        speed = parse_coded_state(value)[0]
        port["active_speed"] = speed
        sm = _SPEED_RE.match(speed)
        port["active_speed_gbit_per_s"] = num(sm.group(1)) if sm else None
    elif key == "phys_state":
        port["phys_state"] = parse_coded_state(value)[0]


def _devinfo_blocks(stripped: list[str]) -> list[dict]:
    """The 'hca_id:' blocks as read: the device's own keys verbatim, its 'port:' blocks parsed."""
    devices: list[dict] = []
    dev: dict | None = None
    port: dict | None = None
    for ln in stripped:
        if ln.startswith("hca_id:"):
            dev = {"hca_id": ln.split(":", 1)[1].strip(), "verbose": False, "ports": []}
            devices.append(dev)
            port = None
            continue
        m = re.match(r"^port:\s*(\d+)$", ln)
        if dev is not None and m:
            port = {"port": int(m.group(1))}
            dev["ports"].append(port)
            continue
        if dev is None or ":" not in ln:
            continue
        key, value = (p.strip() for p in ln.split(":", 1))
        if port is not None:
            _devinfo_port_field(port, key, value)
            continue
        if key in ("max_mr_size", "max_qp", "device_cap_flags"):
            dev["verbose"] = True
        dev.setdefault(key, value)
    return devices


def _devinfo_record(kind: str, d: dict) -> dict:
    rec = {
        "hca_id": d["hca_id"],
        "transport": d.get("transport"),
        "fw_ver": d.get("fw_ver"),
        "node_guid": d.get("node_guid"),
        "sys_image_guid": d.get("sys_image_guid"),
        "vendor_id": d.get("vendor_id"),
        "vendor_part_id": d.get("vendor_part_id"),
        "hw_ver": d.get("hw_ver"),
        "board_id": d.get("board_id"),
        "phys_port_cnt": int_or_none(d.get("phys_port_cnt")),
        "verbose": d["verbose"],
        "ports": [],
    }
    if rec["fw_ver"] is None or not d["ports"]:
        raise ParseError(kind, f"truncated: hca_id {d['hca_id']} has no fw_ver or no 'port:' block")
    for p in d["ports"]:
        if "state" not in p:
            raise ParseError(kind, f"truncated: {d['hca_id']} port {p['port']} has no state")
        for key in ("state_code", "max_mtu", "active_mtu", "sm_lid", "port_lid", "port_lmc", "link_layer",
                    "active_width", "active_speed", "active_speed_gbit_per_s", "phys_state"):
            p.setdefault(key, None)
        rec["ports"].append(p)
    return rec


@register("ibv-devinfo", "ibv_devinfo [-v]: HCAs (fw, GUIDs, board id) and ports (state, MTU, link layer)")
def parse_ibv_devinfo(text: str) -> dict:
    kind = "ibv-devinfo"
    lines = text_lines(kind, text, "ibv_devinfo output ('hca_id:' blocks)")
    stripped = [ln.strip() for ln in lines if ln.strip()]
    if any(ln.startswith("No IB devices found") for ln in stripped) and not any(
        ln.startswith("hca_id:") for ln in stripped
    ):
        return {"ok": False, "error": "No IB devices found", "devices": []}
    devices = _devinfo_blocks(stripped)
    if not devices:
        raise ParseError(kind, "expected 'hca_id:' line")
    return {"ok": True, "error": None, "devices": [_devinfo_record(kind, d) for d in devices]}


# --------------------------------------------------------------------------- ibdev2netdev

_I2N_RE = re.compile(
    r"(?P<hca>[A-Za-z][\w.-]*)\s+(?:\([^)]*\)\s+.*?)?port\s+(?P<port>\d+)(?:\s+\(\s*(?P<pstate>[A-Z_]+)\s*\))?\s+<?==>\s+(?P<netdev>\S+)\s+\((?P<state>[A-Za-z]+)\)"
)


@register("ibdev2netdev", "ibdev2netdev: HCA port -> netdev mapping and link state (Up/Down)")
def parse_ibdev2netdev(text: str) -> dict:
    kind = "ibdev2netdev"
    mappings = []
    for ln in text_lines(kind, text, "'<hca> port N ==> <netdev> (Up|Down)' lines"):
        m = _I2N_RE.search(ln)
        if not m:
            continue
        mappings.append(
            {
                "hca": m.group("hca"),
                "port": int(m.group("port")),
                "netdev": m.group("netdev"),
                "state": m.group("state"),
                "port_state": m.group("pstate"),
            }
        )
    if not mappings:
        raise ParseError(kind, "expected '<hca> port N ==> <netdev> (Up|Down)' lines")
    return {"mappings": mappings}


# --------------------------------------------------------------------------- perfquery

ERROR_COUNTERS = (
    "SymbolErrorCounter",
    "LinkErrorRecoveryCounter",
    "LinkDownedCounter",
    "PortRcvErrors",
    "PortRcvRemotePhysicalErrors",
    "PortRcvSwitchRelayErrors",
    "PortXmitDiscards",
    "PortXmitConstraintErrors",
    "PortRcvConstraintErrors",
    "LocalLinkIntegrityErrors",
    "ExcessiveBufferOverrunErrors",
    "VL15Dropped",
)

_PQ_HDR_RE = re.compile(
    r"^#\s*(?P<set>[^:]*?counters[^:]*?):\s*Lid\s+(?P<lid>\d+)\s+port\s+(?P<port>\d+|all|255)"
    r"(?:\s*\(CapMask:\s*(?P<cap>0x[0-9A-Fa-f]+)[^)]*\))?",
    re.I,
)
_PQ_LINE_RE = re.compile(r"^(\w+):\.*\s*(\S+)\s*$")


def _pq_port(m: re.Match) -> dict:
    port = m.group("port")
    return {
        "lid": int(m.group("lid")),
        "port": 255 if port in ("all", "255") else int(port),
        "counter_set": m.group("set").strip(),
        "extended": "extended" in m.group("set").lower(),
        "cap_mask": m.group("cap"),
        "counters": {},
    }


def _pq_counter(kind: str, cur: dict, m: re.Match) -> None:
    try:
        cur["counters"][m.group(1)] = to_int(m.group(2))
    except ValueError as exc:
        raise ParseError(kind, f"counter {m.group(1)} is not an integer: {m.group(2)!r}") from exc


def _error_totals(ports: list[dict]) -> dict[str, int]:
    """Each error counter summed over the ports (those at zero left out)."""
    totals: dict[str, int] = {}
    for p in ports:
        for name in ERROR_COUNTERS:
            v = p["counters"].get(name)
            if v:
                totals[name] = totals.get(name, 0) + v
    return totals


@register("perfquery", "perfquery [-x] [-E]: IB port counters (errors and data) per LID/port")
def parse_perfquery(text: str) -> dict:
    kind = "perfquery"
    ports: list[dict] = []
    errors: list[str] = []
    cur: dict | None = None
    for raw in text_lines(kind, text, "'# Port counters: Lid L port P' blocks"):
        ln = raw.strip()
        m = _PQ_HDR_RE.match(ln)
        if m:
            cur = _pq_port(m)
            ports.append(cur)
        elif re.match(r"^(ibwarn|ibpanic|iberror|perfquery):", ln) or "failed" in ln.lower():
            errors.append(ln)
        elif cur is not None and (m := _PQ_LINE_RE.match(ln)):
            _pq_counter(kind, cur, m)
    if not ports:
        if errors:
            return {"ok": False, "errors": errors, "ports": [], "error_counters": {}}
        raise ParseError(kind, "expected '# Port counters: Lid L port P' header")
    for p in ports:
        if not p["counters"]:
            raise ParseError(kind, f"truncated: no counters after header for Lid {p['lid']} port {p['port']}")
    return {"ok": not errors, "errors": errors, "ports": ports, "error_counters": _error_totals(ports)}


# --------------------------------------------------------------------------- sysfs-infiniband

_SYSFS_PORT_RE = re.compile(r"(?:^|/)(?P<hca>[^/]+)/ports/(?P<port>\d+)/(?P<rest>.+)$")
_SYSFS_DEV_RE = re.compile(
    r"(?:^|/)(?P<hca>[^/]+)/(?P<attr>fw_ver|hca_type|board_id|node_guid|sys_image_guid)$"
)


def _counter_value(value: str) -> int | None:
    try:
        return to_int(value)
    except ValueError:
        return None  # "N/A (no PMA)"


def _new_sysfs_port() -> dict:
    return {"state": None, "state_code": None, "phys_state": None, "phys_state_code": None,
            "rate_gbit_per_s": None, "rate_label": None, "link_layer": None,
            "lid": None, "sm_lid": None,
            "counters": {}, "counters_ext": {}, "hw_counters": {}}


def _sysfs_port_attr(kind: str, path: str, port: dict, rest: str, value: str) -> None:
    """One file under ports/<n>/: state, phys_state, rate, link_layer, a LID, or a counter."""
    if rest == "state":
        port["state"], port["state_code"] = parse_coded_state(value)
    elif rest == "phys_state":
        port["phys_state"], port["phys_state_code"] = parse_coded_state(value)
    elif rest == "rate":
        try:
            port["rate_gbit_per_s"], port["rate_label"] = parse_rate(value)
        except ValueError as exc:
            raise ParseError(kind, f"{path}: unrecognised rate {value!r}") from exc
    elif rest == "link_layer":
        port["link_layer"] = value
    elif rest in ("lid", "sm_lid"):
        port[rest] = _counter_value(value)  # sysfs prints LIDs in hex, e.g. 0x1
    elif "/" in rest:
        group, name = rest.split("/", 1)
        if group in ("counters", "counters_ext", "hw_counters") and "/" not in name:
            port[group][name] = _counter_value(value)


@register("sysfs-infiniband", "grep -r . /sys/class/infiniband/... dump: per HCA/port state, rate, counters")
def parse_sysfs_infiniband(text: str) -> dict:
    kind = "sysfs-infiniband"
    hcas: dict[str, dict] = {}

    def hca_rec(name: str) -> dict:
        return hcas.setdefault(
            name, {"fw_ver": None, "hca_type": None, "board_id": None, "node_guid": None, "ports": {}}
        )

    for path, value in grep_dump_entries(
        kind, text, "'/sys/class/infiniband/<hca>/ports/<n>/<attr>:<value>' lines"
    ):
        m = _SYSFS_PORT_RE.search(path)
        if m:
            port = hca_rec(m.group("hca"))["ports"].setdefault(m.group("port"), _new_sysfs_port())
            _sysfs_port_attr(kind, path, port, m.group("rest"), value)
            continue
        m = _SYSFS_DEV_RE.search(path)
        if m:
            hca_rec(m.group("hca"))[m.group("attr")] = value
    if not hcas:
        raise ParseError(kind, "no /sys/class/infiniband/<hca>/... paths found")
    return {"hcas": hcas}


# --------------------------------------------------------------------------- rdma link

# Current iproute2: ``link mlx5_0/1 state ACTIVE physical_state LINK_UP netdev ib0``, optionally with
# ``subnet_prefix ... lid ... sm_lid ... lmc ...`` between the port and ``state`` (IB ports).
# Old iproute2 (4.x): ``0/1: i40iw0/1: state ACTIVE physical_state LINK_UP`` (no ``link`` word, an
# index prefix, a colon after the port), where ``physical_state`` may read ``NOP``.
_RDMA_HEAD_RE = re.compile(r"^(?:\d+/\d+:\s*)?(?:link\s+)?(?P<hca>[^/\s:]+)/(?P<port>\d+):?\s+(?P<rest>.*)$")


def _rdma_fields(rest: str) -> dict:
    """``key value`` of one ``rdma link`` line, in any order: each word followed by the next one (a
    valueless flag among them does not shift the pairs after it)."""
    tokens = rest.split()
    fields: dict[str, str] = {}
    for key, value in zip(tokens, tokens[1:], strict=False):
        fields.setdefault(key, value)
    return fields


@register("rdma-link", "rdma link [show]: per HCA port state, physical state and netdev")
def parse_rdma_link(text: str) -> dict:
    kind = "rdma-link"
    links = []
    for ln in text_lines(kind, text, "'link <hca>/<port> state ... physical_state ...' lines"):
        m = _RDMA_HEAD_RE.match(ln.strip())
        if not m:
            continue
        fields = _rdma_fields(m.group("rest"))
        if "state" in fields and "physical_state" in fields:
            links.append(
                {"hca": m.group("hca"), "port": int(m.group("port")), "state": fields["state"],
                 "physical_state": fields["physical_state"], "netdev": fields.get("netdev")}
            )
    if not links:
        raise ParseError(kind, "expected 'link <hca>/<port> state <S> physical_state <P>' lines")
    return {"links": links}
