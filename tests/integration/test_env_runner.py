"""EnvRunner processes end to end: fragments of real envs, truncation and complete
episodes, weights from the param server, Box actions, registered envs, a failing env, and
calls into every env."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import numpy as np
import pytest
import torch
import uvloop

from rlmesh.runtime.import_path import startup_code
from rlmesh.env.registry import env_registry, register_env, space_from_data
from rlmesh.rl.distributions import DiagGaussian
from rlmesh.rl.default_model import build_model
from rlmesh.roles.env_runner import runner_config
from rlmesh.runtime import Job, RemoteError

from .envs_for_tests import FragmentSink, HeldFragmentSink, make_count_env

from rlmesh.roles.specs import RunnerSpec

RUNNER = "rlmesh.roles.env_runner:EnvRunner"
PARAM_SERVER = "rlmesh.roles.paramserver:ParamServer"
SMALL_MODEL = {"fcnet_hiddens": [16]}


def run(coro):
    return uvloop.run(coro)


async def spawn_runner(job, config, worker_index=1, param_server="param_server", **kwargs):
    config = {"model": SMALL_MODEL, "_env_registry": env_registry(), **config}
    config.update(startup_code(config))  # as the Mesh starts runners: the packages they may run
    spec = RunnerSpec.from_config_dict(config, worker_index=worker_index, param_server=param_server)
    return await job.spawn(RUNNER, spec=spec.to_data(), **kwargs)


def test_cartpole_fragments_seeds_stats_and_weights_from_the_param_server():
    config = {"env": "CartPole-v1", "num_envs_per_env_runner": 2, "rollout_fragment_length": 40,
              "seed": 3, "model": SMALL_MODEL}

    async def main():
        async with Job("ipc") as job:
            ps = await job.spawn(PARAM_SERVER, name="param_server")
            runner = await spawn_runner(job, config, worker_index=2)
            first = await runner.call("sample")

            spaces = await runner.call("get_spaces")
            obs_space = space_from_data(spaces["observation_space"])
            action_space = space_from_data(spaces["action_space"])
            torch.manual_seed(0)
            # The runner's model: the config's defaults updated by SMALL_MODEL.
            model = build_model(obs_space, action_space, runner_config(config)[0].model)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p))
            weights = {k: v.numpy() for k, v in model.state_dict().items()}
            probe = first["obs"][:5, 0]
            before = (await runner.call("compute_actions", probe, False))["action_dist_inputs"]
            await ps.call("set_weights", 1, {"default_policy": weights})
            second = await runner.call("sample")
            after = (await runner.call("compute_actions", probe, False))["action_dist_inputs"]
            third = await runner.call("sample")  # nothing newer: the same weights
            return first, second, third, before, after, model, obs_space, await runner.call("metrics")

    first, second, third, before, after, model, obs_space, metrics = run(main())
    assert obs_space.shape == (4,)
    for key, shape, dtype in [("obs", (40, 2, 4), np.float32), ("actions", (40, 2), np.int64),
                              ("action_logp", (40, 2), np.float32),
                              ("action_dist_inputs", (40, 2, 2), np.float32),
                              ("rewards", (40, 2), np.float32), ("terminateds", (40, 2), np.bool_),
                              ("truncateds", (40, 2), np.bool_), ("mask", (40, 2), np.bool_),
                              ("next_obs", (2, 4), np.float32), ("trunc_index", (0, 2), np.int64)]:
        assert first[key].shape == shape and first[key].dtype == dtype, key
    assert first["mask"].all() and first["env_steps"] == 80 and first["worker_index"] == 2
    # Env i of runner w is first reset with seed + 1000 w + i.
    for i in range(2):
        np.testing.assert_array_equal(first["obs"][0, i], gym.make("CartPole-v1").reset(seed=3 + 2000 + i)[0])
    # Episode stats agree with the columns: CartPole pays 1 per step.
    frags = [first, second, third]
    ends = sum(int(f["terminateds"].sum()) for f in frags)
    episodes = [e for f in frags for e in f["episodes"]]
    assert len(episodes) == ends > 0
    assert all(e["return"] == e["length"] >= 1 for e in episodes)
    assert metrics["num_episodes"] == ends and metrics["num_env_steps_sampled"] == 240
    assert metrics["num_fragments"] == 3 and metrics["env_errors"] == 0
    assert metrics["num_weight_updates"] == 1 and metrics["env_steps_per_s"] > 0
    # Versions: none before the first publish, then the param server's.
    assert [f["policy_version"] for f in frags] == [-1, 1, 1] and metrics["policy_version"] == 1
    assert not np.allclose(before, after)
    with torch.no_grad():
        expected = model(torch.as_tensor(np.array(second["obs"]).reshape(-1, 4)))[0].numpy()
    np.testing.assert_allclose(second["action_dist_inputs"].reshape(-1, 2), expected, atol=1e-5)
    with torch.no_grad():
        np.testing.assert_allclose(after, model(torch.as_tensor(np.array(first["obs"][:5, 0])))[0].numpy(), atol=1e-5)


def test_a_batch_sampled_ahead_takes_the_weights_of_its_time_from_the_param_server():
    """sample_async: the driver asks for weights no newer than its version when the batch
    started; the param server keeps the version before its newest for that."""
    config = {"env": "CartPole-v1", "num_envs_per_env_runner": 1, "rollout_fragment_length": 5,
              "seed": 0, "model": SMALL_MODEL}

    async def main():
        async with Job("ipc") as job:
            ps = await job.spawn(PARAM_SERVER, name="param_server")
            runner = await spawn_runner(job, config)
            weights = {"default_policy": await runner.call("get_weights")}
            await ps.call("set_weights", 1, weights)
            await ps.call("set_weights", 2, weights)  # published before the runner asked
            versions = [(await runner.call("sample", weights_up_to=1))["policy_version"],
                        (await runner.call("sample", weights_up_to=1))["policy_version"]]
            await ps.call("set_weights", 3, weights)
            versions.append((await runner.call("sample"))["policy_version"])
            versions.append((await runner.call("sample", weights_up_to=2))["policy_version"])
            return versions

    # Version 1 though 2 was out, and kept while asked for at most 1; the newest (3) when
    # not bounded; a bound below what it holds keeps what it holds.
    assert run(main()) == [1, 1, 3, 3]


def test_streaming_takes_pushed_weights_between_fragments_and_never_asks():
    """A streaming runner subscribes once and samples on: it never asks the param server
    for weights; a version pushed to it is used from the next fragment on, and versions
    never go back."""
    config = {"env": "CartPole-v1", "num_envs_per_env_runner": 2, "rollout_fragment_length": 10,
              "model": SMALL_MODEL}

    async def until(predicate, what):
        for _ in range(600):
            got = await predicate()
            if got:
                return got
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}")

    async def main():
        async with Job("ipc") as job:
            await job.spawn(PARAM_SERVER, name="param_server", in_process=True)
            ps = job.local_actor("param_server")
            sink = await job.spawn(FragmentSink, name="sink")
            runner = await spawn_runner(job, config, name="env_runner-1")  # pushed to by name
            weights = {"default_policy": await runner.call("get_weights")}
            await runner.call("start_streaming", ["sink"], 2)
            received = lambda: sink.call("received")  # noqa: E731
            before = await until(lambda: _at_least(received(), 20), "20 fragments")
            await ps.set_weights(1, weights)
            after = await until(lambda: _ends_with(received(), 1), "a fragment of version 1")
            await ps.set_weights(2, weights)
            last = await until(lambda: _ends_with(received(), 2), "a fragment of version 2")
            return before, after, last, ps.stats(), await runner.call("metrics")

    before, after, last, stats, metrics = run(main())
    assert set(before[:20]) == {-1}  # sampled on before any weights were published
    assert after[-1] == 1 and last == sorted(last) and last[-1] == 2
    assert stats["subscriptions"] == 1 and stats["fetches"] == 0 and stats["pushes"] == 2
    assert metrics["num_weight_pulls"] == 0 and metrics["num_weight_updates"] == 2


@pytest.mark.parametrize("window", [1, 3])
def test_a_streaming_runner_has_at_most_window_fragments_in_flight(window):
    """``max_sample_requests_in_flight_per_worker``: while the sink keeps its credit, a
    runner ships ``window`` fragments, samples one more, and waits; it goes on once the
    sink lets the fragments go."""
    config = {"env": "CartPole-v1", "num_envs_per_env_runner": 2, "rollout_fragment_length": 5,
              "model": SMALL_MODEL}

    async def main():
        async with Job("ipc") as job:
            await job.spawn(PARAM_SERVER, name="param_server")
            sink = await job.spawn(HeldFragmentSink, name="sink")
            runner = await spawn_runner(job, config)
            await runner.call("start_streaming", ["sink"], window)
            for _ in range(600):
                if len(await sink.call("received")) >= 1:
                    break
                await asyncio.sleep(0.05)
            counts = []
            for _ in range(3):  # long enough for dozens of 10-step fragments
                await asyncio.sleep(0.5)
                counts.append((await runner.call("metrics"))["num_fragments"])
            held = len(await sink.call("received"))
            await sink.call("release")
            for _ in range(600):
                if len(await sink.call("received")) > window + 5:
                    break
                await asyncio.sleep(0.05)
            return counts, held, len(await sink.call("received"))

    counts, held, after = run(main())
    # window shipped (the first being handled, the rest waiting at the sink) and one
    # sampled that waits for credit: no more, however long the sink holds.
    assert counts == [window + 1] * 3
    assert held == 1
    assert after > window + 5


async def _at_least(coro, n):
    got = await coro
    return got if (len(got) if isinstance(got, list) else got) >= n else None


async def _ends_with(coro, version):
    got = await coro
    return got if got and got[-1] == version else None


def test_registered_env_truncation_complete_episodes_and_callbacks():
    register_env("count-env", make_count_env)
    base = {"env": "count-env", "num_envs_per_env_runner": 2, "rollout_fragment_length": 5,
            "callbacks": "tests.integration.envs_for_tests:EpisodeCallbacks"}

    async def main():
        async with Job("ipc") as job:
            truncating, completing = await asyncio.gather(*(
                spawn_runner(job, {**base, **extra}, i + 1, param_server=None)
                for i, extra in enumerate([
                    {"env_config": {"max_episode_steps": 3}},
                    {"env_config": {"max_episode_steps": 3, "limit_step": 4},
                     "batch_mode": "complete_episodes"}])))
            return [await truncating.call("sample"), await truncating.call("sample"),
                    await completing.call("sample"), await completing.call("sample")]

    cut1, cut2, done1, done2 = run(main())
    # truncate_episodes: obs count steps; each episode is cut after 3 steps.
    np.testing.assert_array_equal(cut1["obs"][:, :, 0], [[0, 0], [1, 1], [2, 2], [0, 0], [1, 1]])
    np.testing.assert_array_equal(cut1["trunc_index"], [[2, 0], [2, 1]])
    np.testing.assert_array_equal(cut1["trunc_obs"][:, 0], [3, 3])  # the true final obs
    np.testing.assert_array_equal(cut1["next_obs"][:, 0], [2, 2])
    np.testing.assert_array_equal(cut2["obs"][:, :, 0], [[2, 2], [0, 0], [1, 1], [2, 2], [0, 0]])
    np.testing.assert_array_equal(cut2["trunc_index"], [[0, 0], [0, 1], [3, 0], [3, 1]])
    np.testing.assert_array_equal(cut2["next_obs"][:, 0], [1, 1])
    assert not cut1["terminateds"].any()
    for e in cut1["episodes"] + cut2["episodes"]:
        assert e["length"] == 3 and e["custom_metrics"]["steps_seen"] == 3
    # complete_episodes: episodes of 3 and 7 steps, T = 5.
    for frag in (done1, done2):
        mask = frag["mask"]
        assert mask.shape == (7, 2)
        np.testing.assert_array_equal(mask.sum(0), [6, 7])
        for b in range(2):
            last = np.flatnonzero(mask[:, b])[-1]
            assert frag["truncateds"][last, b] or frag["terminateds"][last, b]
        assert not frag["obs"][~mask].any()
        np.testing.assert_array_equal(frag["obs"][0, :, 0], [0, 0])
        np.testing.assert_array_equal(frag["trunc_index"], [[2, 0], [5, 0]])
        assert frag["next_obs"][1, 0] == 7  # truncated on the last row: the final obs
        assert sorted(e["length"] for e in frag["episodes"]) == [3, 3, 7]


def test_pendulum_box_actions():
    config = {"env": "Pendulum-v1", "env_config": {"max_episode_steps": 10},
              "num_envs_per_env_runner": 2, "rollout_fragment_length": 15, "seed": 1}

    async def main():
        async with Job("ipc") as job:
            runner = await spawn_runner(job, config, param_server=None)
            return await runner.call("sample"), await runner.call("sample", explore=False)

    frag, greedy = run(main())
    assert frag["obs"].shape == (15, 2, 3) and frag["actions"].shape == (15, 2, 1)
    assert frag["actions"].dtype == np.float32 and frag["action_dist_inputs"].shape == (15, 2, 2)
    assert (frag["rewards"] <= 0).all() and frag["mask"].all()
    np.testing.assert_array_equal(frag["trunc_index"], [[9, 0], [9, 1]])
    assert frag["trunc_obs"].shape == (2, 3)
    dist = DiagGaussian(torch.tensor(frag["action_dist_inputs"]))
    np.testing.assert_allclose(dist.logp(torch.tensor(frag["actions"])).numpy(),
                               frag["action_logp"], rtol=1e-5, atol=1e-5)
    mean = greedy["action_dist_inputs"][..., :1]
    np.testing.assert_array_equal(greedy["actions"], mean)  # explore=False: the mean


def test_faulty_env_is_recovered_and_env_calls_reach_every_env():
    config = {"env": "tests.integration.envs_for_tests:CountEnv", "env_config": {"fail_at": 3},
              "num_envs_per_env_runner": 3, "rollout_fragment_length": 5}

    async def main():
        async with Job("ipc") as job:
            runner = await spawn_runner(job, config, param_server=None)
            frag = await runner.call("sample")
            phases = await runner.call("call_env_method", "set_phase", 7)
            seen = await runner.call("foreach_env", "tests.integration.envs_for_tests:phase_of", 1)
            with pytest.raises(RemoteError, match="no_such_method"):
                await runner.call("call_env_method", "no_such_method")
            return frag, phases, seen, await runner.call("sample"), await runner.call("metrics")

    frag, phases, seen, after, metrics = run(main())
    np.testing.assert_array_equal(frag["mask"], [[False] * 3] * 3 + [[True] * 3] * 2)
    np.testing.assert_array_equal(frag["obs"][3:, :, 0], [[0] * 3, [1] * 3])
    assert frag["env_steps"] == 6 and metrics["env_errors"] == 3
    assert after["mask"].all() and metrics["num_env_steps_sampled"] == 21
    assert phases == [7, 7, 7] and seen == [8, 8, 8]


def test_runners_import_torch_only_for_a_custom_model():
    """The default model runs in numpy: its runner process never imports torch (1.4 s and
    ~150 MB a process); a custom torch model's runner does, and acts with it."""
    custom = {"custom_model": "tests.unit.test_rl_models:TinyNet", "custom_model_config": {"width": 4}}
    probe = "tests.integration.envs_for_tests:modules_loaded"

    async def main():
        async with Job("ipc") as job:
            default, torch_runner = await asyncio.gather(
                spawn_runner(job, {"env": "CartPole-v1"}, 1, param_server=None),
                spawn_runner(job, {"env": "CartPole-v1", "model": custom}, 2, param_server=None))
            frags = [await default.call("sample"), await torch_runner.call("sample")]
            loaded = [await r.call("foreach_env", probe, "torch") for r in (default, torch_runner)]
            return frags, loaded, await torch_runner.call("get_weights")

    frags, loaded, weights = run(main())
    assert loaded == [[False], [True]]
    assert all(f["env_steps"] > 0 and f["action_dist_inputs"].shape[-1] == 2 for f in frags)
    assert set(weights) == {"body.weight", "body.bias", "pi.weight", "pi.bias", "vf.weight", "vf.bias"}
