"""The API error table: unique codes and names, placeholders filled, the wire shape nats-py accepts."""

import pytest
from nats.js.errors import BadRequestError

from jsbroker.jetstream import errors


def test_error_codes_and_names_are_unique():
    codes = [kind.err_code for kind in errors.ALL]
    assert len(codes) == len(set(codes)), sorted(c for c in codes if codes.count(c) > 1)
    names = [kind.name for kind in errors.ALL]
    assert all(names) and len(names) == len(set(names))


def test_every_stream_error_of_the_wire_reference_is_present():
    wanted = {10003: 400, 10008: 503, 10025: 400, 10037: 404, 10038: 400, 10039: 503, 10043: 400,
              10052: 500, 10054: 400, 10056: 400, 10057: 500, 10058: 400, 10059: 404, 10060: 400,
              10065: 400, 10070: 400, 10071: 400, 10077: 503, 10109: 400, 10110: 500, 10111: 500,
              10158: 409, 10164: 400, 10165: 400, 10166: 400, 10185: 412, 10204: 400}
    assert {c: errors.BY_ERR_CODE[c].code for c in wanted} == wanted


def test_placeholders_are_filled_and_the_shape_is_what_nats_py_parses():
    err = errors.SEQUENCE_NOT_FOUND(seq=7)
    assert err.to_dict() == {"code": 400, "err_code": 10043, "description": "sequence 7 not found"}
    with pytest.raises(BadRequestError) as raised:
        BadRequestError.from_error(err.to_dict())
    parsed = raised.value
    assert (parsed.code, parsed.err_code, parsed.description) == (400, 10043, "sequence 7 not found")
    assert errors.STREAM_INVALID_CONFIG(err="bad").description == "bad"
    assert errors.STREAM_NOT_FOUND().description == "stream not found"
