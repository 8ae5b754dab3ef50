"""The versions manifest: every pin is read by a role (a pin nothing uses is an error), downloads carry
a sha256 field, and the profiles' pins agree with what the manifest and the roles can install."""

from __future__ import annotations

import re

import yaml
from provisioning_helpers import REPO, ROLES

MANIFEST = REPO / "roles" / "clustercert_defaults" / "defaults" / "main.yml"
MAPPING = REPO / "playbooks" / "group_vars" / "all" / "profile.yml"


def pin_paths(tree: dict, prefix: str = "clustercert_versions") -> list[str]:
    """Dotted paths of the manifest's leaves' parents (the unit a role reads: component.key)."""
    out = []
    for key, value in tree.items():
        path = f"{prefix}.{key}"
        if isinstance(value, dict) and key == "downloads":
            out += [f"{path}.{k}" for k in value]
        elif isinstance(value, dict):
            out += [f"{path}.{k}" for k in value]
        else:
            out.append(path)
    return out


def consumers_text() -> str:
    files = [p for p in ROLES.rglob("*.yml")] + [MAPPING]
    return "\n".join(p.read_text() for p in files)


def unused_pins(manifest: dict, text: str) -> list[str]:
    """Pins no role or mapping reads. `downloads` entries are read through nvidia_repos_downloads."""
    unused = []
    for path in pin_paths(manifest["clustercert_versions"]):
        parts = path.split(".")
        if parts[1] == "downloads":
            used = re.search(rf"\b{re.escape(parts[2])}\b", text) is not None
        elif parts[1] == "ofed":
            # ofed.<source> is read as clustercert_versions.ofed[ofed_source] (doca|mlnx) or .ofed.<name>
            used = f"clustercert_versions.ofed.{parts[2]}" in text or (
                "clustercert_versions.ofed[ofed_source]" in text and parts[2] in ("doca", "mlnx"))
        else:
            used = path in text
        if not used:
            unused.append(path)
    return unused


def test_every_pin_is_read_by_a_role():
    manifest = yaml.safe_load(MANIFEST.read_text())
    assert unused_pins(manifest, consumers_text()) == []


def test_an_unused_pin_is_reported():
    manifest = yaml.safe_load(MANIFEST.read_text())
    manifest["clustercert_versions"]["gdrcopy"] = {"version": "2.4.4"}
    manifest["clustercert_versions"]["downloads"]["gdrcopy_tarball"] = {"file": "x.tar.gz", "sha256": ""}
    assert sorted(unused_pins(manifest, consumers_text())) == [
        "clustercert_versions.downloads.gdrcopy_tarball", "clustercert_versions.gdrcopy.version"]


def test_manifest_pins_every_component_the_issue_names():
    pins = yaml.safe_load(MANIFEST.read_text())["clustercert_versions"]
    assert pins["driver"] == {"branch": "570", "version": "570.172.08"}
    assert pins["fabricmanager"]["version"] == pins["driver"]["version"]
    for component in ("cuda", "nccl", "container_toolkit", "dcgm", "perftest", "nccl_tests", "nvbandwidth"):
        assert re.fullmatch(r"\d+(\.\d+)+", pins[component]["version"]), component
    assert set(pins["ofed"]) == {"doca", "mlnx"}
    assert pins["container_toolkit"]["version"] != "1.17.7"
    for name, entry in pins["downloads"].items():
        assert set(entry) == {"file", "sha256"}, name
        assert entry["sha256"] == "" or re.fullmatch(r"[0-9a-f]{64}", entry["sha256"]), name


def test_manifest_defaults_equal_the_h100_profile():
    from clustercert.model.profile import load_profile

    pins = yaml.safe_load(MANIFEST.read_text())["clustercert_versions"]
    h100 = load_profile("h100-sxm-8x-ndr")
    assert (h100.driver.branch, h100.driver.version) == (pins["driver"]["branch"], pins["driver"]["version"])
    assert h100.cuda.version == pins["cuda"]["version"] and h100.nccl.version == pins["nccl"]["version"]
    assert h100.ofed.version == pins["ofed"][h100.ofed.source]
