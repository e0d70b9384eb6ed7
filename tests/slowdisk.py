"""A slow disk for tests and bench/: ext4 on a loop device whose backing file lives on a FUSE file system
that delays every flush (fsync of the backing file) by `delay` seconds.

Real, not simulated: the server under test makes ordinary syscalls on ext4; an fsync there waits for the
journal commit, whose cache flushes reach the loop device and wait `delay` each (an ext4 fsync is about
two of them), as on a disk with a slow write cache; writes into the page cache meanwhile do not wait. (The
kernel here has no device-mapper, so dm-delay is not available; loop and FUSE are. FUSE alone is not
enough: the kernel holds a file's lock while FUSE answers its fsync, so writes to it would wait too.)

    python tests/slowdisk.py BACKING MOUNTPOINT --delay 0.2   # the FUSE layer alone, in the foreground

Needs root, /dev/fuse, fusermount3 (Debian: fuse3), losetup, mkfs.ext4 and the mfusepy package;
`install()` installs fuse3 where it can, `available()` says whether everything is there. `mounted(workdir, delay)` gives the ext4 mount point for as
long as the context lasts.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_SIZE = 256 << 20  # the ext4 file system's size (sparse)


def install() -> None:
    """apt-get install fuse3 (fusermount3, libfuse3) when it is missing and this is a Debian machine run as
    root (CI); otherwise leave it to `available()` to say what is missing."""
    if shutil.which("fusermount3") is not None or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "fuse3"]):
        if subprocess.run(cmd, capture_output=True, env=env, timeout=600, check=False).returncode != 0:
            return


def available() -> str | None:
    """None when a slow disk can be mounted here, else why not."""
    if os.geteuid() != 0:
        return "needs root (losetup, mount)"
    if not os.path.exists("/dev/fuse") or not os.path.exists("/dev/loop-control"):
        return "no /dev/fuse or /dev/loop-control"
    for tool in ("fusermount3", "losetup", "mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"no {tool} (Debian: apt-get install fuse3 mount e2fsprogs)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as e:
        return f"mfusepy unusable: {e}"
    return None


@contextlib.contextmanager
def mounted(workdir: Path, delay: float) -> Iterator[Path]:
    """ext4 on a slow loop device, mounted at `workdir/disk` (everything under `workdir`)."""
    with _delayed(workdir / "backing", workdir / "fuse", delay) as fuse_dir:
        image = fuse_dir / "disk.img"
        with open(image, "wb") as f:
            f.truncate(_SIZE)
        device = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True,
                                check=True).stdout.strip()
        mountpoint = workdir / "disk"
        mountpoint.mkdir(parents=True, exist_ok=True)
        try:
            subprocess.run(["mkfs.ext4", "-q", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", device],
                           check=True, capture_output=True)
            subprocess.run(["mount", device, str(mountpoint)], check=True, capture_output=True)
            try:
                yield mountpoint
            finally:
                subprocess.run(["umount", "-l", str(mountpoint)], check=False)
        finally:
            subprocess.run(["losetup", "-d", device], check=False)


FAIL_FLAG = ".fail-fsync"  # while a file of this name is in the FUSE layer's backing directory, fsyncs fail (EIO)


@contextlib.contextmanager
def failing(workdir: Path) -> Iterator[tuple[Path, Path]]:
    """The FUSE layer alone (no delay), mounted at `workdir/fuse`: yields (mountpoint, flag); while `flag`
    exists every fsync there fails with EIO, as on a failing device."""
    with _delayed(workdir / "backing", workdir / "fuse", 0.0) as mountpoint:
        yield mountpoint, workdir / "backing" / FAIL_FLAG


@contextlib.contextmanager
def _delayed(backing: Path, mountpoint: Path, delay: float) -> Iterator[Path]:
    """The FUSE layer (this file run as a subprocess) for as long as the context lasts."""
    backing.mkdir(parents=True, exist_ok=True)
    mountpoint.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, __file__, str(backing), str(mountpoint), "--delay", str(delay)],
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not os.path.ismount(mountpoint):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the slow disk's FUSE layer did not mount")
            time.sleep(0.05)
        yield mountpoint
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=False)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _operations(root: str, delay: float) -> Any:
    import mfusepy as fuse

    class SlowFsync(fuse.Operations):
        """Passthrough to `root`; fsync and fsyncdir sleep `delay` first."""

        use_ns = True

        def _full(self, path: str) -> str:
            return os.path.join(root, path.lstrip("/"))

        def access(self, path: str, amode: int) -> int:
            if not os.access(self._full(path), amode):
                raise fuse.FuseOSError(errno.EACCES)
            return 0

        def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
            st = os.lstat(self._full(path))
            keys = ("st_atime_ns", "st_ctime_ns", "st_gid", "st_mode", "st_mtime_ns", "st_nlink", "st_size", "st_uid")
            out = {k.replace("_ns", ""): getattr(st, k) for k in keys}
            return out

        def readdir(self, path: str, fh: Any) -> list[str]:
            return [".", "..", *os.listdir(self._full(path))]

        def mkdir(self, path: str, mode: int) -> None:
            os.mkdir(self._full(path), mode)

        def rmdir(self, path: str) -> None:
            os.rmdir(self._full(path))

        def unlink(self, path: str) -> None:
            os.unlink(self._full(path))

        def rename(self, old: str, new: str) -> None:
            os.rename(self._full(old), self._full(new))

        def chmod(self, path: str, mode: int) -> None:
            os.chmod(self._full(path), mode)

        def chown(self, path: str, uid: int, gid: int) -> None:
            os.chown(self._full(path), uid, gid)

        def utimens(self, path: str, times: Any = None) -> None:
            os.utime(self._full(path), ns=times)

        def truncate(self, path: str, length: int, fh: Any = None) -> None:
            os.truncate(self._full(path), length)

        def open(self, path: str, flags: int) -> int:
            return os.open(self._full(path), flags)

        def create(self, path: str, mode: int, fi: Any = None) -> int:
            return os.open(self._full(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            return os.pread(fh, size, offset)

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            return os.pwrite(fh, data, offset)

        def flush(self, path: str, fh: int) -> int:
            return 0

        def release(self, path: str, fh: int) -> int:
            os.close(fh)
            return 0

        def _flush(self) -> None:
            time.sleep(delay)
            if os.path.exists(os.path.join(root, FAIL_FLAG)):
                raise fuse.FuseOSError(errno.EIO)

        def fsync(self, path: str, datasync: int, fh: int) -> int:
            self._flush()
            os.fsync(fh)
            return 0

        def fsyncdir(self, path: str, datasync: int, fh: Any) -> int:
            self._flush()
            return 0

        def statfs(self, path: str) -> dict[str, int]:
            sv = os.statvfs(self._full(path))
            return {k: getattr(sv, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                                 "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

    return SlowFsync()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("backing")
    parser.add_argument("mountpoint")
    parser.add_argument("--delay", type=float, default=0.2, help="seconds each fsync waits (default 0.2)")
    args = parser.parse_args()
    import mfusepy as fuse

    fuse.FUSE(_operations(os.path.abspath(args.backing), args.delay), args.mountpoint, foreground=True,
              nothreads=False)


if __name__ == "__main__":
    main()
