"""Cluster-wide checks: judged over every reachable node's evidence at once, after the per-node checks
(clustercert.checks.run calls ``cluster_findings``). Pure: evidence and contexts in, findings per node out.

* ``ib.firmware_uniform``: each HCA of the profile (by name) runs the same firmware (sysfs ``fw_ver``) on
  every node of the profile.
* ``gpu.vbios_uniform``: every GPU runs the same VBIOS (``nvidia-smi -q -x``) across the nodes of the profile.

The version most parts of the profile carry is the reference; a part on another version fails on its own node,
named (the HCA, or the GPU with its bus id). A tie for the most parts names no odd one out: those parts are an
error on their nodes ("no majority"). A profile with ``firmware_uniform: false`` is skipped, and so is a
profile with a single node in the run (nothing to compare it with). A node whose evidence did not run or
parse, or whose part reads N/A, is an error on that node; the others are compared without it.
"""

from __future__ import annotations

from collections import Counter

from clustercert.checks import Evidence, Finding, HostContext, error, parsed

CHECKS = ("ib.firmware_uniform", "gpu.vbios_uniform")


def _hca_parts(ev: Evidence, ctx: HostContext) -> tuple[dict[str, str | None] | None, Finding | None]:
    """(HCA name -> firmware, or why not) for the profile's HCAs the node has."""
    rec, errs = parsed("sysfs-infiniband", ev.get("hca_identity"), ("ib.firmware_uniform",), ctx.timeout_s)
    if rec is None:
        return None, errs[0]
    hcas = rec.get("hcas") or {}
    return {
        h.name: (hcas.get(h.name) or {}).get("fw_ver") for h in ctx.profile.ib.hcas if h.name in hcas
    }, None


def _gpu_parts(ev: Evidence, ctx: HostContext) -> tuple[dict[str, str | None] | None, Finding | None]:
    """("GPU<i> <bus id>" -> VBIOS version, or why not)."""
    rec, errs = parsed("nvidia-smi-xml", ev.get("nvsmi_xml"), ("gpu.vbios_uniform",), ctx.timeout_s)
    if rec is None:
        return None, errs[0]
    return {
        f"GPU{g['index']} {g.get('bus_id') or ''}".strip(): g.get("vbios_version") for g in rec["gpus"]
    }, None


PARTS = {"ib.firmware_uniform": _hca_parts, "gpu.vbios_uniform": _gpu_parts}


def node_parts(ev: Evidence, ctx: HostContext, checks: tuple[str, ...] = CHECKS) -> dict:
    """What the cluster-wide checks compare of one node, taken from its evidence as soon as it is there (so
    that its raw outputs need not be held until every node has answered): {check: (parts, problem) |
    exception}."""
    out: dict = {}
    for check in checks:
        try:
            out[check] = PARTS[check](ev, ctx)
        except Exception as exc:  # noqa: BLE001 - raised again in cluster_findings: an error finding on every node
            out[check] = exc
    return out


def _readable_parts(check: str, what: str, nodes: list[str], evidence: dict[str, dict],
                    out: dict[str, list[Finding]]) -> tuple[dict[str, dict[str, str]], set[str]]:
    """Each node's readable parts ({part: version}) and the nodes with a part not reported; a node whose parts
    could not be taken gets its problem finding, one with unreported parts an error finding."""
    parts: dict[str, dict[str, str]] = {}
    errored: set[str] = set()
    for n in nodes:
        taken = evidence[n][check]
        if isinstance(taken, Exception):
            raise taken
        got, problem = taken
        if got is None:
            out[n].append(problem)
            continue
        unread = sorted(k for k, v in got.items() if v is None)
        if unread:
            errored.add(n)
            out[n].append(Finding(check, "error", unread[0], "a version to compare",
                                  f"{what} of {', '.join(unread)} not reported (N/A): not compared"))
        parts[n] = {k: v for k, v in got.items() if v is not None}
    return parts, errored


