"""NACK's resources (github.com/nats-io/nack, group jetstream.nats.io, v1beta2) -> ours, adopting the same
server objects (`jsoperator import --from-nack`).

Owns:
- the field tables: every NACK spec field -> the spec field of ours that sets the same server field, or why
  none does (reported, never silently dropped). A field this module does not know (a newer NACK's) is
  reported too;
- what NACK made on the server besides its spec: the apiserver's defaults of NACK's CRDs (``NACK_DEFAULTS``,
  applied when a file leaves them out, as the apiserver does) and jsm.go's stream template (a one-year
  maxAge when the spec has none) -- written out explicitly so that the operator finds no drift;
- NACK's quirks where its spec says more than it did (a pinned_client policy without pinnedTtl, start
  options of another deliver policy: NACK never sent them; they are left out and reported);
- Account -> JetStreamConnection (servers and the Secrets of creds, token, user/password, TLS), and a
  resource's ``account`` -> ``connectionRef``;
- bad input, refused as a whole (NackError: nothing is written): an unknown kind or version, a Consumer
  whose stream or a resource whose Account is not imported, a missing Secret or key, a spec our models refuse.
Pure: resource dicts (as ``kubectl get -o yaml`` gives them) and the Secrets' keys in, manifests and the
report out; cli.py reads the cluster or the files and writes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from jsoperator import units
from jsoperator.models import (
    ConnectionSpec,
    ConsumerSpec,
    DeletionPolicy,
    KeyValueSpec,
    ObjectStoreSpec,
    SpecError,
    StreamSpec,
    parse_spec,
)

GROUP, VERSION = "jetstream.nats.io", "v1beta2"
PLURALS = {"Stream": "streams", "Consumer": "consumers", "KeyValue": "keyvalues", "ObjectStore": "objectstores",
           "Account": "accounts"}
API_VERSION = "jsoperator.io/v1alpha1"
OURS = {"Stream": "Stream", "Consumer": "Consumer", "KeyValue": "KeyValue", "ObjectStore": "ObjectStore",
        "Account": "JetStreamConnection"}
MODELS: dict[str, Any] = {"Stream": StreamSpec, "Consumer": ConsumerSpec, "KeyValue": KeyValueSpec,
                          "ObjectStore": ObjectStoreSpec, "Account": ConnectionSpec}
# The order manifests are written in: what others name comes first.
ORDER = ("Account", "Stream", "KeyValue", "ObjectStore", "Consumer")

# NACK's CRDs (deploy/crds.yml) default these; `kubectl get` shows them, a hand-written file may not.
NACK_DEFAULTS: dict[str, dict[str, Any]] = {
    "Stream": {"retention": "limits", "maxConsumers": -1, "maxMsgs": -1, "maxBytes": -1, "discard": "old",
               "maxMsgSize": -1, "storage": "memory", "replicas": 1},
    "Consumer": {"deliverPolicy": "all", "ackPolicy": "none", "ackWait": "1ns", "replayPolicy": "instant"},
    "KeyValue": {"replicas": 1},
    "ObjectStore": {"replicas": 1},
    "Account": {},
}
# NACK creates streams with jsm.go's NewStream, whose template keeps messages a year unless maxAge says else.
JSM_STREAM_MAX_AGE = "8760h"


class NackError(ValueError):
    """Input that cannot be imported as a whole; the message names the resource and what to do."""


@dataclasses.dataclass(frozen=True)
class Unmapped:
    """One NACK field the manifests do not carry, and why."""

    resource: str  # Kind namespace/name
    field: str  # spec.<path>
    value: str
    why: str


@dataclasses.dataclass
class Migration:
    manifests: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    unmapped: list[Unmapped] = dataclasses.field(default_factory=list)


SecretKeys = Callable[[str, str], "set[str] | None"]
"""(namespace, name) -> the Secret's keys, None when it does not exist."""


# -- conversions ------------------------------------------------------------------------------------


def _is_zero(value: Any) -> bool:
    """Go's zero value: NACK (omitempty fields, `if x != ""` checks) sends nothing for it."""
    return value is None or value is False or value == "" or value == [] or value == {} or (
        type(value) is int and value == 0)


def _same(value: Any) -> Any:
    return value


