"""RFC 6902 JSON Patch over RFC 6901 pointers."""

from __future__ import annotations

import random
import time
import tracemalloc

import pytest

from engine_service.core.jsonpatch import (
    MAX_PATCH_OPERATIONS,
    JsonPatchError,
    apply_patch,
    json_equal,
    json_size,
)
from engine_service.core.models import JSON

# --- add ----------------------------------------------------------------------------


def test_add_creates_an_object_member() -> None:
    assert apply_patch({"a": 1}, [{"op": "add", "path": "/b", "value": 2}]) == {"a": 1, "b": 2}


def test_add_replaces_an_existing_object_member() -> None:
    assert apply_patch({"a": 1}, [{"op": "add", "path": "/a", "value": [9]}]) == {"a": [9]}


def test_add_inserts_into_an_array_shifting_later_elements() -> None:
    doc = {"letters": ["a", "c"]}
    assert apply_patch(doc, [{"op": "add", "path": "/letters/1", "value": "b"}]) == {
        "letters": ["a", "b", "c"]
    }


def test_add_with_dash_or_the_length_appends_to_an_array() -> None:
    ops: list[JSON] = [
        {"op": "add", "path": "/xs/-", "value": 3},
        {"op": "add", "path": "/xs/3", "value": 4},
    ]
    assert apply_patch({"xs": [1, 2]}, ops) == {"xs": [1, 2, 3, 4]}


def test_add_a_nested_object_value() -> None:
    result = apply_patch({}, [{"op": "add", "path": "/user", "value": {"name": "Ada"}}])
    assert result == {"user": {"name": "Ada"}}


def test_add_at_the_root_replaces_the_whole_document() -> None:
    assert apply_patch({"a": 1}, [{"op": "add", "path": "", "value": [1, 2]}]) == [1, 2]


def test_add_with_a_null_value_stores_null() -> None:
    assert apply_patch({}, [{"op": "add", "path": "/x", "value": None}]) == {"x": None}


def test_add_past_the_end_of_an_array_fails() -> None:
    with pytest.raises(JsonPatchError, match="array index 5 is out of range"):
        apply_patch({"xs": [1]}, [{"op": "add", "path": "/xs/5", "value": 0}])


def test_add_under_a_missing_parent_fails() -> None:
    with pytest.raises(JsonPatchError, match="member 'missing' does not exist"):
        apply_patch({}, [{"op": "add", "path": "/missing/child", "value": 1}])


def test_a_missing_nested_member_is_reported_with_its_parent_pointer() -> None:
    with pytest.raises(JsonPatchError, match="member 'c' does not exist in /a/b~1x"):
        apply_patch({"a": {"b/x": {}}}, [{"op": "remove", "path": "/a/b~1x/c/d"}])


def test_add_into_a_scalar_fails() -> None:
    with pytest.raises(JsonPatchError, match="cannot look up 'x' in a number"):
        apply_patch({"n": 1}, [{"op": "add", "path": "/n/x/y", "value": 1}])
    with pytest.raises(JsonPatchError, match="parent of the target is a string"):
        apply_patch({"s": "t"}, [{"op": "add", "path": "/s/x", "value": 1}])


# --- remove -------------------------------------------------------------------------


def test_remove_deletes_an_object_member() -> None:
    assert apply_patch({"a": 1, "b": 2}, [{"op": "remove", "path": "/b"}]) == {"a": 1}


def test_remove_deletes_an_array_element_shifting_later_ones() -> None:
    assert apply_patch([1, 2, 3], [{"op": "remove", "path": "/0"}]) == [2, 3]


def test_remove_of_a_missing_member_fails_naming_op_and_path() -> None:
    with pytest.raises(JsonPatchError) as caught:
        apply_patch({"a": 1}, [{"op": "remove", "path": "/a"}, {"op": "remove", "path": "/b"}])
    error = caught.value
    assert str(error) == "operation 1 (remove '/b'): member 'b' does not exist"
    assert error.index == 1
    assert error.path == "/b"


def test_remove_of_the_whole_document_fails() -> None:
    with pytest.raises(JsonPatchError, match="cannot remove the whole document"):
        apply_patch({}, [{"op": "remove", "path": ""}])


