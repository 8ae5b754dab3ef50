"""NCCL's ``NCCL_DEBUG=INFO`` lines: the transport each connection uses, per host (``nccl-info-transport``).

NCCL prints one line per connection of each channel, from the process that owns its end::

    host:pid:tid [dev] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA
    host:pid:tid [dev] NCCL INFO Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA   (older)
    host:pid:tid [dev] NCCL INFO Channel 03/0 : 15[7] -> 6[6] [send] via NET/Socket/3
    host:pid:tid [dev] NCCL INFO Channel 00/0 : 8[0] -> 15[7] via P2P/IPC/read      (within a node)

``NET/<name>/<dev>`` is the network transport: ``IB`` (NCCL's own verbs transport), ``IBext*`` (the
RDMA/SHARP plugin), ``Socket`` (TCP); a ``/GDRDMA`` flag says that NIC moves GPU memory directly
(GPUDirect RDMA); without it NCCL stages through host memory. The flag is decided by the line's own
host (its GPU, its NIC, its peer-memory module), so each host's lines speak for that host. ``<dev>`` is
an index into the NICs the host's ``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ...`` line lists.

Accepted around the lines: launcher prefixes (``[1,0]<stdout>:``, ``[0] ``, ``0: ``), nccl-tests tables and
anything else (ignored). Record::

    {"hosts": {host: {"net_devices": {"0": "mlx5_0", ...},      # from its NET/IB : Using line
                      "networks": ["IB", "Socket"],             # NET/<name> : Using / Using network <name>,
                                                                # less those whose plugin failed to initialise
                      "net_plugin": "Socket"|None,              # "Assigned NET plugin <name> to comm"
                      "failed_net_plugins": ["IB"],             # "Failed to initialize NET plugin <name>"
                      "gdr_disabled": ["mlx5_5"],               # "GPU Direct RDMA Disabled for HCA N 'x'"
                      "connections": [{"channel": "00/0", "src": 0, "dst": 8, "direction":
                      "send"|"receive"|None,
                                       "transport": "NET"|"P2P"|"SHM"|..., "net":
                                       "IB"|"Socket"|"IBext_v8"|None, "device": 0|None, "hca": "mlx5_0"|None,
                                       "gdr": bool, "line": str}]}},
     "info_lines": int}         # NCCL INFO lines seen

NCCL 2.2x prints ``NET/IB : Using [RO]; OOB eth0:...`` on a host without an InfiniBand device, then
``Failed to initialize NET plugin IB`` and falls back (``Assigned NET plugin Socket to comm``): a network is
in ``networks`` only when some process of the host named it and did not then fail to initialise its plugin.
``net_plugin`` is the plugin NCCL assigned to the host's communicators (the first such line; None when the log
has none, as before NCCL 2.2x).

A connection line without a host prefix (quoted on its own) is filed under host ``"?"``. Text without any
NCCL INFO line or connection line raises ParseError.
"""

from __future__ import annotations

import re

from clustercert.parsers._text import text_lines
from clustercert.parsers.base import ParseError, register

_PREFIX_RE = re.compile(r"^(?:\[\d+,\d+\]<(?:stdout|stderr)>:\s?|\[\d+\]\s+|\d+:\s)")
_INFO_RE = re.compile(r"^(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL INFO (?P<msg>.*)$")
_CONN_RE = re.compile(
    r"(?:(?:Channel|Ring) (?P<channel>\d+(?:/\d+)?) ?: )?(?P<src>\d+)(?:\[[0-9a-fA-F]+\])? -> "
    r"(?P<dst>\d+)(?:\[[0-9a-fA-F]+\])?(?: \[(?P<dir>send|receive)\])? via (?P<via>\S+)")
_USING_RE = re.compile(r"^NET/(?P<net>[A-Za-z0-9_]+) : Using (?P<list>.*)$")
_NIC_RE = re.compile(r"\[(\d+)\]([A-Za-z0-9_]+):\d+/(?:IB|RoCE)")
_NETWORK_RE = re.compile(r"^Using network (?P<net>\S+(?: \S+)?)")
_GDR_OFF_RE = re.compile(r"GPU Direct RDMA Disabled for HCA \d+ '([^']+)'")
_PLUGIN_FAILED_RE = re.compile(r"^Failed to initiali[sz]e NET plugin (?P<net>\S+)")
_PLUGIN_ASSIGNED_RE = re.compile(r"^Assigned NET plugin (?P<net>\S+) to comm")


