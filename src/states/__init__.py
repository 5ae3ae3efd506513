"""The plugin's lifecycle as declarative data, and the machine that enforces it.

`table` is the whole behaviour of the lifecycle as constants (states,
transitions, deliberately ignored pairs); `machine` wraps the `transitions`
library around it and records history. The machine performs no I/O: the
reconcile loop does the work and reports facts to it as triggers, so every
legal path is visible in one table and every illegal one is an error.
"""