def test_remove_with_dash_fails() -> None:
    with pytest.raises(JsonPatchError, match="'-' names the position after the last"):
        apply_patch([1], [{"op": "remove", "path": "/-"}])


# --- replace ------------------------------------------------------------------------


def test_replace_changes_an_existing_value() -> None:
    doc = {"a": {"b": 1}, "xs": [1, 2]}
    ops: list[JSON] = [
        {"op": "replace", "path": "/a/b", "value": "two"},
        {"op": "replace", "path": "/xs/1", "value": 20},
    ]
    assert apply_patch(doc, ops) == {"a": {"b": "two"}, "xs": [1, 20]}


def test_replace_at_the_root_replaces_the_document() -> None:
    assert apply_patch({"a": 1}, [{"op": "replace", "path": "", "value": {"b": 2}}]) == {"b": 2}


def test_replace_of_a_missing_member_fails() -> None:
    with pytest.raises(JsonPatchError, match=r"operation 0 \(replace '/nope'\)"):
        apply_patch({}, [{"op": "replace", "path": "/nope", "value": 1}])


def test_replace_past_the_end_of_an_array_fails() -> None:
    with pytest.raises(JsonPatchError, match="out of range"):
        apply_patch([1], [{"op": "replace", "path": "/1", "value": 2}])


# --- move ---------------------------------------------------------------------------


def test_move_relocates_a_member() -> None:
    doc = {"old": {"v": 1}, "new": {}}
    result = apply_patch(doc, [{"op": "move", "from": "/old/v", "path": "/new/v"}])
    assert result == {"old": {}, "new": {"v": 1}}


def test_move_reorders_an_array_element() -> None:
    result = apply_patch(["a", "b", "c", "d"], [{"op": "move", "from": "/1", "path": "/3"}])
    assert result == ["a", "c", "d", "b"]


def test_move_to_the_same_place_is_a_no_op() -> None:
    assert apply_patch({"a": 1}, [{"op": "move", "from": "/a", "path": "/a"}]) == {"a": 1}


def test_move_into_its_own_child_fails() -> None:
    with pytest.raises(JsonPatchError, match="into one of its own children"):
        apply_patch({"a": {"b": {}}}, [{"op": "move", "from": "/a", "path": "/a/b/c"}])


def test_move_from_a_missing_location_fails() -> None:
    with pytest.raises(JsonPatchError, match="member 'x' does not exist"):
        apply_patch({}, [{"op": "move", "from": "/x", "path": "/y"}])


def test_move_without_from_fails() -> None:
    with pytest.raises(JsonPatchError, match="has no 'from' member"):
        apply_patch({"a": 1}, [{"op": "move", "path": "/b"}])


# --- copy ---------------------------------------------------------------------------


def test_copy_duplicates_a_value_independently() -> None:
    result = apply_patch({"a": {"n": [1]}}, [{"op": "copy", "from": "/a", "path": "/b"}])
    assert result == {"a": {"n": [1]}, "b": {"n": [1]}}
    result["b"]["n"].append(2)
    assert result["a"] == {"n": [1]}


def test_copy_into_an_array_inserts() -> None:
    assert apply_patch([1, 2], [{"op": "copy", "from": "/1", "path": "/0"}]) == [2, 1, 2]


# --- test ---------------------------------------------------------------------------


def test_test_passes_on_equal_values() -> None:
    doc = {"s": "x", "n": 1, "f": 1.0, "l": [1, {"k": None}], "o": {"a": True}}
    ops: list[JSON] = [
        {"op": "test", "path": "/s", "value": "x"},
        {"op": "test", "path": "/n", "value": 1.0},
        {"op": "test", "path": "/l", "value": [1, {"k": None}]},
        {"op": "test", "path": "/o", "value": {"a": True}},
    ]
    assert apply_patch(doc, ops) == doc


def test_test_fails_on_different_values_and_stops_the_patch() -> None:
    ops: list[JSON] = [
        {"op": "test", "path": "/n", "value": 2},
        {"op": "replace", "path": "/n", "value": 3},
    ]
    with pytest.raises(JsonPatchError, match=r"operation 0 \(test '/n'\): test failed"):
        apply_patch({"n": 1}, ops)


