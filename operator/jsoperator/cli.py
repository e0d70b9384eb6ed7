"""The `jsoperator` command: `run` starts the operator, `crds` prints the CustomResourceDefinitions,
`check` tests the operator's connection, `import` writes manifests that adopt what a server already has,
`demo` runs the whole product locally."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import socket
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from . import __version__, demo
from . import settings as settings_mod

if TYPE_CHECKING:
    from . import jsclient, models, scheduler


def _connection_flags(p: argparse.ArgumentParser) -> None:
    """How to reach JetStream and which namespaces: shared by `run` and `release`."""
    _nats_flags(p)
    p.add_argument("--namespace", dest="namespaces", action="append", default=[], metavar="NS",
                   help="watch this namespace (repeatable; env JSOPERATOR_NAMESPACES; default all)")
    p.add_argument("--instance", metavar="NAME",
                   help="this operator's name among several in one cluster: its own finalizer, and the "
                   "ClusterJetStreamConnections labelled jsoperator.io/instance=NAME (env JSOPERATOR_INSTANCE; "
                   "default none: the unlabelled ones)")
    p.add_argument("--cluster-name", metavar="NAME",
                   help="this Kubernetes cluster's name in the ownership marks on server objects "
                   "(env JSOPERATOR_CLUSTER_NAME; default the uid of its kube-system namespace)")


def _nats_flags(p: argparse.ArgumentParser) -> None:
    """How to reach JetStream: shared by `run`, `release` and `import`."""
    p.add_argument("--servers", type=settings_mod.split_csv, metavar="URL[,URL]",
                   help="default NATS servers (env JSOPERATOR_SERVERS; default nats://127.0.0.1:4222)")
    p.add_argument("--creds", dest="creds_file", metavar="FILE", help="NATS .creds file (env JSOPERATOR_CREDS)")
    p.add_argument("--creds-secret", metavar="NS/NAME[:KEY]",
                   help="Secret holding a .creds file, key default 'creds' (env JSOPERATOR_CREDS_SECRET)")
    p.add_argument("--user", help="NATS user (env JSOPERATOR_USER; password only via JSOPERATOR_PASSWORD)")
    p.add_argument("--tls-ca", dest="tls_ca_file", metavar="FILE", help="CA bundle (env JSOPERATOR_TLS_CA)")
    p.add_argument("--tls-cert", dest="tls_cert_file", metavar="FILE", help="client cert (env JSOPERATOR_TLS_CERT)")
    p.add_argument("--tls-key", dest="tls_key_file", metavar="FILE", help="client key (env JSOPERATOR_TLS_KEY)")
    p.add_argument("--js-domain", help="JetStream domain (env JSOPERATOR_JS_DOMAIN)")
    p.add_argument("--request-timeout", type=float, metavar="SECONDS",
                   help="JetStream API reply timeout (env JSOPERATOR_REQUEST_TIMEOUT; default 3)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jsoperator", description="Kopf operator for JetStream Stream/Consumer CRs.")
    p.add_argument("--version", action="version", version=f"jsoperator {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the operator (flags override JSOPERATOR_* environment variables)")
    _connection_flags(run)
    run.add_argument("--drift-interval", type=float, metavar="SECONDS",
                     help="seconds between drift checks (env JSOPERATOR_DRIFT_INTERVAL; default 60)")
    run.add_argument("--status-interval", type=float, metavar="SECONDS",
                     help="refresh status counters this often from one listing per server, 0 = off "
                     "(env JSOPERATOR_STATUS_INTERVAL; default 2)")
    run.add_argument("--leader-election", metavar="NS/LEASE",
                     help="run as one of several replicas: the holder of this Lease reconciles, the others wait "
                     "(env JSOPERATOR_LEADER_ELECTION; default off: run alone)")
    run.add_argument("--no-finalizers", dest="finalizers", action="store_const", const=False,
                     help="put no finalizers on resources: deleting one deletes its server object best effort "
                     "(env JSOPERATOR_FINALIZERS=false)")
    run.add_argument("--read-only", dest="read_only", action="store_const", const=True,
                     help="observe only: report drift in status, never change or delete anything on the server "
                     "(env JSOPERATOR_READ_ONLY=true)")
    run.add_argument("--no-cluster-connections", dest="cluster_connections", action="store_const", const=False,
                     help="serve and watch no ClusterJetStreamConnection, only read them when resources name them "
                     "(env JSOPERATOR_CLUSTER_CONNECTIONS=false)")
    run.add_argument("--metrics-port", type=int, metavar="PORT",
                     help="Prometheus /metrics port, 0 = off (env JSOPERATOR_METRICS_PORT; default 8080)")
    run.add_argument("--health-port", type=int, metavar="PORT",
                     help="liveness /healthz and readiness /readyz port, 0 = off (env JSOPERATOR_HEALTH_PORT; default 8081)")
    run.add_argument("--log-level", help="DEBUG, INFO, WARNING, ... (env JSOPERATOR_LOG_LEVEL; default INFO)")
    run.add_argument("--log-format", choices=["json", "plain"], help="(env JSOPERATOR_LOG_FORMAT; default json)")
    rel = sub.add_parser("release", help="remove jsoperator's finalizers (deleting or keeping server objects of "
                         "resources being deleted as their deletionPolicy says): run when the operator goes away")
    rel.add_argument("--stop", metavar="NS/DEPLOYMENT", help="first scale the operator's Deployment to zero")
    rel.add_argument("--force", action="store_true",
                     help="let go of resources being deleted even when their server cannot be reached")
    _connection_flags(rel)
    chk = sub.add_parser("check", help="connect as the operator does and round-trip a message through core NATS "
                         "and a JetStream memory stream (deleted again); exit 1 saying what failed (the chart's helm test)")
    _connection_flags(chk)
    sub.add_parser("crds", help="print the CustomResourceDefinitions (YAML) generated from the models")
    _import_parser(sub)
    demo.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        return demo.main(args)
    if args.command == "import" and args.from_nack:
        from . import nack_import

        return nack_import.run(args.filename, args.namespace, args.deletion_policy, args.output, args.strict,
                               _write_manifests)
    if args.command == "import":
        if args.filename or args.strict:
            print("jsoperator import: -f and --strict go with --from-nack", file=sys.stderr)
            return 2
        return _import(args)
    if args.command == "crds":
        from . import crdgen

        sys.stdout.write(crdgen.render())
        return 0
    flags = {k: v for k, v in vars(args).items() if k not in ("command", "stop", "force")}
    flags["namespaces"] = tuple(flags["namespaces"])
    try:
        settings = settings_mod.load(flags)
    except settings_mod.SettingsError as exc:
        print(f"jsoperator: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings)
    if args.command == "check":
        from . import check

        return asyncio.run(check.check(settings, out=sys.stdout))
    if args.command == "release":
        from . import release

        return asyncio.run(_named(release.release, settings, stop=args.stop, force=args.force, out=sys.stdout))
    return asyncio.run(_named(run, settings))


async def _named(command: Any, settings: settings_mod.Settings, **kw: Any) -> int:
    """Run `command(settings, **kw)` with the cluster's name for the ownership marks (--cluster-name, else the uid
    of the kube-system namespace: unique, and the same for every operator of the cluster). An operator that may
    not read it runs unnamed: its marks then name no cluster, so no mark is ever judged stale (never adopted
    as the mark of a resource gone)."""
    from . import kubeapi

    if not settings.cluster_name:
        try:
            settings = dataclasses.replace(settings, cluster_name=await kubeapi.cluster_uid())
        except kubeapi.ApiException as exc:
            logging.getLogger("jsoperator").warning(
                f"cannot read the kube-system namespace to name this cluster in the ownership marks ({exc.status} "
                f"{exc.reason}): marks left by deleted resources are not recognised as such; pass --cluster-name "
                "or grant get on namespaces")
    result: int = await command(settings, **kw)
    return result


def _import_parser(sub: Any) -> None:
    imp = sub.add_parser(
        "import", help="write Stream, KeyValue, ObjectStore and Consumer manifests that adopt a server's streams, "
        "buckets and durable consumers",
        description="Read every stream and durable consumer of a server and write Stream, KeyValue, ObjectStore "
        "and Consumer manifests that, applied, adopt them unchanged (adoptionPolicy: adopt; fields at the server's "
        "defaults left out). A bucket (KV_*, OBJ_*) no bucket spec can say without a change is written as a Stream, "
        "with a note on stderr; ephemeral consumers are skipped with a note. "
        "Exit status 1 when an object could not be imported (the note says why); the others are still written.")
    _nats_flags(imp)
    imp.add_argument("-n", "--namespace", help="metadata.namespace of the manifests (default: none, kubectl's)")
    imp.add_argument("-o", "--output", default="-", metavar="PATH",
                     help="a file, or a directory (existing, or ending in /) for one file per resource; "
                     "default - (stdout)")
    imp.add_argument("--deletion-policy", choices=["retain", "delete"], default="retain",
                     help="spec.deletionPolicy of every manifest. Default retain: deleting a resource (kubectl "
                     "delete, a GitOps prune) never deletes the server object or its messages; delete would")
    conn = imp.add_argument_group(
        "spec.connection of the manifests", "unset: none, the operator reaches them through its own --servers")
    conn.add_argument("--connection-servers", type=settings_mod.split_csv, metavar="URL[,URL]",
                      help="spec.connection.servers")
    conn.add_argument("--connection-creds-secret", metavar="NAME[:KEY]",
                      help="spec.connection.credentialsSecretRef (key default creds)")
    conn.add_argument("--connection-token-secret", metavar="NAME[:KEY]",
                      help="spec.connection.tokenSecretRef (key default token)")
    conn.add_argument("--connection-user-secret", metavar="NAME", help="spec.connection.userSecretRef")
    conn.add_argument("--connection-tls-secret", metavar="NAME", help="spec.connection.tlsSecretRef")
    conn.add_argument("--connection-js-domain", metavar="DOMAIN", help="spec.connection.jsDomain")
    migrate = imp.add_argument_group(
        "migration from NACK", "--from-nack reads NACK's jetstream.nats.io resources instead of a server and writes "
        "ours adopting the same server objects, with a table of the NACK fields that did not map (stdout)")
    migrate.add_argument("--from-nack", action="store_true",
                         help="read NACK's Stream, Consumer, KeyValue, ObjectStore and Account (v1beta2) from the "
                         "cluster (-n: one namespace; default all) or from -f files")
    migrate.add_argument("-f", "--filename", action="append", default=[], metavar="PATH",
                         help="with --from-nack: a YAML file as `kubectl get -o yaml` writes it (- for stdin; "
                         "repeatable); resources without a namespace get -n's")
    migrate.add_argument("--strict", action="store_true", help="with --from-nack: exit 1 when a NACK field did not map")


def _import(args: argparse.Namespace) -> int:
    """`jsoperator import`: read the server (the NATS flags, as `run` takes them), write the manifests."""
    from datetime import datetime, timezone

    from . import credentials, importer, jsclient, models

    try:
        settings = settings_mod.load(vars(args))
        connection = _spec_connection(args)
        options = importer.Options(args.namespace, connection, args.deletion_policy)
    except (settings_mod.SettingsError, models.SpecError) as exc:
        print(f"jsoperator import: {exc}", file=sys.stderr)
        return 2
    logging.getLogger("nats").setLevel(logging.CRITICAL)  # a failed connect is reported once, below
    try:
        streams, consumers, where = asyncio.run(_read_server(settings))
        result = importer.import_server(streams, consumers, options, datetime.now(timezone.utc))
        for note in result.notes + _connection_notes(connection, settings.js_domain, bool(result.manifests)):
            print(f"jsoperator import: {note}", file=sys.stderr)
        written = _write_manifests(result.manifests, args.output)
    except (jsclient.BrokerUnavailable, jsclient.ApiError, credentials.CredentialsError, OSError) as exc:
        problem = f"cannot use {exc.filename}: {exc.strerror}" if isinstance(exc, OSError) else str(exc)
        print(f"jsoperator import: {' '.join(problem.split())}", file=sys.stderr)
        return 1
    kinds = [m["kind"] for m in result.manifests]
    *counts, last = (f"{kinds.count(kind)} {kind}" for kind in importer.KINDS)
    print(f"jsoperator import: {', '.join(counts)} and {last} manifests from {where} written to {written}",
          file=sys.stderr)
    return 1 if result.failed else 0


def _connection_notes(connection: models.ConnectionSpec | None, js_domain: str | None, written: bool) -> list[str]:
    """Where the manifests' connection may not reach what was read."""
    if connection is None:
        return ["the manifests have no spec.connection: the operator must reach this server through its own "
                "--servers (else give --connection-servers)"] if written else []
    if js_domain and not connection.js_domain:
        return [f"read through JetStream domain {js_domain}, but the manifests' spec.connection names none: add "
                f"--connection-js-domain {js_domain} if the operator needs it too"]
    return []


