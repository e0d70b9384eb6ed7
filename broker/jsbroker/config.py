"""Broker configuration: frozen, grouped dataclasses, and config files mapped onto them.

Defaults follow nats-server 2.15.1 (`const.go`). A config file is nats-server's format (natsconf.py), or
TOML for files named *.toml; both go through one table per block of nats-server's settings (TOP_LEVEL,
...), each supported or refused with the reason, which also generates broker/README.md's settings table.
The CLI (`cli.py`) layers its flags over a loaded file; this module reads no argv, and the environment
only in `load_file` (for the format's `$NAME` references).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from . import natsconf
from .natsconf import Node
from .creds import CredsError, decorated_jwt
from .nkeys import NkeyError, is_public_key, user_public_key
from .subjects import is_subset, is_valid_subject, subjects_overlap

if TYPE_CHECKING:  # the JWT code (claims.py) is imported by operator mode's settings only: a plain start skips it
    from .claims import OperatorClaims

VERSION = "2.15.1"  # the nats-server version whose behaviour we follow; nats-py needs >= 2.9
MAX_PAYLOAD_LIMIT = 8 * 1024 * 1024
MIN_LAME_DUCK_DURATION = 30.0  # nats-server refuses a shorter lame_duck_duration


class ConfigError(ValueError):
    """A config file or flag value that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class AccountLimits:
    """One account's JetStream limits (nats-server's `accounts { A { jetstream {...} } }`); below 0 unlimited,
    and 0 too but for max_mem / max_file (0: no stream of that storage, as in nats-server). max_consumers
    applies to each stream, as in nats-server."""

    max_mem: int = -1
    max_file: int = -1
    max_streams: int = -1
    max_consumers: int = -1
    max_ack_pending: int = -1  # a consumer's max_ack_pending may not exceed it; the default is capped by it
    max_bytes_required: bool = False  # every stream must set max_bytes
    memory_max_stream_bytes: int = -1  # a memory / file stream's max_bytes may not exceed these
    store_max_stream_bytes: int = -1
    tier: str = ""  # "R1": these are that tier of tiered limits (an account JWT's `tiered_limits`), else ""


@dataclass(frozen=True)
class JetStreamSettings:
    store_dir: Path | None  # None: a fresh temporary directory, like nats-server
    sync_always: bool = False  # fsync every write (nats-server `sync: always`)
    sync_interval: float = 120.0  # seconds between background fsyncs
    domain: str | None = None
    max_memory: int = -1
    max_storage: int = -1
    account: AccountLimits = field(default_factory=AccountLimits)


@dataclass(frozen=True)
class SubjectRules:
    """Subjects (wildcards allowed) a user may publish or subscribe to, as nats-server's `allow`/`deny`.
    `allow` None allows everything not denied; an empty tuple allows nothing."""

    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()


@dataclass(frozen=True)
class Permissions:
    publish: SubjectRules | None = None
    subscribe: SubjectRules | None = None
    # allow_responses: replies to each received request the user may publish, and for how long (0: no limit)
    response_max: int = 0  # 0: off
    response_expires: float = 0.0


@dataclass(frozen=True)
class User:
    """A user with a password, or an nkey user (`nkey`: its public key, proven by a signed nonce)."""

    user: str
    password: str | None = None
    permissions: Permissions | None = None
    nkey: bytes | None = None  # the raw Ed25519 public key of an nkey user (`user` is then its "U..." form)
    account: str = "$G"  # the account the user is bound to (accounts.py)

    def __repr__(self) -> str:  # never the password
        return f"User(user={self.user!r}, permissions={self.permissions!r})"


GLOBAL_ACCOUNT = "$G"  # the account of users given outside `accounts` (and of everyone without accounts)
SYSTEM_ACCOUNT = "$SYS"  # nats-server's default system account
RESPONSE_TYPES = ("singleton", "stream", "chunked")


@dataclass(frozen=True)
class Export:
    """A subject an account offers to others: a service (requests in, replies back) or a stream."""

    subject: str
    service: bool
    accounts: tuple[str, ...] | None = None  # None: public; else the accounts that may import it
    response_type: str = "singleton"  # services: how many replies a request may get (RESPONSE_TYPES)
    response_threshold: float = 120.0  # services: how long replies beyond the first are awaited

    def allows(self, account: str, subject: str) -> bool:
        return (self.accounts is None or account in self.accounts) and is_subset(subject, self.subject)


@dataclass(frozen=True)
class Import:
    """Another account's export seen under a local subject: `local` is `subject` after `prefix`/`to`,
    with the same wildcards in the same order."""

    account: str  # the exporting account
    subject: str  # in the exporting account
    local: str  # in the importing account
    service: bool


@dataclass(frozen=True)
class AccountSettings:
    name: str
    exports: tuple[Export, ...] = ()
    imports: tuple[Import, ...] = ()
    jetstream: AccountLimits | None = None  # None: no JetStream for this account


@dataclass(frozen=True)
class CalloutSettings:
    """`authorization { auth_callout { ... } }`: users not in `auth_users` are authorized by a service answering
    `$SYS.REQ.USER.AUTH` in `account` with JWTs signed by `issuer` (auth_callout.py)."""

    issuer: str  # the account public key that signs the service's responses and the users in them
    auth_users: tuple[str, ...]  # users (names or nkeys) that bypass the callout: the service's own
    account: str = "$G"  # where requests are published
    xkey: str = ""  # the service's x25519 public key: requests are sealed to it ("": sent in the clear)
    allowed_accounts: tuple[str, ...] = ()  # only users bound to these are delegated (empty: all)


@dataclass(frozen=True)
class AuthSettings:
    token: str | None = None
    user: str | None = None
    password: str | None = None
    users: tuple[User, ...] = ()  # [[authorization.users]] and the accounts' users, each with its permissions
    timeout: float = 2.0  # seconds a client has to send CONNECT when auth is required
    operator: OperatorSettings | None = None  # operator mode: users are JWTs signed by the operator's accounts
    accounts: tuple[AccountSettings, ...] = ()  # `accounts { ... }`; $G is implied
    no_auth_user: str | None = None  # a client that gives no credentials is this user
    system_account: str | None = SYSTEM_ACCOUNT  # its services (system_account.py); None: no_system_account
    callout: CalloutSettings | None = None  # authorization.auth_callout

    @property
    def required(self) -> bool:
        return self.token is not None or self.user is not None or bool(self.users) or self.operator is not None

    @property
    def nkeys(self) -> bool:
        """Whether INFO must carry a nonce for nkey (and JWT) users to sign."""
        return any(u.nkey is not None for u in self.users) or self.operator is not None


@dataclass(frozen=True)
class OperatorSettings:
    """Operator mode (nats-server's `operator`, `system_account`, `resolver`, `resolver_preload`)."""

    operator: OperatorClaims
    system_account: str  # the config's, else the operator JWT's ("" if neither names one)
    resolver: str  # "MEMORY" or "full"
    preload: tuple[tuple[str, str], ...] = ()  # (account public key, its JWT), resolver_preload
    resolver_dir: Path | None = None  # the full resolver's directory
    allow_delete: bool = False  # the full resolver honours $SYS.REQ.CLAIMS.DELETE
    hard_delete: bool = False  # deleted JWT files are removed, not renamed *.deleted
    resolver_limit: int = 1000  # the most account JWTs the directory keeps


@dataclass(frozen=True)
class TlsSettings:
    """TLS on the client port (nats-server's `tls` block and --tls* flags)."""

    cert_file: Path
    key_file: Path
    ca_file: Path | None = None  # the CAs client certificates are checked against (default: the system's)
    verify: bool = False  # require a client certificate signed by ca_file (mTLS)
    timeout: float = 2.0  # seconds a client has for the TLS handshake (nats-server's default)
    reload_interval: float = 30.0  # seconds between checks of the files for a rotation (0: SIGHUP only)
    handshake_first: bool = False  # the client starts TLS before the server's INFO (nats-server 2.10+)
    handshake_first_fallback: float = 0.0  # > 0: INFO first after all when the client is silent this long


def parse_handshake_first(value: Any, where: str) -> tuple[bool, float]:
    """nats-server's `handshake_first`: true/false ("on"/"off"), "auto" (a 50ms fallback) or a fallback
    duration ("300ms"): (handshake_first, fallback seconds)."""
    if isinstance(value, bool):
        return value, 0.0
    if not isinstance(value, str):
        raise ConfigError(f"{where}: true, false, \"auto\" or a fallback duration such as \"300ms\"")
    word = value.lower()
    if word in ("true", "on", "false", "off"):
        return word in ("true", "on"), 0.0
    if word in ("auto", "auto_fallback"):
        return True, 0.05  # nats-server's DEFAULT_TLS_HANDSHAKE_FIRST_FALLBACK_DELAY
    try:
        return True, parse_duration(value, where)
    except ConfigError:
        raise ConfigError(f"{where}: {value!r} is invalid; give true, false, \"auto\" or a duration such as "
                          "\"300ms\"") from None


