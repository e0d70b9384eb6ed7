"""Pydantic models of the Stream, Consumer, KeyValue and ObjectStore custom resources: the single source of truth.

Owns the shape of `spec` and `status` for every CRD (camelCase in YAML, snake_case in Python). The CRD
YAML (crdgen.py), the JetStream mapping (mapping.py) and the field reference in operator/README.md are
all derived from these classes; a field added here shows up everywhere.

Rules kept here:
- spec models forbid unknown fields, so a typo is an error rather than a silently ignored setting;
- every optional field defaults to None, meaning "not set: the server applies its own default"
  (the CRDs carry no `default:`; GitOps tools would otherwise show perpetual diffs);
- durations (``30s``, ``1h30m``) and sizes (``1Gi``, ``512Mi``, ints) are parsed at this boundary into
  integer nanoseconds / bytes, so everything downstream works with JetStream's wire units.
No I/O, no Kubernetes or NATS imports.
"""

from __future__ import annotations

from datetime import datetime, timezone
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from jsoperator import ownership, units

# -- field types ------------------------------------------------------------------------------------

Duration = Annotated[
    int,
    BeforeValidator(units.parse_duration),
    WithJsonSchema({"type": "string", "pattern": units.DURATION_PATTERN}),
]
"""A Go-style duration string in YAML (``30s``); integer nanoseconds once validated."""

Size = Annotated[
    int,
    BeforeValidator(units.parse_size),
    WithJsonSchema({
        "x-kubernetes-int-or-string": True,
        "x-kubernetes-validations": [{
            "rule": f"type(self) == int || self.matches('{units.SIZE_PATTERN}')",
            "message": "a size is an integer number of bytes or a quantity such as 512Mi, 1Gi, 500M, 1G",
        }],
    }),
]
"""Bytes as an integer or a quantity string in YAML (``1Gi``); integer bytes once validated."""

Timestamp = AwareDatetime
"""An RFC 3339 time with a zone (``2026-01-02T15:04:05Z``)."""


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``, as Kubernetes and the NATS server write times."""
    return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


KubeTime = Annotated[AwareDatetime, PlainSerializer(format_time, return_type=str)]
"""A status time: parsed like Timestamp, written back as ``...Z``."""

NAME_PATTERN = r"^[^.*>/\\\s]+$"
Name = Annotated[str, Field(min_length=1, max_length=255, pattern=NAME_PATTERN)]
"""A stream or consumer name: no ``.``, ``*``, ``>``, ``/``, ``\\`` or whitespace."""

Subject = Annotated[str, Field(min_length=1, max_length=1024)]
Limit = Annotated[int, Field(ge=-1)]
"""A limit where -1 means unlimited (the server also normalises 0 to -1)."""
Count = Annotated[int, Field(ge=0)]


def _no_reserved_metadata(value: dict[str, str] | None) -> dict[str, str] | None:
    reserved = sorted(key for key in value or {} if ownership.reserved(key))
    if reserved:
        raise ValueError(f"metadata keys {reserved} are reserved (prefix {ownership.SERVER_PREFIX} for the server, "
                         f"{ownership.PREFIX} for the operator's ownership marks); rename them")
    return value


Metadata = Annotated[
    dict[str, str],
    BeforeValidator(_no_reserved_metadata),
    WithJsonSchema({
        "type": "object",
        "additionalProperties": {"type": "string"},
        "x-kubernetes-validations": [{
            "rule": f"self.all(key, !key.startsWith('{ownership.SERVER_PREFIX}') && "
                    f"!key.startsWith('{ownership.PREFIX}'))",
            "message": f"metadata keys starting with {ownership.SERVER_PREFIX} (the server's) or {ownership.PREFIX} "
                       "(the operator's ownership marks) are reserved; rename them",
        }],
    }),
]


AdoptionPolicy = Literal["never", "adopt", "adoptOrCreate"]
DeletionPolicy = Literal["delete", "retain"]
TerminalPolicy = Literal["hold", "retry"]


def effective_deletion_policy(deletion_policy: DeletionPolicy | None, prevent_delete: bool | None) -> DeletionPolicy:
    """deletionPolicy, else the deprecated preventDelete (true: retain), else delete."""
    return deletion_policy or ("retain" if prevent_delete else "delete")


def _policy_fields(what: str) -> Any:
    """The lifecycle policy fields shared by Stream and Consumer (declared at the end of each spec)."""
    adoption = Field(
        None,
        description=f"Operator: what to do with a server {what} of this name that this resource did not create: "
        f"never (Stalled, reason AdoptionRefused), adopt (take it over; never create one), adoptOrCreate (default).",
    )
    deletion = Field(
        None,
        description=f"Operator: on deletion of this resource, delete (default) or retain the server {what}.",
    )
    prevent = Field(None, description="Deprecated: use deletionPolicy: retain (true means retain).")
    lost = _LOST[what]
    recreate = Field(
        None,
        description=f"Operator: when the spec changes a field the server cannot change (storage, retention to or from "
        f"workqueue, ...), delete the server {what} and create it again instead of stopping (Stalled, "
        f"ImmutableFieldChange). Its {lost} are lost. Needs acceptDataLoss: true.",
    )
    accept = Field(None, description=f"Operator: true confirms that recreateOnImmutableChange may delete the {what} "
                   f"and its {lost}; nothing else reads it.")
    terminal = Field(
        None,
        description="Operator: after an error no retry is expected to fix (Stalled, e.g. a change the server "
        "refuses), hold (default: wait for the spec or the server to change) or retry (with backoff, Reconciling); "
        "the Terminal condition is True either way.",
    )
    return adoption, deletion, prevent, recreate, accept, terminal


_LOST = {"stream": "messages (and its consumers)", "consumer": "delivery state (delivered and acknowledged positions)",
         "bucket": "contents"}
RECREATE_UNGUARDED = "recreateOnImmutableChange: true needs acceptDataLoss: true (recreating loses the data)"


_STREAM_POLICIES = _policy_fields("stream")
_CONSUMER_POLICIES = _policy_fields("consumer")


class _Spec(BaseModel):
    """Base of every spec model: camelCase aliases, unknown fields refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class _Status(BaseModel):
    """Base of every status model: camelCase aliases, tolerant of fields written by other versions."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


# -- connection -------------------------------------------------------------------------------------


class SecretKeyRef(_Spec):
    """One key of a Secret in the resource's namespace."""

    name: str = Field(min_length=1, max_length=253, description="Secret name.")
    key: str = Field(min_length=1, max_length=253, description="Key inside the Secret.")


