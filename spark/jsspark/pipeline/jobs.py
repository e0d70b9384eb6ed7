"""The pipeline's Spark jobs: two streaming stages and the batch report, each a function of a session."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

STREAM = "ORDERS"
ORDER_SCHEMA = "id BIGINT, customer STRING, items INT, amount DOUBLE, time DOUBLE"
PROCESSED_SCHEMA = ORDER_SCHEMA + ", tier STRING, total_with_tax DOUBLE"
TAX = 1.2


def _source(spark: SparkSession, servers: str, subjects: str, options: dict[str, str]) -> DataFrame:
    return (spark.readStream.format("jetstream").option("servers", servers).option("stream", STREAM)
            .option("subjects", subjects).options(**options).load())


def _run(frame: DataFrame, servers: str, checkpoint: str) -> None:
    """Write to JetStream until everything available now is done (the checkpoint remembers where)."""
    query = (frame.writeStream.format("jetstream").option("servers", servers)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"streaming stage failed: {query.exception()}")


def processing(spark: SparkSession, servers: str, checkpoint: str) -> None:
    """ORDERS.received -> ORDERS.processed (valid, enriched) or ORDERS.rejected (as received)."""
    _run(processed_orders(spark, servers), servers, checkpoint)


def processed_orders(spark: SparkSession, servers: str, **options: str) -> DataFrame:
    """The processing stage as a streaming frame for the sink: `subject` (ORDERS.processed or
    ORDERS.rejected), `data` and `msgId` (processed:<order id>); `options` go to the source (e.g. token)."""
    orders = _source(spark, servers, f"{STREAM}.received", options).select(
        F.col("data"), F.from_json(F.col("data").cast("string"), ORDER_SCHEMA).alias("o"))
    valid = (F.col("o.id").isNotNull() & (F.col("o.amount") > 0) & (F.col("o.items") > 0)
             & (F.length(F.coalesce(F.col("o.customer"), F.lit(""))) > 0))
    enriched = F.to_json(F.struct(
        "o.*", F.when(F.col("o.amount") >= 100, "gold").otherwise("standard").alias("tier"),
        F.round(F.col("o.amount") * TAX, 2).alias("total_with_tax")))
    out = orders.select(
        F.when(valid, F.lit(f"{STREAM}.processed")).otherwise(F.lit(f"{STREAM}.rejected")).alias("subject"),
        F.when(valid, enriched.cast("binary")).otherwise(F.col("data")).alias("data"),
        # the same order always gets the same id: a replay is de-duplicated by the stream
        F.concat(F.lit("processed:"), F.coalesce(F.col("o.id").cast("string"), F.sha2(F.col("data"), 256))).alias("msgId"))
    return out


def completion(spark: SparkSession, servers: str, checkpoint: str) -> None:
    """ORDERS.processed -> ORDERS.completed."""
    processed = _source(spark, servers, f"{STREAM}.processed", {}).select(
        F.from_json(F.col("data").cast("string"), PROCESSED_SCHEMA).alias("o"))
    out = processed.select(
        F.lit(f"{STREAM}.completed").alias("subject"),
        F.to_json(F.struct("o.*", F.lit("completed").alias("status"))).cast("binary").alias("data"),
        F.concat(F.lit("completed:"), F.col("o.id").cast("string")).alias("msgId"))
    _run(out, servers, checkpoint)


@dataclass(frozen=True)
class Report:
    stages: dict[str, int]
    latency_ms: dict[str, float]  # received -> completed, as stored by the stream
    revenue: list[tuple[str, float]]  # per customer, completed orders, highest first


def report(spark: SparkSession, servers: str) -> Report:
    rows = (spark.read.format("jetstream").option("servers", servers).option("stream", STREAM)
            .option("minPartitions", "2").load()
            .select(F.element_at(F.split("subject", r"\."), 2).alias("stage"), "timestamp",
                    F.get_json_object(F.col("data").cast("string"), "$.id").cast("bigint").alias("id"),
                    F.get_json_object(F.col("data").cast("string"), "$.customer").alias("customer"),
                    F.get_json_object(F.col("data").cast("string"), "$.amount").cast("double").alias("amount"))
            .cache())
    stages = {r.stage: r["count"] for r in rows.groupBy("stage").count().collect()}
    received = rows.where("stage = 'received'").select("id", F.col("timestamp").alias("t0"))
    completed = rows.where("stage = 'completed'")
    latency = (completed.join(received, "id")
               .select(((F.unix_micros("timestamp") - F.unix_micros("t0")) / 1000.0).alias("ms"))
               .agg(*(F.percentile_approx("ms", q).alias(f"p{int(q * 100)}") for q in (0.5, 0.95, 0.99)))
               .first())
    revenue = (completed.groupBy("customer").agg(F.round(F.sum("amount"), 2).alias("revenue"))
               .orderBy(F.desc("revenue"), "customer").collect())
    rows.unpersist()
    return Report(
        stages={s: int(stages.get(s, 0)) for s in ("received", "processed", "rejected", "completed")},
        latency_ms={k: float(v) for k, v in (latency.asDict() if latency else {}).items() if v is not None},
        revenue=[(r.customer, float(r.revenue)) for r in revenue])


def as_table(result: Report) -> str:
    lines = ["| stage | messages |", "|---|---:|"]
    lines += [f"| {stage} | {count} |" for stage, count in result.stages.items()]
    lines += ["", "| latency received -> completed | ms |", "|---|---:|"]
    lines += [f"| {k} | {v:.0f} |" for k, v in result.latency_ms.items()]
    lines += ["", "| customer | revenue |", "|---|---:|"]
    lines += [f"| {c} | {r:.2f} |" for c, r in result.revenue]
    return "\n".join(lines)


def revenue_svg(result: Report, width: int = 480, bar: int = 22) -> str:
    """A small bar chart of revenue per customer, as SVG (no plotting library needed)."""
    top = max((r for _, r in result.revenue), default=1.0) or 1.0
    height = 30 + bar * len(result.revenue) + 10
    parts: list[Any] = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                        'font-family="sans-serif" font-size="12">',
                        '<text x="10" y="18" font-weight="bold">Revenue per customer (completed orders)</text>']
    for i, (customer, revenue) in enumerate(result.revenue):
        y = 30 + i * bar
        length = (width - 220) * revenue / top
        parts.append(f'<text x="10" y="{y + 15}">{customer}</text>')
        parts.append(f'<rect x="110" y="{y + 3}" width="{length:.1f}" height="{bar - 6}" fill="#3b7dd8"/>')
        parts.append(f'<text x="{115 + length:.1f}" y="{y + 15}">{revenue:.2f}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
