"""The algorithms' default networks as RLModules a user can subclass: PPO's (which IMPALA
shares, as in RLlib) and APPO's, both rlmesh's default actor-critic model
(``rl/default_model.py: ActorCriticMLP``, built from ``model_config``'s rlmesh keys).

Given as ``RLModuleSpec(module_class=DefaultPPOTorchRLModule)`` (or no class) the policy
builds the same default model it builds without a spec, numpy runners included; a subclass
runs through the module's forward passes (``policy/module_model.py``). Override
``build_network`` to change the network and keep the passes, or ``setup`` and ``_forward*``
to write your own.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

from rlmesh.models.rl_module_apis import QNetAPI, TargetNetworkAPI, ValueFunctionAPI
from rlmesh.models.torch_rl_module import TorchRLModule
from rlmesh.rl.columns import Columns
from rlmesh.rl.spec import MODEL_DEFAULTS


def rlmesh_model_keys(model_config: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``model_config`` that rlmesh's default model reads (RLlib's
    DefaultModelConfig has more, for its catalogs)."""
    return {k: v for k, v in model_config.items() if k in MODEL_DEFAULTS}


class DefaultActorCriticTorchRLModule(TorchRLModule, ValueFunctionAPI):
    """Policy logits and state values from one network (``self.net``)."""

    def setup(self) -> None:
        self.net = self.build_network()

    def build_network(self) -> nn.Module:
        """rlmesh's default actor-critic model on this module's spaces and model_config."""
        from rlmesh.rl.default_model import build_model

        config = rlmesh_model_keys(self.model_config)
        if config.get("use_lstm") or config.get("custom_model"):
            raise ValueError(f"{type(self).__name__}: use_lstm and custom_model belong to the "
                             "model without an RLModule; write a stateful TorchRLModule "
                             "(get_initial_state, Columns.STATE_IN/STATE_OUT) instead")
        return build_model(self.observation_space, self.action_space, config)

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        obs = batch[Columns.OBS]
        if hasattr(self.net, "policy_inputs"):
            return {Columns.ACTION_DIST_INPUTS: self.net.policy_inputs(obs)}
        return {Columns.ACTION_DIST_INPUTS: self.net(obs)[0]}

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        dist_inputs, values = self.net(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: dist_inputs, Columns.VF_PREDS: values}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> Any:
        if hasattr(self.net, "values"):
            return self.net.values(batch[Columns.OBS])
        return self.net(batch[Columns.OBS])[1]


class DefaultPPOTorchRLModule(DefaultActorCriticTorchRLModule):
    """PPO's default module (IMPALA's too, as in RLlib)."""


class DefaultAPPOTorchRLModule(DefaultPPOTorchRLModule):
    """APPO's default module (its target network is the policy's copy, algorithms/appo)."""


#: RLlib's names before 2.40.
PPOTorchRLModule = DefaultPPOTorchRLModule
APPOTorchRLModule = DefaultAPPOTorchRLModule


# --- DQN's and SAC's default modules ---

#: The output keys of RLlib's DQN modules (``ray.rllib.algorithms.dqn.default_dqn_rl_module``).
QF_PREDS = "qf_preds"
QF_TWIN_PREDS = "qf_twin_preds"
QF_LOGITS = "qf_logits"
QF_PROBS = "qf_probs"
ATOMS = "atoms"

#: What DQN's module reads from model_config beyond rlmesh's model keys (DQNConfig's
#: settings of the same names; DQN's policy puts the config's values there).
DQN_MODULE_DEFAULTS = {"hiddens": [256], "dueling": True, "noisy": False, "sigma0": 0.5,
                       "num_atoms": 1, "v_min": -10.0, "v_max": 10.0}
