#!/usr/bin/python
"""Test-only module: return a recorded fact file as this host's ansible_facts (no gathering)."""

import json

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={"path": {"type": "path", "required": True}}, supports_check_mode=True
    )
    with open(module.params["path"]) as fh:
        facts = json.load(fh)
    module.exit_json(changed=False, ansible_facts=facts)


if __name__ == "__main__":
    main()
