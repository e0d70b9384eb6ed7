"""The source against both servers: batch reads (content, parallel ranges, filters, headers, gaps, a
purged prefix with failOnDataLoss on and off), streaming (availableNow + maxOffsetsPerTrigger batch sizes,
restart from the checkpoint without loss or duplicates), and bad options failing before any job."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from jsspark.options import OptionsError
from tests.polling import poll
from tests.spark.streams import delete_msgs, make_stream, publish, purge_below

pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.timeout(600)]


def read(spark, server, stream, **options):
    reader = spark.read.format("jetstream").option("servers", server.url).option("stream", stream)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def rows(df):
    return [(r.subject, r.seq, bytes(r.data)) for r in df.orderBy("seq").collect()]


def test_batch_read_content_in_parallel_ranges(spark, server, unique):
    name = unique("SPB")
    make_stream(server.url, name, 30)
    df = read(spark, server, name, minPartitions=4)
    assert df.rdd.getNumPartitions() == 4
    got = df.orderBy("seq").collect()
    assert [(r.stream, r.subject, r.seq, bytes(r.data)) for r in got] == [
        (name, f"{name}.{'ab'[i % 2]}", i + 1, f"m{i}".encode()) for i in range(30)]
    assert df.schema["timestamp"].dataType.typeName() == "timestamp"
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    assert all(abs((now - r.timestamp).total_seconds()) < 600 for r in got)


def test_ranges_filters_and_headers(spark, server, unique):
    name = unique("SPF")
    make_stream(server.url, name, 12)
    only_b = read(spark, server, name, subjects=f"{name}.b", maxRecordsPerPartition=3)
    assert only_b.rdd.getNumPartitions() == 4  # 12 sequences, at most 3 per range
    assert [seq for _, seq, _ in rows(only_b)] == [2, 4, 6, 8, 10, 12]
    window = read(spark, server, name, startingOffsets=f'{{"{name}": 5}}', endingOffsets=f'{{"{name}": 8}}',
                  includeHeaders="true")
    assert [(r.seq, r.headers["i"]) for r in window.orderBy("seq").collect()] == [(5, ["4"]), (6, ["5"]), (7, ["6"])]


def test_deleted_messages_and_a_purged_prefix_are_gaps(spark, server, unique):
    name = unique("SPG")
    make_stream(server.url, name, 10)
    delete_msgs(server.url, name, [3, 7])
    assert [seq for _, seq, _ in rows(read(spark, server, name, minPartitions=3))] == [1, 2, 4, 5, 6, 8, 9, 10]
    purge_below(server.url, name, 5)
    from_one = {"startingOffsets": f'{{"{name}": 1}}'}
    with pytest.raises(Exception, match="sequences 1..4 are gone"):
        read(spark, server, name, **from_one).collect()
    skipped = read(spark, server, name, failOnDataLoss="false", **from_one)
    assert [seq for _, seq, _ in rows(skipped)] == [5, 6, 8, 9, 10]


def test_an_empty_range_reads_nothing(spark, server, unique):
    name = unique("SPE")
    make_stream(server.url, name, 3)
    assert read(spark, server, name, startingOffsets="latest").count() == 0


def test_available_now_batches_by_max_offsets_and_restarts_from_the_checkpoint(spark, server, unique, tmp_path):
    name = unique("SPS")
    make_stream(server.url, name, 25)
    sizes: list[int] = []

    def run_available_now():
        query = (spark.readStream.format("jetstream").option("servers", server.url).option("stream", name)
                 .option("maxOffsetsPerTrigger", "10").load()
                 .writeStream.foreachBatch(lambda df, _: (sizes.append(df.count()),
                                                          df.write.mode("append").parquet(str(tmp_path / "out"))))
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        query.awaitTermination(300)
        assert query.exception() is None

    run_available_now()
    assert sizes == [10, 10, 5]
    publish(server.url, f"{name}.a", [b"late-1", b"late-2", b"late-3"])
    run_available_now()  # a new query on the same checkpoint: continues after sequence 25
    assert sizes[3:] == [3]
    seqs = sorted(r.seq for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert seqs == list(range(1, 29))  # nothing lost, nothing twice


@pytest.mark.parametrize("options,message", [
    ({"strem": "X"}, "unknown option(s) strem"),
    ({}, "option stream: Field required"),
    ({"stream": "X", "startingOffsets": "yesterday"}, "option startingOffsets: Value error, must be"),
    ({"stream": "X", "startingOffsets": '{"OTHER": 3}'}, "names a stream other than 'X'"),
    ({"stream": "X", "minPartitions": "0"}, "option minPartitions: Input should be greater than 0"),
    ({"stream": "X", "failOnDataLoss": "maybe"}, "option failOnDataLoss"),
])
def test_bad_options_fail_before_any_job(spark, options, message):
    reader = spark.read.format("jetstream").option("servers", "nats://127.0.0.1:1")
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        reader.load().collect()
    assert OptionsError  # the error class the message comes from (jsspark.options)


def test_starting_and_ending_timestamps(spark, server, unique):
    name = unique("SPT")
    make_stream(server.url, name, 4)
    boundary = server_time_after_last(server, name)
    publish(server.url, f"{name}.a", [b"later-1", b"later-2"])
    assert [seq for _, seq, _ in rows(read(spark, server, name, startingTimestamp=boundary))] == [5, 6]
    assert [seq for _, seq, _ in rows(read(spark, server, name, endingTimestamp=boundary))] == [1, 2, 3, 4]
    future = boundary + 3_600_000
    assert read(spark, server, name, startingTimestamp=future).count() == 0
    with pytest.raises(Exception, match="startingOffsets and startingTimestamp exclude each other"):
        read(spark, server, name, startingTimestamp=boundary, startingOffsets="earliest").collect()


def server_time_after_last(server, stream) -> int:
    """A time (ms) after the stream's last message and before anything published from now on."""
    import asyncio

    import nats

    async def main() -> int:
        nc = await nats.connect(server.url)
        last = (await nc.jetstream().get_last_msg(stream, f"{stream}.*")).time
        await nc.close()
        return int(last.timestamp() * 1000) + 1

    stamp = asyncio.run(main())
    while datetime.datetime.now(datetime.timezone.utc).timestamp() * 1000 <= stamp + 1:
        pass  # wait out the millisecond, so the next message is stored strictly after `stamp`
    return stamp


