"""CURVE keys for policy servers on tcp://: one server key pair and one per client.

Layout of the directory (zmq.auth certificate files; the folders 0700, every file 0600)::

    server.key, server.key_secret      the server's key pair (give server.key to clients)
    clients/<name>.key                 public keys of the clients the server admits
    client_secrets/<name>.key_secret   each client's key pair (give it to that client only)

A tcp:// policy server given no keys makes (or reuses) them in ``default_keys_dir()``, and
a ``PolicyClient`` given none takes its ``client`` pair from there: the same user on the same
machine connects with no setup, anyone else needs the files.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

ENV_KEYS_DIR = "RLMESH_POLICY_SERVER_KEYS"


def default_keys_dir() -> Path:
    """``$RLMESH_POLICY_SERVER_KEYS``, else ``~/.rlmesh/policy_server_keys``."""
    return Path(os.environ.get(ENV_KEYS_DIR) or Path.home() / ".rlmesh" / "policy_server_keys")


def make_curve_keys(directory: str | os.PathLike[str], clients: tuple[str, ...] = ("client",)) -> Path:
    """Create the keys in ``directory`` (made if missing); existing files are kept, and
    their modes set private (secret key files were 0644 before)."""
    import zmq.auth

    root = Path(directory)
    for folder in (root, root / "clients", root / "client_secrets"):
        # Private before any file is written in it: no window where a key is readable.
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
    if not (root / "server.key_secret").exists():
        zmq.auth.create_certificates(str(root), "server")
    for name in clients:
        if not (root / "client_secrets" / f"{name}.key_secret").exists():
            zmq.auth.create_certificates(str(root / "client_secrets"), name)
        shutil.copy(root / "client_secrets" / f"{name}.key", root / "clients" / f"{name}.key")
    for path in root.rglob("*.key*"):
        os.chmod(path, 0o600)
    return root


def curve_client_options(directory: str | os.PathLike[str], name: str = "client") -> dict[str, Any]:
    """``PolicyClient(address, **curve_client_options(keys_dir, "sim1"))``."""
    import zmq.auth

    root = Path(directory)
    try:
        server_public, _ = zmq.auth.load_certificate(str(root / "server.key"))
        public, secret = zmq.auth.load_certificate(
            str(root / "client_secrets" / f"{name}.key_secret"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the policy server's CURVE keys in {root} ({exc}); make "
                         f"them with rlmesh.client.make_curve_keys, or copy them from the "
                         f"server's machine") from None
    return {"curve_server_key": server_public, "curve_keypair": (public, secret)}


def client_names(clients_dir: str | os.PathLike[str]) -> dict[bytes, str]:
    """The admitted clients' public keys (z85) by the name of their key file."""
    import zmq.auth

    names = {}
    for path in sorted(Path(clients_dir).glob("*.key")):
        public, _ = zmq.auth.load_certificate(str(path))
        names[public] = path.stem
    return names