@dataclass(frozen=True)
class WebSocketSettings:
    """nats-server's `websocket` block: NATS over WebSocket on its own port (websocket.py)."""

    port: int  # 0 for any free port (nats-server's -1)
    host: str = "0.0.0.0"
    advertise: str | None = None  # shown in /varz; a single server has no connect URLs to advertise
    no_tls: bool = False
    tls: TlsSettings | None = None  # wss://; nats-server refuses a websocket port with neither tls nor no_tls
    same_origin: bool = False
    allowed_origins: tuple[str, ...] = ()
    compression: bool = False
    handshake_timeout: float = 0.0  # seconds for the upgrade request (with TLS: the handshake too); 0: none
    headers: tuple[tuple[str, str], ...] = ()  # added to the 101 response
    user_cookie: str | None = None  # cookies that stand in for CONNECT's user, pass and auth_token when absent
    pass_cookie: str | None = None
    token_cookie: str | None = None


_WS_REFUSED = {
    "authorization": "a websocket-only authorization block is not supported; the top-level authorization "
                     "applies to websocket clients too",
    "authentication": "a websocket-only authorization block is not supported; the top-level authorization "
                      "applies to websocket clients too",
    "no_auth_user": "a websocket-only no_auth_user is not supported; the top-level no_auth_user applies",
    "jwt_cookie": "user JWTs from a cookie are not supported yet; websocket clients send their JWT in CONNECT "
                  "(or use user_cookie/pass_cookie or token_cookie)",
    "ping_interval": "a websocket-only ping_interval is not supported; the top-level ping_interval applies",
}
_WS_ALIASES = {"net": "host", "compress": "compression", **{k: "allowed_origins" for k in (
    "allowed_origin", "allow_origins", "allow_origin", "origins", "origin")}}


def websocket_settings(section: Any, where: str, tls: Any = None) -> WebSocketSettings | None:
    """The `websocket` block (a mapping of nats-server's keys) as settings; None when it has no port (off).
    `tls` parses its tls block (the caller's TLS parser)."""
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: websocket must be a map of settings")
    kw: dict[str, Any] = {}
    for raw_key, value in section.items():
        key = _WS_ALIASES.get(raw_key.lower(), raw_key.lower())
        what = f"{where}: websocket.{raw_key}"
        if key in _WS_REFUSED:
            raise ConfigError(f"{what}: {_WS_REFUSED[key]}")
        if key == "listen":
            host, _, port = str(value).rpartition(":")
            kw["host"], kw["port"] = host.strip("[]") or "0.0.0.0", _ws_port(port, what)
        elif key == "port":
            kw["port"] = _ws_port(value, what)
        elif key in ("host", "advertise", "user_cookie", "pass_cookie", "token_cookie"):
            if not isinstance(value, str):
                raise ConfigError(f"{what}: a string")
            kw[key] = value
        elif key in ("no_tls", "same_origin", "compression"):
            if not isinstance(value, bool):
                raise ConfigError(f"{what}: true or false")
            kw[key] = value
        elif key == "tls":
            if tls is None:
                raise ConfigError(f"{what}: no TLS parser given")
            kw["tls"] = tls(value)
        elif key == "allowed_origins":
            kw[key] = _origins(value, what)
        elif key == "handshake_timeout":
            kw[key] = parse_duration(value, what)
        elif key == "headers":
            kw[key] = _ws_headers(value, what)
        else:
            raise ConfigError(f"{what}: unknown websocket setting; known: advertise, allowed_origins, compression, "
                              "handshake_timeout, headers, host, listen, no_tls, pass_cookie, port, same_origin, tls, "
                              "token_cookie, user_cookie")
    port = kw.pop("port", 0)
    if port is None:
        return None
    if kw.get("tls") is None and not kw.get("no_tls"):
        raise ConfigError(f"{where}: websocket requires TLS configuration: give websocket.tls (cert_file, key_file), "
                          "or no_tls: true for plain ws:// (never in production)")
    return WebSocketSettings(port=port, **kw)


def _ws_port(value: Any, what: str) -> int | None:
    """nats-server's websocket port: 0 is off (None), -1 any free port (0 here)."""
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{what}: {value!r} is not a port") from None
    if not -1 <= port <= 65535:
        raise ConfigError(f"{what}: {port} is not a TCP port (0-65535, or -1 for any free port)")
    return None if port == 0 else max(port, 0)


def _origins(value: Any, what: str) -> tuple[str, ...]:
    from urllib.parse import urlsplit

    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        raise ConfigError(f"{what}: a URL or a list of URLs (e.g. \"https://example.com\")")
    for origin in items:
        try:
            parts = urlsplit(origin)
            parts.port  # noqa: B018 (a port that is not a number raises here)
        except ValueError as exc:
            raise ConfigError(f"{what}: unable to parse allowed origin {origin!r}: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"{what}: unable to parse allowed origin {origin!r}: allowed origins must be absolute "
                              "URLs with http or https scheme and a host")
    return tuple(items)


def _ws_headers(value: Any, what: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{what}: a map of header names to string values")
    for name in value:
        lower = name.lower()
        if lower in ("host", "content-length", "connection", "upgrade", "nats-no-masking"):
            raise ConfigError(f"{what}: invalid header {name!r} not allowed")
        if lower.startswith("sec-websocket-"):
            raise ConfigError(f"{what}: invalid header {name!r}, \"Sec-WebSocket-\" prefix not allowed")
    return tuple(value.items())


@dataclass(frozen=True)
class BrokerConfig:
    host: str = "0.0.0.0"
    port: int = 4222
    http_host: str | None = None  # defaults to `host`
    http_port: int | None = None  # None: no monitoring listener; 0: any free port
    https_port: int | None = None  # monitoring over HTTPS instead, with the [tls] certificate (not with http_port)
    server_name: str | None = None
    client_advertise: str | None = None  # "host[:port]" INFO gives clients instead of the listen address
    max_payload: int = 1024 * 1024
    max_control_line: int = 4096
    max_pending: int = 64 * 1024 * 1024  # per-connection output limit before "slow consumer" close
    write_high_water: int = 1024 * 1024  # above this a subscriber's publishers are paused
    write_deadline: float = 10.0  # a connection backed up this long is a slow consumer (nats-server default)
    max_connections: int = 64 * 1024
    ping_interval: float = 120.0
    ping_max: int = 2
    auth: AuthSettings = field(default_factory=AuthSettings)
    tls: TlsSettings | None = None  # None: plain TCP
    websocket: WebSocketSettings | None = None  # None: no websocket port
    jetstream: JetStreamSettings | None = field(default_factory=lambda: JetStreamSettings(store_dir=None))
    log_level: str = "info"  # start-up banner and lifecycle; per-client events are debug
    log_file: Path | None = None
    log_format: str = "nats"  # nats-server's lines; "structured": key=value (logs.FORMATS)
    logtime: bool = True  # timestamps in the log lines (nats-server's -T)
    logtime_utc: bool = False
    ports_file_dir: Path | None = None  # <program>_<pid>.ports here: the URLs clients and monitors can use
    pid_file: Path | None = None  # the process id is written here (for `jsbroker --signal <cmd>=<file>`)
    lame_duck_duration: float = 120.0  # SIGUSR2: clients are closed over this long...
    lame_duck_grace_period: float = 10.0  # ...after telling them and waiting this long

    @classmethod
    def build(cls, **kw: Any) -> "BrokerConfig":
        """Flat keyword form for embedding: BrokerConfig fields plus `store_dir`, `jetstream` (bool),
        `token`, `user`, `password`, `sync_always`, `sync_interval`, `domain`. An embedded broker
        listens on loopback unless `host` is given (the CLI keeps nats-server's 0.0.0.0)."""
        kw.setdefault("host", "127.0.0.1")
        js_kw = {k: kw.pop(k) for k in ("sync_always", "sync_interval", "domain", "max_memory", "max_storage") if k in kw}
        store_dir = kw.pop("store_dir", None)
        js_on = kw.pop("jetstream", True)
        auth_kw = {k: kw.pop(k) for k in ("token", "user", "password") if k in kw}
        cfg = cls(**kw)
        if auth_kw:
            cfg = replace(cfg, auth=replace(cfg.auth, **auth_kw))
        if not js_on:
            return replace(cfg, jetstream=None)
        js = cfg.jetstream or JetStreamSettings(store_dir=None)
        return replace(cfg, jetstream=replace(js, store_dir=Path(store_dir) if store_dir else js.store_dir, **js_kw))

    def __post_init__(self) -> None:
        if not 0 < self.max_payload <= MAX_PAYLOAD_LIMIT:
            raise ConfigError(f"max_payload {self.max_payload} must be between 1 and {MAX_PAYLOAD_LIMIT} bytes")
        if self.max_payload > self.max_pending:
            raise ConfigError(f"max_payload ({self.max_payload}) cannot be higher than max_pending ({self.max_pending})")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port {self.port} is not a TCP port (0-65535)")
        if self.auth.token is not None and (self.auth.user is not None or self.auth.users):
            raise ConfigError("use either a token or user/password authorization, not both")
        if self.auth.user is not None and any(u.user == self.auth.user for u in self.auth.users):
            raise ConfigError(f"user {self.auth.user!r} is given both as authorization.user and in authorization.users")
        if (self.auth.user is None) != (self.auth.password is None):
            raise ConfigError("user and password must be given together")
        if self.lame_duck_duration < MIN_LAME_DUCK_DURATION:
            raise ConfigError(f"invalid lame_duck_duration of {self.lame_duck_duration:g}s, "
                              f"minimum is {MIN_LAME_DUCK_DURATION:g} seconds")
        if not 0 <= self.lame_duck_grace_period < self.lame_duck_duration:
            raise ConfigError(f"invalid lame_duck_grace_period of {self.lame_duck_grace_period:g}s: it needs to be "
                              f"positive and less than lame_duck_duration ({self.lame_duck_duration:g}s)")


_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ns|us|ms|s|m|h)?\s*$")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_SIZE = re.compile(r"^\s*([0-9]+)\s*([KMGT]?)(I?B?)\s*$", re.IGNORECASE)


