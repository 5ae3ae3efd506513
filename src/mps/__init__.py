"""MPS sharing: the control-daemon manager and the plugin-side readiness probe."""
