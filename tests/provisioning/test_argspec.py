"""A wrong variable type fails fast, before any task runs, with the role's argument_specs message."""

from __future__ import annotations

import subprocess

import pytest
from provisioning_helpers import BIN, REPO, ansible_env

PLAY = """\
- name: argument validation only
  hosts: localhost
  gather_facts: false
  roles:
    - role: {role}
"""


@pytest.mark.parametrize("role,var,value,needle", [
    ("tuning", "tuning_nofile", '"lots"', "tuning_nofile"),
    ("nvidia_driver", "nvidia_driver_modules", '"closed"', "nvidia_driver_modules"),
    ("ib_redundancy", "ib_redundancy_compute_hcas", '{"mlx5_0": 1}', "ib_redundancy_compute_hcas"),
    ("container_toolkit", "container_toolkit_runtime", '"podman"', "container_toolkit_runtime"),
    ("rolling_reboot", "rolling_reboot_timeout_s", '"soon"', "rolling_reboot_timeout_s"),
])
def test_wrong_type_fails_with_the_argument_spec_message(tmp_path, role, var, value, needle):
    pb = tmp_path / "pb.yml"
    pb.write_text(PLAY.format(role=role))
    # Only the `always`-tagged argument validation runs (--tags nothing-else): a broken spec cannot
    # make the role touch this machine.
    proc = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            str(pb),
            "--tags",
            "clustercert-none",
            "-e",
            f'{{"{var}": {value}}}',
            "-e",
            "@roles/clustercert_defaults/defaults/main.yml",
        ],
        capture_output=True,
        text=True,
        env=ansible_env(),
        timeout=120,
        cwd=str(REPO),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Validating arguments against arg spec 'main'" in out
    assert "Validation of arguments failed" in out
    assert needle in out
    assert "changed=0" in out


def test_valid_values_pass_validation(tmp_path):
    pb = tmp_path / "pb.yml"
    pb.write_text(PLAY.format(role="tuning"))
    proc = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            str(pb),
            "--tags",
            "clustercert-none",
            "-e",
            '{"tuning_nofile": 65536}',
            "-e",
            "@roles/clustercert_defaults/defaults/main.yml",
        ],
        capture_output=True,
        text=True,
        env=ansible_env(),
        timeout=120,
        cwd=str(REPO),
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
