# The broker pod's init container: create the broker's token Secret with a random token if it does not
# exist, keep it if it does. Helm never renders the Secret, so `helm template` (Argo CD) gives the same
# output every time and a sync never replaces the token clients use.
# Arguments: SECRET_NAME KEY LABELS_JSON; the namespace comes from $POD_NAMESPACE.
import json
import os
import secrets
import sys

import kubernetes.client
import kubernetes.config
from kubernetes.client.exceptions import ApiException

name, key, labels = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
namespace = os.environ["POD_NAMESPACE"]
kubernetes.config.load_config()  # in the pod: its ServiceAccount; elsewhere: $KUBECONFIG
api = kubernetes.client.CoreV1Api()


def fail(what, exc):
    sys.exit(f"{what} Secret {namespace}/{name}: {exc.status} {exc.reason}; the broker's ServiceAccount needs "
             f"get and create on it (the chart's Role), or create the Secret yourself (key {key!r})")


try:
    data = api.read_namespaced_secret(name, namespace).data or {}
except ApiException as exc:
    if exc.status != 404:
        fail("cannot read", exc)
    body = {"metadata": {"name": name, "labels": labels}, "type": "Opaque",
            "stringData": {key: secrets.token_hex(24)}}
    try:
        api.create_namespaced_secret(namespace, body)
        print(f"created Secret {namespace}/{name} with a random token under key {key!r}")
        sys.exit(0)
    except ApiException as exc:
        if exc.status != 409:  # 409: created meanwhile by another pod, read it below
            fail("cannot create", exc)
        data = api.read_namespaced_secret(name, namespace).data or {}
if key not in data:
    sys.exit(f"Secret {namespace}/{name} exists without key {key!r} (keys: {sorted(data)}): add the token "
             f"under that key, or set broker.auth.secretKey to the key it has")
print(f"kept Secret {namespace}/{name}: its token under key {key!r} stays")
