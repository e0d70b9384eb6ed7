"""The data source's options, validated before any Spark job starts: one pydantic model per direction.

Spark hands options as a case-insensitive map of strings; every option is checked here, and an unknown
or malformed one fails with a message naming it and what is allowed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

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

    def connect_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"servers": [s.strip() for s in self.servers.split(",") if s.strip()],
                              "allow_reconnect": False, "connect_timeout": 10}
        if self.creds:
            kw["user_credentials"] = self.creds
        if self.token:
            kw["token"] = self.token
        if self.user:
            kw["user"], kw["password"] = self.user, self.password
        if self.tls_ca_file or self.tls_cert_file:
            import ssl

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
    max_in_flight: int = Field(1000, gt=0, alias="maxinflight")
    ack_timeout: float = Field(10.0, gt=0, alias="acktimeout")


_ALIASES = {
    "tls_ca_file": "tlsCaFile", "tls_cert_file": "tlsCertFile", "tls_key_file": "tlsKeyFile",
    "starting_offsets": "startingOffsets", "ending_offsets": "endingOffsets",
    "starting_timestamp": "startingTimestamp", "ending_timestamp": "endingTimestamp",
    "max_offsets_per_trigger": "maxOffsetsPerTrigger", "min_partitions": "minPartitions",
    "max_records_per_partition": "maxRecordsPerPartition", "fail_on_data_loss": "failOnDataLoss",
    "fetch_batch_size": "fetchBatchSize", "include_headers": "includeHeaders", "id_prefix": "idPrefix",
    "max_in_flight": "maxInFlight", "ack_timeout": "ackTimeout",
}


SPARKS_OWN = frozenset({"path", "checkpointlocation"})  # options Spark passes to every source and sink


def _spark_name(field: str) -> str:
    return _ALIASES.get(field, field)


def parse(model: type[SourceOptions] | type[SinkOptions], options: Mapping[str, str]) -> Any:
    """Validate Spark's options (keys in any case) into `model`; OptionsError names what is wrong."""
    raw = {k.lower(): v for k, v in options.items() if k.lower() not in SPARKS_OWN}
    fields = {(f.alias or name).lower(): name for name, f in model.model_fields.items()}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        allowed = ", ".join(sorted(_spark_name(n) for n in model.model_fields))
        raise OptionsError(f"unknown option(s) {', '.join(unknown)} for format jetstream; allowed: {allowed}")
    try:
        parsed = model.model_validate(raw)
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
