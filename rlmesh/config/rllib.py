"""RLlib's config keys that are not rlmesh settings (nor their aliases), for both of RLlib's
API stacks: each is translated onto rlmesh's settings, accepted as having no effect here, or
refused with what to use instead (those two tables: rllib_keys.py). ``translate()`` runs before keys are resolved, so a
tuned-example file, ``from_dict`` and the builders (``.resources(num_gpus=1)``) read alike.
docs/rllib.md shows these tables as one page."""

from __future__ import annotations

import logging
from typing import Any, Callable, NamedTuple

from rlmesh.config.rllib_keys import NO_EFFECT, REFUSED, SEED_ERA_NO_EFFECT

logger = logging.getLogger("rlmesh.config")


class Translated(NamedTuple):
    """What ``translate`` makes of a dict of keys."""

    settings: dict  # keys as the caller gave them (rlmesh's own or unknown: resolved later)
    derived: dict  # rlmesh keys made from RLlib keys (no builder-group check applies)
    notes: list  # one line each, for the user


from rlmesh.config.module_keys import Refused
from rlmesh.config.module_keys import model_config as _model_config
from rlmesh.config.module_keys import rl_module_spec as _rl_module_spec


def _stripped(name: Any) -> Any:
    """A class named by RLlib's module path ('ray.rllib.utils...EpsilonGreedy') -> its name."""
    return name.rpartition(".")[2] if isinstance(name, str) else name


# --- translations: RLlib key (value, whole dict) -> rlmesh keys, and a note or None ---

def _framework(value, d, cls):
    if value == "torch":
        return {"framework": "torch"}, None
    if value in ("tf", "tf2", "tfe"):
        return {"framework": "torch"}, (f"framework: {value!r} runs with torch (rlmesh has no "
                                        f"TensorFlow)")
    return {"framework": value}, None  # validate() names what it takes


def _use_pytorch(value, d, cls):
    """Ray 0.8's framework switch."""
    return _framework("torch" if value else "tf", d, cls)


