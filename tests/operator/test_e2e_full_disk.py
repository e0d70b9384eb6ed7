"""End to end: a broker whose volume is full, seen on the Stream resource. jsbroker on a small tmpfs
(tests/small_volume.py) sends $JS.EVENT.ADVISORY.SERVER.OUT_OF_STORAGE when a stream's store first refuses
a message; the operator sets StorageAvailable False (OutOfStorage) with a Warning Event, keeps the Stream
Ready (its config still matches), and sets StorageAvailable True (MessageStored) once a message is stored
again. (nats-server 2.15.1 sends the advisory only from a clustered JetStream, in its system account.)"""

from __future__ import annotations

import pytest
from nats.js.errors import APIError

from tests import servers
from tests.operator.conftest import PROMPT, condition, has_condition, on_broker
from tests.small_volume import fill, small_volume

pytestmark = [pytest.mark.xdist_group("kube"), pytest.mark.kube, pytest.mark.timeout(180)]

SIZE = 4096


async def publish_until_refused(js) -> APIError:
    for i in range(4096):
        try:
            await js.publish("full.x", b"m" * SIZE, timeout=5)
        except APIError as refused:
            return refused
    raise AssertionError(f"{i + 1} messages stored on a volume that had 1.4 MiB above the reserve")


def test_a_full_volume_sets_storage_available_false_until_a_message_is_stored(kube, tmp_path):
    with small_volume(tmp_path / "volume") as volume:
        broker = servers.launch(servers.JSBROKER, store_dir=volume / "store")
        try:
            kube.create("Stream", "full", {"subjects": ["full.>"], "storage": "file",
                                           "connection": {"servers": [broker.url]}})
            kube.wait_condition("Stream", "full", "Ready")
            filler = fill(volume, leave=3 << 20)  # 1.4 MiB above jsbroker's reserve
            refused = on_broker(broker.url, publish_until_refused)
            assert (refused.code, refused.err_code) == (503, 10023)

            obj = kube.wait_condition("Stream", "full", "StorageAvailable", "False", "OutOfStorage", timeout=PROMPT)
            message = condition(obj, "StorageAvailable")["message"]
            assert "has no storage left for stream full" in message and "free space on its volume" in message
            assert has_condition(obj, "Ready")  # the config still matches: only publishing is refused
            events = kube.wait_events("full", "OutOfStorage")
            assert [e.type for e in events] == ["Warning"] and events[0].message == message
            stored = obj["status"]["lastSeq"]

            filler.unlink()
            assert on_broker(broker.url, lambda js: js.publish("full.x", b"again", timeout=5)).seq == stored + 1
            obj = kube.wait_condition("Stream", "full", "StorageAvailable", "True", "MessageStored", timeout=PROMPT)
            assert obj["status"]["lastSeq"] == stored + 1
            warnings = [e for e in kube.events("full") if e.reason == "OutOfStorage"]
            assert len(warnings) == 1 and (warnings[0].count or 1) == 1  # one advisory, one Warning
        finally:
            broker.close()
