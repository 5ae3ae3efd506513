"""What the sharing configuration means for one resource's labels.

The labeller reads the same ``sharing`` section as the plugin, but asks a
different question: not "how many replicas do I advertise" but "what do I tell
the scheduler about this resource". Three values come out per resource: the
replica count, the node-wide strategy name (only when this resource is really
replicated) and whether the product gets ``-SHARED``, which is the case exactly
when the replicas keep the original resource name (``renameByDefault: false``).
A ``rename`` on a single entry is not applied by the plugin, so it does not
count here either.

Several entries may give one resource different replica counts per GPU
(their ``devices`` lists); the label is one number, as in the reference, so
it is the smallest of them: every replicated GPU of the resource has at least
that many replicas. (The reference labels the first entry's count.)
"""

from __future__ import annotations

from dataclasses import dataclass

from settings import Sharing, SharingStrategy

__all__ = ["ResourceSharing", "SharingView"]


@dataclass(frozen=True)
class ResourceSharing:
    """The sharing labels of one resource."""

    replicas: int
    strategy: str
    shared_suffix: bool


NOT_SHARED = ResourceSharing(replicas=0, strategy=SharingStrategy.NONE.value, shared_suffix=False)
"""For resources sharing does not apply to (full GPUs whose MIG mode is on)."""


@dataclass(frozen=True)
class SharingView:
    """The sharing configuration as the labels see it."""

    active: SharingStrategy
    rename_by_default: bool
    replicas: tuple[tuple[str, int], ...]  # (resource name, replicas), in file order

    @classmethod
    def of(cls, sharing: Sharing) -> SharingView:
        """``sharing`` already holds only the list that applies (``mps`` hides ``timeSlicing``)."""
        replicated = any(resource.replicas > 1 for resource in sharing.resources)
        return cls(
            active=sharing.strategy if replicated else SharingStrategy.NONE,
            rename_by_default=sharing.rename_by_default,
            replicas=tuple((resource.name, resource.replicas) for resource in sharing.resources),
        )

    def for_resource(self, name: str) -> ResourceSharing:
        """Labels for ``name``: the smallest replica count of the entries naming it."""
        replicas = min(
            (count for entry, count in self.replicas if entry == name and count > 0), default=1
        )
        if replicas > 1:
            return ResourceSharing(
                replicas=replicas,
                strategy=self.active.value,
                shared_suffix=not self.rename_by_default,
            )
        return ResourceSharing(
            replicas=replicas, strategy=SharingStrategy.NONE.value, shared_suffix=False
        )
