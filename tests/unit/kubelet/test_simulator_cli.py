"""The `kubelet-sim` command line, in this process (tests/e2e/kubelet runs it as a subprocess)."""

from __future__ import annotations

import pytest

from kubelet.simulator.cli import main


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for command in ("serve", "list", "allocate", "preferred", "options"):
        assert command in out
