"""The labeller's parts that stand on the Kubernetes client, loaded on first use.

A labeller that writes the NFD features file (or stdout) never talks to the
API server, and should not load the Kubernetes client (a quarter second or
more) to find that out. The sinks that publish through the API
(`labels.node_sink`) are asked for here, on first use, and typed with what
they return (through `TYPE_CHECKING` imports), so callers are checked as if
they had imported them. The config label's watch comes from
`kube.on_demand`.

This module and its siblings (`kube.on_demand`, `reconciler.on_demand`) are
the only places where an import sits inside a function
(`tests/unit/test_imports.py` holds them to that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from labels.node_sink import KubeSinks

__all__ = ["kube_sinks"]


def kube_sinks() -> type[KubeSinks]:
    """`labels.node_sink.KubeSinks`: the NodeFeature object's and the Node's label sinks."""
    from labels.node_sink import KubeSinks

    return KubeSinks