def _odd_parts(check: str, what: str, pname: str, ps: dict[str, str], groups: dict[str, Counter], group_key,
               nodes: int) -> list[Finding]:
    """A node's parts whose version is not its group's majority (fail), or whose group has none (error)."""
    odd = []
    for part, version in sorted(ps.items()):
        counts = groups[group_key(part)]
        (top, top_n), *rest = counts.most_common()
        if rest and rest[0][1] == top_n:
            tied = ", ".join(f"{v} x{c}" for v, c in counts.most_common() if c == top_n)
            odd.append(Finding(check, "error", part, f"one {what} across the nodes of profile {pname}",
                               f"{version}; no majority among the {nodes} nodes ({tied}): the odd one out "
                               "cannot be told"))
        elif version != top:
            odd.append(Finding(check, "fail", part, f"{top} (as on {top_n} of the profile's parts)", version,
                               f"{what} versions across the {nodes} nodes of profile {pname}: "
                               + ", ".join(f"{v} x{c}" for v, c in counts.most_common())))
    return odd


def _compare(check: str, what: str, pname: str, parts: dict[str, dict[str, str]], errored: set[str],
             group_key, out: dict[str, list[Finding]]) -> None:
    """The findings of two or more nodes of one profile, each against the majority of its parts' groups."""
    groups: dict[str, Counter] = {}
    for ps in parts.values():
        for part, version in ps.items():
            groups.setdefault(group_key(part), Counter())[version] += 1
    expected = f"one {what} across the nodes of profile {pname}"
    for n, ps in parts.items():
        odd = _odd_parts(check, what, pname, ps, groups, group_key, len(parts))
        if odd:
            out[n].extend(odd)
        elif n in errored:
            continue
        elif ps:
            versions = sorted(set(ps.values()))
            out[n].append(Finding(check, "pass", "node", expected,
                                  f"{', '.join(versions)} on {len(ps)} part(s), as on the other "
                                  f"{len(parts) - 1} node(s)"))
        else:
            out[n].append(Finding(check, "error", "node", expected, f"no {what} reported on this node"))


def _uniform(check: str, what: str, parts_of, evidence: dict[str, dict], contexts: dict[str, HostContext],
             group_key) -> dict[str, list[Finding]]:
    out: dict[str, list[Finding]] = {n: [] for n in evidence}
    by_profile: dict[str, list[str]] = {}
    for node, ctx in contexts.items():
        if node in evidence:
            by_profile.setdefault(ctx.profile.name, []).append(node)
    for pname, nodes in by_profile.items():
        prof = contexts[nodes[0]].profile
        if not prof.firmware_uniform:
            for n in nodes:
                out[n].append(
                    Finding(check, "skip", "node", "", f"profile {pname} sets firmware_uniform: false")
                )
            continue
        parts, errored = _readable_parts(check, what, nodes, evidence, out)
        if len(parts) < 2:
            for n in parts:
                out[n].append(Finding(check, "skip", "node", "", f"{len(parts)} node of profile {pname} in "
                                      f"this run with a readable {what}: nothing to compare it with"))
            continue
        _compare(check, what, pname, parts, errored, group_key, out)
    return out


def cluster_findings(evidence: dict[str, Evidence], contexts: dict[str, HostContext],
                     checks: tuple[str, ...] = CHECKS) -> dict[str, list[Finding]]:
    """The cluster-wide findings of every node in ``evidence`` (the reachable ones): {node: [Finding]}. An
    evaluator bug is an error finding on every node, never a crash or a pass."""
    return parts_findings(
        {n: node_parts(ev, contexts[n], checks) for n, ev in evidence.items()}, contexts, checks
    )


def parts_findings(parts: dict[str, dict], contexts: dict[str, HostContext],
                   checks: tuple[str, ...] = CHECKS) -> dict[str, list[Finding]]:
    """``cluster_findings`` from each reachable node's ``node_parts``."""
    evidence = parts
    out: dict[str, list[Finding]] = {n: [] for n in evidence}
    judges = {"ib.firmware_uniform": ("HCA firmware", _hca_parts, lambda part: part),
              "gpu.vbios_uniform": ("GPU VBIOS", _gpu_parts, lambda part: "gpu")}
    for check in checks:
        what, parts_of, key = judges[check]
        try:
            found = _uniform(check, what, parts_of, evidence, contexts, key)
        except Exception as exc:  # noqa: BLE001 - reported as an error finding, never hidden
            found = {
                n: [error(check, f"internal evaluator error: {type(exc).__name__}: {exc}")] for n in evidence
            }
        for n, fs in found.items():
            out[n].extend(fs)
    return out