class UserSecretRef(_Spec):
    """A Secret holding a user name and a password."""

    name: str = Field(min_length=1, max_length=253, description="Secret name.")
    user_key: str = Field("user", min_length=1, description="Key of the user name (operator default: user).")
    password_key: str = Field(
        "password", min_length=1, description="Key of the password (operator default: password)."
    )


class TlsSecretRef(_Spec):
    """A Secret holding TLS material (the kubernetes.io/tls layout by default)."""

    name: str = Field(min_length=1, max_length=253, description="Secret name.")
    ca_key: str = Field("ca.crt", min_length=1, description="Key of the CA bundle (operator default: ca.crt).")
    cert_key: str = Field("tls.crt", min_length=1, description="Key of the client certificate (default: tls.crt).")
    key_key: str = Field("tls.key", min_length=1, description="Key of the client private key (default: tls.key).")


_ONE_AUTH_RULE: JsonDict = {
    "rule": "[has(self.credentialsSecretRef), has(self.tokenSecretRef), has(self.userSecretRef)]"
    ".filter(x, x).size() <= 1",
    "message": "set at most one of credentialsSecretRef, tokenSecretRef, userSecretRef",
}


class ConnectionSpec(_Spec):
    """spec.connection and JetStreamConnection.spec: where and how to reach JetStream (unset: the operator's own)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [_ONE_AUTH_RULE]})

    servers: list[str] | None = Field(
        None, description="NATS URLs, e.g. nats://nats.nats.svc:4222. Unset: the operator's --servers."
    )
    credentials_secret_ref: SecretKeyRef | None = Field(None, description="Secret key holding a .creds file.")
    token_secret_ref: SecretKeyRef | None = Field(None, description="Secret key holding an auth token.")
    user_secret_ref: UserSecretRef | None = Field(None, description="Secret holding user and password.")
    tls_secret_ref: TlsSecretRef | None = Field(None, description="Secret holding CA, client cert and key.")
    js_domain: str | None = Field(None, description="JetStream domain; the API prefix becomes $JS.<domain>.API.")

    @model_validator(mode="after")
    def _one_auth_method(self) -> ConnectionSpec:
        chosen = [
            name
            for name, ref in (
                ("credentialsSecretRef", self.credentials_secret_ref),
                ("tokenSecretRef", self.token_secret_ref),
                ("userSecretRef", self.user_secret_ref),
            )
            if ref is not None
        ]
        if len(chosen) > 1:
            raise ValueError(f"set at most one of credentialsSecretRef, tokenSecretRef, userSecretRef (got {chosen})")
        return self


ConnectionKind = Literal["JetStreamConnection", "ClusterJetStreamConnection"]
K8S_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"


class ConnectionRef(_Spec):
    """A JetStreamConnection (same namespace) or ClusterJetStreamConnection to reach JetStream through."""

    kind: ConnectionKind | None = Field(
        None, description="JetStreamConnection (default: in this resource's namespace) or ClusterJetStreamConnection."
    )
    name: str = Field(min_length=1, max_length=253, pattern=K8S_NAME, description="Name of the connection resource.")


NamespacePattern = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9*?\[\]!-]+$")]


class ClusterConnectionSpec(ConnectionSpec):
    """ClusterJetStreamConnection.spec: a connection for resources in the namespaces it grants."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _ONE_AUTH_RULE,
                {
                    "rule": "has(self.secretNamespace) || !(has(self.credentialsSecretRef) || "
                    "has(self.tokenSecretRef) || has(self.userSecretRef) || has(self.tlsSecretRef))",
                    "message": "a cluster connection reads its Secrets from secretNamespace: set it",
                },
            ]
        }
    )

    secret_namespace: str | None = Field(
        None, min_length=1, max_length=63, pattern=K8S_NAME,
        description="Namespace of the Secrets named here (required when any *SecretRef is set).",
    )
    allowed_namespaces: list[NamespacePattern] = Field(
        min_length=1,
        description="Namespaces whose resources may use this connection: names or globs (team-*, * for all).",
    )

    @model_validator(mode="after")
    def _secrets_have_a_namespace(self) -> ClusterConnectionSpec:
        refs = (self.credentials_secret_ref, self.token_secret_ref, self.user_secret_ref, self.tls_secret_ref)
        if self.secret_namespace is None and any(ref is not None for ref in refs):
            raise ValueError("a cluster connection reads its Secrets from secretNamespace: set it")
        return self


