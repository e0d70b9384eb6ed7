"""The data source's options, validated before any Spark job starts: one pydantic model per direction.

Spark hands options as a case-insensitive map of strings; every option is checked here, and an unknown
or malformed one fails with a message naming it and what is allowed. Options named `nats.<option>` go
to nats-py's `connect()` unchanged (as Kafka's source passes `kafka.*` to its client), when nats-py
takes that option as a plain value and jsspark does not set it itself.
"""

from __future__ import annotations

import json
import re
import ssl
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

Offsets = Literal["earliest", "latest"] | int  # a next stream sequence once parsed


class OptionsError(ValueError):
    """An option is unknown or malformed; the message names it and says what is allowed."""


class Connection(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    servers: str = "nats://127.0.0.1:4222"
    creds: str | None = None
    token: str | None = None
    user: str | None = None
    password: str | None = None
    tls_ca_file: str | None = Field(None, alias="tlscafile")
    tls_cert_file: str | None = Field(None, alias="tlscertfile")
    tls_key_file: str | None = Field(None, alias="tlskeyfile")
    connect_timeout: float = Field(5.0, gt=0, alias="connecttimeout")  # seconds, per attempt and server
    request_timeout: float = Field(5.0, gt=0, alias="requesttimeout")  # seconds, per JetStream API request
    reconnect_attempts: int = Field(0, ge=-1, alias="reconnectattempts")  # more tries per server; -1: forever
    reconnect_wait: float = Field(2.0, ge=0, alias="reconnectwait")  # seconds between tries of one server
    # seconds a request that failed transiently (server restarting, unreachable, not answering) is retried
    retry_timeout: float = Field(300.0, ge=0, alias="retrytimeout")
    client_options: tuple[tuple[str, Any], ...] = ()  # the `nats.<option>` pass-through, validated

    def server_list(self) -> list[str]:
        return [s.strip() for s in self.servers.split(",") if s.strip()]

    def connect_kwargs(self) -> dict[str, Any]:
        """nats-py's `connect()` arguments, without the callbacks (jsspark.client adds those)."""
        kw: dict[str, Any] = {
            "servers": self.server_list(), "connect_timeout": self.connect_timeout,
            "allow_reconnect": self.reconnect_attempts != 0, "reconnect_time_wait": self.reconnect_wait,
            # nats-py tries each server max_reconnect_attempts + 1 times when connecting (and forever
            # with 0); jsspark.client counts the attempts itself, so 0 here is never reached.
            "max_reconnect_attempts": self.reconnect_attempts, **dict(self.client_options)}
        if self.creds:
            kw["user_credentials"] = self.creds
        if self.token:
            kw["token"] = self.token
        if self.user:
            kw["user"], kw["password"] = self.user, self.password
        if self.tls_ca_file or self.tls_cert_file:
            context = ssl.create_default_context(cafile=self.tls_ca_file)
            if self.tls_cert_file:
                context.load_cert_chain(self.tls_cert_file, self.tls_key_file)
            kw["tls"] = context
        return kw


class SourceOptions(Connection):
    stream: str = Field(min_length=1)
    subjects: tuple[str, ...] = ()
    starting_offsets: Offsets = Field("earliest", alias="startingoffsets")
    ending_offsets: Offsets = Field("latest", alias="endingoffsets")
    starting_timestamp: int | None = Field(None, ge=0, alias="startingtimestamp")  # ms since the epoch
    ending_timestamp: int | None = Field(None, ge=0, alias="endingtimestamp")
    max_offsets_per_trigger: int | None = Field(None, gt=0, alias="maxoffsetspertrigger")
    min_offsets_per_trigger: int | None = Field(None, gt=0, alias="minoffsetspertrigger")
    max_trigger_delay: float = Field(900.0, alias="maxtriggerdelay")  # seconds; given as "15m", "30s", "500ms"
    min_partitions: int = Field(1, gt=0, alias="minpartitions")
    max_records_per_partition: int | None = Field(None, gt=0, alias="maxrecordsperpartition")
    fail_on_data_loss: bool = Field(True, alias="failondataloss")
    fetch_batch_size: int = Field(5000, gt=0, le=100_000, alias="fetchbatchsize")
    include_headers: bool = Field(False, alias="includeheaders")
    consumer: str | None = Field(None, min_length=1)  # a durable that mirrors a streaming query's progress

    @field_validator("subjects", mode="before")
    @classmethod
    def _csv(cls, value: Any) -> Any:
        return tuple(s.strip() for s in value.split(",") if s.strip()) if isinstance(value, str) else value

    @field_validator("starting_offsets", "ending_offsets", mode="before")
    @classmethod
    def _offsets(cls, value: Any, info: Any) -> Any:
        if not isinstance(value, str) or value in ("earliest", "latest"):
            return value
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = None
        if not (isinstance(parsed, dict) and len(parsed) == 1 and isinstance(next(iter(parsed.values())), int)):
            raise ValueError('must be "earliest", "latest" or JSON {"<stream>": <next stream sequence>}')
        return next(iter(parsed.values()))

    @field_validator("max_trigger_delay", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*", value.lower())
        if not match:
            raise ValueError('must be a duration with its unit, e.g. "500ms", "30s", "15m", "1h"')
        return float(match[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match[2]]

    def check_exclusive(self, raw: Mapping[str, str]) -> None:
        for offsets, timestamp in (("startingoffsets", "startingtimestamp"), ("endingoffsets", "endingtimestamp")):
            if offsets in raw and timestamp in raw:
                raise OptionsError(f"options {_spark_name(_FIELDS[offsets])} and {_spark_name(_FIELDS[timestamp])} "
                                   "exclude each other: give one")

    def check_offsets_stream(self, raw: Mapping[str, str]) -> None:
        for key in ("startingoffsets", "endingoffsets"):
            value = raw.get(key, "")
            if value.startswith("{") and self.stream not in json.loads(value):
                raise OptionsError(f"option {key}: its JSON names a stream other than {self.stream!r}")


class SinkOptions(Connection):
    subject: str | None = None
    id_prefix: str | None = Field(None, alias="idprefix")
    max_in_flight: int = Field(4000, gt=0, alias="maxinflight")  # nats-py's publish_async default
    ack_timeout: float = Field(10.0, gt=0, alias="acktimeout")


_ALIASES = {
    "tls_ca_file": "tlsCaFile", "tls_cert_file": "tlsCertFile", "tls_key_file": "tlsKeyFile",
    "connect_timeout": "connectTimeout", "request_timeout": "requestTimeout",
    "reconnect_attempts": "reconnectAttempts", "reconnect_wait": "reconnectWait", "retry_timeout": "retryTimeout",
    "starting_offsets": "startingOffsets", "ending_offsets": "endingOffsets",
    "starting_timestamp": "startingTimestamp", "ending_timestamp": "endingTimestamp",
    "max_offsets_per_trigger": "maxOffsetsPerTrigger", "min_offsets_per_trigger": "minOffsetsPerTrigger",
    "max_trigger_delay": "maxTriggerDelay", "min_partitions": "minPartitions",
    "max_records_per_partition": "maxRecordsPerPartition", "fail_on_data_loss": "failOnDataLoss",
    "fetch_batch_size": "fetchBatchSize", "include_headers": "includeHeaders", "id_prefix": "idPrefix",
    "max_in_flight": "maxInFlight", "ack_timeout": "ackTimeout",
}


SPARKS_OWN = frozenset({"path", "checkpointlocation", "queryname"})  # options Spark passes to sources and sinks
CLIENT_PREFIX = "nats."
_INTERNAL = frozenset({"client_options"})  # fields no Spark option sets directly

# nats-py connect() arguments jsspark sets itself, with the option that sets them.
_OWNED = {"servers": "servers", "connect_timeout": "connectTimeout", "allow_reconnect": "reconnectAttempts",
          "max_reconnect_attempts": "reconnectAttempts", "reconnect_time_wait": "reconnectWait",
          "user": "user", "password": "password", "token": "token", "user_credentials": "creds", "tls": "tlsCaFile"}
_PLAIN = (str, int, float, bool)


def _plain_connect_options() -> dict[str, Any]:
    """nats-py connect() arguments a string can set (str, int, float, bool, optional or not), by type."""
    from nats.aio.client import Client

    plain: dict[str, Any] = {}
    for name, hint in typing.get_type_hints(Client.connect).items():
        args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        if name not in _OWNED and name != "return" and all(a in _PLAIN or a is bytes for a in args):
            plain[name] = hint
    return plain


def _client_options(raw: Mapping[str, str]) -> tuple[tuple[str, Any], ...]:
    """The `nats.<option>` pass-through (snake_case or camelCase names), each converted to nats-py's type."""
    plain = _plain_connect_options()
    by_key = {name.replace("_", ""): name for name in [*plain, *_OWNED]}
    out = []
    for key, value in sorted(raw.items()):
        given = key[len(CLIENT_PREFIX):]
        name = by_key.get(given.replace("_", "").lower())
        if name in _OWNED:
            raise OptionsError(f"option {key}: jsspark sets nats-py's {name} itself; use the option {_OWNED[name]}")
        if name is None:
            raise OptionsError(f"option {key}: nats-py's connect() has no option {given!r} that takes a plain value; "
                               f"allowed after {CLIENT_PREFIX}: {', '.join(sorted(plain))}")
        try:
            out.append((name, TypeAdapter(plain[name]).validate_python(value)))
        except ValidationError as exc:
            raise OptionsError(f"option {key}: {exc.errors()[0]['msg']}") from None
    return tuple(out)


def _spark_name(field: str) -> str:
    return _ALIASES.get(field, field)


Model = TypeVar("Model", bound=Connection)


def parse(model: type[Model], options: Mapping[str, str]) -> Model:
    """Validate Spark's options (keys in any case) into `model`; OptionsError names what is wrong."""
    raw = {k.lower(): v for k, v in options.items() if k.lower() not in SPARKS_OWN}
    client = {k: v for k, v in raw.items() if k.startswith(CLIENT_PREFIX)}
    raw = {k: v for k, v in raw.items() if k not in client}
    fields = {(f.alias or name).lower(): name for name, f in model.model_fields.items() if name not in _INTERNAL}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        allowed = ", ".join(sorted(_spark_name(n) for n in model.model_fields if n not in _INTERNAL))
        raise OptionsError(f"unknown option(s) {', '.join(unknown)} for format jetstream; allowed: {allowed}, "
                           f"and {CLIENT_PREFIX}<nats-py connect() option>")
    try:
        parsed = model.model_validate({**raw, "client_options": _client_options(client)})
    except ValidationError as exc:
        problems = "; ".join(f"option {_spark_name(fields.get(str(e['loc'][0]), str(e['loc'][0])))}: {e['msg']}"
                             for e in exc.errors())
        raise OptionsError(problems) from None
    if isinstance(parsed, SourceOptions):
        parsed.check_exclusive(raw)
        parsed.check_offsets_stream(raw)
    return parsed


_FIELDS = {"startingoffsets": "starting_offsets", "endingoffsets": "ending_offsets",
           "startingtimestamp": "starting_timestamp", "endingtimestamp": "ending_timestamp"}
