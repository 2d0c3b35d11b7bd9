import sys

import pytest

from rlmesh.extras import MissingExtra, require


def test_present_module_is_returned():
    assert require("json", "data", "JSON").dumps([1]) == "[1]"


def test_missing_module_names_the_extra(monkeypatch):
    # As if not installed; the submodule too, which an earlier test may have imported.
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(MissingExtra) as e:
        require("pyarrow.parquet", "data", "Parquet output")
    message = str(e.value)
    assert "\n" not in message
    assert "Parquet output needs the pyarrow package: pip install 'rlmesh[data]'" == message
