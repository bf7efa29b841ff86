from __future__ import annotations

import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "fixtures"
PROJECT_FIXTURES = REPO / "fixtures"


def shared(*parts: str) -> pathlib.Path:
    path = SHARED.joinpath(*parts)
    # A missing shared fixture is a broken checkout, never a reason to skip.
    assert path.exists(), f"shared fixture missing: {path}"
    return path


def torch_traces() -> list[pathlib.Path]:
    found = sorted(SHARED.glob("torch/**/*.json.gz")) + sorted(PROJECT_FIXTURES.glob("*.json.gz"))
    assert len(found) >= 16, f"expected the shared torch fixtures beside the repo, found {found}"
    return found


@pytest.fixture(scope="session")
def load_cached():
    import tracekit

    cache: dict[str, object] = {}

    def load(path):
        key = str(path)
        if key not in cache:
            cache[key] = tracekit.load(path)
        return cache[key]

    return load
