"""The environment and env_runners groups: which env is sampled (or, for external simulators,
which spaces), and how env runners sample it or serve PolicyClients. Mixed into
AlgorithmConfig; each setting is declared here once, as in base.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from rlmesh.config.settings import _UNSET, setting
from rlmesh.rl.spec import MODEL_DEFAULTS


@dataclass(kw_only=True)
class SamplingSettings:
    # --- environment ---
    env: str | Callable | None = setting(
        None, "environment",
        doc="The environment: a gymnasium id ('CartPole-v1') or the import path "
            "'pkg.module:make_env' of a factory called with env_config. to_dict() writes a "
            "class or function given from Python as its import path.")
    env_config: dict = setting(
        {}, "environment",
        doc="Passed to the env: keyword arguments of gymnasium.make for a registered id, "
            "the one argument of a factory. Its key 'vector' picks how a runner steps its envs "
            "(docs/vector_envs.md): 'auto' (default: an id with a vector entry point, such as "
            "CartPole-v1, as one vector env once a runner has 64 envs or more), True (the id's "
            "vector entry point), 'sync'/'async' (gymnasium's Sync/AsyncVectorEnv), "
            "'envpool', or False (one gym.Env per slot).")
    clip_rewards: bool | float | None = setting(
        None, "environment",
        doc="True: train on the reward's sign (as for Atari); a float c: clip rewards to "
            "[-c, c]; None or False: raw rewards.")
    normalize_rewards: bool | Literal["auto"] = setting(
        False, "environment",
        doc="Train on rewards divided by the running std of each env's discounted return "
            "(gamma), clipped to [-10, 10]: stable-baselines3's VecNormalize norm_reward, which "
            "rl-zoo's MuJoCo PPO settings use. Statistics are each runner's own; reported "
            "returns stay raw. Single-agent runners stepping gymnasium envs, one at a time or "
            "as a vector env (not the Atari vector env). 'auto' (PPO's default): on for Box "
            "actions where rlmesh implements it, off otherwise.")
    normalize_actions: bool = setting(
        True, "environment",
        doc="The policy acts in [-1, 1] on Box action spaces; actions are rescaled to the "
            "space's bounds before the env sees them.")
    clip_actions: bool = setting(
        True, "environment",
        doc="Clip Box actions to the space's bounds before the env sees them (when "
            "normalize_actions does not rescale them). RLlib's default is False; here True, "
            "as gymnasium envs assume actions inside the bounds. The stored and scored "
            "action is always the one sampled.")
    observation_space: Any = setting(
        None, "environment",
        doc="The observation space, for runs without an env of their own (external "
            "simulators through policy_server_address): a gymnasium space, or its plain-data "
            "form (rlmesh.env.registry.space_to_data). None: taken from the env.")
    action_space: Any = setting(
        None, "environment",
        doc="The action space, as observation_space.")
    horizon: int | None = setting(
        None, "environment", ge=1,
        doc="Cut every episode after this many steps (truncated, as gymnasium's TimeLimit), "
            "whatever the env's own limit (RLlib's old horizon); None: the env's limit.")

    # --- env_runners ---
    preprocessor_pref: Literal["deepmind", "rllib"] | None = setting(
        "deepmind", "env_runners",
        doc="'deepmind' (RLlib's default): an ALE id gets DeepMind's Atari preprocessing "
            "(no-op starts, frame skip 4, 84x84 grayscale frames, 4 stacked; the model's "
            "dim, grayscale, zero_mean and framestack shape it); 'rllib' or None: raw "
            "frames. env_config={'atari': ...} decides instead when given "
            "(docs/observations_and_memory.md).")
    num_env_runners: int = setting(
        0, "env_runners", ge=0, aliases=("num_workers", "num_rollout_workers"),
        doc="Env-runner processes sampling in parallel; 0 samples in the driver process.")
    num_envs_per_env_runner: int = setting(
        1, "env_runners", ge=1, aliases=("num_envs_per_worker",),
        doc="Envs each runner steps together, with one batched forward pass per step; 64 or "
            "more of an id with a vector entry point are one vector env (env_config vector).")
    gym_env_vectorize_mode: str | None = setting(
        None, "env_runners",
        doc="RLlib's name for how a runner vectorizes its envs (gymnasium.VectorizeMode): "
            "'async' and 'vector_entry_point' are env_config vector 'async' and True (which "
            "wins where both are set); 'sync', RLlib's default, and None leave it to env_config "
            "vector ('auto': the runner's own loop over its envs, or the id's vector entry "
            "point for 64 envs or more; docs/vector_envs.md).")
    inference_mode: Literal["auto", "runner", "central"] = setting(
        "auto", "env_runners",
        doc="Where actions are computed: 'runner', each runner batches its own envs on its "
            "CPU; 'central', one inference actor batches every runner's observations, on the "
            "learner's GPU where there is one, else on the CPU (SEED RL, Sample Factory); "
            "'auto', central for a conv policy when a GPU or a spare core can take it and "
            "the runner's own forward pass costs more than a quarter of an env step "
            "(measured at build, reported in info/inference; docs/atari.md).")
    double_buffered_sampling: bool | Literal["auto"] = setting(
        "auto", "env_runners",
        doc="Each runner's envs in two halves: one steps in the vector env's threads while "
            "the runner computes the other's actions (Sample Factory's worker_num_splits=2). "
            "Needs a vector env (env_config vector, or atari vector); 'auto': on there with central "
            "inference and 2 envs or more (with the runner's own pass, two half-size passes "
            "a step cost more than the overlap gains on a busy CPU; docs/atari.md).")
    num_cpus_per_env_runner: float = setting(
        1, "env_runners", ge=0, aliases=("num_cpus_per_worker",),
        doc="CPUs the scheduler reserves for each env runner.")
    num_gpus_per_env_runner: float = setting(
        0, "env_runners", ge=0, aliases=("num_gpus_per_worker",),
        doc="GPUs the scheduler reserves for each env runner (for policy inference).")
    weights_relay: bool | Literal["auto"] = setting(
        "auto", "env_runners",
        doc="A weight relay process on each node of the runners (docs/scale.md): it takes "
            "each new weights version from the param server once and pushes it on to its "
            "node's runners, and answers the driver for them, so what crosses the network "
            "per version grows with the nodes, not the runners. A runner whose relay does "
            "not answer takes its weights from the param server meanwhile. 'auto': under "
            "`rlmesh launch`, on each node with two runners or more; True: also on one "
            "machine (one relay); False: none.")
    weights_relay_fanout: int = setting(
        8, "env_runners", ge=2,
        doc="Relays the param server feeds directly; the next ones are fed by a relay "
            "(a tree of this degree), so no process sends a version more than this many "
            "times plus its node's runners.")
    rollout_fragment_length: int | Literal["auto"] = setting(
        200, "env_runners", gt=0,
        doc="Steps per env in each fragment a runner ships; 'auto' splits the train batch "
            "over all envs (see get_rollout_fragment_length).")
    batch_mode: Literal["truncate_episodes", "complete_episodes"] = setting(
        "truncate_episodes", "env_runners",
        doc="'truncate_episodes': fragments of exactly rollout_fragment_length steps per "
            "env, episodes cut at their edges; 'complete_episodes': a fragment runs on to "
            "the ends of its episodes.")
    explore: bool = setting(
        True, "env_runners",
        doc="Sample actions from the policy's distribution; False takes its likeliest one.")
    noise_hold_steps: int = setting(
        1, "env_runners", ge=1,
        doc="Box actions (a Gaussian policy): each env's standard-normal draw is held for "
            "this many steps, redrawn when its episode starts, so the action is "
            "mean(s) + std(s) * eps with eps constant over the stretch. Each step's action "
            "is still a draw of the policy's Gaussian at that state (the logp the learner "
            "reads is its density), but the noise is coherent in time: a torque held for "
            "a few steps swings a pendulum where fresh noise every step cancels out "
            "(pendulum-impala.yaml: IMPALA reaches -200 within 1M env steps on seeds 0-2 "
            "with 8, on none with 1; docs/continuous_control.md, 'Held noise'). 1: a fresh "
            "draw every step (RLlib's StochasticSampling). Not SB3's gSDE: the std stays "
            "the policy's own. Single-agent runners with rlmesh's own policies; a policy "
            "with its own compute_actions, multi-agent runners, central inference and "
            "policy servers refuse it; other action spaces ignore it.")
    policy_server_address: str | None = setting(
        None, "env_runners",
        doc="Take experience from PolicyClients (rlmesh.client) embedded in external "
            "simulators instead of stepping envs (RLlib's PolicyServerInput): runners listen "
            "here, e.g. 'tcp://127.0.0.1:9900', or '9900' for that (runner i > 1 on the port "
            "+ i - 1); 'http://127.0.0.1:9900' (or https://) serves the same calls as HTTP "
            "with JSON or msgpack bodies (docs/api/client.md). Needs "
            "observation_space and action_space; env may be None.")
    policy_server_idle_timeout_s: float = setting(
        10.0, "env_runners", gt=0,
        doc="A policy server returns what it has (maybe nothing: an empty iteration) once "
            "this long passes without client experience, so training never blocks for ever.")
    policy_server_episode_timeout_s: float = setting(
        60.0, "env_runners", gt=0,
        doc="A client episode with no call for this long is closed (its client is gone): "
            "its complete steps are trained on as a truncated episode.")
    policy_server_curve_keys: str | None = setting(
        None, "env_runners",
        doc="A directory of CURVE keys (rlmesh.client.make_curve_keys): with it, a policy "
            "server on tcp:// encrypts and accepts only clients whose public key file is in "
            "its clients/ folder.")
    policy_server_http_tokens: str | None = setting(
        None, "env_runners",
        doc="A directory of bearer tokens (rlmesh.client.make_http_token): with it, a policy "
            "server on http:// or https:// answers only requests whose 'Authorization: Bearer' "
            "is a token file in its tokens/ folder. Without it: the tokens in "
            "~/.rlmesh/policy_server_keys/tokens (a 'client' token made if missing).")
    policy_server_tls_certfile: str | None = setting(
        None, "env_runners",
        doc="A PEM certificate (chain) for a policy server on https://, with "
            "policy_server_tls_keyfile; an https:// address needs both.")
    policy_server_tls_keyfile: str | None = setting(
        None, "env_runners",
        doc="The PEM private key of policy_server_tls_certfile.")
    policy_server_spin_wait_us: float = setting(
        300.0, "env_runners", ge=0,
        doc="After answering, a policy server polls this many microseconds for the next "
            "request before its loop sleeps: a simulator waiting on get_action is spared "
            "the server's wake-up from sleep (about half the round trip on a 2-core VM). "
            "It spins only while requests come that fast; 0 never spins (a server sharing "
            "its cores with CPU-bound simulators).")
    policy_server_insecure_plaintext: bool = setting(
        False, "env_runners",
        doc="Let a policy server on tcp:// run without CURVE, or one on http:// without a "
            "bearer token (and bind http:// off loopback): any process that reaches the "
            "port may then report experience. Without it, a tcp:// server uses "
            "policy_server_curve_keys, or makes keys in ~/.rlmesh/policy_server_keys (see "
            "docs/security.md).")
    policy_server_max_abs_reward: float = setting(
        1e6, "env_runners", gt=0,
        doc="A policy server refuses a client reward beyond +-this, and an episode return "
            "beyond +-this x policy_server_max_episode_steps (a fake return of 1e300 "
            "otherwise became the mean and stopped the run as a success).")
    policy_server_max_episode_steps: int = setting(
        100_000, "env_runners", ge=1,
        doc="A policy server refuses steps past this many in one client episode.")
    policy_server_max_open_episodes_per_client: int = setting(
        1_000, "env_runners", ge=1,
        doc="Open episodes one client (one CURVE key, else one connection) may hold; "
            "starting one more closes that client's least recently used one.")
    policy_server_max_open_episodes: int = setting(
        10_000, "env_runners", ge=1,
        doc="Open episodes over all clients; starting one more closes the least recently "
            "used one (closed episodes train as truncated, and never count in the "
            "episode_reward_mean).")
    policy_server_max_message_mb: float = setting(
        16.0, "env_runners", gt=0,
        doc="The largest message (MiB) a policy server accepts from a client; a larger "
            "frame drops that client's connection. Raise it for large observations.")
    policy_server_max_connections: int = setting(
        1024, "env_runners", ge=1,
        doc="Connections a policy server keeps open; past it, the oldest that never sent "
            "a valid message is closed first, so idle connections cannot lock clients out.")
    policy_server_max_chunks_per_s: float | None = setting(
        1000.0, "env_runners", gt=0,
        doc="Chunks one local-inference client may report to a policy server per second "
            "(up to a second's worth at once); a call past it is refused whole, naming "
            "this setting. None: no limit.")
    policy_server_max_connections_per_client: int | None = setting(
        None, "env_runners", ge=1,
        doc="Connections one client (its CURVE key's name) may hold at a policy server; "
            "past it, that client's least recently active one is closed. None: no cap of "
            "its own (past policy_server_max_connections, the client holding the most "
            "loses one first either way).")
    observation_filter: Literal["NoFilter", "MeanStdFilter"] = setting(
        "NoFilter", "env_runners",
        doc="'MeanStdFilter': each observation normalised by the running mean and std of "
            "every observation sampled so far, clipped to [-10, 10] (Box observations). Each "
            "runner updates its copy as it samples; the driver merges all runners' new "
            "statistics every iteration and syncs them back; checkpoints keep them and "
            "compute_single_action, rollout and the policy client apply them. Learning from "
            "a dataset (CQL, IQL, MARWIL, BC), the statistics are the data's, held "
            "(docs/offline.md). 'NoFilter': observations as the env gives them.")
    enable_connectors: Literal[True] = setting(
        True, "env_runners",
        doc="RLlib's switch for its runner-side connectors; here observations are always "
            "filtered (observation_filter) and stacked (model framestack) in the runner, so "
            "only True is valid (the key exists so that RLlib configs naming it load).")
    sample_async: bool = setting(
        False, "env_runners",
        doc="The runners sample the next train batch while the learner updates on this one "
            "(synchronous algorithms: PPO, PG, A2C, the DQN and DDPG families, MARWIL): "
            "sampling's time is hidden behind the update's, and each batch is acted with "
            "weights one update older than the learner's (policy lag 1; PPO's ratio is to "
            "the policy that acted). With output, the runners' files hold the batch "
            "sampled ahead when the run stopped too. IMPALA, APPO, APEX and A3C sample "
            "asynchronously anyway; ES and ARS refuse it.")
    sample_timeout_s: float | None = setting(
        60.0, "env_runners", gt=0,
        doc="Seconds to wait for a runner's fragment before treating the runner as failed; "
            "None waits forever.")

    def environment(self, env=_UNSET, **kwargs):
        """Set the environment group (see ``fields_table("environment")``)."""
        return self._set("environment", {"env": env, **kwargs})

    def env_runners(self, **kwargs):
        """Set the env_runners group (see ``fields_table("env_runners")``)."""
        return self._set("env_runners", kwargs)

    def _sequence_checks(self) -> list[str]:
        """Cross checks of ``model.use_lstm`` against sampling (called from
        AlgorithmConfig._cross_checks): learners cut sequences from each fragment, so a
        ``max_seq_len`` longer than the fragment its runners send can never be reached."""
        model = self.model if isinstance(self.model, dict) else {}
        if not model.get("use_lstm") or self.batch_mode == "complete_episodes":
            return []
        if self.policy_server_address is not None or self.input_ != "sampler":
            return []  # clients' chunks or recorded episodes: no fragment length here
        max_seq_len = model.get("max_seq_len", MODEL_DEFAULTS["max_seq_len"])
        if max_seq_len == MODEL_DEFAULTS["max_seq_len"]:
            return []  # the default on short fragments (A2C's 16, A3C's 10): cut at the fragment
        fragment = (self.rollout_fragment_length if self.rollout_fragment_length != "auto"
                    else self.get_rollout_fragment_length(self.num_env_runners or 1))
        if isinstance(max_seq_len, int) and isinstance(fragment, int) and max_seq_len > fragment:
            where = ("" if self.rollout_fragment_length != "auto" else
                     f" ('auto': train_batch_size {self.total_train_batch_size} over "
                     f"{max(1, self.num_env_runners) * self.num_envs_per_env_runner} envs)")
            return [f"model.max_seq_len: {max_seq_len} is longer than rollout_fragment_length "
                    f"{fragment}{where}, the most steps a sequence can hold; set max_seq_len "
                    f"<= {fragment} or a longer fragment"]
        return []

    def _policy_server_checks(self) -> list[str]:
        """Cross checks of these groups (called from AlgorithmConfig._cross_checks): a policy
        server's timeouts and spaces, and spaces given as data."""
        problems = []
        if self.noise_hold_steps > 1 and self.policy_server_address is not None:
            problems.append("noise_hold_steps: a policy server's clients draw their own "
                            "actions, one call at a time; held noise needs runners stepping "
                            f"envs (got {self.noise_hold_steps} with policy_server_address)")
        timeout = self.sample_timeout_s
        if (self.policy_server_address is not None and timeout is not None
                and timeout <= self.policy_server_idle_timeout_s):
            problems.append(f"sample_timeout_s: must exceed policy_server_idle_timeout_s "
                            f"({self.policy_server_idle_timeout_s}), or an idle policy server "
                            f"counts as failed; got {timeout}")
        for key in ("observation_space", "action_space"):
            value = getattr(self, key)
            if value is None:
                if self.policy_server_address is not None and self.env is None:
                    problems.append(f"{key}: policy_server_address without an env needs the "
                                    f"spaces; set .environment({key}=...)")
                continue
            try:
                from rlmesh.env.registry import as_space

                as_space(value)
            except (TypeError, ValueError, KeyError) as e:
                problems.append(f"{key}: not a gymnasium space or its data form: {e}")
        return problems