def parse_duration(value: Any, what: str) -> float:
    """Seconds from a number or a Go-style string ("2m", "500ms")."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    m = _DURATION.match(str(value))
    if not m:
        raise ConfigError(f"{what}: {value!r} is not a duration; write seconds or e.g. \"500ms\", \"2m\"")
    return float(m.group(1)) * _DURATION_UNITS[m.group(2)]


def parse_size(value: Any, what: str) -> int:
    """Bytes from a number or a string ("64MB", "1GiB"); powers of 1024 like nats-server."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ConfigError(f"{what}: {value!r} is not a size; write bytes or e.g. \"64MB\"")
    return int(m.group(1)) << 10 * " KMGT".index(m.group(2).upper() or " ")  # n * 1024**k; int ** int is typed Any


# ---------------------------------------------------------------------------------------------------------
# Config files. nats-server's format (natsconf.py) is the main one; TOML (files named *.toml) stays for
# jsbroker's earlier config files. Both become Node trees and go through the same tables below, whose
# entries are nats-server's settings under its names (each supported, or refused with the reason) plus
# jsbroker's own extensions; the README's settings table is generated from them.

Acc = dict[str, Any]  # what the settings of one block set, by BrokerConfig (or block) field name
Apply = Callable[[Node, Acc, str], None]  # the setting's node, the block's fields, its name as written


@dataclass(frozen=True)
class Setting:
    names: tuple[str, ...]  # nats-server's spellings (the first is the documented one)
    apply: Apply | None  # None: nats-server has it, jsbroker refuses it (`note` says why and what to do)
    note: str
    jsbroker_only: bool = False  # jsbroker's own extension (nats-server refuses it)


_GO_DURATION = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(text: str) -> float | None:
    """Seconds from Go's time.ParseDuration syntax ("1h30m", "1.5s", "0"), or None."""
    sign, body = (-1.0, text[1:]) if text.startswith("-") else (1.0, text.lstrip("+"))
    if body == "0":
        return 0.0
    parts = _GO_DURATION.findall(body)
    if not body or "".join(n + u for n, u in parts) != body:
        return None
    return sign * sum(float(n) * _GO_UNITS[u] for n, u in parts)


def _where(node: Node) -> str:
    return node.where if node.line else node.file


def _fail(node: Node, message: str) -> ConfigError:
    return ConfigError(f"{_where(node)}: {message}")


def _int(node: Node, what: str) -> int:
    if not isinstance(node.value, int) or isinstance(node.value, bool):
        raise _fail(node, f"{what} must be a whole number, not {node.plain()!r}")
    return node.value


def _str(node: Node, what: str) -> str:
    if not isinstance(node.value, str):
        raise _fail(node, f"{what} must be a string, not {node.plain()!r}")
    return node.value


def _bool(node: Node, what: str) -> bool:
    if not isinstance(node.value, bool):
        raise _fail(node, f"{what} must be true or false, not {node.plain()!r}")
    return node.value


def _duration(node: Node, what: str) -> float:
    """nats-server: a Go duration string, or a number of seconds (which it warns about)."""
    if node.suffix:
        raise _fail(node, f"{what}: an unquoted {node.suffix} is a size suffix ({node.value:,} here), not a duration; "
                          f"quote it: \"2m\" is two minutes")
    if isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    seconds = parse_go_duration(node.value) if isinstance(node.value, str) else None
    if seconds is None:
        raise _fail(node, f"{what}: {node.plain()!r} is not a duration; write e.g. \"500ms\", \"30s\", \"2m\", "
                          "\"1h30m\" "
                          "(quoted: a bare 2m is the number 2,000,000)")
    return seconds


def _size(node: Node, what: str) -> int:
    """A byte count: an integer (the nats format has 1MB, 1GiB... as integers) or, in TOML, "64MB"."""
    if node.line == 0 and isinstance(node.value, str):
        return parse_size(node.value, f"{node.file}: {what}")
    return _int(node, what)


def _storage_size(node: Node, what: str) -> int:
    """nats-server's getStorageSize: an integer, or a string ending in K, M, G or T (powers of 1024)."""
    if isinstance(node.value, str) and node.line:
        m = re.fullmatch(r"(-?[0-9]+)([KMGT])", node.value)
        if not m:
            raise _fail(node, f"{what}: sizes written as strings must end in K, M, G or T (e.g. \"10G\"); "
                              "or write an integer such as 10GB")
        return int(m.group(1)) << 10 * "_KMGT".index(m.group(2))
    return _size(node, what)


def _nats_port(n: int, node: Node, unset: int | None) -> int | None:
    """nats-server's port numbers: -1 is a random free port (jsbroker's 0), 0 is "not set" (the client port's
    default 4222; no monitoring listener). jsbroker's TOML files keep their 0: a random port."""
    if n == -1:
        return 0
    return unset if n == 0 and node.line else n


def _client_port(node: Node, what: str) -> int | None:
    return _nats_port(_int(node, what), node, 4222)


def _monitor_port(node: Node, what: str) -> int | None:
    return _nats_port(_int(node, what), node, None)


def _listen(node: Node, what: str) -> tuple[str | None, int | None]:
    """nats-server's parseListen: a port, or "host:port" (IPv6 as "[::1]:4222"); the port as written."""
    if isinstance(node.value, int) and not isinstance(node.value, bool):
        return None, node.value
    text = _str(node, what)
    host, sep, port = text.rpartition(":")
    if node.line == 0 and not (sep and port.isdigit()):  # jsbroker's TOML files also took a host alone
        return text, None
    if not sep or not re.fullmatch(r"-?[0-9]+", port) or (":" in host and not host.startswith("[")):
        raise _fail(node, f"{what}: could not parse address string {text!r}; write a port or \"host:port\"")
    return host.strip("[]"), int(port)


def _block(node: Node, what: str) -> dict[str, Node]:
    if not isinstance(node.value, dict):
        raise _fail(node, f"{what} must be a block {{ ... }}, not {node.plain()!r}")
    return node.value


def _walk(block: dict[str, Node], table: tuple[Setting, ...], acc: Acc, prefix: str) -> None:
    """Apply each entry of a block through its table; refuse what jsbroker does not do, naming it."""
    by_name = {name: s for s in table for name in s.names}
    for key, node in block.items():
        setting = by_name.get(key.lower())
        name = prefix + key
        if setting is None:
            if node.used_as_variable:  # a variable only referenced elsewhere, as nats-server allows
                continue
            raise _fail(node, f"unknown setting {name!r}: neither nats-server nor jsbroker has it "
                              "(nats-server refuses it too); see the settings table in broker/README.md")
        if setting.apply is None:
            raise _fail(node, f"{name}: nats-server's setting is not supported by jsbroker: {setting.note}")
        setting.apply(node, acc, name)


def _set(field_name: str, convert: Callable[[Node, str], Any]) -> Apply:
    def apply(node: Node, acc: Acc, what: str) -> None:
        acc[field_name] = convert(node, what)
    return apply


def _refused(*names: str, why: str) -> Setting:
    return Setting(names, None, why)


# -- authorization { ... } ---------------------------------------------------------------------------------

def _secret(node: Node, what: str) -> str:
    return _str(node, what)  # nats-server refuses a number here too; a bcrypt hash is compared as one (passwords.py)


def _users(node: Node, acc: Acc, what: str) -> None:
    if not isinstance(node.value, list):
        raise _fail(node, f"{what} must be an array of users, not {node.plain()!r}")
    users = tuple(_user(entry, f"{what}[{i}]") for i, entry in enumerate(node.value))
    seen: set[str] = set()
    for user, entry in zip(users, node.value):
        if user.user in seen:
            raise _fail(entry, f"duplicate user {user.user!r} in {what}")
        seen.add(user.user)
    acc["users"] = users


def _user(entry: Node, what: str) -> User:
    acc: Acc = {}
    _walk(_block(entry, what), _USER, acc, what + ".")
    perms = acc.get("permissions")
    if "nkey" in acc:
        if "user" in acc or "password" in acc:
            raise _fail(entry, f"{what}: an nkey user has only nkey (its public key, 'U...') and permissions")
        try:
            public = user_public_key(acc["nkey"])
        except NkeyError as e:
            raise _fail(entry, f"{what}: {e}") from None
        return User(acc["nkey"], None, perms, public)
    if "user" not in acc:
        raise _fail(entry, f"{what}: user is required (or give nkey)")
    return User(acc["user"], acc.get("password", ""), perms)  # nats-server: no password is the empty one