def test_a_killed_query_restarts_from_its_checkpoint_without_loss_or_duplicates(spark, server, unique, tmp_path):
    name = unique("SPK")
    make_stream(server.url, name, 400)
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    victim = subprocess.Popen([sys.executable, "-m", "tests.spark.stream_job", server.url, name, str(checkpoint),
                               str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while len(list((checkpoint / "commits").glob("[0-9]*"))) < 3:
            assert victim.poll() is None and time.monotonic() < deadline, "the streaming job made no progress"
            time.sleep(0.1)  # polling the checkpoint's commit log
    finally:
        os.killpg(victim.pid, signal.SIGKILL)  # the driver and its Python workers, mid-run
        victim.wait()
    done_before = len(list((checkpoint / "commits").glob("[0-9]*")))
    assert done_before < 10  # killed before the end (10 batches of 40)
    from tests.spark.stream_job import query

    restarted = query(spark, server.url, name, str(checkpoint), str(out), available_now=True)
    restarted.awaitTermination(300)
    assert restarted.exception() is None
    seqs = [r.seq for r in spark.read.parquet(str(out)).collect()]
    assert sorted(seqs) == list(range(1, 401))  # every message once: nothing lost, nothing twice


def test_a_consumer_mirrors_committed_progress_and_a_reset_does_not_replay_the_query(spark, server, unique, tmp_path):
    import asyncio

    import nats
    from nats.js.api import AckPolicy, ConsumerConfig

    name = unique("SPC")
    make_stream(server.url, name, 25)

    async def consumer(action: str) -> tuple[int, int]:
        nc = await nats.connect(server.url)
        jsm = nc.jsm()
        if action == "create":
            await jsm.add_consumer(name, ConsumerConfig(durable_name="SPARKJOB", ack_policy=AckPolicy.EXPLICIT))
        elif action == "reset":  # what the operator does for jsoperator.io/reset-to-sequence=3
            await jsm.reset_consumer(name, "SPARKJOB", seq=3)
        info = await jsm.consumer_info(name, "SPARKJOB")
        await nc.close()
        return info.ack_floor.stream_seq, info.num_pending

    assert asyncio.run(consumer("create")) == (0, 25)
    counts: list[int] = []

    def run() -> None:
        query = (spark.readStream.format("jetstream").option("servers", server.url).option("stream", name)
                 .option("consumer", "SPARKJOB").option("maxOffsetsPerTrigger", "10").load()
                 .writeStream.foreachBatch(lambda df, _: counts.append(df.count()))
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        query.awaitTermination(300)
        assert query.exception() is None

    run()
    floor, pending = asyncio.run(consumer("info"))
    assert floor in (20, 25) and pending == 25 - floor  # Spark commits a run's last batch in the next run
    assert asyncio.run(consumer("reset")) == (2, 23)
    publish(server.url, f"{name}.a", [b"new-1", b"new-2"])
    run()
    assert counts == [10, 10, 5, 2]  # the reset replayed nothing: the checkpoint is the source of truth
    floor, pending = asyncio.run(consumer("info"))
    assert floor >= 25 and pending == 27 - floor  # and the query's next commits put the mirror right again


def test_min_offsets_per_trigger_waits_and_progress_reports_the_latest_offset(spark, server, unique, tmp_path):
    name = unique("SPM")
    make_stream(server.url, name, 5)
    sizes: list[int] = []
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "100")  # progress of idle triggers too
    query = (spark.readStream.format("jetstream").option("servers", server.url).option("stream", name)
             .option("minOffsetsPerTrigger", "10").option("maxTriggerDelay", "1h").load()
             .writeStream.foreachBatch(lambda df, _: sizes.append(df.count()))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="100 milliseconds")
             .start())

    def latest() -> int:
        progress = query.lastProgress
        offset = progress and progress["sources"][0]["latestOffset"]
        offset = json.loads(offset) if isinstance(offset, str) else offset or {}
        return offset.get(name, {}).get("seq", 0)

    try:
        poll(lambda: sizes == [5], timeout=120, what="the first batch (as Kafka's, not delayed)")
        publish(server.url, f"{name}.a", [b"x"] * 3)
        poll(lambda: latest() == 9, timeout=120, what="progress to show the stream's end, sequence 9")
        assert sizes == [5]  # 3 new sequences < minOffsetsPerTrigger: no batch
        publish(server.url, f"{name}.a", [b"y"] * 7)
        poll(lambda: sizes == [5, 10], timeout=120, what="a batch of the 10 sequences")
    finally:
        query.stop()
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
