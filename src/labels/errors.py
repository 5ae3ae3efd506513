"""The error that ends a labelling pass.

Anything the reference treats as fatal while building labels (a driver
version it cannot split, MPS sharing on a node with MIG enabled, a vGPU with
no host-driver record, a features file that cannot be written) is raised as
`LabelError`; the command logs its one-line message and exits 1. Problems the
reference only warns about never raise: they adjust the label instead.
"""

from __future__ import annotations

from foundation.errors import PermanentError

__all__ = ["LabelError"]


class LabelError(PermanentError):
    """A labelling pass cannot produce a correct label set; the message is one line."""
