"""Generated Python stubs of the kubelet's DRA plugin API, one package per version.

`v1/api.proto` and `v1beta1/api.proto` are vendored from Kubernetes
(`k8s.io/kubelet/pkg/apis/dra/...`); their messages are the same on the wire, only
the gRPC package (and so the method paths) differ. The `api_pb2*` files are generated
by `scripts/gen_proto.py` and committed; do not edit them by hand.
"""