def _num_gpus(value, d, cls):
    """Old stack: num_gpus are the local learner's GPUs (towers when > 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise Refused(f"num_gpus: expected a number >= 0, got {value!r}")
    if value <= 1:
        return {"num_gpus_per_learner": value}, None
    if value != int(value):
        raise Refused(f"num_gpus: {value} GPUs is not a whole number above 1; set "
                      f"num_learners and num_gpus_per_learner")
    return ({"num_learners": int(value), "num_gpus_per_learner": 1},
            f"num_gpus: {int(value)} -> {int(value)} data-parallel learners of 1 GPU each")


def _num_accs(value, d, cls):
    """RLlib's short-lived name of num_gpus ("accelerators"), in its Hopper and Walker2d
    PPO examples."""
    try:
        out, said = _num_gpus(value, d, cls)
    except Refused as e:
        raise Refused(str(e).replace("num_gpus:", "num_accs:", 1)) from None
    return out, said and said.replace("num_gpus:", "num_accs (num_gpus):", 1)


def _apex_optimizer(value, d, cls):
    """APEX's old ``optimizer`` dict."""
    if not isinstance(value, dict):
        raise Refused(f"optimizer: expected APEX's dict, got {value!r}")
    if not value:
        return {}, None
    out, dropped = {}, []
    for key, v in value.items():
        if key in ("num_replay_buffer_shards", "num_replay_shards"):
            out["num_replay_buffer_shards"] = v
        elif key == "max_weight_sync_delay":
            out["broadcast_interval"] = max(1, int(v) // 100)
            dropped.append(key)
        elif key == "debug":
            continue
        else:
            raise Refused(f"optimizer: unknown key {key!r}; APEX's optimizer dict takes "
                          "num_replay_buffer_shards, max_weight_sync_delay and debug")
    if "num_replay_buffer_shards" not in cls.__dataclass_fields__:
        raise Refused("optimizer: only APEX's optimizer dict is understood "
                      "(num_replay_buffer_shards, max_weight_sync_delay)")
    note = ("optimizer.max_weight_sync_delay: runners fetch weights every broadcast_interval "
            "learner updates instead") if dropped else None
    return out, note


def _multiagent(value, d, cls):
    """The old stack's nested ``multiagent`` dict."""
    if not isinstance(value, dict):
        raise Refused(f"multiagent: expected a dict, got {value!r}")
    return dict(value), None


def _exploration(value, d, cls):
    """``exploration_config``: RLlib's class paths stripped; StochasticSampling (the policy's
    own distribution) is what policy-gradient algorithms do anyway."""
    if not isinstance(value, dict):
        return {"exploration_config": value}, None
    value = {**value, "type": _stripped(value.get("type"))} if "type" in value else dict(value)
    if value.get("type") == "ParameterNoise" and "noisy" in cls.__dataclass_fields__:
        return {"noisy": True}, ("exploration_config: ParameterNoise -> noisy nets (noisy: "
                                 "true), rlmesh's noise in the weights")
    if "exploration_config" in cls.__dataclass_fields__:
        return {"exploration_config": value}, None
    if value.get("type") in (None, "StochasticSampling") and set(value) <= {"type", "random_timesteps"}:
        return {}, None
    raise Refused(f"exploration_config: {cls.__name__[:-6] or 'this algorithm'} samples from "
                  f"its policy's distribution (StochasticSampling); type "
                  f"{value.get('type')!r} is not available to it")


_REPLAY_TYPES = {
    "MultiAgentEpisodeReplayBuffer": "MultiAgentReplayBuffer",
    "MultiAgentPrioritizedEpisodeReplayBuffer": "MultiAgentPrioritizedReplayBuffer",
}


def _replay(value, d, cls):
    """``replay_buffer_config``: class paths stripped, the new stack's episode buffers as
    their transition equivalents, and the old stack's keys that live elsewhere here."""
    if not isinstance(value, dict):
        return {"replay_buffer_config": value}, None
    rb, out = dict(value), {}
    if "type" in rb:
        rb["type"] = _REPLAY_TYPES.get(_stripped(rb["type"]), _stripped(rb["type"]))
    for new, old in (("alpha", "prioritized_replay_alpha"), ("beta", "prioritized_replay_beta")):
        if new in rb:  # the new stack's episode buffers' names
            rb[old] = rb.pop(new)
    for key in ("learning_starts", "num_steps_sampled_before_learning_starts",
                "min_size_for_sampling"):  # the last: Ray 1.x's name of the same floor
        if key in rb:
            out["num_steps_sampled_before_learning_starts"] = rb.pop(key)
    if rb.pop("prioritized_replay", None) is False:  # the oldest boolean switch
        rb["type"] = "MultiAgentReplayBuffer"
    mode = rb.pop("replay_mode", "independent")
    if mode != "independent":
        raise Refused(f"replay_buffer_config.replay_mode: {mode!r}; rlmesh replays each "
                      "policy independently ('independent')")
    unit = rb.pop("storage_unit", "timesteps")
    if unit not in ("timesteps", "episodes", "sequences"):
        raise Refused(f"replay_buffer_config.storage_unit: {unit!r}; rlmesh stores timesteps")
    for key in ("no_local_replay_buffer", "replay_batch_size", "replay_burn_in",
                "replay_zero_init_states", "num_shards", "replay_sequence_override",
                "_enable_replay_buffer_api"):
        rb.pop(key, None)  # batch size, shards and sequences come from other settings
    out["replay_buffer_config"] = rb
    return out, None


def _input(value, d, cls):
    """RLlib's ``input: dataset`` reads ``input_config.paths``."""
    if value == "dataset":
        cfg = d.get("input_config") or {}
        paths = cfg.get("paths") or cfg.get("path")
        if not paths:
            raise Refused("input: 'dataset' needs input_config.paths (a file, folder or glob)")
        return {"input": paths}, None
    return {"input": value}, None


def _input_config(value, d, cls):
    if not isinstance(value, dict):
        raise Refused(f"input_config: expected a dict, got {value!r}")
    kept = {k: v for k, v in value.items() if k in ("shuffle", "format")}
    return {"input_config": kept}, None


def _output_config(value, d, cls):
    if not isinstance(value, dict):
        raise Refused(f"output_config: expected a dict, got {value!r}")
    out = {}
    if "format" in value:
        out["output_format"] = value["format"]
    if value.get("path"):
        out["output"] = value["path"]
    return out, None


def _scheduled(key: str, schedule_key: str) -> Callable:
    """The new stack gives a schedule as the value itself: ``lr: [[0, 1e-3], [1e6, 1e-4]]``."""

    def translate(value, d, cls):
        if not isinstance(value, list):
            return {key: value}, None
        if schedule_key not in cls.__dataclass_fields__:
            raise Refused(f"{key}: {cls.__name__[:-6]} takes no schedule ({schedule_key})")
        if not value or not isinstance(value[0], (list, tuple)) or len(value[0]) != 2:
            raise Refused(f"{key}: a schedule is [[timestep, value], ...], got {value!r}")
        return {schedule_key: value, key: value[0][1]}, None

    return translate


def _sac_rate(name: str) -> Callable:
    """The new stack's SAC rates (actor_lr, critic_lr, alpha_lr) are optimization_config's."""

    def translate(value, d, cls):
        if "optimization_config" not in cls.__dataclass_fields__:
            raise Refused(f"{name}: not a setting of {cls.__name__[:-6]}")
        return {"optimization_config": {_SAC_RATES[name]: value}}, None

    return translate


_SAC_RATES = {"actor_lr": "actor_learning_rate", "critic_lr": "critic_learning_rate",
              "alpha_lr": "entropy_learning_rate"}


def _vf_share_layers(value, d, cls):
    """The old PPO's top-level vf_share_layers is the model's."""
    return {"model": {"vf_share_layers": value}}, None


def _timesteps_per_iteration(value, d, cls):
    key = "min_sample_timesteps_per_iteration"
    if key in cls.__dataclass_fields__:
        return {key: value}, None
    if value in (0, None):
        return {}, None
    raise Refused(f"{key}: {cls.__name__[:-6]} samples train_batch_size env steps per "
                  "iteration; set train_batch_size instead")


def _epsilon(value, d, cls):
    """The new stack's DQN ``epsilon``: a schedule [[0, 1.0], [t, final]] (or one number)."""
    if "exploration_config" not in cls.__dataclass_fields__:
        raise Refused(f"epsilon: not a setting of {cls.__name__[:-6]} (RMSProp's epsilon is "
                      "for opt_type 'rmsprop')")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"exploration_config": {"initial_epsilon": value, "final_epsilon": value}}, None
    try:
        (t0, first), (t1, last) = value[0], value[-1]
    except (TypeError, ValueError):
        raise Refused(f"epsilon: a number or a schedule [[0, 1.0], [10000, 0.05]], got "
                      f"{value!r}") from None
    note = (f"epsilon: a schedule of {len(value)} points runs linearly from its first to its "
            "last") if len(value) > 2 else None
    return {"exploration_config": {"type": "EpsilonGreedy", "initial_epsilon": first,
                                   "final_epsilon": last, "epsilon_timesteps": t1 - t0}}, note


