"""The lab's node image: a debootstrap'ed Debian 12 root filesystem, built once and cached.

Layout under the image cache (env ``CLUSTERCERT_LAB_CACHE``, default /var/cache/clustercert/lab):

  base/            debootstrap --variant=minbase + the lab's configuration (ssh, apt, networkd...)
  base.recipe      sha256 of the recipe that built base/ (rebuilt only when the recipe changes)
  extras/          an overlay upper layer on top of base/ holding Debian packages too big to install on
                   every node at bootstrap: Debian's python3-torch (PyTorch for the DDP smoke test, about
                   1 GB installed), and fio and numactl; the roles still install them, finding them there
  extras.recipe    sha256 of the base recipe and EXTRA_PACKAGES (rebuilt only when either changes)
  simlayer/        an overlay upper layer on top of extras/ and base/ holding what ``sim.prepare_image``
  installed simlayer.recipe  sha256 over the simulator's source files (cheap to rebuild: seconds)
  repo/<profile>/  the simulated apt repository built by ``packages.build_repo``
  apt-proxy/       the apt proxy's package cache (kept across labs: nodes' apt installs stay fast)
  debs/            debootstrap's downloaded .debs (a rebuild does not download them again)

A node's root filesystem is an overlay with lowerdir=simlayer:extras:base and its own upper directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from clustercert_lab import packages, sim
from clustercert_lab.errors import LabError

log = logging.getLogger("clustercert.lab")

SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
MGMT_HOST_IP = "10.250.0.1"
PROXY_PORT = 3143  # not 3142: a distro apt-cacher-ng started by its package would hold that one
REPO_PORT = 8081

# Packages of the node image. minbase + what Ansible's apt/systemd/sysctl/modprobe modules need.
IMAGE_PACKAGES = [
    "openssh-server",
    "python3",
    "python3-apt",
    "iproute2",
    "sudo",
    "procps",
    "iputils-ping",
    "systemd",
    "systemd-sysv",
    "dbus",
    "ca-certificates",
    "gpgv",
    "kmod",
]

# Debian packages of the extras layer: what the roles install on every node that is too big to unpack on
# eight nodes at once on the lab's two cores (python3-torch and its libraries). The lab profile names
# python3-torch as the site's PyTorch package (ddp.package): the nccl_tools role installs it as it would
# on a site's node, and finds it installed.
EXTRA_PACKAGES = ["python3-torch", "fio", "numactl"]

# Host tool -> Debian package providing it.
HOST_TOOLS = {
    "debootstrap": "debootstrap",
    "systemd-nspawn": "systemd-container",
    "iperf3": "iperf3",
    "apt-cacher-ng": "apt-cacher-ng",
    "iptables": "iptables",
    "gpg": "gnupg",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "dpkg-deb": "dpkg",
    "nsenter": "util-linux",
    "tc": "iproute2",
    "ip": "iproute2",
    "flock": "util-linux",
}
HOST_SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")

APT_CONF = f"""\
// clustercert lab: nodes reach the Debian mirror only through the host's apt proxy.
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
Acquire::http::Proxy "http://{MGMT_HOST_IP}:{PROXY_PORT}";
Acquire::http::Proxy::{MGMT_HOST_IP} "DIRECT";
Acquire::Retries "3";
Dpkg::Use-Pty "0";
"""

SSHD_DROPIN = """\
# clustercert lab
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
MaxStartups 100:30:200
HostKey /etc/ssh/ssh_host_ed25519_key
"""

JOURNALD_DROPIN = """\
# clustercert lab: keep idle nodes small
[Journal]
Storage=volatile
RuntimeMaxUse=8M
"""

RESOLV_CONF = "# clustercert lab nodes have no DNS: lab names are in /etc/hosts, apt goes through the proxy\n"

# Units that would make idle nodes busy or grab the dpkg lock behind the tests' back.
MASKED_UNITS = [
    "systemd-firstboot.service",
    "apt-daily.timer",
    "apt-daily.service",
    "apt-daily-upgrade.timer",
    "apt-daily-upgrade.service",
    "dpkg-db-backup.timer",
    "dpkg-db-backup.service",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    "systemd-tmpfiles-clean.timer",
    "getty@tty1.service",
    "console-getty.service",
]
ENABLED_UNITS = ["systemd-networkd.service", "ssh.service"]

RECIPE_VERSION = 4  # bump when the build steps below change in a way the constants do not show


def cache_dir() -> Path:
    return Path(os.environ.get("CLUSTERCERT_LAB_CACHE", "/var/cache/clustercert/lab"))


def base_dir() -> Path:
    return cache_dir() / "base"


def simlayer_dir() -> Path:
    return cache_dir() / "simlayer"


def extras_dir() -> Path:
    return cache_dir() / "extras"


def repo_dir(profile: str) -> Path:
    return cache_dir() / "repo" / profile


def apt_proxy_cache() -> Path:
    return cache_dir() / "apt-proxy"


def lowerdirs() -> str:
    """The overlay lowerdir option value for a node root."""
    return f"{simlayer_dir()}:{extras_dir()}:{base_dir()}"


def _which(tool: str) -> str | None:
    path = os.environ.get("PATH", "")
    extra = ":".join(HOST_SBIN_DIRS)
    return shutil.which(tool, path=f"{path}:{extra}")


def ensure_host_packages() -> list[str]:
    """Install the host packages the lab needs (apt-get) when one is missing. Returns what it installed."""
    missing = sorted({pkg for tool, pkg in HOST_TOOLS.items() if _which(tool) is None})
    if not missing:
        return []
    log.info("lab: installing host packages: %s", " ".join(missing))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update"], check=False, env=env, capture_output=True, timeout=300)
    proc = subprocess.run(
        ["apt-get", "install", "-y", "--no-install-recommends", *missing],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        raise LabError(f"apt-get install {' '.join(missing)} failed: {proc.stderr.strip()[-500:]}")
    return missing


def host_mirror() -> str:
    """The Debian mirror the host's own apt sources use (the only one reachable on restricted networks)."""
    candidates: list[str] = []
    files = [Path("/etc/apt/sources.list")]
    src_d = Path("/etc/apt/sources.list.d")
    if src_d.is_dir():
        files += sorted(src_d.glob("*.list")) + sorted(src_d.glob("*.sources"))
    for f in files:
        try:
            text = f.read_text()
        except OSError:
            continue
        candidates += _source_uris(text)
    for uri in candidates:
        if uri.startswith("http://") and uri.rstrip("/").endswith("/debian"):
            return uri.rstrip("/")
    return DEFAULT_MIRROR


