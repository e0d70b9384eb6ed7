"""Broker configuration: frozen, grouped dataclasses plus the TOML config-file loader.

Defaults follow nats-server 2.15.1 (`const.go`). Durations in the config file may be numbers (seconds)
or strings such as "500ms", "2m", "1h"; sizes may be numbers (bytes) or strings such as "64MB", "1GiB".
The CLI (`cli.py`) layers its flags over a loaded file; this module never reads argv or the environment.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .nkeys import NkeyError, user_public_key
from .subjects import is_valid_subject

VERSION = "2.15.1"  # the nats-server version whose behaviour we follow; nats-py needs >= 2.9
MAX_PAYLOAD_LIMIT = 8 * 1024 * 1024
MIN_LAME_DUCK_DURATION = 30.0  # nats-server refuses a shorter lame_duck_duration


class ConfigError(ValueError):
    """A config file or flag value that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class AccountLimits:
    """JetStream limits of the account all users share (nats-server's `accounts { A { jetstream {...} } }`);
    0 or -1: unlimited. max_consumers applies to each stream, as in nats-server."""

    max_mem: int = -1
    max_file: int = -1
    max_streams: int = -1
    max_consumers: int = -1
    max_ack_pending: int = -1  # a consumer's max_ack_pending may not exceed it; the default is capped by it
    max_bytes_required: bool = False  # every stream must set max_bytes
    memory_max_stream_bytes: int = -1  # a memory / file stream's max_bytes may not exceed these
    store_max_stream_bytes: int = -1


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

    def __repr__(self) -> str:  # never the password
        return f"User(user={self.user!r}, permissions={self.permissions!r})"


@dataclass(frozen=True)
class AuthSettings:
    token: str | None = None
    user: str | None = None
    password: str | None = None
    users: tuple[User, ...] = ()  # [[authorization.users]]: several users, each with its permissions
    timeout: float = 2.0  # seconds a client has to send CONNECT when auth is required

    @property
    def required(self) -> bool:
        return self.token is not None or self.user is not None or bool(self.users)

    @property
    def nkeys(self) -> bool:
        """Whether INFO must carry a nonce for nkey users to sign."""
        return any(u.nkey is not None for u in self.users)


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
    "no_auth_user": "jsbroker has no no_auth_user; give websocket clients credentials (or cookies)",
    "jwt_cookie": "JWT authentication needs trusted operators, which jsbroker does not have; use user_cookie/"
                  "pass_cookie or token_cookie",
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


_TOP_KEYS = {
    "host": str, "listen": str, "port": int, "http_port": int, "https_port": int, "http_host": str, "server_name": str,
    "max_payload": "size", "max_control_line": "size", "max_pending": "size", "max_connections": int,
    "ping_interval": "duration", "ping_max": int, "write_deadline": "duration", "log_level": str, "log_file": Path,
    "pid_file": Path, "lame_duck_duration": "duration", "lame_duck_grace_period": "duration",
}


def load_file(path: Path, base: BrokerConfig | None = None) -> BrokerConfig:
    """Read a TOML config file (format documented in broker/README.md) over `base`; a `.json` file holds
    the same settings as JSON (nats-server reads JSON too, so one file can serve both for shared keys)."""
    import tomllib  # only with a config file: not every start pays for the parser

    try:
        text = Path(path).read_text()
        data = json.loads(text) if Path(path).suffix == ".json" else tomllib.loads(text)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path} is not valid TOML: {e}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"config file {path} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a table of settings")
    return apply_mapping(data, base or BrokerConfig(), str(path))


def apply_mapping(data: dict[str, Any], base: BrokerConfig, source: str) -> BrokerConfig:
    top: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("authorization", "jetstream", "tls", "websocket"):
            continue
        kind = _TOP_KEYS.get(key)
        if kind is None:
            raise ConfigError(f"{source}: unknown setting {key!r}; known: {', '.join(sorted(_TOP_KEYS))}")
        if key == "listen":  # nats-server style "host:port", or just a host
            host, sep, port = str(value).rpartition(":")
            if sep and port.isdigit():
                top["port"] = int(port)
                top["host"] = host.strip("[]")
            else:
                top["host"] = str(value)
            continue
        top[key] = _convert(kind, value, f"{source}: {key}")
    cfg = replace(base, **top)
    if "authorization" in data:
        cfg = replace(cfg, auth=_auth(data["authorization"], cfg.auth, source))
    if "jetstream" in data:
        cfg = replace(cfg, jetstream=_jetstream(data["jetstream"], cfg.jetstream, source))
    if "tls" in data:
        cfg = replace(cfg, tls=_tls(data["tls"], source))
    if "websocket" in data:
        cfg = replace(cfg, websocket=websocket_settings(data["websocket"], source, lambda t: _tls(t, source)))
    return cfg


