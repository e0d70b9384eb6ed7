"""Leader election on a coordination.k8s.io Lease, so several operator replicas run with one active.

The standby replicas wait (`acquire`; the health port answers meanwhile); the leader renews the Lease every
`RETRY` seconds and stops itself when it could not renew for `RENEW_DEADLINE` (before the Lease expires
for the others at `DURATION`), so two replicas never reconcile at once. A leader that stops normally
(SIGTERM, a rollout, a drained node) releases the Lease, and a standby takes over within `RETRY` seconds;
a leader that dies without releasing it is replaced once the Lease expires.

Expiry is judged by the standby's own clock, from when it last saw the Lease change (as client-go does),
so clocks skewed between nodes do not matter.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from datetime import datetime, timezone
from typing import Any

import kubernetes.client
from kubernetes.client.exceptions import ApiException

from . import kubeapi

log = logging.getLogger("jsoperator")

DURATION = 15.0  # seconds a Lease not renewed stays valid for the others
RENEW_DEADLINE = 10.0  # the leader stops when it could not renew for this long
RETRY = 2.0  # seconds between attempts (standby) and renewals (leader)


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclasses.dataclass
class Elector:
    namespace: str
    name: str
    identity: str
    _seen: tuple[Any, ...] | None = None  # (holder, renewTime) last observed
    _seen_at: float = 0.0  # monotonic time it was observed

    def _api(self) -> kubernetes.client.CoordinationV1Api:
        return kubeapi.coordination()

    async def _read(self) -> kubernetes.client.V1Lease | None:
        try:
            lease: kubernetes.client.V1Lease = await asyncio.to_thread(
                self._api().read_namespaced_lease, self.name, self.namespace)
            return lease
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _spec(self, transitions: int, acquired: datetime | None) -> kubernetes.client.V1LeaseSpec:
        now = _now()
        return kubernetes.client.V1LeaseSpec(
            holder_identity=self.identity, lease_duration_seconds=int(DURATION), acquire_time=acquired or now,
            renew_time=now, lease_transitions=transitions)

    async def try_once(self) -> bool:
        """Take or renew the Lease; True when this replica holds it now."""
        lease = await self._read()
        try:
            if lease is None:
                body = kubernetes.client.V1Lease(
                    metadata=kubernetes.client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                    spec=self._spec(0, None))
                await asyncio.to_thread(self._api().create_namespaced_lease, self.namespace, body)
                return True
            spec = lease.spec or kubernetes.client.V1LeaseSpec()
            holder = spec.holder_identity
            if holder != self.identity and holder and not self._expired((holder, spec.renew_time)):
                return False
            ours = holder == self.identity
            transitions = (spec.lease_transitions or 0) + (0 if ours else 1)
            lease.spec = self._spec(transitions, spec.acquire_time if ours else None)
            await asyncio.to_thread(self._api().replace_namespaced_lease, self.name, self.namespace, lease)
            return True
        except ApiException as exc:
            if exc.status == 409:  # another replica wrote first
                return False
            raise

    def _expired(self, record: tuple[Any, ...]) -> bool:
        now = time.monotonic()
        if record != self._seen:
            self._seen, self._seen_at = record, now
        return now - self._seen_at > DURATION

    async def acquire(self) -> None:
        """Wait until this replica is the leader."""
        while True:
            try:
                if await self.try_once():
                    log.info("leader election: this replica leads", extra={"lease": f"{self.namespace}/{self.name}"})
                    return
            except (ApiException, OSError) as exc:
                log.warning("leader election: cannot read the Lease: %s", exc)
            await asyncio.sleep(RETRY)

    async def hold(self, lost: asyncio.Event) -> None:
        """Renew until the Lease cannot be renewed for RENEW_DEADLINE; then set `lost` and return."""
        last = time.monotonic()
        while time.monotonic() - last < RENEW_DEADLINE:
            await asyncio.sleep(RETRY)
            try:
                if await self.try_once():
                    last = time.monotonic()
            except (ApiException, OSError) as exc:
                log.warning("leader election: renewal failed: %s", exc)
        log.error("leader election: the Lease was not renewed for %.0fs; stopping", RENEW_DEADLINE)
        lost.set()

    async def release(self) -> None:
        """Give the Lease up (only if still ours), so a standby takes over at once."""
        try:
            lease = await self._read()
            if lease is None or lease.spec is None or lease.spec.holder_identity != self.identity:
                return
            lease.spec.holder_identity = None
            lease.spec.lease_duration_seconds = 1
            await asyncio.to_thread(self._api().replace_namespaced_lease, self.name, self.namespace, lease)
        except (ApiException, OSError) as exc:
            log.warning("leader election: could not release the Lease: %s", exc)

