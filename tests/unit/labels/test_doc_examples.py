"""Label values the documentation tells users to select on are ones the labeller writes."""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.labels.helpers import run_oneshot

REPO = Path(__file__).resolve().parents[3]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PROFILES = sorted(path.stem for path in (REPO / "config" / "nodes").glob("*.yaml"))
EXAMPLE = re.compile(r"(nvidia\.com/[a-z0-9.-]+\.product)=([A-Za-z0-9._-]+)")


def examples() -> list[tuple[str, str, str]]:
    found = []
    for doc in DOCS:
        for key, value in EXAMPLE.findall(doc.read_text(encoding="utf-8")):
            found.append((doc.name, key, value))
    return found


def test_the_docs_have_examples_to_check() -> None:
    assert ("deployment.md", "nvidia.com/gpu.product", "Tesla-T4") in examples()


def test_every_documented_product_is_written_for_some_profile(tmp_path: Path) -> None:
    written: set[tuple[str, str]] = set()
    for profile in PROFILES:
        if profile == "nvml-broken":
            continue  # no devices to label
        code, labels = run_oneshot(tmp_path, "--mock-nvml", profile)
        assert code == 0, profile
        assert labels is not None
        written |= {(key, value) for key, value in labels.items() if key.endswith(".product")}
    missing = [(doc, key, value) for doc, key, value in examples() if (key, value) not in written]
    assert missing == []