def _permissions(node: Node, acc: Acc, what: str) -> None:
    perms: Acc = {}
    _walk(_block(node, what), _PERMISSIONS, perms, what + ".")
    publish, subscribe = perms.get("publish"), perms.get("subscribe")
    response_max, response_expires = perms.get("responses", (0, 0.0))
    if response_max and (publish is None or publish.allow is None):
        # nats-server: responses allowed means nothing else is, unless publish.allow says so
        publish = SubjectRules(allow=(), deny=publish.deny if publish else ())
    acc["permissions"] = Permissions(publish, subscribe, response_max, response_expires)


def _subjects(node: Node, what: str) -> tuple[str, ...]:
    items = [node] if isinstance(node.value, str) else node.value if isinstance(node.value, list) else None
    if items is None or not all(isinstance(i.value, str) and is_valid_subject(i.value) for i in items):
        raise _fail(node, f"{what}: a subject or an array of valid subjects (wildcards allowed; queue groups are "
                          "not supported)")
    return tuple(str(i.value) for i in items)


_ALLOW_DENY: tuple[Setting, ...] = (Setting(("allow",), _set("allow", _subjects), "allowed subjects"),
                                    Setting(("deny",), _set("deny", _subjects), "denied subjects"))


def _rules(field_name: str) -> Apply:
    def apply(node: Node, acc: Acc, what: str) -> None:
        if not isinstance(node.value, dict):
            acc[field_name] = SubjectRules(allow=_subjects(node, what))
            return
        rules: Acc = {}
        _walk(node.value, _ALLOW_DENY, rules, what + ".")
        acc[field_name] = SubjectRules(allow=rules.get("allow"), deny=rules.get("deny", ()))
    return apply


def _responses(node: Node, acc: Acc, what: str) -> None:
    if isinstance(node.value, bool):
        acc["responses"] = (1, 120.0) if node.value else (0, 0.0)  # nats-server's defaults
        return
    if not isinstance(node.value, dict):
        raise _fail(node, f"{what}: true, false, or a block with max and expires, not {node.plain()!r}")
    r: Acc = {}
    _walk(node.value, (
        Setting(("max", "max_msgs", "max_messages", "max_responses"), _set("max", _int), "replies per request"),
        Setting(("expires", "expiration", "ttl"), _set("expires", _duration), "how long a reply is allowed"),
    ), r, what + ".")
    acc["responses"] = (r.get("max", 1), r.get("expires", 120.0))


_PERMISSIONS: tuple[Setting, ...] = (
    Setting(("publish", "pub", "import"), _rules("publish"), "subjects the user may publish to (allow/deny)"),
    Setting(("subscribe", "sub", "export"), _rules("subscribe"), "subjects the user may subscribe to (allow/deny)"),
    Setting(("allow_responses", "publish_allow_responses"), _responses, "may answer requests it receives"),
)
_USER: tuple[Setting, ...] = (
    Setting(("user", "username"), _set("user", _str), "user name"),
    Setting(("password", "pass"), _set("password", _secret), "password (plain text, or a bcrypt hash)"),
    Setting(("nkey",), _set("nkey", _str), "an nkey user's public key"),
    Setting(("permissions", "permission", "authorization"), _permissions, "publish/subscribe permissions"),
    _refused("allowed_connection_types", "connection_types", "clients",
             why="jsbroker serves one connection type (NATS clients); remove it"),
    _refused("proxy_required", why="jsbroker has no trusted proxies; remove it"),
    _refused("account", why="give the user in its account's block instead: accounts { A: { users [...] } }"),
)
def _default_permissions(node: Node, acc: Acc, what: str) -> None:
    perms: Acc = {}
    _permissions(node, perms, what)
    acc["default_permissions"] = perms["permissions"]


def _with_defaults(acc: Acc) -> tuple[User, ...]:
    """The block's users, those without permissions given its default_permissions (as nats-server does)."""
    default = acc.pop("default_permissions", None)
    users = acc.get("users", ())
    return tuple(replace(u, permissions=default) if u.permissions is None else u for u in users) if default else users


def _strings(node: Node, what: str) -> tuple[str, ...]:
    if not isinstance(node.value, list):
        raise _fail(node, f"{what} must be an array of strings, not {node.plain()!r}")
    return tuple(_str(entry, f"{what}[{i}]") for i, entry in enumerate(node.value))


def _public_key_of(kind: str, message: str) -> Callable[[Node, str], str]:
    def convert(node: Node, what: str) -> str:
        text = _str(node, what)
        if not is_public_key(text, kind):
            raise _fail(node, message % json.dumps(text))
        return text
    return convert


_AUTH_CALLOUT: tuple[Setting, ...] = (
    Setting(("issuer",), _set("issuer", _public_key_of(
        "account", "Expected callout user to be a valid public account nkey, got %s")),
        "the account public key the service signs its responses and users with"),
    Setting(("account", "acc"), _set("account", _str), "the account requests are published in (default $G)"),
    Setting(("auth_users", "users"), _set("auth_users", _strings), "users that bypass the callout (the service's)"),
    Setting(("xkey", "key"), _set("xkey", _public_key_of("curve", "Expected callout xkey to be a valid public xkey, "
                                                                  "got %s")),
            "the service's x25519 public key: requests and responses are sealed"),
    Setting(("allowed_accounts",), _set("allowed_accounts", _strings),
            "only users bound to these accounts go to the service (default: all)"),
)


def _auth_callout(node: Node, acc: Acc, what: str) -> None:
    callout: Acc = {}
    _walk(_block(node, what), _AUTH_CALLOUT, callout, what + ".")
    if "issuer" not in callout:
        raise _fail(node, "Authorization callouts require an issuer to be specified")
    if not callout.get("auth_users"):
        raise _fail(node, "Authorization callouts require authorized users to be specified")
    acc["callout"] = (CalloutSettings(**callout), node)


_AUTHORIZATION: tuple[Setting, ...] = (
    Setting(("user", "username"), _set("user", _str), "the one user's name"),
    Setting(("password", "pass"), _set("password", _secret), "its password (plain text, or a bcrypt hash)"),
    Setting(("token",), _set("token", _secret), "a token instead (plain text, or a bcrypt hash)"),
    Setting(("timeout",), _set("timeout", _duration), "time allowed between connect and CONNECT (default 2s)"),
    Setting(("users",), _users, "several users, each with permissions, or nkey users"),
    Setting(("default_permissions", "default_permission"), _default_permissions,
            "permissions of the users in this block that give none"),
    _refused("permissions", why="give the permissions in each user (or default_permissions)"),
    Setting(("auth_callout", "auth_hook"), _auth_callout,
            "users authorized by a service on $SYS.REQ.USER.AUTH (config mode, xkey encryption included)"),
    _refused("proxy_required", why="jsbroker has no trusted proxies; remove it"),
)


def _authorization(node: Node, acc: Acc, what: str) -> None:
    auth: Acc = {}
    _walk(_block(node, what), _AUTHORIZATION, auth, what + ".")
    if "default_permissions" in auth and "users" not in auth:
        raise _fail(node, "authorization.default_permissions: jsbroker applies it to the users of a users array "
                          "only; give the permissions in users [...]")
    if "users" in auth:
        auth["users"] = _with_defaults(auth)
    if "token" in auth and ("user" in auth or "password" in auth):
        raise _fail(node, "authorization: cannot have a user/pass and token (nats-server refuses it too)")
    if "users" in auth and ("user" in auth or "token" in auth):
        raise _fail(node, "authorization: cannot have a single user/pass or a token together with a users array")
    acc["auth"] = auth


# -- operator mode: operator, system_account, resolver, resolver_preload ------------------------------------

def _operator(node: Node, acc: Acc, what: str) -> None:
    items = node.value if isinstance(node.value, list) else [node]
    if len(items) != 1:
        raise _fail(node, f"{what}: jsbroker trusts one operator; give one JWT or file")
    from .claims import JwtError, decode_operator

    text = _str(items[0], what)
    try:
        token = text if text.startswith("eyJ") else decorated_jwt(Path(text).read_text())
        acc["operator"] = decode_operator(token)
    except OSError as e:
        raise _fail(node, f"{what}: cannot read {text}: {e.strerror}") from None
    except (CredsError, JwtError) as e:
        raise _fail(node, f"{what}: {text[:40]} is not an operator JWT: {e}") from None


def _resolver(node: Node, acc: Acc, what: str) -> None:
    if isinstance(node.value, str):
        if node.value.upper() != "MEMORY":
            raise _fail(node, f"{what}: {node.value!r}: jsbroker has resolver MEMORY or a block {{ type: full, dir: "
                              "... }} (no URL resolver: use type full and nsc push)")
        acc["resolver"] = "MEMORY"
        return
    r: Acc = {}
    _walk(_block(node, what), _RESOLVER, r, what + ".")
    if r.get("type", "").lower() != "full":
        raise _fail(node, f"{what}: type {r.get('type')!r} is not supported; use type: full (or resolver: MEMORY)")
    if "dir" not in r:
        raise _fail(node, f"{what}: the full resolver needs dir, the directory of the account JWTs")
    if r.get("limit", 1) <= 0:
        raise _fail(node, f"{what}.limit must be positive (the most account JWTs the directory keeps)")
    acc.update(resolver="full", resolver_dir=r["dir"], allow_delete=r.get("allow_delete", False),
               resolver_limit=r.get("limit", 1000), hard_delete=r.get("hard_delete", False))