def _renamed(new: str, fallback: str | None = None) -> Callable:
    """A key with another name here; where ``cls`` has no such setting, ``fallback`` says
    it has no effect (None: refused)."""

    def translate(value, d, cls):
        if new in _own_spellings(cls):
            return {new: value}, None
        if fallback is not None:
            return {}, None
        raise Refused(f"{new}: not a setting of {cls.__name__[:-6]}")

    return translate


def _only(expected, advice: str) -> Callable:
    def translate(value, d, cls):
        if value == expected:
            return {}, None
        raise Refused(f"rlmesh cannot honour {value!r} here; {advice}")

    return translate


def _no_done_at_end(value, d, cls):
    if not value:
        return {}, None
    return {}, ("no_done_at_end: rlmesh bootstraps where an episode is truncated (a time "
                "limit, horizon) and not where the env terminates it, by gymnasium's flags")


def _old_replay_key(key: str) -> Callable:
    """The oldest stack's replay keys at the top level (buffer_size, prioritized_replay...)."""

    def translate(value, d, cls):
        if "replay_buffer_config" not in cls.__dataclass_fields__:
            raise Refused(f"{key}: {cls.__name__[:-6]} has no replay buffer")
        if key == "prioritized_replay":
            kind = "MultiAgentPrioritizedReplayBuffer" if value else "MultiAgentReplayBuffer"
            return {"replay_buffer_config": {"type": kind}}, None
        return {"replay_buffer_config": {"capacity" if key == "buffer_size" else key: value}}, None

    return translate


def _softq(value, d, cls):
    """Ray 0.x's DQN switches: softq and softmax_temp are exploration_config type SoftQ."""
    if "exploration_config" not in cls.__dataclass_fields__:
        raise Refused(f"softq: {cls.__name__[:-6]} has no Q-values to explore by")
    if not value:
        return {}, None
    return {"exploration_config": {"type": "SoftQ",
                                   "temperature": d.get("softmax_temp", 1.0)}}, None


def _softmax_temp(value, d, cls):
    return {}, None  # read with softq


def _min_train_timesteps(value, d, cls):
    if value in (0, None):
        return {}, None
    raise Refused("min_train_timesteps_per_iteration: rlmesh trains what each iteration "
                  "samples; set train_batch_size or training_intensity instead")


def _ignore_failures(value, d, cls):
    if value:
        return ({"restart_failed_env_runners": True},
                f"ignore_worker_failures: failed env runners restart (restart_failed_env_runners)")
    return {}, None