def _source_uris(text: str) -> list[str]:
    """The mirrors of an apt sources file: a one-line ``deb`` entry's of SUITE, a deb822 ``URIs:`` field's
    (but for the security archive's)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#"):
            continue
        m = re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
        if m and m.group(2) == SUITE:
            out.append(m.group(1))
            continue
        m = re.match(r"^URIs:\s*(.+)$", line)
        if m:
            out += [uri for uri in m.group(1).split() if "security" not in uri]
    return out


def sources_list(mirror: str) -> str:
    security = mirror[: -len("/debian")] + "/debian-security" if mirror.endswith("/debian") else mirror
    return (
        f"deb {mirror} {SUITE} main\n"
        f"deb {mirror} {SUITE}-updates main\n"
        f"deb {security} {SUITE}-security main\n"
    )


def base_recipe(mirror: str) -> str:
    data = {
        "version": RECIPE_VERSION,
        "suite": SUITE,
        "mirror": mirror,
        "packages": IMAGE_PACKAGES,
        "apt_conf": APT_CONF,
        "sshd": SSHD_DROPIN,
        "journald": JOURNALD_DROPIN,
        "resolv": RESOLV_CONF,
        "masked": MASKED_UNITS,
        "enabled": ENABLED_UNITS,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


@contextlib.contextmanager
def _cache_lock() -> Iterator[None]:
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(argv: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or "").strip()[-800:]
        raise LabError(f"{' '.join(argv[:4])}... failed (exit {proc.returncode}): {tail}")
    return proc


def _chroot(root: Path, argv: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "DEBIAN_FRONTEND": "noninteractive",
        "LANG": "C.UTF-8",
        "HOME": "/root",
    }
    return _run(["chroot", str(root), *argv], timeout=timeout, env=env)


@contextlib.contextmanager
def _host_dns(root: Path):
    """The host's resolver in the image's root while the image build fetches from the mirror (a node has no
    DNS: RESOLV_CONF); put back afterwards. A mirror named by DNS (deb.debian.org) is unreachable
    otherwise."""
    resolv = root / "etc/resolv.conf"
    kept = resolv.read_text() if resolv.exists() and not resolv.is_symlink() else RESOLV_CONF
    if resolv.is_symlink():
        resolv.unlink()
    try:
        host = Path("/etc/resolv.conf").read_text()
    except OSError:
        host = ""
    _write(resolv, host)
    try:
        yield
    finally:
        _write(resolv, kept)


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _configure_base(root: Path, mirror: str) -> None:
    _write(root / "etc/apt/sources.list", sources_list(mirror))
    _write(root / "etc/apt/apt.conf.d/90clustercert-lab", APT_CONF)
    _write(root / "etc/ssh/sshd_config.d/10-clustercert-lab.conf", SSHD_DROPIN)
    _write(root / "etc/systemd/journald.conf.d/10-clustercert-lab.conf", JOURNALD_DROPIN)
    # Host keys are per node (written by the lab when it creates the node); none shared in the image.
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    # Every node gets its own machine-id (written per node), none in the image.
    for mid in (root / "etc/machine-id", root / "var/lib/dbus/machine-id"):
        with contextlib.suppress(FileNotFoundError):
            mid.unlink()
    with contextlib.suppress(FileNotFoundError):
        (root / "etc/hostname").unlink()
    resolv = root / "etc/resolv.conf"
    if resolv.is_symlink():
        resolv.unlink()
    _write(resolv, RESOLV_CONF)
    (root / "root/.ssh").mkdir(mode=0o700, exist_ok=True)
    # apt-get update once, straight from the host (the proxy only exists while a lab runs);
    # keeping the lists and pkgcache.bin in the image spares every node ~76 MB and the download.
    with _host_dns(root):
        _chroot(root, ["apt-get", "-o", "Acquire::http::Proxy=DIRECT", "update"], timeout=300)
    _chroot(root, ["systemctl", "enable", *ENABLED_UNITS])
    _chroot(root, ["systemctl", "mask", *MASKED_UNITS])
    _chroot(root, ["apt-get", "clean"])


def _build_base(mirror: str) -> None:
    cache = cache_dir()
    tmp = cache / "base.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    debs = cache / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    log.info("lab: building the node image with debootstrap (%s %s), ~1 min", SUITE, mirror)
    _run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(IMAGE_PACKAGES)}",
            f"--cache-dir={debs}",
            SUITE,
            str(tmp),
            mirror,
        ],
        timeout=900,
    )
    _configure_base(tmp, mirror)
    old = cache / "base"
    if old.exists():
        shutil.rmtree(old)
    tmp.rename(old)
    (cache / "base.recipe").write_text(base_recipe(mirror) + "\n")
    log.info("lab: node image built in %.0f s", time.monotonic() - t0)


def extras_recipe(mirror: str) -> str:
    return hashlib.sha256(json.dumps({"base": base_recipe(mirror), "packages": EXTRA_PACKAGES},
                                     sort_keys=True).encode()).hexdigest()


def _build_extras(mirror: str) -> None:
    """apt-get install EXTRA_PACKAGES into an overlay upper layer on base/, straight from the mirror (the
    apt proxy only exists while a lab runs); the downloaded .debs stay in debs/ for the next build."""
    cache = cache_dir()
    upper, work, merged = extras_dir(), cache / "extras.work", cache / "extras.merged"
    for d in (upper, work):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    merged.mkdir(exist_ok=True)
    t0 = time.monotonic()
    log.info("lab: installing %s into the image's extras layer (first build only)", " ".join(EXTRA_PACKAGES))
    _run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={base_dir()},upperdir={upper},workdir={work}",
          str(merged)], timeout=30)
    try:
        debs = cache / "debs"
        (debs / "partial").mkdir(parents=True, exist_ok=True)
        _run(["mount", "--bind", str(debs), str(merged / "var/cache/apt/archives")], timeout=30)
        _run(["mount", "-t", "proc", "proc", str(merged / "proc")], timeout=30)
        try:
            with _host_dns(merged):
                _chroot(merged, ["apt-get", "-o", "Acquire::http::Proxy=DIRECT", "update"], timeout=300)
                _chroot(merged, ["apt-get", "-o", "Acquire::http::Proxy=DIRECT", "install", "-y",
                                 "--no-install-recommends", *EXTRA_PACKAGES], timeout=1800)
        finally:
            for m in ("proc", "var/cache/apt/archives"):
                subprocess.run(["umount", str(merged / m)], capture_output=True, timeout=30)
        _chroot(merged, ["apt-get", "clean"])
    finally:
        subprocess.run(["umount", str(merged)], capture_output=True, timeout=30)
    shutil.rmtree(work, ignore_errors=True)
    (cache / "extras.recipe").write_text(extras_recipe(mirror) + "\n")
    log.info("lab: extras layer built in %.0f s", time.monotonic() - t0)


def _sim_sources() -> list[Path]:
    here = Path(__file__).resolve().parent
    files = [here / "packages.py", here / "hardware.py"]
    sim = here / "sim"
    if sim.is_dir():
        files += sorted(p for p in sim.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return [f for f in files if f.exists()]


def sim_recipe(profile_name: str, profile: dict) -> str:
    h = hashlib.sha256()
    h.update(base_recipe(host_mirror()).encode())
    h.update(extras_recipe(host_mirror()).encode())
    h.update(json.dumps(profile, sort_keys=True, default=str).encode())
    h.update(profile_name.encode())
    h.update(os.uname().release.encode())  # the repo carries headers for the host's running kernel
    here = Path(__file__).resolve().parent
    for f in _sim_sources():
        h.update(str(f.relative_to(here)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _build_simlayer(profile_name: str, profile: dict) -> None:
    cache = cache_dir()
    upper = simlayer_dir()
    work = cache / "simlayer.work"
    merged = cache / "simlayer.merged"
    for d in (upper, work):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    merged.mkdir(exist_ok=True)
    _run(
        ["mount", "-t", "overlay", "overlay", "-o",
         f"lowerdir={extras_dir()}:{base_dir()},upperdir={upper},workdir={work}", str(merged)],
        timeout=30,
    )
    try:
        sim.prepare_image(merged)
    finally:
        subprocess.run(["umount", str(merged)], capture_output=True, timeout=30)
    shutil.rmtree(work, ignore_errors=True)
    rdir = repo_dir(profile_name)
    if rdir.exists():
        shutil.rmtree(rdir)
    rdir.mkdir(parents=True)
    packages.build_repo(rdir, profile)
    (cache / "simlayer.recipe").write_text(sim_recipe(profile_name, profile) + "\n")


def _recorded(name: str) -> str | None:
    try:
        return (cache_dir() / name).read_text().strip()
    except OSError:
        return None


def image_in_use() -> bool:
    """True while an overlay mount (a lab node) uses the cached image as a lower layer."""
    needle = str(base_dir())
    try:
        with open("/proc/self/mountinfo") as fh:
            return any(" overlay " in line and needle in line for line in fh)
    except OSError:
        return False


def ensure_image(profile_name: str, profile: dict) -> dict:
    """Build (or reuse) the base image and the simulator layer. Returns what was done, with timings.

    Never rebuilds an image that running nodes sit on: that waits for the next up after `lab down`."""
    done = {"base_built": False, "extras_built": False, "simlayer_built": False}
    ensure_host_packages()
    with _cache_lock():
        if image_in_use():
            if (_recorded("base.recipe") != base_recipe(host_mirror())
                    or _recorded("extras.recipe") != extras_recipe(host_mirror())
                    or _recorded("simlayer.recipe") != sim_recipe(profile_name, profile)):
                log.warning("lab: the image recipe changed, but running nodes use the image: it is rebuilt "
                            "on the next `lab up` after `lab down`")
            return done
        mirror = host_mirror()
        t0 = time.monotonic()
        if _recorded("base.recipe") != base_recipe(mirror) or not (base_dir() / "usr/sbin/sshd").exists():
            _build_base(mirror)
            done["base_built"] = True
            (cache_dir() / "extras.recipe").unlink(missing_ok=True)
            (cache_dir() / "simlayer.recipe").unlink(missing_ok=True)
        done["base_s"] = round(time.monotonic() - t0, 2)
        t0 = time.monotonic()
        if _recorded("extras.recipe") != extras_recipe(mirror) or not extras_dir().is_dir():
            _build_extras(mirror)
            done["extras_built"] = True
            (cache_dir() / "simlayer.recipe").unlink(missing_ok=True)
        done["extras_s"] = round(time.monotonic() - t0, 2)
        t0 = time.monotonic()
        if _recorded("simlayer.recipe") != sim_recipe(profile_name, profile) or not simlayer_dir().is_dir():
            _build_simlayer(profile_name, profile)
            done["simlayer_built"] = True
        done["simlayer_s"] = round(time.monotonic() - t0, 2)
    return done
