"""Inventory loading and validation: every verb runs this before it runs anything.

Ansible itself parses the inventory (so INI, YAML, directories, group_vars/host_vars behave exactly as
they do for ansible-playbook); before that, clustercert reads every file strictly (malformed YAML,
duplicate keys and duplicate hosts are errors that name the file and line), and after it checks
every host's ``clustercert_*`` variables against a schema: an unknown ``clustercert_*`` variable is an
error, because a typo must not silently disable a check.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from pathlib import Path
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

from clustercert import paths
from clustercert.errors import InputError
from clustercert.model import names, vault
from clustercert.model.bounded import MAX_CONFIG_BYTES, check_time, input_budget, read_text_bounded
from clustercert.model.profile import (
    Profile,
    builtin_profiles,
    format_validation_error,
    load_profile,
    profile_source,
)
from clustercert.model.strict_yaml import loads

PREFIX = "clustercert_"
YAML_SUFFIXES = (".yml", ".yaml")
GROUP_KEYS = {"hosts", "vars", "children"}
MAX_HOSTS = 10000  # a host range (node[0001:99999]) that expands past this is a typo, not a cluster
RANGE_RE = re.compile(r"\[([0-9]+|[a-zA-Z]):([0-9]+|[a-zA-Z])(?::([0-9]+))?\]")


class InventoryVars(BaseModel):
    """The ``clustercert_*`` variables a host may carry. Anything else with the prefix is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clustercert_profile: StrictStr = Field(min_length=1)
    clustercert_profile_overrides: dict = Field(default_factory=dict)
    clustercert_cluster_name: StrictStr | None = None
    clustercert_package_mirror: Annotated[StrictStr, Field(pattern=r"^(https?|file)://\S+$")] | None = None
    clustercert_max_parallel_reboots: Annotated[StrictInt, Field(ge=1, le=1000)] = 1
    clustercert_fabric_addresses: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    clustercert_sm_priority: Annotated[StrictInt, Field(ge=0, le=15)] | None = None
    clustercert_slurm: StrictBool = False
    clustercert_slurm_node_name: (
        Annotated[StrictStr, AfterValidator(lambda v: names.validate("slurm_node", v))] | None
    ) = None
    # the GRES the pair NCCL step asks for per node (a name, or name:type), times the profile's gpu.count;
    # null where Slurm has no GPU GRES
    clustercert_slurm_gres: StrictStr | None = "gpu"
    # the failure domain (rack, leaf switch) the node sits in: round 1 of the pair probes never pairs two
    # nodes of one domain where it can avoid it
    clustercert_rack: Annotated[StrictStr, AfterValidator(lambda v: names.validate("name", v))] | None = None
    clustercert_command_timeout_s: Annotated[StrictInt, Field(ge=1, le=3600)] = 30
    # torchrun --nproc_per_node of the DDP smoke test, where a site's job template launches another count than
    # the profile's ddp ranks per node: the test then fails with the mismatch named (null: the profile's)
    clustercert_ddp_nproc_per_node: Annotated[StrictInt, Field(ge=1, le=64)] | None = None
    clustercert_ntp_servers: list[
        Annotated[StrictStr, AfterValidator(lambda v: names.validate("host", v))]
    ] = Field(default_factory=list)

    @field_validator("clustercert_fabric_addresses")
    @classmethod
    def _cidrs(cls, value: dict[str, str]) -> dict[str, str]:
        for netdev, cidr in value.items():
            reason = names.check_ifname(netdev)
            if reason:
                raise ValueError(f"key {reason}")
            try:
                ipaddress.ip_interface(cidr)
            except ValueError:
                raise ValueError(
                    f"{netdev}: {cidr!r} is not an address with prefix (e.g. 10.1.0.5/24)"
                ) from None
        return value

    @field_validator("clustercert_slurm_gres")
    @classmethod
    def _gres(cls, value: str | None) -> str | None:
        if value is None:
            return value
        name, colon, typ = value.partition(":")
        bad_type = colon and (typ.isdigit() or not re.fullmatch(r"[A-Za-z0-9_.-]+", typ))
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name) or bad_type:
            raise ValueError(f"{value!r} is not a GRES name with an optional type (gpu, gpu:h100), written "
                             "without a count: the step asks for the profile's gpu.count per node")
        return value


KNOWN_VARS = frozenset(InventoryVars.model_fields)

# A role variable clustercert reads too: the bond's address (the ib_redundancy role configures it; the
# bond failover test pings it from another node). When a host does not set it, the playbooks derive it
# from clustercert_fabric_addresses.<bond name>, and so does clustercert.
BOND_ADDRESS_VAR = "ib_redundancy_bond_address"


