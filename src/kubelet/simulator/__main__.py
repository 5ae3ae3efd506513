"""`python -m kubelet.simulator` runs the `kubelet-sim` command line."""

from __future__ import annotations

from kubelet.simulator.cli import main

raise SystemExit(main())
