"""Pure domain logic: discovered devices + effective config -> the resources to serve.

No I/O happens here. Given an `Inventory` and options, the builder decides
which kubelet resources exist, which device IDs each advertises, and how an
allocation of those IDs turns into container edits. Being pure, all of it is
table-tested without sockets or processes.
"""
