"""GPU-NIC rails: which HCA is each GPU's compute rail, on this node.

A profile states what its compute rails are -- how many (``hardware.rails.count``), at what rate and link
layer, how near their GPU they sit (``affinity``: PIX, or PIX or PXB in ``nvidia-smi topo -m``) -- not what
the kernel named them: the same board names them mlx5_0..7 on one build and mlx5_0,3,4,5,6,9,10,11 on another
(a dual-port storage HCA and a frontend NIC take names between them). Names are found per node from the
node's ``nvidia-smi topo -m`` and its ``/sys/class/infiniband/*/ports/N/{rate,link_layer}`` by ``select``, the
one rule every consumer applies: the validators (gpu.nic_affinity, the port and nccl.conf checks), the probes
(loopbacks, GPUDirect pairs, ib_write_bw per rail), the certificate (each node's ``rails``) and the
ib_redundancy role's nccl.conf (its filter plugin calls ``select_text``). A site that wants fixed names sets
``hardware.nic_gpu`` ({hca: gpu}); its rails are then those, each held to topo -m by gpu.nic_affinity.

Pure and stdlib-only (node-check's zipapp carries it): parsed evidence in, rails out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from clustercert.checks import parsed
from clustercert.model import names
from clustercert.parsers import parse

# nvidia-smi topo -m link types, nearest first (NV# links GPUs only)
TOPO_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC")
# the profile's hardware.rails.affinity -> the topo -m cells a rail may have to its GPU
ALLOWED = {"PIX": ("PIX",), "PXB": ("PIX", "PXB")}


@dataclass(frozen=True)
class Rail:
    """A GPU and its compute rail: the HCA's port, its fabric, the GPU's NUMA node (None: topo -m did not show
    it) and their topo -m cell (None: not read)."""

    gpu: int
    hca: str
    numa: int | None
    link: str | None = None
    port: int = 1
    fabric: int = 0

    def to_json(self) -> dict:
        return {"gpu": self.gpu, "hca": self.hca, "numa": self.numa, "link": self.link}


@dataclass(frozen=True)
class NodeRails:
    """A node's rails: ``source`` discovered (topo -m + sysfs), profile (hardware.nic_gpu) or none (the
    profile has no compute rails); ``found``: the pairs, in GPU order; ``problems``: why they are not the
    node's rails (then ``rails`` is None: unknown, and every rail probe of the node is an error)."""

    source: str
    found: tuple[Rail, ...] = ()
    problems: tuple[str, ...] = ()
    expected: int = 0

    @property
    def rails(self) -> tuple[Rail, ...] | None:
        return None if self.problems else self.found

    @property
    def names(self) -> list[str] | None:
        return None if self.problems else [r.hca for r in self.found]

    def mapping(self) -> dict[int, str]:
        return {r.gpu: r.hca for r in self.found}

    def to_json(self) -> dict:
        """The certificate's ``nodes.<name>.rails``."""
        return {
            "source": self.source,
            "pairs": [r.to_json() for r in self.found],
            "problems": list(self.problems),
        }


NO_RAILS = NodeRails("none")


def ports_of(sysfs: dict | None, port: int = 1) -> dict[str, dict] | None:
    """A parsed ``sysfs-infiniband`` record as {hca: its port's record} (rate_gbit_per_s, link_layer, ...)."""
    if sysfs is None:
        return None
    return {
        name: ((h.get("ports") or {}).get(str(port)) or {}) for name, h in (sysfs.get("hcas") or {}).items()
    }


def _gpus(topo: dict) -> list[int]:
    return sorted(int(d["name"][3:]) for d in topo.get("devices", [])
                  if d.get("kind") == "gpu" and d["name"][3:].isdigit())


def _nics(topo: dict) -> list[tuple[str, str]]:
    """(topo -m label, HCA name) of every NIC, in the matrix's order."""
    return [
        (d["name"], d.get("nic_name") or d["name"]) for d in topo.get("devices", []) if d.get("kind") == "nic"
    ]


def cell(topo: dict, gpu: int, label: str) -> str | None:
    m = topo.get("matrix") or {}
    return (m.get(f"GPU{gpu}") or {}).get(label) or (m.get(label) or {}).get(f"GPU{gpu}")


