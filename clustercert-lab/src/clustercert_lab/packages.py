"""The lab's apt repository: simulated NVIDIA/DOCA packages under their real Debian 12 names.

``build_repo(repo_dir, profile)`` builds every package with dpkg-deb (one helper, ``build_deb``),
writes a flat repository (Packages, Release, InRelease, Release.gpg) signed by a lab GPG key and
exports the public key as ``repo_dir/clustercert-lab.gpg``. The private key lives next to the
repository in the image cache (``<repo_dir>/../repo-signing-key``), never in the served directory.

Packages install thin wrappers that exec the node-side simulator, systemd units and
/etc/modprobe.d install directives, so a node has no nvidia-smi before the roles install the
driver and has one after. Several packages exist in two versions so ``package_drift`` and
``driver_version_mismatch`` can move a node to the other one, as an unattended upgrade would.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from clustercert_lab.sim import wrapper

SIM_NOTE = "clustercert lab simulation: installs a simulated tool, no real driver or hardware support"
LIB = "/usr/lib/x86_64-linux-gnu"
KEY_UID = "clustercert lab repository <lab-repo@clustercert.invalid>"
DCGM_VERSION = "3.3.9"  # the simulated dcgmi prints this version and, for diag -j, its JSON layout (3.x)


@dataclass
class Pkg:
    name: str
    version: str
    summary: str
    depends: list[str] = field(default_factory=list)
    files: dict[str, tuple[str, int]] = field(default_factory=dict)  # path -> (content, mode)
    conflicts: list[str] = field(default_factory=list)
    provides: list[str] = field(default_factory=list)
    postinst: str = ""
    prerm: str = ""
    section: str = "misc"
    arch: str = "amd64"


def _get(d: dict, *keys, default=None):
    cur = d
    for k in keys:
        if not isinstance(cur, dict) or cur.get(k) is None:
            return default
        cur = cur[k]
    return cur


def versions(profile: dict) -> dict[str, dict[str, str]]:
    """Debian versions of each family: the profile's ('main') and the other one ('alt')."""
    drv = str(_get(profile, "driver", "version", default="570.172.08"))
    cuda = str(_get(profile, "cuda", "version", default="12.8"))
    nccl = str(_get(profile, "nccl", "version", default="2.26.2"))
    ofed = str(_get(profile, "ofed", "version", default="2.10.0"))
    ctk = str(_get(profile, "container", "toolkit_version", default="1.17.8"))
    major, minor = nccl.split(".")[:2]
    return {
        "driver": {"main": f"{drv}-1", "alt": f"{drv.split('.')[0]}.158.01-1" if not drv.endswith(".158.01")
                   else f"{drv.split('.')[0]}.172.08-1"},
        "nccl": {"main": f"{nccl}-1+cuda{cuda}", "alt": f"{major}.{int(minor) + 1}.3-1+cuda{cuda}"},
        "ctk": {"main": f"{ctk}-1", "alt": "1.17.7-1" if ctk != "1.17.7" else "1.17.8-1"},
        "ofed": {"main": f"{ofed}-1"},
        "cuda": {"main": cuda},
    }


def _unit(desc: str, exec_start: str, extra_unit: str = "", svc: str = "",
          wanted: str = "multi-user.target") -> str:
    return (f"[Unit]\nDescription={desc}\n{extra_unit}\n[Service]\n{svc}ExecStart={exec_start}\n\n"
            f"[Install]\nWantedBy={wanted}\n")


def _enable_postinst(unit: str, start: bool = True) -> str:
    s = (f'if [ -d /run/systemd/system ]; then\n  systemctl daemon-reload || true\n'
         f'  systemctl enable {unit} >/dev/null 2>&1 || true\n')
    if start:
        s += f"  systemctl start {unit} >/dev/null 2>&1 || true\n"
    return s + "fi\n"