def _preload(node: Node, acc: Acc, what: str) -> None:
    from .claims import JwtError, decode_account

    preload = []
    for key, value in _block(node, what).items():
        if not is_public_key(key, "account"):
            raise _fail(value, f"{what}: {key!r} is not an account public key (A...)")
        try:
            claims = decode_account(_str(value, f"{what}.{key}"))
        except JwtError as e:
            raise _fail(value, f"{what}.{key}: not an account JWT: {e}") from None
        if claims.subject != key:
            raise _fail(value, f"{what}.{key}: the JWT is account {claims.subject}'s")
        preload.append((key, claims.token))
    acc["preload"] = tuple(preload)


_RESOLVER: tuple[Setting, ...] = (
    Setting(("type",), _set("type", _str), "full (MEMORY is `resolver: MEMORY`)"),
    Setting(("dir",), _set("dir", lambda n, w: Path(_str(n, w))), "where account JWTs are kept, one file each"),
    Setting(("allow_delete",), _set("allow_delete", _bool), "honour $SYS.REQ.CLAIMS.DELETE from the operator"),
    Setting(("hard_delete",), _set("hard_delete", _bool), "delete removes the file (default: renamed *.deleted)"),
    Setting(("limit",), _set("limit", _int), "the most account JWTs kept (default 1000)"),
    Setting(("interval", "timeout"), _set("sync", _duration),
            "syncing with other servers' resolvers (checked; a single server has none to sync with)"),
    _refused("ttl", why="ttl is the cache resolver's; jsbroker has the full resolver"),
)
OPERATOR_MODE: tuple[Setting, ...] = (
    Setting(("operator", "operators", "root", "roots", "root_operators", "root_operator"), _operator,
            "the operator JWT (inline or a file) whose accounts clients' user JWTs belong to"),
    Setting(("system_account", "system"), _set("system_account", _str),
            "the system account ($SYS.REQ... services and events): an account's name (default $SYS, made when "
            "not configured), in operator mode its public key"),
    Setting(("resolver", "account_resolver", "accounts_resolver"), _resolver,
            "MEMORY, or { type: full, dir: ..., allow_delete: ... }"),
    Setting(("resolver_preload",), _preload, "account JWTs by public key (the MEMORY resolver's accounts)"),
)


def operator_settings(mode: Acc, others: Acc) -> OperatorSettings | None:
    """OperatorSettings from the block's settings, checked as nats-server's validateTrustedOperators
    (`others`: the file's other settings)."""
    if "operator" not in mode:
        if set(mode) - {"system_account"}:
            raise ConfigError(f"{', '.join(sorted(mode))} given without operator: give the operator JWT too")
        return None
    op: OperatorClaims = mode["operator"]
    if "resolver" not in mode:
        raise ConfigError("operators require an account resolver to be configured")
    if (others.get("auth") or {}).get("users"):
        raise ConfigError("operators do not allow users to be configured directly")
    system = mode.get("system_account", "")
    if system and not is_public_key(system, "account"):
        raise ConfigError(f"system_account: {system!r} is not an account public key (A...), as operator mode needs")
    if system and op.system_account and system != op.system_account:
        raise ConfigError("system_account in config and operator JWT must be identical")
    system = system or op.system_account
    if mode["resolver"] == "full" and not system:
        raise ConfigError("using nats based account resolver - the system account needs to be specified in "
                          "configuration or the operator jwt")
    preload = mode.get("preload", ())
    full = {k: mode[k] for k in ("resolver_dir", "allow_delete", "hard_delete", "resolver_limit") if k in mode}
    return OperatorSettings(op, system, mode["resolver"], preload, **full)


def _operator_mode(apply: Apply) -> Apply:
    """A top-level operator-mode setting, gathered in acc["operator_mode"] for operator_settings()."""
    def gather(node: Node, acc: Acc, what: str) -> None:
        apply(node, acc.setdefault("operator_mode", {}), what)
    return gather



# -- accounts { A: { users, exports, imports, jetstream } } -----------------------------------------------

def _response_type(node: Node, acc: Acc, what: str) -> None:
    word = _str(node, what).lower()
    if word not in RESPONSE_TYPES:
        raise _fail(node, f'Unknown response type: "{node.value}" (use Singleton, Stream or Chunked)')
    acc["response_type"] = word


def _export_subject(service: bool) -> Apply:
    def apply(node: Node, acc: Acc, what: str) -> None:
        subject = _str(node, what)
        if not is_valid_subject(subject):
            raise _fail(node, f"{what}: {subject!r} is not a valid subject")
        acc["subject"], acc["service"] = subject, service
    return apply


def _names(node: Node, acc: Acc, what: str) -> None:
    items = node.value if isinstance(node.value, list) else None
    if items is None or not all(isinstance(i.value, str) for i in items):
        raise _fail(node, f"{what} must be an array of account names")
    acc["accounts"] = tuple((i.value, i) for i in items)


_EXPORT: tuple[Setting, ...] = (
    Setting(("stream",), _export_subject(False), "a stream export's subject (wildcards allowed)"),
    Setting(("service",), _export_subject(True), "a service export's subject (wildcards allowed)"),
    Setting(("accounts",), _names, "the accounts that may import it (default: every account)"),
    Setting(("response_type", "response"), _response_type, "services: Singleton (default), Stream or Chunked"),
    Setting(("response_threshold", "threshold"), _set("response_threshold", _duration),
            "services: how long replies after the first are awaited (default 2m)"),
    _refused("latency", "allow_trace", "account_token_position", "advertise",
             why="jsbroker has no service latency tracking, message tracing or JWT export tokens; remove it"),
)


def _import_source(service: bool) -> Apply:
    def apply(node: Node, acc: Acc, what: str) -> None:
        src: Acc = {}
        _walk(_block(node, what), (Setting(("account",), _set("account", _str), "exporting account"),
                                   Setting(("subject",), _set("subject", _str), "its subject")), src, what + ".")
        if "account" not in src or "subject" not in src:
            raise _fail(node, f"{what}: give both account and subject")
        if not is_valid_subject(src["subject"]):
            raise _fail(node, f"{what}.subject: {src['subject']!r} is not a valid subject")
        acc["source"], acc["service"], acc["source_node"] = src, service, node
    return apply


def _import_subject(field_name: str) -> Apply:
    def apply(node: Node, acc: Acc, what: str) -> None:
        subject = _str(node, what)
        if not is_valid_subject(subject):
            raise _fail(node, f"{what}: {subject!r} is not a valid subject")
        acc[field_name] = subject
    return apply


_IMPORT: tuple[Setting, ...] = (
    Setting(("stream",), _import_source(False), "{account, subject}: another account's stream"),
    Setting(("service",), _import_source(True), "{account, subject}: another account's service"),
    Setting(("prefix",), _import_subject("prefix"), "streams: the local subject is prefix.subject"),
    Setting(("to",), _import_subject("to"), "the local subject (same wildcards as the imported one)"),
    _refused("share", "allow_trace", why="jsbroker has no service latency tracking or message tracing; remove it"),
)


def _entries(node: Node, table: tuple[Setting, ...], what: str, kind: str) -> Iterator[tuple[Node, str, Acc]]:
    """Each entry of an exports or imports array with its settings (`kind`: "exports" or "imports")."""
    if not isinstance(node.value, list):
        raise _fail(node, f"{what} must be an array of {kind}")
    for i, entry in enumerate(node.value):
        settings: Acc = {}
        _walk(_block(entry, f"{what}[{i}]"), table, settings, f"{what}[{i}].")
        yield entry, f"{what}[{i}]", settings


def _exports(node: Node, acc: Acc, what: str) -> None:
    exports = []
    for entry, where, e in _entries(node, _EXPORT, what, "exports"):
        if "subject" not in e:
            raise _fail(entry, f"{where}: give stream or service")
        if not e["service"] and ("response_type" in e or "response_threshold" in e):
            raise _fail(entry, f"{where}: response_type and response_threshold are for service exports")
        exports.append(e)
    acc["exports"] = exports


def _imports(node: Node, acc: Acc, what: str) -> None:
    imports = []
    for entry, where, m in _entries(node, _IMPORT, what, "imports"):
        if "source" not in m:
            raise _fail(entry, f"{where}: give stream or service")
        if "prefix" in m and "to" in m:
            raise _fail(entry, "Stream import can not have a 'prefix' and a 'to' property")
        if "prefix" in m and m["service"]:
            raise _fail(entry, f"{where}: prefix is for stream imports; a service import takes to")
        subject = m["source"]["subject"]
        local = f"{m['prefix']}.{subject}" if "prefix" in m else m.get("to", subject)
        if "to" in m and _wildcards(local) != _wildcards(subject):
            raise _fail(entry, f"{where}: to {local!r} must have the wildcards of {subject!r}, in the same order")
        imports.append((Import(m["source"]["account"], subject, local, m["service"]), m["source_node"]))
    acc["imports"] = imports


