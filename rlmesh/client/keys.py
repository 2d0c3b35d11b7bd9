"""Credentials of policy servers: CURVE keys for tcp:// (one server key pair and one per
client) and bearer tokens for http:// and https:// (one per client).

Layout of the directory (zmq.auth certificate files; the folders 0700, every file 0600)::

    server.key, server.key_secret      the server's key pair (give server.key to clients)
    clients/<name>.key                 public keys of the clients the server admits
    client_secrets/<name>.key_secret   each client's key pair (give it to that client only)
    tokens/<name>.token                HTTP bearer tokens the server admits (each to its client)
    .lock                              held while a process makes files here (each placed whole)

A policy server given none makes (or reuses) them in ``default_keys_dir()``, and a
``PolicyClient`` given none takes its ``client`` pair or token from there: the same user on
the same machine connects with no setup, anyone else needs the files.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

ENV_KEYS_DIR = "RLMESH_POLICY_SERVER_KEYS"


def default_keys_dir() -> Path:
    """``$RLMESH_POLICY_SERVER_KEYS``, else ``~/.rlmesh/policy_server_keys``."""
    return Path(os.environ.get(ENV_KEYS_DIR) or Path.home() / ".rlmesh" / "policy_server_keys")


@contextmanager
def _creating(root: Path) -> Iterator[Path]:
    """``root`` made (0700) and held under an exclusive lock (``root/.lock``) while keys are
    made in it, with a private scratch folder inside it: two policy servers starting at
    once both made the files, and a client read a key one of them was still writing."""
    for folder in (root.parent, root):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        scratch = Path(tempfile.mkdtemp(prefix=".making-", dir=root))
        try:
            yield scratch
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    finally:
        os.close(fd)  # releases the lock


def _place(made: Path, path: Path) -> None:
    """``made`` moved to ``path`` at once (a rename in the same filesystem): a reader finds
    the whole file or none."""
    os.chmod(made, 0o600)
    os.replace(made, path)


def make_curve_keys(directory: str | os.PathLike[str], clients: tuple[str, ...] = ("client",)) -> Path:
    """Create the keys in ``directory`` (made if missing); existing files are kept, and
    their modes set private (secret key files were 0644 before). Safe to call from several
    processes at once: one makes each file, the others find it whole."""
    import zmq.auth

    root = Path(directory)
    with _creating(root) as scratch:
        for folder in (root / "clients", root / "client_secrets"):
            # Private before any file is written in it: no window where a key is readable.
            folder.mkdir(mode=0o700, exist_ok=True)
            os.chmod(folder, 0o700)
        for name in clients:
            if not (root / "client_secrets" / f"{name}.key_secret").exists():
                public, secret = zmq.auth.create_certificates(str(scratch), name)
                _place(Path(secret), root / "client_secrets" / f"{name}.key_secret")
                _place(Path(public), root / "client_secrets" / f"{name}.key")
            shutil.copy(root / "client_secrets" / f"{name}.key", scratch / "admitted")
            _place(scratch / "admitted", root / "clients" / f"{name}.key")
        # The server's pair last, its public key after its secret: a client that finds
        # server.key finds every file it needs.
        if not (root / "server.key_secret").exists():
            public, secret = zmq.auth.create_certificates(str(scratch), "server")
            _place(Path(secret), root / "server.key_secret")
            _place(Path(public), root / "server.key")
        # Under the lock, and not into another process's scratch folder (gone any moment)
        for folder in (root, root / "clients", root / "client_secrets"):
            for path in folder.glob("*.key*"):
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


def make_http_token(directory: str | os.PathLike[str], name: str = "client") -> str:
    """The bearer token of client ``name`` in ``directory/tokens/<name>.token``, made (32
    random bytes, url-safe) if missing; the folders 0700, the file 0600. Safe to call from
    several processes at once: one makes the token, the others read it whole."""
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
        raise ValueError(f"a token's name is a file name of letters, digits, '-', '_' and "
                         f"'.', got {name!r}")
    root = Path(directory)
    with _creating(root) as scratch:
        folder = root / "tokens"
        folder.mkdir(mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)
        path = folder / f"{name}.token"
        if not path.exists():
            # Created 0600 before the token is written: no window where it is readable.
            fd = os.open(scratch / "token", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(32) + "\n")
            _place(scratch / "token", path)
        os.chmod(path, 0o600)
    return read_http_token(directory, name)


def read_http_token(directory: str | os.PathLike[str], name: str = "client") -> str:
    """``PolicyClient("http://...", token=read_http_token(keys_dir, "sim1"))``."""
    path = Path(directory) / "tokens" / f"{name}.token"
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise ValueError(f"cannot read the policy server token {path} ({exc.strerror}); make "
                         f"it with rlmesh.client.make_http_token, or copy it from the server's "
                         f"machine") from None
    if not token:
        raise ValueError(f"the policy server token {path} is empty")
    return token


def token_names(directory: str | os.PathLike[str]) -> dict[bytes, str]:
    """The admitted tokens' SHA-256 digests by the name of their file: a server looks up
    the digest of what a request presents, never compares the secret itself."""
    names = {}
    for path in sorted((Path(directory) / "tokens").glob("*.token")):
        token = path.read_text().strip()
        if token:
            names[hashlib.sha256(token.encode()).digest()] = path.stem
    return names
