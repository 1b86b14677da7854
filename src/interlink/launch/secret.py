"""The job secret: what every connection of a job proves it holds before it is used (the HMAC handshake of
:mod:`interlink.transport.wire`), and where it comes from when no launcher hands one over.

:func:`job_secret` decides, in this order:

1. ``INTERLINK_SECRET`` (set by ``interlink run``, by ``interlink run --nnodes`` users, or by hand): an
   even-length hex string is decoded, any other text is taken as UTF-8 bytes.
2. ``INTERLINK_SECRET_FILE=PATH``: a file only this user can read (mode 0600, owned by this user; made
   with 32 random bytes if it does not exist). For jobs across hosts that share a home directory.
3. The job's master (``MASTER_ADDR``) is an address of this host: ranks on one host prove they belong to
   the same user through the per-user secret file (``$XDG_CONFIG_HOME/interlink/secret``, by default
   ``~/.config/interlink/secret``; made on first use, mode 0600 in a 0700 directory). Another user's process
   cannot read it, so it cannot join, read the job's data or change a result.
4. ``INTERLINK_PUBLIC_SECRET=1``: the documented opt-out. A secret derived from public values (master
   address, port, world size): any process that reaches the master port and knows them can join.
5. Otherwise (this rank is on another host than the master, and none of the above): refused with
   :class:`~interlink.errors.AuthenticationError`, saying how to set a secret. A guessable secret is never
   used silently.

In 2 and 3 the file's secret is mixed (HMAC-SHA256) with the job's public identity: the master address and
port, the world size and the launcher's job id where it gives one (``TORCHELASTIC_RUN_ID`` of torchrun,
``SLURM_JOB_ID``/``SLURM_STEP_ID`` of Slurm, ``PMIX_NAMESPACE`` of Open MPI and PMIx launchers,
``I_MPI_HYDRA_UUID`` of Intel MPI), so two jobs
of one user never share a secret: a process started by hand beside a torchrun or Slurm job, even the same
user's, is refused. What a secret cannot tell apart is a process of the same user started with the very same
environment as a rank (``RANK=2 ... python job.py`` beside a job of plain environment variables): the store
then takes each rank once (:mod:`interlink.runtime.store`), and a second claimant of a rank fails the job
loudly on every rank.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
import socket
import stat
from typing import Mapping, Optional

from ..errors import AuthenticationError

__all__ = ["job_secret", "parse_secret", "secret_from_env", "user_secret", "user_secret_path", "master_is_local", "launcher_job_id"]

log = logging.getLogger("interlink")

_HEX = frozenset("0123456789abcdefABCDEF")
_LAUNCHER_IDS = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID", "PMIX_NAMESPACE", "I_MPI_HYDRA_UUID")

HOW = ("set the same random INTERLINK_SECRET on every rank (export INTERLINK_SECRET=$(python3 -c "
       "'import secrets; print(secrets.token_hex(32))') before the launcher, which passes the environment on; "
       "`interlink run --nnodes` reads it there), or INTERLINK_SECRET_FILE=<path> to a file only you can read "
       "on a file system every host shares, or INTERLINK_PUBLIC_SECRET=1 to accept a secret derived from public "
       "values (any process that reaches the master port can then join)")


def parse_secret(raw: str) -> bytes:
    """``INTERLINK_SECRET``'s text as bytes: even-length hex decoded, anything else as UTF-8."""
    if len(raw) % 2 == 0 and set(raw) <= _HEX:
        return bytes.fromhex(raw)
    return raw.encode("utf-8")


def secret_from_env(environ: Optional[Mapping[str, str]] = None) -> Optional[bytes]:
    """``INTERLINK_SECRET`` as bytes (:func:`parse_secret`), or ``None`` when it is not set: then
    :func:`job_secret` decides (a per-user secret on one host; across hosts a refusal that says what to set),
    never a secret derived from public values unless asked for."""
    raw = (os.environ if environ is None else environ).get("INTERLINK_SECRET")
    return parse_secret(raw) if raw else None


def launcher_job_id(env: Mapping[str, str]) -> str:
    """The launcher's own id of this job (empty where it gives none): identical on every rank of a job."""
    return "\0".join(f"{k}={env[k]}" for k in _LAUNCHER_IDS if env.get(k))


def master_is_local(master_addr: str) -> bool:
    """Whether ``master_addr`` is an address of this host (loopback, or one this host can bind): then rank 0
    runs here, and a job whose ranks all see this is a job of one host."""
    try:
        infos = socket.getaddrinfo(master_addr, None, type=socket.SOCK_DGRAM)
    except socket.gaierror:
        return False
    for family, _t, _p, _c, addr in infos:
        ip = addr[0].split("%")[0]
        try:
            if ipaddress.ip_address(ip).is_loopback:
                return True
        except ValueError:
            continue
        s = socket.socket(family, socket.SOCK_DGRAM)
        try:
            s.bind((ip, 0) if family == socket.AF_INET else (ip, 0, 0, addr[3] if len(addr) > 3 else 0))
            return True
        except OSError:
            continue
        finally:
            s.close()
    return False


