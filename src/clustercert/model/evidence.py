"""The evidence a collection returns: each command's result, and a node's results with how it went.

Collect (clustercert.collect) makes them, the evaluators (clustercert.checks, clustercert.probes) read
them: a command that timed out, was missing or failed is a result like any other, and the evaluators
turn it into an ``error`` finding, never a pass.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class CommandResult:
    rc: int | None
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float
    command: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out

    def excerpt(self, limit: int = 600) -> str:
        text = self.stdout if self.stdout.strip() else self.stderr
        text = text.strip()
        return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters)"


@dataclass
class NodeEvidence:
    node: str
    reachable: bool
    error: str = ""
    results: dict[str, CommandResult] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {"node": self.node, "reachable": self.reachable, "error": self.error, "seconds": self.seconds,
                "results": {k: asdict(v) for k, v in self.results.items()}}
