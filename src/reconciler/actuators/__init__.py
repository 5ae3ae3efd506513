"""The actuators: each owns one piece of the node and converges it by difference.

`order` declares the protocol every actuator implements, the order they run
in and which serves only once another holds nothing; the actuators are the
health source (`health`), the MPS gate (`mps_gate`), the CDI spec files
(`cdi`), the device-plugin servers (`fleet`, over `kubelet`'s transport) and
DRA mode's kubelet plugin and ResourceSlices (`dra`).
"""
