"""Operator-mode material for tests: nkeys, JWTs and .creds files as `nsc` makes them.

`nsc` (github.com/nats-io/nsc/v2) cannot be built here (the Go module proxy refuses the module), so this is a small
test-only encoder of nats-io/jwt v2's format: header `{"typ":"JWT","alg":"ed25519-nkey"}`, a payload with `jti`
(base32 of the SHA-512/256 of the claims with an empty jti), `iat`, `iss`, `sub`, `name` and the `nats` claims, and
the issuer's Ed25519 signature; keys are encoded as nkeys does and checked by the `nkeys` package (nats-py's),
which also signs the nonce for nats-py. Two judges check the result: nats-io/jwt v2 itself (the library nsc makes
JWTs with), whose `Decode` and `Validate` find no fault in the JWTs made here for the operator-mode tests but the
faults those tests make on purpose (tests/broker/test_nats_jwt.py, through the Go program tests/broker/jwtgen/,
which also makes material with nats-io/jwt's own encoders that jsbroker and nats-server serve alike); and
nats-server 2.15.1, which the differential tests give the same JWTs.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from jsbroker.nkeys import PREFIXES, _crc16

_SEED = 18 << 3


def _b32(raw: bytes) -> str:
    return base64.b32encode(raw + _crc16(raw).to_bytes(2, "little")).decode().rstrip("=")


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@dataclass(frozen=True)
class Key:
    """An nkey pair of one kind (operator, account, user)."""

    seed: str
    public: str

    def sign(self, data: bytes) -> bytes:
        return bytes(nkeys.from_seed(self.seed.encode()).sign(data))


def new_key(kind: str) -> Key:
    raw = os.urandom(32)
    prefix = PREFIXES[kind]
    seed = _b32(bytes([_SEED | prefix >> 5, (prefix & 31) << 3]) + raw)
    public = Ed25519PrivateKey.from_private_bytes(raw).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    key = Key(seed, _b32(bytes([prefix]) + public))
    assert nkeys.from_seed(seed.encode()).public_key.decode() == key.public  # the nkeys package agrees
    return key


def encode(signer: Key, subject: str, name: str, nats: dict[str, Any], **standard: Any) -> str:
    """A JWT signed by `signer` (standard claims such as exp, nbf, iat may be given)."""
    claims: dict[str, Any] = {"jti": "", "iat": int(time.time()), "iss": signer.public, "name": name,
                              "sub": subject, **standard, "nats": {**nats, "version": 2}}
    claims["jti"] = base64.b32encode(hashlib.new("sha512_256", json.dumps(claims).encode()).digest()).decode().rstrip("=")
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    payload = _b64(json.dumps(claims).encode())
    return f"{header}.{payload}.{_b64(signer.sign(f'{header}.{payload}'.encode()))}"


def operator_jwt(op: Key, name: str = "OP", signing_keys: tuple[Key, ...] = (), system_account: str = "",
                 **nats: Any) -> str:
    body = {"type": "operator", "signing_keys": [k.public for k in signing_keys], **nats}
    if system_account:
        body["system_account"] = system_account
    return encode(op, op.public, name, body)


UNLIMITED = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True, "conn": -1,
             "leaf": -1}


def account_jwt(signer: Key, account: Key, name: str, *, limits: dict[str, Any] | None = None,
                signing_keys: list[Any] | None = None, revocations: dict[str, int] | None = None,
                default_permissions: dict[str, Any] | None = None, exports: list[dict[str, Any]] | None = None,
                imports: list[dict[str, Any]] | None = None, **standard: Any) -> str:
    body: dict[str, Any] = {"type": "account", "limits": {**UNLIMITED, **(limits or {})}}
    if exports:
        body["exports"] = exports
    if imports:
        body["imports"] = imports
    if default_permissions:
        body["default_permissions"] = default_permissions
    if signing_keys:
        body["signing_keys"] = signing_keys
    if revocations:
        body["revocations"] = revocations
    return encode(signer, account.public, name, body, **standard)


def user_jwt(signer: Key, user: Key, name: str, *, issuer_account: str = "", nats: dict[str, Any] | None = None,
             **standard: Any) -> str:
    body: dict[str, Any] = {"type": "user", "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
                            **(nats or {})}
    if issuer_account:
        body["issuer_account"] = issuer_account
    return encode(signer, user.public, name, body, **standard)


def activation_jwt(exporter: Key, importer: Key, subject: str, kind: str, **standard: Any) -> str:
    """An exporter's activation token: `importer` may import `subject` (kind "service" or "stream")."""
    return encode(exporter, importer.public, subject, {"type": "activation", "subject": subject, "kind": kind},
                  **standard)


def creds(token: str, user: Key) -> str:
    """A .creds file in nsc's layout."""
    return (f"-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n"
            "************************* IMPORTANT *************************\n"
            "NKEY Seed printed below can be used to sign and prove identity.\n"
            "NKEYs are sensitive and should be treated as secrets.\n\n"
            f"-----BEGIN USER NKEY SEED-----\n{user.seed}\n------END USER NKEY SEED------\n\n"
            "*************************************************************\n")


def write_creds(directory: Path, name: str, token: str, user: Key) -> Path:
    path = directory / f"{name}.creds"
    path.write_text(creds(token, user))
    return path


@dataclass(frozen=True)
class CurveKey:
    """An xkey (x25519) pair as nkeys makes it: `public` is the "X..." text configs and headers carry."""

    private: Any  # nacl.public.PrivateKey
    public: str


def new_curve_key() -> CurveKey:
    import nacl.public

    from jsbroker.nkeys import curve_public_key

    private = nacl.public.PrivateKey.generate()
    return CurveKey(private, curve_public_key(bytes(private.public_key)))


def authorization_response(signer: Key, user_nkey: str, server_id: str, *, user_jwt: str = "", error: str = "",
                           **standard: Any) -> str:
    """The auth callout service's answer (nats-io/jwt's AuthorizationResponseClaims): `sub` is the user key the
    request named, `aud` the server's id, `nats.jwt` the user's claims or `nats.error` why not."""
    body: dict[str, Any] = {"type": "authorization_response"}
    if user_jwt:
        body["jwt"] = user_jwt
    if error:
        body["error"] = error
    return encode(signer, user_nkey, "", body, aud=server_id, **standard)
