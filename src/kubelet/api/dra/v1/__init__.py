"""DRA kubelet-plugin API v1 (package `k8s.io.kubelet.pkg.apis.dra.v1`), generated stubs."""