def numa_of(topo: dict | None, gpu: int) -> int | None:
    v = ((topo or {}).get("affinity") or {}).get(f"GPU{gpu}", {}).get("numa_affinity")
    return int(v) if isinstance(v, str) and v.isdigit() else None


def select(topo: dict, ports: dict[str, dict], *, count: int, rate_gbit_per_s: int, affinity: str,
           link_layer: str) -> tuple[list[dict], list[str]]:
    """THE rule: the compute rails among a node's NICs, as ([{"gpu", "hca", "numa", "link"}] in GPU order,
    problems). A NIC is a compute rail when its port (``ports``: sysfs) has the profile's link layer and rate
    and it is ``affinity`` (PIX; or PIX or PXB) to a GPU;
    each rail goes to the nearest such GPU, the lowest index first, that has none yet. Problems: a NIC name
    that could not reach a command, a rail with no GPU left for it, and a count other than ``count`` (naming
    the GPUs without a rail)."""
    allowed = ALLOWED[affinity]
    gpus = _gpus(topo)
    pairs: list[dict] = []
    problems: list[str] = []
    taken: set[int] = set()
    stray: list[str] = []
    for label, hca in _nics(topo):
        port = ports.get(hca)
        if port is None:
            continue
        if port.get("link_layer") != link_layer or port.get("rate_gbit_per_s") != rate_gbit_per_s:
            continue
        if (why := names.check_hca(hca)) is not None:
            problems.append(f"NIC {label}: {why}")
            continue
        near = sorted((TOPO_ORDER.index(c), g) for g in gpus if (c := cell(topo, g, label)) in allowed)
        if not near:
            stray.append(hca)
            continue
        free = [g for _lvl, g in near if g not in taken]
        if not free:
            problems.append(f"{hca} is {'/'.join(allowed)} only to GPUs that have a rail already "
                            f"({', '.join(f'GPU{g}' for _lvl, g in near)})")
            continue
        g = free[0]
        taken.add(g)
        pairs.append({"gpu": g, "hca": hca, "numa": numa_of(topo, g), "link": cell(topo, g, label)})
    pairs.sort(key=lambda p: p["gpu"])
    if len(pairs) != count:
        what = f"{rate_gbit_per_s} Gb/s {link_layer} NICs {'/'.join(allowed)} to a GPU"
        found = ", ".join(f"GPU{p['gpu']} {p['hca']}" for p in pairs) or "none"
        lonely = [f"GPU{g}" for g in gpus if g not in taken]
        problems.append(
            f"found {len(pairs)} {what}, the profile has {count} rails (hardware.rails.count): {found}"
            + (f"; GPUs without one: {', '.join(lonely)}" if lonely and len(pairs) < count else "")
            + (f"; not near any GPU: {', '.join(stray)}" if stray else "")
        )
    return pairs, problems


def select_text(topo_text: str, sysfs_text: str, spec: dict) -> tuple[list[dict], list[str]]:
    """``select`` over the tools' text: ``nvidia-smi topo -m`` and a ``grep -r . /sys/class/infiniband/...``
    dump (what the ib_redundancy role reads on the node). ``spec``: hardware.rails as a dict, with the
    profile's ib.link_layer as ``link_layer``. ParseError when either text does not parse."""
    topo = parse("nvidia-smi-topo", topo_text)
    ports = ports_of(parse("sysfs-infiniband", sysfs_text), int(spec.get("port", 1))) or {}
    return select(topo, ports, count=int(spec["count"]), rate_gbit_per_s=int(spec["rate_gbit_per_s"]),
                  affinity=str(spec["affinity"]), link_layer=str(spec.get("link_layer", "InfiniBand")))


# ---- a node's rails under its profile ----------------------------------------------------------------------

def wanted(profile) -> bool:
    """Whether the profile has compute rails (fixed names or a rails spec)."""
    hw = profile.hardware
    return hw is not None and (bool(hw.nic_gpu) or hw.rails is not None)


def expected_count(profile) -> int:
    hw = profile.hardware
    if hw is None:
        return 0
    return len(hw.nic_gpu) if hw.nic_gpu else (hw.rails.count if hw.rails is not None else 0)


