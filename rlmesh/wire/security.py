"""CURVE on the cluster's tcp sockets: one key pair per cluster, made by ``rlmesh launch`` and
copied to every node (mode 0600). A process that has the keys (``$RLMESH_CURVE_DIR``) binds
every tcp socket as a CURVE server and connects as a CURVE client with that pair; a ZAP
handler admits only clients presenting the cluster's public key. ipc and inproc stay plain.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

import zmq

ENV_CURVE_DIR = "RLMESH_CURVE_DIR"
PUBLIC, SECRET = "cluster.key", "cluster.key_secret"  # zmq.auth certificate files


@dataclass(frozen=True)
class ClusterKeys:
    """The cluster's key pair (z85), and the folder that holds it."""

    directory: Path
    public: bytes
    secret: bytes

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> "ClusterKeys":
        import zmq.auth

        root = Path(directory)
        try:
            public, secret = zmq.auth.load_certificate(str(root / SECRET))
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"cannot read the cluster's CURVE keys in {root}: {exc}") from None
        if secret is None:
            raise RuntimeError(f"{root / SECRET} holds no secret key")
        return cls(root, public, secret)


def make_cluster_keys(directory: str | os.PathLike[str]) -> ClusterKeys:
    """A new key pair in ``directory`` (mode 0700; the secret file 0600), or the one there."""
    import zmq.auth

    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    if not (root / SECRET).exists():
        public_file, secret_file = zmq.auth.create_certificates(str(root), "cluster")
        os.chmod(secret_file, 0o600)
        os.chmod(public_file, 0o600)  # the public key is what lets a client in: kept private
    return ClusterKeys.load(root)


_keys: ClusterKeys | None = None
_keys_loaded = False
_authenticators: dict[int, object] = {}
_lock = threading.Lock()


def cluster_keys() -> ClusterKeys | None:
    """This process's cluster keys: from ``use_keys`` or ``$RLMESH_CURVE_DIR``, else None."""
    global _keys, _keys_loaded
    with _lock:
        if not _keys_loaded:
            directory = os.environ.get(ENV_CURVE_DIR)
            _keys = ClusterKeys.load(directory) if directory else None
            _keys_loaded = True
        return _keys


def use_keys(keys: ClusterKeys | None) -> None:
    """Secure (or, with None, stop securing) this process's tcp sockets from now on; child
    processes inherit it through ``$RLMESH_CURVE_DIR``."""
    global _keys, _keys_loaded
    with _lock:
        _keys, _keys_loaded = keys, True
    if keys is None:
        os.environ.pop(ENV_CURVE_DIR, None)
    else:
        os.environ[ENV_CURVE_DIR] = str(keys.directory)


def secure_server(sock: zmq.Socket, address: str) -> None:
    """Before ``bind``: a CURVE server, when the address is tcp and the process has keys."""
    keys = cluster_keys()
    if keys is None or not address.startswith("tcp://"):
        return
    _start_authenticator(sock.context, keys)
    sock.curve_secretkey = keys.secret
    sock.curve_publickey = keys.public
    sock.curve_server = True


def secure_client(sock: zmq.Socket, address: str) -> None:
    """Before ``connect``: a CURVE client of a cluster server, as above."""
    keys = cluster_keys()
    if keys is None or not address.startswith("tcp://"):
        return
    sock.curve_serverkey = keys.public
    sock.curve_publickey = keys.public
    sock.curve_secretkey = keys.secret


def _start_authenticator(ctx: zmq.Context, keys: ClusterKeys) -> None:
    """One ZAP handler per context, admitting only the cluster's public key."""
    from zmq.auth.thread import ThreadAuthenticator

    with _lock:
        if id(ctx) in _authenticators:
            return
        auth = ThreadAuthenticator(ctx)
        auth.start()
        allowed = keys.directory / "allowed"
        allowed.mkdir(mode=0o700, exist_ok=True)
        target = allowed / PUBLIC
        public = (keys.directory / PUBLIC).read_bytes()
        # The pair in the folder may be new (a head with another state folder copied its
        # own over the old one): the admitted key is always the folder's, never a stale copy.
        if not target.exists() or target.read_bytes() != public:
            tmp = allowed / f".{PUBLIC}.{os.getpid()}"
            tmp.write_bytes(public)
            os.replace(tmp, target)
        auth.configure_curve(domain="*", location=str(allowed))
        _authenticators[id(ctx)] = auth


def release(ctx: zmq.Context) -> None:
    """Stop the ZAP handler of ``ctx`` (before ``ctx.term()``, which would wait for it)."""
    with _lock:
        auth = _authenticators.pop(id(ctx), None)
    if auth is not None:
        auth.stop()  # type: ignore[attr-defined]
