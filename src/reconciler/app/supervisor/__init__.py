"""One supervisor for every thread and long-lived task of the plugin process.

Like controller-runtime's Manager and its Runnables: each part that runs on
its own (a thread, a pool of threads, an asyncio task) is a `Runnable` with
a name, an `async start()`, an `async stop(grace)` and a `status()`; the
`Supervisor` starts them in the order they were declared, stops them in the
reverse order, each stop bounded by its grace period, and shows every one
on `/state` (`runnables`), a failure with its one-line reason.

A thread or task that belongs to an object the loop drives (the NVML
worker, the health source, the MPS probe rounds, the DRA slice watch) is
started and stopped by that object; the supervisor only shows it
(`Supervisor.watch`), through a small accessor on its owner that answers a
`Condition`. So each thread has one owner, and one list names them all
(docs/threads.md).

- `states.runnable`: the frozen values (`RunState`, `Condition`,
  `RunnableStatus`), re-exported here;
- `manager`: the `Runnable` protocol and the `Supervisor`;
- `adapters`: a part with its own start and stop (`Service`), a pool of
  threads (`Pool`), an asyncio task (`Task`), and `alive`, the condition of
  an owner whose thread may have ended.
"""

from reconciler.app.supervisor.adapters import Pool, Service, Task, alive
from reconciler.app.supervisor.manager import Runnable, Supervisor
from states.runnable import (
    RUNNING,
    THREAD_ENDED,
    Condition,
    RunnableStatus,
    RunState,
    StatusCell,
)

__all__ = [
    "RUNNING",
    "THREAD_ENDED",
    "Condition",
    "Pool",
    "RunState",
    "Runnable",
    "RunnableStatus",
    "Service",
    "StatusCell",
    "Supervisor",
    "Task",
    "alive",
]
