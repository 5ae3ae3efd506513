"""Generated Python stubs of the kubelet's plugin-registration API (plugins_registry)."""