CONNECTION_CLASH = "set spec.connection or spec.connectionRef, not both"


def _connection_ref_field() -> Any:
    return Field(
        None, description="Operator: a JetStreamConnection or ClusterJetStreamConnection to use instead of "
        "connection (exclusive with it).",
    )


def _check_connection(connection: ConnectionSpec | None, connection_ref: ConnectionRef | None) -> None:
    if connection is not None and connection_ref is not None:
        raise ValueError(CONNECTION_CLASH)


# -- stream -----------------------------------------------------------------------------------------


class SubjectTransform(_Spec):
    """Rewrite subjects matching src into dest (NATS subject mapping syntax)."""

    src: str = Field(min_length=1, description="Source subject filter, wildcards allowed.")
    dest: str = Field(min_length=1, description="Destination subject, may use {{wildcard(1)}} tokens.")


class Republish(_Spec):
    """Republish each stored message to another subject."""

    src: str | None = Field(None, description="Subjects of the stream to republish (default: all).")
    dest: str = Field(min_length=1, description="Destination subject.")
    headers_only: bool | None = Field(None, description="Republish headers only, without the payload.")


class Placement(_Spec):
    """Clustered placement of the stream's replicas."""

    cluster: str | None = Field(None, description="Cluster name.")
    tags: list[str] | None = Field(None, description="Server tags the replicas must carry.")


class ExternalStream(_Spec):
    """A stream in another account or JetStream domain."""

    api_prefix: str = Field(min_length=1, description="API prefix, e.g. $JS.hub.API.")
    deliver_prefix: str | None = Field(None, description="Delivery subject prefix.")


class SourceConsumer(_Spec):
    """A durable consumer used for sourcing instead of an ephemeral one."""

    name: str | None = Field(None, description="Consumer name.")
    deliver_subject: str | None = Field(None, description="Delivery subject of that consumer.")


class StreamSource(_Spec):
    """A stream to mirror or to source messages from."""

    name: Name = Field(description="Name of the origin stream.")
    opt_start_seq: Count | None = Field(None, description="Start at this stream sequence.")
    opt_start_time: Timestamp | None = Field(None, description="Start at the first message at/after this time.")
    filter_subject: str | None = Field(None, description="Only messages on these subjects.")
    subject_transforms: list[SubjectTransform] | None = Field(None, description="Subject transforms applied.")
    external: ExternalStream | None = Field(None, description="The origin lives in another account or domain.")
    consumer: SourceConsumer | None = Field(None, description="Use this durable consumer for sourcing.")


class ConsumerLimits(_Spec):
    """Defaults applied to consumers of the stream that do not set them."""

    inactive_threshold: Duration | None = Field(None, description="Default inactiveThreshold.")
    max_ack_pending: Limit | None = Field(None, description="Default and ceiling for maxAckPending.")