@dataclass
class HostView:
    name: str
    groups: list[str]
    vars: InventoryVars
    profile: Profile
    connection: dict = field(default_factory=dict)  # ansible_* variables, for display and testinfra
    bond_address: str | None = None  # the bond's address/prefix (see bond_address()); None: unknown or none
    # where clustercert_profile came from: "host var", "group NAME" or "all" (Ansible's precedence decided it)
    profile_origin: str = "all"


@dataclass
class Inventory:
    source: Path
    hosts: dict[str, HostView]
    files: list[Path]

    @property
    def profiles(self) -> dict[str, Profile]:
        return {h.profile.name: h.profile for h in self.hosts.values()}

    @property
    def cluster_name(self) -> str:
        """The inventory's clustercert_cluster_name, else its file or directory name."""
        return (
            next(
                (
                    h.vars.clustercert_cluster_name
                    for h in self.hosts.values()
                    if h.vars.clustercert_cluster_name
                ),
                None,
            )
            or self.source.name
        )


def resolve_inventory_arg(arg: str | None) -> Path:
    """``-i`` value to a path: ``sample:NAME`` is a bundled sample (clustercert.commands.common resolves
    ``lab``, the running lab's inventory, before this)."""
    if arg is None:
        env = os.environ.get("CLUSTERCERT_INVENTORY")
        if not env:
            raise InputError(
                "-i/--inventory", None, "no inventory given (use -i PATH, or -i lab for the lab)"
            )
        arg = env
    if arg.startswith(SAMPLE_PREFIX) and not Path(arg).exists():
        return sample_inventory(arg.removeprefix(SAMPLE_PREFIX))
    return Path(arg)


SAMPLE_PREFIX = "sample:"


def sample_inventories() -> dict[str, Path]:
    """The sample inventories shipped with clustercert (a wheel carries them in the package): short name
    (``h100`` for ``h100-sample``) -> directory."""
    base = paths.sample_inventory_dir()
    return (
        {p.name.removesuffix("-sample"): p for p in sorted(base.iterdir()) if p.is_dir()}
        if base.is_dir()
        else {}
    )


def sample_inventory(name: str) -> Path:
    """``-i sample:NAME``: a bundled sample inventory, found wherever clustercert is installed."""
    samples = sample_inventories()
    key = name.removesuffix("-sample")
    if key not in samples:
        raise InputError("-i/--inventory", f"{SAMPLE_PREFIX}{name}",
                         "no such sample inventory (samples: "
                         f"{', '.join(SAMPLE_PREFIX + k for k in samples) or 'none'}; `clustercert init DIR` "
                         "writes a starter inventory of your own)")
    return samples[key]


def _range_count(host: str) -> int:
    """How many hosts an Ansible host pattern such as ``node[0001:0100]`` or ``rack[a:c]-n[1:8]`` expands
    to."""
    count = 1
    for m in RANGE_RE.finditer(host):
        start, end, step = m.group(1), m.group(2), int(m.group(3) or 1)
        if start.isdigit() != end.isdigit():
            return count
        lo, hi = (int(start), int(end)) if start.isdigit() else (ord(start), ord(end))
        count *= max(0, (hi - lo) // max(step, 1) + 1)
    return count


def _check_range(path: Path, where: str, host: str, total: list[int]) -> None:
    check_time()
    n = _range_count(str(host))
    total[0] += n
    if n > MAX_HOSTS or total[0] > MAX_HOSTS:
        raise InputError(str(path), where, f"host pattern {str(host)!r} expands to {n} hosts (the inventory "
                                           f"would hold more than {MAX_HOSTS}: a typo in the range?)")


def _check_tree(root: Path) -> None:
    """Refuse symlink loops (and dangling links) under an inventory directory before anything walks it:
    Ansible and rglob would otherwise recurse or fail with an OS error."""
    seen: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=None):
        check_time()
        st = os.stat(dirpath)
        ident = (st.st_dev, st.st_ino)
        if ident in seen:
            raise InputError(
                dirpath, None, "symlink loop in the inventory (a directory links back to one above it)"
            )
        seen.add(ident)
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            if full.is_symlink():
                try:
                    full.resolve(strict=True)
                except (OSError, RuntimeError):
                    raise InputError(
                        str(full), None, "symlink loop or dangling symlink in the inventory"
                    ) from None


