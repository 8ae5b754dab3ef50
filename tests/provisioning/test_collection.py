"""The roles as the Ansible collection clustercert.cluster (issue 23.1): `ansible-galaxy collection
build` from the repository root, `ansible-galaxy collection install` into a temporary collections
path, and a site's own playbook that names a role by its FQCN, with nothing of clustercert's but the
collection: no group_vars, roles path, lookup plugins or ansible.cfg. Every role's README shows such a
use with documented variables only, and every example passes the role's argument validation."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from provisioning_helpers import BIN, HERE, REPO, ROLES

import clustercert

NAMESPACE, NAME = "clustercert", "cluster"
FQCN = f"{NAMESPACE}.{NAME}"
MANIFEST = REPO / "roles" / "clustercert_defaults" / "defaults" / "main.yml"
PINS = yaml.safe_load(MANIFEST.read_text())["clustercert_versions"]
FACTS = HERE / "facts"
ROLE_DIRS = sorted(p for p in ROLES.iterdir() if p.is_dir())
# what a play or a role entry may carry besides variables
PLAY_KEYWORDS = {"name", "hosts", "become", "become_user", "gather_facts", "gather_subset", "serial",
                 "max_fail_percentage", "any_errors_fatal", "roles", "tasks", "pre_tasks", "post_tasks",
                 "handlers", "vars", "tags", "environment", "strategy", "order", "check_mode", "diff"}
ROLE_KEYWORDS = {"role", "name", "vars", "tags", "when", "become", "become_user", "tasks_from", "public",
                 "apply", "allow_duplicates", "environment", "delegate_to", "check_mode"}


def run(argv: list[str], env: dict, cwd: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=str(cwd), timeout=timeout)
    assert proc.returncode == 0, " ".join(argv) + "\n" + proc.stdout[-4000:] + proc.stderr[-2000:]
    return proc


def site_env(tmp: Path, collections: Path) -> dict:
    """A site's controller: the installed collection and nothing else of clustercert (no ANSIBLE_* of
    the caller, an empty ansible.cfg and roles path). The test library's recorded_facts module stands
    in for fact gathering, as in render.yml."""
    (tmp / "no-roles").mkdir(exist_ok=True)
    cfg = tmp / "ansible.cfg"
    cfg.write_text("[defaults]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update({
        "ANSIBLE_CONFIG": str(cfg),
        "ANSIBLE_COLLECTIONS_PATH": str(collections),
        "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "False",
        "ANSIBLE_ROLES_PATH": str(tmp / "no-roles"),
        "ANSIBLE_LIBRARY": str(HERE / "library"),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    })
    return env


@pytest.fixture(scope="module")
def collection(tmp_path_factory) -> dict:
    """Build the collection from the repository root and install the tarball into a collections path."""
    tmp = tmp_path_factory.mktemp("collection")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["ANSIBLE_LOCAL_TEMP"] = str(tmp / "ansible-tmp")
    run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(tmp / "dist")], env, REPO)
    tarball = next((tmp / "dist").glob(f"{NAMESPACE}-{NAME}-*.tar.gz"))
    run(
        [str(BIN / "ansible-galaxy"), "collection", "install", "-p", str(tmp / "collections"), str(tarball)],
        env,
        tmp,
    )
    root = tmp / "collections" / "ansible_collections" / NAMESPACE / NAME
    assert root.is_dir()
    return {"tarball": tarball, "collections": tmp / "collections", "root": root}


def test_the_tarball_holds_the_roles_playbooks_plugin_and_runtime_and_no_tool(collection):
    with tarfile.open(collection["tarball"]) as tar:
        names = set(tar.getnames())
        info = json.load(tar.extractfile("MANIFEST.json"))["collection_info"]
    assert (info["namespace"], info["name"], info["version"]) == (NAMESPACE, NAME, clustercert.__version__)
    for path in ("README.md", "meta/runtime.yml", "playbooks/bootstrap.yml", "playbooks/preflight.yml",
                 "playbooks/group_vars/all/profile.yml", "plugins/lookup/clustercert_profile.py",
                 "plugins/filter/clustercert_packages.py", "roles/clustercert_defaults/defaults/main.yml"):
        assert path in names, path
    for role in ROLE_DIRS:
        assert f"roles/{role.name}/README.md" in names
        assert f"roles/{role.name}/meta/argument_specs.yml" in names
    outside = {n.split("/")[0] for n in names} - {
        "MANIFEST.json",
        "FILES.json",
        "README.md",
        "meta",
        "playbooks",
        "plugins",
        "roles",
    }
    assert outside == set(), f"not collection content: {sorted(outside)}"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # no link anywhere: Ansible and ansible-lint read every file as what it is
    assert not [m.name for m in tarfile.open(collection["tarball"]).getmembers() if m.issym() or m.islnk()]
    installed = collection["root"] / "roles/clustercert_defaults/defaults/main.yml"
    assert yaml.safe_load(installed.read_text())["clustercert_versions"] == PINS
    runtime = yaml.safe_load((collection["root"] / "meta/runtime.yml").read_text())
    core = next(d for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
                if d.startswith("ansible-core"))
    assert SpecifierSet(runtime["requires_ansible"]) == SpecifierSet(core.removeprefix("ansible-core"))


RENDER_PLAYBOOK = """\
# A site's own playbook: clustercert's driver role by its FQCN, in render mode (the role's variables and
# side-effect-free preflight for a recorded Ubuntu 22.04 node, its apt pin rendered; nothing installed).
- name: NVIDIA driver with proprietary kernel modules, pinned by clustercert's manifest
  hosts: gpu_nodes
  gather_facts: false
  vars:
    nvidia_driver_modules: proprietary
  tasks:
    - name: Recorded facts of an Ubuntu 22.04 node (instead of gathering)
      recorded_facts:
        path: {facts}
    - name: Resolve the role for that node
      ansible.builtin.include_role:
        name: clustercert.cluster.nvidia_driver
        tasks_from: "{{{{ item }}}}"
        public: true
      loop: [vars.yml, preflight.yml]
    - name: Render the role's apt pin
      ansible.builtin.template:
        src: "{collection}/roles/nvidia_driver/templates/nvidia-driver.pref.j2"
        dest: "{out}/nvidia-driver.pref"
        mode: "0644"
    - name: Record what the role resolved (and a profile through the collection's lookup)
      ansible.builtin.copy:
        dest: "{out}/resolved.json"
        mode: "0644"
        content: >-
          {{{{ {{'branch': nvidia_driver_branch, 'version': nvidia_driver_version,
              'packages': nvidia_driver_package_specs, 'extra_packages': nvidia_driver_extra_packages,
              'lab_profile_driver': (query('clustercert.cluster.clustercert_profile', 'lab') | first).driver.version}}
             | to_nice_json }}}}
"""  # noqa: E501


def test_a_site_playbook_pins_the_driver_from_the_manifest_in_the_collection(collection, tmp_path):
    """`clustercert_versions is undefined` before the collection carried its manifest: here the role,
    named by FQCN, resolves the manifest's pin with only an inventory host and one site variable."""
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "hosts").write_text("[gpu_nodes]\nlocalhost ansible_connection=local\n")
    (tmp_path / "site.yml").write_text(RENDER_PLAYBOOK.format(
        facts=FACTS / "ubuntu2204.json", collection=collection["root"], out=out))
    run(
        [str(BIN / "ansible-playbook"), "-i", "hosts", "site.yml"],
        site_env(tmp_path, collection["collections"]),
        tmp_path,
    )
    resolved = json.loads((out / "resolved.json").read_text())
    branch, version = PINS["driver"]["branch"], PINS["driver"]["version"]
    assert (resolved["branch"], resolved["version"]) == (branch, version)
    assert resolved["packages"] == [
        f"nvidia-driver-{branch}={version}-*",
        f"nvidia-dkms-{branch}={version}-*",
        f"nvidia-compute-utils-{branch}={version}-*",
    ]
    assert resolved["extra_packages"] == ["linux-headers-5.15.0-143-generic"]  # the recorded node's kernel
    assert f"Pin: version {version}-*\nPin-Priority: 1001\n" in (out / "nvidia-driver.pref").read_text()
    assert re.fullmatch(r"\d+\.\d+\.\d+", resolved["lab_profile_driver"])