class StreamSpec(_Spec):
    """Stream.spec: a JetStream stream. Every field maps to the StreamConfig field of the same name."""

    name: Name | None = Field(None, description="Stream name on the server. Unset: metadata.name. Immutable.")
    description: str | None = Field(None, max_length=4096, description="Free text.")
    subjects: list[Subject] | None = Field(None, description="Subjects stored. Unset: the stream name.")
    retention: Literal["limits", "interest", "workqueue"] | None = Field(
        None, description="When messages are removed. Server default: limits. Cannot change to/from workqueue."
    )
    max_consumers: Limit | None = Field(None, description="Most consumers allowed. Server default: -1 (unlimited).")
    max_msgs: Limit | None = Field(None, description="Most messages kept. Server default: -1 (unlimited).")
    max_bytes: Size | None = Field(None, description="Most bytes kept (int or 1Gi). Server default: -1 (unlimited).")
    max_age: Duration | None = Field(None, description="Oldest message kept (e.g. 24h). Server default: 0 (forever).")
    max_msgs_per_subject: Limit | None = Field(
        None, description="Most messages kept per subject. Server default: -1 (unlimited)."
    )
    max_msg_size: Size | None = Field(None, description="Largest message accepted. Server default: -1 (unlimited).")
    discard: Literal["old", "new"] | None = Field(
        None, description="At a limit: drop old messages or refuse new ones. Server default: old."
    )
    discard_new_per_subject: bool | None = Field(
        None, description="Apply discard new per subject (needs discard new and maxMsgsPerSubject)."
    )
    storage: Literal["file", "memory"] | None = Field(None, description="Server default: file. Immutable.")
    replicas: Annotated[int, Field(ge=1, le=5)] | None = Field(None, description="Replica count. Server default: 1.")
    no_ack: bool | None = Field(None, description="Do not acknowledge publishes.")
    duplicate_window: Duration | None = Field(
        None, description="Window for Nats-Msg-Id de-duplication. Server default: 2m (or maxAge if smaller)."
    )
    placement: Placement | None = Field(None, description="Cluster placement.")
    mirror: StreamSource | None = Field(None, description="Mirror this stream (no subjects then). Immutable.")
    sources: list[StreamSource] | None = Field(None, description="Aggregate messages from these streams.")
    compression: Literal["none", "s2"] | None = Field(None, description="Storage compression. Server default: none.")
    first_seq: Count | None = Field(None, description="First sequence number of a new stream.")
    subject_transform: SubjectTransform | None = Field(None, description="Transform subjects on ingest.")
    republish: Republish | None = Field(None, description="Republish stored messages.")
    allow_direct: bool | None = Field(None, description="Enable DIRECT.GET (needed by fast key-value reads).")
    mirror_direct: bool | None = Field(
        None, description="Mirror answers DIRECT.GET for its origin; the server sets it from the origin's allowDirect."
    )
    sealed: bool | None = Field(None, description="Seal the stream (update only): no more writes or deletes. Final.")
    deny_delete: bool | None = Field(None, description="Refuse message deletes. Cannot be turned off again.")
    deny_purge: bool | None = Field(None, description="Refuse purges. Cannot be turned off again.")
    allow_rollup_hdrs: bool | None = Field(None, description="Allow the Nats-Rollup header.")
    consumer_limits: ConsumerLimits | None = Field(None, description="Defaults for this stream's consumers.")
    allow_msg_ttl: bool | None = Field(None, description="Honour per-message Nats-TTL. Cannot be turned off again.")
    subject_delete_marker_ttl: Duration | None = Field(
        None,
        description="Leave delete markers with this TTL when maxAge removes a subject's last message "
        "(turns on allowMsgTtl and allowRollupHdrs).",
    )
    allow_msg_counter: bool | None = Field(None, description="Counter stream (CRDT counters only). Immutable.")
    allow_atomic_publish: bool | None = Field(None, description="Allow atomic batch publishing.")
    allow_msg_schedules: bool | None = Field(
        None, description="Allow message schedules (turns on allowRollupHdrs). Cannot be turned off."
    )
    allow_batch_publish: bool | None = Field(None, description="Allow fast (non-atomic) batch publishing.")
    persist_mode: Literal["default", "async"] | None = Field(
        None, description="async acknowledges before the write is flushed. Server default: default. Immutable."
    )
    metadata: Metadata | None = Field(
        None, description="Free key/value metadata (keys _nats.* and jsoperator.io/* are reserved).")
    adoption_policy: AdoptionPolicy | None = _STREAM_POLICIES[0]
    deletion_policy: DeletionPolicy | None = _STREAM_POLICIES[1]
    prevent_delete: bool | None = _STREAM_POLICIES[2]
    recreate_on_immutable_change: bool | None = _STREAM_POLICIES[3]
    accept_data_loss: bool | None = _STREAM_POLICIES[4]
    terminal_policy: TerminalPolicy | None = _STREAM_POLICIES[5]
    connection: ConnectionSpec | None = Field(None, description="Operator: how to reach JetStream.")
    connection_ref: ConnectionRef | None = _connection_ref_field()

    @model_validator(mode="after")
    def _policies_agree(self) -> StreamSpec:
        _check_policies(self.deletion_policy, self.prevent_delete)
        _check_recreate(self.recreate_on_immutable_change, self.accept_data_loss)
        _check_connection(self.connection, self.connection_ref)
        return self

    @model_validator(mode="after")
    def _mirror_rules(self) -> StreamSpec:
        if self.mirror is not None:
            clashing = [a for a, v in (("subjects", self.subjects), ("sources", self.sources)) if v]
            if clashing:
                raise ValueError(f"a mirror cannot also set {clashing}: remove them or remove mirror")
        return self

    @model_validator(mode="after")
    def _rollup_rules(self) -> StreamSpec:
        # The server silently rewrites these combinations (stream.go checkStreamCfg); refusing them keeps
        # the spec honest and avoids a perpetual diff.
        if self.deny_purge and self.allow_rollup_hdrs:
            raise ValueError("allowRollupHdrs needs purges: it cannot go with denyPurge: true")
        needs_rollups = [
            name
            for name, on in (
                ("subjectDeleteMarkerTtl", bool(self.subject_delete_marker_ttl)),
                ("allowMsgSchedules", bool(self.allow_msg_schedules)),
            )
            if on
        ]
        for name in needs_rollups:
            if self.allow_rollup_hdrs is False or self.deny_purge:
                raise ValueError(f"{name} needs roll-ups: leave allowRollupHdrs unset or true and denyPurge unset or false")
        if self.subject_delete_marker_ttl and self.allow_msg_ttl is False:
            raise ValueError("subjectDeleteMarkerTtl needs per-message TTLs: leave allowMsgTtl unset or true")
        return self