def user_secret_path(env: Optional[Mapping[str, str]] = None) -> str:
    """``INTERLINK_SECRET_FILE``, else ``$XDG_CONFIG_HOME/interlink/secret`` (``~/.config/interlink/secret``)."""
    env = os.environ if env is None else env
    if env.get("INTERLINK_SECRET_FILE"):
        return os.path.expanduser(env["INTERLINK_SECRET_FILE"])
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "interlink", "secret")


def _check_private(path: str, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise AuthenticationError(f"the interlink secret file {path} is not a regular file")
    if st.st_uid != os.geteuid():
        raise AuthenticationError(f"the interlink secret file {path} belongs to uid {st.st_uid}, not to this user "
                                  f"(uid {os.geteuid()}): remove it, or point INTERLINK_SECRET_FILE at a file of yours")
    if st.st_mode & 0o077:
        raise AuthenticationError(f"the interlink secret file {path} can be read or written by other users (mode "
                                  f"{stat.S_IMODE(st.st_mode):o}): run `chmod 600 {path}`")


def _read(path: str) -> Optional[bytes]:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise AuthenticationError(f"the interlink secret file {path} is a symbolic link: refused") from None
        raise AuthenticationError(f"cannot read the interlink secret file {path}: {e}") from None
    try:
        _check_private(path, os.fstat(fd))
        data = b""
        while True:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    data = data.strip()
    if len(data) < 16:
        raise AuthenticationError(f"the interlink secret file {path} holds {len(data)} bytes: too short to be a "
                                  "secret (remove it: a new one is made on first use)")
    return data


def user_secret(env: Optional[Mapping[str, str]] = None) -> bytes:
    """This user's secret (the file of :func:`user_secret_path`), made with 32 random bytes (hex) on first use.
    Ranks that start at the same moment agree: the file appears whole (written aside, then hard-linked in place,
    which fails if another rank linked first; that rank's file is then read)."""
    path = user_secret_path(env)
    got = _read(path)
    if got is not None:
        return got
    d = os.path.dirname(path) or "."
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
    except OSError as e:
        raise AuthenticationError(f"cannot make the directory of the interlink secret file {path}: {e}; "
                                  f"set INTERLINK_SECRET or INTERLINK_SECRET_FILE") from None
    tmp = os.path.join(d, f".secret.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            os.write(fd, secrets.token_hex(32).encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another rank made it first: read that one
    except OSError as e:
        raise AuthenticationError(f"cannot write the interlink secret file {path}: {e}; set INTERLINK_SECRET or "
                                  f"INTERLINK_SECRET_FILE") from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    got = _read(path)
    if got is None:  # pragma: no cover - removed between link and read
        raise AuthenticationError(f"the interlink secret file {path} vanished while it was made")
    log.info("interlink: made this user's secret file %s (mode 0600)", path)
    return got


def _identity(master_addr: str, master_port: int, world_size: int, env: Mapping[str, str]) -> bytes:
    return f"interlink-job\0{master_addr}\0{master_port}\0{world_size}\0{launcher_job_id(env)}".encode()


def job_secret(master_addr: str, master_port: int, world_size: int,
               environ: Optional[Mapping[str, str]] = None, *, rank: Optional[int] = None) -> bytes:
    """The secret of this job for this rank (the module docstring's order); :class:`AuthenticationError` with
    what to set where none may be used."""
    env = os.environ if environ is None else environ
    raw = env.get("INTERLINK_SECRET")
    if raw:
        return parse_secret(raw)
    ident = _identity(str(master_addr), int(master_port), int(world_size), env)
    if env.get("INTERLINK_SECRET_FILE") or master_is_local(str(master_addr)):
        return hmac.new(user_secret(env), ident, hashlib.sha256).digest()
    if env.get("INTERLINK_PUBLIC_SECRET", "").strip().lower() in ("1", "true", "yes", "on"):
        log.warning("interlink: INTERLINK_PUBLIC_SECRET=1: this job's secret is derived from public values "
                    "(master address, port, world size): any process that reaches %s:%s can join it",
                    master_addr, master_port)
        return hashlib.sha256(b"interlink-public-secret\0" + ident).digest()
    who = f"rank {rank}" if rank is not None else "this rank"
    raise AuthenticationError(
        f"{who} on host {socket.gethostname()} joins a job whose master {master_addr}:{master_port} is on "
        f"another host, and no secret was given: without one any process that reaches that port could join the "
        f"job, read its data and change its results. To run across hosts, {HOW}.",
        op="init", group="world", seq=0, ranks=[rank] if rank is not None else None)
