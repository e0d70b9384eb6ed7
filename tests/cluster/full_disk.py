"""The broker's volume full on the real one-node cluster (issue 35, part 2), while the ORDERS pipeline's
clients run: the chart (defaults, the image set) with the broker's store on a claim bound to a small tmpfs
this host (the node) mounts, the ORDERS example applied, the chaos run's generator publishing orders with
message ids and its worker acknowledging NEW (tests/cluster/chaos.py; the Spark query is left out: it adds
minutes and no disk use of the broker's).

Then a file written into the volume from the host leaves less than jsbroker's reserve free (and a few 4 KB
messages on ORDERS.ballast use up what the store was granted before): publishes are refused with 503/10023, the operator sets Stream orders' StorageAvailable False (OutOfStorage) and posts a
Warning Event, while a backlog of NEW is fetched and acknowledged (reads and acks go on). The file removed,
the retried orders are stored, StorageAvailable turns True (MessageStored), and every acknowledged order is
in ORDERS once, at its acknowledged sequence, with its payload.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nats.js.errors import APIError

from jsoperator import status as operator_status
from tests.cluster import chaos, e2e
from tests.cluster.e2e import Kube
from tests.polling import poll
from tests.small_volume import fill, small_volume

NAMESPACE = "jk-full-disk"
VOLUME = 16 << 20  # jsbroker keeps 1 MiB of it back (store/disk_room.py)
CLAIM = "broker-store"
TIMEOUT = 180.0  # seconds for each expected change on the loaded machine


@dataclass
class FullDiskReport:
    acked_before: int  # orders acknowledged when the volume was filled
    refused: dict[int, int]  # err_code -> publishes refused
    acked_while_full: int  # NEW messages acknowledged while the volume was full
    full_for: float  # seconds from the fill to StorageAvailable False
    back_after: float  # seconds from the file's removal to StorageAvailable True
    orders: int

    def text(self) -> str:
        return (f"full disk: {self.acked_before} orders before the fill; publishes refused {self.refused}; "
                f"StorageAvailable False {self.full_for:.1f}s after the fill; {self.acked_while_full} NEW messages "
                f"acknowledged while full; True again {self.back_after:.1f}s after the file went; "
                f"{self.orders} orders, all in ORDERS once")


def _volume_objects(path: Path, volume: str) -> list[dict[str, Any]]:
    """PersistentVolume `volume` on the host folder `path` and the claim bound to it (no provisioner)."""
    size = f"{VOLUME >> 20}Mi"
    return [
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
         "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                  "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(path), "type": "Directory"},
                  "claimRef": {"namespace": NAMESPACE, "name": CLAIM}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CLAIM, "namespace": NAMESPACE},
         "spec": {"storageClassName": "", "volumeName": volume, "accessModes": ["ReadWriteOnce"],
                  "resources": {"requests": {"storage": size}}}},
    ]


def _storage(kube: Kube) -> tuple[str, str, str]:
    """(status, reason, message) of Stream orders' StorageAvailable condition, ("", "", "") before one."""
    found = operator_status.condition(kube.resource(NAMESPACE, "Stream", "orders").get("status"),
                                      operator_status.STORAGE) or {}
    return str(found.get("status", "")), str(found.get("reason", "")), str(found.get("message", ""))