def _convert(kind: Any, value: Any, what: str) -> Any:
    if kind == "size":
        return parse_size(value, what)
    if kind == "duration":
        return parse_duration(value, what)
    if kind is int and not isinstance(value, int):
        raise ConfigError(f"{what}: {value!r} must be an integer")
    return kind(value)


def _auth(section: Any, base: AuthSettings, source: str) -> AuthSettings:
    known = {"token", "user", "password", "timeout", "users"}
    unknown = set(section) - known
    if unknown:
        raise ConfigError(f"{source}: unknown [authorization] setting(s) {sorted(unknown)}; known: {sorted(known)}")
    kw: dict[str, Any] = {k: str(section[k]) for k in ("token", "user", "password") if k in section}
    if "timeout" in section:
        kw["timeout"] = parse_duration(section["timeout"], f"{source}: authorization.timeout")
    if "users" in section:
        if not isinstance(section["users"], list):
            raise ConfigError(f"{source}: authorization.users must be a list of users")
        kw["users"] = tuple(_user(u, f"{source}: authorization.users[{i}]") for i, u in enumerate(section["users"]))
        names = [u.user for u in kw["users"]]
        if len(set(names)) != len(names):
            raise ConfigError(f"{source}: authorization.users names a user twice")
    return replace(base, **kw)


def _user(entry: Any, where: str) -> User:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: a user is a table with user and password (or nkey) and optional permissions")
    unknown = set(entry) - {"user", "password", "nkey", "permissions"}
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {sorted(unknown)}; known: ['nkey', 'password', 'permissions', "
                          "'user']")
    perms = _permissions(entry["permissions"], f"{where}.permissions") if "permissions" in entry else None
    if "nkey" in entry:
        if "user" in entry or "password" in entry or not isinstance(entry["nkey"], str):
            raise ConfigError(f"{where}: an nkey user has only nkey (its public key, 'U...') and permissions")
        try:
            public = user_public_key(entry["nkey"])
        except NkeyError as e:
            raise ConfigError(f"{where}: {e}") from None
        return User(entry["nkey"], None, perms, public)
    if not isinstance(entry.get("user"), str) or not isinstance(entry.get("password"), str):
        raise ConfigError(f"{where}: user and password are required strings (or give nkey)")
    return User(entry["user"], entry["password"], perms)


def _permissions(section: Any, where: str) -> Permissions:
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: permissions is a table with publish, subscribe, allow_responses")
    unknown = set(section) - {"publish", "subscribe", "allow_responses"}
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {sorted(unknown)}; known: allow_responses, publish, subscribe")
    publish = _rules(section["publish"], f"{where}.publish") if "publish" in section else None
    subscribe = _rules(section["subscribe"], f"{where}.subscribe") if "subscribe" in section else None
    response_max, response_expires = 0, 0.0
    responses = section.get("allow_responses", False)
    if responses is True:
        response_max, response_expires = 1, 120.0  # nats-server's defaults
    elif isinstance(responses, dict):
        unknown = set(responses) - {"max", "expires"}
        if unknown:
            raise ConfigError(f"{where}.allow_responses: unknown setting(s) {sorted(unknown)}; known: expires, max")
        response_max = int(responses.get("max", 1))
        response_expires = parse_duration(responses.get("expires", 120.0), f"{where}.allow_responses.expires")
    elif responses is not False:
        raise ConfigError(f"{where}.allow_responses: true, false, or a table with max and expires")
    if response_max and (publish is None or publish.allow is None):
        # nats-server: responses allowed means nothing else is, unless publish.allow says so
        publish = SubjectRules(allow=(), deny=publish.deny if publish else ())
    return Permissions(publish, subscribe, response_max, response_expires)


def _rules(value: Any, where: str) -> SubjectRules:
    """A list (the allowed subjects) or a table with allow and deny lists."""
    def subjects(v: Any, key: str) -> tuple[str, ...]:
        items = [v] if isinstance(v, str) else v
        if not isinstance(items, list) or not all(isinstance(x, str) and is_valid_subject(x) for x in items):
            raise ConfigError(f"{where}{key}: a subject or a list of valid subjects (wildcards allowed)")
        return tuple(items)

    if isinstance(value, (list, str)):
        return SubjectRules(allow=subjects(value, ""))
    if not isinstance(value, dict) or set(value) - {"allow", "deny"}:
        raise ConfigError(f"{where}: a list of subjects, or a table with allow and deny lists")
    return SubjectRules(allow=subjects(value["allow"], ".allow") if "allow" in value else None,
                        deny=subjects(value.get("deny", []), ".deny"))


