"""What the node should serve: the inputs, read off the loop, and the one plan built from them.

`inputs` (config file, environment, node label selection), `node` (device
discovery), `reading` (the NVML worker, a read as a value), `intake` (the
read applied on the loop's thread) and `desired` (the one serving plan for
the node's kubelet API: device plugin or DRA).
"""
