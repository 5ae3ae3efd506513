"""Composition root: the CLI entry, event sources, the reconcile loop and its wiring.

Only this package knows every other package. It builds the object graph once
(`app`), feeds one consumer task (`core.loop`) from event sources that only post
hints into a coalescing mailbox, and turns outcomes into lifecycle triggers.
"""
