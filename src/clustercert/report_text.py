"""Terminal rendering (tables) for the CLI. Pure presentation: data in, text out."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def _console() -> Console:
    return Console(highlight=False, soft_wrap=True)


def print_inventory(view: dict) -> None:
    con = _console()
    con.print(f"inventory: {view['inventory']}")
    t = Table(title="hosts", title_justify="left")
    for col in ("host", "address", "profile", "groups", "overrides"):
        t.add_column(col)
    for name, h in sorted(view["hosts"].items()):
        t.add_row(name, str(h["address"]), h["profile"], ",".join(h["groups"]), "yes" if h["overrides"] else "")
    con.print(t)
    for label, p in view["profiles"].items():
        t = Table(title=f"profile {label}: effective thresholds", title_justify="left")
        for col in ("threshold", "floor", "ceiling", "unit", "source"):
            t.add_column(col, overflow="fold")
        for name, th in sorted(p["thresholds"].items()):
            t.add_row(name, _num(th["floor"]), _num(th["ceiling"]), th["unit"], th["source"])
        con.print(t)


def _num(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return f"{v:g}" if isinstance(v, float) else str(v)


def print_lab_status(status: dict) -> None:
    con = _console()
    running = status.get("running")
    con.print(f"lab: {'running' if running else 'not running'}"
              + (f" — inventory {status.get('inventory')}" if status.get("inventory") else ""))
    nodes = status.get("nodes") or {}
    if not nodes:
        return
    t = Table(title_justify="left")
    for col in ("node", "state", "mgmt ip", "faults"):
        t.add_column(col)
    for name, n in sorted(nodes.items()):
        faults = ", ".join(f.get("kind", str(f)) if isinstance(f, dict) else str(f) for f in n.get("faults") or [])
        t.add_row(name, str(n.get("state", "")), str(n.get("mgmt_ip", "")), faults)
    con.print(t)
    con.print("hardware in the lab is simulated (GPUs, HCAs, perftest/NCCL output); network, systemd, sshd and apt are real")
