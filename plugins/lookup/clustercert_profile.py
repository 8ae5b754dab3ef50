"""Lookup ``clustercert_profile``: the host's resolved node-class profile as a dict.

    clustercert_node: "{{ lookup('clustercert_profile', clustercert_profile,
                                 overrides=clustercert_profile_overrides | default({})) }}"

Resolves a built-in profile name or a path, deep-merges the inventory's overrides and validates the
result exactly as ``clustercert inventory`` does (clustercert must be importable by the Python that
runs ansible-playbook). The bootstrap playbook sets it once per host (set_fact, on the controller), so
``clustercert bootstrap`` and a plain ``ansible-playbook -i INV playbooks/bootstrap.yml`` see the same
values.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: clustercert_profile
short_description: resolve a clustercert node-class profile (with inventory overrides)
description:
  - Returns the validated profile as a dictionary.
options:
  _terms:
    description: profile name (built-in) or path to a profile YAML file
    required: true
  overrides:
    description: clustercert_profile_overrides of the host (deep-merged, then validated)
    type: dict
    default: {}
"""

import json  # noqa: E402 - below DOCUMENTATION, as ansible-test's validate-modules asks

from ansible.errors import AnsibleError  # noqa: E402
from ansible.plugins.lookup import LookupBase  # noqa: E402

_CACHE: dict[str, dict] = {}


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        overrides = self.get_option("overrides") or {}
        try:
            from clustercert.errors import InputError
            from clustercert.model.profile import load_profile
        except ImportError as exc:  # pragma: no cover - depends on the controller's Python
            raise AnsibleError(
                f"lookup clustercert_profile: cannot import clustercert ({exc}); run ansible-playbook "
                "from the Python environment clustercert is installed in"
            ) from None
        out = []
        for term in terms:
            key = json.dumps([str(term), overrides], sort_keys=True, default=str)
            if key not in _CACHE:
                try:
                    profile = load_profile(str(term), _plain(overrides) or None,
                                           overrides_source="clustercert_profile_overrides")
                except InputError as exc:
                    raise AnsibleError(f"clustercert profile: {exc.one_line()}") from None
                _CACHE[key] = profile.model_dump(mode="json")
            out.append(_CACHE[key])
        return out


def _plain(value):
    """Ansible's tagged containers to plain Python (pydantic validates exact types)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value
