"""Data-parallel learners: gradient and statistics averaging over torch.distributed, on this
machine or across a launched cluster's nodes (a learner's device, and moving a batch onto
it: policy/device.py; whether the learners' GPUs exist: config/learner_gpus.py).

The rendezvous: rank 0 binds a socket on its node's address (``listen_socket``: loopback on
one machine, the node's cluster address under ``rlmesh launch``) and the driver hands that
address to every rank. torch.distributed's store and gloo/NCCL traffic are neither
authenticated nor encrypted, so an address outside loopback and the private ranges is
refused unless ``learner_rendezvous_private_only`` is turned off (docs/security.md).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import zlib
from contextlib import contextmanager
from datetime import timedelta
from types import TracebackType
from typing import Callable, Iterable, Iterator
from urllib.parse import urlsplit

import psutil
import torch
import torch.distributed as dist


class DataParallelError(RuntimeError):
    """A collective failed: a peer learner died, hung past the timeout, or disagreed."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (another process may take it
    before rank 0 binds it; callers retry on a bind error)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backend_for(device: torch.device, devices_shared: bool = False) -> str:
    """NCCL for CUDA devices, gloo otherwise.

    NCCL (2.5 on) refuses two ranks on one GPU ("Duplicate GPU detected"), so learners
    that share a device (fractional ``num_gpus_per_learner``) pass ``devices_shared=True``
    and get gloo, which reduces CUDA tensors through host memory.
    """
    return "nccl" if device.type == "cuda" and not devices_shared else "gloo"


def rendezvous_address(init_address: str, private_only: bool = True) -> tuple[str, int]:
    """``tcp://HOST:PORT`` -> (host, port). HOST must be an IP address: loopback, or on a
    cluster a node's address in a private range (10/8, 172.16/12, 192.168/16, fc00::/7,
    link-local). A public one is refused unless ``private_only`` is False, since the
    learners' traffic is neither authenticated nor encrypted."""
    url = urlsplit(init_address if "://" in init_address else f"tcp://{init_address}")
    host = "127.0.0.1" if url.hostname == "localhost" else url.hostname or ""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if url.scheme != "tcp" or ip is None or ip.is_unspecified or url.port is None:
        raise ValueError(f"init_address {init_address!r}: data-parallel learners rendezvous at "
                         "tcp://IP:PORT (rank 0's address, e.g. tcp://127.0.0.1:29500)")
    if private_only and not (ip.is_loopback or ip.is_private or ip.is_link_local):
        raise ValueError(f"init_address {init_address!r} is not a loopback or private address, "
                         "and the learners' torch.distributed traffic is not encrypted; put the "
                         "learners' nodes on a private network, or set "
                         "learner_rendezvous_private_only=False to send it anyway")
    return host, url.port


def listen_socket(host: str) -> socket.socket:
    """Rank 0's rendezvous socket, bound on ``host`` (its node's address) at a port the OS
    picks, listening: ``DataParallel(..., listen=sock)`` hands it to torch's store, so no
    port is chosen on one machine and bound on another."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        sock.listen(64)
    except OSError:
        sock.close()
        raise
    return sock


def socket_address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


class DataParallel:
    """One learner's membership of a group of ``world_size`` learners on this machine.

    Every rank must call the same collectives in the same order with tensors of the same
    shapes (the same model, the same stat keys). One instance per process at a time: it
    owns torch's default process group and destroys it on ``close()``. For NCCL, pass the
    learner's ``device`` so the rank binds to its own GPU before the group forms.
    """

    def __init__(self, rank: int, world_size: int, init_address: str, backend: str = "gloo",
                 timeout_s: float = 60.0, device: torch.device | None = None,
                 listen: socket.socket | None = None, private_only: bool = True,
                 local_host: str = "127.0.0.1") -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
        if dist.is_initialized():
            raise RuntimeError("a torch.distributed process group already exists in this "
                               "process; close() the other DataParallel first")
        host, port = rendezvous_address(init_address, private_only)
        self._open = False
        self.rank, self.world_size, self.backend = rank, world_size, backend
        self.timeout_s = timeout_s
        if device is not None and device.type == "cuda":
            torch.cuda.set_device(device)
        timeout = timedelta(seconds=timeout_s)
        try:
            self._store: dist.TCPStore | None = _store(host, port, rank, world_size, timeout,
                                                       listen)
            with _interfaces(backend, local_host):
                dist.init_process_group(backend, store=self._store, rank=rank,
                                        world_size=world_size, timeout=timeout)
        except RuntimeError as e:  # DistNetworkError, DistStoreError: a rendezvous timeout
            self._store = None
            raise DataParallelError(
                f"rank {rank} of {world_size}: the learners did not all meet at {host}:{port} "
                f"within timeout_s={timeout_s:g}; a learner process failed to start or died "
                f"({str(e).splitlines()[0]})") from e
        self._open = True

    def __enter__(self) -> DataParallel:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Leave the group; safe to call twice, and after a failed collective."""
        if self._open:
            self._open = False
            if dist.is_initialized():
                dist.destroy_process_group()
            self._store = None  # rank 0's store stops listening when dropped

    def barrier(self) -> None:
        self._collective("barrier", dist.barrier)

    @torch.no_grad()
    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Rank 0's parameters and buffers, copied into every rank's ``module``."""
        tensors = [t.detach() for t in (*module.parameters(), *module.buffers())]
        for group in _buckets(tensors).values():
            members = [tensors[i] for i in group]
            flat = torch.cat([t.reshape(-1) for t in members])
            self._collective("broadcast of module state", lambda: dist.broadcast(flat, src=0))
            for t, chunk in zip(members, flat.split([t.numel() for t in members])):
                t.copy_(chunk.view_as(t))

    @torch.no_grad()
    def average_gradients(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Every ``.grad`` becomes the mean over ranks, in one all-reduce per dtype/device.

        A missing gradient counts as zeros, so ranks whose losses touch different
        parameters still call the same collective; a parameter no rank has a gradient
        for keeps ``grad=None``, so the optimizer skips it as it would on one learner.
        """
        tensors = list(params)
        for group in _buckets(tensors).values():
            members = [tensors[i] for i in group]
            grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in members]
            # Who had a gradient rides in the same bucket: one collective, not two.
            present = torch.tensor([p.grad is not None for p in members],
                                   dtype=members[0].dtype, device=members[0].device)
            flat = torch.cat([g.reshape(-1) for g in grads] + [present])
            self._collective("all_reduce of gradients", lambda: dist.all_reduce(flat))
            flat.div_(self.world_size)
            sizes = [p.numel() for p in members] + [len(members)]
            *chunks, anyone = flat.split(sizes)
            for p, chunk, seen in zip(members, chunks, anyone.tolist()):
                if seen == 0:
                    continue
                if p.grad is None:
                    p.grad = chunk.view_as(p).clone()
                else:
                    p.grad.copy_(chunk.view_as(p))

    def average_stats(self, stats: dict[str, float]) -> dict[str, float]:
        """The mean over ranks of each statistic; every rank must pass the same keys."""
        keys = sorted(stats)
        # A checksum h of the key names, sent as h and h*h: the sums equal n*h and n*h*h
        # only if every rank sent the same h, so mismatched keys raise instead of
        # averaging unrelated numbers.
        h = float(zlib.crc32("\0".join(keys).encode()) % (1 << 20))
        values = torch.tensor([float(stats[k]) for k in keys] + [h, h * h], dtype=torch.float64,
                              device="cpu")
        if self.backend == "nccl":
            values = values.to(torch.device("cuda", torch.cuda.current_device()))
        self._collective("all_reduce of stats", lambda: dist.all_reduce(values))
        *sums, h_sum, h2_sum = values.cpu().tolist()
        n = self.world_size
        if h_sum != n * h or h2_sum != n * h * h:
            raise DataParallelError(f"rank {self.rank}: average_stats got different keys on "
                                    f"different ranks (this rank: {keys})")
        return {k: s / n for k, s in zip(keys, sums)}

    def _collective(self, what: str, call: Callable[[], object]) -> None:
        if not self._open:
            raise DataParallelError(f"rank {self.rank}: {what} after close()")
        try:
            call()
        except RuntimeError as e:  # gloo and NCCL errors (DistBackendError) derive from it
            raise DataParallelError(
                f"rank {self.rank} of {self.world_size}: {what} failed; another learner "
                f"process died or did not answer within timeout_s={self.timeout_s:g} ({e})"
            ) from e


def _buckets(tensors: list[torch.Tensor]) -> dict[tuple[torch.device, torch.dtype], list[int]]:
    """Indices of ``tensors`` grouped by (device, dtype), in order of first appearance,
    which is the same on every rank given the same module."""
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for i, t in enumerate(tensors):
        if t.is_sparse:
            raise ValueError("DataParallel averages dense tensors only (got a sparse one)")
        groups.setdefault((t.device, t.dtype), []).append(i)
    return groups


def _store(host: str, port: int, rank: int, world_size: int, timeout: timedelta,
           listen: socket.socket | None) -> dist.TCPStore:
    """The rendezvous store. Given a port alone, torch's store server listens on every
    interface; rank 0 binds the socket itself to ``host`` (or takes ``listen``, bound
    already) and hands it over."""
    if rank != 0:
        return dist.TCPStore(host, port, world_size, False, timeout)
    sock = listen
    if sock is None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(max(world_size, 16))
        except OSError:
            sock.close()
            raise
    # The store owns the descriptor from here on and closes it, also when it fails (a
    # second close here could hit a descriptor reused by another thread).
    fd = sock.detach()
    return dist.TCPStore(host, port, world_size, True, timeout, master_listen_fd=fd)


@contextmanager
def _interfaces(backend: str, local_host: str) -> Iterator[None]:
    """Gloo and NCCL on the interface holding ``local_host`` (loopback on one machine, the
    node's cluster address under ``rlmesh launch``). Gloo otherwise listens on the address
    the hostname resolves to, often a public one, and NCCL's bootstrap on the first
    non-loopback interface."""
    name = _interface_of(local_host)
    if backend == "nccl":
        # NCCL reads it when its communicator forms, at the first collective, after
        # init_process_group has returned: set for the process, unless the user chose one.
        os.environ.setdefault("NCCL_SOCKET_IFNAME", name)
    saved = os.environ.get("GLOO_SOCKET_IFNAME")
    os.environ["GLOO_SOCKET_IFNAME"] = name  # read as the gloo group is created
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("GLOO_SOCKET_IFNAME", None)
        else:
            os.environ["GLOO_SOCKET_IFNAME"] = saved


def _interface_of(host: str) -> str:
    """The network interface that holds ``host`` (any loopback address: the loopback one)."""
    ip = ipaddress.ip_address(host)
    for name, addrs in psutil.net_if_addrs().items():
        for a in addrs:
            if a.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            mine = ipaddress.ip_address(a.address.split("%")[0])
            if mine == ip or (ip.is_loopback and mine.is_loopback and mine.version == 4):
                return name
    raise RuntimeError(f"no network interface of this machine holds {host}")
