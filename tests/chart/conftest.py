from tests.kube.fixtures import envtest, kube_namespace  # noqa: F401  (dry-run applies, the CRD upgrade)