def _leads_back(accounts: list[AccountSettings], origin: tuple[str, Import], at: Import,
                seen: set[tuple[str, Import]]) -> bool:
    """Whether following the import `at` into its exporter, then that account's imports of the same kind whose
    local subject overlaps what it imports, and so on, comes back to the import `origin` (nats-server:
    "import forms a cycle")."""
    exporter = next(a for a in accounts if a.name == at.account)
    for nxt in exporter.imports:
        if nxt.service != at.service or not subjects_overlap(nxt.local, at.subject):
            continue
        if (exporter.name, nxt) == origin:
            return True
        if (exporter.name, nxt) not in seen:
            seen.add((exporter.name, nxt))
            if _leads_back(accounts, origin, nxt, seen):
                return True
    return False


def _wildcards(subject: str) -> list[str]:
    return [t for t in subject.split(".") if t in ("*", ">")]


def _account_jetstream(node: Node, acc: Acc, what: str) -> None:
    if isinstance(node.value, (bool, str)):
        word = str(node.value).lower()
        if word not in ("true", "false", "enabled", "enable", "disabled", "disable"):
            raise _fail(node, f"{what}: expected 'enabled', 'disabled' or a block of limits, got {node.value!r}")
        acc["jetstream"] = AccountLimits() if word in ("true", "enabled", "enable") else None
        return
    _account(node, acc, what)
    acc["jetstream"] = acc.pop("account")


_ACCOUNT_BLOCK: tuple[Setting, ...] = (
    Setting(("users",), _users, "the account's users (user/password or nkey, with permissions)"),
    Setting(("exports",), _exports, "subjects other accounts may import: [{stream|service, accounts, ...}]"),
    Setting(("imports",), _imports, "other accounts' exports: [{stream|service: {account, subject}, prefix|to}]"),
    Setting(("jetstream",), _account_jetstream, "enabled/disabled, or the account's JetStream limits"),
    _refused("nkey", why="an account's public key belongs to operator mode, where accounts come from the "
                         "resolver; remove it"),
    _refused("mappings", "maps", why="no subject mappings: publish to the subjects themselves"),
    Setting(("default_permissions", "default_permission"), _default_permissions,
            "permissions of the account's users that give none"),
    _refused("limits", why="no per-account connection/subscription limits; remove it"),
    _refused("msg_trace", "trace_dest", why="no message tracing; remove it"),
)


def _accounts(node: Node, acc: Acc, what: str) -> None:
    """Every account's settings and users; imports checked against the exports, as nats-server does."""
    parsed: dict[str, Acc] = {}
    for name, entry in _block(node, what).items():
        if name in (GLOBAL_ACCOUNT,):
            raise _fail(entry, f"{what}.{name}: {GLOBAL_ACCOUNT} is the global account; give its users in "
                               "authorization { users: [...] }")
        a: Acc = {}
        _walk(_block(entry, f"{what}.{name}"), _ACCOUNT_BLOCK, a, f"{what}.{name}.")
        parsed[name] = a
    accounts, users = [], []
    for name, a in parsed.items():
        exports = []
        for e in a.get("exports", []):
            for other, other_node in e.get("accounts", ()):
                if other not in parsed:
                    kind = "service" if e["service"] else "stream"
                    raise _fail(node, f'"{other}" account not defined for {kind} export')
            names = tuple(n for n, _ in e["accounts"]) if "accounts" in e else None
            exports.append(Export(e["subject"], e["service"], names, e.get("response_type", "singleton"),
                                  e.get("response_threshold", 120.0)))
        parsed[name]["exports_done"] = tuple(exports)
    for name, a in parsed.items():
        imports = []
        for imp, imp_node in a.get("imports", []):
            kind = "service" if imp.service else "stream"
            if imp.account not in parsed:
                raise _fail(node, f'"{imp.account}" account not defined for {kind} import')
            if not any(e.service == imp.service and e.allows(name, imp.subject)
                       for e in parsed[imp.account]["exports_done"]):
                raise _fail(node, f'Error adding {kind} import "{imp.subject}": {kind} import not authorized '
                                  f"(account {imp.account} exports no {kind} covering it to {name})")
            imports.append(imp)
        accounts.append(AccountSettings(name, a["exports_done"], tuple(imports), a.get("jetstream")))
        users += [replace(u, account=name) for u in _with_defaults(a)]
    for account in accounts:
        for imp in account.imports:
            if _leads_back(accounts, (account.name, imp), imp, set()):
                kind = "service" if imp.service else "stream"
                raise _fail(node, f'Error adding {kind} import "{imp.subject}": import forms a cycle')
    acc["accounts"] = tuple(accounts)
    acc["account_users"] = (tuple(users), node)

# -- tls { ... } -------------------------------------------------------------------------------------------

def _handshake_first(node: Node, acc: Acc, what: str) -> None:
    try:
        acc["handshake_first"], acc["handshake_first_fallback"] = parse_handshake_first(node.value, what)
    except ConfigError as e:
        raise _fail(node, str(e)) from None


_TLS: tuple[Setting, ...] = (
    Setting(("cert_file",), _set("cert_file", lambda n, w: Path(_str(n, w))), "server certificate (PEM)"),
    Setting(("key_file",), _set("key_file", lambda n, w: Path(_str(n, w))), "its private key (PEM)"),
    Setting(("ca_file",), _set("ca_file", lambda n, w: Path(_str(n, w))),
            "CAs client certificates are checked against"),
    Setting(("verify",), _set("verify", _bool), "require client certificates (mTLS)"),
    Setting(("timeout",), _set("timeout", _duration), "time allowed for the handshake (default 2s)"),
    Setting(("reload_interval",), _set("reload_interval", _duration),
            "how often the files are checked for a rotation (default 30s; 0: SIGHUP only)", jsbroker_only=True),
    Setting(("handshake_first", "first", "immediate"), _handshake_first,
            "TLS before INFO: true, or \"300ms\" / \"auto\" (INFO after that long if the client says nothing)"),
    _refused("insecure", "verify_and_map", "verify_cert_and_check_known_urls", "allow_insecure_cipher_suites",
             "cipher_suites", "curve_preferences", "connection_rate_limit", "pinned_certs", "cert_store",
             "cert_match_by", "cert_match", "ca_certs_match", "cert_match_skip_invalid", "ocsp_peer", "certs",
             "certificates", "min_version",
             why="jsbroker's TLS takes cert_file, key_file, ca_file, verify and timeout (TLS 1.2 minimum)"),
)


def _tls(node: Node, acc: Acc, what: str) -> None:
    tls: Acc = {}
    _walk(_block(node, what), _TLS, tls, what + ".")
    missing = [k for k in ("cert_file", "key_file") if k not in tls]
    if missing:
        raise _fail(node, f"tls needs {' and '.join(missing)} (the server certificate and its key)")
    acc["tls"] = TlsSettings(**tls)


def _websocket(node: Node, acc: Acc, what: str) -> None:
    """The websocket block's settings are websocket_settings()'s; its tls block goes through the tls table."""
    block = _block(node, what)

    def tls(_: Any) -> TlsSettings:
        parsed: Acc = {}
        _tls(next(v for k, v in block.items() if k.lower() == "tls"), parsed, what + ".tls")
        return parsed["tls"]

    acc["websocket"] = websocket_settings({k: v.plain() for k, v in block.items()}, _where(node), tls)


# -- jetstream { ... } -------------------------------------------------------------------------------------

def _sync(node: Node, acc: Acc, what: str) -> None:
    if isinstance(node.value, str) and node.value.lower() == "always":
        acc["sync_always"] = True
    else:
        acc["sync_interval"] = _duration(node, "jetstream.sync_interval")


def _store_dir(node: Node, acc: Acc, what: str) -> None:
    if "store_dir" in acc:
        raise _fail(node, "duplicate 'store_dir' configuration (give it at the top level or in jetstream, once)")
    acc["store_dir"] = Path(_str(node, "store_dir"))


def _strict(node: Node, acc: Acc, what: str) -> None:
    if not _bool(node, "jetstream.strict"):
        raise _fail(node, "jetstream.strict: false is not supported: jsbroker's JetStream API is always strict")


_ACCOUNT_STORAGE = ("max_mem", "max_file")
_ACCOUNT_SIZES = ("memory_max_stream_bytes", "store_max_stream_bytes")
_ACCOUNT_COUNTS = ("max_streams", "max_consumers", "max_ack_pending")
_ACCOUNT: tuple[Setting, ...] = (
    *(Setting((k,), _set(k, _size), "bytes the account's streams reserve and use, below 0: unlimited, 0: no stream "
              "of this storage") for k in _ACCOUNT_STORAGE),
    *(Setting((k,), _set(k, _size), "bytes, -1: unlimited") for k in _ACCOUNT_SIZES),
    *(Setting((k,), _set(k, _int), "0 or below: unlimited") for k in _ACCOUNT_COUNTS),
    Setting(("max_bytes_required", "max_stream_bytes"), _set("max_bytes_required", _bool),
            "every stream must set max_bytes"),
)


def _account(node: Node, acc: Acc, what: str) -> None:
    limits: Acc = {}
    _walk(_block(node, what), _ACCOUNT, limits, what + ".")
    acc["account"] = AccountLimits(**limits)