def _check_recreate(recreate: bool | None, accepted: bool | None) -> None:
    if recreate and not accepted:
        raise ValueError(RECREATE_UNGUARDED)


def recreates(spec: Any) -> bool:
    """Does the spec ask for (and guard) recreating its server object on an immutable change?"""
    return bool(getattr(spec, "recreate_on_immutable_change", None) and getattr(spec, "accept_data_loss", None))


def _check_policies(deletion_policy: DeletionPolicy | None, prevent_delete: bool | None) -> None:
    if prevent_delete and deletion_policy == "delete":
        raise ValueError(POLICY_CLASH)


POLICY_CLASH = "preventDelete: true (deprecated) contradicts deletionPolicy: delete; remove preventDelete"


# -- consumer ---------------------------------------------------------------------------------------

DeliverPolicy = Literal["all", "last", "new", "byStartSequence", "byStartTime", "lastPerSubject"]
PriorityPolicy = Literal["none", "overflow", "pinnedClient", "prioritized"]


class ConsumerSpec(_Spec):
    """Consumer.spec: a durable JetStream consumer. Fields map to the ConsumerConfig field of the same name."""

    stream_name: Name = Field(description="Name of the stream on the server. Immutable.")
    durable_name: Name | None = Field(None, description="Consumer name on the server. Unset: metadata.name. Immutable.")
    description: str | None = Field(None, max_length=4096, description="Free text.")
    deliver_policy: DeliverPolicy | None = Field(
        None, description="Where delivery starts. Server default: all. Immutable."
    )
    opt_start_seq: Annotated[int, Field(ge=1)] | None = Field(
        None, description="First stream sequence (deliverPolicy byStartSequence). Immutable."
    )
    opt_start_time: Timestamp | None = Field(None, description="Start time (deliverPolicy byStartTime). Immutable.")
    ack_policy: Literal["none", "all", "explicit", "flowControl"] | None = Field(
        None, description="How messages are acknowledged (flowControl: by a durable source's flow control "
        "answers). Server default: none. Immutable."
    )
    ack_wait: Duration | None = Field(None, description="Redeliver when not acked within this. Server default: 30s.")
    max_deliver: Limit | None = Field(None, description="Most delivery attempts. Server default: -1 (unlimited).")
    backoff: list[Duration] | None = Field(None, description="Redelivery delays, e.g. [1s, 5s, 30s].")
    filter_subject: str | None = Field(None, description="Only messages on this subject.")
    filter_subjects: list[Subject] | None = Field(None, description="Only messages on these subjects.")
    replay_policy: Literal["instant", "original"] | None = Field(
        None, description="Replay speed. Server default: instant. Immutable."
    )
    rate_limit_bps: Count | None = Field(None, description="Push delivery rate limit in bits per second.")
    sample_freq: Annotated[str, Field(pattern=r"^[0-9]{1,3}%?$")] | None = Field(
        None, description="Percentage of acks sampled for metrics, e.g. 100%."
    )
    max_waiting: Annotated[int, Field(ge=1)] | None = Field(
        None, description="Most pending pull requests (pull only). Server default: 512. Immutable."
    )
    max_ack_pending: Limit | None = Field(None, description="Most unacknowledged messages. Server default: 1000.")
    flow_control: bool | None = Field(None, description="Push flow control (needs idleHeartbeat). Immutable.")
    headers_only: bool | None = Field(None, description="Deliver headers only, without payloads.")
    max_batch: Count | None = Field(None, description="Largest pull batch allowed.")
    max_expires: Duration | None = Field(None, description="Longest pull request expiry allowed.")
    max_bytes: Size | None = Field(None, description="Largest pull request max_bytes allowed.")
    deliver_subject: Subject | None = Field(
        None, description="Push consumer: deliver to this subject. Unset: pull consumer. Push<->pull is immutable."
    )
    deliver_group: str | None = Field(None, description="Push consumer queue group.")
    idle_heartbeat: Duration | None = Field(None, description="Push idle heartbeat interval. Immutable.")
    inactive_threshold: Duration | None = Field(None, description="Delete the consumer after this long idle.")
    replicas: Annotated[int, Field(ge=0, le=5)] | None = Field(
        None, description="Replica count. Unset or 0: the stream's."
    )
    mem_storage: bool | None = Field(None, description="Keep consumer state in memory. Immutable.")
    metadata: Metadata | None = Field(
        None, description="Free key/value metadata (keys _nats.* and jsoperator.io/* are reserved).")
    pause_until: Timestamp | None = Field(
        None, description="Pause delivery until this time (a time in the past means running)."
    )
    priority_groups: list[Annotated[str, Field(pattern=r"^[a-zA-Z0-9/_=-]{1,16}$")]] | None = Field(
        None, description="Priority group names (pull only)."
    )
    priority_policy: PriorityPolicy | None = Field(None, description="Priority group policy. Server default: none.")
    priority_timeout: Duration | None = Field(None, description="Pin timeout for pinnedClient. Server default: 2m.")
    adoption_policy: AdoptionPolicy | None = _CONSUMER_POLICIES[0]
    deletion_policy: DeletionPolicy | None = _CONSUMER_POLICIES[1]
    prevent_delete: bool | None = _CONSUMER_POLICIES[2]
    recreate_on_immutable_change: bool | None = _CONSUMER_POLICIES[3]
    accept_data_loss: bool | None = _CONSUMER_POLICIES[4]
    terminal_policy: TerminalPolicy | None = _CONSUMER_POLICIES[5]
    connection: ConnectionSpec | None = Field(None, description="Operator: how to reach JetStream.")
    connection_ref: ConnectionRef | None = _connection_ref_field()

    @model_validator(mode="after")
    def _policies_agree(self) -> ConsumerSpec:
        _check_policies(self.deletion_policy, self.prevent_delete)
        _check_recreate(self.recreate_on_immutable_change, self.accept_data_loss)
        _check_connection(self.connection, self.connection_ref)
        return self

    @model_validator(mode="after")
    def _start_options_match_policy(self) -> ConsumerSpec:
        if (self.opt_start_seq is not None) != (self.deliver_policy == "byStartSequence"):
            raise ValueError("optStartSeq and deliverPolicy byStartSequence go together: set both or neither")
        if (self.opt_start_time is not None) != (self.deliver_policy == "byStartTime"):
            raise ValueError("optStartTime and deliverPolicy byStartTime go together: set both or neither")
        if self.filter_subject is not None and self.filter_subjects is not None:
            raise ValueError("set filterSubject or filterSubjects, not both")
        return self

    @field_validator("backoff")
    @classmethod
    def _backoff_not_empty(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and not value:
            raise ValueError("backoff must list at least one duration, or be left out")
        return value


# -- buckets ----------------------------------------------------------------------------------------

BUCKET_PATTERN = r"^[a-zA-Z0-9_-]+$"
Bucket = Annotated[str, Field(min_length=1, max_length=250, pattern=BUCKET_PATTERN)]
"""A KeyValue or ObjectStore bucket name, as the client libraries allow: letters, digits, ``_`` and ``-``."""
KV_MAX_HISTORY = 64  # the client libraries refuse more


def _bucket_policies(what: str) -> tuple[Any, Any, Any]:
    adoption, deletion, _, _, _, terminal = _policy_fields(what)
    return adoption, deletion, terminal


_BUCKET_POLICIES = _bucket_policies("bucket")


class KeyValueSpec(_Spec):
    """KeyValue.spec: a key-value bucket, stored as the stream KV_<bucket> the client libraries create."""

    bucket: Bucket | None = Field(
        None, description="Bucket name on the server (stream KV_<bucket>). Unset: metadata.name. Immutable."
    )
    description: str | None = Field(None, max_length=4096, description="Free text.")
    history: Annotated[int, Field(ge=1, le=KV_MAX_HISTORY)] | None = Field(
        None, description=f"Values kept per key. Default 1, at most {KV_MAX_HISTORY}."
    )
    ttl: Duration | None = Field(None, description="How long a value is kept (e.g. 24h). Unset: forever.")
    max_value_size: Size | None = Field(None, description="Largest value accepted. Unset: unlimited.")
    max_bytes: Size | None = Field(None, description="Most bytes in the bucket (int or 1Gi). Unset: unlimited.")
    storage: Literal["file", "memory"] | None = Field(None, description="Default: file. Immutable.")
    replicas: Annotated[int, Field(ge=1, le=5)] | None = Field(None, description="Replica count. Default: 1.")
    placement: Placement | None = Field(None, description="Cluster placement.")
    republish: Republish | None = Field(None, description="Republish each change to another subject.")
    mirror: StreamSource | None = Field(
        None, description="Mirror another bucket (name: the bucket, or its KV_ stream); read-only. Immutable."
    )
    sources: list[StreamSource] | None = Field(
        None, description="Gather the keys of other buckets (name: the bucket, or any stream with subjectTransforms)."
    )
    compression: bool | None = Field(None, description="Compress stored values (s2). Default: false.")
    allow_msg_ttl: bool | None = Field(
        None, description="Allow a TTL per key on puts. Turned on by limitMarkerTtl. Cannot be turned off."
    )
    limit_marker_ttl: Duration | None = Field(
        None,
        description="Leave a delete marker kept this long when a key expires (turns on allowMsgTtl).",
    )
    metadata: Metadata | None = Field(
        None, description="Free key/value metadata (keys _nats.* and jsoperator.io/* are reserved).")
    adoption_policy: AdoptionPolicy | None = _BUCKET_POLICIES[0]
    deletion_policy: DeletionPolicy | None = _BUCKET_POLICIES[1]
    terminal_policy: TerminalPolicy | None = _BUCKET_POLICIES[2]
    connection: ConnectionSpec | None = Field(None, description="Operator: how to reach JetStream.")
    connection_ref: ConnectionRef | None = _connection_ref_field()

    @model_validator(mode="after")
    def _consistent(self) -> KeyValueSpec:
        _check_connection(self.connection, self.connection_ref)
        if self.mirror is not None and self.sources:
            raise ValueError("a mirror cannot also set sources: remove one of them")
        if self.limit_marker_ttl and self.allow_msg_ttl is False:
            raise ValueError("limitMarkerTtl needs per-key TTLs: leave allowMsgTtl unset or true")
        return self


class ObjectStoreSpec(_Spec):
    """ObjectStore.spec: an object store bucket, stored as the stream OBJ_<bucket> the client libraries create."""

    bucket: Bucket | None = Field(
        None, description="Bucket name on the server (stream OBJ_<bucket>). Unset: metadata.name. Immutable."
    )
    description: str | None = Field(None, max_length=4096, description="Free text.")
    ttl: Duration | None = Field(None, description="How long an object is kept (e.g. 24h). Unset: forever.")
    max_bytes: Size | None = Field(None, description="Most bytes in the bucket (int or 1Gi). Unset: unlimited.")
    storage: Literal["file", "memory"] | None = Field(None, description="Default: file. Immutable.")
    replicas: Annotated[int, Field(ge=1, le=5)] | None = Field(None, description="Replica count. Default: 1.")
    placement: Placement | None = Field(None, description="Cluster placement.")
    compression: bool | None = Field(None, description="Compress stored chunks (s2). Default: false.")
    sealed: bool | None = Field(
        None, description="Seal the bucket (the clients' Seal): objects can be read, never put or deleted. Final."
    )
    metadata: Metadata | None = Field(
        None, description="Free key/value metadata (keys _nats.* and jsoperator.io/* are reserved).")
    adoption_policy: AdoptionPolicy | None = _BUCKET_POLICIES[0]
    deletion_policy: DeletionPolicy | None = _BUCKET_POLICIES[1]
    terminal_policy: TerminalPolicy | None = _BUCKET_POLICIES[2]
    connection: ConnectionSpec | None = Field(None, description="Operator: how to reach JetStream.")
    connection_ref: ConnectionRef | None = _connection_ref_field()

    @model_validator(mode="after")
    def _one_connection(self) -> ObjectStoreSpec:
        _check_connection(self.connection, self.connection_ref)
        return self


# -- status -----------------------------------------------------------------------------------------


# Conditions are keyed by type (server-side apply merges them per type, as for built-in resources).
_CONDITIONS_LIST: dict[str, Any] = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}
_MAX_CONDITIONS = 16  # bounded, with bounded type and reason, so root-level CEL rules may read them (cost budget)


