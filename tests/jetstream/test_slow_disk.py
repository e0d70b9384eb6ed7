"""A slow disk stalls only the clients that wait for it (issue #35 part 4; broker/README.md, "Durability").

The store lives on tests/slowdisk.py's slow disk (ext4 on a loop device whose flushes wait 0.25 s each: an
fsync takes 0.5 s or more). With
`sync: always` a publisher's acks and a stream create's answer wait for their fsyncs, which run in the
broker's syncer thread (jsbroker/store/syncer.py); PINGs, a core pub/sub pair and a JetStream fetch on a
memory stream keep being served, none of them stalled longer than STALL_BOUND. Then a kill -9: every
acknowledged message is still there.
"""

from __future__ import annotations

import nats
import pytest

from tests import slowdisk
from tests.servers import JSBROKER, launch
from tests.stall_probe import SLOW, observe

pytestmark = pytest.mark.slow

FLUSH_DELAY = 0.25  # per device flush; an ext4 fsync makes about two
FSYNC_DELAY = 0.4  # what a waiter waits at least (checked)
STALL_BOUND = 0.25  # broker/README.md: other clients wait at most this long for a slow fsync (here >= 0.5 s)


@pytest.fixture
def slow_store(tmp_path):
    slowdisk.install()
    why = slowdisk.available()
    if why is not None:
        pytest.skip(f"no slow disk here: {why}")
    with slowdisk.mounted(tmp_path / "slow", FLUSH_DELAY) as mountpoint:
        yield mountpoint


async def test_a_slow_fsync_stalls_only_its_waiters_and_acked_data_survives_kill(slow_store, tmp_path):
    config = tmp_path / "broker.toml"
    config.write_text('[jetstream]\nsync = "always"\n')
    broker = launch(JSBROKER, store_dir=slow_store / "store", extra_args=["-c", str(config)])
    try:
        seen = await observe(broker.url, seconds=4.0)
        # the waiters did wait for the disk: an ack or a create is answered only after its fsync
        assert seen.publish and min(seen.publish) >= FSYNC_DELAY
        assert seen.create and min(seen.create) >= FSYNC_DELAY
        # and nobody else did
        for name, values in (("ping", seen.ping), ("core", seen.core), ("fetch", seen.fetch)):
            assert len(values) > 20, name
            assert max(values) < STALL_BOUND, (name, max(values))
        broker.kill()
        broker.restart()
        nc = await nats.connect(broker.url)
        try:
            info = await nc.jetstream().stream_info(SLOW)
            assert info.state.last_seq >= max(seen.acked)
            assert info.state.messages >= len(seen.acked)
        finally:
            await nc.close()
    finally:
        broker.close()