def _spec_connection(args: argparse.Namespace) -> models.ConnectionSpec | None:
    """The --connection-* flags as a validated spec.connection; None when none is given."""
    from pydantic import ValidationError

    from . import models

    def ref(value: str | None, default_key: str) -> dict[str, str] | None:
        name, _, key = (value or "").partition(":")
        return {"name": name, "key": key or default_key} if value else None

    raw = {
        "servers": list(args.connection_servers) if args.connection_servers else None,
        "credentialsSecretRef": ref(args.connection_creds_secret, "creds"),
        "tokenSecretRef": ref(args.connection_token_secret, "token"),
        "userSecretRef": {"name": args.connection_user_secret} if args.connection_user_secret else None,
        "tlsSecretRef": {"name": args.connection_tls_secret} if args.connection_tls_secret else None,
        "jsDomain": args.connection_js_domain,
    }
    given = {key: value for key, value in raw.items() if value is not None}
    if not given:
        return None
    try:
        return models.ConnectionSpec.model_validate(given)
    except ValidationError as exc:
        problems = "; ".join(error["msg"].removeprefix("Value error, ") for error in exc.errors())
        raise models.SpecError(f"the --connection-* flags make no valid spec.connection: {problems}") from None


async def _read_server(
    settings: settings_mod.Settings,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], str]:
    """Every StreamInfo by name, every ConsumerInfo by stream and name, and the servers read."""
    from . import credentials, jsclient

    connection = await credentials.resolve(None, "", settings)
    pool = jsclient.Pool(timeout=settings.request_timeout)
    try:
        client = await pool.client(connection)
        streams = await client.stream_list()
        return streams, {name: await client.consumer_list(name) for name in streams}, connection.describe()
    finally:
        await pool.close()


