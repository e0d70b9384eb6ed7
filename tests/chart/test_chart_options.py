"""The chart's monitoring and placement options through Helm's own engine: the broker's PodMonitor, the
NetworkPolicy, topologySpreadConstraints, extra volumes/mounts/env, an existing claim, the Grafana dashboard
ConfigMap and the `helm test` pod (`jsoperator check` with the operator's connection). Each is checked on
values; bad values are refused naming them. test_chart.py's VALUE_SETS carry them to the apiserver dry run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import servers
from tests.polling import poll
from tests.chart.test_chart import (  # noqa: F401  (helm_bin: the fixture)
    CHART, KUBE_VERSION, NAMESPACE, VALUE_SETS, env, helm_bin, one, render, run_helm)

SELECTOR = {"app.kubernetes.io/name": "jetstream-kopf", "app.kubernetes.io/instance": "jk"}


def test_nothing_new_is_rendered_by_default(helm_bin):
    kinds = {d["kind"] for d in render(helm_bin, [])}
    assert not kinds & {"PodMonitor", "NetworkPolicy"}
    assert [d["metadata"]["name"] for d in render(helm_bin, []) if d["kind"] == "ConfigMap"] == [
        "jk-jetstream-kopf-broker"]


@pytest.mark.parametrize("https", [False, True])
def test_the_broker_pod_monitor_scrapes_metrics_on_the_monitoring_port(helm_bin, https):
    values = VALUE_SETS["monitored"] + (VALUE_SETS["mutual-tls"] + ["broker.tls.monitoring=true"] if https else [])
    monitor = one(render(helm_bin, values), "PodMonitor")
    assert monitor["metadata"]["name"] == "jk-jetstream-kopf-broker"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"] == {**SELECTOR, "app.kubernetes.io/component": "broker"}
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    expected = {"port": "monitor", "path": "/metrics", "interval": "30s"}
    if https:  # the certificate names the client Service; the scrape goes to the pod
        expected |= {"scheme": "https", "tlsConfig": {"ca": {"secret": {"name": "broker-tls", "key": "ca.crt"}},
                                                       "serverName": f"jk-jetstream-kopf-broker.{NAMESPACE}.svc"}}
    assert endpoint == expected
    # the container port the endpoint names
    [broker] = one(render(helm_bin, values), "StatefulSet")["spec"]["template"]["spec"]["containers"]
    assert {"name": "monitor", "containerPort": 8222} in broker["ports"]
    assert not [d for d in render(helm_bin, ["broker.enabled=false", "nats.url=nats://n:4222",
                                             "broker.metrics.podMonitor.enabled=true"]) if d["kind"] == "PodMonitor"]


def test_the_network_policy_admits_this_releases_pods_and_the_given_peers(helm_bin):
    docs = render(helm_bin, VALUE_SETS["locked-down"])
    policy = one(docs, "NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"] == {**SELECTOR, "app.kubernetes.io/component": "broker"}
    assert policy["policyTypes"] == ["Ingress"]
    clients, monitoring = policy["ingress"]
    assert clients["ports"] == [{"port": "nats", "protocol": "TCP"}]
    own, *others = clients["from"]
    assert own == {"podSelector": {"matchLabels": SELECTOR, "matchExpressions": [
        {"key": "app.kubernetes.io/component", "operator": "In", "values": ["operator", "operator-release", "test"]}]}}
    assert others == [{"namespaceSelector": {"matchLabels": {"team": "orders"}}},
                      {"podSelector": {"matchLabels": {"app": "worker"}}}]
    assert monitoring == {"ports": [{"port": "monitor", "protocol": "TCP"}], "from": [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]}
    # The pods it admits carry those labels: the operator, its uninstall hook and the helm test pod.
    components = {one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"],
                  one(docs, "Job")["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"],
                  one(docs, "Pod")["metadata"]["labels"]["app.kubernetes.io/component"]}
    assert components == {"operator", "operator-release", "test"}
    for labels in (one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"], one(docs, "Pod")["metadata"]["labels"]):
        assert labels.items() >= SELECTOR.items()

    # No monitoring peers: no rule for the monitoring port (nothing but the node's probes reach it).
    policy = one(render(helm_bin, ["broker.networkPolicy.enabled=true"]), "NetworkPolicy")["spec"]
    assert [rule["ports"] for rule in policy["ingress"]] == [[{"port": "nats", "protocol": "TCP"}]]


def test_topology_spread_gets_the_pods_selector_unless_it_has_one(helm_bin):
    docs = render(helm_bin, VALUE_SETS["spread-and-extras"])
    [operator] = one(docs, "Deployment")["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert operator == {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                        "labelSelector": {"matchLabels": {**SELECTOR, "app.kubernetes.io/component": "operator"}}}
    [broker] = one(docs, "StatefulSet")["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert broker == {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                      "labelSelector": {"matchLabels": {"tier": "nats"}}}
    assert "topologySpreadConstraints" not in one(render(helm_bin, []), "Deployment")["spec"]["template"]["spec"]


def test_extra_volumes_mounts_and_env_reach_broker_and_operator_pods(helm_bin):
    docs = render(helm_bin, VALUE_SETS["spread-and-extras"])
    broker_pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]
    [broker] = broker_pod["containers"]
    assert env(broker)["TZ"] == "UTC" and list(env(broker))[-1] == "TZ"
    assert broker["volumeMounts"][-1] == {"name": "scratch", "mountPath": "/scratch"}
    assert {"name": "scratch", "emptyDir": {"medium": "Memory"}} in broker_pod["volumes"]
    # The operator's volumes are also the uninstall hook's and the helm test pod's (same settings).
    for pod in (one(docs, "Deployment")["spec"]["template"]["spec"], one(docs, "Job")["spec"]["template"]["spec"],
                one(docs, "Pod")["spec"]):
        assert pod["containers"][0]["volumeMounts"][-1] == {"name": "ca", "mountPath": "/etc/company-ca"}
        assert pod["volumes"][-1] == {"name": "ca", "configMap": {"name": "company-ca"}}


def test_an_existing_claim_replaces_the_claim_template(helm_bin):
    sts = one(render(helm_bin, VALUE_SETS["spread-and-extras"]), "StatefulSet")
    assert "volumeClaimTemplates" not in sts["spec"]
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"] == {"name": "data", "persistentVolumeClaim": {"claimName": "broker-store"}}
    [broker] = sts["spec"]["template"]["spec"]["containers"]
    assert {"name": "data", "mountPath": "/data"} in broker["volumeMounts"]


def test_the_helm_test_pod_checks_the_operators_own_connection(helm_bin):
    docs = render(helm_bin, [])
    pod = one(docs, "Pod", "jk-jetstream-kopf-test-connection")
    assert pod["metadata"]["annotations"] == {"helm.sh/hook": "test",
                                              "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded"}
    spec = pod["spec"]
    [check] = spec["containers"]
    assert check["args"] == ["jsoperator", "check"] and check["image"] == "jetstream-kopf:0.1.0"
    assert spec["restartPolicy"] == "Never" and spec["serviceAccountName"] == "jk-jetstream-kopf-operator"
    [operator] = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert check["env"] == operator["env"]  # servers, the token Secret, TLS: what the operator connects with
    assert env(check)["JSOPERATOR_TOKEN"] == {"secretKeyRef": {"name": "jk-jetstream-kopf-broker-auth", "key": "token"}}
    assert check["securityContext"]["readOnlyRootFilesystem"] and spec["securityContext"]["runAsNonRoot"]
    # mutual TLS: the operator's client certificate too
    [check] = one(render(helm_bin, VALUE_SETS["mutual-tls"]), "Pod")["spec"]["containers"]
    assert env(check)["JSOPERATOR_TLS_CERT"] == "/etc/jsoperator/client/tls.crt"
    assert {m["name"] for m in check["volumeMounts"]} == {"tmp", "tls", "client-tls"}
    # Rendered for Argo CD / kustomize without hooks: no test pod.
    assert not [d for d in render(helm_bin, [], "--no-hooks") if d["kind"] == "Pod"]


def test_the_dashboard_configmap_carries_the_dashboard_for_the_sidecar(helm_bin):
    docs = render(helm_bin, VALUE_SETS["monitored"] + ["grafanaDashboard.annotations.grafana_folder=NATS"])
    cm = one(docs, "ConfigMap", "jk-jetstream-kopf-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "NATS"}
    shipped = (CHART / "files" / "dashboards" / "jetstream-kopf.json").read_text()
    assert json.loads(cm["data"]["jetstream-kopf.json"]) == json.loads(shipped)


@pytest.mark.parametrize("value,message", [
    ("broker.persistence.enabled=false,broker.persistence.existingClaim=mine",
     "broker.persistence.existingClaim needs broker.persistence.enabled=true"),
    ("broker.topologySpreadConstraints[0].maxSkew=1", "at '/broker/topologySpreadConstraints/0': missing properties"),
    ("operator.topologySpreadConstraints[0].maxSkew=1,operator.topologySpreadConstraints[0].topologyKey=k,"
     "operator.topologySpreadConstraints[0].whenUnsatisfiable=Sometimes",
     "at '/operator/topologySpreadConstraints/0/whenUnsatisfiable'"),
    ("broker.networkPolicy.clients[0].namespaceSelectr.matchLabels.a=b", "additional properties 'namespaceSelectr'"),
    ("broker.networkPolicy.monitoring[0].ipBlock.except[0]=10.0.0.0/8",
     "at '/broker/networkPolicy/monitoring/0/ipBlock': missing property 'cidr'"),
    ("broker.extraVolumeMounts[0].name=x", "at '/broker/extraVolumeMounts/0': missing property 'mountPath'"),
    ("operator.extraVolumeMounts[0].name=x,operator.extraVolumeMounts[0].mountPath=relative",
     "at '/operator/extraVolumeMounts/0/mountPath'"),
    ("broker.extraEnv[0].value=x", "at '/broker/extraEnv/0': missing property 'name'"),
    ("broker.metrics.podMonitor.interval=often", "at '/broker/metrics/podMonitor/interval'"),
    ("grafanaDashboard.enable=true", "additional properties 'enable' not allowed"),
    ("broker.networkPolicy.enabled=true,broker.metrics.podMonitor.enabled=true",
     "broker.metrics.podMonitor.enabled with broker.networkPolicy.enabled needs broker.networkPolicy.monitoring"),
])
def test_bad_option_values_fail_naming_them(helm_bin, value, message):
    done = run_helm(helm_bin, "template", "jk", str(CHART), "--kube-version", KUBE_VERSION, "--set", value)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def _expand(value: str, variables: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of env values and args, from the variables defined before."""
    for name, resolved in variables.items():
        value = value.replace(f"$({name})", resolved)
    return value


