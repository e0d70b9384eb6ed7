"""Handlers of the stream endpoints of `$JS.API` (INFO, STREAM.*, STREAM.MSG.*): `STREAM_HANDLERS`.

Each handler reads its request (api.py's typed getters), asks the service or a stream to act and returns
the response body; the router adds `type` and serialises errors. Checks run in nats-server's order so a
request that is wrong in several ways gets the same error from both servers.
"""

from __future__ import annotations

import base64
from typing import Any

from jsbroker.jetstream import errors, stream_config, times
from jsbroker.jetstream.api import Endpoint, Request
from jsbroker.jetstream.requests import get_bool, get_int, get_str, get_time
from jsbroker.jetstream.stream import Stream

NAMES_LIMIT = 1024
LIST_LIMIT = 256
SUBJECT_DETAILS_LIMIT = 100_000


def account_info(req: Request) -> dict[str, Any]:
    return req.js.account_info()


def stream_create(req: Request) -> dict[str, Any]:
    raw = req.json()
    name = req.token(4)
    if get_str(raw, "name") != name:
        raise errors.STREAM_MISMATCH()
    if "\\" in name or "/" in name:
        raise errors.STREAM_NAME_CONTAINS_PATH_SEPARATORS()
    if get_bool(raw, "sealed"):
        raise errors.STREAM_INVALID_CONFIG(err="stream configuration for create can not be sealed")
    if get_bool(raw, "mirror_direct") and raw.get("mirror") is None:
        raise errors.STREAM_INVALID_CONFIG(err="stream has no mirror but does have mirror direct")
    stream = req.js.create_stream(stream_config.parse(raw))
    return {**stream_info(stream, with_domain=False), "did_create": True}


def stream_update(req: Request) -> dict[str, Any]:
    cfg = stream_config.parse(req.json())
    if cfg.name != req.token(4):
        raise errors.STREAM_MISMATCH()
    stream = req.js.update_stream(cfg)
    return stream_info(stream, with_domain=True, domain=req.js.domain)


def stream_delete(req: Request) -> dict[str, Any]:
    req.require_empty()
    req.js.delete_stream(req.token(4))
    return {"success": True}


def stream_info_handler(req: Request) -> dict[str, Any]:
    raw = req.json_if_object()
    details = get_bool(raw, "deleted_details")
    subjects_filter = get_str(raw, "subjects_filter")
    offset = max(get_int(raw, "offset"), 0)
    stream = req.js.lookup(req.token(4))
    body: dict[str, Any] = {"total": 0, "offset": 0, "limit": 0}
    body.update(stream_info(stream, with_domain=True, domain=req.js.domain, deleted_details=details,
                            cluster=req.js.cluster_info()))
    if subjects_filter:
        counts = stream.store.subjects_state(subjects_filter)
        if counts:
            names = sorted(counts)
            offset = min(offset, len(names))
            page = names[offset:offset + SUBJECT_DETAILS_LIMIT]
            body.update(total=len(names), offset=offset, limit=SUBJECT_DETAILS_LIMIT)
            if page:
                body["state"]["subjects"] = {s: counts[s] for s in page}
    return body


def stream_names(req: Request) -> dict[str, Any]:
    raw = req.json_if_object()
    offset = max(get_int(raw, "offset"), 0)
    names = sorted(s.name for s in req.js.streams_matching(get_str(raw, "subject")))
    offset = min(offset, len(names))
    page = names[offset:offset + NAMES_LIMIT]
    return {"total": len(names), "offset": offset, "limit": NAMES_LIMIT, "streams": page or None}


def stream_list(req: Request) -> dict[str, Any]:
    raw = req.json_if_object()
    offset = max(get_int(raw, "offset"), 0)
    streams = sorted(req.js.streams_matching(get_str(raw, "subject")), key=lambda s: s.name)
    offset = min(offset, len(streams))
    infos = [stream_info(s, with_domain=True, domain=req.js.domain, dynamic_metadata=False)
             for s in streams[offset:offset + LIST_LIMIT]]
    return {"total": len(streams), "offset": offset, "limit": LIST_LIMIT, "streams": infos}


