"""Operator settings: one frozen dataclass filled from CLI flags and `JSOPERATOR_*` environment variables
(kopf's own settings are derived from it in handlers/, the kopf layer).

Precedence: CLI flag, then environment variable, then the default below.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Callable, Mapping

from . import annotations as annotation

FINALIZER = annotation.PREFIX + "finalizer"
_INSTANCE = re.compile(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?")


class SettingsError(ValueError):
    """An operator setting is invalid; the message says which and how to fix it."""


@dataclasses.dataclass(frozen=True)
class Settings:
    servers: tuple[str, ...] = ("nats://127.0.0.1:4222",)
    """Default NATS servers for resources whose spec.connection gives none."""
    creds_file: str | None = None
    """A NATS .creds file used with the default servers."""
    creds_secret: str | None = None
    """`NAMESPACE/NAME[:KEY]` of a Secret holding a .creds file (key default `creds`), for the default servers."""
    token: str | None = None
    user: str | None = None
    password: str | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    js_domain: str | None = None
    namespaces: tuple[str, ...] = ()
    """Namespaces to watch; empty means all namespaces (cluster-wide)."""
    drift_interval: float = 60.0
    """Seconds between drift checks of each resource against the server."""
    request_timeout: float = 3.0
    """Seconds to wait for one JetStream API reply."""
    status_interval: float | None = 2.0
    """Seconds between status counter refreshes (one STREAM.LIST per server); None: off."""
    leader_election: str | None = None
    """`NAMESPACE/NAME` of a Lease: replicas elect one leader that reconciles; None: run alone."""
    finalizers: bool = True
    """Hold each resource with a finalizer until its server object is deleted or kept (False: best effort)."""
    read_only: bool = False
    """Observe only: report drift and missing server objects in status, never create, update or delete one,
    never run a reset or unpin annotation."""
    cluster_connections: bool = True
    """Serve the ClusterJetStreamConnections labelled for this instance (status, finalizer, counts); False: serve
    and watch none, only read them when resources name them."""
    instance: str = ""
    """This operator's name among several in one cluster: it serves the ClusterJetStreamConnections labelled
    `jsoperator.io/instance: <instance>` (empty: the unlabelled ones) and holds its resources with its own
    finalizer, so one operator never strips another's (kopf takes its finalizer off every object of a kind it
    handles that its handlers do not match)."""
    cluster_name: str = ""
    """This Kubernetes cluster's name in the ownership marks on server objects (ownership.py); empty: the uid of
    its kube-system namespace, read at start."""
    metrics_port: int | None = 8080
    health_port: int | None = 8081
    log_level: str = "INFO"
    log_format: str = "json"

    def __post_init__(self) -> None:
        if not self.servers:
            raise SettingsError("no NATS servers: pass --servers URL[,URL] or set JSOPERATOR_SERVERS")
        if self.drift_interval <= 0:
            raise SettingsError(f"--drift-interval must be > 0 seconds, got {self.drift_interval}")
        if self.status_interval is not None and self.status_interval < 0:
            raise SettingsError(f"--status-interval must be >= 0 seconds (0 = off), got {self.status_interval}")
        if self.request_timeout <= 0:
            raise SettingsError(f"--request-timeout must be > 0 seconds, got {self.request_timeout}")
        if self.log_level.upper() not in logging.getLevelNamesMapping():
            raise SettingsError(f"--log-level {self.log_level!r} is not a logging level (DEBUG, INFO, WARNING, ...)")
        if self.log_format not in ("json", "plain"):
            raise SettingsError(f"--log-format must be json or plain, got {self.log_format!r}")
        if self.leader_election is not None and len([p for p in self.leader_election.split("/") if p]) != 2:
            raise SettingsError(f"--leader-election takes NAMESPACE/NAME of a Lease, got {self.leader_election!r}")
        if self.creds_file and self.creds_secret:
            raise SettingsError("give either --creds or --creds-secret, not both")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise SettingsError("--tls-cert and --tls-key go together")
        if self.instance and not _INSTANCE.fullmatch(self.instance):
            raise SettingsError(f"--instance {self.instance!r} must be 1-40 lowercase letters, digits or '-', "
                                "starting and ending with a letter or digit (it names a label value and a finalizer)")

    @property
    def finalizer(self) -> str:
        """The finalizer this operator puts on what it serves: its instance's own."""
        return f"{FINALIZER}.{self.instance}" if self.instance else FINALIZER


def parse_bool(value: str) -> bool:
    """`true`/`false` (any case), as Kubernetes manifests write them."""
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("write true or false")
    return lowered == "true"


def split_csv(value: str) -> tuple[str, ...]:
    """`a, b,,c` -> ("a", "b", "c"): the form of --servers and JSOPERATOR_NAMESPACES."""
    return tuple(s.strip() for s in value.split(",") if s.strip())


# field name -> (environment variable, parser)
_ENV: dict[str, tuple[str, Callable[[str], object]]] = {
    "servers": ("JSOPERATOR_SERVERS", split_csv),
    "creds_file": ("JSOPERATOR_CREDS", str),
    "creds_secret": ("JSOPERATOR_CREDS_SECRET", str),
    "token": ("JSOPERATOR_TOKEN", str),
    "user": ("JSOPERATOR_USER", str),
    "password": ("JSOPERATOR_PASSWORD", str),
    "tls_ca_file": ("JSOPERATOR_TLS_CA", str),
    "tls_cert_file": ("JSOPERATOR_TLS_CERT", str),
    "tls_key_file": ("JSOPERATOR_TLS_KEY", str),
    "js_domain": ("JSOPERATOR_JS_DOMAIN", str),
    "namespaces": ("JSOPERATOR_NAMESPACES", split_csv),
    "drift_interval": ("JSOPERATOR_DRIFT_INTERVAL", float),
    "request_timeout": ("JSOPERATOR_REQUEST_TIMEOUT", float),
    "status_interval": ("JSOPERATOR_STATUS_INTERVAL", float),
    "leader_election": ("JSOPERATOR_LEADER_ELECTION", str),
    "finalizers": ("JSOPERATOR_FINALIZERS", parse_bool),
    "cluster_connections": ("JSOPERATOR_CLUSTER_CONNECTIONS", parse_bool),
    "instance": ("JSOPERATOR_INSTANCE", str),
    "read_only": ("JSOPERATOR_READ_ONLY", parse_bool),
    "cluster_name": ("JSOPERATOR_CLUSTER_NAME", str),
    "metrics_port": ("JSOPERATOR_METRICS_PORT", int),
    "health_port": ("JSOPERATOR_HEALTH_PORT", int),
    "log_level": ("JSOPERATOR_LOG_LEVEL", str),
    "log_format": ("JSOPERATOR_LOG_FORMAT", str),
}


def load(flags: Mapping[str, object], environ: Mapping[str, str] = os.environ) -> Settings:
    """Merge CLI flags (None = not given) over environment variables over defaults."""
    values: dict[str, object] = {}
    for field, (env, parse) in _ENV.items():
        flag = flags.get(field)
        if flag is not None and flag != ():
            values[field] = flag
        elif environ.get(env):
            try:
                values[field] = parse(environ[env])
            except ValueError as exc:
                raise SettingsError(f"{env}={environ[env]!r} is invalid: {exc}") from exc
    # Port 0 disables an endpoint, interval 0 the refresh.
    for off in ("metrics_port", "health_port", "status_interval"):
        if values.get(off) == 0:
            values[off] = None
    return Settings(**values)  # type: ignore[arg-type]
