"""Clock synchronisation (chrony): synchronised to a source, offset within the profile's bound."""

from __future__ import annotations

from clustercert.checks import Evidence, Finding, HostContext, judge, parsed

CHECK_IDS = ("time.sync",)


def commands(ctx: HostContext) -> dict[str, tuple[str, float]]:
    return {"chrony": ("chronyc -n tracking", ctx.timeout_s)}


def evaluate(ev: Evidence, ctx: HostContext) -> list[Finding]:
    res = ev.get("chrony")
    if (
        res is not None
        and not res.timed_out
        and res.rc not in (0, 127)
        and "Cannot talk to daemon" in (res.stdout + res.stderr)
    ):
        # chrony is installed but its daemon is not running: the clock is not being synchronised
        return [
            Finding(
                "time.sync",
                "fail",
                "chrony",
                "chronyd running and synchronised",
                "chronyd is not running",
                res.excerpt(200),
            )
        ]
    rec, errs = parsed("chronyc-tracking", res, CHECK_IDS, ctx.timeout_s)
    if rec is None:
        return errs
    limit_ms = ctx.profile.tuning.time_max_offset_ms
    off_ms = rec["system_time_offset_s"] * 1000
    good = rec["synchronised"] and abs(off_ms) <= limit_ms
    return [judge("time.sync", good, "chrony", f"synchronised, |offset| <= {limit_ms:g} ms",
                  f"{rec['leap_status']}, stratum {rec['stratum']}, offset {off_ms:+.3f} ms, source "
                  f"{rec['reference_name'] or rec['reference_id']}",
                  ev["chrony"].excerpt(400), value=round(off_ms, 3), unit="ms")]
