"""Tests for clustercert.parsers.systemctl (systemctl status)."""

from __future__ import annotations

import pytest

from clustercert.parsers import ParseError, parse

# Hand-written in systemctl status layout (systemd 252+: 'preset:'; older: 'vendor preset:').
ACTIVE = """\u25cf nvidia-fabricmanager.service - NVIDIA fabric manager service
     Loaded: loaded (/usr/lib/systemd/system/nvidia-fabricmanager.service; enabled; preset: disabled)
     Active: active (running) since Tue 2025-03-25 02:10:15 UTC; 2h 37min ago
    Process: 2114 ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg (code=exited, status=0/SUCCESS)
   Main PID: 2116 (nv-fabricmanage)
      Tasks: 18 (limit: 1649170)
     CGroup: /system.slice/nvidia-fabricmanager.service
             \u2514\u25002116 /usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg

Mar 25 02:10:15 node01 nv-fabricmanager[2116]: Connected to 1 node.
"""  # noqa: E501

FAILED = """\u00d7 nvidia-dcgm.service - NVIDIA DCGM service
   Loaded: loaded (/lib/systemd/system/nvidia-dcgm.service; disabled; vendor preset: enabled)
   Active: failed (Result: exit-code) since Mon 2024-01-08 10:00:00 UTC; 5s ago
  Process: 4242 ExecStart=/usr/bin/nv-hostengine -n (code=exited, status=1/FAILURE)
 Main PID: 4242 (code=exited, status=1/FAILURE)
"""


def test_active_running():
    r = parse("systemctl-status", ACTIVE)
    assert r["unit"] == "nvidia-fabricmanager.service" and r["description"] == "NVIDIA fabric manager service"
    assert (
        r["load_state"] == "loaded" and r["unit_file_state"] == "enabled" and r["vendor_preset"] == "disabled"
    )
    assert r["active_state"] == "active" and r["sub_state"] == "running" and r["running"] is True
    assert r["since"] == "Tue 2025-03-25 02:10:15 UTC"
    assert r["main_pid"] == 2116 and r["main_process"] == "nv-fabricmanage"
    assert r["journal"] == ["Mar 25 02:10:15 node01 nv-fabricmanager[2116]: Connected to 1 node."]


def test_failed_unit():
    r = parse("systemctl-status", FAILED)
    assert r["active_state"] == "failed" and r["sub_state"] == "Result: exit-code" and r["running"] is False
    assert r["unit_file_state"] == "disabled" and r["vendor_preset"] == "enabled"
    assert r["main_pid"] == 4242 and r["main_pid_exit"] == "code=exited, status=1/FAILURE"


def test_inactive_dead_and_not_found():
    r = parse(
        "systemctl-status",
        "\u25cb nvidia-dcgm.service - NVIDIA DCGM service\n"
        "     Loaded: loaded (/usr/lib/systemd/system/nvidia-dcgm.service; enabled; preset: enabled)\n"
        "     Active: inactive (dead)\n",
    )
    assert r["active_state"] == "inactive" and r["sub_state"] == "dead" and r["main_pid"] is None
    nf = parse("systemctl-status", "Unit nvidia-fabricmanager.service could not be found.\n")
    assert (
        nf["load_state"] == "not-found"
        and nf["unit"] == "nvidia-fabricmanager.service"
        and nf["running"] is False
    )


def test_job_failed(fixture_text):
    r = parse("systemctl-status", fixture_text("systemctl/systemctl-start-fabricmanager-job-failed.txt"))
    assert r["job_failed"] is True and r["unit"] == "nvidia-fabricmanager.service"
    assert r["active_state"] is None and r["running"] is False
    assert r["error"].startswith("Job for nvidia-fabricmanager.service failed")


def test_errors():
    with pytest.raises(ParseError, match="empty"):
        parse("systemctl-status", "")
    with pytest.raises(ParseError, match="Loaded"):
        parse(
            "systemctl-status",
            "System has not been booted with systemd as init system (PID 1). Can't operate.\n",
        )
