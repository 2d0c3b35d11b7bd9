"""CURVE keys for policy servers on tcp://: one server key pair and one per client.

Layout of the directory (zmq.auth certificate files)::

    server.key, server.key_secret      the server's key pair (give server.key to clients)
    clients/<name>.key                 public keys of the clients the server admits
    client_secrets/<name>.key_secret   each client's key pair (give it to that client only)
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any


def make_curve_keys(directory: str | os.PathLike[str], clients: tuple[str, ...] = ("client",)) -> Path:
    """Create the keys in ``directory`` (made if missing); existing files are kept."""
    import zmq.auth

    root = Path(directory)
    for sub in ("clients", "client_secrets"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    if not (root / "server.key_secret").exists():
        zmq.auth.create_certificates(str(root), "server")
    for name in clients:
        if not (root / "client_secrets" / f"{name}.key_secret").exists():
            zmq.auth.create_certificates(str(root / "client_secrets"), name)
        shutil.copy(root / "client_secrets" / f"{name}.key", root / "clients" / f"{name}.key")
    os.chmod(root / "server.key_secret", 0o600)
    return root


def curve_client_options(directory: str | os.PathLike[str], name: str = "client") -> dict[str, Any]:
    """``PolicyClient(address, **curve_client_options(keys_dir, "sim1"))``."""
    import zmq.auth

    root = Path(directory)
    server_public, _ = zmq.auth.load_certificate(str(root / "server.key"))
    public, secret = zmq.auth.load_certificate(str(root / "client_secrets" / f"{name}.key_secret"))
    return {"curve_server_key": server_public, "curve_keypair": (public, secret)}