def stream_purge(req: Request) -> dict[str, Any]:
    raw = req.json_if_object()
    subject_filter = get_str(raw, "filter")
    seq = get_int(raw, "seq", kind="uint64")
    keep = get_int(raw, "keep", kind="uint64")
    if seq > 0 and keep > 0:
        raise errors.BAD_REQUEST()
    stream = req.js.lookup(req.token(4))
    return {"success": True, "purged": stream.purge(subject_filter, seq, keep)}


def msg_get(req: Request) -> dict[str, Any]:
    raw = req.require_body()
    seq = get_int(raw, "seq", kind="uint64")
    last_by_subj = get_str(raw, "last_by_subj")
    next_by_subj = get_str(raw, "next_by_subj")
    start_time = get_time(raw, "start_time")
    no_hdr = get_bool(raw, "no_hdr")
    if get_int(raw, "batch") > 0 or get_int(raw, "max_bytes") > 0:
        raise errors.BAD_REQUEST()
    if ((seq > 0 and last_by_subj) or (seq == 0 and not last_by_subj and not next_by_subj and start_time is None)
            or (seq > 0 and start_time is not None) or (start_time is not None and last_by_subj)
            or (last_by_subj and next_by_subj)):
        raise errors.BAD_REQUEST()
    stream = req.js.lookup(req.token(5))
    msg = stream.get_msg(seq, last_by_subj, next_by_subj, start_time)
    if msg is None:
        raise errors.NO_MESSAGE_FOUND()
    message: dict[str, Any] = {"subject": msg.subject, "seq": msg.seq}
    if msg.hdr and not no_hdr:
        message["hdrs"] = base64.b64encode(msg.hdr).decode()
    if msg.data:
        message["data"] = base64.b64encode(msg.data).decode()
    message["time"] = times.rfc3339(msg.ts)
    return {"message": message}


def msg_delete(req: Request) -> dict[str, Any]:
    raw = req.require_body()
    seq = get_int(raw, "seq", kind="uint64")
    no_erase = get_bool(raw, "no_erase")
    stream = req.js.lookup(req.token(5))
    stream.delete_msg(seq, erase=not no_erase)
    return {"success": True}


def stream_info(stream: Stream, *, with_domain: bool, domain: str | None = None, deleted_details: bool = False,
                dynamic_metadata: bool = True, cluster: dict[str, Any] | None = None) -> dict[str, Any]:
    """A StreamInfo body: config, created, state (+cluster, domain as nats-server sends them)."""
    info: dict[str, Any] = {
        "config": stream.config.to_json(dynamic_metadata=dynamic_metadata),
        "created": times.rfc3339(stream.created_ns),
        "state": stream.info_state(deleted_details),
    }
    if cluster:
        info["cluster"] = cluster
    if stream.source_info is not None:
        info.update(stream.source_info())
    if with_domain and domain:
        info["domain"] = domain
    info["ts"] = times.rfc3339(times.now_ns())
    return info


_PAGED = {"total": 0, "offset": 0, "limit": 0}

STREAM_HANDLERS: list[Endpoint] = [
    Endpoint("$JS.API.INFO", "account_info_response", account_info),
    Endpoint("$JS.API.STREAM.CREATE.*", "stream_create_response", stream_create),
    Endpoint("$JS.API.STREAM.UPDATE.*", "stream_update_response", stream_update),
    Endpoint("$JS.API.STREAM.DELETE.*", "stream_delete_response", stream_delete),
    Endpoint("$JS.API.STREAM.INFO.*", "stream_info_response", stream_info_handler, _PAGED),
    Endpoint("$JS.API.STREAM.NAMES", "stream_names_response", stream_names, {**_PAGED, "streams": None}),
    Endpoint("$JS.API.STREAM.LIST", "stream_list_response", stream_list, {**_PAGED, "streams": []}),
    Endpoint("$JS.API.STREAM.PURGE.*", "stream_purge_response", stream_purge, {"purged": 0}),
    Endpoint("$JS.API.STREAM.MSG.GET.*", "stream_msg_get_response", msg_get),
    Endpoint("$JS.API.STREAM.MSG.DELETE.*", "stream_msg_delete_response", msg_delete),
]
