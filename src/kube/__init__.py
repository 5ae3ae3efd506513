"""The only package that talks to the Kubernetes API (the official client).

Everything here runs in plain threads with bounded timeouts and reports back
through callbacks, so an unreachable API server never blocks the plugin.
"""