_JETSTREAM: tuple[Setting, ...] = (
    Setting(("store_dir", "store", "storedir"), _store_dir, "storage directory (default: a temporary one)"),
    Setting(("sync_interval", "sync"), _sync, "background fsync interval (default 2m), or `always`"),
    Setting(("max_memory_store", "max_mem_store", "max_mem"), _set("max_memory", _storage_size),
            "memory storage limit"),
    Setting(("max_file_store", "max_file"), _set("max_storage", _storage_size), "file storage limit"),
    Setting(("max_memory",), _set("max_memory", _storage_size), "max_memory_store's name in jsbroker's TOML files",
            jsbroker_only=True),
    Setting(("max_storage",), _set("max_storage", _storage_size), "max_file_store's name in jsbroker's TOML files",
            jsbroker_only=True),
    Setting(("domain",), _set("domain", _str), "JetStream domain"),
    Setting(("enabled", "enable"), _set("enabled", _bool), "false: JetStream off"),
    Setting(("strict",), _strict, "true only (jsbroker's API is always strict)"),
    Setting(("account",), _account, "the global account's JetStream limits, without accounts (nats-server: "
            "accounts { A { jetstream {...} } })", jsbroker_only=True),
    _refused("key", "ek", "encryption_key", "prev_key", "prev_ek", "prev_encryption_key", "cipher",
             why="no encryption at rest: encrypt the volume instead"),
    _refused("tpm", why="no encryption at rest: encrypt the volume instead"),
    _refused("limits", "max_outstanding_catchup", "max_buffered_size", "max_buffered_msgs", "request_queue_limit",
             "info_queue_limit", "max_concurrent_io", why="jsbroker has no such internal limit; remove it"),
    _refused("unique_tag", "meta_compact", "meta_compact_size", "meta_compact_sync", "extension_hint",
             why="clustered JetStream only; jsbroker is a single server"),
)


def _jetstream(node: Node, acc: Acc, what: str) -> None:
    if isinstance(node.value, bool):
        acc["jetstream_on"] = node.value
        return
    if isinstance(node.value, str):
        word = node.value.lower()
        if word not in ("enabled", "enable", "disabled", "disable"):
            raise _fail(node, f"{what}: expected 'enabled' or 'disabled', got {node.value!r}")
        acc["jetstream_on"] = word.startswith("enable")
        return
    js: Acc = {"store_dir": acc["js"]["store_dir"]} if "store_dir" in acc.get("js", {}) else {}
    _walk(_block(node, what), _JETSTREAM, js, what + ".")
    acc["jetstream_on"] = js.pop("enabled", True)
    acc["js"] = js


def _top_store_dir(node: Node, acc: Acc, what: str) -> None:
    _store_dir(node, acc.setdefault("js", {}), what)


# -- the top level -----------------------------------------------------------------------------------------

def _listen_into(host_field: str, port_field: str, unset: int | None) -> Apply:
    def apply(node: Node, acc: Acc, what: str) -> None:
        host, port = _listen(node, what)
        if host:
            acc[host_field] = host
        if port is not None:
            acc[port_field] = _nats_port(port, node, unset)
    return apply


def _max_connections(node: Node, acc: Acc, what: str) -> None:
    n = _int(node, "max_connections")
    if n <= 0:
        raise _fail(node, "max_connections: jsbroker needs a positive limit (nats-server reads 0 as unlimited); "
                          "write a number such as 65536")
    acc["max_connections"] = n


def _int31(field_name: str) -> Apply:
    def apply(node: Node, acc: Acc, what: str) -> None:
        n = _size(node, what)
        if n > (1 << 31) - 1:
            raise _fail(node, f"{what} value is too big")
        acc[field_name] = n
    return apply


def _server_name(node: Node, acc: Acc, what: str) -> None:
    name = _str(node, "server_name")
    if " " in name:
        raise _fail(node, "server_name: server name cannot contain spaces")
    acc["server_name"] = name


def _lame_duck(field_name: str) -> Apply:
    def apply(node: Node, acc: Acc, what: str) -> None:
        if node.line and not isinstance(node.value, str):  # nats-server takes only a duration string here
            raise _fail(node, f"{what} must be a duration string such as \"2m\"")
        acc[field_name] = _duration(node, what)
    return apply


_CLUSTER = "jsbroker is a single server: run nats-server for clusters, superclusters and leaf nodes"
_ACCOUNTS = ("jsbroker has no subject mappings, trusted keys, pinned accounts or resolver TLS: remove it "
             "(accounts { A: { users: [...] } } and operator mode are supported)")
_LOGGING = "jsbroker logs to stderr or log_file, without rotation or syslog: rotate with your log shipper"

TOP_LEVEL: tuple[Setting, ...] = (
    Setting(("listen",), _listen_into("host", "port", 4222), "client address, \"host:port\" or a port (-1: random)"),
    Setting(("port",), _set("port", _client_port), "client port (default and 0: 4222; -1: random)"),
    Setting(("host", "net"), _set("host", _str), "client listen address (default 0.0.0.0)"),
    Setting(("server_name",), _server_name, "server name (default: the server id)"),
    Setting(("http",), _listen_into("http_host", "http_port", None), "monitoring address, \"host:port\" or a port"),
    Setting(("https",), _listen_into("http_host", "https_port", None),
            "monitoring over HTTPS, with the tls certificate"),
    Setting(("http_port", "monitor_port"), _set("http_port", _monitor_port), "monitoring port (-1: random; 0: none)"),
    Setting(("https_port",), _set("https_port", _monitor_port), "monitoring port over HTTPS"),
    Setting(("http_host",), _set("http_host", _str), "monitoring listen address (default: host)",
            jsbroker_only=True),
    Setting(("max_payload",), _int31("max_payload"), "largest message payload (default 1MB, at most 8MB)"),
    Setting(("max_pending",), _set("max_pending", _size), "per-client output limit (default 64MB)"),
    Setting(("max_control_line",), _int31("max_control_line"), "longest protocol line (default 4KB)"),
    Setting(("max_connections", "max_conn"), _max_connections, "most client connections (default 65536)"),
    Setting(("ping_interval",), _set("ping_interval", _duration), "server PING interval (default 2m)"),
    Setting(("ping_max",), _set("ping_max", _int), "unanswered PINGs before closing (default 2)"),
    Setting(("write_deadline",), _set("write_deadline", _duration), "slow consumer deadline (default 10s)"),
    Setting(("authorization",), _authorization, "user/password, token, users with permissions, nkey users"),
    Setting(("tls",), _tls, "TLS on the client port"),
    Setting(("jetstream",), _jetstream, "JetStream: true/false, enabled/disabled, or a block (off when absent)"),
    Setting(("store_dir", "storedir"), _top_store_dir, "JetStream storage directory"),
    Setting(("debug",), _set("debug", _bool), "debug logging"),
    Setting(("trace",), _set("trace", _bool), "trace logging"),
    Setting(("logtime",), _set("logtime", _bool), "log lines carry the time (default true)"),
    Setting(("logtime_utc",), _set("logtime_utc", _bool), "log times in UTC (default false: local time)"),
    Setting(("log_file", "logfile"), _set("log_file", lambda n, w: Path(_str(n, w))), "log to this file"),
    Setting(("log_level",), _set("log_level", _str), "trace, debug, info, warning or error", jsbroker_only=True),
    Setting(("pid_file", "pidfile"), _set("pid_file", lambda n, w: Path(_str(n, w))), "write the process id here"),
    Setting(("lame_duck_duration",), _lame_duck("lame_duck_duration"), "lame duck mode's length (default 2m)"),
    Setting(("lame_duck_grace_period",), _lame_duck("lame_duck_grace_period"), "wait before closing (default 10s)"),
    Setting(("websocket", "ws"), _websocket, "NATS over WebSocket on its own port (port, host, no_tls, tls, "
            "compression, same_origin, allowed_origins, handshake_timeout, headers, advertise, *_cookie)"),
    _refused("cluster", "gateway", "leaf", "leafnodes", "client_advertise", "connect_error_reports",
             "reconnect_error_reports", why=_CLUSTER),
    *(Setting(s.names, _operator_mode(s.apply), s.note) for s in OPERATOR_MODE if s.apply),
    Setting(("accounts",), _accounts, "accounts, each with users, exports, imports and jetstream"),
    Setting(("no_auth_user",), _set("no_auth_user", _str), "the user a client without credentials is"),
    _refused("mappings", "maps", "default_sentinel", "resolver_tls", "resolver_pinned_accounts", "trusted",
             "trusted_keys", "default_js_domain", why=_ACCOUNTS),
    Setting(("no_system_account", "no_system", "no_sys_acc"), _set("no_system_account", _bool),
            "no system account: no $SYS.REQ... services, no events"),
    _refused("mqtt", why="MQTT is not supported: use NATS clients"),
    _refused("trace_verbose", "trace_headers", why="use trace: true"),
    _refused("syslog", "remote_syslog", "logfile_size_limit", "log_size_limit", "logfile_max_num",
             "log_max_num", why=_LOGGING),
    Setting(("ports_file_dir",), _set("ports_file_dir", lambda n, w: Path(_str(n, w))),
            "write <program>_<pid>.ports (the listeners' URLs) in this directory"),
    _refused("http_base_path", why="the monitoring endpoints are served at the root: put a proxy in front"),
    _refused("prof_port", "prof_block_rate", why="Go profiling: profile jsbroker with py-spy instead"),
    _refused("ocsp", "ocsp_cache", "allow_non_tls", why="jsbroker's TLS has no OCSP stapling and no mixed mode"),
    _refused("proxy_protocol", "proxies", why="no PROXY protocol or trusted proxies: connect clients directly"),
    _refused("max_subscriptions", "max_subs", "max_sub_tokens", "max_subscription_tokens", "max_traced_msg_len",
             "max_closed_clients", "no_header_support", "disable_sublist_cache", "no_sublist_cache",
             "no_fast_producer_stall", "write_timeout",
             why="jsbroker has no such option (its behaviour is nats-server's default); remove it"),
    _refused("server_tags", "server_metadata", "feature_flags", why="not supported: remove it"),
)


