"""An auth callout service as nats-server's examples write one: a nats-py client (an `auth_users` user) that
answers `$SYS.REQ.USER.AUTH` requests with authorization response JWTs; `decide` builds each answer from the
request's claims. With an xkey, requests arrive sealed to it (the server's xkey in `Nats-Server-Xkey`) and
answers go back sealed to the server's."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any, Awaitable, Callable

import nats
from nats.aio.msg import Msg

from jsbroker.nkeys import curve_public_key
from tests.broker.jwt_material import CurveKey, authorization_response, Key, user_jwt

SUBJECT = "$SYS.REQ.USER.AUTH"
XKEY_HEADER = "Nats-Server-Xkey"
XKEY_VERSION = b"xkv1"

Decide = Callable[[dict[str, Any]], str]  # request claims -> response JWT


def claims_of(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def _curve_raw(text: str) -> bytes:
    raw = base64.b32decode(text + "=" * (-len(text) % 8))
    assert curve_public_key(raw[1:33]) == text, f"{text} is not an xkey"
    return raw[1:33]


def seal(own: CurveKey, recipient: str, data: bytes) -> bytes:
    """nkeys' Seal: "xkv1", the 24-byte nonce, then the box."""
    import nacl.public
    import nacl.utils

    box = nacl.public.Box(own.private, nacl.public.PublicKey(_curve_raw(recipient)))
    return XKEY_VERSION + bytes(box.encrypt(data, nacl.utils.random(24)))


def unseal(own: CurveKey, sender: str, data: bytes) -> bytes:
    import nacl.public

    assert data.startswith(XKEY_VERSION), data[:8]
    return bytes(nacl.public.Box(own.private, nacl.public.PublicKey(_curve_raw(sender))).decrypt(data[4:]))


def grant(issuer: Key, request: dict[str, Any], account: str, permissions: dict[str, Any] | None = None,
          **user_standard: Any) -> str:
    """An admitting answer: a user JWT for the requested user key, placed in `account` (config mode's `aud`)."""
    nats_claims = request["nats"]
    user = user_jwt(issuer, Key("", nats_claims["user_nkey"]), nats_claims["connect_opts"].get("user", ""),
                    nats=permissions, aud=account, **user_standard)
    return authorization_response(issuer, nats_claims["user_nkey"], nats_claims["server_id"]["id"], user_jwt=user)


def refuse(issuer: Key, request: dict[str, Any], error: str) -> str:
    nats_claims = request["nats"]
    return authorization_response(issuer, nats_claims["user_nkey"], nats_claims["server_id"]["id"], error=error)


class CalloutService:
    def __init__(self, url: str, user: str, password: str, decide: Decide, xkey: CurveKey | None = None,
                 before: Callable[[dict[str, Any]], Awaitable[None]] | None = None, tls: Any = None) -> None:
        """`before(request)` is awaited before answering (a test holds an answer with it); `tls`: an SSLContext."""
        self.url, self.user, self.password, self.decide, self.xkey = url, user, password, decide, xkey
        self.before, self.tls = before, tls
        self.requests: list[dict[str, Any]] = []  # every request's claims, in order
        self.nc: Any = None
        self._answering: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> "CalloutService":
        self.nc = await nats.connect(self.url, user=self.user, password=self.password, allow_reconnect=False,
                                     tls=self.tls)
        await self.nc.subscribe(SUBJECT, cb=self._answer)
        await self.nc.flush()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.nc.close()

    async def _answer(self, msg: Msg) -> None:
        """Each request in its own task: nats-py runs one subscription's callbacks one after the other, and an
        answer held back must not hold the others."""
        task = asyncio.create_task(self._reply(msg))
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)

    async def _reply(self, msg: Msg) -> None:
        data, server_xkey = msg.data, (msg.headers or {}).get(XKEY_HEADER)
        if self.xkey is not None:
            assert server_xkey, "a request to an xkey service is sealed and names the server's xkey"
            data = unseal(self.xkey, server_xkey, data)
        request = claims_of(data.decode())
        self.requests.append(request)
        if self.before is not None:
            await self.before(request)
        answer = self.decide(request).encode()
        if self.xkey is not None and server_xkey:
            answer = seal(self.xkey, server_xkey, answer)
        await msg.respond(answer)