def _monitor(value, d, cls):
    """Ray 0.x's ``monitor``: gym's Monitor wrote episode videos to the result dir. rlmesh
    records evaluation episodes (record_env), so true turns on a one-episode evaluation each
    iteration unless the dict schedules evaluations itself."""
    if not value:
        return {}, "no effect in rlmesh: monitor=false (videos are off unless record_env is set)"
    out = {"record_env": True if value is True else value}
    if not d.get("evaluation_interval"):
        out["evaluation_interval"] = 1
        if not {"evaluation_duration", "evaluation_num_episodes"} & set(d):
            out.update(evaluation_duration=1, evaluation_duration_unit="episodes")
    return out, ("monitor: true -> record_env: true: rlmesh records evaluation episodes, not "
                 "training ones, into the trial's videos/ folder"
                 + ("" if d.get("evaluation_interval") else
                    " (one evaluation episode every iteration: evaluation_interval 1)"))


TRANSLATIONS: dict[str, Callable] = {
    "monitor": _monitor,
    "sample_batch_size": _renamed("rollout_fragment_length"),
    "framework": _framework,
    "num_gpus": _num_gpus,
    "num_accs": _num_accs,
    "use_pytorch": _use_pytorch,
    "optimizer": _apex_optimizer,
    "multiagent": _multiagent,
    "exploration_config": _exploration,
    "replay_buffer_config": _replay,
    "input": _input,
    "input_": _input,
    "input_config": _input_config,
    "output_config": _output_config,
    "model_config": _model_config,
    "model_config_dict": _model_config,
    "lr": _scheduled("lr", "lr_schedule"),
    "entropy_coeff": _scheduled("entropy_coeff", "entropy_coeff_schedule"),
    "ignore_worker_failures": _ignore_failures,
    "actor_lr": _sac_rate("actor_lr"),
    "critic_lr": _sac_rate("critic_lr"),
    "alpha_lr": _sac_rate("alpha_lr"),
    "vf_share_layers": _vf_share_layers,
    "timesteps_per_iteration": _timesteps_per_iteration,
    "min_sample_timesteps_per_iteration": _timesteps_per_iteration,
    "min_sample_timesteps_per_reporting": _timesteps_per_iteration,
    "min_train_timesteps_per_iteration": _min_train_timesteps,
    "min_train_timesteps_per_reporting": _min_train_timesteps,
    "epsilon": _epsilon,
    "no_done_at_end": _no_done_at_end,
    "softq": _softq,
    "softmax_temp": _softmax_temp,
    "buffer_size": _old_replay_key("buffer_size"),
    "prioritized_replay": _old_replay_key("prioritized_replay"),
    "prioritized_replay_alpha": _old_replay_key("prioritized_replay_alpha"),
    "prioritized_replay_beta": _old_replay_key("prioritized_replay_beta"),
    "prioritized_replay_eps": _old_replay_key("prioritized_replay_eps"),
    "final_prioritized_replay_beta": _old_replay_key("final_prioritized_replay_beta"),
    "prioritized_replay_beta_annealing_timesteps":
        _old_replay_key("prioritized_replay_beta_annealing_timesteps"),
    "_train_batch_size_per_learner": _renamed("train_batch_size_per_learner"),
    "_model_config": _model_config,
    "rl_module_spec": _rl_module_spec,
    "_rl_module_spec": _rl_module_spec,
    "num_aggregator_actors_per_learner": _renamed("num_aggregation_workers", "no effect"),
    "target_update_frequency": _renamed("target_network_update_freq"),
    "circular_buffer_iterations_per_batch": _renamed("num_epochs"),
    "tau": _only(1.0, "APPO copies its target network every target_network_update_freq"),
    "lambda": _only(1.0, "MARWIL and BC score actions by their discounted returns (lambda 1)"),
    "use_gae": _only(True, "MARWIL and BC score actions by their discounted returns"),
}


