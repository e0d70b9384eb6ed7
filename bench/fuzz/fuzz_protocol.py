"""Fuzz the NATS protocol parser (jsbroker.protocol) with atheris.

Properties checked on every input:
- only ProtocolError ever escapes `feed` (anything else would cost a connection through a bug);
- the parser is chunking-invariant: the bytes fed at once and fed in pieces (cut where the input says)
  produce the same operations and the same error.

    pip install atheris
    python bench/fuzz/fuzz_protocol.py bench/fuzz/corpus/protocol -max_total_time=300
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "broker"))

with atheris.instrument_imports():
    from jsbroker.protocol import Parser, ProtocolError


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    def on_msg(self, subject: bytes, reply: bytes | None, hdr_len: int, data: bytes) -> None:
        self.events.append(("msg", subject, reply, hdr_len, data))

    def on_sub(self, subject: bytes, queue: bytes | None, sid: bytes) -> None:
        self.events.append(("sub", subject, queue, sid))

    def on_unsub(self, sid: bytes, max_msgs: int) -> None:
        self.events.append(("unsub", sid, max_msgs))

    def on_ping(self) -> None:
        self.events.append(("ping",))

    def on_pong(self) -> None:
        self.events.append(("pong",))

    def on_connect(self, options: bytes) -> None:
        self.events.append(("connect", options))


def parse(chunks: list[bytes]) -> list[tuple[object, ...]]:
    recorder = Recorder()
    parser = Parser(recorder, max_control_line=256, max_payload=4096)
    try:
        for chunk in chunks:
            parser.feed(chunk)
    except ProtocolError as exc:
        recorder.events.append(("error", exc.err))
    return recorder.events


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    cuts = sorted(fdp.ConsumeIntInRange(0, 4096) for _ in range(fdp.ConsumeIntInRange(0, 8)))
    body = fdp.ConsumeBytes(fdp.remaining_bytes())
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)]) if a < b]
    whole = parse([body])
    split = parse(pieces)
    if whole != split:
        raise AssertionError(f"chunking changed the result:\n{body!r}\ncuts {cuts}\n{whole}\n{split}")


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
