"""Benchmarks: timed runs that report figures rather than pass or fail.

Each module in this package exposes `run() -> Sequence[Table]`, a table being
`(title, headers, rows)`; `python -m bench` runs them all and prints the
tables. They are kept out of the test suite because their figures depend on
the machine.
"""
