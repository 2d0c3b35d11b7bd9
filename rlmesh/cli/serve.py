"""``rlmesh serve CHECKPOINT --address ADDR``: serve a trained policy to PolicyClients,
for inference only (what clients report is not recorded), until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", metavar="CHECKPOINT",
                   help="a checkpoint folder, or a trial folder (its newest checkpoint is used)")
    p.add_argument("--address", default="tcp://127.0.0.1:9900",
                   help="where clients connect (default tcp://127.0.0.1:9900); "
                        "http://127.0.0.1:9900 serves the HTTP API (JSON or msgpack bodies, "
                        "bearer tokens), https:// with --tls-cert and --tls-key")
    p.add_argument("--curve-keys", metavar="DIR",
                   help="CURVE keys made by rlmesh.client.make_curve_keys (a tcp address "
                        "without them uses ~/.rlmesh/policy_server_keys, made if missing)")
    p.add_argument("--http-tokens", metavar="DIR",
                   help="bearer tokens made by rlmesh.client.make_http_token (an http(s) "
                        "address without them uses ~/.rlmesh/policy_server_keys/tokens, a "
                        "'client' token made if missing)")
    p.add_argument("--tls-cert", metavar="PEM", help="the certificate of an https address")
    p.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    p.add_argument("--insecure-plaintext", action="store_true",
                   help="serve a tcp address without CURVE, or an http one without tokens: "
                        "anyone reaching it may connect")
    p.add_argument("--explore", action="store_true",
                   help="sample actions from the policy's distribution (default: its likeliest)")
    p.add_argument("--trust-code", action="store_true",
                   help="load a checkpoint that names code outside rlmesh (its env, policy, model or "
                        "callbacks, imported and run on loading); trust only checkpoints you made. "
                        "A file path (.py) in a checkpoint is never run")


async def serve(checkpoint: str, address: str, curve_keys: str | None, explore: bool,
                ready: "asyncio.Event | None" = None, insecure_plaintext: bool = False,
                trust_code: bool = False, http: dict[str, str | None] | None = None) -> None:
    """``http``: ``policy_server_http_tokens`` and ``policy_server_tls_*`` settings."""
    from rlmesh.driver import checkpoints
    from rlmesh.driver.checkpoint_kinds import check_kinds
    from rlmesh.cli.rollout import resolve_checkpoint
    from rlmesh.env.registry import env_registry
    from rlmesh.rl.columns import DEFAULT_POLICY_ID
    from rlmesh.runtime import Job

    path = resolve_checkpoint(checkpoint)
    meta, state = checkpoints.read(path, trust_code)
    check_kinds(path, meta, ("policies",))
    config = {**meta["config"], "policy_server_address": address, "explore": explore,
              "policy_server_curve_keys": curve_keys, "_env_registry": env_registry(),
              "policy_server_insecure_plaintext": insecure_plaintext, **(http or {})}
    if meta.get("policies"):  # format 2: the checkpoint's own policy class and spaces
        config["_policy_specs"] = {DEFAULT_POLICY_ID: meta["policies"][DEFAULT_POLICY_ID]}
    weights = {k: v.detach().cpu().numpy()
               for k, v in state["policies"][DEFAULT_POLICY_ID]["model"].items()}
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Job("ipc") as job:
        server = await job.spawn("rlmesh.roles.policy_server:PolicyServerRunner",
                                 config=config, worker_index=0, param_server=None,
                                 training=False, name="policy_server", in_process=True)
        await server.call("set_weights", 0, weights)
        await server.call("set_filter_state", (meta.get("filters") or {}).get(DEFAULT_POLICY_ID))
        print(f"serving {path} on {await server.call('get_address')} (Ctrl-C stops)", flush=True)
        if ready is not None:
            ready.set()
        await stop.wait()
    print("stopped", flush=True)


def main(args: argparse.Namespace) -> int:
    import uvloop

    try:
        uvloop.run(serve(args.checkpoint, args.address, args.curve_keys, args.explore,
                         insecure_plaintext=args.insecure_plaintext,
                         trust_code=args.trust_code,
                         http={"policy_server_http_tokens": args.http_tokens,
                               "policy_server_tls_certfile": args.tls_cert,
                               "policy_server_tls_keyfile": args.tls_key}))
    except (FileNotFoundError, ValueError) as exc:
        print(f"rlmesh serve: {exc}", file=sys.stderr)
        return 2
    return 0
