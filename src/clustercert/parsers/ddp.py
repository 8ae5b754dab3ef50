"""Output of a torchrun launch of clustercert's DDP smoke test (``ddp-smoke``).

Each rank of clustercert.remote.ddp_smoke prints one ``CLUSTERCERT_DDP <json>`` line; torchrun and Python
print what went wrong around them (a traceback, ``ChildFailedError``, a rendezvous that could not be
reached). Launcher prefixes (``[1,0]<stdout>:``, ``0: ``, torchrun --tee's ``[default0]:``) are accepted.
Record::

    {"ranks": [{...the rank's JSON: host, rank, local_rank, world_size, local_world_size, backend,
                torch, allreduce {expected, min, max, ok, step_ms}, problems, error}],
     "errors": [str],          # lines that say why a launch failed (torchrun, Python, the rendezvous)
     "exceptions": [str],      # distinct ``SomethingError: message`` lines a traceback ended with, other
                               # than the rendezvous's (torchrun itself failing, a rank's own error)
     "rendezvous_unreachable": bool}   # a line says the rendezvous (MASTER_ADDR:MASTER_PORT) was not reached

Text without any rank line and without an error line raises ParseError.
"""

from __future__ import annotations

import json
import re

from clustercert.parsers._text import text_lines
from clustercert.parsers.base import ParseError, register

MARK = "CLUSTERCERT_DDP "
_PREFIX_RE = re.compile(r"^(?:\[\d+,\d+\]<(?:stdout|stderr)>:\s?|\[[A-Za-z_]*\d+\]:|\d+:\s)")
_ERROR_RE = re.compile(r"(Error|error:|ChildFailedError|Traceback|failed|Killed|No such file|not found|"
                       r"cannot|Connection refused|timed out|RendezvousTimeout|RendezvousConnection)")
_EXC_RE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt):")
_RDZV_RE = re.compile(r"(RendezvousConnectionError|RendezvousTimeoutError|The client socket has timed out|"
                      r"Connection refused|failed to connect|No route to host|Name or service not known|"
                      r"DistNetworkError|Failed to recv|Connection reset by peer)", re.I)


@register(
    "ddp-smoke",
    "clustercert's DDP smoke test under torchrun: one JSON line per rank, and the launch's errors",
)
def parse_ddp(text: str) -> dict:
    kind = "ddp-smoke"
    ranks, errors, exceptions, rdzv = [], [], [], False
    for raw in text_lines(kind, text, "the DDP smoke test's output"):
        line = _PREFIX_RE.sub("", raw.strip(), count=1)
        at = line.find(MARK)
        if at >= 0:
            try:
                doc = json.loads(line[at + len(MARK):])
            except json.JSONDecodeError as exc:
                raise ParseError(kind, f"a rank's line is not JSON: {exc.msg}") from None
            if isinstance(doc, dict):
                ranks.append(doc)
            continue
        if line and _ERROR_RE.search(line):
            errors.append(line[:300])
            at_rdzv = bool(_RDZV_RE.search(line))
            if _EXC_RE.match(line) and not at_rdzv and line[:300] not in exceptions:
                exceptions.append(line[:300])
            rdzv = rdzv or at_rdzv
    if not ranks and not errors:
        raise ParseError(
            kind, "no CLUSTERCERT_DDP line and no error (the launch printed nothing of the test)"
        )
    return {
        "ranks": ranks,
        "errors": errors[:40],
        "exceptions": exceptions[:10],
        "rendezvous_unreachable": rdzv,
    }
