"""The DRA kubelet plugin's gRPC side: Registration, DRAPlugin (v1 and v1beta1), the server.

`types` holds the plain values shared with the rest of the product (claims, prepared
devices, the `Preparer` protocol, the socket layout); `servicer` and `registration`
translate the kubelet's calls; `server.DraPluginServer` binds both sockets as an
actuator of the reconcile loop.
"""
