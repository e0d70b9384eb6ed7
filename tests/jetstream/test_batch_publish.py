"""Batch publishes (ADR-50) into streams without `allow_atomic` / `allow_batched`, against nats-server: answered
10174 / 10205 after the sealed, resources and size checks, never stored as a plain message. Atomic batches are
test_atomic_batch.py's, fast batches test_fast_batch.py's."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.jetstream.test_stream_api import C, D, I, U, cfg, on_storage, pub


def batch(subject: str, body: str = "x", **headers: str) -> tuple[str, str, dict[str, str]]:
    return pub(subject, body, **headers)  # type: ignore[no-any-return]


CASES = {
    "atomic_batch_refused": [(C, cfg(max_msg_size=100)),
                             batch("{S}.a", Nats_Batch_Id="b1", Nats_Batch_Sequence="1"),
                             batch("{S}.a", Nats_Batch_Id="b1", Nats_Batch_Sequence="2", Nats_Batch_Commit="1"),
                             batch("{S}.a", Nats_Batch_Id="b" * 70), batch("{S}.a", "x" * 140, Nats_Batch_Id="b1"),
                             batch("{S}.a", Nats_Batch_Sequence="1", Nats_Batch_Commit="1"),  # no id: a plain publish
                             batch("{S}.a", Nats_Batch_Id=""), (I, ""),
                             (U, cfg(max_msg_size=100, sealed=True)), batch("{S}.a", Nats_Batch_Id="b1"), (D, "")],
    "atomic_batch_before_other_checks": [(C, cfg(allow_msg_counter=True)),
                                         batch("{S}.a", "", Nats_Batch_Id="b1", Nats_Incr="1"),
                                         batch("{S}.a", "", Nats_Batch_Id="b1", Nats_Incr="x",
                                               Nats_Expected_Stream="other"), (I, ""), (D, "")],
}


@pytest.mark.parametrize("storage", ["memory", "file"])
@pytest.mark.parametrize("name", sorted(CASES))
async def test_atomic_batches_are_answered_like_nats_server_without_allow_atomic(differential, name, storage):
    ours, theirs = await differential(on_storage(CASES[name], storage))
    assert ours == theirs


async def _fast_batches(nc: Any, name: str) -> list[Any]:
    """Publishes whose reply subject ends in .$FI (nats.go's fast batch form and malformed ones)."""
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"], max_msg_size=100)
    out: list[Any] = []

    async def publish(reply: str, body: bytes = b"x") -> None:
        sub = await nc.subscribe(reply)
        await nc.publish(f"{name}.a", body, reply=reply)
        try:
            out.append(json.loads((await sub.next_msg(2)).data))
        except Exception as exc:  # the exception class is part of what is compared
            out.append(type(exc).__name__)
        await sub.unsubscribe()

    for reply in (f"_INBOX.{name}.b1.10.fail.1.0.$FI", f"_INBOX.{name}.$FI", f"x{name}.$FI"):
        await publish(reply)
    await publish(f"_INBOX.{name}.b2.10.ok.1.0.$FI", b"x" * 140)
    await publish(f"_INBOX.{name}.plain.FI")  # not the suffix: a plain publish
    out.append((await js.stream_info(name)).state.messages)
    await nc.request(f"$JS.API.STREAM.UPDATE.{name}", json.dumps(
        {"name": name, "subjects": [f"{name}.>"], "max_msg_size": 100, "sealed": True}).encode(), timeout=5)
    await publish(f"_INBOX.{name}.b3.10.fail.1.0.$FI")
    await js.delete_stream(name)
    return out


async def test_fast_batches_are_answered_like_nats_server_without_allow_batched(on_both):
    ours, theirs = await on_both(_fast_batches, "FB")
    assert ours == theirs
    assert [o["error"]["err_code"] if isinstance(o, dict) and "error" in o else o for o in ours] == [
        10205, 10205, 10205, 10054, {"stream": ours[4]["stream"], "seq": 1}, 1, 10109]
