"""What the plugin shows of itself: `/state` (`snapshot`), Prometheus metrics and node Events.

Each reads frozen values the loop publishes or records it is handed; none
of them changes what the plugin serves.
"""
