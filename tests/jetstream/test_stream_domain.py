"""A JetStream domain: `$JS.<domain>.API.*` reaches the same API and pub acks carry the domain."""

import nats
import pytest

from tests.jetstream.conftest import request
from tests.servers import JSBROKER


async def domain_transcript(handle) -> list:
    nc = await nats.connect(handle.url)
    try:
        out = [await request(nc, "$JS.hub.API.INFO", "")]
        out.append(await request(nc, "$JS.hub.API.STREAM.CREATE.DOM", '{"name":"DOM","subjects":["dom.>"],"storage":"memory"}'))
        out.append(await request(nc, "dom.a", "x"))
        out.append(await request(nc, "$JS.hub.API.STREAM.INFO.DOM", ""))
        out.append(await request(nc, "$JS.API.STREAM.NAMES", ""))
        js = nc.jetstream(domain="hub")
        ack = await js.publish("dom.b", b"y")
        out.append((ack.stream, ack.seq, ack.domain))
        out.append(await request(nc, "$JS.other.API.INFO", "", timeout=0.5))
        return out
    finally:
        await nc.close()


@pytest.mark.slow
async def test_domain_matches_nats_server(server_factory, tmp_path):
    ours_cfg = tmp_path / "jsbroker.toml"
    ours_cfg.write_text('[jetstream]\ndomain = "hub"\n')
    theirs_cfg = tmp_path / "nats-server.conf"
    theirs_cfg.write_text("jetstream { domain: hub }\n")
    theirs = await domain_transcript(server_factory("nats-server", extra_args=["-c", str(theirs_cfg)]))
    ours = await domain_transcript(server_factory(JSBROKER, extra_args=["-c", str(ours_cfg)]))
    assert ours == theirs
    assert ours[2] == {"stream": "DOM", "domain": "hub", "seq": 1}
