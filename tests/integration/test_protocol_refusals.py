"""A raw client (a zmq DEALER and the wire codec, no ActorHandle) against a real env runner
process started without test hooks: an undeclared call, a private method, a test hook and
bad arguments each get their typed error reply, and the runner then answers a declared call."""

from __future__ import annotations

from typing import Any

import uvloop
import zmq
import zmq.asyncio

from rlmesh.env.registry import env_registry
from rlmesh.runtime import Job
from rlmesh.runtime.import_path import startup_code
from rlmesh.wire import codec, messages as M

from rlmesh.roles.specs import RunnerSpec

RUNNER = "rlmesh.roles.env_runner:EnvRunner"


def _runner_config() -> dict:
    config = {"env": "CartPole-v1", "num_envs_per_env_runner": 1, "rollout_fragment_length": 5,
              "seed": 0, "model": {"fcnet_hiddens": [8]}, "_env_registry": env_registry()}
    config.update(startup_code(config))
    return config


async def _ask(sock: zmq.asyncio.Socket, msg: dict[str, Any]) -> dict[str, Any]:
    await sock.send_multipart(codec.encode(msg))
    return M.validate(codec.decode(await sock.recv_multipart()))


def _call(call_id: int, method: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    return M.make(M.CALL, id=call_id, m=method, a=list(args), k=kwargs)


def test_a_raw_client_is_refused_by_name_and_the_runner_serves_on():
    refusals = [  # (request, etype, words the reply's text must hold)
        (_call(1, "no_such_call"), "UnknownCall", ["'no_such_call'", "sample", "get_spaces"]),
        (_call(2, "_take_pushed"), "UnknownCall", ["'_take_pushed'"]),  # a private method
        (_call(3, "__init__", {}), "UnknownCall", ["'__init__'"]),
        (_call(4, "wrap_env", None, 0), "UnknownCall", ["'wrap_env'"]),  # public, undeclared
        (_call(5, "pid"), "UnknownCall", ["'pid'"]),  # a test hook, test hooks off
        (_call(6, "sample", explore="yes"), "BadRequest", ["'explore'", "bool | None", "str"]),
        (_call(7, "reset_streams"), "BadRequest", ["missing a required argument: 'reason'"]),
        (_call(8, "get_spaces", 1, 2), "BadRequest", ["too many positional arguments"]),
        (_call(9, "sample", nope=1), "BadRequest", ["unexpected keyword argument 'nope'"]),
    ]

    async def main() -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any], dict, dict]:
        async with Job("ipc") as job:
            runner = await job.spawn(RUNNER, spec=RunnerSpec.from_config_dict(
                _runner_config(), param_server=None).to_data(), name="env_runner-1",
                                     env={"RLMESH_TEST_HOOKS": "0"})
            ctx = zmq.asyncio.Context()
            sock = ctx.socket(zmq.DEALER)
            sock.linger = 0
            sock.connect(runner.address)
            try:
                hello = await _ask(sock, M.make(M.HELLO, id=100))
                replies = [await _ask(sock, request) for request, _, _ in refusals]
                # A stream item for a call, not a stream: refused on the stream's channel.
                await sock.send_multipart(codec.encode(
                    M.make(M.STREAM, ch=7, seq=0, m="sample", p=None)))
                stream_error = M.validate(codec.decode(await sock.recv_multipart()))
                credit = M.validate(codec.decode(await sock.recv_multipart()))
                served = await _ask(sock, _call(10, "get_spaces"))
                metrics = await _ask(sock, _call(11, "metrics"))
            finally:
                sock.close()
                ctx.term()
            return replies, hello, served, metrics, {"error": stream_error, "credit": credit}

    replies, hello, served, metrics, stream = uvloop.run(main())
    assert hello["t"] == M.HELLO_OK and "sample" in hello["calls"] and "pid" not in hello["calls"]
    for (request, etype, words), reply in zip(refusals, replies):
        assert reply["t"] == M.ERROR and reply["id"] == request["id"], reply
        assert reply["etype"] == etype, (request["m"], reply)
        for word in words:
            assert word in reply["msg"], (word, reply["msg"])
    assert stream["error"]["etype"] == "BadRequest" and stream["error"]["ch"] == 7
    assert "not as a stream" in stream["error"]["msg"]
    assert stream["credit"] == {**stream["credit"], "t": M.CREDIT, "ch": 7, "n": 1}
    # The process lived through all of it and serves declared calls.
    assert served["t"] == M.REPLY and served["id"] == 10
    assert set(served["r"]) == {"observation_space", "action_space"}
    assert metrics["t"] == M.REPLY and metrics["r"]["worker_index"] == 1
