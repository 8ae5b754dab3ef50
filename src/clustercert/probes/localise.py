"""Localisation: which node, on which fabric and probe, or which link, explains the failing pairs.
Pure: pair results in, findings and the next round's questions out.

Group testing over every channel a pair gives (catalog: a probe kind on one fabric), not a pass/fail
bit per pair. Per channel:

- a node that passes the channel with some partner is *cleared* on it (a pass needs both ends good);
- a failing pair whose two ends are both cleared is a bad *link*;
- the other failures are explained by the fewest bad nodes (the most likely explanation when faults
  are rare: a minimum vertex cover of the failure graph, in which a node that failed with a cleared
  partner must be bad unless the link is -- a node is taken as likelier than one link of its own).
  A node in every minimum explanation is bad; one in some of them only is *ambiguous*, and so is a
  failing pair that no node of every explanation covers: those nodes need another partner.

An aggregate channel (NCCL across a pair: every rail and the GPUs) is explained first by a node
already known bad -- on any other channel, or on its own node probes -- and only what is left is
localised on its own. A node never tested on a channel that others were tested on (the spare of an
odd count, the partner of a node that stopped answering) needs a partner as well.

Each finding says how sure it is: the distinct partners the node failed with. A node that failed with
one partner only, where no partner showed a fault of its own, may be that node or its link to the
partner; on a cluster of three nodes or fewer the next round tries another partner (every partner
there is); on a larger one the two-round schedule has already tried two partners for every node of a
failing pair, and the finding states the single partner it rests on.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field

from clustercert.probes.catalog import AGGREGATE, Channel, channel_text

SMALL_CLUSTER = 3        # at most this many nodes: every partner is tried before a node is blamed on one
EXACT_COMPONENT = 14     # a failure-graph component with at most this many nodes is solved exactly


@dataclass
class PairResult:
    """What one pair's probes said, per channel: passed or not. A channel absent was not measured."""

    a: str
    b: str
    round: int
    passed: dict[Channel, bool]
    detail: dict[Channel, str] = field(default_factory=dict)  # a failed channel: what failed (for the reason)

    @property
    def key(self) -> frozenset[str]:
        return frozenset((self.a, self.b))


@dataclass(frozen=True)
class Localisation:
    kind: str                       # bad_node | bad_link | suspect
    subject: str                    # a node, or "a<->b"
    reason: str
    fabric: int | None = None       # the fabric it is localised to; None: not fabric-specific (NCCL, GPUs)
    probes: tuple[str, ...] = ()    # the probe kinds that failed
    partners: tuple[str, ...] = ()  # the distinct partners it failed with (its evidence)

    def to_json(self) -> dict:
        key = (
            "link"
            if self.kind == "bad_link" or (self.kind == "suspect" and "<->" in self.subject)
            else "node"
        )
        return {key: self.subject, "kind": self.kind, "reason": self.reason, "fabric": self.fabric,
                "probes": list(self.probes), "partners": list(self.partners)}


@dataclass
class Inference:
    findings: list[Localisation]
    needs: dict[str, set[Channel]]  # nodes that need another partner, and on which channels
    question: str                   # what the next round would ask ("" when nothing is open)


@dataclass
class _ChannelVerdict:
    bad: dict[str, set[str]] = field(default_factory=dict)     # node -> partners it failed with
    # known-bad node -> partners of failures it explains
    explained: dict[str, set[str]] = field(default_factory=dict)
    links: list[tuple[str, str]] = field(default_factory=list)
    ambiguous: dict[str, set[str]] = field(default_factory=dict)  # node -> partners, not decided
    open_pairs: list[tuple[str, str]] = field(default_factory=list)  # failing pairs not explained for sure


def _min_covers(nodes: list[str], edges: list[tuple[str, str]]) -> list[frozenset[str]]:
    """Every minimum vertex cover of a small graph (exact), or one greedy cover of a large one."""
    if len(nodes) <= EXACT_COMPONENT:
        for k in range(1, len(nodes) + 1):
            found = [frozenset(c) for c in itertools.combinations(nodes, k)
                     if all(a in c or b in c for a, b in edges)]
            if found:
                return found
        return [frozenset()]
    cover: set[str] = set()
    left = list(edges)
    while left:  # the node that covers most of what is left
        deg: dict[str, int] = defaultdict(int)
        for a, b in left:
            deg[a] += 1
            deg[b] += 1
        best = max(sorted(deg), key=lambda n: deg[n])
        cover.add(best)
        left = [(a, b) for a, b in left if best not in (a, b)]
    return [frozenset(cover), frozenset()]  # the empty second marks the greedy answer as not unique