def spec_options(role: str) -> dict:
    spec = yaml.safe_load((ROLES / role / "meta/argument_specs.yml").read_text())
    return spec["argument_specs"]["main"]["options"]


def readme_examples(role_dir: Path) -> list[dict]:
    """The plays of the README's yaml blocks that are playbooks."""
    plays = []
    for block in re.findall(r"```ya?ml\n(.*?)```", (role_dir / "README.md").read_text(), flags=re.S):
        doc = yaml.safe_load(block)
        if isinstance(doc, list) and doc and all(isinstance(p, dict) and "hosts" in p for p in doc):
            plays += doc
    return plays


def role_uses(play: dict) -> list[tuple[str, dict]]:
    """(role name, the variables it is given) for every role of a play: `roles:` entries and
    include_role/import_role tasks."""
    uses = []
    for entry in play.get("roles", []):
        if isinstance(entry, str):
            uses.append((entry, {}))
        else:
            inline = {k: v for k, v in entry.items() if k not in ROLE_KEYWORDS}
            uses.append((entry.get("role", entry.get("name")), {**inline, **entry.get("vars", {})}))
    for task in play.get("pre_tasks", []) + play.get("tasks", []) + play.get("post_tasks", []):
        for action in (
            "ansible.builtin.include_role",
            "ansible.builtin.import_role",
            "include_role",
            "import_role",
        ):
            if action in task:
                uses.append((task[action]["name"], task.get("vars", {})))
    return uses