def test_test_does_not_treat_booleans_as_numbers() -> None:
    with pytest.raises(JsonPatchError, match="test failed"):
        apply_patch({"flag": 1}, [{"op": "test", "path": "/flag", "value": True}])


def test_json_equality_rules() -> None:
    assert json_equal({"a": [1, 2]}, {"a": [1.0, 2]})
    assert not json_equal([1, 2], [2, 1])
    assert not json_equal({"a": 1}, {"a": 1, "b": 2})
    assert not json_equal(0, False)
    assert not json_equal(None, 0)
    assert not json_equal("1", 1)
    assert json_equal(None, None)


# --- pointers -----------------------------------------------------------------------


def test_pointer_escapes_address_keys_with_slashes_and_tildes() -> None:
    doc = {"a/b": 1, "m~n": 2, "~1": 3}
    ops: list[JSON] = [
        {"op": "replace", "path": "/a~1b", "value": 10},
        {"op": "replace", "path": "/m~0n", "value": 20},
        {"op": "replace", "path": "/~01", "value": 30},
    ]
    assert apply_patch(doc, ops) == {"a/b": 10, "m~n": 20, "~1": 30}


def test_pointer_to_an_empty_key_is_allowed() -> None:
    assert apply_patch({"": 1}, [{"op": "replace", "path": "/", "value": 2}]) == {"": 2}


@pytest.mark.parametrize("path", ["/a~2", "/a~", "/~~01"])
def test_pointer_with_a_bad_escape_fails(path: str) -> None:
    with pytest.raises(JsonPatchError, match="'~' not followed by 0 or 1"):
        apply_patch({}, [{"op": "add", "path": path, "value": 1}])


def test_pointer_not_starting_with_a_slash_fails() -> None:
    with pytest.raises(JsonPatchError, match="must be empty or start with '/'"):
        apply_patch({}, [{"op": "add", "path": "a", "value": 1}])


@pytest.mark.parametrize("token", ["01", "-1", "1.0", "x", "\u0661"])
def test_array_indexes_must_be_plain_decimal(token: str) -> None:
    with pytest.raises(JsonPatchError, match="is not an array index"):
        apply_patch([0, 1], [{"op": "replace", "path": f"/{token}", "value": 9}])


def test_object_keys_that_look_like_numbers_are_plain_keys() -> None:
    assert apply_patch({}, [{"op": "add", "path": "/01", "value": 1}]) == {"01": 1}


# --- the patch as a whole -----------------------------------------------------------


def test_the_input_document_and_op_values_are_never_mutated() -> None:
    doc = {"xs": [1], "o": {"k": "v"}}
    value = {"deep": [1]}
    ops: list[JSON] = [
        {"op": "add", "path": "/xs/-", "value": value},
        {"op": "remove", "path": "/o/k"},
    ]
    result = apply_patch(doc, ops)
    result["xs"][1]["deep"].append(2)
    assert doc == {"xs": [1], "o": {"k": "v"}}
    assert value == {"deep": [1]}


def test_an_empty_patch_returns_an_equal_copy() -> None:
    doc = {"a": [1]}
    result = apply_patch(doc, [])
    assert result == doc
    assert result is not doc


def test_ops_apply_in_order_each_seeing_the_previous_result() -> None:
    ops: list[JSON] = [
        {"op": "add", "path": "/list", "value": []},
        {"op": "add", "path": "/list/-", "value": "x"},
        {"op": "copy", "from": "/list/0", "path": "/first"},
        {"op": "test", "path": "/first", "value": "x"},
    ]
    assert apply_patch({}, ops) == {"list": ["x"], "first": "x"}


