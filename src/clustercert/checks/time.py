"""Clock synchronisation (chrony): synchronised to a source, offset within the profile's bound."""

from __future__ import annotations

from clustercert.checks import Evidence, Finding, HostContext, judge, parsed

CHECK_IDS = ("time.sync",)


def commands(ctx: HostContext) -> dict[str, tuple[str, float]]:
    return {"chrony": ("chronyc -n tracking", ctx.timeout_s)}


def evaluate(ev: Evidence, ctx: HostContext) -> list[Finding]:
    rec, errs = parsed("chronyc-tracking", ev.get("chrony"), CHECK_IDS, ctx.timeout_s)
    if rec is None:
        return errs
    limit_ms = ctx.profile.tuning.time_max_offset_ms
    off_ms = rec["system_time_offset_s"] * 1000
    good = rec["synchronised"] and abs(off_ms) <= limit_ms
    return [judge("time.sync", good, "chrony", f"synchronised, |offset| <= {limit_ms:g} ms",
                  f"{rec['leap_status']}, stratum {rec['stratum']}, offset {off_ms:+.3f} ms, source {rec['reference_name'] or rec['reference_id']}",
                  ev["chrony"].excerpt(400), value=round(off_ms, 3), unit="ms")]
