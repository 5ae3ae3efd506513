"""Everything the plugin knows about the node's GPUs, and the only place that talks to NVML.

`model` holds frozen facts (what a GPU is); `library` is the interface both
backends implement; `nvml` reads a real driver through pynvml; `simulated`
reads a YAML node description so the whole plugin runs on machines with no GPU.
"""