def test_unknown_members_of_an_operation_are_ignored() -> None:
    ops: list[JSON] = [{"op": "add", "path": "/a", "value": 1, "comment": "hi"}]
    assert apply_patch({}, ops) == {"a": 1}


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ({"op": "add"}, "must be an array of operations"),
        (["add"], "operation 0: an operation must be a JSON object"),
        ([{"path": "/a"}], "operation 0: unknown op None"),
        ([{"op": "merge", "path": "/a"}], "operation 0: unknown op 'merge'"),
        ([{"op": "add", "value": 1}], r"operation 0 \(add None\): the operation has no 'path'"),
        ([{"op": "add", "path": 3, "value": 1}], "'path' must be a JSON pointer string"),
        ([{"op": "add", "path": "/a"}], r"operation 0 \(add '/a'\): .*no 'value' member"),
        ([{"op": "copy", "path": "/a", "from": 1}], "'from' must be a JSON pointer string"),
    ],
)
def test_malformed_patches_are_rejected(ops: JSON, message: str) -> None:
    with pytest.raises(JsonPatchError, match=message):
        apply_patch({}, ops)


# --- bounds -------------------------------------------------------------------------

MIB = 1024 * 1024


def _doubling_patch(n: int) -> list[JSON]:
    """One add, then n copies of the whole document into itself: 2**n times the value."""
    ops: list[JSON] = [{"op": "add", "path": "/x", "value": "y" * 100}]
    ops += [{"op": "copy", "from": "", "path": f"/c{i}"} for i in range(n)]
    return ops


def test_a_patch_that_doubles_the_document_stops_at_the_limit_before_using_the_memory() -> None:
    tracemalloc.start()
    try:
        started = time.perf_counter()
        with pytest.raises(JsonPatchError, match=r"over its limit of 1048576 bytes") as caught:
            apply_patch({}, _doubling_patch(40), max_bytes=MIB)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "max_state_bytes" in caught.value.message
    assert caught.value.index is not None and caught.value.index < 20
    assert peak < 16 * MIB, peak
    assert elapsed < 5.0, elapsed


def test_a_patch_within_the_limit_applies_in_full() -> None:
    result = apply_patch({}, _doubling_patch(5), max_bytes=MIB)
    assert json_size(result) < MIB
    assert result == apply_patch({}, _doubling_patch(5))


def test_copies_are_bounded_in_all_even_when_the_document_does_not_grow() -> None:
    ops: list[JSON] = [{"op": "copy", "from": "/a", "path": "/b"} for _ in range(100)]
    doc: JSON = {"a": "z" * 100_000, "b": None}
    with pytest.raises(JsonPatchError, match="copy more than 2097152 bytes in all"):
        apply_patch(doc, ops, max_bytes=MIB)


def test_a_bounded_patch_has_at_most_the_maximum_number_of_operations() -> None:
    ops: list[JSON] = [{"op": "test", "path": "", "value": {}}] * (MAX_PATCH_OPERATIONS + 1)
    with pytest.raises(JsonPatchError, match=f"at most {MAX_PATCH_OPERATIONS}"):
        apply_patch({}, ops, max_bytes=MIB)
    assert apply_patch({}, ops[:MAX_PATCH_OPERATIONS], max_bytes=MIB) == {}


def test_a_document_over_the_limit_may_still_shrink_but_not_grow() -> None:
    doc: JSON = {"big": "b" * 2000, "n": 1}
    assert apply_patch(doc, [{"op": "remove", "path": "/big"}], max_bytes=100) == {"n": 1}
    with pytest.raises(JsonPatchError, match="over its limit of 100 bytes"):
        apply_patch(doc, [{"op": "add", "path": "/m", "value": 2}], max_bytes=100)


PATCHES: list[tuple[JSON, list[JSON]]] = [
    (
        {"a": [1, 2], "b": {"c": "é"}},
        [
            {"op": "add", "path": "/a/-", "value": {"k": [None, True]}},
            {"op": "add", "path": "/b/d", "value": "x"},
            {"op": "remove", "path": "/a/0"},
            {"op": "replace", "path": "/b/c", "value": ["long", "er"]},
            {"op": "move", "from": "/a", "path": "/b/e"},
            {"op": "copy", "from": "/b", "path": "/f"},
            {"op": "remove", "path": "/b/d"},
            {"op": "add", "path": "/b/e/0", "value": 1.5},
            {"op": "move", "from": "/f/e/0", "path": "/g"},
            {"op": "replace", "path": "", "value": {"h": "new"}},
            {"op": "add", "path": "/i~1j", "value": []},
            {"op": "move", "from": "/h", "path": "/i~1j/0"},
            {"op": "add", "path": "/i~1j", "value": {}},
        ],
    ),
    (
        [],
        [
            {"op": "add", "path": "/0", "value": "a"},
            {"op": "add", "path": "/0", "value": "b"},
            {"op": "copy", "from": "/0", "path": "/-"},
            {"op": "move", "from": "/0", "path": "/2"},
            {"op": "remove", "path": "/1"},
            {"op": "add", "path": "", "value": {"only": 1}},
        ],
    ),
]


