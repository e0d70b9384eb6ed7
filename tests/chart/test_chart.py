"""The Helm chart through Helm's own engine: lint, renders for several values sets (checked on values),
bad values refused by values.schema.json, CRDs identical to crds/, the broker's rendered configuration
accepted by jsbroker itself, and every rendered object accepted by a real kube-apiserver (server-side
apply, dry run)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.dynamic
import pytest
import yaml

from jsbroker.config import load_file
from tests import servers
from tests.chart import go_tools
from tests.chart.go_tools import KUBE_VERSION

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "jetstream-kopf"
NAMESPACE = "jk-chart"
OPERATOR = "jk-jetstream-kopf-operator"

VALUE_SETS: dict[str, list[str]] = {
    "defaults": [],
    "external-nats": ["broker.enabled=false", "nats.url=nats://nats.nats.svc:4222", "nats.credsSecret=nats-creds",
                      "nats.tlsSecret=nats-ca"],
    "namespaced": ["operator.watchNamespaces={jk-team-a,jk-team-b}"],
    "ephemeral-broker": ["broker.persistence.enabled=false", "broker.auth.enabled=false"],
    "monitored": ["operator.metrics.serviceMonitor.enabled=true", "broker.config.sync=always",
                  "broker.config.maxStorage=10GB", "broker.metrics.podMonitor.enabled=true",
                  "broker.metrics.podMonitor.labels.release=prom", "grafanaDashboard.enabled=true"],
    "locked-down": ["broker.networkPolicy.enabled=true",
                    "broker.networkPolicy.clients[0].namespaceSelector.matchLabels.team=orders",
                    "broker.networkPolicy.clients[1].podSelector.matchLabels.app=worker",
                    "broker.networkPolicy.monitoring[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring"],
    "spread-and-extras": [
        "operator.topologySpreadConstraints[0].maxSkew=1",
        "operator.topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
        "operator.topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
        "broker.topologySpreadConstraints[0].maxSkew=1",
        "broker.topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
        "broker.topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
        "broker.topologySpreadConstraints[0].labelSelector.matchLabels.tier=nats",
        "operator.extraVolumes[0].name=ca", "operator.extraVolumes[0].configMap.name=company-ca",
        "operator.extraVolumeMounts[0].name=ca", "operator.extraVolumeMounts[0].mountPath=/etc/company-ca",
        "broker.extraVolumes[0].name=scratch", "broker.extraVolumes[0].emptyDir.medium=Memory",
        "broker.extraVolumeMounts[0].name=scratch", "broker.extraVolumeMounts[0].mountPath=/scratch",
        "broker.extraEnv[0].name=TZ", "broker.extraEnv[0].value=UTC",
        "broker.persistence.existingClaim=broker-store"],
    "websocket": ["broker.websocket.enabled=true", "broker.websocket.compression=true",
                  "broker.websocket.allowedOrigins[0]=https://app.example.com"],
    "accounts": ["broker.auth.enabled=false", "broker.accounts.team-a.users[0].user=a",
                 "broker.accounts.team-a.users[0].passwordSecret.name=a-nats",
                 "broker.accounts.team-a.users[0].passwordSecret.key=password",
                 "broker.accounts.team-a.jetstream.enabled=true", "broker.noAuthUser=a",
                 "broker.configSecret.name=more-accounts"],
    "mutual-tls": ["broker.tls.enabled=true", "broker.tls.secretName=broker-tls", "broker.tls.verify=true",
                   "broker.tls.operatorSecret=operator-tls"],
}


def tool(which: go_tools.Tool) -> Path:
    try:
        return which.ensure()
    except go_tools.ToolUnavailable as exc:
        if go_tools.assets.required():
            pytest.fail(str(exc))
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def helm_bin() -> Path:
    return tool(go_tools.HELM)


def run_helm(helm_bin: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm_bin), *args], capture_output=True, text=True, timeout=120)


def render(helm_bin: Path, values: list[str], *extra: str) -> list[dict[str, Any]]:
    args = ["template", "jk", str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION, *extra]
    for v in values:
        args += ["--set", v]
    done = run_helm(helm_bin, *args)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name or ''}: {len(found)} found"
    return found[0]


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_lint(helm_bin):
    done = run_helm(helm_bin, "lint", str(CHART), "--strict", "--kube-version", KUBE_VERSION)
    assert done.returncode == 0 and "0 chart(s) failed" in done.stdout, done.stdout + done.stderr


def test_chart_crds_are_the_repository_crds():
    ours = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    assert ours and ours == sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    for name in ours:
        assert (CHART / "crds" / name).read_text() == (ROOT / "crds" / name).read_text(), name


def test_defaults_run_the_broker_statefulset_and_point_the_operator_at_it(helm_bin):
    docs = render(helm_bin, [])
    sts = one(docs, "StatefulSet")
    assert sts["spec"]["replicas"] == 1
    [claim] = sts["spec"]["volumeClaimTemplates"]
    assert (claim["apiVersion"], claim["kind"], claim["spec"]["resources"]["requests"]["storage"]) == (
        "v1", "PersistentVolumeClaim", "10Gi")
    pod = sts["spec"]["template"]["spec"]
    [broker] = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] and broker["securityContext"]["readOnlyRootFilesystem"]
    assert broker["readinessProbe"]["httpGet"]["path"] == "/healthz?js-enabled-only=true"
    assert pod["terminationGracePeriodSeconds"] == 60
    assert broker["lifecycle"]["preStop"]["exec"]["command"] == ["jsbroker", "--signal", "ldm=/data/jsbroker.pid"]
    assert one(docs, "Service", "jk-jetstream-kopf-broker-headless")["spec"]["publishNotReadyAddresses"] is True

    deploy = one(docs, "Deployment")
    assert deploy["spec"]["replicas"] == 2 and deploy["spec"]["strategy"]["type"] == "RollingUpdate"
    [operator] = deploy["spec"]["template"]["spec"]["containers"]
    variables = env(operator)
    assert variables["JSOPERATOR_LEADER_ELECTION"] == "$(POD_NAMESPACE)/jk-jetstream-kopf-operator"  # one of 2 leads
    lease_rules = one(docs, "Role", "jk-jetstream-kopf-operator-leader-election")["rules"]
    assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [
        "jk-jetstream-kopf-operator"], "verbs": ["get", "update"]} in lease_rules
    pdb = one(docs, "PodDisruptionBudget", "jk-jetstream-kopf-operator")["spec"]
    assert pdb["maxUnavailable"] == 1 and pdb["selector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"
    # The broker's namespace is the operator pod's own, so a rendered manifest works in any namespace.
    assert list(variables)[:2] == ["POD_NAMESPACE", "JSOPERATOR_SERVERS"]
    assert variables["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert variables["JSOPERATOR_SERVERS"] == "nats://jk-jetstream-kopf-broker.$(POD_NAMESPACE).svc:4222"
    assert operator["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert operator["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    secret = "jk-jetstream-kopf-broker-auth"
    assert variables["JSOPERATOR_TOKEN"]["secretKeyRef"] == {"name": secret, "key": "token"}
    assert env(broker)["JSBROKER_AUTH_TOKEN"]["secretKeyRef"] == {"name": secret, "key": "token"}
    rules = one(docs, "ClusterRole")["rules"]
    assert {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]} in rules
    granted = {r for rule in rules if rule["apiGroups"] == ["jsoperator.io"] for r in rule["resources"]}
    assert {"jetstreamconnections", "clusterjetstreamconnections", "jetstreamconnections/status",
            "clusterjetstreamconnections/status"} <= granted


def test_no_secret_is_rendered_and_the_broker_creates_its_token_at_first_start(helm_bin):
    docs = render(helm_bin, [])
    assert not [d for d in docs if d["kind"] == "Secret"]
    pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]
    [init] = pod["initContainers"]
    assert init["command"][:2] == ["python", "-c"] and init["command"][2] == (CHART / "files" / "ensure-token.py").read_text()
    assert init["command"][3:5] == ["jk-jetstream-kopf-broker-auth", "token"]
    # Only the init container holds the ServiceAccount's token; the broker has no API access.
    assert pod["serviceAccountName"] == "jk-jetstream-kopf-broker" and pod["automountServiceAccountToken"] is False
    assert [m["name"] for m in init["volumeMounts"]] == ["kube-api-access"]
    assert "kube-api-access" not in [m["name"] for m in pod["containers"][0]["volumeMounts"]]
    role = one(docs, "Role", "jk-jetstream-kopf-broker-auth")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["jk-jetstream-kopf-broker-auth"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}]
    assert one(docs, "RoleBinding", "jk-jetstream-kopf-broker-auth")["subjects"] == [
        {"kind": "ServiceAccount", "name": "jk-jetstream-kopf-broker"}]

    # A Secret of the user's: no init container, no account, no Role.
    docs = render(helm_bin, ["broker.auth.existingSecret=mine"])
    pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]
    assert "initContainers" not in pod and "serviceAccountName" not in pod
    assert not [d for d in docs if d["kind"] == "Secret" or d["kind"] in ("Role", "RoleBinding")
                and "broker" in d["metadata"]["name"]]
    assert env(pod["containers"][0])["JSBROKER_AUTH_TOKEN"]["secretKeyRef"] == {"name": "mine", "key": "token"}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_helm_template_twice_gives_identical_output(helm_bin, name):
    """What Argo CD relies on: it renders with `helm template` at every sync; a difference would be applied."""
    args = ["template", "jk", str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION]
    for value in VALUE_SETS[name]:
        args += ["--set", value]
    first, second = run_helm(helm_bin, *args), run_helm(helm_bin, *args)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout


def test_no_template_looks_up_the_cluster():
    """`lookup` returns nothing under `helm template` (Argo CD), so nothing may depend on it."""
    assert [p.name for p in (CHART / "templates").rglob("*") if p.is_file() and "lookup" in p.read_text()] == []


def test_the_rendered_broker_configuration_is_what_jsbroker_reads(helm_bin, tmp_path):
    docs = render(helm_bin, ["broker.config.maxPending=32MB", "broker.config.sync=always",
                             "broker.config.maxStorage=10GB", "broker.config.maxMemory=1G", "broker.config.domain=hub",
                             "broker.extraConfig=ping_max = 3"])
    path = tmp_path / "jsbroker.conf"
    path.write_text(one(docs, "ConfigMap")["data"]["jsbroker.conf"])
    cfg = load_file(path)
    assert (cfg.port, cfg.http_port, cfg.max_pending, cfg.ping_max) == (4222, 8222, 32 << 20, 3)
    # the pid file preStop's `jsbroker --signal ldm=` reads, on the writable data volume
    assert (str(cfg.pid_file), cfg.lame_duck_duration, cfg.lame_duck_grace_period) == ("/data/jsbroker.pid", 30, 1)
    assert cfg.jetstream is not None
    assert (str(cfg.jetstream.store_dir), cfg.jetstream.sync_always, cfg.jetstream.max_storage,
            cfg.jetstream.max_memory, cfg.jetstream.domain) == ("/data", True, 10 << 30, 1 << 30, "hub")


def test_nats_server_reads_the_default_broker_configuration(helm_bin, tmp_path):
    """The chart's broker configuration is nats-server's format, which nats-server itself accepts."""
    path = tmp_path / "jsbroker.conf"
    path.write_text(one(render(helm_bin, []), "ConfigMap")["data"]["jsbroker.conf"])
    checked = subprocess.run([servers.nats_server_binary(), "-c", str(path), "-t"], capture_output=True, text=True,
                             timeout=30)
    assert checked.returncode == 0, checked.stderr
    assert load_file(path).max_payload == 1 << 20


def test_a_config_change_rolls_the_broker_and_nothing_else_changes(helm_bin):
    def checksums(values: list[str]) -> tuple[str, dict[str, Any]]:
        docs = render(helm_bin, values)
        sts = one(docs, "StatefulSet")
        return sts["spec"]["template"]["metadata"]["annotations"]["checksum/config"], one(docs, "Deployment")

    base, deploy = checksums([])
    assert checksums([]) == (base, deploy)
    changed, deploy_after = checksums(["broker.config.maxPayload=2MB"])
    assert changed != base and deploy_after == deploy


def test_broker_tls_serves_the_secret_and_the_operator_trusts_its_ca(helm_bin, tmp_path):
    docs = render(helm_bin, VALUE_SETS["mutual-tls"])
    path = tmp_path / "jsbroker.conf"
    path.write_text(one(docs, "ConfigMap")["data"]["jsbroker.conf"])
    tls = load_file(path).tls
    assert tls is not None
    assert (str(tls.cert_file), str(tls.key_file), str(tls.ca_file), tls.verify) == (
        "/etc/jsbroker/tls/tls.crt", "/etc/jsbroker/tls/tls.key", "/etc/jsbroker/tls/ca.crt", True)
    broker_pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]
    assert {"name": "tls", "secret": {"secretName": "broker-tls"}} in broker_pod["volumes"]
    assert {"name": "tls", "mountPath": "/etc/jsbroker/tls", "readOnly": True} in broker_pod["containers"][0]["volumeMounts"]
    operator_pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    variables = env(operator_pod["containers"][0])
    assert variables["JSOPERATOR_SERVERS"] == "tls://jk-jetstream-kopf-broker.$(POD_NAMESPACE).svc:4222"
    assert (variables["JSOPERATOR_TLS_CA"], variables["JSOPERATOR_TLS_CERT"], variables["JSOPERATOR_TLS_KEY"]) == (
        "/etc/jsoperator/tls/ca.crt", "/etc/jsoperator/client/tls.crt", "/etc/jsoperator/client/tls.key")
    volumes = {v["name"]: v["secret"] for v in operator_pod["volumes"] if "secret" in v}
    assert volumes == {"tls": {"secretName": "broker-tls", "items": [{"key": "ca.crt", "path": "ca.crt"}]},
                       "client-tls": {"secretName": "operator-tls"}}


@pytest.mark.parametrize("monitoring", [False, True])
def test_broker_monitoring_over_https_when_asked_and_its_probes_follow(helm_bin, tmp_path, monitoring):
    docs = render(helm_bin, [*VALUE_SETS["mutual-tls"], f"broker.tls.monitoring={str(monitoring).lower()}"])
    path = tmp_path / "jsbroker.conf"
    path.write_text(one(docs, "ConfigMap")["data"]["jsbroker.conf"])
    config = load_file(path)
    assert (config.http_port, config.https_port) == ((None, 8222) if monitoring else (8222, None))
    [broker] = one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"]
    schemes = {broker[probe]["httpGet"].get("scheme", "HTTP") for probe in ("startupProbe", "readinessProbe", "livenessProbe")}
    assert schemes == {"HTTPS" if monitoring else "HTTP"}


def test_external_nats_has_no_broker_and_passes_the_secrets(helm_bin):
    docs = render(helm_bin, VALUE_SETS["external-nats"])
    assert not [d for d in docs if d["kind"] in ("StatefulSet", "ConfigMap", "Secret")]
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "PodDisruptionBudget"] == ["jk-jetstream-kopf-operator"]
    [operator] = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    variables = env(operator)
    assert variables["JSOPERATOR_SERVERS"] == "nats://nats.nats.svc:4222"
    assert variables["JSOPERATOR_CREDS_SECRET"] == f"{NAMESPACE}/nats-creds:creds"
    assert variables["JSOPERATOR_TLS_CA"] == "/etc/jsoperator/tls/ca.crt"


def test_watched_namespaces_get_roles_and_no_cluster_wide_access_to_resources(helm_bin):
    docs = render(helm_bin, VALUE_SETS["namespaced"])
    assert sorted(d["metadata"]["namespace"] for d in docs
                  if d["kind"] == "Role" and d["metadata"]["name"] == "jk-jetstream-kopf-operator") == ["jk-team-a", "jk-team-b"]
    cluster = {r for rule in one(docs, "ClusterRole")["rules"] for r in rule["resources"]}
    assert cluster == {"customresourcedefinitions", "namespaces", "clusterjetstreamconnections",
                       "clusterjetstreamconnections/status"}
    [operator] = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert env(operator)["JSOPERATOR_NAMESPACES"] == "jk-team-a,jk-team-b"


@pytest.mark.parametrize("value,message", [
    ("broker.replicas=3", "at '/broker/replicas'"),
    ("broker.enabled=false", "at '/nats/url': value must be 'the NATS servers, e.g. nats://nats.nats.svc:4222 "
                             "(broker.enabled=false needs nats.url)'"),
    ("broker.resources.limits.memory=banana",
     "at '/broker/resources/limits/memory': value must be 'a Kubernetes quantity such as 256Mi, 1Gi, 500m or 0.5'"),
    ("operator.resources.requests.cpu=lots",
     "at '/operator/resources/requests/cpu': value must be 'a Kubernetes quantity such as 256Mi, 1Gi, 500m or 0.5'"),
    ("broker.resources.limit.memory=1Gi", "additional properties 'limit' not allowed"),
    ("broker.persistence.size=big", "at '/broker/persistence/size': value must be 'a Kubernetes quantity"),
    ("broker.config.maxPayload=lots", "at '/broker/config/maxPayload': value must be 'a byte size such as"),
    ("broker.config.writeDeadline=10x", "at '/broker/config/writeDeadline': value must be 'a duration such as"),
    ("operator.logFormat=xml", "at '/operator/logFormat'"),
    ("operator.watchNamespaces={Bad_NS}", "at '/operator/watchNamespaces/0'"),
    ("brokr.enabled=true", "additional properties 'brokr' not allowed"),
    ("broker.tls.enabled=true", "broker.tls.secretName is required when broker.tls.enabled is true"),
    ("broker.tls.enabled=true,broker.tls.secretName=t,broker.tls.verify=true",
     "broker.tls.verify needs broker.tls.operatorSecret"),
])
def test_bad_values_fail_with_a_message_naming_them(helm_bin, value, message):
    done = run_helm(helm_bin, "template", "jk", str(CHART), "--kube-version", KUBE_VERSION, "--set", value)
    assert done.returncode != 0 and message in done.stderr, done.stderr


@pytest.mark.parametrize("value", [
    "broker.resources.limits.memory=512Mi", "broker.resources.limits.memory=1e9", "operator.resources.requests.cpu=0.5",
    "operator.resources.requests.cpu=250m", "broker.resources.limits.nvidia\\.com/gpu=1", "broker.persistence.size=1.5Ti",
    "broker.enabled=false,nats.url=nats://a:4222"])
def test_good_values_pass_the_schema(helm_bin, value):
    done = run_helm(helm_bin, "template", "jk", str(CHART), "--kube-version", KUBE_VERSION, "--set", value)
    assert done.returncode == 0, done.stderr


def dry_run_apply(envtest: Any, docs: list[dict[str, Any]], default_namespace: str) -> None:
    """Server-side apply every object with dryRun=All: the apiserver validates it against its schemas."""
    with envtest.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        wanted = {d["metadata"].get("namespace") for d in docs} | {default_namespace}
        for ns in sorted(n for n in wanted if n):
            try:
                core.create_namespace(kubernetes.client.V1Namespace(metadata=kubernetes.client.V1ObjectMeta(name=ns)))
            except kubernetes.client.ApiException as exc:
                assert exc.status == 409
        dyn = kubernetes.dynamic.DynamicClient(client)
        for doc in docs:
            if doc["kind"] in ("ServiceMonitor", "PodMonitor"):
                continue  # needs the Prometheus Operator's CRDs, which this apiserver lacks
            api = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            namespace = doc["metadata"].get("namespace", default_namespace) if api.namespaced else None
            api.server_side_apply(body=doc, name=doc["metadata"]["name"], namespace=namespace,
                                  field_manager="manifest-test", dry_run="All", force_conflicts=True)


@pytest.mark.xdist_group("kube")
@pytest.mark.kube
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_rendered_object_is_accepted_by_the_apiserver(helm_bin, envtest, name):
    dry_run_apply(envtest, render(helm_bin, VALUE_SETS[name], "--include-crds"), default_namespace=NAMESPACE)


def test_uninstall_hook_releases_the_finalizers_and_stays_out_of_templates_without_hooks(helm_bin):
    docs = render(helm_bin, [])
    job = one(docs, "Job", "jk-jetstream-kopf-operator-release")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["jsoperator", "release", "--force", "--stop", "$(POD_NAMESPACE)/jk-jetstream-kopf-operator"]
    assert env(container)["JSOPERATOR_SERVERS"] == "nats://jk-jetstream-kopf-broker.$(POD_NAMESPACE).svc:4222"
    scale = one(docs, "Role", "jk-jetstream-kopf-operator-release")["rules"]
    assert {"apiGroups": ["apps"], "resources": ["deployments/scale"], "resourceNames": [
        "jk-jetstream-kopf-operator"], "verbs": ["get", "patch"]} in scale
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]} in scale  # waits out terminating pods
    assert not [d for d in render(helm_bin, [], "--no-hooks") if d["kind"] == "Job"]
    assert not [d for d in render(helm_bin, ["operator.releaseOnUninstall=false"]) if d["kind"] == "Job"]
    [operator] = one(render(helm_bin, ["operator.finalizers=false"]), "Deployment")["spec"]["template"]["spec"][
        "containers"]
    assert env(operator)["JSOPERATOR_FINALIZERS"] == "false"


def test_instance_and_cluster_name_reach_the_operator_and_its_release_hook(helm_bin):
    """Several operators in one cluster: the hook must release with the operator's own finalizer."""
    docs = render(helm_bin, ["operator.instance=team-a", "operator.clusterName=east"])
    [operator] = one(docs, "Deployment", "jk-jetstream-kopf-operator")["spec"]["template"]["spec"]["containers"]
    [hook] = one(docs, "Job", "jk-jetstream-kopf-operator-release")["spec"]["template"]["spec"]["containers"]
    for container in (operator, hook):
        assert env(container)["JSOPERATOR_INSTANCE"] == "team-a"
        assert env(container)["JSOPERATOR_CLUSTER_NAME"] == "east"
    [plain] = one(render(helm_bin, []), "Deployment", "jk-jetstream-kopf-operator")["spec"]["template"]["spec"][
        "containers"]
    assert "JSOPERATOR_INSTANCE" not in env(plain) and "JSOPERATOR_CLUSTER_NAME" not in env(plain)
    refused = run_helm(helm_bin, "template", "jk", str(CHART), "--set", "operator.instance=Team_A")
    assert refused.returncode != 0 and "/operator/instance': 'Team_A' does not match" in refused.stderr
