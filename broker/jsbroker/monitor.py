"""The monitoring HTTP endpoint (http_server.py): /healthz, /varz, /connz, /subsz, /jsz, /accountz, /accstatz as
read-only JSON views (the last two built by account_views.py), and /metrics (Prometheus text, see metrics.py;
imported at the first scrape, as prometheus_client costs a start ~30 ms).

Field names and shapes follow nats-server 2.15.1's monitoring endpoints for the basics (checked against
its responses); values jsbroker has no equivalent for (routes, gateways, leaf nodes) are zero or empty.
This module only reads broker state; it never changes it.
"""

from __future__ import annotations

import json
import os
import resource
import ssl
import sys
import time
from typing import TYPE_CHECKING, Any

from .account_views import UnknownAccount
from .config import VERSION
from .go_time import duration_string, go_duration, rfc3339
from .http_server import HttpServer, Request, Response
from .monitor_options import (BadQuery, ConnzOptions, HealthzOptions, JszOptions, NotLeader, SubszOptions,
                              connz_query, healthz_query, jsz_query, query_bool, subsz_query)
from .subjects import subject_matches, subjects_overlap

if TYPE_CHECKING:
    from .connection import Connection
    from .monitored import MonitoredServer
    from .sublist import Subscription

_NS = 1_000_000_000


def _unavailable(error: str) -> dict[str, Any]:
    return {"status": "unavailable", "status_code": 503, "error": error}


def _sub_detail(cid: int, sub: Subscription) -> dict[str, Any]:
    """nats-server's SubDetail of a client's subscription (Go leaves an empty queue group and no max out)."""
    item: dict[str, Any] = {"subject": sub.subject}
    if sub.queue:
        item["qgroup"] = sub.queue
    item.update(sid=sub.sid.decode(), msgs=sub.delivered)
    if sub.max_msgs:
        item["max"] = sub.max_msgs
    item["cid"] = cid
    return item


def _health_error(code: int, kind: str, error: str, options: HealthzOptions) -> dict[str, Any]:
    """nats-server's health error: the error alone, or with `details` a list of typed errors naming the asset."""
    if not options.details:
        return {"status": "error" if code == 400 else "unavailable", "status_code": code, "error": error}
    asset = {k: v for k, v in (("account", options.account), ("stream", options.stream),
                               ("consumer", options.consumer)) if v and kind != "BAD_REQUEST"}
    return {"status": "error", "status_code": code, "errors": [{"type": kind, **asset, "error": error}]}


# nats-server's connz sorts (largest first, ties by cid) by the fields of the listed connection
_SORTS = {"subs": "subscriptions", "msgs_to": "out_msgs", "msgs_from": "in_msgs", "bytes_to": "out_bytes",
          "bytes_from": "in_bytes", "pending": "pending_bytes"}


