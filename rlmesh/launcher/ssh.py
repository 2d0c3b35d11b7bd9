"""How the head reaches a node: the ssh command line (host keys pinned per cluster, connections
multiplexed), remote commands with failures sorted into errors a user can act on, a lifeline
session for the node agent, and copying bytes and folders over."""

from __future__ import annotations

import hashlib
import math
import os
import queue
import shlex
import stat
import subprocess
import tarfile
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any, Sequence

from rlmesh.launcher.cluster_config import SSHTarget, SyncEntry
from rlmesh.runtime.process import die_with  # SIGKILL when the head dies; stdin closing elsewhere

__all__ = ["AuthFailed", "HostKeyChanged", "SSH", "SSHError", "Unreachable", "quote_command"]

SSH_FAILED = 255  # ssh's own exit status; a remote command's is passed through
CONTROL_PERSIST_S = 60  # an idle master lingers this long (or until close())
# sun_path holds 108 bytes with its NUL; ssh binds "<ControlPath>.<16 random chars>" first and
# renames it, and %C is 40 hex digits: a control dir may take 107 - 17 - 41 bytes.
MAX_CONTROL_DIR_BYTES = 107 - 17 - 41
STDERR_TAIL_CHARS = 2000
MESSAGE_COMMAND_CHARS = 200
SYNC_MIN_TIMEOUT_S = 60.0
SYNC_BYTES_PER_S = 1e6  # a sync's timeout assumes at least this rate

_HOST_KEY_CHANGED = ("REMOTE HOST IDENTIFICATION HAS CHANGED", "Host key verification failed")
_AUTH_FAILED = ("Permission denied",)
_UNREACHABLE = ("Connection refused", "timed out", "No route to host", "Network is unreachable",
                "Could not resolve")

# Run by `sh -c` whatever the user's login shell is; $1 is the path as given. A leading "~/" is
# the user's home (a relative path already is: commands start there).
_EXPAND_PATH = 'p=$1; case $p in "~") p=$HOME ;; "~/"*) p=$HOME/${p#"~/"} ;; -*) p=./$p ;; esac; '
# umask 077: new parent dirs are 0700 and the temp file is private before chmod; the rename
# is atomic, so a reader sees the old file or the new one, never half of it.
_PUT_SCRIPT = _EXPAND_PATH + (
    'set -e; umask 077; mkdir -p -- "$(dirname -- "$p")"; t=$(mktemp "$p.tmp.XXXXXXXX"); '
    'trap \'rm -f -- "$t"\' EXIT; cat >"$t"; chmod "$2" "$t"; mv -f -- "$t" "$p"; trap - EXIT')
# -o: files belong to the ssh user, not to the head's uid/gid recorded in the archive.
_SYNC_SCRIPT = _EXPAND_PATH + 'set -e; mkdir -p -- "$p"; exec tar -x -o -C "$p" -f -'


class SSHError(RuntimeError):
    """ssh, or the command it ran on a node, failed; the message says what happened and what
    to do about it."""

    def __init__(self, message: str, *, node: str, command: str, returncode: int | None = None,
                 stderr: str = "") -> None:
        super().__init__(message)
        self.node, self.command, self.returncode, self.stderr = node, command, returncode, stderr


class HostKeyChanged(SSHError):
    """The node's host key differs from the one in the cluster's known_hosts."""


class Unreachable(SSHError):
    """No connection to the node's sshd: refused, timed out, no route, unknown name."""


class AuthFailed(SSHError):
    """The node's sshd refused the login."""


def quote_command(command: str | Sequence[str]) -> str:
    """The remote shell's command line: a str as it is, an argv shell-quoted word by word."""
    return command if isinstance(command, str) else shlex.join(command)


