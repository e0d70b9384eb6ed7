"""The options of the monitoring views (/connz, /subsz, /jsz, /healthz): what an HTTP query string (monitor.py)
and a system account request's JSON body (system_account.py) both become, checked as nats-server decodes them:
query values as Go's strconv parses them (`BadQuery`: its 400 text), bodies as Go's json.Unmarshal
(`go_decode`: the earliest value of a wrong type), then what the view itself refuses (`ViewRefusal`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .subjects import is_valid_publish_subject

# ConnzOptions' JSON keys in nats-server and the values jsbroker takes for them: the ones it has no view for
# are accepted only at their defaults (natscli sends every key), anything else is refused by name.
_CONNZ_DEFAULTS: dict[str, Any] = {"state": 0}
_CONNZ_SORTS = ("", "cid", "start", "subs", "pending", "msgs_to", "msgs_from", "bytes_to", "bytes_from", "uptime", "rtt")
# nats-server's other sorts: of closed connections (jsbroker lists open ones), of activity (it does not track it)
_CONNZ_SORTS_REFUSED = {"stop": "sort by stop only valid on closed connections",
                        "reason": "sort by reason only valid on closed connections",
                        "last": "sort by last: jsbroker does not track a connection's last activity; sort by "
                                "cid, subs, pending, msgs_to, msgs_from, bytes_to, bytes_from, uptime or rtt",
                        "idle": "sort by idle: jsbroker does not track a connection's last activity; sort by "
                                "cid, subs, pending, msgs_to, msgs_from, bytes_to, bytes_from, uptime or rtt"}


@dataclass(frozen=True)
class ConnzOptions:
    """Which connections /connz (or a CONNZ request) shows, and how much of each."""

    subscriptions: bool = False
    subscriptions_detail: bool = False  # each subscription's SubDetail instead of its subject
    auth: bool = False
    offset: int = 0
    limit: int = 1024
    account: str = ""  # only this account's ("": every account's)
    cid: int = 0
    sort: str = ""  # nats-server's sort options ("": by cid)
    user: str = ""  # only this user's connections
    mqtt_client: str = ""  # only this MQTT client's: none (jsbroker has no MQTT)
    filter_subject: str = ""  # only the connections with a subscription it collides with (needs `account`)


class ViewRefusal(ValueError):
    """Options that decode but that the view refuses (a SUBSZ test that is no publish subject, an invalid sort,
    what jsbroker has no view for): nats-server's 500 on the system account (400 over HTTP)."""


_GO_JSON = {"str": "string", "int": "number", "float": "number", "bool": "bool", "list": "array", "dict": "object"}
_GO_INTS = {"int": (-2**63, 2**63), "uint64": (0, 2**64)}
_GO_NAMED = {"server.SortOpt": "string", "server.ConnState": "int"}  # nats-server's named types: their base


def _go_mismatch(value: Any, go_type: str) -> str | None:
    """How Go's JSON decoding names `value` when it does not fit `go_type` ("bool", "int", "uint64", "string",
    "[]string"), None when it fits (null always does: Go leaves the field as it was)."""
    if value is None:
        return None
    kind = _GO_JSON.get(type(value).__name__, type(value).__name__)
    go_type = _GO_NAMED.get(go_type, go_type)
    if go_type in _GO_INTS:
        if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)
                                        and not _GO_INTS[go_type][0] <= value < _GO_INTS[go_type][1]):
            return f"number {value}"  # Go quotes a number it cannot convert
        return None if isinstance(value, int) and not isinstance(value, bool) else kind
    wanted = {"bool": bool, "string": str, "[]string": list}[go_type]
    return None if isinstance(value, wanted) else kind


def go_decode(body: dict[str, Any], fields: dict[str, str], struct: str) -> None:
    """Check a request body as Go's json.Unmarshal into the options struct `struct` with these JSON `fields`
    (name -> Go type): the earliest value of a wrong type, in the body's order, is the ValueError (unknown
    keys are ignored, as Go ignores them)."""
    for key, value in body.items():
        go_type = fields.get(key)
        if go_type is None:
            continue
        kind = _go_mismatch(value, go_type)
        if kind is not None:
            raise ValueError(f"json: cannot unmarshal {kind} into Go struct field {struct}.{key} of type {go_type}")
        if go_type == "[]string" and value is not None:
            for i, item in enumerate(value):
                if item is not None and not isinstance(item, str):  # a null element is Go's ""
                    raise ValueError(f"json: cannot unmarshal {_GO_JSON.get(type(item).__name__)} into "
                                     f"{struct}.{key}.{i} of type string")


