"""The param server keeps weights that fit the policy (issue 36): a publication whose
arrays differ in names, shapes or dtypes from the policy's is refused before it is stored
or pushed, and the weights held stay as they were."""

from __future__ import annotations

import numpy as np
import pytest

from rlmesh.roles.paramserver import ParamServer


def weights(n: int = 4, dtype=np.float32) -> dict:
    return {"w": np.zeros((n, 2), dtype), "b": np.zeros(2, dtype)}


@pytest.mark.parametrize("bad, words", [
    ({"w": np.zeros((4, 2), np.float32)}, "expected the arrays ['b', 'w']"),
    (weights(5), "'w' is float32[5, 2], not float32[4, 2]"),
    (weights(dtype=np.float64), "'w' is float64[4, 2], not float32[4, 2]"),
    ({"w": "junk", "b": np.zeros(2, np.float32)}, "'w' is str"),
    ([1, 2], "got list"),
])
def test_weights_that_do_not_fit_the_policy_are_refused_and_nothing_changes(bad, words):
    server = ParamServer()
    server._store(1, {"p": weights()})
    with pytest.raises(ValueError, match=words.replace("[", r"\[")):
        server._store(2, {"q": weights(), "p": bad})
    assert server.version() == 1 and "q" not in server.stats()["versions"]
    server._store(2, {"p": weights(), "q": weights(7)})  # a new policy: any shape
    assert server.stats()["versions"] == {"p": 2, "q": 2}
