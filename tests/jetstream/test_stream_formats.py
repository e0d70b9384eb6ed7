"""Pure formats the stream layer uses: header blocks and RFC 3339 / Go-duration times."""

import pytest

from jsbroker.jetstream import headers, times


def test_get_finds_exact_keys_only():
    block = b"NATS/1.0\r\nX-Nats-Msg-Id: no\r\nNats-Msg-Id:  abc\r\nnats-msg-id: lower\r\n\r\n"
    assert headers.get(block, "Nats-Msg-Id") == "abc"
    assert headers.get(block, "Missing") is None
    assert headers.get(b"", "Nats-Msg-Id") is None


def test_get_drops_only_the_spaces_before_a_value():  # as nats-server's sliceHeader
    assert headers.get(b"NATS/1.0\r\nK:  a b \t\r\n\r\n", "K") == "a b \t"
    assert headers.get(b"NATS/1.0\r\nK:\ta\r\n\r\n", "K") == "\ta"


def test_parse_and_build_round_trip_with_repeated_keys_and_status():
    block = headers.build([("A", "1"), ("A", "2"), ("B", "x y")], status=408, description="Request Timeout")
    assert block == b"NATS/1.0 408 Request Timeout\r\nA: 1\r\nA: 2\r\nB: x y\r\n\r\n"
    assert headers.parse(block) == (408, "Request Timeout", [("A", "1"), ("A", "2"), ("B", "x y")])
    assert headers.parse(b"garbage") == (0, "", [])


def test_append_keeps_original_headers_first():
    assert headers.append(b"NATS/1.0\r\nA: 1\r\n\r\n", [("B", "2")]) == b"NATS/1.0\r\nA: 1\r\nB: 2\r\n\r\n"
    assert headers.append(b"", [("B", "2")]) == b"NATS/1.0\r\nB: 2\r\n\r\n"


def test_rfc3339_nanoseconds_zero_time_and_round_trip():
    assert times.rfc3339(0) == "0001-01-01T00:00:00Z"
    assert times.rfc3339(1_795_311_356_795_969_422) == "2026-11-22T01:35:56.795969422Z"
    assert times.rfc3339(1_795_311_356_500_000_000) == "2026-11-22T01:35:56.5Z"
    assert times.parse_rfc3339("2026-11-22T01:35:56.795969422Z") == 1_795_311_356_795_969_422
    assert times.parse_rfc3339("2026-11-22T02:35:56+01:00") == 1_795_311_356_000_000_000
    assert times.rfc3339(1_795_311_356_000_000_000, 3600) == "2026-11-22T02:35:56+01:00"
    assert times.rfc3339(1_795_311_356_000_000_000, -(4 * 3600 + 56 * 60 + 2)) == "2026-11-21T20:39:54-04:56"
    assert times.parse_rfc3339(times.ZERO_TIME) == 0
    with pytest.raises(ValueError):
        times.parse_rfc3339("yesterday")


@pytest.mark.parametrize("text, ns", [("0", 0), ("1s", 10**9), ("1h2m3.5s", 3_723_500_000_000),
                                      ("250ms", 250_000_000), ("-1.5us", -1500), ("2m", 120 * 10**9)])
def test_go_durations(text, ns):
    assert times.parse_duration(text) == ns


@pytest.mark.parametrize("text", ["", "5", "1x", "s", "1s2", "1s ", " 1s"])
def test_bad_go_durations(text):
    with pytest.raises(ValueError):
        times.parse_duration(text)


def test_duration_strings_as_go_prints_them():
    assert [times.format_duration(n) for n in (0, 1_500_000, 30 * 10**9, 60 * 10**9, 3_723_500_000_000)] == [
        "0s", "1.5ms", "30s", "1m0s", "1h2m3.5s"]