def _value(body: dict[str, Any], key: str, default: Any) -> Any:
    """A decoded body's value (go_decode checked its type); null or missing: the default."""
    value = body.get(key)
    return default if value is None else value


_CONNZ_FIELDS = {"sort": "server.SortOpt", "auth": "bool", "subscriptions": "bool", "subscriptions_detail": "bool",
                 "offset": "int", "limit": "int", "cid": "uint64", "mqtt_client": "string", "state": "server.ConnState",
                 "user": "string", "acc": "string", "filter_subject": "string"}


def connz_options(body: dict[str, Any], account: str = "") -> ConnzOptions:
    """A CONNZ request's options (ValueError names the one that is wrong); `account` pins the account (an
    account's own CONNZ request)."""
    go_decode(body, _CONNZ_FIELDS, "ConnzEventOptions")
    for key, default in _CONNZ_DEFAULTS.items():
        if _value(body, key, default) != default:
            raise ViewRefusal(f"{key}: jsbroker's CONNZ answers take it only at its default ({default!r})")
    sort = _value(body, "sort", "")
    if sort in _CONNZ_SORTS_REFUSED:
        raise ViewRefusal(_CONNZ_SORTS_REFUSED[sort])
    if sort not in _CONNZ_SORTS:
        raise ViewRefusal(f"invalid sorting option: {sort}")
    limit, cid = _value(body, "limit", 0), _value(body, "cid", 0)
    account = account or _value(body, "acc", "")
    subject = _value(body, "filter_subject", "")
    if subject not in ("", ">") and not account:
        raise ViewRefusal("filter by subject only valid with account filtering")
    return ConnzOptions(subscriptions=_value(body, "subscriptions", False),
                        subscriptions_detail=_value(body, "subscriptions_detail", False), auth=_value(body, "auth", False),
                        offset=max(_value(body, "offset", 0), 0),
                        limit=1 if cid > 0 else limit if limit > 0 else 1024,  # as nats-server: one connection by cid
                        account=account, cid=cid, sort=sort, user=_value(body, "user", ""),
                        mqtt_client=_value(body, "mqtt_client", ""), filter_subject="" if subject == ">" else subject)


# -- query strings, as nats-server's monitoring decodes them --------------------------------------------------

_GO_INT = re.compile(r"[+-]?[0-9]+")
_GO_TRUE, _GO_FALSE = ("1", "t", "T", "TRUE", "true", "True"), ("0", "f", "F", "FALSE", "false", "False")


class BadQuery(ValueError):
    """A query value nats-server refuses (its 400 answer's text)."""


def query_bool(query: dict[str, str], name: str) -> bool:
    """Go's strconv.ParseBool of the parameter ("": false)."""
    value = query.get(name, "")
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE or not value:
        return False
    raise BadQuery(f"Error decoding boolean for '{name}': strconv.ParseBool: parsing {_go_quote(value)}: invalid syntax")


def query_int(query: dict[str, str], name: str) -> int:
    """Go's strconv.Atoi of the parameter ("": 0)."""
    value = query.get(name, "")
    if not value:
        return 0
    if not _GO_INT.fullmatch(value):
        raise BadQuery(f"Error decoding int for '{name}': strconv.Atoi: parsing {_go_quote(value)}: invalid syntax")
    number = int(value)
    if not -2**63 <= number < 2**63:
        raise BadQuery(f"Error decoding int for '{name}': strconv.Atoi: parsing {_go_quote(value)}: value out of range")
    return number


def query_uint(query: dict[str, str], name: str) -> int:
    """Go's strconv.ParseUint of the parameter ("": 0)."""
    value = query.get(name, "")
    if value and not (value.isascii() and value.isdigit() and int(value) < 2**64):
        reason = "value out of range" if value.isascii() and value.isdigit() else "invalid syntax"
        raise BadQuery(f"Error decoding uint64 for '{name}': strconv.ParseUint: parsing {_go_quote(value)}: {reason}")
    return int(value or 0)


