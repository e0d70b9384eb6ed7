"""A real Docker engine for the tests: found running, or installed (Debian's `docker.io`) and started.

`ensure()` is idempotent: a daemon that answers `docker info` is used as it is; otherwise, as root on a
Debian-like machine, `docker.io` (and `debootstrap`, for the base image) are installed with apt and
`dockerd` is started in the background with its own pid file. `stop()` stops only a daemon this module
started, by its process id. Used by tests/image and the real-cluster harness.

When the engine cannot be had, `EngineUnavailable` says why; the tests skip then, unless
JETSTREAM_KOPF_REQUIRE_DOCKER is set (CI): then they fail.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

REQUIRE_ENV = "JETSTREAM_KOPF_REQUIRE_DOCKER"
STATE = Path(os.environ.get("JETSTREAM_KOPF_DOCKER_STATE", "/var/run/jetstream-kopf-dockerd"))
PACKAGES = ("docker.io", "debootstrap")


class EngineUnavailable(RuntimeError):
    """No Docker engine, and none could be installed or started here."""


def required() -> bool:
    return os.environ.get(REQUIRE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def docker(*args: str, timeout: float = 600, check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload]
    if check and done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done


def answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return docker("info", "--format", "{{.ServerVersion}}", timeout=20, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def which(binary: str) -> str | None:
    """Like shutil.which, also looking where Debian puts daemons (not always on a user's PATH)."""
    return shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/sbin")


def sbin_env() -> dict[str, str]:
    """The environment with the system folders on PATH: dockerd runs iptables, debootstrap chroot."""
    return dict(os.environ, PATH=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")


def _install() -> None:
    missing = [p for p, binary in zip(PACKAGES, ("dockerd", "debootstrap")) if which(binary) is None]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise EngineUnavailable(f"{', '.join(missing)} missing; install them (Debian: apt-get install {' '.join(missing)})")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if done.returncode != 0:
            raise EngineUnavailable(f"{' '.join(cmd)} failed: {done.stderr.strip()[-1000:]}")


def _pid() -> int | None:
    try:
        pid = int((STATE / "dockerd.pid").read_text())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def ensure(timeout: float = 60) -> None:
    """A Docker engine answers `docker` commands afterwards, or EngineUnavailable."""
    if answers():
        return
    _install()
    if _pid() is None:
        STATE.mkdir(parents=True, exist_ok=True)
        log = (STATE / "dockerd.log").open("ab")
        proc = subprocess.Popen([which("dockerd") or "dockerd", "--pidfile", str(STATE / "dockerd.pid")], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                env=sbin_env())
        (STATE / "started-by-tests").write_text(str(proc.pid))
    deadline = time.monotonic() + timeout
    while not answers():
        if time.monotonic() > deadline:
            tail = (STATE / "dockerd.log").read_text(errors="replace")[-2000:]
            raise EngineUnavailable(f"dockerd did not answer within {timeout:.0f} s:\n{tail}")
        time.sleep(0.5)  # polling the daemon's socket until it answers


def stop(timeout: float = 30) -> None:
    """Stop the daemon `ensure()` started (none other), by its process id."""
    marker = STATE / "started-by-tests"
    pid = _pid()
    if pid is None or not marker.exists() or int(marker.read_text()) != pid:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _pid() is not None and time.monotonic() < deadline:
        time.sleep(0.2)  # dockerd stops its containers first
    if _pid() is not None:
        os.kill(pid, signal.SIGKILL)
    marker.unlink(missing_ok=True)
