"""Documentation of the action plugin ``clustercert.cluster.packages`` (plugins/action/packages.py).

The roles' package step, written once: every role of the collection installs its packages through it.
The work is done on the controller by the action plugin, with ansible.builtin's own package modules.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: packages
author: clustercert maintainers (!UNKNOWN)
short_description: install a package set in one transaction, skipping the transaction where it has nothing to do, and hold it
description:
  - The package step of every clustercert role, written once. On a host whose package manager is apt, one
    read-only C(dpkg-query) reads what dpkg has; the set goes to M(ansible.builtin.apt) in one transaction only where a
    package is missing, not cleanly installed, or at no version matching its spec (a glob, as apt reads
    C(name=1.2*)); a spec it cannot read (another operator than C(=)) counts as missing, so apt decides. An
    idempotent run so skips apt's cache load; whatever differs still goes through apt, and is reported.
  - Then the packages of O(hold) are held (M(ansible.builtin.dpkg_selections)), every one of them after an
    install (apt drops a package's hold when it moves it to another version), else only those dpkg does not list
    on hold. A hold dropped on its own is this task's change.
  - On any other package manager the set goes to that manager's module (M(ansible.builtin.dnf) on RHEL and its
    rebuilds), which decides itself; O(versionlock) then keeps its lines in a marked block of
    C(/etc/dnf/plugins/versionlock.list) (dnf's versionlock plugin).
  - The package manager is the host's C(ansible_facts.pkg_mgr) (gathered, subset C(pkg_mgr), where the facts
    lack it), as for M(ansible.builtin.package).
  - The modules run with the task's privilege escalation, check mode and diff mode. In check mode the
    C(dpkg-query) still runs (it changes nothing) and the package manager's module simulates, so the task reports
    what a real run would change and changes nothing.
version_added: 0.1.0
options:
  name:
    description:
      - The package specs of the set, as the package manager reads them (apt C(name), C(name=version),
        C(name=version*), C(name:arch); dnf C(name), C(name-version)).
    type: list
    elements: str
    required: true
  pinned:
    description:
      - The specs pin versions the package manager must reach, downgrades included. apt then also changes held
        packages and installs no recommended packages; dnf may downgrade. Another package manager fails the task.
      - V(false) installs the specs as M(ansible.builtin.package) with C(state=present) would.
    type: bool
    default: false
  hold:
    description:
      - Package names to hold where apt manages packages (dpkg selection C(hold)), so an upgrade cannot move them
        off their pin. Ignored by other package managers (see O(versionlock)).
    type: list
    elements: str
    default: []
  versionlock:
    description:
      - Lines of dnf's C(/etc/dnf/plugins/versionlock.list) (C(name-*:version*)) to keep where dnf manages
        packages, in a block marked with O(versionlock_block). Ignored by apt (see O(hold)).
    type: list
    elements: str
    default: []
  versionlock_block:
    description:
      - The name of the O(versionlock) block in C(versionlock.list) (its markers read C(# BEGIN NAME) and
        C(# END NAME)), one per package set. Required with O(versionlock).
    type: str
  query_timeout:
    description:
      - Seconds the read-only C(dpkg-query) may take. One that does not finish in time, or fails, reads as
        nothing installed, so apt decides.
    type: int
    default: 60
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
  diff_mode:
    support: full
    details: the package manager's own diff, and the holds a run adds (dpkg selection before and after)
  platform:
    platforms: posix
notes:
  - The roles use it by its FQCN; so can a playbook of your own.
seealso:
  - module: ansible.builtin.apt
  - module: ansible.builtin.dpkg_selections
  - module: ansible.builtin.dnf
  - module: ansible.builtin.package
"""  # noqa: E501

EXAMPLES = r"""
- name: Install the RDMA stack at its pinned version and hold it (apt) or lock it (dnf)
  clustercert.cluster.packages:
    name: ["doca-ofed={{ ofed_version }}*"]
    pinned: true
    hold: [doca-ofed]
    versionlock: ["doca-ofed-*:{{ ofed_version }}*"]
    versionlock_block: clustercert ofed

- name: Install chrony as the distribution ships it
  clustercert.cluster.packages:
    name: [chrony]
"""

RETURN = r"""
package_manager:
  description: the package manager of the host (its C(ansible_facts.pkg_mgr)).
  returned: always
  type: str
  sample: apt
unmet:
  description:
    - The specs that made the set go to the package manager; empty where it was skipped. apt, the specs dpkg did
      not satisfy; any other manager, every spec.
  returned: always
  type: list
  elements: str
  sample: ["libnccl2=2.26.2-1+cuda12.8"]
installed:
  description: the package manager changed the packages (in check mode, would change them).
  returned: always
  type: bool
  sample: false
held:
  description: the packages this run held (in check mode, would hold), apt only.
  returned: always
  type: list
  elements: str
  sample: ["libnccl-dev"]
versionlock_changed:
  description: the O(versionlock) block was written (in check mode, would be), dnf only.
  returned: always
  type: bool
  sample: false
"""  # noqa: E501
