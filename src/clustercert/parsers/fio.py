"""fio's ``--output-format=json`` document (``fio-json``).

fio prints its JSON document on stdout; warnings and errors it prints before it (``fio: ...``) are kept.
Several runs' documents one after another (the checkpoint probe's write run, then its read run) give one
record: their jobs in order, every document's leading lines among the messages. Record::

    {"version": "fio-3.33" | None,
     "jobs": [{"name": "write", "error": 0,
               "read":  {"bytes": int, "bw_bytes_per_s": float, "runtime_ms": int, "iops": float},
               "write": {...same keys...}}],
     "messages": [str]}        # the lines before each document (fio's own warnings and errors)

``bw_bytes_per_s`` is fio's ``bw_bytes`` (bytes/s, fio 3.x); where a release printed only ``bw`` (KiB/s) it
is ``bw x 1024``. Text without a JSON document with a ``jobs`` list raises ParseError.
"""

from __future__ import annotations

import json

from clustercert.parsers._text import leading_json
from clustercert.parsers.base import ParseError, register


def _dir(d: dict | None) -> dict:
    d = d or {}
    bw = d.get("bw_bytes")
    if bw is None and d.get("bw") is not None:
        bw = float(d["bw"]) * 1024
    return {"bytes": int(d.get("io_bytes") or 0), "bw_bytes_per_s": float(bw or 0.0),
            "runtime_ms": int(d.get("runtime") or 0), "iops": float(d.get("iops") or 0.0)}


@register(
    "fio-json", "fio --output-format=json: per job the bytes moved, bandwidth and runtime of reads and writes"
)
def parse_fio_json(text: str) -> dict:
    kind = "fio-json"
    if not isinstance(text, str) or not text.strip():
        raise ParseError(kind, "empty input; expected fio --output-format=json output")
    doc, start = leading_json(kind, text, "fio --output-format=json output")
    docs, messages, at = [], [], 0
    while True:
        if not isinstance(doc.get("jobs"), list):
            raise ParseError(kind, "the JSON document has no 'jobs' list")
        docs.append(doc)
        messages += [ln.strip() for ln in text[at:start].splitlines() if ln.strip()]
        at = start + json.JSONDecoder().raw_decode(text[start:])[1]
        if text.find("{", at) < 0:
            break
        doc, start = leading_json(kind, text[at:], "fio --output-format=json output")
        start += at
    jobs = [
        {
            "name": str(j.get("jobname", "")),
            "error": int(j.get("error") or 0),
            "read": _dir(j.get("read")),
            "write": _dir(j.get("write")),
        }
        for d in docs
        for j in d["jobs"]
        if isinstance(j, dict)
    ]
    messages += [ln.strip() for ln in text[at:].splitlines() if ln.strip()]
    return {"version": docs[0].get("fio version"), "jobs": jobs, "messages": messages}
