"""The connection a store's handles share: a synchronous redis-py client, fork-safe.

Bounded timeouts, errors naming the server, the store and the operation, writes guarded by the store's epoch.

No thread, no event loop: every operation is one round trip. The hot ones (row reads and writes, leaf reads,
every write) are packed here (``pack``) and sent on a connection of the client's pool (``Connection.run``):
redis-py's pipeline machinery costs more than the server's work for a row. A process that forked gets a new
client on its first operation (``os.getpid()`` is checked), so DataLoader workers with ``fork`` work.

Writes go through one Lua script (``GUARD``, registered once, called by EVALSHA): it checks the store's
``__epoch__`` token, then runs the write's commands. A script runs atomically, and one that has written is not
stopped by ``maxmemory`` (the check happens before its first write), so a multi-leaf write lands whole or not
at all, and a write to a server that lost the store (restarted without persistence) creates nothing. Large
values of a write are staged (SET under a temporary key in the same round trip, renamed into place by the
script): a script copies its arguments, a rename does not.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import os
import secrets
import select
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .._base.coerce import as_device
from . import _format as fmt

CONNECT_TIMEOUT = 1.0  # a server that is down fails within ~1 s
SOCKET_TIMEOUT = 10.0  # a hung server (SIGSTOP) fails after this many seconds


class StoreConnectionError(redis.ConnectionError):
    """The server of a store cannot be reached (down, refusing, or not answering within the timeout).

    A subclass of ``redis.ConnectionError``: ``except redis.ConnectionError`` keeps catching it.
    """


class StoreTimeoutError(StoreConnectionError, redis.TimeoutError):
    """The server did not answer within ``socket_timeout`` (a hung or overloaded server)."""


class StoreLostError(RuntimeError):
    """The store's data is gone from the server (it restarted without persistence, or was flushed)."""


GUARD = """
local staged, checked = tonumber(ARGV[2]), tonumber(ARGV[3])
-- KEYS[2 .. staged + 1]: large values SET beforehand, renamed into place here; the next ``checked`` keys must
-- still hold what the writer read (sha1 in ARGV[4 ..], '' for none): an optimistic transaction
local function unstage(reply)
  for i = 2, staged + 1 do redis.call('DEL', KEYS[i]) end
  return reply
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return unstage(redis.error_reply('TBLOST store data lost')) end
for i = 2, staged + 1 do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    return unstage(redis.error_reply('TBSTAGE a staged value is missing (its SET failed): nothing written'))
  end
end
for i = 1, checked do
  local value = redis.call('GET', KEYS[staged + 1 + i])
  if (value and redis.sha1hex(value) or '') ~= ARGV[3 + i] then
    return unstage(redis.error_reply('TBCONFLICT written by another handle meanwhile'))
  end
end
local a, k = 4 + checked, staged + checked + 2
while a <= #ARGV do
  local name, nk, na = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local reply
  if name == 'SETRANGES' then  -- one key, (offset, bytes) pairs: the runs of a row write
    for j = 1, na, 2 do
      reply = redis.pcall('SETRANGE', KEYS[k], ARGV[a + 2 + j], ARGV[a + 3 + j])
      if type(reply) == 'table' and reply.err then break end
    end
  else
    local args = {}
    for j = 1, nk do args[j] = KEYS[k + j - 1] end
    for j = 1, na do args[nk + j] = ARGV[a + 2 + j] end
    reply = redis.pcall(name, unpack(args))
  end
  -- only a script's first write can be refused for maxmemory (then nothing was written)
  if type(reply) == 'table' and reply.err then return unstage(reply) end
  k, a = k + nk, a + 3 + na
end
return 1
"""

GETRANGES = """
local out = {}
for i = 1, #ARGV, 2 do
  local off = tonumber(ARGV[i])
  out[#out + 1] = redis.call('GETRANGE', KEYS[1], off, off + tonumber(ARGV[i + 1]) - 1)
end
return table.concat(out)
"""

SHA = {source: hashlib.sha1(source.encode()).hexdigest() for source in (GUARD, GETRANGES)}  # (Redis' script id)
Command = Sequence[Any]