def _container_env(container: dict[str, Any], secrets: dict[tuple[str, str], str], namespace: str) -> dict[str, str]:
    """The container's environment as the kubelet builds it: Secret keys and the pod's namespace resolved."""
    resolved: dict[str, str] = {}
    for entry in container.get("env", []):
        source = entry.get("valueFrom", {})
        if "secretKeyRef" in source:
            value = secrets[(source["secretKeyRef"]["name"], source["secretKeyRef"]["key"])]
        elif source.get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            value = namespace
        elif source.get("fieldRef", {}).get("fieldPath") == "metadata.name":
            value = "jk-jetstream-kopf-broker-0"
        else:
            value = _expand(entry["value"], resolved)
        resolved[entry["name"]] = value
    return resolved


def _serving(server: subprocess.Popen[bytes], port: int) -> bool:
    assert server.poll() is None, f"the rendered broker exited with {server.returncode}"
    try:
        return bool(servers.read_info(port))
    except OSError:
        return False


@pytest.mark.parametrize("token_in_secret,passes", [("the-token", True), ("another-token", False)])
def test_the_helm_test_pod_round_trips_through_the_rendered_broker(helm_bin, tmp_path, token_in_secret, passes):
    """The broker container and the test pod as rendered, run here: the broker with the chart's configuration
    and its token from the auth Secret, the test pod's command with its environment (the same Secret key);
    only the Service's DNS name is replaced by this machine's address. A different token fails the test."""
    docs = render(helm_bin, [])
    config = one(docs, "ConfigMap", "jk-jetstream-kopf-broker")["data"]["jsbroker.conf"]
    port, http_port = servers.free_port(), servers.free_port()
    (tmp_path / "jsbroker.conf").write_text(config.replace("/data", str(tmp_path)).replace(
        "port: 4222", f"port: {port}").replace("http_port: 8222", f"http_port: {http_port}"))
    [broker] = one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"]
    secret = ("jk-jetstream-kopf-broker-auth", "token")
    broker_env = _container_env(broker, {secret: "the-token"}, NAMESPACE)
    args = [_expand(a, broker_env).replace("/etc/jsbroker/jsbroker.conf", str(tmp_path / "jsbroker.conf"))
            for a in broker["args"]]
    assert args[0] == "jsbroker" and "--auth=the-token" in args
    server = subprocess.Popen([sys.executable, "-m", "jsbroker", *args[1:]], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        poll(lambda: _serving(server, port), timeout=20, what="the rendered broker serving")
        [check] = one(docs, "Pod", "jk-jetstream-kopf-test-connection")["spec"]["containers"]
        check_env = _container_env(check, {secret: token_in_secret}, NAMESPACE)
        assert check_env["JSOPERATOR_SERVERS"] == f"nats://jk-jetstream-kopf-broker.{NAMESPACE}.svc:4222"
        check_env["JSOPERATOR_SERVERS"] = f"nats://127.0.0.1:{port}"  # no cluster DNS here
        assert check["args"][0] == "jsoperator"
        done = subprocess.run([sys.executable, "-m", "jsoperator", *check["args"][1:]], capture_output=True,
                              text=True, timeout=60, env={**os.environ, **check_env})
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert (done.returncode == 0) is passes, done.stdout + done.stderr
    if passes:
        assert done.stdout.endswith(f"jsoperator check: nats://127.0.0.1:{port} works for the operator\n")
    else:
        assert "uthorization" in done.stdout, done.stdout


WEBSOCKET = ["broker.websocket.enabled=true", "broker.websocket.compression=true",
             "broker.websocket.allowedOrigins[0]=https://app.example.com", "broker.networkPolicy.enabled=true"]


@pytest.mark.parametrize("tls", [False, True])
def test_the_websocket_port_reaches_the_config_pod_service_and_policy(helm_bin, tls, tmp_path):
    """Off by default; on, the broker's config gets nats-server's websocket block (wss:// with the broker's
    certificate when TLS is on, else no_tls), and the port is on the pod, the client Service and the policy."""
    from jsbroker.config import TlsSettings, WebSocketSettings, load_file

    default = render(helm_bin, [])
    assert "websocket" not in one(default, "ConfigMap", "jk-jetstream-kopf-broker")["data"]["jsbroker.conf"]
    assert [p["name"] for p in one(default, "Service", "jk-jetstream-kopf-broker")["spec"]["ports"]] == ["nats", "monitor"]
    docs = render(helm_bin, WEBSOCKET + ["broker.auth.enabled=false"] + (VALUE_SETS["mutual-tls"] if tls else []))
    (tmp_path / "jsbroker.conf").write_text(one(docs, "ConfigMap", "jk-jetstream-kopf-broker")["data"]["jsbroker.conf"])
    certificate = TlsSettings(cert_file=Path("/etc/jsbroker/tls/tls.crt"), key_file=Path("/etc/jsbroker/tls/tls.key"))
    assert load_file(tmp_path / "jsbroker.conf", env={}).websocket == WebSocketSettings(
        port=8080, compression=True, allowed_origins=("https://app.example.com",), no_tls=not tls,
        tls=certificate if tls else None)
    assert {"name": "websocket", "port": 8080, "targetPort": "websocket"} in one(
        docs, "Service", "jk-jetstream-kopf-broker")["spec"]["ports"]
    [broker] = one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"]
    assert {"name": "websocket", "containerPort": 8080} in broker["ports"]
    [clients] = one(docs, "NetworkPolicy")["spec"]["ingress"]
    assert clients["ports"] == [{"port": "nats", "protocol": "TCP"}, {"port": "websocket", "protocol": "TCP"}]


def test_the_rendered_websocket_config_serves_nats_py(helm_bin, tmp_path):
    """The rendered broker configuration, run here: a nats-py client connects over ws:// and round-trips."""
    import asyncio

    import nats

    docs = render(helm_bin, WEBSOCKET + ["broker.auth.enabled=false"])
    config = one(docs, "ConfigMap", "jk-jetstream-kopf-broker")["data"]["jsbroker.conf"]
    port, ws_port = servers.free_port(), servers.free_port()
    (tmp_path / "jsbroker.conf").write_text(config.replace("/data", str(tmp_path)).replace(
        "port: 4222", f"port: {port}").replace("port: 8080", f'port: {ws_port}\n  host: "127.0.0.1"').replace(
        "http_port: 8222\n", ""))
    server = subprocess.Popen([sys.executable, "-m", "jsbroker", "-a", "127.0.0.1", "-c", str(tmp_path / "jsbroker.conf")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    async def round_trip() -> bytes:
        nc = await nats.connect(f"ws://127.0.0.1:{ws_port}", allow_reconnect=False)
        try:
            sub = await nc.subscribe("chart.ws", max_msgs=1)
            await nc.publish("chart.ws", b"over websocket")
            return (await sub.next_msg(timeout=5)).data
        finally:
            await nc.close()

    try:
        poll(lambda: _serving(server, port), timeout=20, what="the rendered broker serving")
        assert asyncio.run(round_trip()) == b"over websocket"
    finally:
        server.terminate()
        server.wait(timeout=30)
