"""Benchmarks: timed runs that report figures rather than pass or fail.

`python -m bench` (`make bench`) runs every group and prints one table, a row
per figure with its median and 99th percentile and the goal it is held to;
the same rows go to `bench/results/latest.json`. Groups:

| group | module | what |
|---|---|---|
| rpc | `rpc` | Allocate / GetPreferredAllocation over the socket, beside a bare grpc.aio floor |
| startup | `lifecycle` | exec to registered, beside a process that only registers |
| restart | `lifecycle` | kubelet restart to re-registered |
| config | `lifecycle` | config file edit to new device list |
| label | `labels` | node label change (Kubernetes API) to new device list |
| api | `api_economy` | API requests per node and hour at steady state; QPS for 10,000 nodes |
| health | `health` | injected XID to Unhealthy at the kubelet |
| idle | `idle` | CPU and resident memory of a serving, idle plugin |
| scale | `scale` | 16 GPUs x 256 replicas: start-up, ListAndWatch size, calls |
| allocator | `allocator` | the preferred-allocation algorithm in-process (`preferred_allocation`) |
| loop | `loop` | Allocate and /healthz under a /state flood, 512-GPU preferred, huge configs |

Each group is `async def run(*, quick: bool) -> report.Outcome`. They are kept
out of the test suite because their figures depend on the machine; only
`tests/test_bench_quick.py` checks that a quick run produces its rows.
"""