def _tls(section: Any, source: str) -> TlsSettings:
    known = {"cert_file", "key_file", "ca_file", "verify", "timeout", "reload_interval", "handshake_first"}
    if not isinstance(section, dict):
        raise ConfigError(f"{source}: [tls] must be a table with cert_file and key_file")
    unknown = set(section) - known
    if unknown:
        raise ConfigError(f"{source}: unknown [tls] setting(s) {sorted(unknown)}; known: {sorted(known)}")
    missing = [k for k in ("cert_file", "key_file") if k not in section]
    if missing:
        raise ConfigError(f"{source}: [tls] needs {' and '.join(missing)} (the server certificate and its key)")
    if not isinstance(section.get("verify", False), bool):
        raise ConfigError(f"{source}: tls.verify must be true or false")
    first, fallback = parse_handshake_first(section.get("handshake_first", False), f"{source}: tls.handshake_first")
    return TlsSettings(
        handshake_first=first, handshake_first_fallback=fallback,
        cert_file=Path(section["cert_file"]), key_file=Path(section["key_file"]),
        ca_file=Path(section["ca_file"]) if "ca_file" in section else None, verify=section.get("verify", False),
        timeout=parse_duration(section.get("timeout", 2.0), f"{source}: tls.timeout"),
        reload_interval=parse_duration(section.get("reload_interval", 30.0), f"{source}: tls.reload_interval"),
    )


def _jetstream(section: Any, base: JetStreamSettings | None, source: str) -> JetStreamSettings | None:
    if isinstance(section, bool):
        return (base or JetStreamSettings(store_dir=None)) if section else None
    known = {"enabled", "store_dir", "sync", "sync_interval", "domain", "max_memory", "max_storage", "account"}
    unknown = set(section) - known
    if unknown:
        raise ConfigError(f"{source}: unknown [jetstream] setting(s) {sorted(unknown)}; known: {sorted(known)}")
    if section.get("enabled", True) is False:
        return None
    js = base or JetStreamSettings(store_dir=None)
    kw: dict[str, Any] = {}
    if "store_dir" in section:
        kw["store_dir"] = Path(section["store_dir"])
    if "sync" in section:
        sync = section["sync"]
        if sync == "always":
            kw["sync_always"] = True
        else:
            kw["sync_interval"] = parse_duration(sync, f"{source}: jetstream.sync")
    if "sync_interval" in section:
        kw["sync_interval"] = parse_duration(section["sync_interval"], f"{source}: jetstream.sync_interval")
    if "domain" in section:
        kw["domain"] = str(section["domain"])
    for k in ("max_memory", "max_storage"):
        if k in section:
            kw[k] = parse_size(section[k], f"{source}: jetstream.{k}")
    if "account" in section:
        kw["account"] = _account_limits(section["account"], f"{source}: jetstream.account")
    return replace(js, **kw)


_ACCOUNT_SIZES = ("max_mem", "max_file", "memory_max_stream_bytes", "store_max_stream_bytes")
_ACCOUNT_COUNTS = ("max_streams", "max_consumers", "max_ack_pending")


def _account_limits(section: Any, where: str) -> AccountLimits:
    known = {*_ACCOUNT_SIZES, *_ACCOUNT_COUNTS, "max_bytes_required"}
    if not isinstance(section, dict) or set(section) - known:
        raise ConfigError(f"{where}: a table with {', '.join(sorted(known))} (nats-server's account jetstream keys)")
    kw: dict[str, Any] = {}
    for key in _ACCOUNT_SIZES:
        if key in section:
            kw[key] = parse_size(section[key], f"{where}.{key}")
    for key in _ACCOUNT_COUNTS:
        if key in section:
            if not isinstance(section[key], int) or isinstance(section[key], bool):
                raise ConfigError(f"{where}.{key}: a whole number (-1: unlimited)")
            kw[key] = section[key]
    if "max_bytes_required" in section:
        if not isinstance(section["max_bytes_required"], bool):
            raise ConfigError(f"{where}.max_bytes_required: true or false")
        kw["max_bytes_required"] = section["max_bytes_required"]
    return AccountLimits(**kw)


__all__ = [
    "VERSION", "AccountLimits", "AuthSettings", "BrokerConfig", "ConfigError", "JetStreamSettings", "Permissions", "SubjectRules",
    "TlsSettings", "User", "WebSocketSettings",
    "apply_mapping", "parse_handshake_first", "websocket_settings", "load_file", "parse_duration", "parse_size",
]
