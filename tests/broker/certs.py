"""Throw-away certificates for the TLS tests: a CA, server certificates for 127.0.0.1/localhost, client
certificates, and a second CA that nobody trusts."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path
    serial: int


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(folder: Path, stem: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> Pair:
    folder.mkdir(parents=True, exist_ok=True)
    key_path, cert_path = folder / f"{stem}.key", folder / f"{stem}.pem"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Pair(cert_path, key_path, cert.serial_number)


class Authority:
    """A CA that issues server and client certificates into `folder`."""

    def __init__(self, folder: Path, name: str = "jetstream-kopf test CA") -> None:
        self.folder = folder
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self._cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
                      .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
                      .not_valid_before(now - datetime.timedelta(minutes=5))
                      .not_valid_after(now + datetime.timedelta(days=1))
                      .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                      .sign(self._key, hashes.SHA256()))
        self.ca = _write(folder, name.replace(" ", "-"), self._key, self._cert).cert

    def issue(self, stem: str, *, server: bool, names: tuple[str, ...] = ("localhost",)) -> Pair:
        """A certificate for `stem`: a server's for `names` and 127.0.0.1, or a client's."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (x509.CertificateBuilder().subject_name(_name(stem)).issuer_name(self._cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.ExtendedKeyUsage(
                       [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [*(x509.DNSName(name) for name in names), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
        return _write(self.folder, stem, key, builder.sign(self._key, hashes.SHA256()))
