"""Container images made on this machine, as `docker save` archives that containerd imports.

No registry is reachable, so the two images the cluster itself needs are assembled from local files:
the pod sandbox (`registry.k8s.io/pause:3.10`, the tag containerd's CRI asks for, holding
tools/cluster's pause program) and a busybox image (Debian's `busybox-static`) for the storage
provisioner's helper pods and the harness's own tests. The project's image comes from Docker
(tests/image) and is streamed with `docker save`.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

PAUSE = "registry.k8s.io/pause:3.10"
BUSYBOX = "jetstream-kopf.local/busybox:1"


@dataclass
class Layer:
    """One image layer: regular files (path -> content, mode) and symlinks (path -> target)."""

    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    symlinks: dict[str, str] = field(default_factory=dict)
    folders: tuple[str, ...] = ()

    def tar(self) -> bytes:
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for folder in self.folders:
                info = tarfile.TarInfo(folder)
                info.type, info.mode = tarfile.DIRTYPE, 0o1777 if folder == "tmp" else 0o755
                tar.addfile(info)
            for path, (content, mode) in sorted(self.files.items()):
                info = tarfile.TarInfo(path)
                info.size, info.mode = len(content), mode
                tar.addfile(info, io.BytesIO(content))
            for path, target in sorted(self.symlinks.items()):
                info = tarfile.TarInfo(path)
                info.type, info.linkname = tarfile.SYMTYPE, target
                tar.addfile(info)
        return out.getvalue()


def docker_archive(tag: str, layer: Layer, entrypoint: list[str], destination: Path) -> Path:
    """Write a one-layer image in `docker save` format (what `ctr images import` reads)."""
    layer_tar = layer.tar()
    diff_id = "sha256:" + hashlib.sha256(layer_tar).hexdigest()
    config = json.dumps({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": entrypoint, "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": ["layer.tar"]}]).encode()
    with tarfile.open(destination, mode="w") as archive:
        for name, content in ((config_name, config), ("layer.tar", layer_tar), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return destination


def pause(binary: Path, destination: Path) -> Path:
    return docker_archive(PAUSE, Layer(files={"pause": (binary.read_bytes(), 0o755)}), ["/pause"], destination)


def busybox(binary: Path, applets: list[str], destination: Path) -> Path:
    """A busybox image: /bin/busybox (static) and a /bin symlink for each applet, /tmp writable."""
    layer = Layer(
        files={"bin/busybox": (binary.read_bytes(), 0o755)},
        symlinks={f"bin/{applet}": "busybox" for applet in applets if applet != "busybox"},
        folders=("bin", "tmp", "etc"),
    )
    return docker_archive(BUSYBOX, layer, ["/bin/sh"], destination)
