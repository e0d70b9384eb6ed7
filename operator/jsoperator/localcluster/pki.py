"""The throwaway PKI of one envtest control plane: serving and client CAs, certificates, SA keys.

Everything is made fresh per start and written as PEM files into the control plane's temp dir.
TLS keys are EC P-256 (fast to generate); the service-account signing key is RSA, as Kubernetes
expects for its default RS256 tokens.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=7)
_PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files one control plane needs."""

    serving_ca: Path
    serving_cert: Path
    serving_key: Path
    client_ca: Path
    admin_cert: Path
    admin_key: Path
    service_account_key: Path
    service_account_pub: Path


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _key_pem(key: _PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _builder(subject: x509.Name, issuer: x509.Name,
             public_key: ec.EllipticCurvePublicKey | rsa.RSAPublicKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate small clock skew
        .not_valid_after(now + _VALIDITY)
    )


def _ca(common_name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    cert = (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _leaf(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName] | None = None,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        _builder(subject, ca_cert.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def write_pki(folder: Path, addresses: Sequence[str] = ()) -> Pki:
    """Generate a complete PKI for a loopback control plane into `folder` (created if needed).

    `addresses` are further IPs the serving certificate is valid for (where pods reach the apiserver).
    """
    folder.mkdir(parents=True, exist_ok=True)
    pki = Pki(
        serving_ca=folder / "serving-ca.crt",
        serving_cert=folder / "apiserver.crt",
        serving_key=folder / "apiserver.key",
        client_ca=folder / "client-ca.crt",
        admin_cert=folder / "admin.crt",
        admin_key=folder / "admin.key",
        service_account_key=folder / "sa.key",
        service_account_pub=folder / "sa.pub",
    )

    serving_ca_key, serving_ca = _ca("envtest-serving-ca")
    serving_key, serving_cert = _leaf(
        serving_ca_key, serving_ca, _name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH,
        sans=[
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
            # In-cluster name and service IP, so the certificate also fits the default kubernetes Service.
            x509.DNSName("kubernetes.default.svc"),
            x509.IPAddress(ipaddress.IPv4Address("10.0.0.1")),
            *(x509.IPAddress(ipaddress.ip_address(address)) for address in addresses),
        ],
    )
    client_ca_key, client_ca = _ca("envtest-client-ca")
    admin_key, admin_cert = _leaf(
        client_ca_key, client_ca, _name("envtest-admin", "system:masters"),
        ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    pki.serving_ca.write_bytes(_cert_pem(serving_ca))
    pki.serving_cert.write_bytes(_cert_pem(serving_cert))
    pki.serving_key.write_bytes(_key_pem(serving_key))
    pki.client_ca.write_bytes(_cert_pem(client_ca))
    pki.admin_cert.write_bytes(_cert_pem(admin_cert))
    pki.admin_key.write_bytes(_key_pem(admin_key))
    pki.service_account_key.write_bytes(_key_pem(sa_key))
    pki.service_account_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki
