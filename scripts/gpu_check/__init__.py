"""The GPU check behind `scripts/gpu-check`: the real backend against the driver's own tools.

Split by concern so each part can be tested alone: `smi` reads nvidia-smi's
table (or renders a simulated one), `compare` pairs and compares GPUs,
`steps` holds the in-process steps, `plugin_step` runs the plugin process
against the kubelet simulator, and `main` is the command line.
"""
