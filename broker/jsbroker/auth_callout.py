"""Auth callout (`authorization { auth_callout {...} }`), as nats-server 2.15.1 does it (ADR-26).

A client that is not one of `auth_users` is not admitted by its CONNECT alone: the server publishes an
authorization request on `$SYS.REQ.USER.AUTH` in the callout account (a JWT signed by the server's nkey, whose
public key is the server id: the client's address and CONNECT options, and a fresh user nkey the answer must
be for), sealed to the service's xkey when one is configured. The service answers with an authorization
response JWT signed by the issuer: `jwt` (user claims for that user nkey, placed by their `aud` in an account,
with permissions) or `error`. The answer is checked in nats-server's order and with its messages (they are its
warning lines); no answer within the authorization timeout refuses the client too.

`request` and `check_response` are pure (bytes in, bytes or a verdict out); `PendingCallout` is the round
trip: the reply subscription, the request's publish and the timer, in the callout account's subject space.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from dataclasses import dataclass
from typing import Any, Callable, Collection, Protocol

from .claims import JwtError, UserClaims, decode_generic, decode_user, encode, user_issues
from .config import CalloutSettings, Permissions, SubjectRules
from .nkeys import encoded_public_key, is_public_key, public_key
from .operator_auth import permissions_of
from .sublist import Sublist, Subscription

SUBJECT = "$SYS.REQ.USER.AUTH"
AUDIENCE = "nats-authorization-request"  # the request's `aud`
XKEY_HEADER = "Nats-Server-Xkey"  # a sealed request names the server's xkey here: the answer is sealed to it
_SEALED = b"xkv1"  # nkeys' version prefix of a sealed message, before its 24-byte nonce
_NONCE_SIZE = 24


class CalloutRefused(Exception):
    """The service's answer does not admit the client; the message is nats-server's warning line."""


class ServerKeys:
    """The server's nkey (its public key is the server id; it signs requests) and its x25519 key (requests are
    sealed with it). Made only when a callout is configured: PyNaCl's import and key generation cost time."""

    def __init__(self) -> None:
        import nacl.public
        import nacl.signing

        self._signing = nacl.signing.SigningKey.generate()
        self._curve = nacl.public.PrivateKey.generate()
        self.server_id = encoded_public_key(bytes(self._signing.verify_key), "server")
        self.xkey = encoded_public_key(bytes(self._curve.public_key), "curve")

    def sign(self, data: bytes) -> bytes:
        return bytes(self._signing.sign(data).signature)

    def _box(self, other: str) -> Any:
        import nacl.public

        return nacl.public.Box(self._curve, nacl.public.PublicKey(public_key(other, "curve")))

    def seal(self, data: bytes, recipient: str) -> bytes:
        """nkeys' Seal: the version, a random nonce, the Curve25519/XSalsa20/Poly1305 box."""
        return _SEALED + bytes(self._box(recipient).encrypt(data, os.urandom(_NONCE_SIZE)))

    def unseal(self, data: bytes, sender: str) -> bytes:
        import nacl.exceptions

        if not data.startswith(_SEALED) or len(data) < len(_SEALED) + _NONCE_SIZE:
            raise ValueError("invalid encrypted message")  # nkeys' ErrInvalidEncrypted
        try:
            return bytes(self._box(sender).decrypt(data[len(_SEALED):]))
        except nacl.exceptions.CryptoError:
            raise ValueError("could not decrypt message") from None  # nkeys' ErrCouldNotDecrypt


@dataclass(frozen=True)
class CalloutClient:
    """What a request tells the service about the client (jwt's ClientInformation, ConnectOptions, ClientTLS)."""

    host: str
    cid: int
    connect: dict[str, Any]  # the CONNECT options
    nonce: str  # the INFO nonce, sent along when CONNECT signed it
    websocket: bool = False
    tls: dict[str, Any] | None = None  # version, cipher, certs: the TLS connection's



def raw_user(opts: dict[str, Any]) -> str:
    """nats-server's getRawAuthUser of a CONNECT: the user name, else the nkey, else the token's stand-in."""
    for key, stand_in in (("user", ""), ("nkey", ""), ("auth_token", "[REDACTED]")):
        value = opts.get(key)
        if isinstance(value, str) and value:
            return stand_in or value
    return ""


def client_tls(tls: ssl.SSLObject) -> dict[str, Any]:
    """The request's client_tls: the TLS version as nats-server names it ("1.3"), the suite, and the client's
    certificate when it gave one (Python 3.11 has no verified chain to give as nats-server's verified_chains)."""
    cipher = tls.cipher()
    out: dict[str, Any] = {"version": (tls.version() or "").removeprefix("TLSv"), "cipher": cipher[0] if cipher else ""}
    cert = tls.getpeercert(binary_form=True)
    if cert:
        out["certs"] = [ssl.DER_cert_to_PEM_cert(cert)]
    return out


def _str(opts: dict[str, Any], key: str) -> str:
    value = opts.get(key)
    return value if isinstance(value, str) else ""


def _omit_empty(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v not in ("", 0, None)}