def _check_inventory_path(path: Path) -> None:
    """The inventory exists (not through a broken symlink), and nothing under it that Ansible walks is a
    broken symlink."""
    if path.is_symlink():
        try:
            path.resolve(strict=True)
        except (OSError, RuntimeError):
            raise InputError(str(path), None, "symlink loop or dangling symlink") from None
    if not path.exists():
        raise InputError(str(path), None, "inventory not found")
    if path.is_dir():
        _check_tree(path)
    else:  # a file's directory may be anything (a home directory): walk only the var directories beside it
        for sub in ("group_vars", "host_vars"):
            if (path.parent / sub).is_dir():
                _check_tree(path.parent / sub)


def _var_files(base: Path) -> list[Path]:
    """The group_vars/host_vars files under ``base`` Ansible reads (YAML, JSON, or no suffix)."""
    var_files: list[Path] = []
    for sub in ("group_vars", "host_vars"):
        d = base / sub
        if d.is_dir():
            var_files += [p for p in sorted(d.rglob("*"))
                          if p.is_file() and (p.suffix in YAML_SUFFIXES or p.suffix in ("", ".json"))]
    return var_files


def _inventory_files(path: Path) -> tuple[list[Path], list[Path]]:
    """(inventory source files, group_vars/host_vars files) that Ansible will read for ``path``."""
    _check_inventory_path(path)
    if path.is_dir():
        sources = sorted(
            p
            for p in path.iterdir()
            if p.is_file()
            and not p.name.startswith(".")
            and p.suffix not in (".md", ".txt", ".cfg", ".retry")
            and not p.name.endswith("~")
        )
        base = path
    else:
        sources = [path]
        base = path.parent
    if not os.access(path, os.R_OK):
        raise InputError(str(path), None, "inventory is not readable (permission denied)")
    return sources, _var_files(base)


def _looks_yaml(path: Path, text: str) -> bool:
    if path.suffix in YAML_SUFFIXES:
        return True
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith(("#", ";")):
            continue
        return not s.startswith("[") and bool(re.match(r"^[\w.-]+:\s*(#.*)?$", s)) or s == "---"
    return False


def _check_group_hosts(path: Path, hosts, trail: str, total: list[int]) -> None:
    if hosts is not None and not isinstance(hosts, dict):
        raise InputError(str(path), f"{trail}.hosts", "hosts must be a mapping of host names")
    for host, hvars in (hosts or {}).items():
        _check_range(path, f"{trail}.hosts.{host}", host, total)
        if hvars is not None and not isinstance(hvars, dict):
            raise InputError(str(path), f"{trail}.hosts.{host}", "host variables must be a mapping")


def _check_yaml_group(path: Path, body, trail: str, total: list[int]) -> None:
    """One group of a YAML inventory (``trail``: where it is): hosts, vars and children of the right shape,
    host ranges within bounds (``total``: hosts so far), and each child group in turn."""
    if body is None:
        return
    if not isinstance(body, dict):
        raise InputError(str(path), trail, "a group must be a mapping with hosts, vars or children")
    for key in body:
        if key not in GROUP_KEYS:
            raise InputError(str(path), f"{trail}.{key}", "unknown key (expected hosts, vars or children)")
    _check_group_hosts(path, body.get("hosts"), trail, total)
    gvars = body.get("vars")
    if gvars is not None and not isinstance(gvars, dict):
        raise InputError(str(path), f"{trail}.vars", "vars must be a mapping")
    children = body.get("children")
    if children is not None and not isinstance(children, dict):
        raise InputError(str(path), f"{trail}.children", "children must be a mapping of groups")
    for child, cbody in (children or {}).items():
        _check_yaml_group(path, cbody, f"{trail}.children.{child}", total)


def _check_yaml_inventory(path: Path, data) -> None:
    if data is None:
        raise InputError(str(path), None, "inventory is empty")
    if not isinstance(data, dict):
        raise InputError(str(path), None, "a YAML inventory must be a mapping of groups")
    total = [0]
    for group, body in data.items():
        _check_yaml_group(path, body, str(group), total)


def _check_ini_inventory(path: Path, text: str) -> None:
    section = "ungrouped"
    seen: dict[str, set[str]] = {}
    total = [0]
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not lineno & 1023:
            check_time()
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise InputError(str(path), f"line {lineno}", f"malformed section header {line!r}")
            section = line[1:-1]
            continue
        if ":" in section:  # [group:vars] / [group:children]
            continue
        host = line.split()[0]
        _check_range(path, f"line {lineno}", host, total)
        if host in seen.setdefault(section, set()):
            raise InputError(str(path), f"line {lineno}", f"duplicate host {host!r} in group [{section}]")
        seen[section].add(host)


def _read_text(path: Path) -> str:
    return read_text_bounded(path, MAX_CONFIG_BYTES, "inventory file")


