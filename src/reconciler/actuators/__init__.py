"""The actuators: each owns one piece of the node and converges it by difference.

`protocol` declares what every actuator implements, and `order` the order
they run in and which serves only once another holds nothing; the actuators
are the health source (`health`), the MPS gate (`mps_gate`), the CDI spec
files (`cdi`), the device-plugin servers (`servers`, driving `fleet` over
`kubelet`'s transport) and DRA mode's kubelet plugin and ResourceSlices
(`dra`, shown on `/state` through `dra_status`).
"""
