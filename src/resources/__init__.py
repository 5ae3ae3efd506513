"""Pure domain logic: discovered devices + effective options -> the resources to serve.

Given an `Inventory` and `ResourceOptions`, `builder.plan_resources` decides
which kubelet resources exist, which device IDs each advertises and how an
allocation of them behaves; `allocation.Allocator` answers Allocate and
GetPreferredAllocation for one resource; `cdi_spec` produces the CDI specs of
the CDI device-list strategies; `wire` guards the ListAndWatch message size.
Host filesystem probes are injected through the options, and the only write
is `cdi_files.write_spec`, so everything else is table-tested without sockets,
processes or a GPU.
"""