def pack(commands: Sequence[Command]) -> list[Any]:
    """The RESP encoding of ``commands`` (each ``(name, *args)``), as chunks for ``sendall``.

    Arguments are str, int, float, bytes or a bytes-like buffer. Small parts are joined, large payloads (a
    tensor's memory) passed through uncopied. The encodings of strings (command names, keys: the same ones
    at every call) and of small ints are kept (``_ENCODED``).
    """
    chunks: list[Any] = []
    buf: list[Any] = []
    append = buf.append
    encoded = _ENCODED
    for args in commands:
        append(b"*%d\r\n" % len(args))
        for arg in args:
            kind = type(arg)
            if kind is bytes:
                size = len(arg)
                if size < fmt.BIG:
                    append(b"$%d\r\n%b\r\n" % (size, arg))
                    continue
            elif kind is str or kind is int:
                part = encoded.get(arg)
                if part is None:
                    part = _encode(arg)
                append(part)
                continue
            elif kind is float:
                append(_bulk(repr(arg).encode()))
                continue
            else:  # a buffer (a tensor's memory)
                size = memoryview(arg).nbytes
                if size < fmt.BIG:
                    append(_bulk(bytes(arg)))
                    continue
            append(b"$%d\r\n" % size)  # sent as its own chunk: no copy into the packet
            chunks.append(b"".join(buf))
            chunks.append(arg)
            buf = [b"\r\n"]
            append = buf.append
    chunks.append(b"".join(buf))
    return chunks


def _bulk(data: bytes) -> bytes:
    return b"$%d\r\n%b\r\n" % (len(data), data)


_ENCODED: dict[Any, bytes] = {}


def _encode(arg: str | int) -> bytes:
    """The RESP bulk string of a str or int, kept for the next call (bounded: ints only when small)."""
    if isinstance(arg, str):
        part = _bulk(arg.encode())
    else:
        part = _bulk(b"%d" % arg)
        if not -1 <= arg < 256:  # (offsets, sizes: rarely the same twice)
            return part
    if len(_ENCODED) > 10_000:
        _ENCODED.clear()
    _ENCODED[arg] = part
    return part


STAGE = 1 << 16  # SET values at least this long are staged (see ``Connection.write``)
STAGE_TTL_MS = 600_000
CONFLICT_RETRIES = 1000

# redis-py < 5.3 requires a command name here; later versions warn when given one
_POOL_ARGS = (
    () if inspect.signature(redis.ConnectionPool.get_connection).parameters["command_name"].default is None else ("_",)
)
_NO_RETRY = Retry(NoBackoff(), 0)  # one object: clients are cached by the repr of their options
_CLIENTS: dict[Any, Any] = {}  # (pid, settings) -> redis.Redis: handles of one process share a pool


def make_client(host: str, port: int, db: int, unix_socket_path: str | None, options: dict[str, Any]) -> Any:
    kwargs = {
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "socket_timeout": SOCKET_TIMEOUT,
        "retry": _NO_RETRY,
        **options,
    }
    if unix_socket_path is not None:
        kwargs["unix_socket_path"] = unix_socket_path
    else:
        kwargs.update(host=host, port=port)
    # (options compare by repr: the same settings, or the same objects, share a client and its connections)
    key = (os.getpid(), host, port, db, unix_socket_path, repr(sorted(kwargs.items(), key=lambda kv: kv[0])))
    client = _CLIENTS.get(key)
    if client is None:
        if len(_CLIENTS) > 64:
            _CLIENTS.clear()
            _HELD.__dict__.pop("connections", None)  # (this thread's connections go back to their pools)
        client = _CLIENTS[key] = redis.Redis(db=db, **kwargs)
    return client


# What a client given by the caller connects with, beyond the address: copies (pickles) need it too
_CARRIED = ("username", "password", "credential_provider", "protocol", "client_name")


def client_options(settings: dict[str, Any], connection_class: Any) -> dict[str, Any]:
    """The ``redis.Redis`` keyword arguments that reproduce a client's credentials and TLS settings.

    ``settings`` is its pool's ``connection_kwargs``; a TLS connection class (``rediss://`` URLs,
    ``ssl=True``) gives ``ssl=True`` and every ``ssl_*`` setting that ``redis.Redis`` accepts.

    Examples:
        >>> import redis
        >>> client = redis.Redis.from_url("rediss://bob:secret@localhost:6390/2?ssl_ca_certs=/etc/ca.pem")
        >>> pool = client.connection_pool
        >>> options = client_options(pool.connection_kwargs, pool.connection_class)
        >>> options["username"], options["ssl"], options["ssl_ca_certs"]
        ('bob', True, '/etc/ca.pem')
    """
    out = {name: settings[name] for name in _CARRIED if settings.get(name) is not None}
    if isinstance(connection_class, type) and issubclass(connection_class, redis.SSLConnection):
        accepted = _ssl_parameters()
        out["ssl"] = True
        out.update((name, value) for name, value in settings.items() if name in accepted)
    return out


