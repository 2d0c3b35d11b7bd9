"""Installed packages are not code a message may name (issue 48, point 4): a live runner
took torch for the user's code (torch.ops' relative ``__file__``) and ran
``foreach_env("torch.serialization:save", path)``, writing the file, while ``numpy:save``
was refused. Every installed package is refused alike; the user's own module still runs."""

from __future__ import annotations

import pytest

from rlmesh.algorithms import PPOConfig
from rlmesh.runtime import RemoteError
from rlmesh.wire import messages as M
from tests.integration.trust_helpers import raw_call

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("no_children_left")]

REFUSED = "is not one this process was started with"


def test_functions_of_installed_packages_are_refused_and_the_users_run(tmp_path):
    import gymnasium  # noqa: F401 (the driver has them all imported, as any run does)
    import numpy  # noqa: F401
    import torch  # noqa: F401

    config = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=1)
              .learners(num_learners=1)
              .training(train_batch_size=200, minibatch_size=100, num_epochs=1))
    with config.build() as algo:
        runner = algo.env_runners
        for i, path in enumerate(["torch.serialization:save", "numpy:save",
                                  "gymnasium.utils.env_checker:check_env"]):
            target = tmp_path / f"written{i}"
            package = path.partition(".")[0].partition(":")[0]
            with pytest.raises(RemoteError) as err:
                runner.foreach_env(path, str(target))
            assert err.value.etype == "PermissionError", err.value
            line = err.value.remote_msg
            # the roots named are the user's packages imported so far ("tests", and others
            # when tests ran before in this process), never the installed one refused
            roots = line.partition(f"package {package!r} {REFUSED} (")[2].partition(")")[0]
            assert "tests" in roots.split(", ") and package not in roots, line
            assert "\n" not in line, line
            assert not target.exists(), f"{path} ran: {target} was written"
        # The user's own module (the tests package, imported by this driver) still runs.
        assert runner.foreach_env("tests.integration.code_marker:env_name") == ["TimeLimit"]
        # A learner process is started with the same roots: no torch class by message.
        spec = {**algo.policy_specs["default_policy"], "policy_class": "torch.nn:Module"}
        reply = raw_call(algo.mesh.learners[0].address, "add_policy", "p2", spec, {})
        assert reply["t"] == M.ERROR and f"package 'torch' {REFUSED}" in reply["msg"], reply
        assert algo.train()["num_healthy_env_runners"] == 1
