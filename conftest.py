import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

pytest_plugins = ["genlm_core.testing.pytest_plugin"]

#: Hypothesis examples per property test: the everyday run, and the thorough one.
EXAMPLES = {"fast": 40, "slow": 400}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow",
        action="store_true",
        default=False,
        help=f"thorough run (nightly): tests marked `thorough`, deselected otherwise, and "
        f"{EXAMPLES['slow']} hypothesis examples per property test instead of {EXAMPLES['fast']}",
    )


def pytest_configure(config: pytest.Config) -> None:
    try:
        from hypothesis import settings
    except ImportError:  # sessions without hypothesis have no property tests
        return
    for name, examples in EXAMPLES.items():
        settings.register_profile(f"genlm-{name}", max_examples=examples, deadline=None)
    if not config.getoption("hypothesis_profile", None):  # hypothesis' own option wins
        settings.load_profile("genlm-slow" if config.getoption("--slow") else "genlm-fast")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--slow"):
        return
    thorough = [item for item in items if item.get_closest_marker("thorough")]
    if thorough:
        config.hook.pytest_deselected(items=thorough)
        items[:] = [item for item in items if not item.get_closest_marker("thorough")]


@pytest.fixture(scope="session")
def thorough(request: pytest.FixtureRequest) -> bool:
    """True under ``--slow``: tests that draw random cases draw more of them."""
    return bool(request.config.getoption("--slow"))
