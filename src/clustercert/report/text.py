"""Plain-text renderings, without rich: the lines node-check prints (its zipapp has no rich), and the folding
of identical causes that validate's table prints below it. Pure: data in, text out; stdlib only."""

from __future__ import annotations


def _names(items: list[str], most: int = 4) -> str:
    shown = ", ".join(items[:most])
    return shown + (f" (+{len(items) - most} more)" if len(items) > most else "")


def fold_findings(results: dict) -> list[dict]:
    """The failing and erroring findings of every node, with identical causes folded together: one group
    per (status, cause) -- cause is the observation for an error, "expected X, observed Y" for a fail --
    naming the nodes, checks and subjects it covers, in order of first appearance. Unreachable nodes
    fold by their reason too. The full list stays in the JSON document."""
    groups: dict[tuple[str, str], dict] = {}
    for name, r in sorted(results.items()):
        if r.verdict == "unreachable":
            g = groups.setdefault(
                ("unreachable", r.detail),
                {
                    "status": "unreachable",
                    "cause": r.detail,
                    "nodes": [],
                    "checks": [],
                    "subjects": [],
                    "findings": 0,
                },
            )
            g["nodes"].append(name)
            continue
        for f in r.findings:
            if f.status not in ("fail", "error"):
                continue
            cause = f.observed if f.status == "error" else f"expected {f.expected}, observed {f.observed}"
            g = groups.setdefault(
                (f.status, cause),
                {
                    "status": f.status,
                    "cause": cause,
                    "nodes": [],
                    "checks": [],
                    "subjects": [],
                    "findings": 0,
                },
            )
            g["findings"] += 1
            for key, value in (("nodes", name), ("checks", f.check), ("subjects", f.subject)):
                if value and value not in g[key]:
                    g[key].append(value)
    return list(groups.values())


def fold_line(g: dict) -> str:
    """One group as one line, e.g. ``here error: 9 checks (gpu.count, gpu.model, ...): tool not found:
    nvidia-smi -q -x``."""
    nodes = _names(g["nodes"], 3)
    if g["status"] == "unreachable":
        return f"{nodes} unreachable — {g['cause']}"
    checks, subjects = g["checks"], [s for s in g["subjects"] if s not in ("", "node")]
    if len(checks) == 1:
        what = checks[0]
        if g["findings"] > len(g["nodes"]):
            what += f" ×{g['findings']}" + (f" ({_names(subjects, 3)})" if subjects else "")
        elif len(subjects) == 1:
            what += f" {subjects[0]}"
    else:
        what = f"{len(checks)} checks ({_names(checks, 3)})"
    return f"{nodes} {g['status']}: {what}: {g['cause']}"


def slurm_line(a: dict) -> str:
    """One Slurm action (certify's ``slurm`` list, node-check's) as a line."""
    what = {"drain": f"drain ({a['reason']})", "resume": "resume", "none": "untouched"}[a["action"]]
    return f"slurm {a['slurm_node']}: {what}{'' if a['ok'] else ' FAILED'}: {a['detail']}"


def node_check_lines(result, profile: str, slurm: list[dict]) -> list[str]:
    """node-check's text output: the node's verdict with its counts (``result``:
    clustercert.checks.run.NodeResult), then what did not pass, folded as validate folds it, then what was
    done in Slurm."""
    counts = {s: 0 for s in ("pass", "fail", "error", "skip")}
    for f in result.findings:
        counts[f.status] += 1
    head = (
        f"node-check {result.name}: {result.verdict} -- findings "
        + ", ".join(f"{n} {s}" for s, n in counts.items())
        + f" ({profile})"
    )
    return [
        head,
        *(fold_line(g) for g in fold_findings({result.name: result})),
        *(slurm_line(a) for a in slurm),
    ]
