"""The sink against both servers: every message stored once with a Nats-Msg-Id (the same write twice is
de-duplicated by the stream), a streaming copy, a missing ack failing the job, bad columns refused."""

from __future__ import annotations

import pytest

from tests.spark.streams import make_stream, stored

pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.timeout(600)]


def write(df, server, **options):
    writer = df.write.format("jetstream").mode("append").option("servers", server.url)
    for key, value in options.items():
        writer = writer.option(key, str(value))
    writer.save()


def orders(spark, name, n):
    return spark.createDataFrame([(f"{name}.in", f"order {i}".encode()) for i in range(n)], "subject STRING, data BINARY")


def test_written_rows_are_stored_once_each_even_when_written_twice(spark, server, unique):
    name = unique("SKW")
    make_stream(server.url, name, 0)
    df = orders(spark, name, 20).repartition(3)
    write(df, server, idPrefix="job-1")
    first = stored(server.url, name)
    assert sorted(data for _, data, _ in first) == sorted(f"order {i}".encode() for i in range(20))
    assert len({msg_id for _, _, msg_id in first}) == 20 and all(m.startswith("job-1:") for _, _, m in first)
    write(df, server, idPrefix="job-1")  # a re-run of the same job: inside the duplicate window
    assert stored(server.url, name) == first


def test_msg_id_column_subject_option_and_headers(spark, server, unique):
    name = unique("SKH")
    make_stream(server.url, name, 0)
    df = spark.createDataFrame([(b"x", "id-1", {"kind": ["a"]}), (b"y", "id-1", {"kind": ["b"]}),
                                (b"z", "id-2", None)], "data BINARY, msgId STRING, headers MAP<STRING, ARRAY<STRING>>")
    write(df.coalesce(1), server, subject=f"{name}.fixed")
    assert stored(server.url, name) == [(f"{name}.fixed", b"x", "id-1"), (f"{name}.fixed", b"z", "id-2")]


def test_a_streaming_copy_from_one_stream_to_another(spark, server, unique, tmp_path):
    source, target = unique("SKS"), unique("SKT")
    make_stream(server.url, source, 15)
    make_stream(server.url, target, 0)
    copy = (spark.readStream.format("jetstream").option("servers", server.url).option("stream", source)
            .option("maxOffsetsPerTrigger", "6").load()
            .selectExpr(f"'{target}.copy' AS subject", "data")
            .writeStream.format("jetstream").option("servers", server.url)
            .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    copy.awaitTermination(300)
    assert copy.exception() is None
    copied = stored(server.url, target)
    assert sorted(data for _, data, _ in copied) == sorted(f"m{i}".encode() for i in range(15))
    assert len({msg_id for _, _, msg_id in copied}) == 15


def test_a_named_streaming_query_writes(spark, server, unique, tmp_path):
    """Spark passes a streaming query's name to the sink as option `queryName`: it is Spark's, not an
    unknown option (the chaos run's named queries failed to start)."""
    source, target = unique("SKN"), unique("SKM")
    make_stream(server.url, source, 3)
    make_stream(server.url, target, 0)
    named = (spark.readStream.format("jetstream").option("servers", server.url).option("stream", source).load()
             .selectExpr(f"'{target}.copy' AS subject", "data")
             .writeStream.format("jetstream").option("servers", server.url).queryName(f"copy_{target}")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    named.awaitTermination(300)
    assert named.exception() is None
    assert sorted(data for _, data, _ in stored(server.url, target)) == [b"m0", b"m1", b"m2"]


def test_an_unacknowledged_publish_fails_the_job(spark, server, unique):
    df = spark.createDataFrame([(f"{unique('nostream')}.x", b"lost?")], "subject STRING, data BINARY")
    with pytest.raises(Exception, match="was not acknowledged"):
        write(df, server, ackTimeout=2)


def test_a_frame_without_data_or_subject_is_refused_before_any_job(spark, server):
    with pytest.raises(Exception, match="needs a `data` column"):
        write(spark.createDataFrame([("s",)], "subject STRING"), server)
    with pytest.raises(Exception, match="needs a `subject` column or the `subject` option"):
        write(spark.createDataFrame([(b"d",)], "data BINARY"), server)


def test_string_data_and_string_headers(spark, server, unique):
    name = unique("SKD")
    make_stream(server.url, name, 0)
    df = spark.createDataFrame([("ä text", {"kind": "a", "empty": ""}), (None, None)],
                               "data STRING, headers MAP<STRING, STRING>")
    write(df.coalesce(1), server, subject=f"{name}.s", idPrefix="strings")
    assert stored(server.url, name) == [(f"{name}.s", "ä text".encode(), "strings:0:0"),
                                        (f"{name}.s", b"", "strings:0:1")]
