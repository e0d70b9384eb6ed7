"""When things go wrong, with real Spark and a real broker the test starts and stops: a server that is
down (batch read, sink: retried for retryTimeout, then one error; a query told to wait for it), a broker
killed in the middle of a streaming query (back within the retry budget: every message once in the sink;
gone for longer: the query fails saying so), a stream that does not exist and a request the server
refuses (at once, not retried),
a stream deleted and re-created under a checkpointed query (and a checkpoint of the format before the
stream's identity was recorded), a filtered range with nothing in it, and a write from another thread.
Each failure is asserted on its text and a generous time bound."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
from pathlib import Path

import nats
import pytest

from jsspark import client
from jsspark.options import SourceOptions, parse
from tests.polling import poll
from tests.servers import JSBROKER
from tests.spark.streams import make_stream, publish, stored

pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.timeout(600)]

# seconds: far below the default retryTimeout (300 s); failing takes ~10 s, but the first job of a session adds
# Python worker start-up (30 s on a loaded 2-core machine)
FAILS_WITHIN = 60


@pytest.fixture
def stopped(server_factory):
    """The URL of a jsbroker that was started and has been stopped: nothing listens there."""
    handle = server_factory(JSBROKER)
    handle.stop()
    return handle


def read(spark, url, stream, **options):
    reader = spark.read.format("jetstream").option("servers", url).option("stream", stream)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def finished(query, timeout: float) -> bool:
    """Whether `query` ended within `timeout` (awaitTermination raises the error of a failed query)."""
    try:
        return bool(query.awaitTermination(timeout))
    except Exception:  # noqa: BLE001 - the error stays on query.exception()
        return True


def timed_failure(action):
    start = time.monotonic()
    with pytest.raises(Exception) as caught:
        action()
    return str(caught.value), time.monotonic() - start


def test_a_batch_read_and_a_write_retry_for_retry_timeout_when_the_server_is_down(spark, stopped):
    exhausted = (f"kept failing for * s (* attempts, retryTimeout=2 s): cannot connect to NATS at {stopped.url}: "
                 "connection refused")
    message, seconds = timed_failure(lambda: read(spark, stopped.url, "ORDERS", retryTimeout=2).collect())
    assert f"stream ORDERS: STREAM.INFO {exhausted}" in _attempts_elided(message), message
    assert "ConnectionRefusedError" not in message and 2 <= seconds < FAILS_WITHIN
    df = spark.createDataFrame([("ORDERS.x", b"d")], "subject STRING, data BINARY")
    message, seconds = timed_failure(lambda: df.write.format("jetstream").mode("append").option("servers", stopped.url)
                                     .option("retryTimeout", "2").save())
    assert f"publishing to {stopped.url} {exhausted}" in _attempts_elided(message), message
    assert 2 <= seconds < FAILS_WITHIN
    message, seconds = timed_failure(lambda: read(spark, stopped.url, "ORDERS", retryTimeout=0).collect())
    assert f"cannot connect to NATS at {stopped.url}: connection refused" in message and "kept failing" not in message
    assert seconds < FAILS_WITHIN


def _attempts_elided(message: str) -> str:
    return re.sub(r"kept failing for \d+ s \(\d+ attempts,", "kept failing for * s (* attempts,", message)


def _copy_to_sink(spark, url: str, source: str, target: str, checkpoint: Path, retry_timeout: int):
    """A streaming copy of `source` into `target` through the sink (its own message ids), 20 sequences a
    micro-batch; a lost server is noticed within requestTimeout/ackTimeout (2 s)."""
    options = {"servers": url, "retryTimeout": str(retry_timeout), "requestTimeout": "2"}
    return (spark.readStream.format("jetstream").options(stream=source, maxOffsetsPerTrigger="20", **options).load()
            .selectExpr(f"'{target}.copy' AS subject", "data")
            .writeStream.format("jetstream").options(ackTimeout="2", **options)
            .option("checkpointLocation", str(checkpoint)).trigger(processingTime="300 milliseconds").start())


def test_a_streaming_query_rides_out_a_broker_killed_and_restarted(spark, server_factory, tmp_path):
    """kill -9 in the middle of the query, ~5 s away, back on the same port and store: the source and the
    sink retry, and the sink holds every message exactly once."""
    handle = server_factory(JSBROKER)
    make_stream(handle.url, "SRC", 100)
    make_stream(handle.url, "OUT", 0)
    query = _copy_to_sink(spark, handle.url, "SRC", "OUT", tmp_path / "checkpoint", retry_timeout=120)
    try:
        poll(lambda: len(stored(handle.url, "OUT")) >= 20, timeout=120, what="the query's first micro-batch")
        handle.kill()
        time.sleep(5)  # the outage itself (nothing to wait for: the broker is gone)
        assert query.isActive and query.exception() is None
        handle.start()
        poll(lambda: len(stored(handle.url, "OUT")) >= 100 or not query.isActive, timeout=180,
             what="the query to copy the rest")
        assert query.exception() is None
        rows = stored(handle.url, "OUT")
        assert sorted(data for _, data, _ in rows) == sorted(f"m{i}".encode() for i in range(100))  # each once
        assert len({msg_id for _, _, msg_id in rows}) == 100
    finally:
        query.stop()


def test_a_streaming_query_fails_when_the_broker_stays_away_beyond_retry_timeout(spark, server_factory, tmp_path):
    handle = server_factory(JSBROKER)
    make_stream(handle.url, "GONE", 10)
    make_stream(handle.url, "GONEOUT", 0)
    query = _copy_to_sink(spark, handle.url, "GONE", "GONEOUT", tmp_path / "checkpoint", retry_timeout=3)
    poll(lambda: len(stored(handle.url, "GONEOUT")) == 10, timeout=120, what="the query to copy the stream")
    handle.kill()
    start = time.monotonic()
    assert finished(query, FAILS_WITHIN)
    message = _attempts_elided(str(query.exception()))
    assert (f"stream GONE: STREAM.INFO kept failing for * s (* attempts, retryTimeout=3 s): cannot connect to NATS at "
            f"{handle.url}: connection refused") in message, message
    assert "raise retryTimeout (seconds) to wait longer" in message
    assert time.monotonic() - start < FAILS_WITHIN


def test_a_streaming_query_told_to_wait_waits_for_the_server(spark, stopped, tmp_path):
    # The stream is on the server's disk before the query starts waiting: created after the server comes
    # back, the query could look for it first and rightly fail with "stream not found".
    stopped.start()
    make_stream(stopped.url, "WAITED", 3)
    stopped.stop()
    seen: list[int] = []
    query = (spark.readStream.format("jetstream").option("servers", stopped.url).option("stream", "WAITED")
             .option("reconnectAttempts", "-1").option("reconnectWait", "0.5").load()
             .writeStream.foreachBatch(lambda df, _: seen.extend(r.seq for r in df.collect()))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        assert query.awaitTermination(5) is False and query.exception() is None  # still waiting, no error
        stopped.start()
        poll(lambda: sorted(seen) == [1, 2, 3], timeout=120, what="the query to read the stream once it is up")
    finally:
        query.stop()


def test_the_client_logs_one_line_per_failure_and_no_traceback(stopped, caplog):
    opts = parse(SourceOptions, {"servers": f"{stopped.url},{stopped.url}", "stream": "S", "reconnectAttempts": "1",
                                 "reconnectWait": "0.1"})
    with caplog.at_level(logging.DEBUG), pytest.raises(client.ConnectError) as caught:
        asyncio.run(client.connect(opts))
    assert str(caught.value).startswith(f"cannot connect to NATS at {stopped.url}, {stopped.url}: connection refused "
                                        "(2 attempt(s) per server")
    assert [r for r in caplog.records if r.exc_info] == []  # nats-py's default callback would log 4 tracebacks


def test_nats_client_options_pass_through(spark, server_factory, unique):
    handle = server_factory(JSBROKER, http=True)
    name = unique("SPN")
    make_stream(handle.url, name, 2)
    df = read(spark, handle.url, name, **{"nats.name": "jsspark-probe", "nats.pingInterval": "7"})
    assert df.count() == 2
    with pytest.raises(Exception, match="option nats.token: jsspark sets nats-py's token itself; use the option token"):
        read(spark, handle.url, name, **{"nats.token": "x"}).collect()
    with pytest.raises(Exception, match="nats-py's connect\\(\\) has no option 'bogus'"):
        read(spark, handle.url, name, **{"nats.bogus": "1"}).collect()


def test_a_missing_stream_says_which_stream_and_which_server(spark, server_factory):
    handle = server_factory(JSBROKER)
    message, seconds = timed_failure(lambda: read(spark, handle.url, "NOSUCH").collect())
    assert f"stream NOSUCH not found on {handle.url}" in message and seconds < FAILS_WITHIN  # not retried (300 s)
    assert "kept failing" not in message


def test_a_request_the_server_refuses_fails_without_retrying(spark, server_factory, server_kind, tmp_path):
    config = tmp_path / "server.conf"
    config.write_text('authorization { users = [ {user: "spark", password: "pw", permissions: '
                      '{publish: {deny: ["$JS.API.STREAM.INFO.>"]}}} ] }\n')
    handle = server_factory(server_kind, extra_args=["-c", str(config)])
    message, seconds = timed_failure(lambda: read(spark, handle.url, "DENIED", user="spark", password="pw",
                                                  requestTimeout=2).collect())
    assert (f"stream DENIED: {handle.url} refused a request: permissions violation for publish to "
            '"$js.api.stream.info.denied"; grant the user the permissions') in message, message
    assert "kept failing" not in message and seconds < FAILS_WITHIN  # one requestTimeout, not retryTimeout (300 s)


def _recreate(url: str, name: str, count: int) -> None:
    async def main() -> None:
        nc = await nats.connect(url)
        await nc.jetstream().delete_stream(name)
        await nc.close()
    asyncio.run(main())
    make_stream(url, name, count)


def _copy_query(spark, url, name, checkpoint: Path, out: Path, **options):
    reader = spark.readStream.format("jetstream").option("servers", url).option("stream", name)
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (reader.load().select("seq", "data").writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert finished(query, 300)
    return query


def _seqs(spark, out: Path) -> list[tuple[int, bytes]]:
    return sorted((r.seq, bytes(r.data)) for r in spark.read.parquet(str(out)).collect())


def test_a_re_created_stream_fails_the_query_or_restarts_from_its_first_sequence(spark, server, unique, tmp_path):
    name = unique("SPR")
    make_stream(server.url, name, 50)
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    assert _copy_query(spark, server.url, name, checkpoint, out).exception() is None
    assert len(_seqs(spark, out)) == 50
    _recreate(server.url, name, 20)  # sequences 1..20 again, other messages

    failed = _copy_query(spark, server.url, name, checkpoint, out)
    message = str(failed.exception())
    assert f"stream {name} was deleted and re-created since the checkpoint" in message
    assert "start the query with a new checkpointLocation, or set failOnDataLoss=false" in message

    resumed = _copy_query(spark, server.url, name, checkpoint, out, failOnDataLoss="false")
    assert resumed.exception() is None
    rows = _seqs(spark, out)
    assert sorted(seq for seq, _ in rows) == sorted([*range(1, 51), *range(1, 21)])  # the new 20, once


def _rewrite_last_offset(checkpoint: Path, name: str) -> int:
    """Turn the checkpoint's last offset into the format before the stream's identity; its sequence."""
    last = max((p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    lines = last.read_text().splitlines()
    offset = json.loads(lines[-1])
    seq = offset[name]["seq"]
    lines[-1] = json.dumps({name: seq})
    last.write_text("\n".join(lines))
    return int(seq)


def test_a_checkpoint_without_the_stream_identity_still_loads(spark, server_factory, unique, tmp_path):
    handle = server_factory(JSBROKER)
    name = unique("SPO")
    make_stream(handle.url, name, 10)
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    assert _copy_query(spark, handle.url, name, checkpoint, out).exception() is None
    assert _rewrite_last_offset(checkpoint, name) == 11
    publish(handle.url, f"{name}.a", [b"late-1", b"late-2"])
    assert _copy_query(spark, handle.url, name, checkpoint, out).exception() is None
    assert [seq for seq, _ in _seqs(spark, out)] == list(range(1, 13))  # continued, nothing twice

    assert _rewrite_last_offset(checkpoint, name) == 13
    _recreate(handle.url, name, 5)  # the old checkpoint cannot tell; its sequence is beyond the new end
    failed = _copy_query(spark, handle.url, name, checkpoint, out)
    assert (f"stream {name}: the checkpoint's next sequence 13 is beyond the stream's last sequence 5"
            in str(failed.exception()))


def test_an_empty_filtered_range_ends_at_once(spark, server, unique):
    name = unique("SPX")
    make_stream(server.url, name, 6, subjects=("a",))
    publish(server.url, f"{name}.b", [b"after"])  # sequence 7: beyond the range below
    opts = parse(SourceOptions, {"servers": server.url, "stream": name, "requestTimeout": "60"})
    for subjects in ((f"{name}.b",), (f"{name}.none",)):
        start = time.monotonic()
        assert asyncio.run(client.read_range(opts, name, subjects, 1, 6, 100, False)) == []
        assert time.monotonic() - start < 3  # no pull expiry to wait out (it was 5 s)
    assert read(spark, server.url, name, subjects=f"{name}.none").count() == 0


def test_a_write_from_another_thread_needs_the_session_active_there(spark, server_factory, unique):
    """Spark looks a Python data source up in the JVM thread's active session when writing (reads use
    the DataFrame's session): a thread that did not make a DataFrame has none."""
    handle = server_factory(JSBROKER)
    name = unique("SPW")
    make_stream(handle.url, name, 0)
    df = spark.createDataFrame([(f"{name}.x", b"from a thread")], "subject STRING, data BINARY")
    errors: list[str] = []

    def write(activate: bool) -> None:
        try:
            if activate:  # what spark.createDataFrame does in the thread that calls it
                spark._jvm.SparkSession.setActiveSession(spark._jsparkSession)
            df.write.format("jetstream").mode("append").option("servers", handle.url).save()
        except Exception as exc:  # noqa: BLE001 - reported to the test thread
            errors.append(str(exc))

    for activate in (False, True):
        thread = threading.Thread(target=write, args=(activate,))
        thread.start()
        thread.join(300)
    assert len(errors) == 1 and "jetstream" in errors[0] and "DATA_SOURCE_NOT_FOUND" in errors[0]
    assert read(spark, handle.url, name).count() == 1  # with the session active, the write went through