@pytest.mark.parametrize(("doc", "ops"), PATCHES)
def test_the_limit_holds_exactly_at_the_largest_size_the_patch_reaches(
    doc: JSON, ops: list[JSON]
) -> None:
    sizes = [json_size(apply_patch(doc, ops[:n])) for n in range(len(ops) + 1)]
    peak = max(sizes)
    assert apply_patch(doc, ops, max_bytes=peak) == apply_patch(doc, ops)
    if peak > sizes[0]:
        with pytest.raises(JsonPatchError, match="over its limit"):
            apply_patch(doc, ops, max_bytes=peak - 1)


def _paths(doc: JSON, prefix: str = "") -> list[str]:
    """Every pointer into ``doc`` below its root."""
    out: list[str] = []
    items: list[tuple[str, JSON]] = []
    if isinstance(doc, dict):
        items = [(k.replace("~", "~0").replace("/", "~1"), v) for k, v in doc.items()]
    elif isinstance(doc, list):
        items = [(str(i), v) for i, v in enumerate(doc)]
    for token, value in items:
        out.append(f"{prefix}/{token}")
        out += _paths(value, f"{prefix}/{token}")
    return out


def _at(doc: JSON, pointer: str) -> JSON:
    node = doc
    for token in pointer.split("/")[1:] if pointer else []:
        key = token.replace("~1", "/").replace("~0", "~")
        node = node[int(key)] if isinstance(node, list) else node[key]
    return node


def _random_op(rng: random.Random, doc: JSON) -> JSON:
    """A random operation on ``doc`` (it may still fail, as a move into itself does)."""
    value = rng.choice([1, "é~/", None, [True], {"k": [2.5, "x" * rng.randint(0, 9)]}, {}])
    paths = _paths(doc)
    kind = rng.choice(["add", "add", "remove", "replace", "move", "copy"] if paths else ["add"])
    if kind == "add":
        parent = rng.choice(["", *paths])
        target = _at(doc, parent)
        if isinstance(target, list):
            return {"op": "add", "path": f"{parent}/{rng.randint(0, len(target))}", "value": value}
        if isinstance(target, dict):
            return {
                "op": "add",
                "path": f"{parent}/{rng.choice(['a', 'b', 'c~1', 'd~0'])}",
                "value": value,
            }
        return {"op": "add", "path": parent, "value": value}
    if kind in ("remove", "replace"):
        return {"op": kind, "path": rng.choice(paths), "value": value}
    return {"op": kind, "from": rng.choice(["", *paths]), "path": rng.choice(["", *paths])}


def test_the_size_kept_while_applying_is_exact_for_random_patches() -> None:
    rng = random.Random(27)
    checked = 0
    for _ in range(300):
        doc: JSON = {"a": [1, {"b": "c"}], "d": {}}
        ops: list[JSON] = []
        sizes = [json_size(doc)]
        current = doc
        for _ in range(8):
            op = _random_op(rng, current)
            try:
                current = apply_patch(current, [op])
            except JsonPatchError:
                continue  # e.g. a move into its own child: not part of this patch
            ops.append(op)
            sizes.append(json_size(current))
        peak = max(sizes)
        assert apply_patch(doc, ops, max_bytes=peak) == current
        if peak > sizes[0]:
            with pytest.raises(JsonPatchError, match="over its limit"):
                apply_patch(doc, ops, max_bytes=peak - 1)
            checked += 1
    assert checked > 200
