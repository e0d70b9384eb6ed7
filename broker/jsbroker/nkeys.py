"""NKey users: a user is its Ed25519 public key ("U..." in NATS' base32 encoding with a CRC16), and proves
it by signing the nonce the server sent in INFO. nats-py does this with `nkeys_seed`, the `nats` CLI with
`--nkey`. Signatures are checked with `cryptography` (the standard library has no Ed25519).
"""

from __future__ import annotations

import base64
import binascii
import os

_PREFIX_USER = 20 << 3  # the "U" of a user's public key


class NkeyError(ValueError):
    """A string that is not a user's public nkey; the message says what is wrong."""


def _crc16(data: bytes) -> int:
    """CRC-16/XMODEM, the checksum NATS appends to encoded keys: binascii's CRC-CCITT from 0 (in C; the
    bitwise loop in Python cost every Broker() ~0.5 ms for its xkey)."""
    return binascii.crc_hqx(data, 0)


def user_public_key(text: str) -> bytes:
    """The raw 32-byte Ed25519 key of a user's public nkey, checked (prefix, length, checksum)."""
    try:
        raw = base64.b32decode(text + "=" * (-len(text) % 8))
    except (binascii.Error, ValueError):
        raise NkeyError(f"{text[:8]}... is not a user nkey: not base32") from None
    if len(raw) != 35 or raw[0] != _PREFIX_USER:
        raise NkeyError(f"{text[:8]}... is not a user nkey: give the public key that starts with 'U'")
    if _crc16(raw[:-2]) != int.from_bytes(raw[-2:], "little"):
        raise NkeyError(f"{text[:8]}... is not a user nkey: the checksum does not match (a typo?)")
    return raw[1:33]


def new_nonce() -> str:
    """What INFO carries for the client to sign (nats-server's size and alphabet)."""
    return base64.urlsafe_b64encode(os.urandom(11)).rstrip(b"=").decode()


def signed(public_key: bytes, nonce: str, signature: str) -> bool:
    """Whether `signature` (base64url without padding, or standard base64 as nats-py sends) signs `nonce`."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        # the urlsafe decoder also reads the standard alphabet's + and /
        sig = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
        Ed25519PublicKey.from_public_bytes(public_key).verify(sig, nonce.encode())
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True


_PREFIX_CURVE = 23 << 3  # the "X" of a curve (x25519) public key


def curve_public_key(raw: bytes) -> str:
    """A 32-byte x25519 public key in NATS' encoding ("X...", as nats-server's INFO `xkey`)."""
    body = bytes([_PREFIX_CURVE]) + raw
    return base64.b32encode(body + _crc16(body).to_bytes(2, "little")).decode().rstrip("=")
