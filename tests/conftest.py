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


def _plugin_installed() -> bool:
    """Whether tracekit's pytest plugin is already active through its entry point (an
    install that predates the entry point, or PYTHONPATH onto a checkout, has none)."""
    from importlib.metadata import entry_points

    return any(ep.value == "tracekit.integrations.pytest_plugin" for ep in entry_points(group="pytest11"))


# tracekit's own golden tests run through its pytest plugin; registering it twice is an error.
pytest_plugins = [] if _plugin_installed() else ["tracekit.integrations.pytest_plugin"]


def range_stack(trace, row: int, column: str = "range") -> list[str]:
    """Names of the ranges enclosing kernel `row` (by its `column` link), outermost first."""
    names = trace.ranges["name"].to_numpy()
    parents = trace.ranges["parent"].to_numpy()
    node = int(trace.kernels[column].iat[row])
    stack = []
    while node != -1:
        stack.append(str(names[node]))
        node = int(parents[node])
    return stack[::-1]