def precheck_files(path: Path) -> list[Path]:
    sources, var_files = _inventory_files(path)
    if not sources:
        raise InputError(str(path), None, "inventory directory holds no inventory file")
    for src in sources:
        text = _read_text(src)
        if not text.strip():
            raise InputError(str(src), None, "inventory is empty")
        if _looks_yaml(src, text):
            _check_yaml_inventory(src, vault.reveal(loads(text, str(src)), str(src)))
        else:
            _check_ini_inventory(src, text)
    for vf in var_files:
        data = _load_vars(vf)
        if data is not None and not isinstance(data, dict):
            raise InputError(str(vf), None, "variables file must be a YAML mapping")
    return sources + var_files


def _load_vars(path: Path):
    """A group_vars/host_vars file strictly read, a vaulted file or inline ``!vault`` values decrypted
    (InputError naming the file and the key where no vault password given decrypts them)."""
    text = _read_text(path)
    if vault.is_vaulted_text(text):
        text = vault.decrypt(text, str(path), None)
    return vault.reveal(loads(text, str(path)), str(path))


def _locate(files: list[Path], key: str, default: Path) -> str:
    """The file that defines ``key`` (for error messages): host_vars first, then group_vars, then
    inventory."""
    pattern = re.compile(rf"(^|[\s{{,]){re.escape(key)}\s*[:=]", re.M)
    ranked = sorted(files, key=lambda p: 0 if "host_vars" in p.parts else 1 if "group_vars" in p.parts else 2)
    for f in ranked:
        try:
            if pattern.search(f.read_text(encoding="utf-8", errors="replace")):
                return str(f)
        except OSError:
            continue
    return str(default)


def _var_file_values(files: list[Path], kind: str, key: str) -> dict[str, tuple[object, Path]]:
    """{group or host name: (value of ``key``, file)} from group_vars/ or host_vars/ files."""
    out: dict[str, tuple[object, Path]] = {}
    for f in files:
        parts = f.parts
        if kind not in parts:
            continue
        rel = parts[parts.index(kind) + 1:]
        owner = rel[0] if len(rel) > 1 else (f.stem if f.suffix in YAML_SUFFIXES + (".json",) else f.name)
        data = _load_vars(f)
        if isinstance(data, dict) and key in data:
            out[owner] = (data[key], f)
    return out


# What a host's groups must not set differently (Ansible would pick one by group depth and name, silently)
CONFLICT_KEYS = {"clustercert_profile": "profiles", "clustercert_profile_overrides": "threshold overrides"}


def _group_setters(h, key: str, gfiles: dict, sources: list[Path], path: Path) -> tuple[list[tuple], bool]:
    """The groups of host ``h`` that set ``key`` other than "all", as (group, value, file), and whether
    "all" sets it."""
    setters, in_all = [], False
    for g in h.get_groups():
        if g.name == "all":
            in_all = key in g.get_vars() or "all" in gfiles
            continue
        if key in g.get_vars():
            setters.append((g, vault.plain(g.get_vars()[key]), _locate(sources, key, path)))
        elif g.name in gfiles:
            setters.append((g, gfiles[g.name][0], str(gfiles[g.name][1])))
    return setters, in_all


def _refuse_conflicts(h, key: str, what: str, setters: list[tuple]) -> None:
    """InputError when two groups of the host, neither an ancestor of the other, set different values."""
    for i, (g1, v1, _f1) in enumerate(setters):
        for g2, v2, f2 in setters[i + 1:]:
            related = g1 in g2.get_ancestors() or g2 in g1.get_ancestors()
            if v1 != v2 and not related:
                raise InputError(f2, key, f"host {h.name} is in groups {g1.name} ({v1}) and {g2.name} "
                                          f"({v2}) with different {what}: set it once for the host "
                                          "(host_vars), or in one group")


def _group_origin(setters: list[tuple], in_all: bool) -> str:
    """The group Ansible's precedence takes (the deepest, then the highest ansible_group_priority, then the
    last by name), else "all" or "default"."""
    if setters:
        win = max(setters, key=lambda s: (s[0].depth, s[0].priority, s[0].name))[0]
        return f"group {win.name}"
    return "all" if in_all else "default"


def _profile_conflict(path: Path, files: list[Path], inv) -> dict[str, str]:
    """The same host in two groups (neither a child of the other) that set a different clustercert_profile
    (or clustercert_profile_overrides): refused unless the host itself sets it. Returns where each host's
    clustercert_profile comes from: "host var", "group NAME" (the group Ansible's precedence takes: the
    deepest, then the highest ansible_group_priority, then the last by name) or "all"."""
    sources = [f for f in files if "group_vars" not in f.parts and "host_vars" not in f.parts]
    origins: dict[str, str] = {}
    for key, what in CONFLICT_KEYS.items():
        gfiles = _var_file_values(files, "group_vars", key)
        hfiles = _var_file_values(files, "host_vars", key)
        for h in inv.get_hosts(pattern="all"):
            if key in h.get_vars() or h.name in hfiles:
                if key == "clustercert_profile":
                    origins[h.name] = "host var"
                continue
            setters, in_all = _group_setters(h, key, gfiles, sources, path)
            _refuse_conflicts(h, key, what, setters)
            if key == "clustercert_profile":
                origins[h.name] = _group_origin(setters, in_all)
    return origins


