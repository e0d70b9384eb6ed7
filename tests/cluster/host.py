"""What the one-node cluster changes on the host, and how all of it is put back.

Everything is named so it can be found again after a crash: the bridge, iptables rules carrying
a comment, the Kubernetes chains (KUBE-*), the pods' cgroup subtree (the kubelet's cgroupRoot),
the containerd shims (their command line names our socket), and every mount under the cluster's
folder. `sweep()` removes all of it and is idempotent, so the harness runs it before a start (a
crashed run leaves no trace for the next one) and after a stop.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

MARK = "jetstream-kopf-cluster"  # comment on our iptables rules
CGROUP = "jetstream-kopf"  # the kubelet's cgroupRoot: every pod process lives below it
# Kernel settings the kubelet changes at start (it wants panic on oops, overcommit...); restored on sweep.
TUNABLES = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
            "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")
_IPTABLES = ("iptables", "ip6tables")
_TABLES = ("filter", "nat", "mangle", "raw")


class HostError(RuntimeError):
    """A host command failed; the message names it and carries its output."""


def run(*cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise HostError(f"{shlex.join(cmd)} exited {done.returncode}: {(done.stderr or done.stdout).strip()}")
    return done


# Network -------------------------------------------------------------------------------------------


def create_bridge(name: str, gateway_cidr: str) -> None:
    """The pods' bridge with the node's address on it, made before the CNI plugin would make it, so the
    apiserver and host services can listen on that address from the start."""
    run("ip", "link", "add", "name", name, "type", "bridge")
    run("ip", "addr", "add", gateway_cidr, "dev", name)
    run("ip", "link", "set", name, "up")


def allow_forwarding(bridge: str) -> None:
    """Accept traffic to and from the pods even when FORWARD's policy is DROP (Docker sets that)."""
    for direction in ("-i", "-o"):
        run("iptables", "-I", "FORWARD", direction, bridge, "-m", "comment", "--comment", MARK, "-j", "ACCEPT")


def _remove_iptables() -> None:
    """Delete our commented rules, every rule jumping to a KUBE-* chain, then the KUBE-* chains."""
    for tool in _IPTABLES:
        for table in _TABLES:
            listed = run(tool, "-w", "-t", table, "-S", check=False)
            if listed.returncode != 0:
                continue  # table or tool not available
            chains = []
            for line in listed.stdout.splitlines():
                words = shlex.split(line)
                if words[:1] == ["-N"] and words[1].startswith("KUBE-"):
                    chains.append(words[1])
                elif words[:1] == ["-A"] and not words[1].startswith("KUBE-") and (
                        MARK in words or any(w.startswith("KUBE-") for w in words[2:])):
                    run(tool, "-w", "-t", table, "-D", *words[1:], check=False)
            for verb in ("-F", "-X"):  # empty all first: the chains jump to each other
                for chain in chains:
                    run(tool, "-w", "-t", table, verb, chain, check=False)


# cgroups and processes -----------------------------------------------------------------------------


def _cgroup_mounts() -> list[Path]:
    """Every mounted cgroup hierarchy (one per controller on v1, a single one on v2)."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype in ("cgroup", "cgroup2"):
            mounts.append(Path(fields[4]))
    return mounts


def create_cgroup() -> None:
    """The kubelet's cgroupRoot must exist in every hierarchy; a v1 cpuset child starts empty."""
    for mount in _cgroup_mounts():
        folder = mount / CGROUP
        folder.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (folder / name).exists() and not (folder / name).read_text().strip():
                (folder / name).write_text((mount / name).read_text())


def _kill_cgroup(timeout: float = 20) -> None:
    """SIGKILL every process in our cgroup subtree until none is left, then remove the subtree."""
    deadline = time.monotonic() + timeout
    for mount in _cgroup_mounts():
        root = mount / CGROUP
        if not root.is_dir():
            continue
        folders = sorted((p for p, _, _ in os.walk(root)), key=lambda p: p.count("/"), reverse=True)
        for folder in folders:
            while True:
                try:
                    pids = [int(pid) for pid in (Path(folder) / "cgroup.procs").read_text().split()]
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    _kill(pid)
                if time.monotonic() > deadline:
                    raise HostError(f"processes {pids} in {folder} survive SIGKILL")
                time.sleep(0.05)  # the kernel removes killed tasks from cgroup.procs asynchronously
            try:
                os.rmdir(folder)
            except OSError:
                pass  # cgroup v1 hierarchies sometimes keep a just-emptied group busy for a moment


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _kill_shims(socket: Path) -> None:
    """containerd's shims outlive containerd (they are daemons); ours name our socket."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and str(socket).encode() in argv:
            _kill(int(proc.name))


# Mounts, files, kernel settings --------------------------------------------------------------------


def _unmount_under(folder: Path) -> None:
    """Detach every mount below `folder` (volumes, rootfs overlays, netns), deepest first."""
    prefix = str(folder).rstrip("/") + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")  # octal escapes such as \040
        if point.startswith(prefix):
            points.append(point)
    for point in sorted(set(points), key=lambda p: p.count("/"), reverse=True):
        run("umount", "--lazy", point, check=False)


def _remove_log_links(folder: Path) -> None:
    """The kubelet links /var/log/containers/* to its pod log folder; remove links into ours."""
    links = Path("/var/log/containers")
    if not links.is_dir():
        return
    for link in links.iterdir():
        if link.is_symlink() and os.readlink(link).startswith(str(folder)):
            link.unlink()


def save_tunables(path: Path) -> None:
    saved = {name: (Path("/proc/sys") / name).read_text().strip()
             for name in TUNABLES if (Path("/proc/sys") / name).exists()}
    path.write_text(json.dumps(saved))


def _restore_tunables(path: Path) -> None:
    if not path.exists():
        return
    for name, value in json.loads(path.read_text()).items():
        try:
            (Path("/proc/sys") / name).write_text(value)
        except OSError:
            pass  # read-only in this environment: the kubelet could not change it either


# Everything ----------------------------------------------------------------------------------------


def sweep(folder: Path, bridge: str, containerd_socket: Path, tunables: Path) -> None:
    """Remove every trace of a cluster that used `folder`, whether it stopped cleanly or crashed."""
    _kill_cgroup()
    _kill_shims(containerd_socket)
    _unmount_under(folder)
    _remove_iptables()
    if run("ip", "link", "show", bridge, check=False).returncode == 0:
        run("ip", "link", "delete", bridge)
    _remove_log_links(folder)
    _restore_tunables(tunables)
    if folder.exists():
        run("rm", "-rf", "--one-file-system", str(folder))