async def _ballast(url: str, token: str, size: int = 4096) -> None:
    """4 KB messages on ORDERS.ballast (no consumer's filter) until the broker refuses one with 10023."""
    nc = await chaos._connect(url, token)
    js = nc.jetstream(timeout=5)
    try:
        for _ in range(VOLUME // size):
            try:
                await js.publish("ORDERS.ballast", b"b" * size)
            except APIError as refused:
                assert refused.err_code == 10023, refused
                return
        raise AssertionError(f"{VOLUME // size} messages of {size} bytes stored on a full volume")
    finally:
        await nc.close()


def run(target: e2e.Target, image: str, helm: Path, workdir: Path, rate: float = 20.0) -> FullDiskReport:
    with small_volume(workdir / "broker-volume", VOLUME) as volume:
        volume.chmod(0o777)  # the broker runs as a user of its own

        def volume_first(kube: Kube) -> None:
            name = f"{NAMESPACE}-store"
            if not e2e._missing(lambda: kube.core.read_persistent_volume(name)):  # left by a failed run
                kube.core.delete_persistent_volume(name)
                poll(lambda: e2e._missing(lambda: kube.core.read_persistent_volume(name)), timeout=TIMEOUT,
                     what=f"PersistentVolume {name} of an earlier run gone")
            kube.core.create_namespace({"metadata": {"name": NAMESPACE}})
            kube.create(NAMESPACE, *_volume_objects(volume, name))

        kube, release, url, token = chaos.install(
            target, image, helm, workdir, NAMESPACE, {"broker": {"persistence": {"existingClaim": CLAIM}}},
            before=volume_first)
        generator, worker = chaos.Generator(url, token, rate, seed=35), chaos.Worker(url, token)
        generator.start()
        worker.start()
        try:
            poll(lambda: len(generator.acked) >= 50 and worker.confirmed > 0, timeout=TIMEOUT,
                 what="orders acknowledged and NEW worked on")
            worker.join()  # NEW's backlog grows until the volume is full: read and acknowledged then
            poll(lambda: asyncio.run(chaos._consumer(url, token, "NEW"))[2] >= 20, timeout=TIMEOUT,
                 what="a backlog of 20 orders on NEW")
            acked_before = len(generator.acked)
            filled = time.monotonic()
            filler = fill(volume, leave=512 << 10)  # below the reserve; the store's last grant (256 KiB) fits
            asyncio.run(_ballast(url, token))  # uses that grant up at once (the orders would take a minute)
            poll(lambda: generator.refused.get(10023), timeout=TIMEOUT, what="an order refused with 10023")
            poll(lambda: _storage(kube)[:2] == ("False", "OutOfStorage"), timeout=TIMEOUT, interval=0.5,
                 what=f"Stream orders StorageAvailable False OutOfStorage (now {_storage(kube)})")
            full_for = time.monotonic() - filled
            message = _storage(kube)[2]
            assert "has no storage left for stream ORDERS" in message, message
            assert kube.ready(NAMESPACE, "Stream", "orders") == ("True", "Synced")
            events = [e for e in kube.core.list_namespaced_event(NAMESPACE, field_selector="involvedObject.name=orders").items
                      if e.reason == "OutOfStorage"]
            assert [e.type for e in events] == ["Warning"], [(e.type, e.reason, e.message) for e in events]

            stuck = len(generator.acked)
            backlog = asyncio.run(chaos._consumer(url, token, "NEW"))[2]
            assert backlog > 0, "NEW has no backlog to read while the volume is full"
            reader = chaos.Worker(url, token)
            reader.start()
            poll(lambda: asyncio.run(chaos._consumer(url, token, "NEW"))[2:4] == (0, 0), timeout=TIMEOUT,
                 what="NEW's backlog fetched and acknowledged while the volume is full")
            acked_while_full = reader.confirmed
            assert len(generator.acked) <= stuck + 1 and generator.refused.get(10023, 0) > 0
            assert _storage(kube)[0] == "False"

            filler.unlink()
            freed = time.monotonic()
            poll(lambda: len(generator.acked) > stuck + 10, timeout=TIMEOUT, what="orders stored again")
            poll(lambda: _storage(kube)[:2] == ("True", "MessageStored"), timeout=TIMEOUT, interval=0.5,
                 what=f"Stream orders StorageAvailable True MessageStored (now {_storage(kube)})")
            back_after = time.monotonic() - freed
            generator.join(TIMEOUT)
            reader.join()
            stored = asyncio.run(chaos._stream(url, token))
            problems = chaos._check_stream(stored, generator, sink=False)
            assert not problems, "\n".join(problems[:20])
        finally:
            generator.stop.set()
            worker.stop.set()
        chaos.uninstall(kube, release, NAMESPACE)
        kube.core.delete_persistent_volume(f"{NAMESPACE}-store")
    return FullDiskReport(acked_before, dict(generator.refused), acked_while_full, full_for, back_after,
                          len(generator.acked))