def driver_packages(v: str, branch: str) -> list[Pkg]:
    up = v.rsplit("-", 1)[0]
    env = {"CLUSTERCERT_LAB_LIB_VERSION": up}
    pin = f"(= {v})"
    modprobe = "".join(
        f"install {m} /usr/bin/python3 /var/lib/clustercert-lab/labsim modload {m}\n"
        f"remove {m} /usr/bin/python3 /var/lib/clustercert-lab/labsim modunload {m}\n"
        for m in ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem"))
    persist_unit = _unit("NVIDIA Persistence Daemon (clustercert lab simulation)",
                         "/usr/bin/nvidia-persistenced --user root",
                         "Wants=syslog.target\n",
                         "Type=forking\nPIDFile=/run/nvidia-persistenced/nvidia-persistenced.pid\n"
                         "Restart=always\nExecStopPost=/bin/rm -rf /run/nvidia-persistenced\n")
    fm_unit = _unit("NVIDIA fabric manager service (clustercert lab simulation)",
                    "/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg",
                    "After=network-online.target\nRequires=network-online.target\n",
                    "Type=simple\nTimeoutStartSec=240\n")
    return [
        Pkg("nvidia-kernel-open-dkms", v, f"NVIDIA binary kernel module source (open version) - {SIM_NOTE}",
            ["kmod"], {f"/etc/modprobe.d/nvidia-{branch}-clustercert-lab.conf": (
                "# clustercert lab simulation: the NVIDIA kernel modules are simulated\n" + modprobe, 0o644),
                f"/usr/src/nvidia-{up}/README.clustercert-lab": (SIM_NOTE + "\n", 0o644)},
            conflicts=["nvidia-kernel-dkms"], provides=["nvidia-kernel-dkms-any"], section="kernel"),
        Pkg("libnvidia-ml1", v, f"NVIDIA Management Library (NVML) runtime library - {SIM_NOTE}", [],
            {f"{LIB}/libnvidia-ml.so.{up}": (f"{SIM_NOTE}\n", 0o644)}, section="libs"),
        Pkg("libcuda1", v, f"NVIDIA CUDA Driver Library - {SIM_NOTE}", [],
            {f"{LIB}/libcuda.so.{up}": (f"{SIM_NOTE}\n", 0o644)}, section="libs"),
        Pkg("nvidia-smi", v, f"NVIDIA System Management Interface - {SIM_NOTE}", [f"libnvidia-ml1 {pin}"],
            {"/usr/bin/nvidia-smi": (wrapper("nvidia-smi", "simulated nvidia-smi", env), 0o755)},
            section="utils"),
        Pkg("nvidia-persistenced", v,
            f"daemon to maintain persistent software state in the NVIDIA driver - {SIM_NOTE}",
            [f"libnvidia-ml1 {pin}"],
            {"/usr/bin/nvidia-persistenced": (wrapper("nvidia-persistenced", "simulated daemon", env), 0o755),
             "/lib/systemd/system/nvidia-persistenced.service": (persist_unit, 0o644)},
            postinst=_enable_postinst("nvidia-persistenced.service"), section="utils"),
        Pkg("nvidia-driver", v, f"NVIDIA metapackage - {SIM_NOTE}",
            [f"nvidia-smi {pin}", f"libnvidia-ml1 {pin}", f"libcuda1 {pin}", f"nvidia-persistenced {pin}",
             f"nvidia-kernel-open-dkms {pin} | nvidia-kernel-dkms {pin}"]),
        Pkg("nvidia-open", v, f"NVIDIA driver metapackage with open GPU kernel modules - {SIM_NOTE}",
            [f"nvidia-driver {pin}", f"nvidia-kernel-open-dkms {pin}"]),
        Pkg(f"cuda-drivers-{branch}", v, f"CUDA Driver meta-package, branch-specific - {SIM_NOTE}",
            [f"nvidia-open {pin}"]),
        Pkg("cuda-drivers", v, f"CUDA Driver meta-package - {SIM_NOTE}", [f"cuda-drivers-{branch} {pin}"]),
        Pkg(f"nvidia-fabricmanager-{branch}", v, f"Fabric Manager for NVSwitch based systems - {SIM_NOTE}",
            [], {"/usr/bin/nv-fabricmanager": (wrapper("nv-fabricmanager", "simulated fabric manager",
                                                    {"CLUSTERCERT_LAB_FM_VERSION": up}), 0o755),
             "/usr/share/nvidia/nvswitch/fabricmanager.cfg": (
                 "LOG_LEVEL=4\nLOG_FILE_NAME=/var/log/fabricmanager.log\nFABRIC_MODE=0\n", 0o644),
             "/lib/systemd/system/nvidia-fabricmanager.service": (fm_unit, 0o644)},
            conflicts=["nvidia-fabricmanager"], provides=["nvidia-fabricmanager"],
            postinst=_enable_postinst("nvidia-fabricmanager.service", start=False)),
    ]


def nccl_packages(v: str) -> list[Pkg]:
    up = v.split("-")[0]
    return [
        Pkg("libnccl2", v, f"NVIDIA Collective Communication Library (NCCL) Runtime - {SIM_NOTE}", [],
            {f"{LIB}/libnccl.so.{up}": (SIM_NOTE + "\n", 0o644)}, section="libs"),
        Pkg("libnccl-dev", v,
            f"NVIDIA Collective Communication Library (NCCL) Development Files - {SIM_NOTE}",
            [f"libnccl2 (= {v})"],
            {"/usr/include/nccl.h": (f"/* {SIM_NOTE} */\n#define NCCL_VERSION_STRING \"{up}\"\n",
                  0o644)}, section="libdevel"),
    ]


def ctk_packages(v: str) -> list[Pkg]:
    pin = f"(= {v})"
    return [
        Pkg("libnvidia-container1", v, f"NVIDIA container runtime library - {SIM_NOTE}", [],
            {f"{LIB}/libnvidia-container.so.{v.split('-')[0]}": (SIM_NOTE + "\n", 0o644)}, section="libs"),
        Pkg("libnvidia-container-tools", v,
            f"NVIDIA container runtime library (command-line tools) - {SIM_NOTE}",
            [f"libnvidia-container1 {pin}"],
            {"/usr/bin/nvidia-container-cli": ("#!/bin/sh\necho 'nvidia-container-cli: clustercert lab "
                                               "simulation "
               "(not simulated)' >&2\nexit 1\n", 0o755)}),
        Pkg("nvidia-container-toolkit-base", v, f"NVIDIA Container Toolkit Base - {SIM_NOTE}", [],
            {"/usr/bin/nvidia-ctk": (wrapper("nvidia-ctk", "simulated nvidia-ctk",
                                             {"CLUSTERCERT_LAB_CTK_VERSION": v.split("-")[0]}), 0o755),
             "/usr/bin/nvidia-container-runtime": ("#!/bin/sh\n# clustercert lab simulation\nexec runc "
                                                   "\"$@\"\n", 0o755),
             "/usr/bin/nvidia-cdi-hook": ("#!/bin/sh\n# clustercert lab simulation\nexit 0\n", 0o755)}),
        Pkg("nvidia-container-toolkit", v, f"NVIDIA Container toolkit - {SIM_NOTE}",
            [f"nvidia-container-toolkit-base {pin}", f"libnvidia-container-tools {pin}"],
            {"/usr/bin/nvidia-container-runtime-hook": ("#!/bin/sh\n# clustercert lab simulation\nexit 0\n",
                                                        0o755)}),
    ]


def ofed_packages(v: str) -> list[Pkg]:
    doca = v.split("-")[0]
    internal = {"2.10.0": "25.01-0.6.0", "2.9.1": "24.10-1.1.4",
                "3.0.0": "25.04-0.6.1"}.get(doca, "25.01-0.6.0")
    user = "2501mlnx56-1.2501060"
    return [
        Pkg("mlnx-ofed-kernel-utils", f"{internal}-1",
            f"Userspace tools to restart and tune mlx5 drivers - {SIM_NOTE}",
            [], {"/usr/bin/ofed_info": (f"#!/bin/sh\n# clustercert lab simulation of DOCA-OFED {doca}\n"
                                        f"case \"$1\" in -s) echo 'OFED-internal-{internal}:';; "
                                        f"-n) echo '{internal}';; *) echo 'OFED-internal-{internal}:'; echo; "
                                        "echo 'clustercert lab simulation';; esac\n", 0o755)}),
        Pkg("mlnx-tools", user, f"Mellanox userland tools and scripts - {SIM_NOTE}", [],
            {"/usr/bin/ibdev2netdev": (wrapper("ibdev2netdev", "simulated ibdev2netdev"), 0o755)}),
        Pkg("ibverbs-utils", user, f"Examples for the libibverbs library - {SIM_NOTE}", [],
            {"/usr/bin/ibv_devinfo": (wrapper("ibv_devinfo", "simulated ibv_devinfo"), 0o755)}),
        Pkg("perftest", "25.01.0-0.84.1", f"Infiniband verbs performance tests - {SIM_NOTE}", [],
            {f"/usr/bin/{t}": (wrapper(t, "simulated perftest"), 0o755)
             for t in ("ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_write_lat", "ib_read_lat",
                       "ib_send_lat")}),
        Pkg("doca-ofed", v, f"DOCA-OFED meta package - {SIM_NOTE}",
            ["mlnx-ofed-kernel-utils", "mlnx-tools", "ibverbs-utils", "infiniband-diags", "perftest"]),
    ]


def tool_packages(nccl_v: str, cuda: str) -> list[Pkg]:
    colls = ("all_reduce_perf", "all_gather_perf", "broadcast_perf", "reduce_perf", "reduce_scatter_perf",
             "alltoall_perf", "sendrecv_perf")
    return [
        # like the real package: the host engine's unit is installed, not enabled (the nccl_tools role enables
        # it)
        Pkg("datacenter-gpu-manager", f"1:{DCGM_VERSION}",
            f"NVIDIA Data Center GPU Manager (DCGM) - {SIM_NOTE}", [],
            {"/usr/bin/dcgmi": (wrapper("dcgmi", "simulated dcgmi",
                                        {"CLUSTERCERT_LAB_DCGM_VERSION": DCGM_VERSION}),
                                0o755),
             "/usr/bin/nv-hostengine": (wrapper("nv-hostengine", "simulated DCGM host engine"), 0o755),
             "/lib/systemd/system/nvidia-dcgm.service": (_unit(
                 "NVIDIA DCGM service (clustercert lab simulation)",
                 "/usr/bin/nv-hostengine -n --service-account nvidia-dcgm", "",
                 "Type=simple\nRestart=on-abort\n"), 0o644)}),
        Pkg("nccl-tests", f"2.14.1-1+cuda{cuda}", f"NCCL tests - {SIM_NOTE}", ["libnccl2"],
            {f"/usr/bin/{c}": (wrapper(c, "simulated nccl-tests"), 0o755) for c in colls}),
        Pkg("nvbandwidth", f"0.7-1+cuda{cuda}", f"NVIDIA GPU memory bandwidth test - {SIM_NOTE}", [],
            {"/usr/bin/nvbandwidth": (wrapper("nvbandwidth", "simulated nvbandwidth"), 0o755)}),
    ]


def all_packages(profile: dict) -> list[Pkg]:
    vs = versions(profile)
    branch = str(_get(profile, "driver", "branch", default="570"))
    pkgs: list[Pkg] = []
    for v in (vs["driver"]["main"], vs["driver"]["alt"]):
        pkgs += driver_packages(v, branch)
    for v in (vs["nccl"]["main"], vs["nccl"]["alt"]):
        pkgs += nccl_packages(v)
    for v in (vs["ctk"]["main"], vs["ctk"]["alt"]):
        pkgs += ctk_packages(v)
    pkgs += ofed_packages(vs["ofed"]["main"])
    pkgs += tool_packages(vs["nccl"]["main"], vs["cuda"]["main"])
    pkgs.append(kernel_headers_package())
    return pkgs


def kernel_headers_package() -> Pkg:
    """Lab nodes share the host's kernel, which Debian's mirror has no headers for: the lab repository
    carries an (empty) linux-headers package for it, so the driver role installs headers as on a real node."""
    release = os.uname().release
    return Pkg(f"linux-headers-{release}", "1.0-lab1",
               f"Header files for the lab host's running kernel {release} - {SIM_NOTE}", [],
               {f"/usr/src/linux-headers-{release}/README.clustercert-lab":
                ("The clustercert lab shares the host kernel; no real headers are needed.\n", 0o644)})


def build_deb(pkg: Pkg, out_dir: Path) -> Path:
    """Build one .deb with dpkg-deb; the only package builder (every package goes through here)."""
    with tempfile.TemporaryDirectory(prefix=f"ccdeb-{pkg.name}-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        debian = root / "DEBIAN"
        debian.mkdir()
        conffiles = []
        for path, (content, mode) in pkg.files.items():
            p = root / path.lstrip("/")
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(content)
            p.chmod(mode)
            if path.startswith("/etc/"):
                conffiles.append(path)
        size_kib = max(1, sum(len(c) for c, _ in pkg.files.values()) // 1024)
        control = [f"Package: {pkg.name}", f"Version: {pkg.version}", f"Architecture: {pkg.arch}",
                   "Maintainer: clustercert lab <lab@clustercert.invalid>", f"Installed-Size: {size_kib}",
                   f"Section: {pkg.section}", "Priority: optional"]
        if pkg.depends:
            control.append("Depends: " + ", ".join(pkg.depends))
        if pkg.conflicts:
            control.append("Conflicts: " + ", ".join(pkg.conflicts))
            control.append("Replaces: " + ", ".join(pkg.conflicts))
        if pkg.provides:
            control.append("Provides: " + ", ".join(pkg.provides))
        control.append(f"Description: {pkg.summary}")
        control.append(" This package belongs to the clustercert lab: it installs a simulated tool that")
        control.append(" prints the real tool's output format from simulated hardware state.")
        (debian / "control").write_text("\n".join(control) + "\n")
        if conffiles:
            (debian / "conffiles").write_text("\n".join(conffiles) + "\n")
        for script, body in (("postinst", pkg.postinst), ("prerm", pkg.prerm)):
            if body:
                f = debian / script
                f.write_text("#!/bin/sh\nset -e\n" + body + "exit 0\n")
                f.chmod(0o755)
        epochless = pkg.version.split(":", 1)[-1]
        out = out_dir / f"{pkg.name}_{epochless}_{pkg.arch}.deb"
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(out)],
                       check=True, capture_output=True, timeout=120)
        return out


def _gpg(home: Path, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["gpg", "--homedir", str(home), "--batch", "--yes", "--no-tty", *args],
                          check=True, capture_output=True, input=input, timeout=120)


def signing_home(repo_dir: Path) -> Path:
    return Path(repo_dir).resolve().parent / "repo-signing-key"


def _ensure_key(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    os.chmod(home, 0o700)
    r = subprocess.run(["gpg", "--homedir", str(home), "--batch", "--list-secret-keys", "--with-colons"],
                       capture_output=True, text=True, timeout=60)
    if "sec:" not in r.stdout:
        _gpg(home, "--passphrase", "", "--quick-gen-key", KEY_UID, "ed25519", "sign", "never")


def _hashes(files: list[Path], base: Path) -> str:
    out = []
    for algo, label in (("md5", "MD5Sum"), ("sha256", "SHA256")):
        out.append(f"{label}:")
        for f in files:
            data = f.read_bytes()
            out.append(f" {hashlib.new(algo, data).hexdigest()} {len(data):>8} {f.relative_to(base)}")
    return "\n".join(out) + "\n"


def build_repo(repo_dir: Path, profile: dict) -> None:
    """Build every simulated package and a signed flat apt repository in ``repo_dir``."""
    repo_dir = Path(repo_dir)
    if repo_dir.exists():
        shutil.rmtree(repo_dir)
    pool = repo_dir / "pool"
    pool.mkdir(parents=True)
    for pkg in all_packages(profile):
        build_deb(pkg, pool)
    scan = subprocess.run(["dpkg-scanpackages", "--multiversion", "pool", "/dev/null"], cwd=repo_dir,
                          check=True, capture_output=True, text=True, timeout=300)
    packages = repo_dir / "Packages"
    packages.write_text(scan.stdout)
    with gzip.open(repo_dir / "Packages.gz", "wb", compresslevel=9) as f:
        f.write(scan.stdout.encode())
    date = time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime())
    release = (f"Origin: clustercert-lab\nLabel: clustercert-lab\nSuite: lab\nCodename: lab\nDate: {date}\n"
               "Architectures: amd64 all\nDescription: clustercert lab repository (simulated NVIDIA/DOCA "
               "packages)\n"
               + _hashes([packages, repo_dir / "Packages.gz"], repo_dir))
    (repo_dir / "Release").write_text(release)
    home = signing_home(repo_dir)
    _ensure_key(home)
    _gpg(home, "--clearsign", "-o", str(repo_dir / "InRelease"), str(repo_dir / "Release"))
    _gpg(home, "-abs", "-o", str(repo_dir / "Release.gpg"), str(repo_dir / "Release"))
    key = _gpg(home, "--export").stdout
    (repo_dir / "clustercert-lab.gpg").write_bytes(key)
    # also under the name the nvidia_repos role expects next to a site mirror (its default), so the lab
    # is configured exactly as a site is: by the mirror URL alone
    (repo_dir / "clustercert-mirror.gpg").write_bytes(key)
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True,
                   timeout=30)
