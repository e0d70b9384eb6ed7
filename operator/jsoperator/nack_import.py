"""`jsoperator import --from-nack`: read NACK's resources from the cluster (the kube API) or from files
(`kubectl get -o yaml`), translate them (nack.py), write our manifests and the table of what did not map.

Nothing is written unless every resource translates: bad input (an unknown kind or version, a Consumer
whose stream or a resource whose Account is not imported, a Secret missing) is one error on stderr, exit 2.
The table goes to stdout; when the manifests go to stdout too it is written as YAML comments before them,
so the output still applies (`| kubectl apply -f -`). Exit 1 for unmapped fields only with --strict.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import yaml

from . import kubeapi, nack
from .models import DeletionPolicy

Writer = Callable[[list[dict[str, Any]], str], str]
"""cli's writer: (manifests, -o value) -> where they went."""


def run(
    files: list[str], namespace: str | None, deletion_policy: DeletionPolicy, output: str, strict: bool,
    write: Writer, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
) -> int:
    try:
        if files:
            resources, secret_keys = read_files(files, namespace), None
        else:
            resources, secret_keys = _read_cluster(namespace)
        migration = nack.migrate(resources, nack.Options(deletion_policy), secret_keys)
    except (nack.NackError, OSError, yaml.YAMLError, kubeapi.ApiException) as exc:
        print(f"jsoperator import --from-nack: {_problem(exc)}; nothing written", file=err)
        return 2
    if secret_keys is None and any(m["kind"] == "JetStreamConnection" for m in migration.manifests):
        print("jsoperator import --from-nack: the Accounts' Secrets were not checked (read from files): a missing "
              "one shows in its JetStreamConnection's status", file=err)
    table = nack.report_table(migration.unmapped)
    if output == "-":
        out.write("".join(f"# {line}\n" for line in table.splitlines()))
    try:
        where = write(migration.manifests, output)
    except OSError as exc:
        print(f"jsoperator import --from-nack: {_problem(exc)}", file=err)
        return 1
    if output != "-":
        out.write(table)
    kinds = [m["kind"] for m in migration.manifests]
    counts = ", ".join(f"{kinds.count(nack.OURS[kind])} {nack.OURS[kind]}" for kind in nack.ORDER)
    print(f"jsoperator import --from-nack: {counts} manifests written to {where}; {len(migration.unmapped)} "
          "NACK fields not mapped", file=err)
    return 1 if strict and migration.unmapped else 0


def _problem(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot use {exc.filename}: {exc.strerror}"
    if isinstance(exc, kubeapi.ApiException):
        return f"the Kubernetes API refused: {exc.status} {exc.reason}"
    return " ".join(str(exc).split())


def read_files(paths: list[str], namespace: str | None) -> list[dict[str, Any]]:
    """The resources in YAML files (``-``: stdin), lists (``kind: List``) unpacked; those without a namespace
    get `namespace`."""
    resources = []
    for path in paths:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
        for doc in yaml.safe_load_all(text):
            for resource in _unpacked(doc):
                meta = resource.setdefault("metadata", {})
                if namespace and not meta.get("namespace"):
                    meta["namespace"] = namespace
                resources.append(resource)
    return resources


def _unpacked(doc: Any) -> Iterator[dict[str, Any]]:
    if not doc:
        return
    if not isinstance(doc, dict):
        raise nack.NackError(f"a YAML document is not a resource: {str(doc)[:60]!r}")
    if str(doc.get("kind", "")).endswith("List") and "items" in doc:
        for item in doc["items"] or []:
            yield from _unpacked(item)
    else:
        yield doc


def _read_cluster(namespace: str | None) -> tuple[list[dict[str, Any]], nack.SecretKeys]:
    """Every NACK resource in `namespace` (None: all), and the keys of the Secrets their Accounts name."""
    import asyncio

    async def read() -> tuple[list[dict[str, Any]], dict[tuple[str, str], set[str] | None]]:
        resources: list[dict[str, Any]] = []
        served = 0
        for kind, plural in nack.PLURALS.items():
            items = await kubeapi.list_foreign(nack.GROUP, nack.VERSION, plural, namespace)
            if items is None:
                continue
            served += 1
            resources += [{"apiVersion": f"{nack.GROUP}/{nack.VERSION}", "kind": kind, **item} for item in items]
        if not served:
            raise nack.NackError(f"the cluster serves no {nack.GROUP}/{nack.VERSION} kind: are NACK's CRDs installed "
                                 "(kubectl get crd streams.jetstream.nats.io)?")
        secrets = {key: await kubeapi.secret_keys(*key) for key in nack.secrets_named(resources)}
        return resources, secrets

    resources, secrets = asyncio.run(read())
    return resources, lambda ns, name: secrets.get((ns, name))

