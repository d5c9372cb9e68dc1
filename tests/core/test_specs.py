import pytest

from genlm_core.errors import BackendContractError, GenlmError
from genlm_core.plugins import Availability, BackendSpec, TrieSpec


@pytest.mark.parametrize("name", ["", "Has Space", "UPPER", 3, None])
def test_bad_backend_name(name):
    with pytest.raises(BackendContractError, match="name"):
        BackendSpec(name=name, loader="a.b:c")


@pytest.mark.parametrize("loader", ["no_colon", "a:b:c", "1mod:x", 42])
def test_bad_loader(loader):
    with pytest.raises(BackendContractError, match="loader"):
        BackendSpec(name="x", loader=loader)


def test_bad_priority_and_kind():
    with pytest.raises(BackendContractError, match="priority"):
        BackendSpec(name="x", loader="a:b", priority="high")
    with pytest.raises(BackendContractError, match="kind"):
        TrieSpec(name="x", loader="a:b", kind="word")


def test_availability():
    assert Availability.yes() and not Availability.no("no GPU")
    assert Availability.no("no GPU").reason == "no GPU"
    with pytest.raises(GenlmError):
        Availability.no("")


def test_probe_returning_garbage_is_explained():
    spec = BackendSpec(name="x", loader="a:b", check=lambda: True)
    avail = spec.availability()
    assert not avail.ok and "not Availability" in avail.reason


def test_loader_resolves_dotted_attribute():
    spec = BackendSpec(name="x", loader="genlm_core.testing.mock:MockAsyncLM.from_name")
    from genlm_core.testing.mock import MockAsyncLM

    assert spec.load() == MockAsyncLM.from_name
