"""Turn a resource's `spec.connection` (plus the operator's defaults) into resolved ConnectionSettings,
reading the referenced Secrets from the resource's namespace; read the connection object a
`spec.connectionRef` names (its Secrets live in its own namespace or, cluster-scoped, its secretNamespace).

Rule: the operator's own credentials (--creds, --creds-secret, token, user, TLS files) are only sent
to the operator's own servers; a resource naming other servers brings its own Secrets or none.
"""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

from . import connections, jsclient, kubeapi, models
from .settings import Settings


class CredentialsError(Exception):
    """A referenced Secret or key is missing; the message says which one to create or fix."""


async def _secret_value(namespace: str, name: str, key: str, field: str) -> str:
    try:
        data = await kubeapi.secret_data(namespace, name)
    except kubeapi.ApiException as exc:
        if exc.status == 404:
            raise CredentialsError(f"{field}: Secret {namespace}/{name} not found; create it or fix the name") from None
        raise CredentialsError(f"{field}: cannot read Secret {namespace}/{name}: {exc.reason}") from None
    if key not in data:
        raise CredentialsError(f"{field}: Secret {namespace}/{name} has no key {key!r} (keys: {sorted(data)})")
    return base64.b64decode(data[key]).decode()


def _read_file(path: str | None) -> str | None:
    return Path(path).read_text() if path else None


async def _operator_defaults(settings: Settings) -> jsclient.ConnectionSettings:
    creds = _read_file(settings.creds_file)
    if settings.creds_secret:
        ref, _, key = settings.creds_secret.partition(":")
        namespace, _, name = ref.partition("/")
        creds = await _secret_value(namespace, name, key or "creds", "--creds-secret")
    return jsclient.ConnectionSettings(
        servers=settings.servers,
        creds=creds,
        token=settings.token,
        user=settings.user,
        password=settings.password,
        tls_ca=_read_file(settings.tls_ca_file),
        tls_cert=_read_file(settings.tls_cert_file),
        tls_key=_read_file(settings.tls_key_file),
        js_domain=settings.js_domain,
    )


async def resolve(spec: models.ConnectionSpec | None, namespace: str, settings: Settings) -> jsclient.ConnectionSettings:
    """The connection for one resource: its own spec.connection, else the operator's settings."""
    spec = spec or models.ConnectionSpec.model_validate({})
    own_servers = tuple(spec.servers or ()) or settings.servers
    if own_servers == settings.servers and not _has_auth(spec):
        defaults = await _operator_defaults(settings)
        return dataclasses.replace(defaults, js_domain=spec.js_domain) if spec.js_domain else defaults

    async def secret(ref: models.SecretKeyRef | None, field: str) -> str | None:
        return await _secret_value(namespace, ref.name, ref.key, field) if ref else None

    user = password = None
    if (u := spec.user_secret_ref) is not None:
        user = await _secret_value(namespace, u.name, u.user_key, "userSecretRef")
        password = await _secret_value(namespace, u.name, u.password_key, "userSecretRef")
    tls_ca = tls_cert = tls_key = None
    if (t := spec.tls_secret_ref) is not None:
        tls_ca = await _optional(namespace, t.name, t.ca_key)
        tls_cert = await _optional(namespace, t.name, t.cert_key)
        tls_key = await _optional(namespace, t.name, t.key_key)
    return jsclient.ConnectionSettings(
        servers=own_servers,
        creds=await secret(spec.credentials_secret_ref, "credentialsSecretRef"),
        token=await secret(spec.token_secret_ref, "tokenSecretRef"),
        user=user,
        password=password,
        tls_ca=tls_ca,
        tls_cert=tls_cert,
        tls_key=tls_key,
        js_domain=spec.js_domain,
    )


async def referenced(ref: models.ConnectionRef, namespace: str) -> tuple[models.ConnectionSpec, str]:
    """The spec of the connection object a resource in `namespace` names, and the namespace of its Secrets;
    connections.Unusable when it is missing, not granted or invalid."""
    key = connections.ref_of(namespace, {"connectionRef": ref.model_dump(by_alias=True)})
    assert key is not None
    try:
        body = await kubeapi.get_resource(*key)
    except kubeapi.ApiException as exc:
        raise CredentialsError(f"cannot read {connections.describe(key)}: {exc.reason}") from None
    return connections.usable(key, body, namespace)


def _has_auth(spec: models.ConnectionSpec) -> bool:
    return any(
        ref is not None
        for ref in (spec.credentials_secret_ref, spec.token_secret_ref, spec.user_secret_ref, spec.tls_secret_ref)
    )


async def _optional(namespace: str, name: str, key: str) -> str | None:
    """A TLS key that may be absent (a CA-only or cert-only Secret is fine)."""
    try:
        return await _secret_value(namespace, name, key, "tlsSecretRef")
    except CredentialsError as exc:
        if "has no key" in str(exc):
            return None
        raise