class Monitor:
    def __init__(self, broker: MonitoredServer) -> None:
        self.broker = broker
        self.started = time.time()
        self.requests: dict[str, int] = {}
        self._metrics: Any = None  # the Prometheus registry, made at the first scrape
        self._http = HttpServer({"/healthz": self.healthz, "/varz": self.varz, "/connz": self.connz, "/jsz": self.jsz,
                                 "/accountz": self.accountz, "/accstatz": self.accstatz, "/subsz": self.subsz,
                                 "/subscriptionsz": self.subsz, "/routez": self.cluster,
                                 "/gatewayz": self.cluster, "/leafz": self.cluster, "/raftz": self.raftz,
                                 "/metrics": self.metrics},
                                broker.log)

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> int:
        return await self._http.listen(host, port, ssl_context)

    async def stop(self) -> None:
        await self._http.close()

    def _json(self, request: Request, body: dict[str, Any], status: int = 200, counted: str = "") -> Response:
        """The JSON answer, counted in /varz's http_req_stats under its path (`counted`: another's, as nats-server
        counts /subscriptionsz as /subsz)."""
        path = counted or request.path
        self.requests[path] = self.requests.get(path, 0) + 1
        return Response(json.dumps(body, indent=2).encode(), status)

    def _refused(self, request: Request, error: Exception) -> Response:
        """nats-server's 400 for a bad query: its error as plain text."""
        self.requests[request.path] = self.requests.get(request.path, 0) + 1
        return Response(str(error).encode(), 400, "text/plain; charset=utf-8")

    # -- endpoints ----------------------------------------------------------------------------------

    def healthz(self, request: Request) -> Response:
        try:
            options = healthz_query(request.query)
        except BadQuery as e:
            return self._refused(request, e)
        body = self.healthz_body(options)
        status = body["status_code"]
        if status == 200 or options.account or options.stream or options.consumer or options.details:
            del body["status_code"]  # the HTTP status says it (nats-server's); the $SYS answer has it in the body
        return self._json(request, body, status=status)

    def healthz_body(self, options: HealthzOptions = HealthzOptions()) -> dict[str, Any]:
        """nats-server's healthz on one server: 503 until the client listener accepts connections (while the
        store is recovered, in lame duck mode); then, unless `js_server_only` or `js_enabled_only`, that the
        `account`'s JetStream, its `stream` and that stream's `consumer` exist (404, naming what is missing)."""
        if options.stream and not options.account:
            return _health_error(400, "BAD_REQUEST", '"account" must not be empty when checking stream health', options)
        if options.consumer and not options.stream:
            return _health_error(400, "BAD_REQUEST", '"stream" must not be empty when checking consumer health',
                                 options)
        if self.broker.recovering:
            return _unavailable("JetStream is recovering its store")
        if self.broker.lame_duck_mode:
            return _unavailable("the server is in lame duck mode: clients are being let go")
        if not self.broker.serving:
            return _unavailable("the server is starting: clients are not accepted yet")
        js = self.broker.jetstream
        if options.js_server_only or options.js_enabled_only or js is None or not options.account:
            return {"status": "ok", "status_code": 200}
        missing = js.missing(options.account, options.stream, options.consumer)
        a, s, c = options.account, options.stream, options.consumer
        errors = {"account": f'JetStream account "{a}" not found',
                  "stream": f'JetStream stream "{s}" not found on account "{a}"',
                  "consumer": f'JetStream consumer "{c}" not found for stream "{s}" on account "{a}"'}
        if missing:
            return _health_error(404, missing.upper(), errors[missing], options)
        return {"status": "ok", "status_code": 200}

    def metrics(self, request: Request) -> Response:
        import prometheus_client

        from . import metrics

        self.requests[request.path] = self.requests.get(request.path, 0) + 1
        if self._metrics is None:
            self._metrics = metrics.registry(self.broker)
        return Response(prometheus_client.generate_latest(self._metrics), content_type=prometheus_client.CONTENT_TYPE_LATEST)

    def varz(self, request: Request) -> Response:
        return self._json(request, self.varz_body())

    def varz_body(self) -> dict[str, Any]:
        b, cfg, r = self.broker, self.broker.config, self.broker.router
        usage = resource.getrusage(resource.RUSAGE_SELF)
        body: dict[str, Any] = {
            "server_id": b.server_id,
            "server_name": b.server_name,
            "version": VERSION,
            "proto": 1,
            "go": f"python{'.'.join(map(str, sys.version_info[:3]))}",
            "host": cfg.host,
            "port": b.port,
            "auth_required": cfg.auth.required or None,
            "max_connections": cfg.max_connections,
            "ping_interval": int(cfg.ping_interval * _NS),
            "ping_max": cfg.ping_max,
            "http_host": cfg.http_host or cfg.host,
            "http_port": 0 if b.monitor_tls else b.http_port,
            "http_base_path": "",
            "https_port": b.http_port if b.monitor_tls else 0,
            "auth_timeout": cfg.auth.timeout,
            "max_control_line": cfg.max_control_line,
            "max_payload": cfg.max_payload,
            "max_pending": cfg.max_pending,
            "write_deadline": int(cfg.write_deadline * _NS),
            "cluster": {},
            "gateway": {},
            "leaf": {},
            "mqtt": {},
            "websocket": self._websocket_varz(),
        }
        if body["auth_required"] is None:
            del body["auth_required"]
        if b.tls is not None:  # as nats-server: tls_verify only when client certificates are required
            body.update(b.tls.info_fields(), tls_timeout=b.tls.settings.timeout)
            if b.tls.not_after is not None:
                body["tls_cert_not_after"] = b.tls.not_after.strftime("%Y-%m-%dT%H:%M:%SZ")
        if b.jetstream is not None:
            info = self._js_info()
            body["jetstream"] = {
                "config": info["config"],
                "stats": {k: info[k] for k in ("memory", "storage", "reserved_memory", "reserved_storage", "accounts", "ha_assets", "api")},
                "limits": info.get("limits", {}),
            }
        else:
            body["jetstream"] = {}
        now = time.time()
        body.update(
            start=rfc3339(self.started),
            now=rfc3339(now),
            uptime=go_duration(now - self.started),
            mem=usage.ru_maxrss * 1024,
            cores=os.cpu_count() or 1,
            cpu=0,
            connections=len(b.clients),
            total_connections=b.total_connections,
            routes=0,
            remotes=0,
            leafnodes=0,
            **b.traffic(),
            slow_consumers=r.slow_consumers,
            slow_consumer_stats={"clients": r.slow_consumers, "routes": 0, "gateways": 0, "leafs": 0},
            subscriptions=b.accounts.subscriptions(),
            http_req_stats=dict(self.requests),
        )
        if b.accounts.system is not None:
            body["system_account"] = b.accounts.system.name
        return body

    def connz(self, request: Request) -> Response:
        try:
            return self._json(request, self.connz_body(connz_query(request.query)))
        except BadQuery as e:
            return self._refused(request, e)

    def connz_body(self, options: ConnzOptions) -> dict[str, Any]:
        """/connz, and the system account's CONNZ requests (an account's or a connection's)."""
        b = self.broker
        want_subs, want_auth, offset, limit = options.subscriptions, options.auth, options.offset, options.limit
        # nats-server's total counts the account's connections (every one without `acc`), `cid` or not
        listed = [c for c in b.clients.values() if not options.account or c.account.name == options.account]
        conns = sorted((c for c in listed if self._connz_matches(c, options)), key=lambda c: c.cid)
        if options.sort == "uptime":  # nats-server's: the shortest first
            conns.reverse()
        elif options.sort == "rtt":  # the longest first
            conns.sort(key=lambda c: c.rtt_ns, reverse=True)
        now = time.time()
        mono = b.loop.time()
        out = []
        for c in conns:
            started = now - (mono - c.started)
            item: dict[str, Any] = {
                "cid": c.cid,
                "kind": "Client",
                "type": "websocket" if c.websocket else "nats",
                "ip": c.peer[0],
                "port": c.peer[1],
                "start": rfc3339(started),
                "uptime": go_duration(now - started),
                "pending_bytes": c.transport.get_write_buffer_size() if c.transport else 0,
                "in_msgs": c.in_msgs,
                "out_msgs": c.out_msgs,
                "in_bytes": c.in_bytes,
                "out_bytes": c.out_bytes,
                "subscriptions": len(c.subs),
            }
            if c.tls_first:
                item["tls_first"] = True
            for key in ("name", "lang", "version"):
                if getattr(c, key):
                    item[key] = getattr(c, key)
            item["rtt"] = duration_string(c.rtt_ns)  # always there, as nats-server's ("0s" before it is known)
            if want_auth:  # nats-server names the user, the account unless it is $G, and its name tag
                if c.user_name:
                    item["authorized_user"] = c.user_name
                if c.account is not b.accounts.global_account:
                    item["account"] = c.account.name
                item["name_tag"] = c.account.name
            if options.subscriptions_detail and c.subs:
                item["subscriptions_list_detail"] = [_sub_detail(c.cid, s) for s in c.subs.values()]
            elif want_subs and c.subs:
                item["subscriptions_list"] = sorted(s.subject for s in c.subs.values())
            out.append(item)
        field = _SORTS.get(options.sort)
        if field is not None:
            out.sort(key=lambda item: item[field], reverse=True)
        out = out[offset : offset + limit]
        body = {
            "server_id": b.server_id,
            "now": rfc3339(now),
            "num_connections": len(out),
            "total": len(listed),
            "offset": offset,
            "limit": limit,
            "connections": out,
        }
        # nats-server looks the account up (operator mode: registers it from its JWT); none: no server, no list
        if options.account and b.registered_account(options.account) is None:
            body.update(server_id="", connections=None)
        return body

    def jsz(self, request: Request) -> Response:
        try:
            return self._json(request, self.jsz_body(jsz_query(request.query)))
        except (BadQuery, NotLeader) as e:
            return self._refused(request, e)

    def jsz_body(self, options: JszOptions = JszOptions()) -> dict[str, Any]:
        """nats-server's /jsz (and JSZ request): the totals; the JetStream accounts' details with `accounts` (by
        name, `offset`/`limit` of them) or `account`'s alone, with their streams, consumers and configs as asked."""
        b = self.broker
        base: dict[str, Any] = {
            "memory": 0, "storage": 0, "reserved_memory": 0, "reserved_storage": 0, "accounts": 0, "ha_assets": 0,
            "api": {"level": 0, "total": 0, "errors": 0},
            "server_id": b.server_id,
            "now": rfc3339(time.time()),
        }
        if b.jetstream is None:
            if options.leader_only:
                raise NotLeader()
            base.update(disabled=True, config={"max_memory": 0, "max_storage": 0})
            base.update(streams=0, consumers=0, messages=0, bytes=0, total=0)
            return base
        info = self._js_info()
        body = {**base, **info, "server_id": b.server_id, "now": base["now"]}
        if options.raft:  # nats-server counts the streams and consumers this server leads: all of them here
            body.update({k: v for k, v in (("streams_leader", info["streams"]),
                                           ("consumers_leader", info["consumers"])) if v})
        names = sorted(b.jetstream.accounts)
        if options.account in names:
            names = [options.account]
        elif options.accounts:
            names = names[options.offset:options.offset + options.limit]
        else:
            names = []
        if names:
            body["account_details"] = [b.jetstream.account_detail(name, options.streams, options.consumers,
                                                                   options.config) for name in names]
        return body

    def subsz(self, request: Request) -> Response:
        try:
            return self._json(request, self.subsz_body(subsz_query(request.query)), counted="/subsz")
        except BadQuery as e:
            return self._refused(request, e)

    def subsz_body(self, options: SubszOptions) -> dict[str, Any]:
        """nats-server's Subsz (/subsz, SUBSZ requests): the sublists' counts (of one account when given), and with
        `subscriptions` the clients' subscriptions (those a message on `test` reaches). The sublists' cache
        statistics are zeros; jsbroker's internal subscriptions are not nats-server's, so counts differ."""
        subs = [(c, s) for c in sorted(self.broker.clients.values(), key=lambda c: c.cid) if c.connected
                and (not options.account or c.account.name == options.account) for s in c.subs.values()
                if not options.test or subject_matches(s.subject, options.test)]
        offset, limit = options.offset, options.limit
        sublists = [a.sublist.count for a in self.broker.accounts.by_name.values()
                    if not options.account or a.name == options.account]  # internal subscriptions too
        body: dict[str, Any] = {"server_id": self.broker.server_id, "now": rfc3339(time.time()),
                                "num_subscriptions": sum(sublists), "num_cache": 0, "num_inserts": 0,
                                "num_removes": 0, "num_matches": 0, "cache_hit_rate": 0.0, "max_fanout": 0,
                                "avg_fanout": 0.0, "total": len(subs) if options.subscriptions else 0,
                                "offset": offset, "limit": limit}
        if options.subscriptions:
            listed = []
            for c, s in subs[offset:offset + limit]:
                listed.append({"account": c.account.name, "account_tag": c.account.name, **_sub_detail(c.cid, s)})
            if listed:  # Go leaves an empty list out
                body["subscriptions_list"] = listed
        return body

    def cluster(self, request: Request) -> Response:
        """/routez, /gatewayz, /leafz: one server has no routes, gateways or leaf nodes. Their options are
        checked as nats-server checks them; they filter nothing here."""
        kind = request.path.strip("/")
        try:
            if kind == "leafz" or request.query.get("subs", "").lower() != "detail":  # /leafz has no detail
                query_bool(request.query, "subs")
            if kind == "gatewayz":
                query_bool(request.query, "accs")
        except BadQuery as e:
            return self._refused(request, e)
        return self._json(request, self.cluster_body(kind))

    def cluster_body(self, kind: str) -> dict[str, Any]:
        """nats-server's Routez, Gatewayz or Leafz of a server without any (also the system account's)."""
        b, now = self.broker, rfc3339(time.time())
        if kind == "routez":
            return {"server_id": b.server_id, "server_name": b.server_name, "now": now, "num_routes": 0, "routes": []}
        if kind == "gatewayz":
            return {"server_id": b.server_id, "now": now, "outbound_gateways": {}, "inbound_gateways": {}}
        return {"server_id": b.server_id, "now": now, "leafnodes": 0, "leafs": []}

    def raftz(self, request: Request) -> Response:
        self.requests[request.path] = self.requests.get(request.path, 0) + 1
        return Response(b"No Raft nodes registered", 404, "text/plain; charset=utf-8")  # nats-server's, one server

    def accountz(self, request: Request) -> Response:
        try:
            return self._json(request, self.broker.account_views.accountz(request.query.get("acc", "")))
        except UnknownAccount as e:
            return self._refused(request, e)

    def accstatz(self, request: Request) -> Response:
        try:
            unused = query_bool(request.query, "unused")
        except BadQuery as e:
            return self._refused(request, e)
        return self._json(request, self.broker.account_views.accstatz(unused=unused))

    @staticmethod
    def _connz_matches(c: Connection, options: ConnzOptions) -> bool:
        """nats-server's connz filters past the account: cid, user, MQTT client (jsbroker has none), and a
        subscription colliding with filter_subject."""
        return ((not options.cid or c.cid == options.cid) and (not options.user or c.user_name == options.user)
                and not options.mqtt_client and (not options.filter_subject or any(
                    subjects_overlap(options.filter_subject, s.subject) for s in c.subs.values())))

    def _websocket_varz(self) -> dict[str, Any]:
        """nats-server's /varz websocket section: its settings, empty ones left out (Go's omitempty)."""
        b = self.broker
        ws = b.config.websocket
        if ws is None:
            return {}
        body: dict[str, Any] = {
            "host": ws.host, "port": b.ws_port, "advertise": ws.advertise, "handshake_timeout":
            int(ws.handshake_timeout * _NS), "no_tls": ws.no_tls, "same_origin": ws.same_origin,
            "allowed_origins": list(ws.allowed_origins), "compression": ws.compression,
        }
        if b.ws_tls is not None and b.ws_tls.not_after is not None:
            body["tls_cert_not_after"] = b.ws_tls.not_after.strftime("%Y-%m-%dT%H:%M:%SZ")
        return {k: v for k, v in body.items() if v}

    def _js_info(self) -> dict[str, Any]:
        """The JetStream service's own view, completed with zero defaults for missing fields."""
        js = self.broker.js_settings
        info: dict[str, Any] = {
            "memory": 0, "storage": 0, "reserved_memory": 0, "reserved_storage": 0, "accounts": 1, "ha_assets": 0,
            "api": {"level": 5, "total": 0, "errors": 0},
            "config": {
                "max_memory": js.max_memory if js else 0,
                "max_storage": js.max_storage if js else 0,
                "store_dir": str(js.store_dir) if js and js.store_dir else "",
                "sync_interval": int((js.sync_interval if js else 0) * _NS),
            },
            "limits": {},
            "streams": 0, "consumers": 0, "messages": 0, "bytes": 0, "total": 1,
        }
        try:
            info.update(self.broker.jetstream.info())
        except Exception:
            self.broker.log.exception("jetstream info failed")
        return info
