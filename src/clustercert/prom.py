"""node_exporter textfile-collector output, written atomically (temp file + rename in the same dir)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

STATUS_VALUE = {"pass": 0, "fail": 1, "error": 2, "skip": 3}


def _label(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(drift_items: dict[tuple[str, str], int], check_status: dict[tuple[str, str], str], timestamp: float) -> str:
    lines = [
        "# HELP clustercert_drift_items Drift items found by the last clustercert drift run, per node and kind.",
        "# TYPE clustercert_drift_items gauge",
    ]
    for (node, kind), n in sorted(drift_items.items()):
        lines.append(f'clustercert_drift_items{{node="{_label(node)}",kind="{_label(kind)}"}} {n}')
    lines += [
        "# HELP clustercert_check_status Last status of each check per node (0 pass, 1 fail, 2 error, 3 skip).",
        "# TYPE clustercert_check_status gauge",
    ]
    for (node, check), status in sorted(check_status.items()):
        lines.append(f'clustercert_check_status{{node="{_label(node)}",check="{_label(check)}"}} {STATUS_VALUE.get(status, 2)}')
    lines += [
        "# HELP clustercert_last_run_timestamp_seconds When the last clustercert drift run finished.",
        "# TYPE clustercert_last_run_timestamp_seconds gauge",
        f"clustercert_last_run_timestamp_seconds {timestamp:.3f}",
    ]
    return "\n".join(lines) + "\n"


def write_atomic(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
