"""The only package that talks to the Kubernetes API (the official client).

Everything here runs in plain threads (its own, or one its caller runs it
in) with bounded timeouts, and reports back through callbacks or return
values, so an unreachable API server never blocks the plugin.
"""