def _write_manifests(manifests: list[dict[str, Any]], output: str) -> str:
    """Write to stdout (``-``), one file, or one file per resource in a directory; returns where."""
    from pathlib import Path

    from . import importer

    if output == "-":
        sys.stdout.write(importer.render(manifests))
        return "stdout"
    path = Path(output)
    if not (output.endswith("/") or path.is_dir()):
        path.write_text(importer.render(manifests))
        return str(path)
    path.mkdir(parents=True, exist_ok=True)
    for manifest in manifests:
        (path / f"{manifest['kind'].lower()}-{manifest['metadata']['name']}.yaml").write_text(
            importer.render([manifest]))
    return f"{path}/"


async def run(settings: settings_mod.Settings) -> int:
    """Run kopf with our handlers until SIGINT/SIGTERM (0), or until leadership is lost (1: restart as standby).

    The health port serves from the start: a standby waiting for the Lease is alive and ready too."""
    from . import health, jsclient, leader, scheduler

    sched = scheduler.Scheduler(settings.drift_interval)
    pool = jsclient.Pool(timeout=settings.request_timeout, listener=sched)
    probes = health.Health(pool, settings.namespaces)
    if settings.health_port:
        await probes.serve(settings.health_port)
    elector = None
    lost, stop = asyncio.Event(), asyncio.Event()  # leadership lost; kopf to stop (lost, or kopf's own cleanup)

    async def hold(elector: leader.Elector) -> None:
        await elector.hold(lost)
        stop.set()

    try:
        if settings.leader_election:
            namespace, _, name = settings.leader_election.partition("/")
            elector = leader.Elector(namespace, name, _identity())
            await elector.acquire()
        holding = asyncio.create_task(hold(elector)) if elector else None
        try:
            await _operate(settings, sched, pool, stop)
        finally:
            if holding is not None:
                holding.cancel()
            if elector is not None and not lost.is_set():
                await elector.release()
    finally:
        await probes.close()
        await pool.close()
    return 1 if lost.is_set() else 0


