"""`python -m kubelet_sim` runs the `kubelet-sim` command line."""

from __future__ import annotations

from kubelet_sim.cli import main

raise SystemExit(main())