_CONNZ_STATES = {"open": 0, "closed": 1, "any": 2, "all": 2}


def connz_query(query: dict[str, str]) -> ConnzOptions:
    """/connz's options, as nats-server decodes them (BadQuery: its 400 text), then as a CONNZ request's: the
    ones jsbroker has no view for are refused by name unless at their defaults."""
    detail = query.get("subs", "").lower() == "detail"
    body = {"sort": query.get("sort", ""), "auth": query_bool(query, "auth"),  # decoded in nats-server's order
            "subscriptions": detail or query_bool(query, "subs"), "subscriptions_detail": detail,
            "offset": query_int(query, "offset"), "limit": query_int(query, "limit"), "cid": query_uint(query, "cid")}
    state = query.get("state", "")
    if state and state.lower() not in _CONNZ_STATES:
        raise BadQuery(f"Error decoding state for {state}")
    body.update(state=_CONNZ_STATES[state.lower()] if state else 0, mqtt_client=query.get("mqtt_client", ""),
                user=query.get("user", ""), acc=query.get("acc", ""))
    try:
        return connz_options(body)
    except ValueError as e:
        raise BadQuery(str(e)) from None


def _go_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# -- /jsz and JSZ requests ------------------------------------------------------------------------------------


class NotLeader(Exception):
    """`leader-only` asked of a server that leads no JetStream (it is off): HTTP says so, a $SYS request gets
    no answer (nats-server's errSkipZreq)."""

    def __init__(self) -> None:
        super().__init__("filtered response: not leader")


@dataclass(frozen=True)
class JszOptions:
    """nats-server's JSzOptions. On one server every stream and consumer is its own leader and in no Raft group:
    `leader_only` and `stream_leader_only` keep everything, `raft` adds the leader counts."""

    account: str = ""  # only this JetStream account's details
    accounts: bool = False  # each JetStream account's details
    streams: bool = False
    consumers: bool = False
    direct_consumers: bool = False
    config: bool = False
    leader_only: bool = False
    offset: int = 0
    limit: int = 1024
    raft: bool = False
    stream_leader_only: bool = False

    def normalised(self) -> JszOptions:
        """nats-server's defaults: consumers imply streams, streams without an account imply every account."""
        streams = self.streams or self.consumers
        return JszOptions(self.account, self.accounts or (streams and not self.account), streams, self.consumers,
                          self.direct_consumers, self.config, self.leader_only, max(self.offset, 0),
                          self.limit or 1024, self.raft, self.stream_leader_only)


# The JSZ request body's keys (JSzOptions' JSON tags) -> JszOptions' fields
_JSZ_KEYS = {"account": "account", "accounts": "accounts", "streams": "streams", "consumer": "consumers",
             "direct_consumer": "direct_consumers", "config": "config", "leader_only": "leader_only",
             "offset": "offset", "limit": "limit", "raft": "raft", "stream_leader_only": "stream_leader_only"}
# /jsz's query parameters -> JszOptions' fields, in the order nats-server decodes them (the first bad one is named)
_JSZ_QUERY = {"accounts": "accounts", "streams": "streams", "consumers": "consumers",
              "direct-consumers": "direct_consumers", "config": "config", "offset": "offset", "limit": "limit",
              "leader-only": "leader_only", "raft": "raft", "stream-leader-only": "stream_leader_only"}


def jsz_query(query: dict[str, str]) -> JszOptions:
    """/jsz's options (BadQuery names a bad value, in nats-server's words)."""
    values: dict[str, Any] = {field: query_int(query, name) if name in ("offset", "limit") else query_bool(query, name)
                              for name, field in _JSZ_QUERY.items()}
    return JszOptions(account=query.get("acc", ""), **values).normalised()


_JSZ_FIELDS = {"account": "string", "accounts": "bool", "streams": "bool", "consumer": "bool",
               "direct_consumer": "bool", "config": "bool", "leader_only": "bool", "offset": "int", "limit": "int",
               "raft": "bool", "stream_leader_only": "bool"}


