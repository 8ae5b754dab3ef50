"""junit.xml: certify's findings and link measurements, and validate's findings, as JUnit XML valid
against the common JUnit schema (Jenkins' junit-10.xsd; tests/fixtures/junit/junit-10.xsd).

* One ``<testcase>`` per node x check (classname = node, name = check id). The findings of one check on
  one node are aggregated: failure if any fail, else error if any error, skipped if all skip. A node
  that was unreachable or errored without findings is one ``node.status`` testcase (an error).
* certify also has one testcase per link measurement (classname ``link.fabric<N>.<probe>``, or
  ``link.all_rails.<probe>`` for a probe over every rail).
* Above COLLAPSE_NODES nodes a passing testcase's ``<system-out>`` holds its expected and observed
  values, not the evidence (the certificate has it; failures and errors always carry theirs).
* ``<testsuites>`` carries tests, failures, errors and time only: the schema has no ``skipped`` there
  (each ``<testsuite>`` has its own ``skipped``).

Durations are the measured ones, never invented. The certificate's ``timing`` gives them per phase;
where it has a node's own times (``timing.nodes.<node>.validate_s`` / ``probes_s``) they are used
instead, and a finding or link that carries its own ``seconds`` (or ``elapsed``) keeps it (a link whose
``seconds`` is null did not run: 0). A node's
checks ran together (one connection, several commands at once), so each is charged an equal share of
the time they took: its validator checks share the validation time, its node probes (``probe.*`` checks,
and findings judged by a threshold) the node probe phase; in a pair round every pair ran at once, one probe
after another, so a pair's measurements share the round's wall time. Each suite's ``<properties>`` say which
source its times came from, and a suite's ``time`` is the wall time of its phase.
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Mapping

from clustercert.record.certificate import finding_evidence
from clustercert.report.common import (
    COLLAPSE_NODES,
    aggregate,
    by_check,
    clean,
    eo,
    fabric_of,
    link_order,
    link_threshold,
    natural,
    seconds,
    standing,
    unit_label,
)

_TAG = {"fail": "failure", "error": "error", "skip": "skipped"}
_TALLY = {"failure": "failures", "error": "errors", "skipped": "skipped"}


def _num(x) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _own_seconds(item: dict) -> float | None:
    """A finding's or link's own measured seconds, when it carries them."""
    for key in ("seconds", "elapsed"):
        if (v := _num(item.get(key))) is not None:
            return v
    return None


def _time(t: float | None) -> str:
    return f"{max(t or 0.0, 0.0):.3f}"


class _Suite:
    """A ``<testsuite>``: its attributes as an element, each of its children as text as soon as it is made (a
    fleet's tree of testcase elements was most of the memory junit.xml took)."""

    def __init__(self, root: _Root, name: str, timestamp, hostname, time_source: str):
        self.el = ET.Element("testsuite", name=name)
        if hostname:
            self.el.set("hostname", clean(hostname))
        if timestamp:
            self.el.set("timestamp", clean(timestamp))
        props = ET.Element("properties")
        ET.SubElement(props, "property", name="clustercert.time_source", value=time_source)
        self.children = io.BytesIO()  # the children's text, UTF-8, each on its own indented line
        self._add(props)
        root.suites.append(self)
        self.tally: Counter = Counter()
        self.time = 0.0

    def _add(self, el: ET.Element) -> None:
        ET.indent(el, level=2)  # as ET.indent of the whole document lays it out
        self.children.write(b"\n    " + ET.tostring(el, encoding="utf-8", xml_declaration=False))

    def case(
        self, classname: str, name: str, status: str, message: str, text: str, time: float | None
    ) -> None:
        """A ``<testcase>``, written as ``_add`` writes its element (``_element``: the same bytes, without an
        element tree per testcase: a fleet has one per node and check)."""
        head = (("classname", clean(classname)), ("name", clean(name)), ("time", _time(time)))
        self.tally["tests"] += 1
        tag = _TAG.get(status)
        child = None
        if tag:
            attrs = (("message", clean(message)[:1000]),) + ((("type", status),) if tag != "skipped" else ())
            child = _element(tag, attrs, clean(text))
            self.tally[_TALLY[tag]] += 1
        elif text:
            child = _element("system-out", (), clean(text))
        out = _element("testcase", head, None, child)
        self.children.write(b"\n    " + out.encode("utf-8", "xmlcharrefreplace"))

    def close(self, wall: float | None) -> Counter:
        for k in ("tests", "failures", "errors", "skipped"):
            self.el.set(k, str(self.tally[k]))
        self.el.set("time", _time(wall))
        return self.tally


def _element(tag: str, attrs: tuple, text: str | None, child: str | None = None) -> str:
    """An element as ET.tostring writes it once ET.indent(level=2) has laid it out (its attributes in their
    order, escaped as ElementTree escapes them; ``child``: its one child's text, on a line of its own)."""
    head = f"<{tag}" + "".join(f' {k}="{ET._escape_attrib(v)}"' for k, v in attrs)  # noqa: SLF001 - ET's own
    if child is not None:
        return f"{head}>\n      {child}\n    </{tag}>"
    if text:
        return f"{head}>{ET._escape_cdata(text)}</{tag}>"  # noqa: SLF001 - ET's own escaping
    return f"{head} />"


class _Root:
    def __init__(self, name: str):
        self.el = ET.Element("testsuites", name=clean(name))
        self.suites: list[_Suite] = []


def _root(name: str) -> _Root:
    return _Root(name)


def _start_tag(el: ET.Element) -> bytes:
    empty = ET.tostring(el, encoding="utf-8", xml_declaration=False)  # childless: b'<tag attr="..." />'
    return empty[: -len(b" />")] + b">"


def _finish(root: _Root, tallies: list[Counter], wall: float) -> bytes:
    return b"".join(_parts(root, tallies, wall))


def _parts(root: _Root, tallies: list[Counter], wall: float) -> list:
    """The document's bytes in pieces (each suite's children one buffer): what _finish joins and write_junit
    writes out without joining."""
    for k in ("tests", "failures", "errors"):
        root.el.set(k, str(sum(t[k] for t in tallies)))
    root.el.set("time", _time(wall))
    out: list = [b"<?xml version='1.0' encoding='utf-8'?>\n"]
    if not root.suites:
        out.append(ET.tostring(root.el, encoding="utf-8", xml_declaration=False))
    else:
        out.append(_start_tag(root.el))
        for suite in root.suites:
            out += [b"\n  " + _start_tag(suite.el), suite.children.getbuffer(), b"\n  </testsuite>"]
        out.append(b"\n</testsuites>")
    out.append(b"\n")
    return out


def _node_cases(suite: _Suite, nodes: Mapping[str, dict], node_time: Callable[[str], tuple]) -> None:
    """The node x check testcases. ``node_time(name)`` -> (validator seconds, probe seconds) of the
    node, either None where not measured. Above COLLAPSE_NODES nodes a passing testcase's system-out
    has its expected and observed values without the evidence (the certificate has it)."""
    passing_evidence = len(nodes) <= COLLAPSE_NODES
    for n in sorted(nodes, key=natural):
        node = nodes[n]
        checks = by_check(node)
        validate_s, probes_s = node_time(n)
        if not checks and node.get("verdict") in ("unreachable", "error"):
            why = clean(node.get("detail")) or "no check could run"
            suite.case(
                n,
                "node.status",
                "error",
                f"node {node.get('verdict')}",
                f"{n} was {node.get('verdict')}: {why}",
                validate_s,
            )
            continue
        kinds = {c: "probe" if c.startswith("probe.") or any(f.get("threshold") for f in fs) else "validate"
                 for c, fs in checks.items()}
        shares = Counter(kinds.values())
        for check, fs in checks.items():
            st = aggregate(f.get("status") for f in fs)
            st = "pass" if st == "none" else st
            picked = [f for f in fs if f.get("status") == st] if st in ("fail", "error") else fs
            message = "; ".join(eo(f) for f in picked[:3]) + (
                f" (+{len(picked) - 3} more)" if len(picked) > 3 else ""
            )
            evidence = passing_evidence or st in ("fail", "error")
            text = "\n\n".join(
                f"[{f.get('status')}] {eo(f)}"
                + (f"\n{clean(finding_evidence(node, f))}".rstrip() if evidence else "")
                for f in picked
            )
            own = [s for f in fs if (s := _own_seconds(f)) is not None]
            if own:
                t = sum(own)
            else:
                phase = probes_s if kinds[check] == "probe" else validate_s
                t = None if phase is None else phase / shares[kinds[check]]
            suite.case(n, check, st, message, text, t)


# ---- certify -----------------------------------------------------------------------------------------

def render_junit(cert: dict) -> bytes:
    """certify's junit.xml from the certificate: suites ``nodes`` and ``links``."""
    return b"".join(junit_parts(cert))


def junit_parts(cert: dict) -> list:
    """``render_junit``'s bytes in pieces (for writing a fleet's junit.xml without joining it first)."""
    cluster = clean(cert.get("cluster"))
    timing = cert.get("timing") or {}
    per_node = timing.get("nodes") or {}
    validate_s = _num(timing.get("validate_s"))
    node_probes_s = _num((timing.get("node_probes") or {}).get("wall_s"))

    def node_time(n: str) -> tuple:
        own = per_node.get(n) or {}
        v, p = _num(own.get("validate_s")), _num(own.get("probes_s"))
        return (validate_s if v is None else v), (node_probes_s if p is None else p)

    source = ("timing.nodes: each node's own validator seconds (and probe seconds where it has them, else "
              "timing.node_probes.wall_s), shared among its checks" if per_node else
              "timing.validate_s and timing.node_probes.wall_s: the phases' wall time (the nodes ran at "
              "once), shared among each node's checks")
    root = _root(f"clustercert {cluster}")
    nodes = _Suite(root, "nodes", cert.get("started"), cluster, source)
    _node_cases(nodes, cert.get("nodes") or {}, node_time)
    nodes_wall = sum(x for x in (validate_s, node_probes_s) if x is not None)
    if not nodes_wall and per_node:
        nodes_wall = max(sum(x for x in node_time(n) if x is not None) for n in per_node)

    links = cert.get("links") or []
    rounds_wall = {int(r["round"]): _num(r.get("wall_s")) for r in timing.get("rounds") or [] if "round" in r}
    per_pair_round = Counter(
        (frozenset((lk.get("a"), lk.get("b"))), int(lk.get("round") or 1)) for lk in links
    )
    lsuite = _Suite(root, "links", cert.get("started"), cluster,
                    "a link's own seconds where it has them (how long its tool ran; null: it did not run, 0),"
                    " else timing.rounds[].wall_s: every pair of a round ran at once, its measurements one "
                    "after another, so they share the round's wall time")
    link_total = 0.0
    for link in sorted(links, key=link_order):
        rnd = int(link.get("round") or 1)
        t = _own_seconds(link)
        if t is None and "seconds" in link:  # the link says it has no time of its own: its probe did not run
            t = 0.0
        if t is None and rounds_wall.get(rnd) is not None:
            t = rounds_wall[rnd] / per_pair_round[(frozenset((link.get("a"), link.get("b"))), rnd)]
        link_total += t or 0.0
        th = link_threshold(cert, link)
        unit = unit_label(link.get("unit") or (th or {}).get("unit"))
        st = str(link.get("status"))
        msg = standing(link.get("value"), st, th, unit, link.get("observed"))
        text = msg if st == "pass" or not link.get("evidence") else f"{msg}\n{clean(link.get('evidence'))}"
        fab = "all_rails" if fabric_of(link) < 0 else f"fabric{link.get('fabric', 0)}"
        lsuite.case(f"link.{fab}.{link.get('probe')}", f"{link.get('a')} <-> {link.get('b')} round {rnd}",
                    st if st in ("fail", "error") else "pass", msg, text, t)
    links_wall = sum(v for v in rounds_wall.values() if v is not None) or link_total
    tallies = [nodes.close(nodes_wall), lsuite.close(links_wall)]
    if cert.get("cluster_findings"):  # probe.nccl_cluster: a suite of its own, a case per run
        csuite = _Suite(
            root, "cluster", cert.get("started"), cluster, "each run's own seconds (how long its tool ran)"
        )
        for f in cert["cluster_findings"]:
            st, t = str(f.get("status")), _num(f.get("seconds"))
            msg = f"{clean(f.get('observed'))} (expected {clean(f.get('expected'))})"
            text = msg if st == "pass" or not f.get("evidence") else f"{msg}\n{clean(f.get('evidence'))}"
            csuite.case(str(f.get("check")), f"{f.get('subject')}: {', '.join(f.get('nodes') or [])}",
                        st if st in ("fail", "error", "skip") else "pass", msg, text, t)
        tallies.append(csuite.close(sum(_num(f.get("seconds")) or 0.0 for f in cert["cluster_findings"])))
    return _parts(root, tallies, seconds(cert) or nodes_wall + links_wall)


# ---- validate ----------------------------------------------------------------------------------------

def _as_node(r) -> tuple[dict, float | None]:
    """A validate result (validate.NodeResult, or its to_json() dict with an optional "seconds") as
    the certificate's node dict, and the node's measured seconds."""
    if isinstance(r, Mapping):
        node = {
            "verdict": r.get("verdict"),
            "findings": list(r.get("findings") or []),
            "detail": r.get("detail", ""),
        }
        return node, _num(r.get("seconds"))
    node = r.to_json() if hasattr(r, "to_json") else {"verdict": r.verdict, "findings": r.findings}
    node["findings"] = [f.to_json() if hasattr(f, "to_json") else dict(f) for f in node.get("findings") or []]
    node.setdefault("detail", getattr(r, "detail", ""))
    ev = getattr(r, "evidence", None)
    return node, _num(getattr(ev, "seconds", None))


def render_junit_validation(results: Mapping, *, cluster: str | None = None, timestamp: str | None = None,
                            wall_s: float | None = None) -> bytes:
    """JUnit XML of a ``validate`` run: ``results`` is validate.validate_nodes()'s {node: NodeResult}
    (or {node: NodeResult.to_json() | {"seconds": s}}). One testsuite ``nodes``; each node's checks
    share the seconds its collection took (NodeEvidence.seconds). ``wall_s``: the run's wall time
    (default: the slowest node's, the nodes ran at once)."""
    nodes, secs = {}, {}
    for name, r in results.items():
        nodes[name], secs[name] = _as_node(r)
    measured = [s for s in secs.values() if s is not None]
    wall = wall_s if wall_s is not None else max(measured, default=0.0)
    root = _root(f"clustercert validate{f' {clean(cluster)}' if cluster else ''}")
    suite = _Suite(root, "nodes", timestamp, cluster,
                   "each node's collection seconds (NodeEvidence.seconds), shared among its checks")
    _node_cases(suite, nodes, lambda n: (secs.get(n), secs.get(n)))
    return _finish(root, [suite.close(wall)], wall)

