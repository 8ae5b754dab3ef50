"""Tests for clustercert.parsers.container (nvidia-ctk, nvidia-container-cli info, docker info)."""

from __future__ import annotations

import pytest

from clustercert.parsers import ParseError, parse


def test_ctk_versions(fixture_text):
    r = parse("nvidia-ctk", fixture_text("nvidia-ctk/nvidia-container-toolkit-version-1.17.6.txt"))
    assert r["mode"] == "version" and r["ok"] is True
    assert r["component"] == "NVIDIA Container Runtime Hook" and r["version"] == "1.17.6"
    assert r["commit"] == "e627eb2e21e167988e04c0579a1c941c1e263ff6"
    assert (
        parse("nvidia-ctk", fixture_text("nvidia-ctk/nvidia-container-toolkit-version-1.12.0.txt"))["version"]
        == "1.12.0"
    )
    cli = parse("nvidia-ctk", "NVIDIA Container Toolkit CLI version 1.20.0\ncommit: 5505e2f\n")
    assert cli["component"] == "NVIDIA Container Toolkit CLI" and cli["version"] == "1.20.0"


def test_ctk_cdi_generate_panic(fixture_text):
    r = parse("nvidia-ctk", fixture_text("nvidia-ctk/nvidia-ctk-cdi-generate-1.12.0-panic-sigsegv.txt"))
    assert r["mode"] == "log" and r["ok"] is False
    assert r["panic"] == "runtime error: invalid memory address or nil pointer dereference"
    assert r["driver_version"] == "575.57.08"
    assert r["selected_devices"][:4] == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"]
    assert r["log"]["warning"] == 14


def test_ctk_cdi_list_and_errors():
    text = "INFO[0000] Found 3 CDI devices\nnvidia.com/gpu=0\nnvidia.com/gpu=GPU-1a2b\nnvidia.com/gpu=all\n"
    r = parse("nvidia-ctk", text)
    assert r["mode"] == "cdi-list" and r["cdi_devices"] == [
        "nvidia.com/gpu=0",
        "nvidia.com/gpu=GPU-1a2b",
        "nvidia.com/gpu=all",
    ]
    bad = parse("nvidia-ctk", "ERRO[0000] failed to generate CDI spec: failed to create discoverer\n")
    assert bad["ok"] is False and bad["errors"] == [
        "failed to generate CDI spec: failed to create discoverer"
    ]
    with pytest.raises(ParseError, match="empty"):
        parse("nvidia-ctk", "")
    with pytest.raises(ParseError, match="version X"):
        parse("nvidia-ctk", "bash: nvidia-ctk: command not found\n")


def test_container_cli_info(fixture_text):
    r = parse(
        "nvidia-container-cli-info", fixture_text("nvidia-container-cli/info-debug-tail-geforce920m-384.txt")
    )
    assert r["ok"] is True and r["nvrm_version"] == "384.130" and r["cuda_version"] == "9.0"
    assert r["devices"] == [
        {
            "index": 0,
            "minor": 0,
            "model": "GeForce 920M",
            "brand": "GeForce",
            "uuid": "GPU-4712226b-88e6-a01e-efb0-a5950a64f8d9",
            "bus_id": "00000000:08:00.0",
            "architecture": "3.5",
        }
    ]


def test_container_cli_info_null_fields(fixture_text):
    r = parse(
        "nvidia-container-cli-info",
        fixture_text("nvidia-container-cli/info-debug-tail-jetson-xavier-null-fields.txt"),
    )
    assert r["ok"] is False and r["nvrm_version"] is None and r["cuda_version"] == "10.2"
    assert r["devices"][0]["uuid"] is None and r["devices"][0]["model"] == "Xavier"
    with pytest.raises(ParseError, match="NVRM version"):
        parse(
            "nvidia-container-cli-info",
            "nvidia-container-cli: initialization error: nvml error: driver not loaded\n",
        )


def test_docker_info(fixture_text):
    r = parse("docker-info", fixture_text("docker/docker-info-28.0.0-rc1-runtimes-nvidia.txt"))
    assert r["server_version"] == "28.0.0-rc.1"
    assert r["runtimes"] == ["runc", "io.containerd.runc.v2", "nvidia"] and r["nvidia_runtime"] is True
    assert r["default_runtime"] == "runc" and r["cgroup_driver"] == "systemd" and r["cgroup_version"] == "2"
    down = parse(
        "docker-info",
        "Client:\n Version: 27.0\n\nServer:\n"
        "ERROR: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon "
        "running?\n",
    )
    assert down["server_error"].startswith("ERROR: Cannot connect") and down["nvidia_runtime"] is False
    with pytest.raises(ParseError):
        parse("docker-info", "hello\n")
