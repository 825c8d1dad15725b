"""Gradescope's documented results.json fields (``docs/specs.md`` of
``gradescope/autograder_samples``), as a check on a results dictionary."""

import json

VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}
TOP = {"score": float, "execution_time": int, "output": str, "visibility": str,
       "stdout_visibility": str, "extra_data": dict, "tests": list, "leaderboard": list}
TEST = {"score": float, "max_score": float, "name": str, "number": str, "output": str,
        "tags": list, "visibility": str, "extra_data": dict}


def check_results(results: dict) -> None:
    """AssertionError naming the first field that the specification does not document or
    types otherwise."""
    json.dumps(results, allow_nan=False)  # NaN or infinity is not JSON Gradescope reads
    _fields(results, TOP, "results")
    tests = results.get("tests", [])
    assert "score" in results or all("score" in test for test in tests), \
        "a score is needed at the top or on every test"
    for index, test in enumerate(tests):
        _fields(test, TEST, f"tests[{index}]")


def _fields(entry: dict, documented: dict, where: str) -> None:
    assert isinstance(entry, dict), f"{where} is not an object"
    for key, value in entry.items():
        assert key in documented, f"{where}.{key} is not a documented field"
        kind = documented[key]
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) \
            if kind is float else isinstance(value, kind) and not isinstance(value, bool)
        assert ok, f"{where}.{key} is {type(value).__name__}, not {kind.__name__}"
        if key.endswith("visibility"):
            assert value in VISIBILITIES, f"{where}.{key} = {value!r}"