def _to_nodes(value: Any, file: str) -> Node:
    """A TOML value as a Node without a position (TOML's parser gives none)."""
    if isinstance(value, dict):
        return Node({k: _to_nodes(v, file) for k, v in value.items()}, file, 0, 0)
    if isinstance(value, list):
        return Node([_to_nodes(v, file) for v in value], file, 0, 0)
    return Node(value, file, 0, 0)


def read_config(path: Path, env: Mapping[str, str]) -> tuple[dict[str, Node], bool]:
    """The settings of a config file as Nodes, and whether it is nats-server's format (not TOML)."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as e:
        raise ConfigError(f"config file {path} cannot be read: {e.strerror}") from None
    if path.suffix == ".toml":
        import tomllib  # only for TOML files: not every start pays for the parser

        try:
            return _to_nodes(tomllib.loads(text), str(path)).value, False  # type: ignore[return-value]
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {path} is not valid TOML: {e}") from None
    try:
        return natsconf.parse(text, str(path), lambda p: Path(p).read_text(), env), True
    except natsconf.ConfSyntaxError as e:
        raise ConfigError(str(e)) from None


def load_file(path: Path, base: BrokerConfig | None = None, env: Mapping[str, str] | None = None) -> BrokerConfig:
    """Read a config file over `base`: nats-server's format (natsconf.py; JSON is a subset of it), or TOML
    for a file named *.toml. `env` (default: this process's environment) resolves `$NAME` references."""
    import os  # the environment is read here, at the edge, and only for a config file

    settings, nats_format = read_config(path, os.environ if env is None else env)
    return apply_settings(settings, base or BrokerConfig(), nats_format, str(path))


def apply_settings(settings: dict[str, Node], base: BrokerConfig, nats_format: bool, source: str) -> BrokerConfig:
    """BrokerConfig from a file's settings. In nats-server's format JetStream is off unless the file turns
    it on, as in nats-server; TOML files keep jsbroker's earlier default (on)."""
    acc: Acc = {}
    _walk(settings, TOP_LEVEL, acc, "")
    trace, debug = acc.pop("trace", False), acc.pop("debug", False)
    if (trace or debug) and "log_level" not in acc:
        acc["log_level"] = "trace" if trace else "debug"
    mode = acc.pop("operator_mode", {})
    try:
        operator = operator_settings(mode, acc)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    system = operator.system_account or None if operator else mode.get("system_account", SYSTEM_ACCOUNT)
    if acc.pop("no_system_account", False):
        system = None
    if operator is not None:
        if acc.get("accounts"):
            raise ConfigError(f"{source}: operators do not allow Accounts to be configured directly")
        acc["auth"] = {**acc.get("auth", {}), "operator": operator}
        if "account" in acc.get("js", {}):
            raise ConfigError(f"{source}: jetstream.account gives the global account's JetStream limits, and in "
                              "operator mode each account's come from its account JWT: remove it")
    js_on = acc.pop("jetstream_on", False if nats_format else None)  # None: as in `base`
    js_kw = acc.pop("js", {})
    try:  # BrokerConfig's own checks (max_payload <= max_pending, ...) name the file too
        auth = _merge_accounts(acc.pop("auth", None), acc, js_kw)
        if auth is not None and "callout" in auth:
            callout, node = auth["callout"]
            auth["callout"] = _checked_callout(callout, node, auth)
        cfg = replace(base, **acc)
        if auth is not None:
            cfg = replace(cfg, auth=replace(cfg.auth, **auth))
        cfg = replace(cfg, auth=replace(cfg.auth, system_account=_system_account(system, cfg.auth)))
        if js_on is False:
            return replace(cfg, jetstream=None)
        if js_on or js_kw:
            cfg = replace(cfg, jetstream=replace(cfg.jetstream or JetStreamSettings(store_dir=None), **js_kw))
        return cfg
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


def _system_account(name: str | None, auth: AuthSettings) -> str | None:
    """The system account named in the config must be one of its accounts; $SYS (the default) is made when it
    is not (nats-server: an account without users, which nobody can log in to)."""
    if name is None or name == SYSTEM_ACCOUNT or auth.operator is not None:
        return name
    if name == GLOBAL_ACCOUNT or name not in (a.name for a in auth.accounts):
        raise ConfigError(f"error resolving system account: account missing: system_account {name!r} is not "
                          f"in accounts {{...}}; define it there, or leave system_account out for {SYSTEM_ACCOUNT}")
    return name


def _merge_accounts(auth: Acc | None, acc: Acc, js_kw: Acc) -> Acc | None:
    """The accounts' users join authorization's (bound to $G), checked as nats-server checks them (each
    account's JetStream limits are applied at start: server.py)."""
    accounts = acc.pop("accounts", ())
    if accounts and "account" in js_kw:
        raise ConfigError("jetstream.account gives the global account's JetStream limits: with accounts, give each "
                          "account's in its accounts { A: { jetstream {...} } } block")
    account_users, node = acc.pop("account_users", ((), None))
    no_auth_user = acc.pop("no_auth_user", None)
    if not accounts and no_auth_user is None:
        return auth
    auth = dict(auth or {})
    if account_users and "token" in auth:
        raise ConfigError(f"{_where(node)}: Can not have a token and a users array")
    if account_users and "user" in auth:
        raise ConfigError(f"{_where(node)}: Can not have a single user/pass and a users array")
    users = (*auth.get("users", ()), *account_users)
    seen: set[str] = set()
    for u in users:
        if u.user in seen:
            raise ConfigError(f'{_where(node)}: Duplicate user "{u.user}" detected')
        seen.add(u.user)
    if no_auth_user is not None and no_auth_user not in seen:
        raise ConfigError(f'no_auth_user: "{no_auth_user}" not present as user or nkey in authorization block or '
                          "account configuration")
    auth.update(users=users, accounts=accounts, no_auth_user=no_auth_user)
    return auth


def _checked_callout(callout: CalloutSettings, node: Node, auth: Acc) -> CalloutSettings:
    """What nats-server logs as errors at start (and then fails every callout for) refused here, by name."""
    if "operator" in auth:
        raise _fail(node, "authorization.auth_callout is config mode's; in operator mode the account JWT's "
                          "`authorization` sets up a callout, which jsbroker does not do yet: remove auth_callout")
    accounts = {GLOBAL_ACCOUNT, *(a.name for a in auth.get("accounts", ()))}
    if callout.account not in accounts:
        raise _fail(node, f"Authorization callout account {json.dumps(callout.account)} not valid: "
                          "name an account of the accounts block")
    users = {u.user for u in auth.get("users", ())} | ({auth["user"]} if "user" in auth else set())
    for name in callout.auth_users:
        if name not in users:
            raise _fail(node, f"Authorization callout user {json.dumps(name)} not valid: give it in a users array "
                              "(it is the callout service's own user)")
    for name in callout.allowed_accounts:
        if name not in accounts - {GLOBAL_ACCOUNT}:
            raise _fail(node, f"auth_callout allowed account {json.dumps(name)} not found in configured accounts")
    return callout


# Every block's table by its path in a file ("" is the top level): the README's settings table is made
# from it (tests/broker/settings_table.py).
BLOCKS: dict[str, tuple[Setting, ...]] = {
    "": TOP_LEVEL, "authorization.": _AUTHORIZATION, "authorization.users[].": _USER,
    "authorization.users[].permissions.": _PERMISSIONS, "authorization.auth_callout.": _AUTH_CALLOUT, "tls.": _TLS, "jetstream.": _JETSTREAM,
    "jetstream.account.": _ACCOUNT, "resolver.": _RESOLVER, "accounts.<name>.": _ACCOUNT_BLOCK,
    "accounts.<name>.exports[].": _EXPORT, "accounts.<name>.imports[].": _IMPORT,
}


__all__ = [
    "VERSION", "GLOBAL_ACCOUNT", "SYSTEM_ACCOUNT", "AccountLimits", "AccountSettings", "Export", "Import",
    "AuthSettings", "BrokerConfig", "CalloutSettings", "ConfigError", "JetStreamSettings", "OperatorSettings", "Permissions",
    "BLOCKS", "Setting", "SubjectRules", "TOP_LEVEL", "TlsSettings", "User",
    "apply_settings", "load_file", "parse_duration", "parse_go_duration", "parse_size", "read_config",
]