def test_the_sink_sends_what_was_not_acknowledged_again_with_the_same_ids(server_factory):
    """The publisher without Spark, its broker killed (-9) between two Arrow batches: the second batch's
    first window goes into the dead connection unacknowledged, and is sent again on a new one when the
    broker is back on its port and store a second later; every row is stored once, with its own id.
    (Publishes stored whose acks were lost come back as duplicates: test_sink's write written twice.)"""
    import pyarrow as pa

    from jsspark import sink
    from jsspark.options import SinkOptions

    handle = server_factory(JSBROKER)
    make_stream(handle.url, "ACKS", 0)
    opts = parse(SinkOptions, {"servers": handle.url, "retryTimeout": "60", "ackTimeout": "2", "maxInFlight": "100"})
    restarted = threading.Timer(1.0, handle.start)

    def batches():
        for first in (0, 500):
            yield pa.RecordBatch.from_pydict({"subject": ["ACKS.x"] * 500,
                                              "data": [f"r{first + i}".encode() for i in range(500)]})
            if first == 0:
                handle.kill()
                restarted.start()

    written = asyncio.run(sink._publish(opts, "job", batches()))
    restarted.join()
    rows = stored(handle.url, "ACKS")
    assert sorted(data for _, data, _ in rows) == sorted(f"r{i}".encode() for i in range(1000))  # each once
    assert sorted(msg_id for _, _, msg_id in rows) == sorted(f"job:{i}" for i in range(1000))
    assert written.published + written.duplicates == 1000  # each row acknowledged once
