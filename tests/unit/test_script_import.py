"""A process that imports the driver's script for its definitions (runtime/import_path.py
run_script) stops at the script's first top-level run: the names above it are there, the
run is not started again, and an error of the script itself still surfaces."""

from __future__ import annotations

import sys

import pytest

from rlmesh.runtime import import_path
from rlmesh.runtime.import_path import MAIN, ScriptImportStop, run_script, stop_if_importing_script


@pytest.fixture
def fresh_main():
    saved = sys.modules.pop(MAIN, None)
    yield
    sys.modules.pop(MAIN, None)
    if saved is not None:
        sys.modules[MAIN] = saved


SCRIPT = '''
from rlmesh.runtime.import_path import stop_if_importing_script
STARTED = []

class Env:
    pass

def start_run():
    stop_if_importing_script("start_run()")
    STARTED.append(1)

start_run()
AFTER = True
'''


def test_the_import_keeps_what_is_above_the_run_and_does_not_start_it(tmp_path, fresh_main, capsys):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    module = run_script(str(script))
    assert module.__name__ == MAIN and sys.modules[MAIN] is module
    assert isinstance(module.Env, type) and module.STARTED == []
    assert not hasattr(module, "AFTER")  # below the run: not defined in this process
    assert "start_run() at the top level of" in capsys.readouterr().err
    assert run_script(str(script)) is module  # once per process
    assert import_path._importing_script is None
    stop_if_importing_script("a run after the import")  # outside an import: nothing happens


def test_the_script_run_as_itself_is_not_stopped(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    namespace: dict = {"__name__": "__main__"}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    assert namespace["STARTED"] == [1] and namespace["AFTER"]


def test_an_error_of_the_script_surfaces_and_leaves_no_half_module(tmp_path, fresh_main):
    script = tmp_path / "broken.py"
    script.write_text("X = 1\nraise RuntimeError('the script is broken')\n")
    with pytest.raises(RuntimeError, match="the script is broken"):
        run_script(str(script))
    assert MAIN not in sys.modules and import_path._importing_script is None


def test_the_stop_is_not_swallowed_by_a_users_except_exception(tmp_path, fresh_main):
    script = tmp_path / "guarded.py"
    script.write_text(SCRIPT.replace("start_run()\nAFTER", "try:\n    start_run()\n"
                                     "except Exception:\n    pass\nAFTER"))
    module = run_script(str(script))
    assert module.STARTED == [] and not hasattr(module, "AFTER")
    assert issubclass(ScriptImportStop, BaseException) and not issubclass(ScriptImportStop, Exception)
