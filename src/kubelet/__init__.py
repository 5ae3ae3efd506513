"""The kubelet-facing surface: v1beta1 stubs, one gRPC server per resource, registration;
and the DRA kubelet plugin (`kubelet.dra`: pluginregistration and DRAPlugin v1/v1beta1).

grpc and protobuf are imported only inside this package and in the kubelet
simulator (`kubelet_sim`), which plays the kubelet's end of these APIs. Handlers
are pure lookups into immutable `resources` objects: they never call NVML, so an
Allocate is answered from memory even while discovery or health checks are busy.
DRA prepare/unprepare calls go to a `Preparer` given from above.
"""