def _ansible_hosts(path: Path, limit: str | None, files: list[Path] | None = None
                   ) -> tuple[list[tuple[str, list[str], dict]], set[str] | None, dict[str, str]]:
    """(every host as (name, groups, variables), the names ``limit`` selects or None without a limit, where
    each host's clustercert_profile comes from).
    A limit never widens: an empty pattern, a part that matches no host, or one Ansible cannot parse is an
    error."""
    os.environ.setdefault("ANSIBLE_INVENTORY_UNPARSED_WARNING", "False")
    os.environ.setdefault("ANSIBLE_LOCALHOST_WARNING", "False")
    # imported here, after the settings above: Ansible reads its ANSIBLE_* configuration when first imported
    from ansible import constants as C
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager, split_host_pattern
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    C.INVENTORY_UNPARSED_IS_FAILED = True
    # Ansible's default order tries the `auto` plugin before `yaml`: on a plain YAML inventory auto reads the
    # whole file (and deep-copies it) only to find no `plugin:` key, then yaml reads it again. yaml first
    # reads it once (precheck_files already refuses plugin configuration files; were one let through, yaml
    # would refuse it as "not YAML inventory" and auto would still take it).
    enabled = list(C.INVENTORY_ENABLED)
    if "auto" in enabled and "yaml" in enabled and enabled.index("auto") < enabled.index("yaml"):
        enabled.remove("auto")
        enabled.insert(enabled.index("yaml") + 1, "auto")
        C.INVENTORY_ENABLED = enabled
    class _Loader(DataLoader):
        def load_from_file(
            self, file_name, cache="all", unsafe=False, json_only=False, trusted_as_template=False
        ):
            # a file read with cache="none" (the inventory plugins read their source so) is parsed afresh and
            # held by nobody else: DataLoader's deep copy of it protects nothing and costs as much as the
            # parse
            return super().load_from_file(
                file_name, cache, unsafe or cache == "none", json_only, trusted_as_template
            )

    loader = _Loader()
    vault.install_in_ansible(loader)
    # Ansible's own warnings (e.g. an unmatched --limit pattern) would add lines to our one-line errors.
    try:
        from ansible.utils.display import Display

        Display().verbosity = 0
        C.LOCALHOST_WARNING = False
        C.HOST_PATTERN_MISMATCH = "ignore"
    except Exception:  # noqa: BLE001 - cosmetic only
        pass
    # the time budget is checked around Ansible's parse, never inside it (Ansible would catch the exception
    # and print its own warnings); the strict pre-check has read every file already, so this part is bounded
    # by it
    check_time()
    try:
        inv = InventoryManager(loader=loader, sources=[str(path)])
        check_time()
    except AnsibleError as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(str(path), None, f"Ansible cannot parse the inventory: {msg}") from None
    origins = _profile_conflict(path, files, inv) if files is not None else {}
    limited: set[str] | None = None
    if limit is not None:
        limited = _limit(inv, path, limit, split_host_pattern, AnsibleError)
    try:
        vm = VariableManager(loader=loader, inventory=inv)
        out = []
        for h, variables in _host_variables(inv, loader, vm):
            # only the variables clustercert reads: Ansible's magic variables (``groups`` lists every host)
            # would make decrypting each host's variables quadratic in the inventory's size
            hv = vault.plain({k: v for k, v in variables.items() if _wanted(k)})
            out.append((h.name, sorted(g.name for g in h.get_groups() if g.name != "all"), hv))
        return out, limited, origins
    except AnsibleError as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(str(path), None, f"Ansible cannot parse the inventory: {msg}") from None


# VariableManager.get_vars' group-level precedence entries (ansible.cfg's VARIABLE_PRECEDENCE), each a merge
# that depends only on the host's groups
_GROUP_LEVEL = frozenset({"all_inventory", "all_plugins_inventory", "all_plugins_play", "groups_inventory",
                          "groups_plugins_inventory", "groups_plugins_play"})


def _host_variables_by_ansible(hosts, vm):
    """(host, its inventory variables) from VariableManager.get_vars itself, one host at a time."""
    for h in hosts:
        check_time()
        yield h, vm.get_vars(host=h, include_hostvars=False)