@pytest.mark.parametrize("role_dir", ROLE_DIRS, ids=lambda p: p.name)
def test_every_role_readme_shows_a_standalone_use_with_documented_variables(role_dir):
    plays = readme_examples(role_dir)
    assert plays, f"{role_dir.name}/README.md has no example playbook"
    uses = [use for play in plays for use in role_uses(play)]
    assert f"{FQCN}.{role_dir.name}" in [name for name, _ in uses], (
        f"{role_dir.name}: no example names {FQCN}.{role_dir.name}"
    )
    for play in plays:
        assert set(play) <= PLAY_KEYWORDS, (
            f"{role_dir.name}: unexpected play keys {set(play) - PLAY_KEYWORDS}"
        )
        documented = set()
        for name, variables in role_uses(play):
            assert name.startswith(FQCN + "."), f"{role_dir.name}: {name} is not named by its FQCN"
            options = set(spec_options(name.removeprefix(FQCN + ".")))
            assert set(variables) <= options, (
                f"{role_dir.name}: {sorted(set(variables) - options)} undocumented for {name}"
            )
            documented |= options
        assert set(play.get("vars", {})) <= documented, (
            f"{role_dir.name}: play vars not in any role's argument_specs"
        )


def test_the_readme_examples_pass_argument_validation_from_the_installed_collection(collection, tmp_path):
    """Every README's example, run as written against the installed collection (facts recorded instead of
    gathered, privilege escalation off: only the argument validation runs), loads its roles by FQCN
    and resolves their defaults, manifest included."""
    plays = []
    for role_dir in ROLE_DIRS:
        for play in readme_examples(role_dir):
            play = {**play, "gather_facts": False}
            play["pre_tasks"] = [
                {
                    "name": "Recorded facts of an Ubuntu 22.04 node",
                    "tags": ["always"],
                    "recorded_facts": {"path": str(FACTS / "ubuntu2204.json")},
                }
            ] + play.get("pre_tasks", [])
            plays.append(play)
    (tmp_path / "examples.yml").write_text(yaml.safe_dump(plays, sort_keys=False))
    (tmp_path / "hosts").write_text("[gpu_nodes]\nlocalhost ansible_connection=local ansible_become=false\n")
    proc = run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            "hosts",
            "examples.yml",
            "--check",
            "--tags",
            "clustercert-none",
        ],
        site_env(tmp_path, collection["collections"]),
        tmp_path,
    )
    validated = set(
        re.findall(
            rf"TASK \[{re.escape(FQCN)}\.(\w+) : Validating arguments against arg spec 'main'", proc.stdout
        )
    )
    assert validated == {p.name for p in ROLE_DIRS}, proc.stdout[-3000:]


def test_roles_that_read_a_pin_depend_on_the_manifest_role():
    assert not MANIFEST.is_symlink()  # the manifest's one home
    assert set(yaml.safe_load(MANIFEST.read_text())) <= set(spec_options("clustercert_defaults"))
    for role in ROLE_DIRS:
        if role.name == "clustercert_defaults":
            continue
        reads = any("clustercert_versions" in p.read_text() for p in (role / "defaults").glob("*.yml"))
        meta = role / "meta" / "main.yml"
        deps = (yaml.safe_load(meta.read_text()) or {}).get("dependencies", []) if meta.is_file() else []
        names = [d if isinstance(d, str) else d.get("role") for d in deps]
        assert ("clustercert_defaults" in names) == reads, (
            f"{role.name}: reads the manifest={reads}, depends={names}"
        )


def test_the_bundled_playbooks_read_no_private_role_variable():
    for path in (REPO / "playbooks").rglob("*.yml"):
        hits = re.findall(r"\b__[a-z]\w*", path.read_text())
        assert hits == [], f"{path.relative_to(REPO)} reads private role variables: {hits}"