class SSH:
    """One node's ssh: commands through a shared master connection (under ``control_dir``),
    agent sessions on connections of their own."""

    def __init__(self, target: SSHTarget, control_dir: Path) -> None:
        if target.host.startswith("-"):  # ssh would read it as an option
            raise ValueError(f"node {target.node}: host {target.host!r} starts with '-'")
        if target.identity_file is not None and "%" in str(target.identity_file):
            raise ValueError(f"node {target.node}: ssh reads '%' in the identity file "
                             f"{target.identity_file} as a token; rename or link it")
        self.target = target
        self.control_dir = _socket_dir(Path(control_dir).absolute())  # where the sockets are
        target.known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)

    def __enter__(self) -> SSH:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- command lines -----------------------------------------------------------------------

    def argv(self, command: str | Sequence[str]) -> list[str]:
        """The ssh argv that runs ``command`` on the node over the shared master connection."""
        return self._argv(command, multiplex=True)

    def _options(self, *, multiplex: bool) -> list[str]:
        t = self.target
        # ssh's ConnectTimeout takes whole seconds.
        timeout = max(1, math.ceil(t.connect_timeout_s))
        if multiplex:
            control = ["-o", "ControlMaster=auto",
                       "-o", f"ControlPath={_config_path(self.control_dir)}/%C",
                       "-o", f"ControlPersist={CONTROL_PERSIST_S}"]
        else:
            control = ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
        options = [
            "ssh", "-T",
            "-o", "BatchMode=yes",  # never prompt: nobody is there to answer
            "-o", "StrictHostKeyChecking=accept-new",
            "-o", f"UserKnownHostsFile={_config_path(t.known_hosts)}",
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", f"ConnectTimeout={timeout}",
            "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
            *control,
            "-o", "LogLevel=ERROR",
            "-p", str(t.port),
        ]  # fmt: skip
        if t.identity_file is not None:
            options += ["-i", str(t.identity_file), "-o", "IdentitiesOnly=yes"]
        if t.user is not None:
            options += ["-l", t.user]
        return options

    def _argv(self, command: str | Sequence[str], *, multiplex: bool) -> list[str]:
        remote = quote_command(command)
        if not remote.strip():  # ssh would start a login shell instead
            raise ValueError(f"node {self.target.node}: empty remote command")
        return [*self._options(multiplex=multiplex), self.target.host, remote]

    def _control(self, operation: str) -> list[str]:
        """``ssh -O operation`` on this node's master connection."""
        return [*self._options(multiplex=True), "-O", operation, self.target.host]

    # --- commands ----------------------------------------------------------------------------

    def run(self, command: str | Sequence[str], *, timeout: float = 60.0,
            input: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        """Run ``command`` on the node and wait for it. Connection failures raise
        HostKeyChanged, AuthFailed or Unreachable whatever ``check`` says; a command's non-zero
        exit raises SSHError only with ``check``. Past ``timeout`` s ssh is killed and SSHError
        raised."""
        return self._run(command, timeout=timeout, input=input, check=check)

    def _run(self, command: str | Sequence[str], *, timeout: float, input: bytes | None = None,
             stdin: IO[bytes] | None = None, check: bool = True,
             label: str | None = None) -> subprocess.CompletedProcess[bytes]:
        """run(), with a file as stdin and a ``label`` naming the command in errors (where the
        command itself is a long script)."""
        argv = self.argv(command)
        label = label or f"`{_short(argv[-1])}`"
        # Without input, ssh must not read the head's own stdin (it would eat a terminal's keys).
        source: Any = subprocess.PIPE if input is not None else stdin or subprocess.DEVNULL
        proc = subprocess.Popen(argv, stdin=source, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            err = _leftover_stderr(proc)
            raise SSHError(
                f"node {self.target.node}: {label} took longer than {timeout:g} s; "
                "its ssh was killed (the remote command may still run). Give it a longer "
                "timeout if it needs one, or look at what the node is doing.",
                node=self.target.node, command=argv[-1], returncode=None,
                stderr=_tail(err)) from None
        except BaseException:
            proc.kill()
            _leftover_stderr(proc)
            raise
        done = subprocess.CompletedProcess(argv, proc.returncode, out, err)
        self._raise_for(done, check, label)
        return done

    def _raise_for(self, done: subprocess.CompletedProcess[bytes], check: bool,
                   label: str) -> None:
        """The error of a finished ssh, if it is one."""
        if done.returncode == 0:
            return
        t, stderr = self.target, _tail(done.stderr)

        def error(kind: type[SSHError], message: str) -> SSHError:
            return kind(message, node=t.node, command=done.args[-1], returncode=done.returncode,
                        stderr=stderr)

        where = f"{t.user + '@' if t.user else ''}{t.host}:{t.port}"
        if done.returncode == SSH_FAILED:
            if _has(stderr, _HOST_KEY_CHANGED):
                # known_hosts names a host on a port other than 22 as "[host]:port".
                entry = t.host if t.port == 22 else f"[{t.host}]:{t.port}"
                fix = f"ssh-keygen -R {shlex.quote(entry)} -f {shlex.quote(str(t.known_hosts))}"
                raise error(HostKeyChanged,
                    f"node {t.node} ({where}): its SSH host key differs from the one recorded "
                    f"in {t.known_hosts}; refusing to connect. Another machine may be answering "
                    f"at that address. If the change is expected (the node was reinstalled or "
                    f"its key regenerated), remove the old key with `{fix}` and retry; the new "
                    f"key is recorded on the next contact.")
            if _has(stderr, _AUTH_FAILED):
                key = f"key {t.identity_file}" if t.identity_file else "ssh's default keys"
                raise error(AuthFailed,
                    f"node {t.node} ({where}) refused the login with {key}: "
                    f"{_line_with(stderr, _AUTH_FAILED)}. Check user and identity_file in the "
                    f"cluster file, and that the public key is in the user's "
                    f"~/.ssh/authorized_keys on the node.")
            if _has(stderr, _UNREACHABLE):
                raise error(Unreachable,
                    f"cannot reach node {t.node} at {where}: {_line_with(stderr, _UNREACHABLE)}. "
                    f"Check that the node is up, that its host and port in the cluster file are "
                    f"right and that sshd runs there (connect timeout "
                    f"{t.connect_timeout_s:g} s).")
        if not check:
            return
        if done.returncode == SSH_FAILED:
            what = "ssh failed (exit status 255: a connection error, or the command's own 255)"
        else:
            what = f"{label} exited with status {done.returncode}"
        said = f"; its stderr ends with:\n{stderr}" if stderr else " and wrote no stderr"
        raise error(SSHError, f"node {t.node} ({where}): {what}{said}")

    def start(self, command: str | Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[bytes]:
        """Start a long-running ``command`` (the node agent) on a connection of its own. Its
        stdin is a pipe the caller keeps open: closing it, or the head dying, ends the ssh
        client, and the remote command reads EOF. ``popen_kwargs`` go to Popen (stdout, ...)."""
        for owned in ("preexec_fn", "start_new_session", "args"):
            if owned in popen_kwargs:
                raise TypeError(f"start() sets {owned} itself")
        # A multiplexed session would live in the master, not in this ssh client: killing the
        # client would leave the remote command running. So: no master here.
        argv = self._argv(command, multiplex=False)
        kwargs: dict[str, Any] = {"stdin": subprocess.PIPE, **popen_kwargs}
        # Its own session: a Ctrl-C at the head's terminal must not kill it before the
        # launcher's teardown has stopped the agent.
        kwargs.update(start_new_session=True, preexec_fn=die_with(os.getpid()))
        return _SPAWNER.popen(argv, kwargs)

    # --- files -------------------------------------------------------------------------------

    def put_bytes(self, data: bytes, remote_path: str, mode: int = 0o600) -> None:
        """Write ``data`` to ``remote_path`` on the node atomically, with ``mode``; missing
        parent folders are made 0700. One ssh call."""
        self._run(["sh", "-c", _PUT_SCRIPT, "sh", remote_path, format(mode, "o")],
                  input=data, timeout=SYNC_MIN_TIMEOUT_S + len(data) / SYNC_BYTES_PER_S,
                  label=f"writing {remote_path}")

    def sync(self, entry: SyncEntry) -> None:
        """Copy ``entry``'s files (its excludes left out, symlinks as links, modes kept) into
        ``entry.dst`` on the node, made if missing. Files already there and not in ``entry``
        stay."""
        # Spooled to a file: ssh reads it as stdin with no writer thread to feed it.
        with tempfile.TemporaryFile() as spool:
            with tarfile.open(fileobj=spool, mode="w") as archive:
                for rel, path in entry.files():
                    archive.add(path, arcname=rel, recursive=False, filter=_anonymous)
            size = spool.tell()
            spool.seek(0)
            self._run(["sh", "-c", _SYNC_SCRIPT, "sh", entry.dst], stdin=spool,
                      timeout=SYNC_MIN_TIMEOUT_S + size / SYNC_BYTES_PER_S,
                      label=f"copying {entry.src} to {entry.dst}")

    def close(self) -> None:
        """End the master connection, if any; errors are ignored (there may be none)."""
        try:
            subprocess.run(self._control("exit"), stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            pass


# --- helpers -----------------------------------------------------------------------------------

def _socket_dir(control_dir: Path) -> Path:
    """``control_dir`` (made 0700: others must not reach our masters through their sockets),
    or where its sockets' paths would be too long, a private short folder standing for it."""
    if len(os.fsencode(control_dir)) <= MAX_CONTROL_DIR_BYTES:
        control_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(control_dir, 0o700)
        return control_dir
    # /tmp, not $TMPDIR: that can be long itself (macOS). Shared by all users, so the folder
    # must be ours and private, not one someone else made for us.
    base = Path("/tmp") / f"rlmesh-ssh-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    info = os.lstat(base)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise RuntimeError(f"{base}, the folder of ssh's control sockets, is not a private "
                           "folder of yours (mode 0700); remove it and retry")
    short = base / hashlib.sha256(os.fsencode(control_dir)).hexdigest()[:16]
    short.mkdir(mode=0o700, exist_ok=True)
    return short


def _config_path(path: Path) -> str:
    """``path`` as an ssh -o value: '%' starts a token there, and blanks split a value."""
    text = str(path).replace("%", "%%")
    if any(c.isspace() or c in "\"'\\" for c in text):
        text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def _leftover_stderr(proc: subprocess.Popen[bytes]) -> bytes:
    """What a killed ssh left on stderr. A multiplexed client hands its stdout and stderr to the
    master, which keeps them until the remote command ends: so wait a moment, not for the
    pipes to close."""
    try:
        _, err = proc.communicate(timeout=1)
    except subprocess.TimeoutExpired:
        err = b""
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()
    return err or b""


def _anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _tail(stderr: bytes | None) -> str:
    text = (stderr or b"").decode("utf-8", "replace").strip()
    return text if len(text) <= STDERR_TAIL_CHARS else "..." + text[-STDERR_TAIL_CHARS:]


def _short(command: str) -> str:
    return command if len(command) <= MESSAGE_COMMAND_CHARS else \
        command[:MESSAGE_COMMAND_CHARS] + "..."


def _has(stderr: str, needles: Sequence[str]) -> bool:
    return any(n in stderr for n in needles)


def _line_with(stderr: str, needles: Sequence[str]) -> str:
    for line in stderr.splitlines():
        if _has(line, needles):
            return line.strip().removeprefix("ssh: ").rstrip(".")
    return stderr


# --- the lifeline ------------------------------------------------------------------------------


class _Spawner:
    """Forks start()'s ssh clients from one thread that lives as long as the process: Linux
    sends the death signal when the *thread* that forked a child ends, so a client started from
    a pool's worker thread would otherwise die with that thread."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future[Any], list[str], dict[str, Any]]] = \
            queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def popen(self, argv: list[str], kwargs: dict[str, Any]) -> subprocess.Popen[bytes]:
        with self._lock:
            # None yet, or this is a fork()ed child, where the parent's thread does not run.
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="rlmesh-ssh-spawner",
                                                daemon=True)
                self._thread.start()
        future: Future[subprocess.Popen[bytes]] = Future()
        self._jobs.put((future, argv, kwargs))
        return future.result()

    def _serve(self) -> None:
        while True:
            future, argv, kwargs = self._jobs.get()
            try:
                future.set_result(subprocess.Popen(argv, **kwargs))
            except BaseException as e:  # handed to the caller
                future.set_exception(e)


_SPAWNER = _Spawner()