def _ssl_parameters() -> frozenset[str]:
    return frozenset(name for name in inspect.signature(redis.Redis).parameters if name.startswith("ssl_"))


class Connection:
    """What the handles of one store share: the server address, the store's keys, its cached layout."""

    def __init__(
        self,
        *,
        backend: str,
        host: str,
        port: int,
        db: int,
        unix_socket_path: str | None,
        namespace: str,
        td_id: str,
        device: Any,
        cache_metadata: bool,
        options: dict[str, Any],
        client: Any = None,
    ) -> None:
        self.backend, self.host, self.port, self.db = backend, host, port, db
        self.unix_socket_path, self.namespace, self.td_id = unix_socket_path, namespace, td_id
        self.device, self.cache_metadata, self.options = device, cache_metadata, options
        self.user_client = client
        self.pid = -1
        self._client: Any = None
        self.closed = False
        self.epoch: bytes | None = None
        self.tree: Any = None  # the cached layout (``_tree.Tree``), None until read
        self.tensorclass: str | None = None
        self.allow_pickle = False  # unpickle non-tensor values read from the server (the caller's opt-in)
        self.local = threading.local()  # ``pending``/``checks``: the running ``atomic`` body's, per thread
        self.epoch_key = self.key("__epoch__")  # (checked by every read and write)
        if client is not None:  # copies (pickles) connect where the client connects, as the client does
            pool = getattr(client, "connection_pool", None)
            settings = getattr(pool, "connection_kwargs", {})
            self.host = settings.get("host", host)
            self.port = settings.get("port", port)
            self.db = settings.get("db", db)
            self.unix_socket_path = settings.get("path", unix_socket_path)
            self.options = {**client_options(settings, getattr(pool, "connection_class", None)), **options}

    def __reduce__(self) -> Any:
        """Pickled as what reconnects: the server, the store's identity, options and epoch.

        Never a client object: a copy connects where the client connected, with its settings.
        """
        args = {name: getattr(self, name) for name in _REOPEN}
        return _reopen, (args, self.epoch, self.allow_pickle)

    # ------------------------------------------------------------------ naming
    @property
    def address(self) -> str:
        return self.unix_socket_path or f"{self.host}:{self.port}"

    def where(self, path: str = "") -> str:
        """The server (``host:port/db``), the prefix, the store and, given, the key path: for error messages.

        Never the credentials.
        """
        key = f", key {tuple(path.split(fmt.SEP))!r}" if path else ""
        return f"TensorDictStore {self.td_id!r} at {self.address}/{self.db} (prefix {self.namespace!r}{key})"

    def key(self, suffix: str) -> str:
        return fmt.server_key(self.namespace, self.td_id, suffix)

    def data_key(self, path: str) -> str:
        return self.key(f"d:{path}")

    def meta_key(self, path: str) -> str:
        return self.key(f"m:{path}")

    # ------------------------------------------------------------------ client
    @property
    def client(self) -> Any:
        if self.closed:
            raise RuntimeError(f"TensorDictStore {self.td_id!r} at {self.address} is closed")
        if self.pid != os.getpid():  # first use, or a forked child: never share a parent's socket
            if self.user_client is not None:
                self.user_client.connection_pool.reset()
                self._client = self.user_client
            else:
                self._client = make_client(self.host, self.port, self.db, self.unix_socket_path, self.options)
            self.pid = os.getpid()
        return self._client

    @contextmanager
    def errors(self, operation: str) -> Iterator[None]:
        """Server errors become errors naming the server, the store and the operation."""
        try:
            yield
        except redis.RedisError as e:
            self.raise_named(e, operation)

    def raise_named(self, e: redis.RedisError, operation: str) -> None:
        """Raise the error naming the server, the store and the operation for the server error ``e``."""
        where = f"{self.where()}, during {operation}"
        if isinstance(e, redis.TimeoutError):
            raise StoreTimeoutError(f"{where}: the server did not answer ({e})") from e
        if isinstance(e, redis.ConnectionError):
            if isinstance(e, StoreConnectionError):
                raise e
            raise StoreConnectionError(f"{where}: cannot reach the server ({e})") from e
        if isinstance(e, redis.ResponseError):
            if "TBLOST" in str(e):
                raise self.lost(operation) from None
            raise type(e)(f"{where}: {e}") from e
        raise e

    def lost(self, operation: str) -> StoreLostError:
        return StoreLostError(
            f"TensorDictStore {self.td_id!r} (prefix {self.namespace!r}) at {self.address}: its "
            f"data is gone from the server (restarted without persistence, or flushed), "
            f"noticed during {operation}; nothing was read or written"
        )

    # ------------------------------------------------------------------ operations
    def run(self, operation: str, commands: Sequence[Command]) -> list[Any]:
        """Send ``commands`` in one round trip on a connection of the pool; their raw replies.

        A script the server does not know (restarted, ``SCRIPT FLUSH``) is loaded and the commands sent again.
        """
        client = self.client
        try:
            try:
                return _send(client, commands)
            except redis.exceptions.NoScriptError:
                for source in SHA:
                    client.script_load(source)
                return _send(client, commands)
        except redis.RedisError as e:  # (no context manager: this is the hot path)
            self.raise_named(e, operation)
            raise  # (raise_named always raises)

    def fetch(self, operation: str, commands: Sequence[Command]) -> list[Any]:
        """``run`` after the epoch check (the first reply): reads of a store whose data is gone raise."""
        out = self.run(operation, [("GET", self.epoch_key), *commands])
        if self.epoch is not None and out[0] != self.epoch:
            raise self.lost(operation)
        return out[1:]

    def read(self, operation: str, fill: Any) -> list[Any]:
        """One redis-py pipeline (for replies that want its parsing: hashes, sets).

        The epoch check, then the commands ``fill(pipe)`` queues; their results.
        """
        if self.closed:
            raise RuntimeError(f"TensorDictStore {self.td_id!r} at {self.address} is closed (during {operation})")
        client = self.client
        with self.errors(operation):
            pipe = client.pipeline(transaction=False)
            pipe.get(self.epoch_key)
            fill(pipe)
            out = pipe.execute()
        if self.epoch is not None and out[0] != self.epoch:
            raise self.lost(operation)
        return out[1:]  # type: ignore[no-any-return]

    def write(self, operation: str, commands: Sequence[tuple[str, Sequence[str], Sequence[Any]]]) -> None:
        """Run ``(command, keys, args)`` triples atomically on the server, if the store is still there.

        Inside :meth:`atomic` they are kept for its one script instead. A large value of a ``SET`` is staged:
        SET under a temporary key (expiring, in case this process dies) in the same round trip, then renamed
        into place by the script. A script copies its arguments twice; a rename copies nothing. A staged SET
        that fails (``maxmemory``) makes the script write nothing.
        """
        pending = getattr(self.local, "pending", None)
        if pending is not None:
            pending.extend(commands)
            return
        self._guarded(operation, commands, ())

    def check(self, key: str, value: bytes | None) -> None:
        """Inside :meth:`atomic`: its writes happen only if ``key`` still holds ``value`` (read by this body)."""
        assert getattr(self.local, "pending", None) is not None, "Connection.check outside Connection.atomic"
        self.local.checks.append((key, hashlib.sha1(value).hexdigest() if value is not None else ""))

    def atomic(self, operation: str, body: Callable[[], Any]) -> Any:
        """Run ``body`` with every write it makes kept, then sent as one guarded script: all land, or none.

        Reads inside ``body`` see the server before its writes. When a value checked with :meth:`check` was
        changed by another handle meanwhile, nothing is written and ``body`` runs again. Nested calls join the
        outer one.
        """
        local = self.local
        if getattr(local, "pending", None) is not None:
            return body()
        for _ in range(CONFLICT_RETRIES):
            local.pending, local.checks, local.pin = [], [], None  # (pin: the layout it read, see _dialect)
            try:
                out = body()
                commands, checks = local.pending, local.checks
            except BaseException:
                self.tree = None  # the body may have updated the cached layout for writes never sent
                raise
            finally:
                local.pending = None
            try:
                self._guarded(operation, commands, checks)
                return out
            except redis.ResponseError as e:  # (errors() already named the operation)
                self.tree = None
                if "TBCONFLICT" not in str(e):
                    raise
            except BaseException:
                self.tree = None
                raise
        raise RuntimeError(
            f"TensorDictStore {self.td_id!r} at {self.address}: {operation} kept conflicting with "
            f"other writers ({CONFLICT_RETRIES} attempts); nothing was written"
        )

    def _guarded(
        self,
        operation: str,
        commands: Sequence[tuple[str, Sequence[str], Sequence[Any]]],
        checks: Sequence[tuple[str, str]],
    ) -> None:
        if not commands:
            return
        staging: list[Any] = []
        keys: list[str] = [self.epoch_key]
        args: list[Any] = [self.epoch or b"", 0, len(checks)]
        for key, digest in checks:
            keys.append(key)
            args.append(digest)
        for name, cmd_keys, cmd_args in commands:
            if name == "SET" and len(cmd_args) == 1 and fmt.nbytes(cmd_args[0]) >= STAGE:
                stage = self.key(f"__stage__:{secrets.token_hex(8)}")
                staging.append(("SET", stage, cmd_args[0], "PX", STAGE_TTL_MS))
                keys.insert(len(staging), stage)
                keys += (stage, cmd_keys[0], cmd_keys[0])
                args += ("RENAME", 2, 0, "PERSIST", 1, 0)
                continue
            keys.extend(cmd_keys)
            args.extend((name, len(cmd_keys), len(cmd_args), *cmd_args))
        args[1] = len(staging)
        try:
            self.run(operation, [*staging, ("EVALSHA", SHA[GUARD], len(keys), *keys, *args)])
        except BaseException:
            if staging:  # the script did not run (refused under maxmemory...): drop what was staged now
                with contextlib.suppress(Exception):
                    self.client.delete(*(stage[1] for stage in staging))
            raise

    def new_epoch(self) -> bytes:
        return secrets.token_hex(8).encode()


