"""`clustercert init DIR`: a commented starter inventory that `clustercert inventory -i DIR` accepts.

Writes DIR/hosts.yml (two example hosts with ansible_host and their bond address), DIR/group_vars/all.yml
(the profile choice and every variable a site sets, the optional ones commented out) and
DIR/known_hosts.md (how to put the nodes' host keys into known_hosts: docs/security.md). A DIR that
holds anything is refused unless --force (which replaces those three files and keeps the rest).
"""

from __future__ import annotations

from pathlib import Path

from clustercert.errors import InputError
from clustercert.model.profile import builtin_profiles, load_profile

FILES = ("hosts.yml", "group_vars/all.yml", "known_hosts.md")

HOSTS = """\
# clustercert starter inventory (written by `clustercert init`). Replace the two example hosts with yours:
# the name is what clustercert reports, ansible_host the address ssh connects to.
#   clustercert inventory -i {dir}          # validate it and print the resolved view
#   clustercert validate -i {dir} --limit node01
all:
  children:
    gpu_nodes:
      hosts:
        node01:
          ansible_host: 10.0.0.11
{fabric01}        node02:
          ansible_host: 10.0.0.12
{fabric02}    # Hosts that run opensm when the profile's subnet_manager.mode is "host" (one master and one standby
    # per fabric; the higher clustercert_sm_priority, 0-15, becomes master):
    # subnet_managers:
    #   hosts:
    #     node01: {{clustercert_sm_priority: 14}}
    #     node02: {{clustercert_sm_priority: 10}}
"""  # noqa: E501 (a template: its lines are the starter file's)

FABRIC = """\
          # IPoIB address (with prefix) per netdev; the bond's is what the bond failover test pings
          clustercert_fabric_addresses: {{{bond}: {address}}}
          # clustercert_rack: rack1          # failure domain: round 1 of the pair probes avoids pairing within it
"""  # noqa: E501 (a template: its lines are the starter file's)

ALL = """\
# Variables for every host (written by `clustercert init`). Unknown clustercert_* variables are errors: a typo
# must not silently disable a check. README "Profiles and inventory" lists them all.

# The node class every host must be: a built-in profile ({builtins}) or a path to your own YAML file.
clustercert_profile: {profile}
clustercert_cluster_name: {cluster}

# How clustercert logs in. Host keys are always checked: see known_hosts.md beside this inventory.
ansible_user: root
ansible_python_interpreter: /usr/bin/python3
# A non-root operator that becomes root with sudo (give its password with -K, or allow password-less sudo):
# ansible_user: ops
# ansible_become: true
# A known_hosts file of your own (outside this directory: Ansible would read a file here as inventory):
# ansible_ssh_common_args: "-o UserKnownHostsFile={known_hosts}"
# ansible_ssh_private_key_file: ~/.ssh/cluster_ed25519

# Site overrides of any profile key, validated like the profile (e.g. a floor measured at acceptance):
# clustercert_profile_overrides:
#   thresholds:
#     iperf3_ipoib: {{min: 25, unit: gbit_per_s, source: "site baseline measured at acceptance"}}

# Air-gapped sites point the roles at their mirror of NVIDIA's CUDA/DOCA repositories:
# clustercert_package_mirror: http://mirror.example.internal/nvidia

# At most this many nodes reboot at once during a driver or kernel-command-line change (default 1):
# clustercert_max_parallel_reboots: 1

# Per remote command, seconds (default 30); chrony servers the time role configures:
# clustercert_command_timeout_s: 30
# clustercert_ntp_servers: [ntp1.example.internal, ntp2.example.internal]

# Slurm: certify --drain slurm drains failing nodes and resumes the ones it drained; the pair NCCL probe
# runs as an srun step on idle nodes (GRES per node: gpu, gpu:TYPE, or null without a GPU GRES):
# clustercert_slurm: true
# clustercert_slurm_node_name: node01     # per host, where Slurm's NodeName differs
# clustercert_slurm_gres: gpu
"""

KNOWN_HOSTS = """\
# known_hosts for this inventory

clustercert checks every node's SSH host key on every connection and never prompts: a node whose key is
not in known_hosts is `unreachable — host key verification failed`, and nothing runs on it. Put the
nodes' keys there before the first run (docs/security.md, "Populating known_hosts"):

1. From provisioning (best): have the installer (kickstart, preseed, cloud-init, Warewulf, xCAT, MAAS…)
   publish each node's public host key and write the lines into /etc/ssh/ssh_known_hosts (or
   ~/.ssh/known_hosts) on this machine:

       node01,10.0.0.11 ssh-ed25519 AAAAC3Nza...

2. ssh-keyscan, then verify: `ssh-keyscan -t ed25519 node01 10.0.0.11 >> known_hosts.new`, compare each
   fingerprint (`ssh-keygen -lf known_hosts.new`) with what the node shows on its console or BMC
   (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` there), and only then move the lines into
   known_hosts. ssh-keyscan alone trusts whatever answers on the address.

3. SSH certificates: one `@cert-authority *.cluster.example ssh-ed25519 AAAA...` line covers every node
   whose host key the site's CA signed.

A known_hosts file of its own: keep it outside this directory (Ansible reads every file here as
inventory) and name it in group_vars/all.yml:
`ansible_ssh_common_args: "-o UserKnownHostsFile=/path/to/known_hosts"`.
"""


def init(directory: str, profile: str = "h100-sxm-8x-ndr", force: bool = False) -> dict:
    """Write the starter inventory into ``directory``; {"directory", "files", "profile"}. InputError for
    an unknown profile, a DIR that is a file, or a non-empty DIR without ``force`` (nothing written)."""
    prof = load_profile(profile)  # exit 2 for an unknown name or a bad file
    if profile not in builtin_profiles():
        profile = str(Path(profile).expanduser().resolve())
    root = Path(directory).expanduser()
    if root.exists() and not root.is_dir():
        raise InputError(str(root), None, "exists and is not a directory")
    if root.is_dir():
        entries = sorted(p.name for p in root.iterdir())
        if entries and not force:
            shown = ", ".join(entries[:5]) + (" …" if len(entries) > 5 else "")
            raise InputError(str(root), None, f"is not empty ({shown}): choose a new directory, or --force "
                                              f"to write {', '.join(FILES)} into it (replacing those files)")
    try:
        (root / "group_vars").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(str(root), None, f"cannot create the directory: {exc.strerror or exc}") from None
    bond = prof.ib.bond
    fabric = {n: FABRIC.format(bond=bond.name, address=f"10.20.0.{n}/16") if bond else "" for n in (11, 12)}
    shown_dir = str(directory)
    texts = {
        "hosts.yml": HOSTS.format(dir=shown_dir, fabric01=fabric[11], fabric02=fabric[12]),
        "group_vars/all.yml": ALL.format(
            builtins=", ".join(builtin_profiles()),
            profile=profile,
            cluster=root.resolve().name or "cluster",
            known_hosts=str(root.resolve().parent / f"{root.resolve().name}.known_hosts"),
        ),
        "known_hosts.md": KNOWN_HOSTS,
    }
    for rel, text in texts.items():
        try:
            (root / rel).write_text(text)
        except OSError as exc:
            raise InputError(str(root / rel), None, f"cannot write: {exc.strerror or exc}") from None
    return {
        "directory": str(root.resolve()),
        "files": [str(root.resolve() / f) for f in FILES],
        "profile": profile,
    }
