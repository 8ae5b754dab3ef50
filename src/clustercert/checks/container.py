"""Container runtime: the NVIDIA runtime configured for the profile's runtime, and a current CDI spec."""

from __future__ import annotations

import json

from clustercert.checks import Evidence, Finding, HostContext, error, judge, why_not

CHECK_IDS = ("container.runtime", "container.cdi")

RUNTIME_FILES = {
    "containerd": "/etc/containerd/config.toml /etc/containerd/conf.d/*.toml",
    "crio": "/etc/crio/crio.conf /etc/crio/crio.conf.d/*.conf /etc/crio/crio.conf.d/*.toml",
    "docker": "/etc/docker/daemon.json",
}
CDI_FILES = "/etc/cdi/nvidia.yaml /var/run/cdi/nvidia.yaml"


def commands(ctx: HostContext) -> dict[str, tuple[str, float]]:
    t = ctx.timeout_s
    files = RUNTIME_FILES[ctx.profile.container.runtime]
    return {
        # print each existing file with a header, so the evaluator knows which file said what
        "runtime_config": (
            f'for f in {files}; do [ -f "$f" ] && printf \'==> %s <==\\n\' "$f" && cat "$f"; done; true',
            t,
        ),
        "cdi_stat": (
            f"stat -c '%n %Y' {CDI_FILES} 2>/dev/null; stat -c 'nvidia-smi %Z' \"$(command -v nvidia-smi)\"",
            t,
        ),
    }


def _split_files(text: str) -> dict[str, str]:
    files: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("==> ") and line.endswith(" <=="):
            current = line[4:-4]
            files[current] = []
        elif current:
            files[current].append(line)
    return {k: "\n".join(v) for k, v in files.items()}


def evaluate(ev: Evidence, ctx: HostContext) -> list[Finding]:
    return [_runtime(ev.get("runtime_config"), ctx), _cdi(ev.get("cdi_stat"), ctx)]


def _runtime(res, ctx: HostContext) -> Finding:
    runtime = ctx.profile.container.runtime
    reason = why_not(res, ctx.timeout_s)
    if reason:
        return error("container.runtime", reason, res, runtime)
    files = _split_files(res.stdout)
    if runtime == "docker":
        text = files.get("/etc/docker/daemon.json")
        if text is None:
            return Finding(
                "container.runtime",
                "fail",
                "docker",
                "daemon.json with an nvidia runtime",
                "/etc/docker/daemon.json missing",
            )
        try:
            cfg = json.loads(text or "{}")
        except json.JSONDecodeError as exc:
            return Finding(
                "container.runtime", "fail", "docker", "valid daemon.json", f"invalid JSON: {exc}", text[:300]
            )
        path = ((cfg.get("runtimes") or {}).get("nvidia") or {}).get("path", "")
        return judge(
            "container.runtime",
            path.endswith("nvidia-container-runtime"),
            "docker",
            "runtimes.nvidia.path = nvidia-container-runtime",
            path or "no nvidia runtime",
            text[:400],
        )
    hits = [f for f, text in files.items() if "nvidia-container-runtime" in text and "nvidia" in text]
    if runtime == "containerd":
        main = files.get("/etc/containerd/config.toml", "")
        dropin_hits = [f for f in hits if "/conf.d/" in f]
        imported = "conf.d" in main and "imports" in main
        good = bool(hits) and (not dropin_hits or imported or set(hits) - set(dropin_hits))
        obs = (f"nvidia runtime in {', '.join(hits)}" if hits else "no nvidia runtime configured")
        if dropin_hits and not imported and not (set(hits) - set(dropin_hits)):
            obs += "; but config.toml does not import conf.d"
        return judge(
            "container.runtime",
            good,
            "containerd",
            "nvidia runtime configured (drop-in imported)",
            obs,
            "\n".join(f"{f}: {len(t)} bytes" for f, t in files.items()),
        )
    return judge("container.runtime", bool(hits), runtime, "nvidia runtime configured",
                 f"nvidia runtime in {', '.join(hits)}" if hits else "no nvidia runtime configured")


def _cdi(res, ctx: HostContext) -> Finding:
    if res is None or res.timed_out:
        return error("container.cdi", why_not(res, ctx.timeout_s) or "not collected", res)
    stamps = {}
    for line in res.stdout.splitlines():
        name, _, ts = line.rpartition(" ")
        if name and ts.isdigit():
            stamps[name] = int(ts)
    specs = {k: v for k, v in stamps.items() if k.endswith("nvidia.yaml")}
    if "nvidia-smi" not in stamps:
        return Finding(
            "container.cdi",
            "error",
            "CDI spec",
            "a CDI spec newer than the driver",
            "nvidia-smi not installed: driver install time unknown",
        )
    if not specs:
        return Finding("container.cdi", "fail", "CDI spec", f"one of {CDI_FILES}", "no CDI spec")
    newest = max(specs, key=lambda k: specs[k])
    good = specs[newest] >= stamps["nvidia-smi"]
    return judge(
        "container.cdi",
        good,
        newest,
        "generated after the driver was installed",
        "newer than the driver"
        if good
        else "older than the driver install: regenerate (nvidia-ctk cdi generate)",
        res.stdout.strip(),
    )