def _components(edges: list[tuple[str, str]]) -> list[tuple[list[str], list[tuple[str, str]]]]:
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        parent[find(a)] = find(b)
    groups: dict[str, tuple[set[str], list]] = {}
    for a, b in edges:
        nodes, es = groups.setdefault(find(a), (set(), []))
        nodes |= {a, b}
        es.append((a, b))
    return [(sorted(n), e) for n, e in groups.values()]


def _explained_failure(v: _ChannelVerdict, p: frozenset, known_bad, known_links, explained) -> bool:
    """Whether pair ``p``'s failure is explained already: by a node known bad (noted on it in
    ``v.explained``), elsewhere (``explained``), or by a link known bad (a bad link here too)."""
    if p & known_bad:
        for n in p & known_bad:
            v.explained.setdefault(n, set()).update(p - {n})
        return True
    if p in explained:
        return True
    if p in known_links:
        v.links.append(tuple(sorted(p)))
        return True
    return False


def _solve(passed: set[frozenset], failed: set[frozenset], known_bad: set[str] | frozenset = frozenset(),
           known_links: set[frozenset] | frozenset = frozenset(),
           explained: set[frozenset] | frozenset = frozenset()) -> _ChannelVerdict:
    """One channel: the failing pairs explained by bad nodes and links (see the module docstring).
    ``known_bad``: nodes bad on other evidence, which explain a failure they take part in;
    ``known_links``: pairs already known to be bad links, which explain their own failure (a bad link
    here too); ``explained``: pairs whose failure here is explained elsewhere (left out)."""
    v = _ChannelVerdict()
    cleared = {n for p in passed for n in p}
    partners: dict[str, set[str]] = defaultdict(set)
    rest = []
    for p in sorted(failed, key=sorted):
        if _explained_failure(v, p, known_bad, known_links, explained):
            continue
        a, b = sorted(p)
        partners[a].add(b)
        partners[b].add(a)
        if a in cleared and b in cleared:
            v.links.append((a, b))
        else:
            rest.append((a, b))
    # a node that failed with a cleared partner: it is bad, or that one link is (the node is likelier)
    forced = {n for a, b in rest for n, o in ((a, b), (b, a)) if n not in cleared and o in cleared}
    edges = [(a, b) for a, b in rest if a not in forced and b not in forced]
    must, some = set(forced), set()
    for nodes, es in _components(edges):
        covers = _min_covers(nodes, es)
        common = frozenset.intersection(*covers)
        must |= common
        some |= frozenset.union(*covers) - common
        if len(covers) > 1:
            v.open_pairs += [(a, b) for a, b in es if a not in common and b not in common]
    for n in sorted(must):
        v.bad[n] = set(partners[n])
    for n in sorted(some):
        v.ambiguous[n] = set(partners[n])
    return v


def _tests_by_channel(results: list[PairResult]) -> dict[Channel, tuple[set[frozenset], set[frozenset]]]:
    """Per channel: (pairs that passed it every time, pairs that failed it at least once)."""
    out: dict[Channel, tuple[set[frozenset], set[frozenset]]] = {}
    for r in results:
        for ch, ok in r.passed.items():
            passed, failed = out.setdefault(ch, (set(), set()))
            (passed if ok else failed).add(r.key)
    for passed, failed in out.values():
        passed -= failed
    return out


