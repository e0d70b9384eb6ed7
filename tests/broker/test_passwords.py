"""Hashed secrets as nats-server takes them (`nats server passwd` makes them): a bcrypt password or token in the
config is compared with bcrypt, a client that sends the hash itself is refused, and a plain-text password
draws nats-server's start-up warning. Each case against both servers with the same config file."""

from __future__ import annotations

from pathlib import Path

import bcrypt
import pytest

from jsbroker import passwords
from tests.broker.raw import Raw
from tests.servers import JSBROKER, KINDS, NATS_SERVER, launch

HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()  # cost 4: fast, and a valid nats-server hash
WARNING = "[WRN] Plaintext passwords detected, use nkeys or bcrypt"

CONFIGS = {
    "hashed user": f'authorization {{ users [ {{user: a, password: "{HASH}"}} ] }}\n',
    "hashed and plain users": f'authorization {{ users [ {{user: a, password: "{HASH}"}}, {{user: b, password: p}} ] }}\n',
    "hashed single user": f'authorization {{ user: a, password: "{HASH}" }}\n',
    "hashed token": f'authorization {{ token: "{HASH}" }}\n',
    "hashed account user": f'accounts {{ A {{ users [ {{user: a, password: "{HASH}"}} ] }} }}\n',
}
CONNECTS = {
    "right password": b'{"verbose":false,"user":"a","pass":"s3cret"}',
    "wrong password": b'{"verbose":false,"user":"a","pass":"s3cre"}',
    "the hash itself": b'{"verbose":false,"user":"a","pass":"' + HASH.encode() + b'"}',
    "right token": b'{"verbose":false,"auth_token":"s3cret"}',
    "the plain user": b'{"verbose":false,"user":"b","pass":"p"}',
}


def _outcome(port: int, connect: bytes) -> str:
    with Raw(port) as raw:
        raw.send(b"CONNECT " + connect + b"\r\nPING\r\n")
        answer = raw.read_until(b"\r\n")
    return "admitted" if answer.startswith(b"PONG") else answer.decode().strip()


def _run(kind: str, config: Path) -> tuple[dict[str, str], bool]:
    with launch(kind, jetstream=False, extra_args=["-c", str(config)]) as handle:
        outcomes = {name: _outcome(handle.port, connect) for name, connect in CONNECTS.items()}
        warned = WARNING in handle.log_path.read_text()
    return outcomes, warned


@pytest.mark.parametrize("case", CONFIGS)
def test_hashed_secrets_like_nats_server(tmp_path: Path, case: str) -> None:
    config = tmp_path / "server.conf"
    config.write_text(CONFIGS[case])
    seen = {kind: _run(kind, config) for kind in KINDS}
    assert seen[JSBROKER] == seen[NATS_SERVER]
    outcomes, warned = seen[JSBROKER]
    assert warned == (case == "hashed and plain users")
    assert outcomes["the hash itself"] == "-ERR 'Authorization Violation'"
    assert (outcomes["right token"] == "admitted") == (case == "hashed token")
    assert (outcomes["right password"] == "admitted") == (case != "hashed token")


def test_what_counts_as_a_hash() -> None:
    assert passwords.is_bcrypt(HASH) and passwords.is_bcrypt("$2y$10$abc")
    assert not passwords.is_bcrypt("$2q$10$abc") and not passwords.is_bcrypt("$2a$1$abc") and not passwords.is_bcrypt("p")
    assert passwords.matches("s3cret", HASH) and not passwords.matches(HASH, HASH)
    assert not passwords.matches("x", "$2a$10$notahash")  # a malformed hash never matches, never raises
    assert passwords.plaintext([None, HASH, ""]) and not passwords.plaintext([None, HASH])