def _connect(
    *,
    backend: str = "redis",
    host: str = "localhost",
    port: int = 6379,
    db: int = 0,
    unix_socket_path: str | None = None,
    prefix: str = "tensordict",
    device: Any = None,
    client: Any = None,
    td_id: str | None = None,
    cache_metadata: bool = True,
    allow_pickle: bool = False,
    **options: Any,
) -> Connection:
    """The Connection of a new handle, from the server arguments its constructor or ``from_store`` takes.

    The defaults are ``TensorDictStore``'s; ``td_id`` None names a new store (a fresh uuid); ``options`` are the
    client's (``socket_timeout``, ``password``, ...).
    """
    conn = Connection(
        backend=backend,
        host=host,
        port=port,
        db=db,
        unix_socket_path=unix_socket_path,
        namespace=prefix,
        td_id=td_id or str(uuid.uuid4()),
        device=as_device(device),
        cache_metadata=cache_metadata,
        options=options,
        client=client,
    )
    conn.allow_pickle = bool(allow_pickle)
    return conn


_REOPEN = (
    "backend",
    "host",
    "port",
    "db",
    "unix_socket_path",
    "namespace",
    "td_id",
    "device",
    "cache_metadata",
    "options",
)


def _reopen(args: dict[str, Any], epoch: bytes | None, allow_pickle: bool) -> Connection:
    conn = Connection(**args)
    conn.epoch, conn.allow_pickle = epoch, allow_pickle
    return conn