def _host(rec: dict, name: str) -> dict:
    return rec["hosts"].setdefault(name, {"net_devices": {}, "networks": [], "net_plugin": None,
                                          "failed_net_plugins": [], "gdr_disabled": [], "connections": []})


def _connection(m: re.Match, line: str) -> dict:
    parts = m.group("via").split("/")
    transport = parts[0]
    net, device, flags = None, None, parts[1:]
    if transport == "NET" and len(parts) >= 2:
        net = parts[1]
        flags = parts[2:]
        if flags and flags[0].isdigit():
            device, flags = int(flags[0]), flags[1:]
    return {"channel": m.group("channel"), "src": int(m.group("src")), "dst": int(m.group("dst")),
            "direction": m.group("dir"), "transport": transport, "net": net, "device": device, "hca": None,
            "gdr": "GDRDMA" in flags, "line": line}


def _append_new(items: list, value) -> None:
    if value not in items:
        items.append(value)


def _info_message(host: dict, msg: str, line: str, named: list[str], failed: set[str]) -> None:
    """One NCCL INFO message of a process of ``host``: a connection, the network it uses (and its NICs),
    a network plugin that failed or was assigned, or GPU Direct RDMA disabled. ``named`` and ``failed``:
    that process's networks named and those whose plugin it failed to initialise."""
    c = _CONN_RE.match(msg)
    if c is not None and msg.startswith(("Channel", "Ring")):
        host["connections"].append(_connection(c, line))
        return
    u = _USING_RE.match(msg) or _NETWORK_RE.match(msg)
    if u is not None:
        _append_new(host["networks"], u.group("net"))
        named.append(u.group("net"))
        for idx, nic in _NIC_RE.findall(u.groupdict().get("list") or ""):
            host["net_devices"][idx] = nic
        return
    f = _PLUGIN_FAILED_RE.match(msg)
    if f is not None:
        failed.add(f.group("net"))
        _append_new(host["failed_net_plugins"], f.group("net"))
        return
    a = _PLUGIN_ASSIGNED_RE.match(msg)
    if a is not None:
        host["net_plugin"] = host["net_plugin"] or a.group("net")
        return
    g = _GDR_OFF_RE.search(msg)
    if g is not None:
        _append_new(host["gdr_disabled"], g.group(1))


def _settle_hosts(rec: dict, named: dict[tuple[str, str], list[str]],
                  failed: dict[tuple[str, str], set[str]]) -> None:
    for name, h in rec["hosts"].items():
        # a network stays when a process of the host named it and did not fail to initialise its plugin
        h["networks"] = [net for net in h["networks"]
                         if any(p[0] == name and net in nets and net not in failed.get(p, set())
                                for p, nets in named.items())]
        for c in h["connections"]:
            if c["device"] is not None:
                c["hca"] = h["net_devices"].get(str(c["device"]))


@register("nccl-info-transport", "NCCL_DEBUG=INFO lines: per host the transport of each connection (NET/IB, "
                                 "GDRDMA, NET/Socket, P2P, SHM) and the NICs NET/IB uses")
def parse_transport(text: str) -> dict:
    kind = "nccl-info-transport"
    rec: dict = {"hosts": {}, "info_lines": 0}
    # per (host, pid): the networks the process named and those whose plugin it failed to initialise
    named: dict[tuple[str, str], list[str]] = {}
    failed: dict[tuple[str, str], set[str]] = {}
    for raw in text_lines(kind, text, "NCCL_DEBUG=INFO output"):
        line = _PREFIX_RE.sub("", raw.strip(), count=1)
        m = _INFO_RE.match(line)
        if m is None:
            c = _CONN_RE.search(line)
            if c is not None and c.start() == 0:
                _host(rec, "?")["connections"].append(_connection(c, line))
            continue
        rec["info_lines"] += 1
        proc = (m.group("host"), m.group("pid"))
        _info_message(_host(rec, m.group("host")), m.group("msg"), line,
                      named.setdefault(proc, []), failed.setdefault(proc, set()))
    if not rec["info_lines"] and not any(h["connections"] for h in rec["hosts"].values()):
        raise ParseError(kind, "no NCCL INFO line and no connection line (was NCCL_DEBUG=INFO set?)")
    _settle_hosts(rec, named, failed)
    return rec
