"""INFO as nats-server 2.15.1 sends it: the same keys in the same order, and the same values where both servers
must agree, in every configuration the suite runs (plain, JetStream, names, auth of each kind, TLS, a domain),
for the first INFO, the one after the first PONG (`connect_info`) and lame duck mode's (`ldm`). A field a new
nats-server adds fails this test until jsbroker sends it (or it is named below as a known difference)."""

from __future__ import annotations

import base64
import json
import os
import signal
from pathlib import Path
from typing import Any

import nkeys
import pytest

from tests.broker.certs import Authority
from tests.broker.raw import Raw
from tests.servers import JSBROKER, KINDS, NATS_SERVER, launch

pytestmark = pytest.mark.xdist_group("broker-info")

ONLY_NATS_SERVER = {"git_commit"}  # jsbroker has no build commit to report (nats-server omits it then too)
PER_SERVER = {"server_id", "go", "xkey", "nonce", "client_id", "port"}  # each server's own values
SEED = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
NKEY = nkeys.from_seed(bytearray(SEED))


def _connect(info: dict[str, Any], credentials: dict[str, str]) -> bytes:
    options: dict[str, Any] = {"verbose": False, "pedantic": False, "protocol": 1, "headers": True, **credentials}
    if "nonce" in info:
        options["nkey"] = NKEY.public_key.decode()
        options["sig"] = base64.urlsafe_b64encode(NKEY.sign(info["nonce"].encode())).rstrip(b"=").decode()
    return b"CONNECT " + json.dumps(options).encode() + b"\r\nPING\r\n"


def _infos(kind: str, args: list[str], jetstream: bool, credentials: dict[str, str]) -> list[dict[str, Any]]:
    """The first INFO, the connect_info one after the first PONG, and lame duck mode's."""
    with launch(kind, jetstream=jetstream, extra_args=args) as handle, Raw(handle.port) as raw:
        first = json.loads(raw.info[5:])
        raw.send(_connect(first, credentials))
        assert raw.read_until(b"PONG\r\n") == b"PONG\r\n"
        after_pong = json.loads(raw.read_until(b"\r\n")[5:])
        assert handle.proc is not None
        handle.proc.send_signal(signal.SIGUSR2)
        lame_duck = json.loads(raw.read_until(b"\r\n")[5:])
        handle.kill()  # a lame duck ignores SIGTERM
    return [first, after_pong, lame_duck]


def _first_info(kind: str, args: list[str], jetstream: bool) -> dict[str, Any]:
    with launch(kind, jetstream=jetstream, extra_args=args) as handle, Raw(handle.port) as raw:
        return dict(json.loads(raw.info[5:]))


def _comparable(info: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    keys = [k for k in info if k not in ONLY_NATS_SERVER]
    values = {k: v for k, v in info.items() if k not in PER_SERVER | ONLY_NATS_SERVER or (k, v) == ("port", 4333)}
    if values["server_name"] == info["server_id"]:
        values["server_name"] = "<server_id>"  # the default name
    return keys, values


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("info")
    ca = Authority(folder)
    server = ca.issue("server", server=True)
    (folder / "nkey.json").write_text(json.dumps({"authorization": {"users": [{"nkey": NKEY.public_key.decode()}]}}))
    (folder / "domain.json").write_text(json.dumps({"jetstream": {"domain": "hub"}}))
    return {"ca": ca.ca, "cert": server.cert, "key": server.key, "nkey": folder / "nkey.json",
            "domain": folder / "domain.json"}


CONFIGURATIONS: dict[str, tuple[list[str], bool, dict[str, str]]] = {
    "core only": ([], False, {}),
    "jetstream": ([], True, {}),
    "named": (["-n", "edge-1"], True, {}),
    "user": (["--user", "u", "--pass", "p"], False, {"user": "u", "pass": "p"}),
    "token": (["--auth", "secret"], True, {"auth_token": "secret"}),
    "nkey": (["-c", "{nkey}"], False, {}),
    "domain": (["-c", "{domain}"], True, {}),
    "advertised": (["--client_advertise", "nats.example:4333"], False, {}),
    "tls": (["--tlscert", "{cert}", "--tlskey", "{key}"], False, {}),
    "tls verify": (["--tlsverify", "--tlscert", "{cert}", "--tlskey", "{key}", "--tlscacert", "{ca}"], False, {}),
}


@pytest.mark.parametrize("name", list(CONFIGURATIONS))
def test_info_as_nats_server_sends_it(name: str, files: dict[str, Path]) -> None:
    template, jetstream, credentials = CONFIGURATIONS[name]
    args = [a.format(**files) for a in template]
    if name.startswith("tls"):  # the INFO comes in clear text; the rest needs the handshake, as for any client
        out = {kind: [_comparable(_first_info(kind, args, jetstream))] for kind in KINDS}
    else:
        out = {kind: [_comparable(i) for i in _infos(kind, args, jetstream, credentials)] for kind in KINDS}
    assert out[JSBROKER] == out[NATS_SERVER]


def test_info_values_of_its_own(server_factory) -> None:
    """`go` names the runtime; `xkey` is a well-formed curve key; `git_commit` stays out."""
    handle = server_factory(JSBROKER, jetstream=False)
    info = json.loads(Raw(handle.port).info[5:])
    assert info["go"].startswith("cpython3.") or info["go"].startswith("pypy3.")
    assert "git_commit" not in info
    raw = base64.b32decode(info["xkey"] + "=" * (-len(info["xkey"]) % 8))
    assert (len(info["xkey"]), raw[0], len(raw)) == (56, 23 << 3, 35)