def translate(cls, values: dict) -> Translated:
    """``values`` (keys of one config dict or one builder call) with RLlib's keys turned into
    rlmesh's; Refused for a key rlmesh cannot honour. Keys of ``cls`` itself, and unknown
    keys, pass unchanged (resolution reports the unknown ones with a "did you mean")."""
    settings, derived, notes, idle, seed_era = {}, {}, [], [], []
    own = _own_spellings(cls)
    for key, value in values.items():
        if key in TRANSLATIONS and (key not in own or key in _ALWAYS):
            out, note = TRANSLATIONS[key](value, values, cls)
            if key == "multiagent":
                inner = translate(cls, out)
                settings.update(inner.settings)
                derived.update(inner.derived)
                notes += inner.notes
                continue
            _merge(settings if key in own else derived, out)  # own keys: group-checked
            if note:
                notes.append(note)
        elif key in own:
            settings[key] = value
        elif key.startswith("callbacks_on_"):
            if value is not None:
                raise Refused(f"{key}: define a callbacks class with the method "
                              f"{key[len('callbacks_'):]}(...) and set callbacks_class")
        elif "offline_eval" in key:  # the offline evaluation runners (refused when asked for)
            continue
        elif key in NO_EFFECT:
            if value not in (None, False, {}, []):
                idle.append(key)
        elif key in SEED_ERA_NO_EFFECT:  # said even at their defaults (issue 47)
            seed_era.append(f"{key} ({SEED_ERA_NO_EFFECT[key]})")
        elif key in REFUSED:
            default, advice = REFUSED[key]
            if value != default and value is not None:  # None: RLlib's "not set"
                raise Refused(f"{key}: rlmesh cannot honour {key}={value!r}; {advice}")
        else:
            settings[key] = value
    if idle:
        notes.append(f"no effect in rlmesh: {', '.join(idle)} (docs/rllib.md says why)")
    if seed_era:
        notes.append(f"no effect in rlmesh: {'; '.join(seed_era)}")
    if "evaluation_config" in settings and isinstance(settings["evaluation_config"], dict):
        inner = translate(cls, settings["evaluation_config"])
        settings["evaluation_config"] = {**inner.settings, **inner.derived}
        notes += [f"evaluation_config.{n}" for n in inner.notes]
    return Translated(settings, derived, notes)


def _merge(derived: dict, out: dict) -> None:
    """Two RLlib keys may feed one dict setting (vf_share_layers and model_config: model)."""
    for key, value in out.items():
        if isinstance(value, dict) and isinstance(derived.get(key), dict):
            derived[key] = {**derived[key], **value}
        else:
            derived[key] = value


# Keys that are rlmesh settings too, but whose RLlib values need translating first.
_ALWAYS = frozenset({"framework", "exploration_config", "replay_buffer_config", "input",
                     "input_", "input_config", "lr", "entropy_coeff"})


def _own_spellings(cls) -> set:
    from rlmesh.config.settings import _names

    return set(_names(cls))


def note(lines: list[str]) -> None:
    """Say each translation note once per process (configs are copied and rebuilt often)."""
    for line in lines:
        if line not in _SAID:
            _SAID.add(line)
            logger.warning("%s", line)


_SAID: set[str] = set()


# --- what a file of RLlib's meant by the keys it leaves out ---

_NEW_STACK_KEYS = frozenset({"num_env_runners", "num_envs_per_env_runner", "num_learners",
                             "train_batch_size_per_learner", "minibatch_size", "num_epochs",
                             "model_config", "num_gpus_per_learner"})


def stack_of(config: dict) -> str:
    """'new' for a config of RLlib's new API stack (it switches it on, or uses its keys),
    else 'old' (the classic stack of RLlib's YAML tuned examples)."""
    api = config.get("api_stack") if isinstance(config.get("api_stack"), dict) else {}
    switched = (config.get("enable_rl_module_and_learner") or config.get("_enable_new_api_stack")
                or api.get("enable_rl_module_and_learner"))
    return "new" if switched or _NEW_STACK_KEYS & set(config) else "old"


def rllib_keys_in(cls, config: dict) -> list[str]:
    """The keys of ``config`` that only RLlib spells so (framework, old names, translated
    keys): what tells an RLlib file from one of rlmesh's, whose keys are rlmesh's own."""
    from rlmesh.config.settings import _fields

    current = {f.metadata["key"] or f.name for f in _fields(cls).values()} - {"framework"}
    own = _own_spellings(cls)
    return [k for k in config
            if k == "framework" or (k in own and k not in current)
            or (k not in own and (k in TRANSLATIONS or k in NO_EFFECT or k in REFUSED
                                  or k in SEED_ERA_NO_EFFECT))]


def defaults_for(cls, stack: str = "old") -> dict:
    """RLlib's defaults (of ``stack``) for the algorithm of config class ``cls``, where they
    differ from rlmesh's, as rlmesh keys: the base config's, then the algorithm's own."""
    from rlmesh.config.rllib_defaults import ALGORITHM_DEFAULTS, COMMON_DEFAULTS

    if stack not in ("old", "new"):
        raise ValueError(f"stack: 'old' or 'new', got {stack!r}")
    table = ALGORITHM_DEFAULTS[stack]
    own = next((table[k.__name__] for k in cls.__mro__ if k.__name__ in table), {})
    out = {k: v for k, v in COMMON_DEFAULTS[stack].items() if k in _own_spellings(cls)}
    _merge(out, own)  # the algorithm's model keys over the common ones
    return out
