"""A profile as plain data: what ``node-check`` evaluates against on a node, where there is no pydantic.

The controller validates a profile (clustercert.model.profile, pydantic) and dumps it resolved, the site's
overrides merged in (``Profile.model_dump(mode="json")``; the ``clustercert_profile`` lookup returns the same
dict). ``profile_of`` turns that JSON back into read-only objects with the pydantic models' attribute names,
tuples where the models have tuples, and their derived values (the ``*Rules`` classes below, which the
pydantic models inherit too): the evaluators (clustercert.checks) cannot tell the two apart. Stdlib only: this
module is part of node-check's zipapp (clustercert.remote.nodeapp); clustercert.model.nodefile reads the
node's file.
"""

from __future__ import annotations

# the profile's keys (clustercert.model.profile.Profile's fields, written out: the node has no pydantic to
# ask; tests/test_node_check.py holds them equal)
FIELDS = (
    "name",
    "description",
    "gpu",
    "driver",
    "cuda",
    "nccl",
    "ofed",
    "container",
    "ib",
    "subnet_manager",
    "tuning",
    "firmware_uniform",
    "drift_tolerance",
    "dcgm_diag",
    "gpudirect",
    "ddp",
    "storage",
    "thresholds",
    "hardware",
)
# the profile's mappings whose keys are names (a threshold's, a sysctl's, an HCA's, an environment
# variable's): they stay dicts
MAPPINGS = frozenset({("thresholds",), ("tuning", "sysctl"), ("hardware", "nic_gpu"), ("ddp", "env")})

# dcgmi diag -r N: what each level runs and how long it normally takes (DCGM's dcgmi-diag reference:
# 1 quick deployment checks, seconds; 2 medium, about two minutes; 3 long, about 15 minutes;
# 4 extended, longer). Default time limits leave room above those durations.
DCGM_DIAG_TIMEOUT_S = {1: 300.0, 2: 900.0, 3: 3600.0, 4: 14400.0}


# ---- the derived values: one definition, for the pydantic models and the plain objects alike -------------

class IBRules:
    """(no derived value: the compute rails are each node's, clustercert.checks.rails)"""


class ThresholdRules:
    @property
    def floor(self) -> float | None:
        if self.rated is not None and self.ratio is not None:
            return round(self.rated * self.ratio, 6)
        return self.min


class DcgmDiagRules:
    @property
    def limit_s(self) -> float:
        return self.timeout_s if self.timeout_s is not None else DCGM_DIAG_TIMEOUT_S.get(self.level, 300.0)


class StorageRules:
    @property
    def checkpoint_paths(self) -> list[str]:
        """Where probe.checkpoint_write writes: every mount marked checkpoint, then the scratch."""
        out = [m.path for m in self.mounts if m.checkpoint]
        if self.scratch is not None and self.scratch.checkpoint:
            out.append(self.scratch.mount)
        return out


class ProfileRules:
    @property
    def ddp_ranks(self) -> int:
        """Processes per node the DDP smoke test starts: ddp.ranks_per_node, else one per GPU."""
        return (self.ddp.ranks_per_node if self.ddp and self.ddp.ranks_per_node else None) or self.gpu.count


class Section:
    """A section of a plain profile: its keys as read-only attributes."""

    def __init__(self, values: dict) -> None:
        object.__setattr__(self, "_keys", tuple(values))
        for key, value in values.items():
            object.__setattr__(self, key, value)

    def __setattr__(self, key: str, value) -> None:
        raise AttributeError(f"a profile is read-only ({key})")

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and self.as_dict() == other.as_dict()

    __hash__ = None

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self._keys}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={getattr(self, k)!r}' for k in self._keys)})"


# where in the profile a section gets derived values ("*": any key of a mapping)
_CLASSES = {(): type("Profile", (ProfileRules, Section), {}),
            ("ib",): type("IB", (IBRules, Section), {}),
            ("thresholds", "*"): type("Threshold", (ThresholdRules, Section), {}),
            ("dcgm_diag",): type("DcgmDiag", (DcgmDiagRules, Section), {}),
            ("storage",): type("Storage", (StorageRules, Section), {})}


def _plain(value, path: tuple[str, ...]):
    if isinstance(value, dict):
        if path in MAPPINGS:
            return {k: _plain(v, (*path, "*")) for k, v in value.items()}
        return _CLASSES.get(path, Section)({k: _plain(v, (*path, k)) for k, v in value.items()})
    if isinstance(value, list):  # the models' sequences are tuples
        return tuple(_plain(v, (*path, "[]")) for v in value)
    return value


def profile_of(data: dict) -> Section:
    """A resolved profile's dict (its JSON) as a plain profile."""
    return _plain(data, ())