#: What SAC's module reads beyond rlmesh's model keys (SACConfig's settings).
SAC_MODULE_DEFAULTS = {"twin_q": True,
                       "policy_model_config": {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"},
                       "q_model_config": {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"}}


class _TargetCopies(TargetNetworkAPI):
    """RLlib's TargetNetworkAPI by copying ``_target_pairs()``'s online networks. rlmesh's
    DQN and SAC policies keep their own target copy of the whole model (Polyak or hard
    updates, ``algorithms/off_policy.py``) and call none of these; they are here for code
    that calls them on a module of its own."""

    def _online_networks(self) -> dict[str, nn.Module]:
        raise NotImplementedError

    def make_target_networks(self) -> None:
        import copy

        for name, net in self._online_networks().items():
            setattr(self, f"_target_{name}", copy.deepcopy(net).requires_grad_(False))

    def get_target_network_pairs(self) -> list[tuple[Any, Any]]:
        return [(net, getattr(self, f"_target_{name}"))
                for name, net in self._online_networks().items()]


class DefaultDQNTorchRLModule(TorchRLModule, QNetAPI, _TargetCopies):
    """DQN's default module: rlmesh's Q network (``rl/q_network.py: QModel``, dueling,
    noisy and distributional heads) as ``self.qf``, built from model_config's rlmesh model
    keys and DQN's keys (``DQN_MODULE_DEFAULTS``). Every pass returns ``QF_PREDS``
    (``[B, num_actions]``) and, distributional, ``QF_LOGITS`` / ``QF_PROBS`` / ``ATOMS``;
    acting returns ``Columns.ACTIONS``, the greedy action (DQN's policy explores around it,
    epsilon-greedy or with noisy layers). Override ``build_q_network`` to change the
    network and keep the rest."""

    def setup(self) -> None:
        self.qf = self.build_q_network()

    def dqn_setting(self, key: str) -> Any:
        return self.model_config.get(key, DQN_MODULE_DEFAULTS[key])

    def build_q_network(self) -> nn.Module:
        from rlmesh.rl.q_network import QModel

        if not hasattr(self.action_space, "n"):
            raise ValueError(f"{type(self).__name__}: DQN needs a Discrete action space, got "
                             f"{self.action_space}")
        s = self.dqn_setting
        return QModel(self.observation_space, int(self.action_space.n),
                      rlmesh_model_keys(self.model_config), list(s("hiddens")), bool(s("dueling")),
                      bool(s("noisy")), float(s("sigma0")), int(s("num_atoms")),
                      float(s("v_min")), float(s("v_max")))

    def _online_networks(self) -> dict[str, nn.Module]:
        return {"qf": self.qf}

    def compute_q_values(self, batch: dict[str, Any]) -> dict[str, Any]:
        return self._q_outputs(self.qf, batch[Columns.OBS])

    def compute_advantage_distribution(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Distributional: ``ATOMS`` (the support), ``QF_LOGITS`` and ``QF_PROBS``
        ``[B, num_actions, num_atoms]`` of ``batch[Columns.OBS]``."""
        if self.qf.num_atoms == 1:
            raise ValueError(f"{type(self).__name__}: compute_advantage_distribution needs "
                             "num_atoms > 1 (distributional Q)")
        out = self.compute_q_values(batch)
        return {k: out[k] for k in (ATOMS, QF_LOGITS, QF_PROBS)}

    def forward_target(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._q_outputs(self._target_qf, batch[Columns.OBS])

    @staticmethod
    def _q_outputs(net: nn.Module, obs: Any) -> dict[str, Any]:
        if net.num_atoms == 1:
            return {QF_PREDS: net.q_values(obs)}
        from rlmesh.rl import distributional

        logits = net.q_logits(obs)
        return {QF_PREDS: distributional.expected_q(logits, net.support), QF_LOGITS: logits,
                QF_PROBS: logits.softmax(-1), ATOMS: net.support}

    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        out = self.compute_q_values(batch)
        return {**out, Columns.ACTIONS: out[QF_PREDS].argmax(-1)}

    def _forward_exploration(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._forward_inference(batch, **kwargs)

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self.compute_q_values(batch)


class DefaultSACTorchRLModule(TorchRLModule, QNetAPI, _TargetCopies):
    """SAC's default module: SAC's actor (``self.pi``: a squashed Gaussian's mean and
    log-std, or logits for Discrete actions) and its twin Q networks (``self.qf``), built
    as SAC's policy builds them from model_config's ``policy_model_config``,
    ``q_model_config``, ``twin_q`` and rlmesh's encoder keys. Its spec is SAC's own
    networks (numpy runners included); a subclass (or any module with these passes and
    ``compute_q_values``) runs through ``policy/sac_module_model.py``."""

    def setup(self) -> None:
        from rlmesh.rl.actor_q import StochasticActor, TwinQ

        s = {**SAC_MODULE_DEFAULTS, **self.model_config}
        pm = {**SAC_MODULE_DEFAULTS["policy_model_config"], **s["policy_model_config"]}
        qm = {**SAC_MODULE_DEFAULTS["q_model_config"], **s["q_model_config"]}
        model = rlmesh_model_keys(self.model_config)
        space = self.action_space
        discrete = hasattr(space, "n")
        outputs = int(space.n) if discrete else 2 * int(np.prod(space.shape))
        self.pi = StochasticActor(self.observation_space, outputs, pm["fcnet_hiddens"],
                                  pm["fcnet_activation"], model)
        self.qf = TwinQ(self.observation_space, space, qm["fcnet_hiddens"],
                        qm["fcnet_activation"], bool(s["twin_q"]), model)

    def _online_networks(self) -> dict[str, nn.Module]:
        return {"qf": self.qf}

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self.pi(batch[Columns.OBS])}

    def compute_q_values(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Q of ``batch[Columns.OBS]`` and (Box actions) ``batch[Columns.ACTIONS]``: ``[B]``
        (``[B, n]`` for Discrete actions); ``QF_TWIN_PREDS`` too with twin_q."""
        return self._q_outputs(self.qf, batch)

    def forward_target(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._q_outputs(self._target_qf, batch)

    @staticmethod
    def _q_outputs(net: nn.Module, batch: dict[str, Any]) -> dict[str, Any]:
        qs = net(batch[Columns.OBS], batch.get(Columns.ACTIONS))
        out = {QF_PREDS: qs[0]}
        if len(qs) > 1:
            out[QF_TWIN_PREDS] = qs[1]
        return out


#: DQN's and SAC's default classes by RLlib's import paths too.
_RLLIB_PATHS = (
    "rlmesh.algorithms.dqn.torch.default_dqn_torch_rl_module:DefaultDQNTorchRLModule",
    "rlmesh.algorithms.dqn.torch.dqn_rainbow_torch_rl_module:DQNRainbowTorchRLModule",
    "rlmesh.algorithms.sac.torch.default_sac_torch_rl_module:DefaultSACTorchRLModule",
    "rlmesh.algorithms.sac.torch.sac_torch_rl_module:SACTorchRLModule")

#: The algorithms each default class is the default network of, by its class's name.
_FAMILIES = {"DefaultActorCriticTorchRLModule": "actor_critic", "DefaultPPOTorchRLModule":
             "actor_critic", "PPOTorchRLModule": "actor_critic", "DefaultAPPOTorchRLModule":
             "actor_critic", "APPOTorchRLModule": "actor_critic", "DefaultDQNTorchRLModule": "dqn",
             "DQNRainbowTorchRLModule": "dqn", "DefaultSACTorchRLModule": "sac",
             "SACTorchRLModule": "sac"}


def default_module_family(path: str) -> str | None:
    """``"actor_critic"``, ``"dqn"`` or ``"sac"`` for a default class's import path (the
    algorithms whose own network it is); None for any other class."""
    if path not in DEFAULT_MODULE_PATHS:
        return None
    return _FAMILIES.get(path.rpartition(":")[2])


#: Each default class by import path: given in a spec, the policy builds its own model.
DEFAULT_MODULE_PATHS = frozenset(
    [f"{__name__}:{cls.__name__}" for cls in (DefaultActorCriticTorchRLModule,
                                              DefaultPPOTorchRLModule, DefaultAPPOTorchRLModule,
                                              DefaultDQNTorchRLModule, DefaultSACTorchRLModule)]
    + list(_RLLIB_PATHS))

__all__ = ["APPOTorchRLModule", "ATOMS", "DEFAULT_MODULE_PATHS", "DQN_MODULE_DEFAULTS",
           "DefaultAPPOTorchRLModule", "DefaultActorCriticTorchRLModule",
           "DefaultDQNTorchRLModule", "DefaultPPOTorchRLModule", "DefaultSACTorchRLModule",
           "PPOTorchRLModule", "QF_LOGITS", "QF_PREDS", "QF_PROBS", "QF_TWIN_PREDS",
           "SAC_MODULE_DEFAULTS"]