def _host_variables(inv, loader, vm):
    """(host, its inventory variables) for every host, merged as Ansible's VariableManager.get_vars merges
    them for a host outside a play: the group-level entries of VARIABLE_PRECEDENCE in their order, then the
    host's own variables, its inventory-adjacent and play-adjacent host_vars (the vars plugins). The
    group-level part is merged once per set of groups, not once per host: get_vars costs milliseconds a host
    (it rescans the vars and connection plugins and cleans facts each time), which made a 10,000-host
    inventory take minutes. Facts are left out: clustercert reads no fact (and Ansible strips connection
    variables from facts). A precedence setting this does not know falls back to get_vars itself."""
    from ansible import constants as C
    from ansible.inventory.helpers import get_group_vars, sort_groups
    from ansible.utils.vars import combine_vars
    from ansible.vars.plugins import get_vars_from_inventory_sources, get_vars_from_path

    hosts = inv.get_hosts(pattern="all")
    if not set(C.VARIABLE_PRECEDENCE) <= _GROUP_LEVEL:
        yield from _host_variables_by_ansible(hosts, vm)
        return
    stage = "task"  # get_vars' default
    basedirs = [loader.get_basedir()] if vm.safe_basedir else []

    def merged(data: dict, new: dict) -> dict:
        return data if new == {} else combine_vars(data, new)

    def plugins_inventory(entities) -> dict:
        return get_vars_from_inventory_sources(loader, inv._sources, entities, stage)

    def plugins_play(entities) -> dict:
        data: dict = {}
        for path in basedirs:
            data = merged(data, get_vars_from_path(loader, path, entities, stage))
        return data

    all_group = inv.groups.get("all")
    by_groups: dict[tuple[str, ...], dict] = {}
    for h in hosts:
        check_time()
        groups = sort_groups([g for g in h.get_groups() if g.name != "all"])
        key = tuple(g.name for g in groups)
        if key not in by_groups:
            entries = {
                "all_inventory": lambda: all_group.get_vars(),
                "all_plugins_inventory": lambda: plugins_inventory([all_group]),
                "all_plugins_play": lambda: plugins_play([all_group]),
                "groups_inventory": lambda groups=groups: get_group_vars(groups),
                "groups_plugins_inventory": lambda groups=groups: plugins_inventory(groups),
                "groups_plugins_play": lambda groups=groups: plugins_play(groups),
            }
            data: dict = {}
            for entry in C.VARIABLE_PRECEDENCE:
                data = merged(data, entries[entry]())
            by_groups[key] = data
        data = by_groups[key]
        for new in (h.get_vars(), plugins_inventory([h]), plugins_play([h])):
            data = merged(data, new)
        yield h, data


def _wanted(key: str) -> bool:
    """A host variable load_inventory reads: clustercert_*, the ansible_* connection variables (the become
    password's names among them), the bond address."""
    return (key.startswith(PREFIX) or key in _CONN_KEYS or key in _BECOME_PASSWORD_NAMES
            or key == BOND_ADDRESS_VAR)


def _limit(inv, path: Path, limit: str, split_host_pattern, ansible_error) -> set[str]:
    if not limit.strip():
        raise InputError("--limit", None, "empty pattern (name hosts or groups; `all` selects every host)")
    if "\n" in limit or not limit.isprintable():
        raise InputError("--limit", None, f"pattern {limit!r} holds a newline or another control character")
    try:
        parts = split_host_pattern(limit)
        if not parts or any(not p.strip() for p in parts) or limit.strip().endswith((",", ":")):
            raise InputError("--limit", None, f"pattern {limit!r} has an empty part")
        for part in parts:
            bare = part.lstrip("!&")
            if not bare:
                raise InputError("--limit", None, f"pattern {limit!r}: {part!r} names no host or group")
            if not inv.get_hosts(pattern=bare):
                which = f"pattern {limit!r}" + (f": {bare!r}" if len(parts) > 1 else "")
                raise InputError("--limit", None, f"{which} matches no host in {path} (a limit never widens)")
        selected = {h.name for h in inv.get_hosts(pattern=limit)}
    except ansible_error as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError("--limit", None, f"pattern {limit!r} does not parse: {msg}") from None
    if not selected:
        raise InputError("--limit", None, f"pattern {limit!r} matches no host in {path}")
    return selected