def jsz_options(body: dict[str, Any], normalise: bool = True) -> JszOptions:
    """A JSZ request's options (ValueError names the one that is wrong, as Go's JSON decoding does); an
    account's JSZ request takes them as given (`normalise` False, as nats-server's JszAccount)."""
    go_decode(body, _JSZ_FIELDS, "JszEventOptions")
    values = {field: _value(body, key, JszOptions.__dataclass_fields__[field].default)
              for key, field in _JSZ_KEYS.items()}
    return JszOptions(**values).normalised() if normalise else JszOptions(**values)


# -- /subsz and SUBSZ requests --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubszOptions:
    """nats-server's SubszOptions: the subscriptions' counts, and with `subscriptions` a page of them (of one
    account, those a message on the literal subject `test` would reach)."""

    subscriptions: bool = False
    offset: int = 0
    limit: int = 1024
    account: str = ""
    test: str = ""


def _subsz(subscriptions: bool, offset: int, limit: int, account: str, test: str) -> SubszOptions:
    if test and not is_valid_publish_subject(test):
        raise ViewRefusal(f"invalid test subject, must be valid publish subject: {test}")
    return SubszOptions(subscriptions, max(offset, 0), limit if limit > 0 else 1024, account, test)


def subsz_query(query: dict[str, str]) -> SubszOptions:
    """/subsz's options (BadQuery: nats-server's 400 text)."""
    try:
        return _subsz(query_bool(query, "subs"), query_int(query, "offset"), query_int(query, "limit"),
                      query.get("acc", ""), query.get("test", ""))
    except ValueError as e:
        raise BadQuery(str(e)) from None


_SUBSZ_FIELDS = {"offset": "int", "limit": "int", "subscriptions": "bool", "account": "string", "test": "string"}


def subsz_options(body: dict[str, Any], account: str = "") -> SubszOptions:
    """A SUBSZ request's options (ValueError names the one that is wrong); `account` pins the account, whose
    subscriptions an account's own SUBSZ request always lists."""
    go_decode(body, _SUBSZ_FIELDS, "SubszEventOptions")
    return _subsz(bool(account) or _value(body, "subscriptions", False), _value(body, "offset", 0),
                  _value(body, "limit", 0), account or _value(body, "account", ""), _value(body, "test", ""))


# -- /healthz and HEALTHZ requests ----------------------------------------------------------------------------


@dataclass(frozen=True)
class HealthzOptions:
    """nats-server's HealthzOptions. One server has no meta layer: `js_meta_only` checks what the default does."""

    js_enabled_only: bool = False  # `js-enabled` (deprecated) too
    js_server_only: bool = False
    js_meta_only: bool = False
    account: str = ""  # that its JetStream (its `stream`, that stream's `consumer`) exists
    stream: str = ""
    consumer: str = ""
    details: bool = False  # the errors as a list, each with its type


_HEALTHZ_FLAGS = ("js-enabled", "js-enabled-only", "js-server-only", "js-meta-only", "details")


def healthz_query(query: dict[str, str]) -> HealthzOptions:
    """/healthz's options (BadQuery: nats-server's 400 text)."""
    flags = {name: query_bool(query, name) for name in _HEALTHZ_FLAGS}
    return _healthz(flags, query.get("account", ""), query.get("stream", ""), query.get("consumer", ""))


_HEALTHZ_FIELDS = {**{name: "bool" for name in _HEALTHZ_FLAGS}, "account": "string", "stream": "string",
                   "consumer": "string"}


def healthz_options(body: dict[str, Any]) -> HealthzOptions:
    """A HEALTHZ request's options (ValueError names the one that is wrong)."""
    go_decode(body, _HEALTHZ_FIELDS, "HealthzEventOptions")
    flags = {name: _value(body, name, False) for name in _HEALTHZ_FLAGS}
    return _healthz(flags, *(_value(body, key, "") for key in ("account", "stream", "consumer")))


def _healthz(flags: dict[str, bool], account: str, stream: str, consumer: str) -> HealthzOptions:
    return HealthzOptions(flags["js-enabled"] or flags["js-enabled-only"], flags["js-server-only"],
                          flags["js-meta-only"], account, stream, consumer, flags["details"])