def request(keys: ServerKeys, settings: CalloutSettings, user_nkey: str, server: dict[str, str], client: CalloutClient,
            now: float, timeout: float) -> tuple[bytes, bytes]:
    """The request's header block (b"" unless sealed) and payload. `server`: name, host, version."""
    opts = client.connect
    connect = _omit_empty({"jwt": _str(opts, "jwt"), "nkey": _str(opts, "nkey"), "sig": _str(opts, "sig"),
                           "auth_token": _str(opts, "auth_token"), "user": _str(opts, "user"),
                           "pass": _str(opts, "pass"), "name": _str(opts, "name"), "lang": _str(opts, "lang"),
                           "version": _str(opts, "version")})
    protocol = opts.get("protocol", 0)
    connect["protocol"] = protocol if isinstance(protocol, int) and not isinstance(protocol, bool) else 0
    info = _omit_empty({"host": client.host, "id": client.cid, "user": raw_user(opts), "name": _str(opts, "name"),
                        "kind": "Client", "type": "websocket" if client.websocket else "nats",
                        "nonce": client.nonce if connect.get("sig") else ""})
    server_id = _omit_empty({"name": server["name"], "host": server["host"], "id": keys.server_id,
                             "version": server["version"], "xkey": keys.xkey if settings.xkey else ""})
    server_id.setdefault("name", "")
    server_id.setdefault("host", "")
    nats: dict[str, Any] = {"server_id": server_id, "user_nkey": user_nkey, "client_info": info,
                            "connect_opts": connect}
    if client.tls is not None:
        nats["client_tls"] = client.tls
    nats["type"] = "authorization_request"
    token = encode({"aud": AUDIENCE, "exp": int(now + timeout), "iat": int(now), "iss": keys.server_id,
                    "sub": settings.issuer, "nats": nats}, keys.sign).encode()
    if not settings.xkey:
        return b"", token
    return f"NATS/1.0\r\n{XKEY_HEADER}: {keys.xkey}\r\n\r\n".encode(), keys.seal(token, settings.xkey)


@dataclass(frozen=True)
class Admitted:
    """A user the service admitted: where it goes and what it may do."""

    account: str
    permissions: Permissions | None
    name: str  # the user claims' name: the connection's user name from now on ("": the CONNECT's)
    expires: int  # unix seconds; 0: never


def _title(message: str) -> str:
    return message[:1].upper() + message[1:]


def _response_issues(claims: dict[str, Any], nats: dict[str, Any], now: float) -> list[str]:
    """nats-io/jwt's AuthorizationResponseClaims.Validate, in its order."""
    issues = []
    if not is_public_key(str(claims.get("sub", "")), "user"):
        issues.append("Subject must be a user public key")
    if not is_public_key(str(claims.get("aud", "")), "server"):
        issues.append("Audience must be a server public key")
    if not nats.get("error") and not nats.get("jwt"):
        issues.append("Error or Jwt is required")
    if nats.get("error") and nats.get("jwt"):
        issues.append("Only Error or Jwt can be set")
    if nats.get("issuer_account") and not is_public_key(str(nats["issuer_account"]), "account"):
        issues.append("issuer_account is not an account public key")
    exp, nbf = claims.get("exp", 0), claims.get("nbf", 0)
    if isinstance(exp, int) and exp and int(now) > exp:
        issues.append("claim is expired")
    if isinstance(nbf, int) and nbf and nbf > int(now):
        issues.append("claim is not yet valid")
    return issues


def _response(message: bytes, keys: ServerKeys, settings: CalloutSettings) -> tuple[dict[str, Any], bool]:
    """The response's claims (signature checked), and whether it came sealed."""
    if not message:
        raise CalloutRefused(f'Auth callout violation: "no reason supplied" on account "{settings.account}"')
    sealed = bool(settings.xkey) and not message.startswith(b"eyJ")
    if sealed:
        try:
            message = keys.unseal(message, settings.xkey)
        except ValueError as e:
            raise CalloutRefused(f'Error decrypting auth callout response on account "{settings.account}": {e}') \
                from None
    try:
        claims = decode_generic(message.decode("utf-8", "replace"))
    except JwtError as e:
        raise CalloutRefused(_title(str(e))) from None
    nats = claims.get("nats")
    if not isinstance(nats, dict) or nats.get("type") != "authorization_response":
        raise CalloutRefused("Not an authorization request claim")  # sic: nats-io/jwt's message
    return claims, sealed


