from tests.kube.fixtures import envtest  # noqa: F401  (the dry-run apply tests)
