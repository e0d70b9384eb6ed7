"""The end-to-end test's NATS client inside the cluster: a Job runs it in the project's image with
`python -c <this file> COMMAND...`, so it imports nothing but nats-py. One JSON line per command:

    publish SUBJECT COUNT            -> {"published": [stream sequences]}
    consume STREAM DURABLE COUNT     -> {"consumed": [stream sequences]}  (pull, each acked and confirmed)
    info STREAM DURABLE...           -> {"messages", "last_seq", "consumers": {durable: {...}}}
    streams                          -> {"streams": {name: {"subjects", "max_msgs", "consumers"}}} (this account's)

The server is $NATS_URL (a Service's DNS name), with $NATS_TOKEN (or $NATS_USER / $NATS_PASSWORD) when set, and over TLS with the CA in
$NATS_CA (plus the client certificate $NATS_CERT / $NATS_KEY) when set.
"""

import asyncio
import json
import os
import ssl
import sys

import nats


async def main(words: list[str]) -> None:
    tls = None
    if os.environ.get("NATS_CA"):
        tls = ssl.create_default_context(cafile=os.environ["NATS_CA"])
        if os.environ.get("NATS_CERT"):
            tls.load_cert_chain(os.environ["NATS_CERT"], os.environ["NATS_KEY"])
    nc = await nats.connect(os.environ["NATS_URL"], token=os.environ.get("NATS_TOKEN") or None, tls=tls,
                            user=os.environ.get("NATS_USER") or None, password=os.environ.get("NATS_PASSWORD") or None,
                            connect_timeout=5, max_reconnect_attempts=5)
    js = nc.jetstream(timeout=10)
    while words:
        command = words.pop(0)
        if command == "publish":
            subject, count = words.pop(0), int(words.pop(0))
            acks = [await js.publish(subject, json.dumps({"order": n}).encode()) for n in range(count)]
            print(json.dumps({"published": [ack.seq for ack in acks]}), flush=True)
        elif command == "consume":
            stream, durable, count = words.pop(0), words.pop(0), int(words.pop(0))
            subscription = await js.pull_subscribe_bind(durable, stream)
            messages = await subscription.fetch(count, timeout=10)
            for message in messages:
                await message.ack_sync()
            print(json.dumps({"consumed": [m.metadata.sequence.stream for m in messages]}), flush=True)
        elif command == "info":
            stream = words.pop(0)
            durables = []
            while words and words[0] not in ("publish", "consume", "info", "streams"):
                durables.append(words.pop(0))
            state = (await js.stream_info(stream)).state
            consumers = {}
            for durable in durables:
                info = await js.consumer_info(stream, durable)
                consumers[durable] = {"ack_floor": info.ack_floor.stream_seq, "delivered": info.delivered.stream_seq,
                                      "num_pending": info.num_pending, "num_ack_pending": info.num_ack_pending}
            print(json.dumps({"messages": state.messages, "last_seq": state.last_seq, "consumers": consumers}),
                  flush=True)
        elif command == "streams":
            streams = {s.config.name: {"subjects": s.config.subjects, "max_msgs": s.config.max_msgs,
                                       "consumers": s.state.consumer_count} for s in await js.streams_info()}
            print(json.dumps({"streams": streams}), flush=True)
        else:
            raise SystemExit(f"unknown command {command!r}; use publish, consume, info or streams")
    await nc.close()


asyncio.run(main(sys.argv[1:]))
