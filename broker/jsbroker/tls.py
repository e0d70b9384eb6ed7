"""TLS on the client port, the way nats-server does it.

The INFO line goes out in clear text with `tls_required` (and `tls_verify` when client certificates are
required); the client then starts the handshake on the same socket (`Connection` upgrades its transport
with `loop.start_tls`). A client that speaks plain NATS instead fails the handshake and is closed without a
reply, as nats-server closes it. TLS 1.2 is the minimum.

Monitoring over HTTPS (`https_port`) uses the same certificate, never asks for a client certificate (so
browsers and probes work, as with nats-server, whose `verify` does not apply to monitoring either).

Certificates are reloaded by `TlsContext.reload()`, on SIGHUP (the CLI) and when the files change (the
broker checks them every `reload_interval`, so a rotated Kubernetes Secret is picked up): a new SSL
context is built from the files and used for new connections only; connections already up keep theirs.
The monitoring listener keeps its context object, which is given the new certificate.
A reload that fails (a missing file, a key that does not match) keeps the old context and says why.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from .config import ConfigError, TlsSettings


def _stat(path: os.PathLike[str] | str) -> tuple[float, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime, st.st_ino, st.st_size)


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """An SSL context for the client port from `settings`; ConfigError names the file that is wrong."""
    context = certificate_context(settings)
    if settings.verify:
        context.verify_mode = ssl.CERT_REQUIRED
        try:
            if settings.ca_file is not None:
                context.load_verify_locations(cafile=settings.ca_file)
            else:
                context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"tls: CA file {settings.ca_file} cannot be used ({exc}); give PEM certificates") from None
    return context


def certificate_not_after(cert_file: Path) -> datetime | None:
    """When the (first) certificate of a PEM file expires; None when it cannot be read (it was loaded
    already, so only a file changed since can get here)."""
    from cryptography import x509  # only with TLS on: the module costs ~7 MB of RSS

    try:
        return x509.load_pem_x509_certificate(Path(cert_file).read_bytes()).not_valid_after_utc
    except (OSError, ValueError):
        return None


def certificate_context(settings: TlsSettings) -> ssl.SSLContext:
    """The server certificate, TLS 1.2 or later, no client certificates asked for: the monitoring
    listener's context, and the client port's before `verify`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_certificate(context, settings)
    return context


def _load_certificate(context: ssl.SSLContext, settings: TlsSettings) -> None:
    try:
        context.load_cert_chain(settings.cert_file, settings.key_file)
    except FileNotFoundError as exc:
        raise ConfigError(f"tls: cannot read {exc.filename or settings.cert_file}: no such file") from None
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"tls: certificate {settings.cert_file} and key {settings.key_file} cannot be used "
                          f"together ({exc}); give a PEM certificate and its matching PEM key") from None


@dataclass
class TlsContext:
    """The settings and the SSL context new connections use."""

    settings: TlsSettings
    context: ssl.SSLContext
    files_seen: tuple[tuple[float, int, int] | None, ...] = field(init=False)
    monitoring: ssl.SSLContext = field(init=False)  # the HTTPS monitoring listener's, reloaded in place
    not_after: datetime | None = field(init=False)  # the served certificate's expiry (/varz, /metrics)

    @classmethod
    def load(cls, settings: TlsSettings) -> TlsContext:
        return cls(settings, server_context(settings))

    def __post_init__(self) -> None:
        self.files_seen = self.files_state()
        self.monitoring = certificate_context(self.settings)
        self.not_after = certificate_not_after(self.settings.cert_file)

    def reload(self) -> None:
        """Re-read the certificate, key and CA files; raises ConfigError (and keeps the old context)."""
        self.files_seen = self.files_state()
        context = server_context(self.settings)
        _load_certificate(self.monitoring, self.settings)
        self.context = context
        self.not_after = certificate_not_after(self.settings.cert_file)

    def files_state(self) -> tuple[tuple[float, int, int] | None, ...]:
        """What identifies the files' current content (through symlinks, as a mounted Secret swaps them)."""
        s = self.settings
        return tuple(_stat(path) for path in (s.cert_file, s.key_file, s.ca_file) if path is not None)

    def changed(self) -> bool:
        return self.files_state() != self.files_seen

    def info_fields(self) -> dict[str, bool]:
        return {"tls_required": True, **({"tls_verify": True} if self.settings.verify else {})}