def node_rails(profile, topo: dict | None, sysfs: dict | None, why_not: str = "") -> NodeRails:
    """The node's rails under ``profile``, from its parsed topo -m and sysfs records (None: did not run or
    parse; ``why_not`` says why). Fixed names (hardware.nic_gpu) are the rails whatever the evidence; topo -m
    adds their GPUs' NUMA nodes."""
    if not wanted(profile):
        return NO_RAILS
    hw = profile.hardware
    named = {h.name: h for h in profile.ib.hcas}
    default_fabric = hw.rails.fabric if hw.rails is not None else 0
    default_port = hw.rails.port if hw.rails is not None else 1

    def rail(gpu: int, hca: str, numa, link) -> Rail:
        h = named.get(hca)
        return Rail(gpu, hca, numa, link, h.port if h else default_port, h.fabric if h else default_fabric)

    count = expected_count(profile)
    if hw.nic_gpu:
        labels = {hca: label for label, hca in _nics(topo)} if topo else {}
        found = [rail(g, hca, numa_of(topo, g), cell(topo, g, labels[hca]) if hca in labels else None)
                 for hca, g in sorted(hw.nic_gpu.items(), key=lambda kv: (kv[1], kv[0]))]
        return NodeRails("profile", tuple(found), (), count)
    if topo is None or sysfs is None:
        miss = " and ".join(w for w, v in (("nvidia-smi topo -m", topo), ("/sys/class/infiniband", sysfs))
                            if v is None)
        return NodeRails("discovered", (), (f"rails not discovered: {miss} not read" +
                                            (f" ({why_not})" if why_not else ""),), count)
    spec = hw.rails
    pairs, problems = select(topo, ports_of(sysfs, spec.port) or {}, count=spec.count,
                             rate_gbit_per_s=spec.rate_gbit_per_s, affinity=spec.affinity,
                             link_layer=profile.ib.link_layer)
    return NodeRails("discovered", tuple(rail(p["gpu"], p["hca"], p["numa"], p["link"]) for p in pairs),
                     tuple(problems), count)


# the evidence the rails are discovered from (the validators' collection pass: the hardware component's
# nvsmi_topo, the ib component's ib_sysfs; the probe verb alone collects these two)
TOPO_CMD = "nvidia-smi topo -m"


def of_evidence(profile, topo_res, sysfs_res, timeout: float | None = None) -> NodeRails:
    """``node_rails`` from the node's command results (``nvidia-smi topo -m``; the ib_sysfs dump)."""
    if not wanted(profile):
        return NO_RAILS
    topo, errs = parsed("nvidia-smi-topo", topo_res, ("rails",), timeout)
    sysfs, errs2 = parsed("sysfs-infiniband", sysfs_res, ("rails",), timeout)
    why = "; ".join(f.observed for f in errs + errs2)
    return node_rails(profile, topo, sysfs, why)


def peer_differences(per_node: dict[str, NodeRails], group_of: dict[str, str]) -> dict[str, str]:
    """Nodes whose GPU->NIC mapping differs from their peers' (the other nodes of the same profile,
    ``group_of``): {node: what differs}. The mapping most nodes of a group share is the reference; where no
    mapping has more nodes than every other, each node that differs from another is listed. Nodes whose rails
    are unknown and groups of one node are not compared."""
    out: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    for node, nr in per_node.items():
        if nr.source != "none" and nr.rails is not None:
            groups.setdefault(group_of.get(node, ""), []).append(node)
    for nodes in groups.values():
        if len(nodes) < 2:
            continue
        maps = {n: tuple(sorted(per_node[n].mapping().items())) for n in nodes}
        counts = Counter(maps.values()).most_common()
        if len(counts) == 1:
            continue
        ref, top = counts[0]
        unique_top = len(counts) == 1 or counts[1][1] < top
        for n in nodes:
            if unique_top and maps[n] == ref:
                continue
            other = ref if maps[n] != ref else counts[1][0]
            mine, theirs = dict(maps[n]), dict(other)
            diff = [f"GPU{g} {mine.get(g, 'none')} (peers: {theirs.get(g, 'none')})"
                    for g in sorted(set(mine) | set(theirs)) if mine.get(g) != theirs.get(g)]
            peers = sum(1 for m in maps.values() if m == other)
            out[n] = f"{'; '.join(diff)} -- {peers} of {len(nodes)} nodes have " + \
                ", ".join(f"GPU{g} {h}" for g, h in other)
    return out