def _send(client: Any, commands: Sequence[Command]) -> list[Any]:
    pool = getattr(client, "connection_pool", None)
    if pool is None:  # a client without a pool (a cluster client): its pipeline
        pipe = client.pipeline(transaction=False)
        for args in commands:
            pipe.execute_command(*args)
        return pipe.execute()  # type: ignore[no-any-return]
    held = _HELD.__dict__.get("connections")
    if held is None:
        held = _HELD.connections = _Held()
    connection = held.get(pool)
    if connection is None or connection.pid != os.getpid():  # (a forked child never uses its parent's socket)
        connection = held[pool] = pool.get_connection(*_POOL_ARGS)
    else:
        sock = getattr(connection, "_sock", None)
        if sock is not None and select.select((sock,), (), (), 0)[0]:  # closed by the server (it restarted?)
            connection.disconnect()  # (sending reconnects), as the pool checks a connection it gives out
    try:
        connection.send_packed_command(pack(commands), check_health=False)
        return [connection.read_response() for _ in commands]
    except BaseException:
        del held[pool]
        connection.disconnect()  # replies may be left unread: never reuse this socket
        pool.release(connection)
        raise


class _Held(dict):  # type: ignore[type-arg]
    """A thread's connections (pool -> connection), given back to their pools when the thread ends."""

    def __del__(self) -> None:
        for pool, connection in self.items():
            with contextlib.suppress(Exception):  # (interpreter shutdown, a pool already gone)
                pool.release(connection)


# Each thread keeps one connection per pool, taken once: a pool's get_connection/release (locks, a readiness
# poll of the socket, metrics) cost as much as packing a row write. Threads never share a socket.
_HELD = threading.local()