def _check_connection(name: str, hv: dict, where: Callable[[str], str]) -> None:
    """Connection variables and the host's own name reach ssh's argv, mpirun's -H and remote shells."""
    reason = names.check_inventory_host(name)
    if reason:
        raise InputError(where("ansible_host"), f"host {name!r}", reason)
    checks = {"ansible_host": "host", "ansible_port": "port", "ansible_user": "user",
              "ansible_ssh_private_key_file": "local_path", "ansible_python_interpreter": "interpreter"}
    for key, kind in checks.items():
        value = hv.get(key)
        if value is None or (isinstance(value, str) and "{{" in value):
            continue  # unset, or a template Ansible evaluates
        reason = names.CHECKS[kind](value)
        if reason:
            raise InputError(where(key), key, f"{reason} (host {name})")
    if "ansible_host" not in hv:
        reason = names.check_host(name)
        if reason:
            raise InputError(where("ansible_host"), f"host {name!r}", f"{reason}; without ansible_host the "
                                                                        "name is the address ssh connects "
                                                                        "to")
    common = hv.get("ansible_ssh_common_args")
    if isinstance(common, str) and not common.replace("\t", " ").isprintable():
        raise InputError(where("ansible_ssh_common_args"), "ansible_ssh_common_args",
                         f"holds a newline or another control character (host {name})")


def load_inventory(arg: str | None, limit: str | None = None) -> Inventory:
    path = resolve_inventory_arg(arg)
    with input_budget(str(path)):
        return _load_inventory(path, limit)


def _inventory_vars(name: str, hv: dict, files: list[Path], path: Path) -> InventoryVars:
    """Host ``name``'s clustercert_* variables, validated: each one known, clustercert_profile set."""
    cc = {k: v for k, v in hv.items() if k.startswith(PREFIX)}
    for key in sorted(cc):
        if key not in KNOWN_VARS:
            close = [k for k in KNOWN_VARS if _similar(k, key)]
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise InputError(
                _locate(files, key, path), key, f"unknown clustercert variable on host {name}{hint}"
            )
    if "clustercert_profile" not in cc:
        raise InputError(
            str(path), "clustercert_profile",
            f"required variable is missing for host {name} (set it in group_vars, e.g. clustercert_profile: "
            "h100-sxm-8x-ndr)",
        )
    try:
        return InventoryVars.model_validate(cc)
    except ValidationError as exc:
        key, reason = format_validation_error(exc)
        top = key.split(".")[0]
        raise InputError(_locate(files, top, path), key, f"{reason} (host {name})") from None


def _load_inventory(path: Path, limit: str | None) -> Inventory:
    files = precheck_files(path)
    entries, limited, origins = _ansible_hosts(path, limit, files)
    if not entries:
        raise InputError(str(path), None, "inventory defines no hosts")
    if limited is not None:
        entries = [e for e in entries if e[0] in limited]

    profiles_cache: dict[tuple[str, str], Profile] = {}
    hosts: dict[str, HostView] = {}
    for name, groups, hv in entries:
        check_time()
        _check_connection(name, hv, lambda key: _locate(files, key, path))
        ivars = _inventory_vars(name, hv, files, path)
        ov_key = repr(sorted(ivars.clustercert_profile_overrides.items()))
        cache_key = (ivars.clustercert_profile, ov_key)
        if cache_key not in profiles_cache:
            where = _locate(files, "clustercert_profile", path)
            if not profile_source(ivars.clustercert_profile).is_file():
                raise InputError(
                    where, "clustercert_profile",
                    f"unknown profile {ivars.clustercert_profile!r} for host {name} (built-in: "
                    f"{', '.join(builtin_profiles())})",
                )
            profiles_cache[cache_key] = load_profile(
                ivars.clustercert_profile,
                ivars.clustercert_profile_overrides or None,
                overrides_source=_locate(files, "clustercert_profile_overrides", path),
            )
        connection = {
            k: v for k, v in hv.items() if k.startswith("ansible_") and "pass" not in k and k in _CONN_KEYS
        }
        connection.update(connection_defaults(connection))
        become_pass = become_password(hv)
        if become_pass is not None:
            connection[BECOME_PASSWORD_VAR] = become_pass
        baddr = bond_address(
            hv, ivars, profiles_cache[cache_key], name, lambda: _locate(files, BOND_ADDRESS_VAR, path)
        )
        hosts[name] = HostView(name, groups, ivars, profiles_cache[cache_key], connection, baddr,
                               origins.get(name, "all"))
    return Inventory(path.resolve(), hosts, files)


# What `-u/--user` and `--private-key` set (clustercert.cli puts them into the environment, as Ansible's own
# config does): the login user and key for hosts whose inventory sets none. Inventory variables win, as
# they do over ansible-playbook's -u.
CONNECTION_ENV = {"ansible_user": ("ANSIBLE_REMOTE_USER", "user"),
                  "ansible_ssh_private_key_file": ("ANSIBLE_PRIVATE_KEY_FILE", "local_path")}


