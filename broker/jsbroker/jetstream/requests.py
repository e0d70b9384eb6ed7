"""Reading `$JS.API` requests (pure): the JSON body, typed reads of its fields, and the API level a
request may require (`Nats-Required-Api-Level`). Unknown fields are ignored so clients of every version
work; a field of the wrong JSON type is 10025, as Go's decoder answers. Used by the API handlers and by
everything else that reads a request body (stream/consumer configs, DIRECT.GET, MSG.NEXT).
"""

from __future__ import annotations

import json
from typing import Any

from jsbroker.jetstream import errors, headers, times

API_LEVEL = 5  # JSApiLevel of nats-server 2.15


def api_level_supported(hdr: bytes) -> bool:
    """Whether the request's `Nats-Required-Api-Level` (if any) is one we serve; a value that is not an
    integer is not served. The API, DIRECT.GET and MSG.NEXT all answer requests through this one check."""
    level = headers.get(hdr, headers.REQUIRED_API_LEVEL) if hdr else None
    if not level:
        return True
    try:
        return int(level) <= API_LEVEL
    except ValueError:
        return False


_INT_RANGES = {"int": (-(2**63), 2**63 - 1), "int32": (-(2**31), 2**31 - 1), "uint64": (0, 2**64 - 1)}


def parse_json(body: bytes) -> dict[str, Any]:
    if not body.strip():
        return {}
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.INVALID_JSON(err=str(exc)) from None
    if value is None:  # Go decodes `null` into an untouched request
        return {}
    if not isinstance(value, dict):
        raise errors.INVALID_JSON(err=f"json: cannot unmarshal {errors.json_kind(value)} into a request object")
    return value


# Typed reads of request fields. null reads as the default (Go leaves the zero value); a value of the
# wrong JSON type is rejected with 10025, as Go's decoder does.


def get_int(raw: dict[str, Any], key: str, default: int = 0, kind: str = "int") -> int:
    value = raw.get(key)
    if value is None:
        return default
    low, high = _INT_RANGES[kind]
    if type(value) is not int or not low <= value <= high:
        raise _type_error(key, value, kind)
    return value


def get_str(raw: dict[str, Any], key: str, default: str = "") -> str:
    value = raw.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise _type_error(key, value, "string")
    return value


def get_bool(raw: dict[str, Any], key: str, default: bool = False) -> bool:
    value = raw.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _type_error(key, value, "bool")
    return value


def get_str_list(raw: dict[str, Any], key: str) -> list[str]:
    value = raw.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(v is None or isinstance(v, str) for v in value):
        raise _type_error(key, value, "[]string")
    return [v or "" for v in value]


def get_str_map(raw: dict[str, Any], key: str) -> dict[str, str]:
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(v is None or isinstance(v, str) for v in value.values()):
        raise _type_error(key, value, "map[string]string")
    return {k: v or "" for k, v in value.items()}


def get_object(raw: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _type_error(key, value, "object")
    return value


def get_time(raw: dict[str, Any], key: str) -> int | None:
    """An RFC 3339 time field in ns (None when absent)."""
    text = get_str(raw, key)
    if not text:
        return None
    try:
        return times.parse_rfc3339(text)
    except ValueError:
        raise errors.INVALID_JSON(err=f"parsing time {json.dumps(text)} as RFC 3339") from None


def _type_error(key: str, value: object, wanted: str) -> errors.ApiError:
    shown = f"number {value}" if errors.json_kind(value) == "number" else errors.json_kind(value)
    return errors.INVALID_JSON(err=f"json: cannot unmarshal {shown} into Go struct field .{key} of type {wanted}")
