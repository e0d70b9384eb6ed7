"""jsspark: Apache Spark (PySpark) Data Source `format("jetstream")` and the ORDERS pipeline (next wave)."""
