"""NKey users: a user is its Ed25519 public key ("U..." in NATS' base32 encoding with a CRC16), and proves
it by signing the nonce the server sent in INFO. nats-py does this with `nkeys_seed`, the `nats` CLI with
`--nkey`. Signatures are checked with `cryptography` (the standard library has no Ed25519).
"""

from __future__ import annotations

import base64
import binascii
import os

# The first byte of an encoded public key says whose key it is (the letter the base32 text starts with).
PREFIXES = {"operator": 14 << 3, "account": 0, "user": 20 << 3, "server": 13 << 3, "curve": 23 << 3}  # O A U N X
_LETTERS = "OAUNX"


class NkeyError(ValueError):
    """A string that is not the public nkey it should be; the message says what is wrong."""


def _crc16(data: bytes) -> int:
    """CRC-16/XMODEM, the checksum NATS appends to encoded keys: binascii's CRC-CCITT from 0 (in C; the
    bitwise loop in Python cost every Broker() ~0.5 ms for its xkey)."""
    return binascii.crc_hqx(data, 0)


def public_key(text: str, kind: str) -> bytes:
    """The raw 32-byte Ed25519 key of an operator's, account's or user's public nkey (`kind`), checked
    (prefix, length, checksum)."""
    letter = _LETTERS[tuple(PREFIXES).index(kind)]
    what = f"{text[:8]}... is not {'an' if kind in ('operator', 'account') else 'a'} {kind} nkey"
    try:
        raw = base64.b32decode(text + "=" * (-len(text) % 8))
    except (binascii.Error, ValueError):
        raise NkeyError(f"{what}: not base32") from None
    if len(raw) != 35 or raw[0] != PREFIXES[kind]:
        raise NkeyError(f"{what}: give the public key that starts with {letter!r}")
    if _crc16(raw[:-2]) != int.from_bytes(raw[-2:], "little"):
        raise NkeyError(f"{what}: the checksum does not match (a typo?)")
    return raw[1:33]


def is_public_key(text: str, kind: str) -> bool:
    try:
        public_key(text, kind)
    except NkeyError:
        return False
    return True


def user_public_key(text: str) -> bytes:
    """The raw 32-byte Ed25519 key of a user's public nkey ("U..."), checked."""
    return public_key(text, "user")


def new_nonce() -> str:
    """What INFO carries for the client to sign (nats-server's size and alphabet)."""
    return base64.urlsafe_b64encode(os.urandom(11)).rstrip(b"=").decode()


def signed(key: bytes, nonce: str, signature: str) -> bool:
    """Whether `signature` (base64url without padding, or standard base64 as nats-py sends) signs `nonce`."""
    try:
        # the urlsafe decoder also reads the standard alphabet's + and /
        sig = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
    except (binascii.Error, ValueError):
        return False
    return verified(key, nonce.encode(), sig)


def verified(key: bytes, data: bytes, signature: bytes) -> bool:
    """Whether `signature` is the Ed25519 signature of `data` by the raw public `key`."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        Ed25519PublicKey.from_public_bytes(key).verify(signature, data)
    except (InvalidSignature, ValueError):
        return False
    return True


def encoded_public_key(raw: bytes, kind: str) -> str:
    """A raw 32-byte public key in NATS' encoding: the kind's prefix byte, the key, the CRC16, in base32."""
    body = bytes([PREFIXES[kind]]) + raw
    return base64.b32encode(body + _crc16(body).to_bytes(2, "little")).decode().rstrip("=")


def curve_public_key(raw: bytes) -> str:
    """A 32-byte x25519 public key in NATS' encoding ("X...", as nats-server's INFO `xkey`)."""
    return encoded_public_key(raw, "curve")
