"""The kubelet-facing surface: v1beta1 stubs, one gRPC server per resource, registration.

grpc and protobuf are imported only inside this package. Handlers are pure
lookups into immutable `resources` objects: they never call NVML, so an
Allocate is answered from memory even while discovery or health checks are busy.
"""