def _verdicts(by_ch: dict[Channel, tuple[set[frozenset], set[frozenset]]],
              node_bad: set[str] | frozenset) -> dict[Channel, _ChannelVerdict]:
    """Every channel's verdict: the parts (per-fabric probes) first, each with what the other probes of its
    fabric decided, then the aggregate channels with what their parts explain."""
    verdicts: dict[Channel, _ChannelVerdict] = {}
    parts = sorted((c for c in by_ch if c[0] not in AGGREGATE), key=_ch_order)
    for ch in parts:
        verdicts[ch] = _solve(*by_ch[ch])
    # a link that fails one probe of a fabric is a bad path: it explains its failures on the other probes
    # of that fabric; and where a channel is still undecided, a node sure to be bad on another probe of
    # the same fabric explains its failures there (a slow fabric-0 link fails ib_write_bw and iperf3 alike)
    first = dict(verdicts)
    for ch in parts:
        others = [first[c] for c in parts if c != ch and c[1] == ch[1]]
        same_links = {frozenset(p) for v in others for p in v.links}
        undecided = first[ch].ambiguous or first[ch].open_pairs
        same = ({n for v in others for n, ps in v.bad.items() if len(ps - set(v.bad)) >= 2}
                if undecided else set())
        if same or same_links:
            verdicts[ch] = _solve(*by_ch[ch], known_bad=same, known_links=same_links)
    explained = set(node_bad) | {n for v in verdicts.values() for n in v.bad}
    links = {frozenset(p) for v in verdicts.values() for p in v.links}
    # a pair that failed one of the aggregate's parts has its aggregate failure explained by that part's
    # localisation (a node on a fabric, or the link), whatever it turns out to be
    by_parts = {k for c in parts for k in by_ch[c][1]}
    for ch in sorted((c for c in by_ch if c[0] in AGGREGATE), key=_ch_order):
        verdicts[ch] = _solve(*by_ch[ch], known_bad=explained, explained=links | by_parts)
    return verdicts


def _blame(verdicts: dict[Channel, _ChannelVerdict],
           small: bool) -> tuple[dict[tuple[str, int | None], dict], dict[str, set[Channel]]]:
    """Per (node, fabric) blamed: its failing probes, the partners that are evidence against it and those
    at fault themselves (``also``); and per node, the channels on which it needs another partner."""
    needs: dict[str, set[Channel]] = defaultdict(set)
    per_node: dict[tuple[str, int | None], dict] = {}
    for ch, v in verdicts.items():
        probe, fabric = ch
        for n, ps in v.bad.items():
            rec = per_node.setdefault((n, fabric), {"probes": set(), "partners": set(), "also": set()})
            rec["probes"].add(probe)
            rec["partners"] |= ps - set(v.bad)   # partners not at fault themselves: the evidence
            rec["also"] |= ps & set(v.bad)
            if small and len(ps) < 2:
                needs[n].add(ch)  # every partner there is, before one partner's word decides
        for n in v.ambiguous:
            needs[n].add(ch)
        for a, b in v.open_pairs:
            needs[a].add(ch)
            needs[b].add(ch)
    for (probe, fabric), v in verdicts.items():
        for n, ps in v.explained.items():  # onto the finding that explains it; a node with none gets one
            if (n, fabric) in per_node or (fabric is None and not any(k[0] == n for k in per_node)):
                rec = per_node.setdefault((n, fabric), {"probes": set(), "partners": set(), "also": set()})
                rec["probes"].add(probe)
                rec["partners"] |= ps
    return per_node, needs


def _node_finding(n: str, fabric: int | None, rec: dict, needs: dict[str, set[Channel]], small: bool,
                  detail: dict[tuple[frozenset, Channel], str]) -> Localisation:
    """A blamed node's finding: bad_node with two partners or more; with one, bad_node on a large cluster
    and suspect (node or link) on a small one."""
    if not rec["partners"]:  # it failed only with partners at fault themselves: nothing says it is
        rec["partners"] = rec["also"]
    partners = tuple(sorted(rec["partners"]))
    probes = tuple(sorted(rec["probes"]))
    where = f"fabric {fabric}" if fabric is not None else "across its rails and GPUs"
    what = ", ".join(probes)
    if len(partners) >= 2:
        reason = f"{what} failed on {where} with {len(partners)} different partners: {', '.join(partners)}"
        finding = Localisation("bad_node", n, reason, fabric, probes, partners)
    else:
        open_now = any(ch in needs.get(n, ()) for ch in ((p, fabric) for p in probes))
        then = (" (another partner is tried)" if open_now
                else "; no other partner was left to try" if small else "")
        reason = (f"{what} failed on {where} with {partners[0]} only, which passes with other partners: "
                  f"{n} or its link to {partners[0]}" + then)
        kind = "suspect" if small else "bad_node"
        finding = Localisation(kind, n, reason, fabric, probes, partners)
    for p in probes:
        d = detail.get((frozenset((n, partners[0])), (p, fabric))) if partners else None
        if d:
            return _with_detail(finding, d)
    return finding


