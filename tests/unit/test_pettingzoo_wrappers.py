"""The PettingZoo wrappers keep the MultiAgentEnv contract: the Parallel API's rps ends with
"__all__" after its rounds, the AEC API's tic-tac-toe gives one agent per step and pays
rewards to the agent waiting; bad names are one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from rlmesh.env import ALL, is_multi_agent
from rlmesh.env.pettingzoo import make


def test_parallel_rps_runs_its_rounds_and_ends_truncated():
    env = make({"name": "classic.rps_v2", "max_cycles": 5})
    assert is_multi_agent(env) and env.possible_agents == ["player_0", "player_1"]
    obs, _ = env.reset(seed=0)
    assert sorted(obs) == ["player_0", "player_1"]
    for round_ in range(5):
        obs, rewards, terms, truncs, _ = env.step({"player_0": 0, "player_1": 1})  # rock, paper
        assert rewards == {"player_0": -1, "player_1": 1}
        assert obs["player_0"] == 1  # the other's last move
    assert truncs[ALL] and not terms[ALL]


def test_aec_tictactoe_takes_turns_and_pays_the_waiting_agent():
    env = make({"name": "classic.tictactoe_v3", "api": "aec"})
    obs, _ = env.reset(seed=0)
    assert list(obs) == ["player_1"]
    moves = {"player_1": [0, 1, 2], "player_2": [3, 4]}  # player_1 wins on the top row
    while True:
        (agent,) = obs  # the one agent whose turn it is
        obs, rewards, terms, truncs, _ = env.step({agent: moves[agent].pop(0)})
        if terms[ALL] or truncs[ALL]:
            break
        assert len(obs) == 1 and agent not in obs  # the other agent acts next
    assert terms[ALL] and rewards["player_1"] == 1 and rewards["player_2"] == -1
    assert {"player_1", "player_2"} <= set(obs)  # both leave with their final observation
    assert np.asarray(obs["player_1"]["observation"]).shape == (3, 3, 2)


@pytest.mark.parametrize("config,match", [
    ({}, "needs 'name'"),
    ({"name": "classic.rps_v2", "api": "turns"}, "'parallel' or 'aec'"),
    ({"name": "classic.no_such_env_v0"}, "no PettingZoo env"),
])
def test_bad_env_config_is_one_line(config, match):
    with pytest.raises(ValueError, match=match) as info:
        make(config)
    assert "\n" not in str(info.value)


def test_a_registered_id_works_as_the_module_does():
    env = make({"name": "classic/rps-v2", "max_cycles": 3})
    env.reset(seed=0)
    for _ in range(3):
        _, _, terms, truncs, _ = env.step({"player_0": 2, "player_1": 2})
    assert truncs[ALL]
    with pytest.raises(ValueError, match="no PettingZoo env 'classic/nothing-v1'"):
        make({"name": "classic/nothing-v1"})