def _fields(table: Mapping[str, tuple[str, Callable[[Any], Any]]]) -> Callable[[Any], dict[str, Any]]:
    """A converter for a nested object: its non-zero fields renamed and converted by `table`."""
    def convert(value: Mapping[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - set(table))
        if unknown:
            raise NackError(f"unknown fields {unknown}")
        return {table[key][0]: table[key][1](v) for key, v in value.items() if not _is_zero(v)}
    return convert


def _each(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda values: [convert(value) for value in values]


def _nanoseconds(value: int) -> str:
    return units.format_duration(value)


def _sample_percent(value: str) -> str:
    """jsm.go's SamplePercent: NACK parses ``50`` or ``50%`` and sends ``50%``."""
    return f"{int(str(value).removesuffix('%'))}%"


def _priority_policy(value: str) -> str:
    return {"pinned_client": "pinnedClient"}.get(value, value)


_TRANSFORM = _fields({"source": ("src", _same), "dest": ("dest", _same)})
_SOURCE_FIELDS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "name": ("name", _same), "optStartSeq": ("optStartSeq", _same), "optStartTime": ("optStartTime", _same),
    "filterSubject": ("filterSubject", _same), "subjectTransforms": ("subjectTransforms", _each(_TRANSFORM)),
}


def _source(value: Mapping[str, Any]) -> dict[str, Any]:
    """NACK's flat externalApiPrefix / externalDeliverPrefix -> our ``external`` object."""
    external = {ours: value[theirs] for theirs, ours in (("externalApiPrefix", "apiPrefix"),
                                                         ("externalDeliverPrefix", "deliverPrefix"))
                if not _is_zero(value.get(theirs))}
    rest = {k: v for k, v in value.items() if k not in ("externalApiPrefix", "externalDeliverPrefix")}
    return {**_fields(_SOURCE_FIELDS)(rest), **({"external": external} if external else {})}


_PLACEMENT = _fields({"cluster": ("cluster", _same), "tags": ("tags", _same)})
_REPUBLISH = _fields({"source": ("src", _same), "destination": ("dest", _same),
                      "headers_only": ("headersOnly", _same)})
_CONSUMER_LIMITS = _fields({"inactiveThreshold": ("inactiveThreshold", _same),
                            "maxAckPending": ("maxAckPending", _same)})


def _table(same: Iterable[str], **renamed: tuple[str, Callable[[Any], Any]]) -> dict[str, tuple[str, Any]]:
    return {**{name: (name, _same) for name in same}, **renamed}


# NACK spec field -> (our spec field, conversion). The connection fields (_CONNECTION_FIELDS) are apart.
FIELDS: dict[str, dict[str, tuple[str, Callable[[Any], Any]]]] = {
    "Stream": _table(
        ("name", "description", "subjects", "retention", "maxConsumers", "maxMsgsPerSubject", "maxMsgs", "maxBytes",
         "maxAge", "maxMsgSize", "storage", "discard", "replicas", "noAck", "duplicateWindow", "compression",
         "sealed", "denyDelete", "denyPurge", "allowDirect", "mirrorDirect", "metadata", "allowMsgTtl",
         "subjectDeleteMarkerTtl", "allowMsgCounter", "allowAtomicPublish", "allowMsgSchedules", "persistMode"),
        placement=("placement", _PLACEMENT), mirror=("mirror", _source), sources=("sources", _each(_source)),
        subjectTransform=("subjectTransform", _TRANSFORM), republish=("republish", _REPUBLISH),
        allowRollup=("allowRollupHdrs", _same), discardPerSubject=("discardNewPerSubject", _same),
        firstSequence=("firstSeq", _same), consumerLimits=("consumerLimits", _CONSUMER_LIMITS)),
    "Consumer": _table(
        ("streamName", "durableName", "description", "ackPolicy", "ackWait", "deliverPolicy", "deliverSubject",
         "deliverGroup", "filterSubject", "filterSubjects", "flowControl", "maxAckPending", "maxDeliver", "backoff",
         "maxWaiting", "optStartSeq", "optStartTime", "rateLimitBps", "replayPolicy", "headersOnly",
         "inactiveThreshold", "replicas", "memStorage", "metadata", "pauseUntil", "priorityGroups"),
        heartbeatInterval=("idleHeartbeat", _same), sampleFreq=("sampleFreq", _sample_percent),
        maxRequestBatch=("maxBatch", _same), maxRequestExpires=("maxExpires", _same),
        maxRequestMaxBytes=("maxBytes", _same), priorityPolicy=("priorityPolicy", _priority_policy),
        pinnedTtl=("priorityTimeout", _same)),
    "KeyValue": _table(
        ("bucket", "description", "maxValueSize", "history", "ttl", "maxBytes", "storage", "replicas", "compression"),
        placement=("placement", _PLACEMENT), republish=("republish", _REPUBLISH), mirror=("mirror", _source),
        sources=("sources", _each(_source)), limitMarkerTtl=("limitMarkerTtl", _nanoseconds)),
    "ObjectStore": _table(
        ("bucket", "description", "ttl", "maxBytes", "storage", "replicas", "compression", "metadata"),
        placement=("placement", _PLACEMENT)),
}
# Fields of every NACK Stream, Consumer, KeyValue and ObjectStore saying how to reach the server (or policy).
_CONNECTION_FIELDS = ("account", "servers", "jsDomain", "creds", "nkey", "tls", "tlsFirst", "preventDelete",
                      "preventUpdate")
_FILE_PATH = ("a file in NACK's pod: put it in a Secret and name that in a JetStreamConnection "
              "(an Account with a Secret imports as one)")
_TLS_FIRST = "jsoperator starts TLS after INFO (the usual handshake): a server that needs TLS first is not reached"
_NKEY = "jsoperator authenticates with creds, a token, user/password or TLS, not an nkey seed: use a .creds file"


# -- the whole input --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Options:
    deletion_policy: DeletionPolicy = "retain"  # where NACK's preventDelete is false


def migrate(resources: Iterable[Mapping[str, Any]], options: Options, secret_keys: SecretKeys | None) -> Migration:
    """Our manifests for NACK's resources (every one of them, or NackError and none).

    `secret_keys` checks the Secrets an Account names (None: not checked, e.g. reading files)."""
    by_kind: dict[str, list[Mapping[str, Any]]] = {kind: [] for kind in ORDER}
    for resource in resources:
        by_kind[_kind(resource)].append(resource)
    accounts = {(_namespace(a), _name(a)) for a in by_kind["Account"]}
    streams = {_server_stream(kind, r) for kind in ("Stream", "KeyValue", "ObjectStore") for r in by_kind[kind]}
    out = Migration()
    for kind in ORDER:
        for resource in sorted(by_kind[kind], key=lambda r: (_namespace(r), _name(r))):
            report = _Report(f"{kind} {_where(resource)}", out.unmapped)
            spec = (_account(resource, report, secret_keys) if kind == "Account"
                    else _resource(kind, resource, report, options, accounts, streams))
            if spec is not None:
                out.manifests.append(_manifest(kind, resource, spec))
    return out


@dataclasses.dataclass
class _Report:
    resource: str
    rows: list[Unmapped]

    def __call__(self, field: str, value: Any, why: str) -> None:
        self.rows.append(Unmapped(self.resource, f"spec.{field}", _show(value), why))

    def error(self, problem: str) -> NackError:
        return NackError(f"{self.resource}: {problem}")


def _kind(resource: Mapping[str, Any]) -> str:
    api_version, kind = resource.get("apiVersion"), resource.get("kind")
    where = f"{kind or '(no kind)'} {_where(resource)}"
    if api_version != f"{GROUP}/{VERSION}" or kind not in OURS:
        raise NackError(
            f"{where}: apiVersion {api_version} kind {kind} is not a NACK resource this import reads; it reads "
            f"{GROUP}/{VERSION} {', '.join(ORDER)} (v1beta1 is no longer served by NACK: `kubectl get "
            f"streams.{GROUP} -o yaml` gives {VERSION})")
    if not isinstance(resource.get("spec"), Mapping):
        raise NackError(f"{where}: no spec")
    return str(kind)


def _name(resource: Mapping[str, Any]) -> str:
    return str((resource.get("metadata") or {}).get("name") or "")


def _namespace(resource: Mapping[str, Any]) -> str:
    return str((resource.get("metadata") or {}).get("namespace") or "")


def _where(resource: Mapping[str, Any]) -> str:
    return "/".join(part for part in (_namespace(resource), _name(resource)) if part) or "(no name)"


def _server_stream(kind: str, resource: Mapping[str, Any]) -> str:
    spec = resource["spec"]
    return {"Stream": str(spec.get("name") or ""), "KeyValue": f"KV_{spec.get('bucket')}",
            "ObjectStore": f"OBJ_{spec.get('bucket')}"}[kind]


def _show(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _manifest(kind: str, resource: Mapping[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    metadata = {"name": _name(resource), **({"namespace": _namespace(resource)} if _namespace(resource) else {})}
    return {"apiVersion": API_VERSION, "kind": OURS[kind], "metadata": metadata, "spec": spec}


def _validated(kind: str, spec: dict[str, Any], report: _Report) -> dict[str, Any]:
    try:
        parse_spec(MODELS[kind], spec)
    except SpecError as exc:
        raise report.error(f"its {OURS[kind]} would be invalid: {exc}") from None
    return spec


# -- Stream, Consumer, KeyValue, ObjectStore --------------------------------------------------------


def _resource(
    kind: str, resource: Mapping[str, Any], report: _Report, options: Options,
    accounts: set[tuple[str, str]], streams: set[str],
) -> dict[str, Any] | None:
    nack = {**NACK_DEFAULTS[kind], **resource["spec"]}
    if kind == "Stream" and _is_zero(nack.get("maxAge")):
        nack["maxAge"] = JSM_STREAM_MAX_AGE
    if kind == "Consumer":
        if _is_zero(nack.get("durableName")):
            report("durableName", "", "NACK made an ephemeral consumer, which the server removes when idle: "
                   "nothing to adopt (not imported)")
            return None
        if nack.get("streamName") not in streams:
            raise report.error(f"its stream {nack.get('streamName')!r} is not imported: import the NACK Stream, "
                               "KeyValue or ObjectStore that makes it too")
        nack = _consumer_as_sent(nack, report)
    spec: dict[str, Any] = {}
    table = FIELDS[kind]
    for field, value in nack.items():
        if field in _CONNECTION_FIELDS or _is_zero(value):
            continue
        if field not in table:
            report(field, value, "unknown to this import (a newer NACK?): check what it does before applying")
            continue
        ours, convert = table[field]
        try:
            spec[ours] = convert(value)
        except (NackError, ValueError, TypeError) as exc:
            raise report.error(f"spec.{field}: {exc}") from None
    spec |= _reach(nack, report, accounts, _namespace(resource))
    spec |= {"adoptionPolicy": "adopt",
             "deletionPolicy": "retain" if nack.get("preventDelete") else options.deletion_policy}
    if nack.get("preventUpdate"):
        report("preventUpdate", True, "no per-resource equivalent: jsoperator updates the server to the spec "
               "(`jsoperator run --read-only` observes only, operator-wide)")
    return _validated(kind, spec, report)


def _consumer_as_sent(nack: dict[str, Any], report: _Report) -> dict[str, Any]:
    """The consumer spec without what NACK never sent to the server (each reported)."""
    out = dict(nack)
    policy = nack.get("priorityPolicy") or "none"
    if policy == "pinned_client" and _is_zero(nack.get("pinnedTtl")):
        report("priorityPolicy", policy, "NACK sends pinned_client only with pinnedTtl: the server has no policy")
        out.pop("priorityPolicy")
        policy = "none"
    if policy == "none":
        out.pop("priorityPolicy", None)
        for field in ("priorityGroups", "pinnedTtl"):
            if not _is_zero(out.pop(field, None)):
                report(field, nack[field], "NACK sends it only with a priority policy: the server has none")
    elif policy != "pinned_client" and not _is_zero(out.pop("pinnedTtl", None)):
        report("pinnedTtl", nack["pinnedTtl"], f"NACK sends it only with pinned_client (not {policy})")
    for field, deliver in (("optStartSeq", "byStartSequence"), ("optStartTime", "byStartTime")):
        if nack.get("deliverPolicy") != deliver and not _is_zero(out.pop(field, None)):
            report(field, nack[field], f"NACK sends it only with deliverPolicy {deliver}")
    return out


def _reach(nack: Mapping[str, Any], report: _Report, accounts: set[tuple[str, str]], namespace: str) -> dict[str, Any]:
    """connectionRef (the Account) or connection (servers, jsDomain) of one resource; the rest reported."""
    for field in ("creds", "nkey", "tls"):
        if not _is_zero(nack.get(field)):
            report(field, nack[field], _FILE_PATH)
    if nack.get("tlsFirst"):
        report("tlsFirst", True, _TLS_FIRST)
    account = nack.get("account")
    if account:
        if (namespace, account) not in accounts:
            raise report.error(f"its Account {account!r} is not imported: import it too (its JetStreamConnection "
                               "is what the manifest names)")
        for field in ("servers", "jsDomain"):
            if not _is_zero(nack.get(field)):
                report(field, nack[field], f"overrides the Account's in NACK; a resource names either a connection "
                       f"or its own: the JetStreamConnection {account} is used")
        return {"connectionRef": {"kind": "JetStreamConnection", "name": account}}
    connection = {ours: nack[theirs] for theirs, ours in (("servers", "servers"), ("jsDomain", "jsDomain"))
                  if not _is_zero(nack.get(theirs))}
    return {"connection": connection} if connection else {}


# -- Account -> JetStreamConnection -----------------------------------------------------------------

_ACCOUNT_FIELDS = ("servers", "creds", "token", "user", "tls", "nkey", "tlsFirst", "name")
# NACK's Account sub-object -> our Secret reference: (its key fields -> ours), in the order NACK applies them.
_SECRET_REFS: dict[str, tuple[str, dict[str, str]]] = {
    "creds": ("credentialsSecretRef", {"file": "key"}),
    "token": ("tokenSecretRef", {"token": "key"}),
    "user": ("userSecretRef", {"user": "userKey", "password": "passwordKey"}),
    "tls": ("tlsSecretRef", {"ca": "caKey", "cert": "certKey", "key": "keyKey"}),
}


def _account(resource: Mapping[str, Any], report: _Report, secret_keys: SecretKeys | None) -> dict[str, Any]:
    nack = resource["spec"]
    spec: dict[str, Any] = {}
    if not _is_zero(nack.get("servers")):
        spec["servers"] = list(nack["servers"])
    for field in nack:
        if field not in _ACCOUNT_FIELDS:
            report(field, nack[field], "unknown to this import (a newer NACK?): check what it does before applying")
    if not _is_zero(nack.get("name")):
        report("name", nack["name"], "NACK does not read it either (the Account is named by metadata.name)")
    if not _is_zero(nack.get("nkey")):
        report("nkey", nack["nkey"], _NKEY)
    if nack.get("tlsFirst"):
        report("tlsFirst", True, _TLS_FIRST)
    authenticated = None
    for field, (ours, keys) in _SECRET_REFS.items():
        value = nack.get(field)
        if _is_zero(value):
            continue
        secret = (value.get("secret") or {}).get("name")
        if not secret:
            report(field, value, _FILE_PATH)
            continue
        if ours != "tlsSecretRef" and authenticated:
            report(field, value, f"a connection authenticates one way: {authenticated} is used")
            continue
        ref = {"name": secret, **{key: value[theirs] for theirs, key in keys.items() if not _is_zero(value.get(theirs))}}
        missing = [theirs for theirs in keys if ours != "tlsSecretRef" and _is_zero(value.get(theirs))]
        if missing:
            raise report.error(f"spec.{field} names no {' and '.join(missing)} key of Secret {secret}: NACK reads "
                               "nothing from it; set the key")
        if secret_keys is not None:
            _check_secret(secret_keys, _namespace(resource), secret, [ref[k] for k in keys.values() if k in ref],
                          field, report)
        spec[ours] = ref
        if ours != "tlsSecretRef":
            authenticated = field
    return _validated("Account", spec, report)


def secrets_named(resources: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """(namespace, name) of every Secret the Accounts among `resources` name."""
    return {(_namespace(r), str(value["secret"]["name"])) for r in resources if r.get("kind") == "Account"
            for field in _SECRET_REFS if isinstance(value := (r.get("spec") or {}).get(field), Mapping)
            and isinstance(value.get("secret"), Mapping) and value["secret"].get("name")}


def _check_secret(secret_keys: SecretKeys, namespace: str, name: str, keys: list[str], field: str,
                  report: _Report) -> None:
    found = secret_keys(namespace, name)
    where = f"{namespace}/{name}" if namespace else name
    if found is None:
        raise report.error(f"spec.{field}: Secret {where} not found; create it or fix the name")
    missing = sorted(set(keys) - found)
    if missing:
        raise report.error(f"spec.{field}: Secret {where} has no key {', '.join(missing)} (keys: {sorted(found)})")


# -- the report -------------------------------------------------------------------------------------

_HEADER = ("RESOURCE", "FIELD", "VALUE", "WHY IT IS NOT MAPPED")


def report_table(rows: list[Unmapped]) -> str:
    """The unmapped fields as an aligned table (the last column unpadded); a line saying so when none."""
    if not rows:
        return "every NACK field mapped\n"
    cells = [_HEADER, *((row.resource, row.field, row.value, row.why) for row in rows)]
    widths = [max(len(cell[i]) for cell in cells) for i in range(3)]
    return "".join("  ".join(cell[i].ljust(widths[i]) for i in range(3)) + "  " + cell[3] + "\n" for cell in cells)
