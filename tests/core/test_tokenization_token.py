import copy
import pickle

import pytest

from genlm_core.tokenization import Token
from genlm_core.tokenization.token import tokens_from_bytes


def test_token_is_bytes_with_an_id():
    t = Token(7, b"abc")
    assert isinstance(t, bytes)
    assert t.token_id == 7
    assert t.byte_string == b"abc" and type(t.byte_string) is bytes
    assert len(t) == 3 and t[1:] == b"bc" and t.decode() == "abc"
    assert b"".join([Token(0, b"x"), Token(1, b"y")]) == b"xy"
    assert repr(t) == "Token(token_id=7, byte_string=b'abc')"


def test_equality_and_hash_between_tokens_use_the_id():
    a, same_bytes, same_id = Token(1, b" "), Token(2, b" "), Token(1, b"other")
    assert a != same_bytes and not (a == same_bytes)
    assert a == same_id
    assert len({a, same_bytes}) == 2
    assert hash(a) == hash(same_id) == hash(1)
    assert {a: "x"}[same_id] == "x"


def test_comparison_with_plain_bytes_uses_the_content():
    t = Token(5, b"b")
    assert t == b"b" and b"b" == t
    assert t != b"c"
    assert t < b"c" and t > b"a"
    assert b"a" < t


def test_ordering_between_tokens_uses_the_id():
    tokens = [Token(3, b"a"), Token(1, b"z"), Token(2, b"m")]
    assert [t.token_id for t in sorted(tokens)] == [1, 2, 3]
    assert Token(1, b"z") < Token(2, b"a")
    assert Token(2, b"a") >= Token(2, b"z") and Token(2, b"a") <= Token(2, b"a")
    assert Token(3, b"a") > Token(1, b"z")


def test_as_bytes_and_is_plain_bytes():
    t = Token(0, b"q")
    assert Token.as_bytes(t) == b"q" and type(Token.as_bytes(t)) is bytes
    assert Token.as_bytes(b"raw") == b"raw"
    assert Token.is_plain_bytes(b"raw")
    assert not Token.is_plain_bytes(t)
    assert not Token.is_plain_bytes("str")


@pytest.mark.parametrize("clone", [pickle.loads, None])
def test_pickle_and_copies_keep_id_and_bytes(clone):
    t = Token(42, b"\xff\x00")
    if clone is None:
        copies = [copy.copy(t), copy.deepcopy(t)]
    else:
        copies = [clone(pickle.dumps(t, protocol=p)) for p in range(pickle.HIGHEST_PROTOCOL + 1)]
    for c in copies:
        assert type(c) is Token
        assert c.token_id == 42 and c.byte_string == b"\xff\x00"


@pytest.mark.parametrize(
    ("token_id", "data"), [("1", b"a"), (1.0, b"a"), (1, "a"), (1, bytearray(b"a"))]
)
def test_bad_arguments_raise_type_error(token_id, data):
    with pytest.raises(TypeError):
        Token(token_id, data)


def test_tokens_from_bytes_matches_the_constructor():
    data = [b"", b"a", b"\xe2\x96", b"a"]
    tokens = tokens_from_bytes(data)
    assert [type(t) for t in tokens] == [Token] * 4
    assert [(t.token_id, t.byte_string) for t in tokens] == [(i, b) for i, b in enumerate(data)]
    assert tokens == [Token(i, b) for i, b in enumerate(data)]
