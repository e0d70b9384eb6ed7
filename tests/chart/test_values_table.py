"""The chart README's values table is generated from values.schema.json and values.yaml and kept fresh;
the schema describes every value, and values.yaml and the schema name the same values."""

from __future__ import annotations

from typing import Any

from tests.chart import values_table


def test_readme_values_table_is_fresh() -> None:
    text = values_table.README.read_text()
    assert values_table.readme_with_fresh_table(text) == text, "run `python3 -m tests.chart.values_table`"


def test_every_value_is_described() -> None:
    undescribed = [path for path, node in values_table.leaves(values_table.schema()) if not node.get("description")]
    assert undescribed == []


def _value_paths(values: dict[str, Any], schema: dict[str, Any], path: str = "") -> set[str]:
    paths = set()
    for key, value in values.items():
        dotted = f"{path}.{key}" if path else key
        node = schema.get("properties", {}).get(key, {})
        paths |= _value_paths(value, node, dotted) if "properties" in node else {dotted}
    return paths


def test_values_yaml_and_the_schema_name_the_same_values() -> None:
    schema = values_table.schema()
    described = {path for path, _ in values_table.leaves(schema)} - {"global"}  # Helm's, never in values.yaml
    assert _value_paths(values_table.defaults(), schema) == described


def test_the_table_shows_types_defaults_and_descriptions() -> None:
    table = values_table.table()
    assert ("| `broker.resources` | resources | `{requests: {cpu: 100m, memory: 256Mi}, limits: {memory: 1Gi}}` | "
            "the broker container's requests and limits |") in table
    assert "| `operator.logFormat` | `json` \\| `plain` | `json` |" in table
    assert "- `quantity`: a Kubernetes quantity" in table
