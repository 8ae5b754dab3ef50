"""Drift: what changed since the baseline run — configuration, state and performance — as items.

1. configuration: the bootstrap playbook's run in --check --diff; every task that would change is an item.
2. state: the validators' findings against the baseline's; new failures, and changed versions.
3. performance: the pair probes judged against the baseline's values; a drop beyond the profile's tolerance.
4. hardware: the node's parts against the baseline certificate's (GPU serial/UUID per slot, HCA GUID, board
   and chassis serials, the NVSwitch count); a swapped, missing or new part is an item naming it.
A state failure that configuration drift explains (the bootstrap would put it back) is reported
once, as the configuration item that causes it. Pure: results in, items out (`clustercert drift`,
clustercert.commands.drift, runs the playbook, the validators and the probes).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from clustercert.checks.hardware import identity_changes

# checks whose state is put back by the bootstrap playbook: a failure here with configuration drift on
# the same node is that drift's symptom, not a separate item
CONFIG_MANAGED = {
    "packages.pinned",
    "nccl.config",
    "nccl.version",
    "driver.version",
    "ofed.version",
    "cuda.version",
    "container.runtime",
    "container.cdi",
    "tuning.memlock",
    "tuning.sysctl",
    "tuning.hugepages",
    "tuning.governor",
    "ib.bond",
    "rdma.peermem",
    "gpu.persistence",
    "gpu.fabricmanager",
    "driver.module_loaded",
}
VERSION_CHECKS = {"driver.version", "nccl.version", "ofed.version", "cuda.version", "ib.firmware"}


@dataclass
class Item:
    node: str
    kind: str  # configuration | state | performance | hardware
    check: str | None = None
    task: str | None = None
    before: str = ""
    after: str = ""
    detail: str = ""
    role: str = ""
    explains: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        d = {
            k: v
            for k, v in asdict(self).items()
            if v not in (None, [], "") or k in ("before", "after", "detail")
        }
        d.pop("role", None)
        return d


def _diff_text(diff) -> tuple[str, str, str]:
    """(before, after, unified-ish detail) from an Ansible diff."""
    parts = diff if isinstance(diff, list) else [diff] if diff else []
    before, after, detail = [], [], []
    for d in parts:
        if not isinstance(d, dict):
            continue
        if "prepared" in d:
            detail.append(str(d["prepared"]))
        b, a = d.get("before"), d.get("after")
        if b is not None or a is not None:
            before.append(str(b if b is not None else ""))
            after.append(str(a if a is not None else ""))
            hdr = d.get("after_header") or d.get("before_header") or ""
            if hdr:
                detail.append(f"--- {hdr}")
    return "\n".join(before)[:2000], "\n".join(after)[:2000], "\n".join(detail)[:2000]


def configuration_items(result) -> list[Item]:
    """``result``: the playbook's check-mode run (clustercert.collect.engine.RunResult): a task that would
    change something, or that failed, is an item."""
    items = []
    for c in result.changes:
        before, after, detail = _diff_text(c.get("diff"))
        items.append(
            Item(
                c["host"],
                "configuration",
                task=c["task"],
                before=before,
                after=after,
                detail=detail or f"{c.get('role') or 'play'}: would change",
                role=c.get("role") or "",
            )
        )
    for f in result.failures:
        items.append(
            Item(f["host"], "configuration", task=f["task"], detail=f"check mode {f['status']}: {f['msg']}")
        )
    return items


def state_items(current: dict, baseline_findings: list[dict]) -> list[Item]:
    base: dict[tuple[str, str], list[dict]] = {}
    for f in baseline_findings:
        base.setdefault((f["node"], f["check_id"]), []).append(f)
    items = []
    for node, r in sorted(current.items()):
        if r.verdict == "unreachable":
            items.append(
                Item(
                    node,
                    "state",
                    check="node.reachable",
                    before="reachable",
                    after="unreachable",
                    detail=r.detail,
                )
            )
            continue
        by_check: dict[str, list] = {}
        for f in r.findings:
            by_check.setdefault(f.check, []).append(f)
        for check, fs in sorted(by_check.items()):
            bad = [f for f in fs if f.status in ("fail", "error")]
            before = base.get((node, check), [])
            was_bad = any(b["status"] in ("fail", "error") for b in before)
            if bad and not was_bad:
                f = bad[0]
                items.append(
                    Item(
                        node,
                        "state",
                        check=check,
                        before=(before[0]["observed"] if before else "not checked"),
                        after=f"{f.status}: {f.observed}",
                        detail="; ".join(
                            f"{x.subject}: expected {x.expected}, observed {x.observed}" for x in bad
                        )[:1000],
                    )
                )
            elif check in VERSION_CHECKS and not bad and before:
                old = {b["subject"]: b["observed"] for b in before}
                for f in fs:
                    if f.subject in old and old[f.subject] != f.observed:
                        items.append(Item(node, "state", check=check, before=old[f.subject], after=f.observed,
                                          detail=f"{f.subject}: version changed"))
    return items


def fold_symptoms(items: list[Item]) -> list[Item]:
    """``items`` less the state failures that a configuration item on the same node explains (each is
    named in the first such item's ``explains``). One pass and a dict: linear in the items."""
    first_config: dict[str, Item] = {}
    for i in items:
        if i.kind == "configuration":
            first_config.setdefault(i.node, i)
    out = []
    for i in items:
        cfg = first_config.get(i.node) if i.kind == "state" and i.check in CONFIG_MANAGED else None
        if cfg is not None:
            cfg.explains.append(i.check)
            continue
        out.append(i)
    return out


def performance_items(outcome, judge) -> list[Item]:
    """The pair probes' outcome (clustercert.probes.run with the baseline judge) as drift items: a value that
    fell more than the profile's tolerance below the baseline median of the same probe and fabric (a
    latency: rose more than it) failed its channel, and localisation told the node (on which fabric)
    from the link."""
    notes: dict[frozenset, list[str]] = {}
    # node -> its pairs with notes, in order: a lookup, not a scan
    pairs_of: dict[str, dict[frozenset, None]] = {}
    for m in outcome.pairs:
        note = judge.note(m)
        if note:
            key = frozenset((m.a, m.b))
            notes.setdefault(key, []).append(note)
            for end in key:
                pairs_of.setdefault(end, {})[key] = None
    items = []
    for loc in outcome.localisation:
        if "<->" in loc.subject:
            a, b = loc.subject.split("<->")
            ns = notes.get(frozenset((a, b)), [])
            items.append(
                Item(
                    loc.subject,
                    "performance",
                    check="probe.link",
                    before="baseline",
                    after="; ".join(ns[:3]),
                    detail=f"{loc.kind}: {loc.reason}",
                )
            )
        else:
            mine = [n for key in pairs_of.get(loc.subject, {}) for n in notes[key]
                    if loc.fabric is None or f"fabric {loc.fabric}" in n]
            items.append(Item(loc.subject, "performance", check="probe.pairs", before="baseline",
                              after="; ".join(mine[:3]), detail=f"{loc.kind}: {loc.reason}"))
    return items


def fix_scope(items: list[Item]) -> tuple[list[str], list[str]]:
    """What ``drift --fix`` bootstraps: (the nodes with configuration drift, the roles that drifted as tags;
    no tags, i.e. everything, where a change lies outside any role)."""
    cfg = [i for i in items if i.kind == "configuration"]
    nodes = sorted({i.node for i in cfg})
    roles = {i.role for i in cfg}
    return nodes, sorted(roles) if "" not in roles else []


def hardware_items(current: dict[str, dict | None], baseline: dict[str, dict]) -> list[Item]:
    """The nodes' hardware now (``current``: node -> clustercert.checks.hardware.identity of this run, None
    where unknown) against the baseline run's (``baseline``: node -> its recorded identity): one ``hardware``
    item per part swapped, gone or new, named (``check``: hardware.gpu, hardware.hca, hardware.board,
    hardware.nvswitch). A node with no identity on either side is not compared (an unreachable node is
    node.reachable's item)."""
    items = []
    for node in sorted(current):
        now, then = current[node], baseline.get(node)
        if now is None or then is None:
            continue
        for c in identity_changes(then, now):
            items.append(
                Item(
                    node,
                    "hardware",
                    check=f"hardware.{c['part']}",
                    before=c["before"],
                    after=c["after"],
                    detail=f"{c['name']}: {c['change']}",
                )
            )
    return items