async def _operate(
    settings: settings_mod.Settings, sched: scheduler.Scheduler, pool: jsclient.Pool, stop: asyncio.Event
) -> None:
    """kopf and the operator's own loops (scheduler, status refresh) until `stop` or a signal."""
    import kopf

    from . import freshness, handlers, metrics, reconcile

    registry = kopf.OperatorRegistry()
    handlers.register(registry, settings)
    if settings.metrics_port:
        metrics.serve(settings.metrics_port)
    runtime = reconcile.Runtime(settings=settings, pool=pool)
    background: set[asyncio.Task[None]] = set()  # best-effort deletes without finalizers
    serving = [asyncio.create_task(sched.serve(handlers.scheduled(runtime, sched)))]
    if settings.status_interval:
        serving.append(asyncio.create_task(freshness.serve(sched, pool, settings.status_interval)))

    async def shutdown() -> None:
        stop.set()  # a signal stopped kopf: its waiter on this flag must end too, or kopf waits 5 s for it
        for task in serving:
            task.cancel()
        await asyncio.gather(*serving, *background, return_exceptions=True)  # each logged its own failure
        await pool.close()

    try:
        await kopf.operator(
            registry=registry,
            settings=handlers.kopf_settings(settings),
            standalone=True,  # no kopf peering: the Lease (--leader-election) decides who runs
            identity=cast(Any, _identity()),  # kopf's Identity: a NewType of str it does not export
            clusterwide=not settings.namespaces,
            namespaces=settings.namespaces,
            memo=kopf.Memo(settings=settings, pool=pool, scheduler=sched, background=background, shutdown=shutdown),
            stop_flag=stop,
        )
    finally:
        await shutdown()  # again, in case kopf ended before its cleanup ran (idempotent)


def _identity() -> str:
    """kopf's peering identity: $POD_ID (as kopf documents) or host/pid. kopf's own guess asks the password
    database for the user's name, which fails for a numeric user without an entry (the image's 10001,
    OpenShift's random UIDs) and crashed the operator pod at start."""
    return os.environ.get("POD_ID") or f"{socket.gethostname()}/{os.getpid()}"


def configure_logging(settings: settings_mod.Settings) -> None:
    """Structured (JSON) or plain logs at the chosen level; kopf's chatter is kept one level quieter."""
    import kopf

    level = logging.getLevelNamesMapping()[settings.log_level.upper()]
    fmt = kopf.LogFormat.JSON if settings.log_format == "json" else kopf.LogFormat.PLAIN
    kopf.configure(debug=level <= logging.DEBUG, verbose=False, log_format=fmt)
    logging.getLogger().setLevel(level)
    logging.getLogger("kopf").setLevel(max(level, logging.WARNING) if level > logging.DEBUG else level)
    for noisy in ("nats", "aiohttp.access"):  # reconnect chatter, one line per /healthz probe
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