class Condition(_Status):
    """A kstatus/Kubernetes-style condition."""

    type: str = Field(max_length=64,
        description="Ready, Reconciling, Stalled, Synced, Adopted, Terminal, ReconciliationPaused, Unmanaged or StorageAvailable.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(max_length=128, description="CamelCase reason.")
    message: str = Field("", description="Human-readable detail.")
    last_transition_time: KubeTime = Field(description="When status last changed.")
    observed_generation: int | None = Field(None, description="metadata.generation this condition is about.")


class LastReset(_Status):
    """The last reset annotation the operator executed (each distinct value is executed once)."""

    request: str = Field(description="The annotation as executed, e.g. reset-to-sequence=42@retry1.")
    reset_seq: int | None = Field(None, description="Stream sequence the consumer now starts from.")
    time: KubeTime = Field(description="When it was executed.")
    result: Literal["Succeeded", "Failed"] = Field(description="Succeeded or Failed.")
    message: str = Field("", description="Server answer or error.")


class LastUnpin(_Status):
    """The last unpin annotation the operator executed (each distinct value is executed once)."""

    request: str = Field(description="The annotation as executed, e.g. unpin=jobs@again.")
    time: KubeTime = Field(description="When it was executed.")
    result: Literal["Succeeded", "Failed"] = Field(description="Succeeded or Failed.")
    message: str = Field("", description="What happened, or why it was refused and what to do.")


class SequencePair(_Status):
    """A consumer position: consumer sequence and stream sequence."""

    consumer_seq: int = Field(0, description="Consumer sequence.")
    stream_seq: int = Field(0, description="Stream sequence.")


class SourceStatus(_Status):
    """A mirror's or source's link as STREAM.INFO shows it."""

    name: str = Field(description="The stream copied from.")
    lag: int = Field(0, description="Messages of the origin not copied yet.")
    active: bool = Field(False, description="The link heard from its origin in the last 10 s.")
    error: str | None = Field(None, description="Why the link cannot copy, as the server says.")


class _ReconciledStatus(_Status):
    """The fields every reconciled resource's status starts with."""

    observed_generation: int | None = Field(None, description="metadata.generation last reconciled.")
    conditions: list[Condition] | None = Field(
        None, max_length=_MAX_CONDITIONS, description="Ready, Reconciling, Stalled, ...", json_schema_extra=_CONDITIONS_LIST
    )


class StreamStatus(_ReconciledStatus):
    """Stream.status."""

    stream_name: str | None = Field(None, description="Name of the stream on the server.")
    messages: int | None = Field(None, description="Messages stored.")
    bytes: int | None = Field(None, description="Bytes stored.")
    first_seq: int | None = Field(None, description="First sequence stored.")
    last_seq: int | None = Field(None, description="Last sequence stored.")
    consumer_count: int | None = Field(None, description="Consumers on the server (all, not only CRs).")
    lag: int | None = Field(None, description="Messages the mirror or the sources have not copied yet (their sum).")
    mirror: SourceStatus | None = Field(None, description="The mirror's link.")
    sources: list[SourceStatus] | None = Field(None, description="The sources' links, by name.")


class ConsumerStatus(_ReconciledStatus):
    """Consumer.status."""

    stream_name: str | None = Field(None, description="Stream on the server.")
    consumer_name: str | None = Field(None, description="Consumer name on the server.")
    delivered: SequencePair | None = Field(None, description="Last delivered position.")
    ack_floor: SequencePair | None = Field(None, description="Everything up to here is acknowledged.")
    num_pending: int | None = Field(None, description="Messages not yet delivered.")
    num_ack_pending: int | None = Field(None, description="Delivered, not yet acknowledged.")
    num_redelivered: int | None = Field(None, description="Messages redelivered at least once.")
    num_waiting: int | None = Field(None, description="Pull requests waiting.")
    last_reset: LastReset | None = Field(None, description="The last reset annotation executed.")
    last_unpin: LastUnpin | None = Field(None, description="The last unpin annotation executed.")


class KeyValueStatus(_ReconciledStatus):
    """KeyValue.status."""

    bucket: str | None = Field(None, description="Bucket name on the server.")
    stream_name: str | None = Field(None, description="The bucket's stream (KV_<bucket>).")
    values: int | None = Field(None, description="Values stored, history and delete markers included.")
    bytes: int | None = Field(None, description="Bytes stored.")
    history: int | None = Field(None, description="Values kept per key.")


class ObjectStoreStatus(_ReconciledStatus):
    """ObjectStore.status."""

    bucket: str | None = Field(None, description="Bucket name on the server.")
    stream_name: str | None = Field(None, description="The bucket's stream (OBJ_<bucket>).")
    bytes: int | None = Field(None, description="Bytes stored (chunks and metadata).")
    sealed: bool | None = Field(None, description="The bucket is sealed.")


class ConnectionStatus(_Status):
    """JetStreamConnection.status and ClusterJetStreamConnection.status."""

    observed_generation: int | None = Field(None, description="metadata.generation last checked.")
    conditions: list[Condition] | None = Field(
        None, description="Ready (the Secrets resolve and the servers answer).", json_schema_extra=_CONDITIONS_LIST
    )
    referenced_by: int | None = Field(None, description="How many resources name this connection in connectionRef.")
    referrers: list[str] | None = Field(None, description="Those resources (Kind namespace/name), the first 20.")


# -- parsing a CR's spec ----------------------------------------------------------------------------

SpecT = TypeVar("SpecT", StreamSpec, ConsumerSpec, KeyValueSpec, ObjectStoreSpec, ConnectionSpec,
                  ClusterConnectionSpec)


class SpecError(ValueError):
    """A spec the models refuse; the message lists each problem as ``spec.<field>: <what is wrong>``."""


def parse_spec(model: type[SpecT], raw: Mapping[str, Any] | None) -> SpecT:
    """Validate a CR's ``spec`` (as the apiserver stores it) into ``model``; SpecError says what to fix."""
    try:
        return model.model_validate(dict(raw or {}))
    except ValidationError as exc:
        raise SpecError("; ".join(_problem(error) for error in exc.errors())) from None


def _problem(error: Any) -> str:
    path = "spec" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"])
    if error["type"] == "extra_forbidden":
        return f"{path}: unknown field (check its spelling against operator/README.md)"
    return f"{path}: {error['msg'].removeprefix('Value error, ')}"
