"""DRA kubelet-plugin API v1beta1 (`k8s.io.kubelet.pkg.apis.dra.v1beta1`), generated stubs."""
