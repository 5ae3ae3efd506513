"""Run the plugin, counting the classes it creates before its first registration.

On Python 3.11 a frozen dataclass costs about a millisecond to create (each
generated method is compiled from source), and a pydantic model a few; on
the way to the first registration that is a large part of what the plugin
costs beyond its floors. This runs ``python -m reconciler`` with both
counted and, at the first `Register`, writes one line to stderr::

    classes before registration: {"dataclasses": N, "dataclass_ms": ..., ...}

Run as a script, like `floor_plugin.py`:

    python bench/class_count.py [plugin arguments]
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from typing import Any

MARKER = "classes before registration: "
_spent = {"dataclasses": 0, "dataclass_ms": 0.0, "models": 0, "model_ms": 0.0}


def _counted(function: Any, count: str, ms: str) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            _spent[count] += 1
            _spent[ms] += (time.perf_counter() - started) * 1000

    return wrapper


def main() -> int:
    # What the second floor loads too is loaded before counting starts, so the
    # counts are the plugin's own (and those of libraries the floors lack).
    import grpc.aio  # noqa: F401
    import pydantic_settings  # noqa: F401
    from pydantic._internal import _model_construction

    from kubelet.api import api_pb2_grpc  # noqa: F401

    dataclasses._process_class = _counted(  # type: ignore[attr-defined]
        dataclasses._process_class,  # type: ignore[attr-defined]
        "dataclasses",
        "dataclass_ms",
    )
    metaclass = _model_construction.ModelMetaclass
    metaclass.__new__ = _counted(metaclass.__new__, "models", "model_ms")  # type: ignore[method-assign]
    # Patched before `kubelet.server` takes its own reference to it.
    from kubelet import registration

    register = registration.register
    said = False

    async def counting_register(*args: Any, **kwargs: Any) -> Any:
        nonlocal said
        if not said:
            said = True
            line = {key: round(value, 1) for key, value in _spent.items()}
            print(MARKER + json.dumps(line), file=sys.stderr, flush=True)
        return await register(*args, **kwargs)

    registration.register = counting_register  # type: ignore[assignment]
    from reconciler.__main__ import main as plugin_main

    return plugin_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
