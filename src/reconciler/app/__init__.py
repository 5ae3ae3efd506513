"""The application wiring: the parts built as data, the supervisor, the event sources.

`parts` builds every part of the process as one frozen value, `serve` runs
them under the `supervisor` in a declared order, and `sources` are the event
sources (file watches, the node watch, signals) that post hints.
"""
