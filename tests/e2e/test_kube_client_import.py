"""The Kubernetes client can be loaded from several threads at once.

The plugin loads it lazily from more than one thread (the node label watch,
the event recorder, the DRA side). The client resolves its names through a
module `__getattr__`, and two first imports racing each other used to end in
Python's `_DeadlockError` in one thread, which stopped the node label watch.
Each run below is a fresh interpreter, since only the first import can race;
without `kube.official` most runs fail, so four of them almost never all pass.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

RACE = textwrap.dedent(
    """
    import importlib, sys, threading
    modules = sys.argv[1:]
    barrier = threading.Barrier(len(modules))
    errors = []

    def load(name):
        barrier.wait()
        try:
            importlib.import_module(name)
        except BaseException as error:
            errors.append(f"{name}: {type(error).__name__}: {error}")

    threads = [threading.Thread(target=load, args=(name,)) for name in modules]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("\\n".join(errors))
    sys.exit(1 if errors else 0)
    """
)
MODULES = ["kube.node_watch", "kube.client", "kube.events", "kube.resource_slices"]


def test_first_imports_of_the_client_from_four_threads_at_once_all_succeed() -> None:
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", RACE, *MODULES],
            env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [run.communicate(timeout=60)[0] for run in runs]
    failed = [out for run, out in zip(runs, outputs, strict=True) if run.returncode != 0]
    assert not failed, failed[0]
