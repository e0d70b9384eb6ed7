"""`Nats-Required-Api-Level` is judged the same way by the JSON API, DIRECT.GET and MSG.NEXT (one check),
and as nats-server judges it: Go's integer parsing ("+5" and "-1" are levels), anything else refused."""
import nats
import pytest


async def transcript(url: str, s: str) -> list:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=s, subjects=[f"{s}.>"], allow_direct=True)
        await js.publish(f"{s}.a", b"x")
        await js.add_consumer(s, durable_name="C", filter_subject=f"{s}.none")  # statuses only: they come to the inbox
        out = []
        for level in ["+5", "5", "6", "abc"]:
            for subject, body in ((f"$JS.API.CONSUMER.MSG.NEXT.{s}.C", b'{"batch":1,"no_wait":true}'),
                                  (f"$JS.API.DIRECT.GET.{s}", b'{"seq":1}'), (f"$JS.API.STREAM.INFO.{s}", b"")):
                m = await nc.request(subject, body, headers={"Nats-Required-Api-Level": level}, timeout=2)
                status = (m.headers or {}).get("Status")
                out.append((level, subject.split(".")[2], status or ("10185" if b"10185" in m.data else "ok")))
        return out
    finally:
        await nc.close()


@pytest.mark.xdist_group("api_level")
async def test_required_api_level_like_nats_server(nats_server, jsbroker_server, unique):
    s = unique("LV")
    theirs = await transcript(nats_server.url, s)
    ours = await transcript(jsbroker_server.url, s)
    assert ours == theirs
    assert ("6", "CONSUMER", "412") in ours and ("6", "STREAM", "10185") in ours and ("+5", "DIRECT", "ok") in ours and ("+5", "CONSUMER", "404") in ours
