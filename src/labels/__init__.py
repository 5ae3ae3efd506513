"""GPU feature discovery: the node label catalog computed from the device model.

``gpu-feature-discovery`` (`labels.cli`) reads the plugin's configuration and
device inventory and publishes labels describing the node's GPUs. The pieces:

* `labels.catalog.compute_labels` - the whole label set, a pure function;
* `labels.resource_labels` / `labels.sharing` - per-resource labels, MIG
  strategies and what sharing means for them;
* `labels.host` / `labels.vgpu` - facts read from the host (DMI, sysfs, PCI
  configuration space) when the backend does not carry them;
* `labels.output` - the `LabelSink` seam and the NFD features file;
* `labels.flags` / `labels.options` - the command line and its precedence;
* `labels.runner` / `labels.waiting` - the pass loop, signals and reloads.
"""
