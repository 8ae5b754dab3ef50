"""Driver, CUDA and NCCL versions: what is installed, what is loaded, and what the profile pins."""

from __future__ import annotations

from clustercert.checks import Evidence, Finding, HostContext, error, judge, parsed, why_not

CHECK_IDS = ("driver.version", "driver.module_loaded", "cuda.version", "nccl.version")


def commands(ctx: HostContext) -> dict[str, tuple[str, float]]:
    t = ctx.timeout_s
    return {
        "nvsmi_xml": ("nvidia-smi -q -x", t),
        "driver_loaded": ("cat /sys/module/nvidia/version", t),
        # the module on disk (modinfo), else the installed kernel-module package
        "driver_installed": (
            "modinfo -F version nvidia 2>/dev/null || { dpkg-query -W -f='${Version}\\n' "
            "nvidia-kernel-open-dkms nvidia-kernel-dkms 2>/dev/null || rpm -q --qf "
            "'%{VERSION}\\n' kmod-nvidia-open-dkms kmod-nvidia-latest-dkms 2>/dev/null; } | "
            "grep -m1 .",
            t,
        ),
        "nccl_pkg": (
            "dpkg-query -W -f='${Version}' libnccl2 2>/dev/null || rpm -q --qf '%{VERSION}-%{RELEASE}' "
            "libnccl",
            t,
        ),
    }


def _version_tuple(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def package_upstream(version: str) -> str:
    """'570.172.08-1' / '1:570.172.08-0ubuntu1' -> '570.172.08' (epoch and revision dropped)."""
    v = version.split(":", 1)[-1]
    return v.split("-", 1)[0]


def evaluate(ev: Evidence, ctx: HostContext) -> list[Finding]:
    prof = ctx.profile
    out: list[Finding] = []
    rec, errs = parsed(
        "nvidia-smi-xml", ev.get("nvsmi_xml"), ("driver.version", "cuda.version"), ctx.timeout_s
    )
    out += errs
    if rec is not None:
        dv = rec.get("driver_version")
        out.append(
            judge("driver.version", dv == prof.driver.version, "nvidia driver", prof.driver.version, dv)
        )
        cv = rec.get("cuda_version")
        good = cv is not None and _version_tuple(cv) >= _version_tuple(prof.cuda.version)
        out.append(judge("cuda.version", good, "driver CUDA version", f">= {prof.cuda.version}", cv))

    loaded, installed = ev.get("driver_loaded"), ev.get("driver_installed")
    reason = why_not(loaded, ctx.timeout_s) or why_not(installed, ctx.timeout_s)
    if reason:
        out.append(
            error("driver.module_loaded", reason, loaded if why_not(loaded) else installed, "nvidia module")
        )
    else:
        lv, iv = loaded.stdout.strip(), package_upstream(installed.stdout.strip())
        out.append(
            judge(
                "driver.module_loaded",
                bool(lv) and lv == iv,
                "nvidia module",
                f"loaded == installed ({iv})",
                f"loaded {lv or 'nothing'}, installed {iv}",
                "a reboot (or module reload) is needed to load the installed driver" if lv != iv else "",
            )
        )

    nccl = ev.get("nccl_pkg")
    reason = why_not(nccl, ctx.timeout_s)
    if reason:
        out.append(
            error("nccl.version", f"libnccl2 not installed or not queryable ({reason})", nccl, "libnccl2")
        )
    else:
        v = nccl.stdout.strip()
        out.append(
            judge("nccl.version", v.split("-")[0] == prof.nccl.version, "libnccl2", prof.nccl.version, v)
        )
    return out
