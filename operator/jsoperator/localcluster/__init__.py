"""A local Kubernetes control plane (etcd + kube-apiserver as processes, no kubelet) for `jsoperator demo`
and the test suite. Needs the `demo` extra (cryptography, for its throwaway PKI) and the two binaries
(`binaries.find()`)."""
