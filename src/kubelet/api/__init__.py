"""Generated Python stubs of the kubelet device-plugin API (package `v1beta1`).

`api.proto` is written from the public v1beta1 contract; `api_pb2*` and their `.pyi`
type stubs are generated from it by `scripts/gen_proto.py` and committed, so the
product needs no protoc at run time. Do not edit the generated files by hand.
"""