def connection_defaults(connection: dict) -> dict:
    """The connection variables ``connection`` lacks that ANSIBLE_REMOTE_USER / ANSIBLE_PRIVATE_KEY_FILE give
    (validated like inventory values: InputError naming the variable)."""
    out = {}
    for key, (env, kind) in CONNECTION_ENV.items():
        value = os.environ.get(env)
        if key in connection or not value or connection.get("ansible_connection") == "local":
            continue
        reason = names.CHECKS[kind](value)
        if reason:
            raise InputError(env, value, reason)
        out[key] = value
    return out


# The inventory's become password (Ansible's names for it, the first one set; vaulted or not): the collector's
# `sudo -S` reads it (collect/ssh.py become_argv), before -K's ANSIBLE_BECOME_PASS, as Ansible's variables
# come before its command line. Kept as vault.Hidden: no repr, str or JSON of the connection shows it.
BECOME_PASSWORD_VAR = "ansible_become_password"
_BECOME_PASSWORD_NAMES = ("ansible_become_password", "ansible_become_pass")


def become_password(hv: dict) -> vault.Hidden | None:
    for key in _BECOME_PASSWORD_NAMES:
        value = hv.get(key)
        # a template: Ansible's to evaluate, not ours
        if isinstance(value, str) and value and "{{" not in value:
            return vault.Hidden(value)
    return None


_CONN_KEYS = {
    "ansible_host", "ansible_port", "ansible_user", "ansible_connection", "ansible_ssh_private_key_file",
    "ansible_ssh_common_args", "ansible_python_interpreter",
    "ansible_become", "ansible_become_method", "ansible_become_user",
}


def bond_address(
    hv: dict, ivars: InventoryVars, profile: Profile, name: str, where: Callable[[], str]
) -> str | None:
    """The host's bond address/prefix: ``ib_redundancy_bond_address`` when the inventory sets it (validated),
    else ``clustercert_fabric_addresses[<bond name>]`` as the playbooks derive it. None when the profile has
    no bond, the address is empty (the role then configures none) or a Jinja template clustercert does not
    evaluate."""
    bond = profile.ib.bond
    if bond is None:
        return None
    raw = hv.get(BOND_ADDRESS_VAR)
    if raw is None:
        return ivars.clustercert_fabric_addresses.get(bond.name)
    if not isinstance(raw, str):
        got = (
            "a list"
            if isinstance(raw, list)
            else "a mapping"
            if isinstance(raw, dict)
            else "a boolean"
            if isinstance(raw, bool)
            else "a number"
            if isinstance(raw, int | float)
            else "null"
        )
        raise InputError(where(), BOND_ADDRESS_VAR, "expected an address with prefix (e.g. 10.20.0.11/16) "
                                                  f"or \"\", got {got} (host {name})")
    text = raw.strip()
    if not text or "{{" in text or "{%" in text:
        return None
    try:
        ipaddress.ip_interface(text)
    except ValueError:
        raise InputError(where(), BOND_ADDRESS_VAR, f"{text!r} is not an address with prefix (e.g. "
                                                  f"10.20.0.11/16) (host {name})") from None
    return text


def _similar(a: str, b: str) -> bool:
    return SequenceMatcher(None, a, b).ratio() > 0.85


def resolved_view(inv: Inventory) -> dict:
    """What `clustercert inventory` prints: hosts, their profile and effective thresholds."""
    out: dict = {"inventory": str(inv.source), "hosts": {}, "profiles": {}}
    for name, h in inv.hosts.items():
        out["hosts"][name] = {
            "groups": h.groups,
            "profile": h.profile.name,
            "profile_from": h.profile_origin,
            "overrides": h.vars.clustercert_profile_overrides,
            "address": h.connection.get("ansible_host", name),
            "bond_address": h.bond_address,
            "vars": {k: v for k, v in h.vars.model_dump().items() if k != "clustercert_profile_overrides"},
        }
    seen = set()
    for h in inv.hosts.values():
        key = (h.profile.name, repr(h.vars.clustercert_profile_overrides))
        if key in seen:
            continue
        seen.add(key)
        label = h.profile.name + (" (with overrides)" if h.vars.clustercert_profile_overrides else "")
        out["profiles"][label] = {
            "hosts": sorted(
                n
                for n, o in inv.hosts.items()
                if (o.profile.name, repr(o.vars.clustercert_profile_overrides)) == key
            ),
            "thresholds": {
                tname: {"floor": t.floor, "ceiling": t.max, "unit": t.unit, "source": t.source}
                for tname, t in h.profile.thresholds.items()
            },
        }
    return out