def check_response(message: bytes, *, keys: ServerKeys, settings: CalloutSettings, user_nkey: str,
                   accounts: Collection[str], now: float) -> Admitted:
    """The service's answer (the message's payload) checked as nats-server checks it; CalloutRefused says why
    not. `accounts`: the names a user may be placed in."""
    claims, sealed = _response(message, keys, settings)
    nats = claims["nats"]
    issues = _response_issues(claims, nats, now)
    if issues:
        raise CalloutRefused(f"Authorization response had validation errors: {issues[0]}")
    if claims["sub"] != user_nkey:
        raise CalloutRefused("Auth callout violation: auth callout response is not for expected user")
    if claims["aud"] != keys.server_id:
        raise CalloutRefused("Auth callout violation: auth callout response is not for server")
    if nats.get("error"):
        raise CalloutRefused(f"Auth callout service returned an error: {nats['error']}")
    if not sealed and (nats.get("issuer_account") or claims["iss"]) != settings.issuer:
        raise CalloutRefused("Auth callout signing key is unknown")
    try:
        user = decode_user(str(nats["jwt"]))
    except JwtError as e:
        raise CalloutRefused(_title(str(e))) from None
    return _admitted(user, settings, user_nkey, accounts, now)


def _admitted(user: UserClaims, settings: CalloutSettings, user_nkey: str, accounts: Collection[str],
              now: float) -> Admitted:
    """nats-server's processReply after decoding: the user claims valid, for the user asked about, issued by
    the issuer, placed in an account that exists (config mode: the user JWT's `aud`)."""
    issues = user_issues(user, now)
    if issues:
        raise CalloutRefused(f"Error validating user JWT: {issues[0]}")
    on = json.dumps(settings.account)
    if user.subject != user_nkey:
        raise CalloutRefused(f'Expected authorized user of "{user_nkey}" but got "{user.subject}" on account {on}')
    grant = user.permissions
    if grant.limits.times or grant.allowed_connection_types or grant.limits.src:
        raise CalloutRefused(f"The user JWT for account {on} sets connect times, source networks or connection "
                             "types, which jsbroker does not apply to callout users yet: issue it without them")
    if user.issuer_account:
        raise CalloutRefused(f"Error non operator mode account {on}: attempted to use issuer_account")
    if user.issuer != settings.issuer:
        raise CalloutRefused(f'Wrong issuer for auth callout response on account {on}, expected '
                             f'"{settings.issuer}" got "{user.issuer}"')
    placement = _audience(user.token)
    if placement not in accounts:
        raise CalloutRefused(f'No valid account "{placement}" for auth callout response on account {on}: '
                             "account missing")
    permissions = permissions_of(grant)
    if placement == settings.account:  # the callout account's users never publish requests as the server
        permissions = _deny_publish(permissions, SUBJECT)
    return Admitted(placement, permissions, user.name, user.expires)


def _audience(token: str) -> str:
    aud = decode_generic(token).get("aud", "")
    return aud if isinstance(aud, str) else ""


def _deny_publish(permissions: Permissions | None, subject: str) -> Permissions:
    """nats-server's mergeDenyPermissions(pub, ...)."""
    if permissions is None:
        return Permissions(SubjectRules(None, (subject,)), None)
    pub = permissions.publish or SubjectRules(None, ())
    return Permissions(SubjectRules(pub.allow, (*pub.deny, subject)), permissions.subscribe,
                       permissions.response_max, permissions.response_expires)


def delegated(settings: CalloutSettings, user: str, account: str) -> bool:
    """Whether a client goes to the service: everyone but `auth_users`, and with allowed_accounts only the
    users bound to one of them (or to no configured account)."""
    if account != "$G" and settings.allowed_accounts and account not in settings.allowed_accounts:
        return False
    return user not in settings.auth_users


def new_user_nkey() -> str:
    """The user key the answer must be for (nats-server makes a fresh key pair; only its public half is used)."""
    return encoded_public_key(os.urandom(32), "user")


# -- the round trip ----------------------------------------------------------------------------------------

class CalloutRoutes(Protocol):
    def insert(self, sub: Subscription, sublist: Sublist | None = None) -> None: ...

    def remove(self, sub: Subscription) -> None: ...

    def route_into(self, sublist: Sublist, subject: bytes, reply: bytes | None, hdr_len: int, data: bytes) -> bool:
        ...


class PendingCallout:
    """One request in flight in the callout account: `finish` gets the answer's payload, or None when none
    came within `timeout`. It runs on a later loop turn, never inside the service's read."""

    def __init__(self, routes: CalloutRoutes, sublist: Sublist, loop: asyncio.AbstractEventLoop, timeout: float,
                 message: tuple[bytes, bytes], finish: Callable[[bytes | None], None]) -> None:
        self._routes, self._loop, self._finish = routes, loop, finish
        reply = f"_INBOX.{os.urandom(11).hex()}"
        self._sub = Subscription(None, reply, None, b"0", self._answer)
        routes.insert(self._sub, sublist)
        self._timer = loop.call_later(timeout, self._end, None)
        hdr, payload = message
        routes.route_into(sublist, SUBJECT.encode(), reply.encode(), len(hdr) if hdr else -1,
                          hdr + payload + b"\r\n")

    def _answer(self, subject: str, reply: str | None, hdr: bytes, payload: bytes, origin: object) -> None:
        self._loop.call_soon(self._end, payload)

    def _end(self, payload: bytes | None) -> None:
        if self._sub.closed:
            return
        self.cancel()
        self._finish(payload)

    def cancel(self) -> None:
        """The client left: nothing more is awaited."""
        self._timer.cancel()
        self._routes.remove(self._sub)

