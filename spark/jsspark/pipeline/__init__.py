"""The ORDERS pipeline on Spark: generate orders, validate and enrich them, complete them, report.

    python -m jsspark.pipeline                     # everything locally: a jsbroker, local[*] Spark
    python -m jsspark.pipeline --servers nats://... --master spark://...

Stages are subjects of stream ORDERS (the ORDERS example of deploy/examples/): orders arrive on
ORDERS.received; `processing` (a streaming job) writes valid ones, enriched, to ORDERS.processed and the
others to ORDERS.rejected; `completion` (a streaming job) turns processed orders into ORDERS.completed;
`report` (a batch job) reads the whole stream for per-stage counts, end-to-end latency percentiles and
revenue per customer.
"""
