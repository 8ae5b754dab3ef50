"""Issue 23.3: `clustercert init DIR` writes a commented starter inventory that `clustercert inventory -i DIR`
accepts; a non-empty DIR is refused unless --force."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from clustercert.cli import main
from clustercert.model.inventory import KNOWN_VARS, load_inventory
from clustercert.model.starter import FILES


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("profile", ["h100-sxm-8x-ndr", "a100-sxm-8x-hdr", "lab"])
def test_init_writes_an_inventory_the_inventory_verb_accepts(profile, tmp_path, capsys):
    site = tmp_path / "site"
    rc, out, err = _run(capsys, "init", str(site), "--profile", profile)
    assert rc == 0, err
    assert sorted(str(p.relative_to(site)) for p in site.rglob("*") if p.is_file()) == sorted(FILES)
    assert f"clustercert inventory -i {site}" in out
    rc, out, err = _run(capsys, "inventory", "-i", str(site), "--format", "json")
    assert rc == 0, err
    view = json.loads(out)
    assert sorted(view["hosts"]) == ["node01", "node02"]
    assert {h["address"] for h in view["hosts"].values()} == {"10.0.0.11", "10.0.0.12"}
    assert {h["profile"] for h in view["hosts"].values()} == {profile}
    # the bond failover test has a peer: each host's bond address comes from the inventory
    assert all(h["bond_address"] for h in view["hosts"].values())
    assert view["hosts"]["node01"]["vars"]["clustercert_cluster_name"] == "site"


def test_the_commented_variables_are_known_and_valid(tmp_path, capsys):
    """Uncommenting the optional clustercert_* lines of group_vars/all.yml keeps the inventory valid: no
    typo in the starter (an unknown clustercert_* variable is an error)."""
    site = tmp_path / "site"
    assert _run(capsys, "init", str(site))[0] == 0
    all_yml = site / "group_vars" / "all.yml"
    text = all_yml.read_text()
    commented = re.findall(r"^# (clustercert_[a-z_]+):", text, re.M)
    assert set(commented) >= {
        "clustercert_profile_overrides",
        "clustercert_package_mirror",
        "clustercert_slurm",
        "clustercert_max_parallel_reboots",
        "clustercert_command_timeout_s",
        "clustercert_ntp_servers",
        "clustercert_slurm_gres",
    }
    assert set(commented) <= KNOWN_VARS
    # uncomment the site-wide ones (not the per-host Slurm name, not the second ansible_user block)
    lines = []
    for line in text.splitlines():
        m = re.match(
            r"^(# "
            r"clustercert_(profile_overrides|package_mirror|max_parallel_reboots|command_timeout_s|"
            r"ntp_servers|slurm|slurm_gres)\b.*|#   .*)$",
            line,
        )
        lines.append(line[2:] if m else line)
    all_yml.write_text("\n".join(lines) + "\n")
    inv = load_inventory(str(site))
    h = inv.hosts["node01"]
    assert h.vars.clustercert_slurm is True and h.vars.clustercert_command_timeout_s == 30
    assert h.profile.thresholds["iperf3_ipoib"].floor == 25


def test_known_hosts_note_says_how_to_populate_it(tmp_path, capsys):
    site = tmp_path / "site"
    assert _run(capsys, "init", str(site))[0] == 0
    note = (site / "known_hosts.md").read_text()
    for fragment in (
        "ssh-keyscan",
        "ssh-keygen -lf",
        "@cert-authority",
        "docs/security.md",
        "UserKnownHostsFile",
    ):
        assert fragment in note, fragment
    # the commented ssh args point outside the inventory directory (Ansible would read a file in it)
    line = next(
        x for x in (site / "group_vars" / "all.yml").read_text().splitlines() if "UserKnownHostsFile" in x
    )
    path = Path(line.split("UserKnownHostsFile=")[1].rstrip('"'))
    assert path.is_absolute() and site.resolve() not in path.parents


def test_init_refuses_a_non_empty_directory_unless_force(tmp_path, capsys):
    site = tmp_path / "site"
    site.mkdir()
    (site / "mine.txt").write_text("keep me\n")
    rc, out, err = _run(capsys, "init", str(site))
    assert rc == 2 and err.count("\n") == 1 and f"{site}: is not empty (mine.txt)" in err and "--force" in err
    assert sorted(p.name for p in site.iterdir()) == ["mine.txt"]  # nothing written
    rc, out, err = _run(capsys, "init", str(site), "--force", "--profile", "lab")
    assert rc == 0, err
    assert (site / "mine.txt").read_text() == "keep me\n" and (site / "hosts.yml").is_file()
    (site / "hosts.yml").write_text("changed\n")
    assert _run(capsys, "init", str(site), "--force")[0] == 0
    assert (site / "hosts.yml").read_text().startswith("# clustercert starter inventory")
    assert _run(capsys, "inventory", "-i", str(site))[0] == 0


def test_init_into_an_empty_existing_directory(tmp_path, capsys):
    assert _run(capsys, "init", str(tmp_path))[0] == 0
    assert (tmp_path / "hosts.yml").is_file()


@pytest.mark.parametrize("setup, argv, fragment", [
    ("file", [], "exists and is not a directory"),
    (None, ["--profile", "h200-made-up"], "unknown profile 'h200-made-up'"),
])
def test_init_bad_input_is_one_line(setup, argv, fragment, tmp_path, capsys):
    target = tmp_path / "site"
    if setup == "file":
        target.write_text("x")
    rc, _out, err = _run(capsys, "init", str(target), *argv)
    assert rc == 2 and err.count("\n") == 1 and fragment in err, err
    if setup is None:
        assert not target.exists()


def test_init_with_a_profile_file(tmp_path, capsys):
    from clustercert.model.profile import profile_source

    own = tmp_path / "my-node.yml"
    own.write_text(profile_source("lab").read_text().replace("name: lab", "name: my-node"))
    site = tmp_path / "site"
    assert _run(capsys, "init", str(site), "--profile", str(own))[0] == 0
    assert f"clustercert_profile: {own}" in (site / "group_vars" / "all.yml").read_text()
    assert load_inventory(str(site)).hosts["node02"].profile.name == "my-node"


def test_readme_first_steps_use_init():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    first = readme.split("## First steps", 1)[1].split("\n## ", 1)[0]
    assert "clustercert init" in first and "clustercert inventory -i" in first and "known_hosts" in first