def _link_findings(verdicts: dict[Channel, _ChannelVerdict]) -> list[Localisation]:
    return [Localisation("bad_link", f"{a}<->{b}",
                         f"{channel_text(ch)} fails between {a} and {b}, "
                         "while each passes it with other partners", ch[1], (ch[0],), ())
            for ch, v in verdicts.items() for a, b in v.links]


def _undecided_findings(verdicts: dict[Channel, _ChannelVerdict], blamed: set[str]) -> list[Localisation]:
    """What nobody could decide, as it stands: a suspect per ambiguous node not blamed elsewhere."""
    return [Localisation("suspect", n, f"{channel_text(ch)} failed with {', '.join(sorted(ps))}: not enough "
                         "partners to tell which end (or the link) is at fault",
                         ch[1], (ch[0],), tuple(sorted(ps)))
            for ch, v in verdicts.items() for n, ps in sorted(v.ambiguous.items()) if n not in blamed]


def localise(results: list[PairResult], nodes: list[str],
             node_bad: set[str] | frozenset = frozenset()) -> Inference:
    """Findings from every pair result so far (all rounds), and the nodes that need another partner.
    ``nodes``: the nodes in the schedule (those still answering); ``node_bad``: nodes that failed their
    own node probes (they explain an aggregate channel's failure)."""
    by_ch = _tests_by_channel(results)
    small = len(nodes) <= SMALL_CLUSTER
    verdicts = _verdicts(by_ch, node_bad)
    per_node, needs = _blame(verdicts, small)
    detail = _details(results)
    findings = [_node_finding(n, fabric, rec, needs, small, detail)
                for (n, fabric), rec in sorted(per_node.items(), key=lambda kv: (kv[0][0], _fab(kv[0][1])))]
    findings = _merge(findings + _link_findings(verdicts), "bad_link")
    blamed = {f.subject for f in findings if f.kind == "bad_node"}
    findings = _merge(findings + _undecided_findings(verdicts, blamed), "suspect")
    # in no pair yet (the spare of an odd count, the partner of a node that went away): every channel
    seen = {n for r in results for n in (r.a, r.b)}
    for n in nodes:
        if n not in seen and by_ch:
            needs[n] |= set(by_ch)
    return Inference(findings, {n: set(c) for n, c in needs.items() if c}, _question(needs))


def _fab(f: int | None) -> int:
    return -1 if f is None else f


def _ch_order(ch: Channel) -> tuple:
    return (ch[0], _fab(ch[1]))


def _details(results: list[PairResult]) -> dict[tuple[frozenset, Channel], str]:
    out = {}
    for r in results:
        for ch, text in r.detail.items():
            out.setdefault((r.key, ch), text)
    return out


def _with_detail(f: Localisation, detail: str) -> Localisation:
    return Localisation(f.kind, f.subject, f"{f.reason} (e.g. {detail})", f.fabric, f.probes, f.partners)


def _merge(findings: list[Localisation], kind: str) -> list[Localisation]:
    """One ``kind`` finding per subject and fabric, naming every probe (and partner) of the ones merged."""
    out, merged = [], {}
    for f in findings:
        if f.kind != kind:
            out.append(f)
            continue
        old = merged.get((f.subject, f.fabric))
        if old is None:
            merged[(f.subject, f.fabric)] = f
            continue
        probes = tuple(sorted(set(old.probes) | set(f.probes)))
        reason = old.reason
        if kind == "bad_link":
            a, b = f.subject.split("<->")
            where = f"fabric {f.fabric}" if f.fabric is not None else "NCCL across the pair"
            reason = (
                f"{', '.join(probes)} fail on {where} between {a} and {b}, while each passes them with other "
                "partners"
            )
        merged[(f.subject, f.fabric)] = Localisation(kind, f.subject, reason, f.fabric, probes,
                                                     tuple(sorted(set(old.partners) | set(f.partners))))
    return out + [merged[k] for k in sorted(merged, key=lambda k: (k[0], _fab(k[1])))]


def _question(needs: dict[str, set[Channel]]) -> str:
    if not needs:
        return ""
    chans = sorted({c for cs in needs.values() for c in cs}, key=_ch_order)
    names = sorted(needs)
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return (f"which of {shown} (or their links) fail {'; '.join(channel_text(c) for c in chans)}: "
            "each is paired with a partner that passes those probes elsewhere where there is one")
