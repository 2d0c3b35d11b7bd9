"""The policy server: an env runner whose experience comes from ``PolicyClient``s embedded
in external simulators instead of envs it steps (RLlib's PolicyServerInput).

``PolicyServerRunner`` is the runner the driver samples from, like ``EnvRunner``;
``PolicyService`` (``policy_service.py``) is what clients may call, served by a second
ActorServer of the same process on the configured public address. Remote inference computes actions here and
records the steps; local inference receives chunks the clients recorded themselves.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
from collections import deque
from typing import Any

import numpy as np

from rlmesh.client.episodes import Episodes, fragment_from_chunks
from rlmesh.client.keys import client_names, default_keys_dir, make_curve_keys
from rlmesh.env.registry import as_space, space_to_data, spaces_of
from rlmesh.rl.columns import (DEFAULT_POLICY_ID, ColumnSpec, Columns, action_dist_columns,
                               space_layout)
from rlmesh.rl.filters import make_filter
from rlmesh.roles.env_runner import default_policy_specs, runner_config
from rlmesh.roles.env_slots import SEED_STRIDE
from rlmesh.roles.obs_filters import FILTER_CALLS, ObsFilterCalls
from rlmesh.roles.runner_policy import VersionedPolicies, make_runner_policies
from rlmesh.roles.policy_checks import ClientLimits, ReportedEpisodes, Rejections
from rlmesh.roles.policy_memory import memory_options, recurrent_columns
from rlmesh.roles.policy_http import HTTPFront, serve_http
from rlmesh.roles.policy_quotas import ChunkRate, EpisodeShare
from rlmesh.roles.policy_server_agents import ServedAgents
from rlmesh.roles.policy_service import PolicyService
from rlmesh.runtime import Actor, current_job
from rlmesh.runtime.actor import ActorServer
from rlmesh.runtime.protocol import Protocol
from rlmesh.wire import codec
from rlmesh.wire.security import cluster_keys

log = logging.getLogger(__name__)

MAX_BUFFERED_FRAGMENTS = 16  # received steps kept: this many fragments' worth, then oldest dropped
# Client calls are small maps around arrays: a header past this is an attack (16 MB of empty
# maps took 1.2 GB and 1.5 s to decode), while chunks' large columns travel as frames.
MAX_HEADER_BYTES = 1 << 20
# Lists and maps, and their elements, in one client call (codec.Limits.max_objects): a
# report_chunks call of 100 chunks holds ~2,000, an observation sent as nested lists (an
# 84x84x4 image) ~30,000; 1 MiB of empty maps would be a million dicts (~70 MB).
MAX_HEADER_OBJECTS = 1 << 18


def public_address(base: str, worker_index: int) -> str:
    """Where runner ``worker_index`` listens: the configured address for runner 0 (the
    driver's) and 1, then the next ports (tcp) or numbered paths (ipc) for 2, 3, ..."""
    if base.isdigit():  # a bare port: loopback
        base = f"tcp://127.0.0.1:{base}"
    offset = max(worker_index, 1) - 1
    if offset == 0:
        return base
    match = re.fullmatch(r"((?:tcp|https?)://.+):(\d+)", base)
    if match:
        return f"{match.group(1)}:{int(match.group(2)) + offset}"
    return f"{base}.{offset}"


class PolicyServerRunner(ObsFilterCalls, VersionedPolicies, Actor):
    """Fragments of client-reported experience, in the layout of ``EnvRunner.sample``.

    ``config`` as for ``EnvRunner``, with ``policy_server_address`` and the spaces set.
    ``training=False`` serves inference only (``rlmesh serve``): nothing is recorded.
    """

    protocol = Protocol(
        calls=("sample", "set_weights", "take_weights", "get_weights", "get_address",
               "get_spaces", *FILTER_CALLS, "foreach_env", "call_env_method", "metrics"),
        test_hooks=("pid",),
    )

    def __init__(self, config: dict[str, Any], worker_index: int = 1,
                 param_server: str | None = "param_server", training: bool = True) -> None:
        cfg, specs, registry = runner_config(config)
        self.config = cfg
        if cfg.policy_server_address is None:
            raise ValueError("PolicyServerRunner needs policy_server_address in the config")
        self.worker_index = worker_index
        self.training = training
        if cfg.observation_space is not None and cfg.action_space is not None:
            self.observation_space = as_space(cfg.observation_space)
            self.action_space = as_space(cfg.action_space)
        elif specs is not None and cfg.is_multi_agent and cfg.env is None:  # the first policy's
            first = next(iter(specs.values()))
            self.observation_space = as_space(first["observation_space"])
            self.action_space = as_space(first["action_space"])
        else:  # the spaces of the config's env, built once here
            self.observation_space, self.action_space = spaces_of(
                cfg.env, cfg.env_config, registry, model=cfg.model,
                preprocessor_pref=cfg.preprocessor_pref)
        job = current_job()
        if specs is None:
            specs = default_policy_specs(self.observation_space, self.action_space, cfg)
        self.policies = make_runner_policies(
            specs, cfg, None if cfg.seed is None else cfg.seed + SEED_STRIDE * worker_index,
            own_process=job is None or job.role != "driver")
        self.versions = {pid: -1 for pid in self.policies}
        columns = self.policy.view_requirements
        # A recurrent policy's state is kept per episode (client/episodes.py) and recorded
        # with each step, as env runners record it; prev action/reward likewise.
        self.memory_specs = recurrent_columns(self.policy, self.action_space)
        if set(columns) - set(self.memory_specs) != set(action_dist_columns(1)):
            raise ValueError(f"the policy server records action_logp and action_dist_inputs "
                             f"(and a recurrent state); {type(self.policy).__name__} declares "
                             f"{sorted(columns)}")
        self.num_inputs = columns[Columns.ACTION_DIST_INPUTS].shape[0]
        self.squash = bool(cfg.model.get("squash_actions", False))
        # Remote inference filters (and counts) observations here; local-inference clients
        # apply the global statistics that come with the weights.
        self.obs_filter = make_filter(cfg.observation_filter, self.observation_space)
        self.fragment_length = cfg.get_rollout_fragment_length(worker_index)
        self.limits = ClientLimits.from_config(cfg)
        self.episodes = self._episodes_of(self.policy, self.memory_specs)
        # Multi-agent (.multi_agent(policies=...)): each agent of a client's episode is an
        # episode of its own in its policy's Episodes, mapped once by policy_mapping_fn.
        self.multi = ServedAgents(self, cfg) if cfg.is_multi_agent else None
        self.rejections = Rejections()
        self.chunk_rate = ChunkRate(cfg.policy_server_max_chunks_per_s)
        self.share = EpisodeShare(cfg.metrics_num_episodes_for_smoothing,
                                  cfg.policy_server_episode_timeout_s)
        self.reported = ReportedEpisodes(self.limits.max_open_episodes,
                                         self.limits.max_open_episodes_per_client)
        self.received: deque[dict[str, Any]] = deque()  # chunks from local-inference clients
        self.received_steps = 0
        self._ps_name = param_server
        self._ps: Any = None
        self._inbox: dict[str, Any] = {}
        self._new_data = asyncio.Event()
        self._server: ActorServer | None = None
        self._http: HTTPFront | None = None  # with an http:// or https:// address
        self._auth: Any = None  # the CURVE authenticator thread, with policy_server_curve_keys
        self.address = public_address(cfg.policy_server_address, worker_index)
        self._stats = {"num_fragments": 0, "num_weight_updates": 0, "idle_fragments": 0,
                       "client_errors": 0, "steps_dropped": 0, "chunks_received": 0,
                       "num_weight_pushes": 0, "num_weight_pulls": 0}

    def _episodes_of(self, policy: Any, memory_specs: dict[str, Any]) -> Episodes:
        return Episodes(self.fragment_length, self.limits.max_open_episodes,
                        self.limits.max_open_episodes_per_client, self.limits.max_episode_steps,
                        max_step_reward=self.limits.max_abs_reward,
                        **memory_options(policy.get_initial_state(), memory_specs))

    def route(self, episode_id: Any) -> tuple[Any, Episodes]:
        """The policy and the episodes an episode id belongs to."""
        if self.multi is None:
            return self.policy, self.episodes
        return self.multi.route(episode_id)

    async def on_start(self) -> None:
        cfg = self.config
        max_bytes = int(cfg.policy_server_max_message_mb * (1 << 20))
        # Clients send numpy arrays: a tensor-typed one is refused, never a reason to
        # import torch here (57 -> 240 MB for the server's life, from five messages).
        limits = codec.Limits(max_message_bytes=max_bytes,
                              max_header_bytes=min(max_bytes, MAX_HEADER_BYTES),
                              max_objects=MAX_HEADER_OBJECTS, tensors=False)
        if self.address.startswith(("http://", "https://")):  # a body is one msgpack frame
            self._http = await serve_http(PolicyService(self), cfg, self.address,
                                          dataclasses.replace(limits, max_header_bytes=max_bytes))
            self.address = self._http.address
            log.info("policy server %d listening on %s", self.worker_index, self.address)
            return
        self._server = ActorServer(PolicyService(self), f"policy_service-{self.worker_index}",
                                   limits=limits, max_connections=cfg.policy_server_max_connections,
                                   max_connections_per_client=cfg.policy_server_max_connections_per_client,
                                   tracebacks=False)
        configure = None
        keys = cfg.policy_server_curve_keys
        # In a cluster, bind() makes every tcp socket a CURVE server with the cluster's keys.
        if keys is None and self.address.startswith("tcp://") and cluster_keys() is None \
                and not cfg.policy_server_insecure_plaintext:
            keys = str(make_curve_keys(default_keys_dir()))
            log.info("policy server %d: clients need the CURVE keys in %s "
                     "(rlmesh.client.curve_client_options)", self.worker_index, keys)
        if keys is not None:
            self._auth, configure = _curve(self._server.ctx, keys)
        self.address = await self._server.start(
            self.address, configure, spin_wait=cfg.policy_server_spin_wait_us / 1e6,
            spin_after_calls_only=False)
        log.info("policy server %d listening on %s", self.worker_index, self.address)

    async def on_stop(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._http is not None:
            self._http.close()
        if self._auth is not None:
            self._auth.stop()

    # --- the driver's side ---

    async def sample(self, explore: bool | None = None,
                     weights_up_to: int | None = None) -> dict[str, Any]:
        """A fragment of at least ``rollout_fragment_length`` client steps, or of what came
        before ``policy_server_idle_timeout_s`` passed without any (maybe nothing: then
        ``idle`` is True). Episodes silent for ``policy_server_episode_timeout_s`` are closed.
        ``weights_up_to``: as ``EnvRunner.sample``."""
        await self._refresh_weights(weights_up_to)
        cfg = self.config
        while self._steps_ready() < self.fragment_length:
            self._new_data.clear()
            try:
                await asyncio.wait_for(self._new_data.wait(), cfg.policy_server_idle_timeout_s)
            except asyncio.TimeoutError:
                break
            self._expire()
        self._expire()
        if self.multi is not None:
            return self._stamp(self.multi.fragment())
        self.episodes.cut_open()
        chunks = self.episodes.take_chunks() + list(self.received)
        self.received.clear()
        self.received_steps = 0
        fragment = fragment_from_chunks(chunks, self.chunk_specs())
        fragment["policy_version"] = self.version
        fragment["policy_id"] = DEFAULT_POLICY_ID
        return self._stamp(fragment)

    def _stamp(self, fragment: dict[str, Any]) -> dict[str, Any]:
        fragment.setdefault("policy_version", self.version)
        fragment.setdefault("policy_id", DEFAULT_POLICY_ID)
        fragment["worker_index"] = self.worker_index
        fragment["idle"] = fragment["env_steps"] == 0
        fragment["client_rejections"] = self.rejections.snapshot()
        fragment["episodes"] = self.share.admit(fragment["episodes"])  # a fair mix of clients
        self._stats["num_fragments"] += 1
        self._stats["idle_fragments"] += int(fragment["idle"])
        return fragment

    def chunk_specs(self) -> dict[str, Any]:
        """The per-step columns of a client's chunk (``rl/columns.py``)."""
        return {Columns.OBS: space_layout(self.observation_space),
                Columns.ACTIONS: space_layout(self.action_space),
                **action_dist_columns(self.num_inputs),
                Columns.REWARDS: ColumnSpec((), np.dtype(np.float32)), **self.memory_specs}

    def _all_episodes(self) -> list[Episodes]:
        return [self.episodes] if self.multi is None else list(self.multi.episodes.values())

    def _expire(self) -> None:
        for episodes in self._all_episodes():
            episodes.expire(self.config.policy_server_episode_timeout_s)

    def _steps_ready(self) -> int:
        return self.received_steps + sum(
            e.steps_ready() + sum(len(o.steps) for o in e.open.values())
            for e in self._all_episodes())

    def get_spaces(self) -> dict[str, Any]:
        return {"observation_space": space_to_data(self.observation_space),
                "action_space": space_to_data(self.action_space)}

    def get_address(self) -> str:
        """The address clients connect to (a tcp port 0 resolved)."""
        return self.address

    def foreach_env(self, fn_path: str, *args: Any) -> list[Any]:
        return []  # the envs live in the clients' simulators

    def call_env_method(self, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        return []

    def metrics(self) -> dict[str, Any]:
        counters: dict[str, int] = {"episodes_unverified": self.reported.unverified}
        for episodes in self._all_episodes():
            for k, v in episodes.counters.items():
                counters[k] = counters.get(k, 0) + v
        return {**counters, **self._stats, "worker_index": self.worker_index,
                "policy_version": self.version, "open_episodes": sum(len(e.open) for e in self._all_episodes()),
                "address": self.address, "client_rejections": self.rejections.snapshot(),
                **self.share.counts(),
                **(self._server.spin_counts() if self._server is not None else {}),
                **({"connections": self._server.guard.counts()}
                   if self._server is not None and self._server.guard is not None else {}),
                **(self._http.counts() if self._http is not None else {})}

    def pid(self) -> int:
        return os.getpid()

    # --- what PolicyService does for clients ---

    def _received_chunks(self, chunks: list[dict[str, Any]]) -> None:
        limit = MAX_BUFFERED_FRAGMENTS * self.fragment_length
        for chunk in chunks:
            self.received.append(chunk)
            self.received_steps += len(chunk["rewards"])
        while self.received_steps > limit and len(self.received) > 1:
            dropped = self.received.popleft()
            self.received_steps -= len(dropped["rewards"])
            self._stats["steps_dropped"] += len(dropped["rewards"])
        self._stats["chunks_received"] += len(chunks)
        self._new_data.set()


def _curve(ctx: Any, keys_dir: str) -> tuple[Any, Any]:
    """A ZAP authenticator admitting the clients whose public keys are in
    ``keys_dir/clients``, and the socket hook making a socket a CURVE server with the key
    pair in ``keys_dir/server.key_secret`` (the layout of ``make_curve_keys``)."""
    import zmq.auth
    import zmq.utils.z85
    from zmq.auth.thread import ThreadAuthenticator

    server_file = os.path.join(keys_dir, "server.key_secret")
    clients_dir = os.path.join(keys_dir, "clients")
    if not os.path.isfile(server_file) or not os.path.isdir(clients_dir):
        raise ValueError(f"policy_server_curve_keys {keys_dir!r} lacks server.key_secret or "
                         f"clients/ (make them with rlmesh.client.make_curve_keys)")
    public, secret = zmq.auth.load_certificate(server_file)
    names = {zmq.utils.z85.decode(k): name for k, name in client_names(clients_dir).items()}
    auth = ThreadAuthenticator(ctx)
    # A client's user id (``caller_id``, the rejection counts) is its key file's name.
    auth.curve_user_id = lambda key: names.get(key) or zmq.utils.z85.encode(key).decode()
    auth.start()
    auth.configure_curve(domain="*", location=clients_dir)

    def configure(sock: Any) -> None:
        sock.curve_server = True
        sock.curve_publickey, sock.curve_secretkey = public, secret

    return auth, configure
