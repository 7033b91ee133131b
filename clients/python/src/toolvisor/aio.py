"""The asyncio client: :class:`AsyncClient`, its call handles and subscriptions.

The same protocol and routing as the sync client (``_core``), on asyncio streams: one
reader task per connection routes each message to the task that awaits it, so any
number of concurrent calls share one connection. Callbacks (``stream``,
``on_confirm``) may be plain functions or coroutine functions; they run in the task
that awaits the call. A slow decision belongs in a coroutine function, since a
blocking one stalls the event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from pathlib import Path
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Generator,
    Generic,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

from . import _core, discovery
from ._core import DEFAULT_CLIENT, OnConfirm, Progress, StreamArg
from .errors import ClientClosed, ConnectError, ConnectionLost, ProtocolError, RequestId, RequestTimeout, ServerError
from .types import ConfirmRequest, Event, Explanation, Output, Result, Status, Token, Welcome

T = TypeVar("T")


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class _Opening(Generic[T]):
    """An awaitable that is also an async context manager: ``x = await f()`` or
    ``async with f() as x`` (closing ``x`` on the way out)."""

    def __init__(self, open: Callable[[], Awaitable[T]], close: Callable[[T], Awaitable[None]]) -> None:
        self._open = open
        self._close = close
        self._value: Optional[T] = None

    def __await__(self) -> Generator[Any, None, T]:
        return self._open().__await__()

    async def __aenter__(self) -> T:
        self._value = await self._open()
        return self._value

    async def __aexit__(self, *exc: Any) -> None:
        if self._value is not None:
            await self._close(self._value)


class _Mailbox(_core.MailboxBase):
    """One waiter's messages (fed by the reader task of the same loop)."""

    def __init__(self) -> None:
        self._q: "asyncio.Queue[Tuple[bool, Any]]" = asyncio.Queue()

    def put(self, msg: Dict[str, Any]) -> None:
        self._q.put_nowait((True, msg))

    def fail(self, exc: BaseException) -> None:
        self._q.put_nowait((False, exc))

    async def get(self, deadline: _core.Deadline) -> Dict[str, Any]:
        """The next message; raise the connection's end, or RequestTimeout."""
        self._check_ended()
        if deadline is None:
            return self._unwrap(await self._q.get())
        try:
            item = await asyncio.wait_for(self._q.get(), max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            raise self._timed_out() from None
        return self._unwrap(item)


class _Conn:
    """One connected, welcomed stream and its reader task."""

    def __init__(
        self, path: Path, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, welcome: Welcome
    ) -> None:
        self.path = path
        self.router = _core.Router()
        self.welcome = welcome
        self._reader = reader
        self._writer = writer
        self._drain = asyncio.Lock()
        self._task = asyncio.ensure_future(self._read_loop())

    @classmethod
    async def open(cls, path: Path, client: str, interactive: bool, timeout: Optional[float]) -> "_Conn":
        """Connect and say hello; raise ConnectError when nobody answers."""
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(path), limit=1 << 20), timeout)
        except asyncio.TimeoutError:
            raise ConnectError("connecting to %s took longer than %ss" % (path, timeout), str(path)) from None
        except OSError as e:
            raise _core.connect_failure(path, e) from None
        try:
            _core.check_peer(writer.get_extra_info("socket"), path)
            writer.write(_core.encode_frame(_core.hello_message(client, interactive)))
            await writer.drain()
            msg = await asyncio.wait_for(_read_one(reader), timeout)
            welcome = Welcome.from_wire(_core.expect_answer(msg, "welcome"))
        except BaseException as e:
            writer.close()
            if isinstance(e, asyncio.TimeoutError):
                raise RequestTimeout("the daemon at %s did not answer hello in time" % path) from None
            if isinstance(e, OSError):
                raise ConnectionLost("the daemon at %s closed the connection during hello: %s" % (path, e)) from None
            raise
        return cls(path, reader, writer, welcome)

    @property
    def alive(self) -> bool:
        """Whether the connection is still up (as far as the reader knows)."""
        return self.router.ended is None

    async def send(self, frame: bytes, confirm: Optional[_core.Sink] = None) -> None:
        """Write one frame (whole: concurrent tasks never interleave). With
        ``confirm``, the frame is a ``confirm`` whose answer goes there. A failed write
        raises the daemon's reason for closing, once the reader has read it."""
        if confirm is not None:
            self.router.expect_confirm(confirm)
        elif self.router.ended is not None:
            raise ConnectionLost("the connection has ended: %s" % self.router.ended)
        try:
            if self._writer.is_closing():
                raise ConnectionResetError("the connection is closing")
            self._writer.write(frame)
            async with self._drain:  # Python 3.9 refuses concurrent drains
                await self._writer.drain()
        except (OSError, RuntimeError) as e:
            if confirm is not None:
                self.router.forget_confirm(confirm)
            try:  # let the reader read the daemon's last words (FrameTooLarge, say)
                await asyncio.wait_for(asyncio.shield(self._task), 5)
            except Exception:
                pass
            self.router.end(ConnectionLost("writing to the daemon failed: %s" % e))
            raise self.router.ended from None  # type: ignore[misc]

    def send_nowait(self, frame: bytes) -> None:
        """Queue a frame without waiting (a cancel on the way out of a waiter)."""
        if self.router.ended is None and not self._writer.is_closing():
            self._writer.write(frame)

    async def close(self) -> None:
        """End the connection (the daemon cancels its open calls) and the reader."""
        self.router.end(ClientClosed("the client was closed"))
        self._writer.close()
        self._task.cancel()
        try:
            await asyncio.wait_for(self._writer.wait_closed(), 10)
        except (OSError, asyncio.TimeoutError):
            pass
        await self._task  # it ends the router with ClientClosed when cancelled

    async def _read_loop(self) -> None:
        reason: BaseException
        try:
            while True:
                self.router.dispatch(await _read_one(self._reader))
        except (ConnectionLost, ProtocolError) as e:
            reason = e
        except OSError as e:
            reason = ConnectionLost("reading from the daemon failed: %s" % e)
        except asyncio.CancelledError:
            reason = ClientClosed("the client was closed")
        self.router.end(reason)


async def _read_one(reader: asyncio.StreamReader) -> Dict[str, Any]:
    try:
        head = await reader.readexactly(4)
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise ConnectionLost("the daemon closed the connection in the middle of a frame") from None
        raise ConnectionLost("the daemon closed the connection") from None
    n = _core.frame_length(head)
    try:
        body = await reader.readexactly(n)
    except asyncio.IncompleteReadError:
        raise ConnectionLost("the daemon closed the connection in the middle of a frame") from None
    return _core.decode_message(body)


async def _open_retrying(path: Path, client: str, interactive: bool, timeout: Optional[float], wait: float) -> _Conn:
    """Connect, trying again for up to ``wait`` seconds while the daemon is not (yet)
    there or drops the connection during hello (it is restarting)."""
    for pause in _core.retry_pauses(wait):
        try:
            return await _Conn.open(path, client, interactive, timeout)
        except (ConnectError, ConnectionLost) as e:
            if pause is None or isinstance(e, ServerError):
                raise
        await asyncio.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover


class AsyncClient(_core.Settings):
    """The asyncio twin of :class:`toolvisor.Client`; every request is a coroutine,
    and concurrent calls share one connection.

        async with toolvisor.AsyncClient.connect() as tv:
            a, b = await asyncio.gather(tv.call("ls", {"path": "."}), tv.call("glob", {"pattern": "*.md"}))

    ``timeout`` bounds every wait for an answer other than a call's result;
    ``reconnect_timeout`` is how long a new request keeps trying to reach a daemon
    that is restarting. The daemon runs at most ``server.max_open_calls`` (64 by
    default) open calls per connection and answers the rest ``Overloaded``: bound
    large fan-outs (a semaphore).
    """

    def __init__(
        self,
        workspace: Optional[discovery.PathLike] = None,
        socket: Optional[discovery.PathLike] = None,
        client: str = DEFAULT_CLIENT,
        interactive: bool = False,
        *,
        timeout: Optional[float] = 30.0,
        reconnect_timeout: float = 10.0,
    ) -> None:
        super().__init__(workspace, socket, client, interactive, timeout, reconnect_timeout)
        self._conn: Optional[_Conn] = None
        self._lock: Optional[asyncio.Lock] = None

    @classmethod
    def connect(
        cls,
        workspace: Optional[discovery.PathLike] = None,
        socket: Optional[discovery.PathLike] = None,
        client: str = DEFAULT_CLIENT,
        interactive: bool = False,
        *,
        timeout: Optional[float] = 30.0,
        reconnect_timeout: float = 10.0,
    ) -> "_Opening[AsyncClient]":
        """Connect and say hello: ``tv = await AsyncClient.connect()`` or ``async with
        AsyncClient.connect() as tv``. Arguments as for :meth:`toolvisor.Client.connect`."""
        c = cls(workspace, socket, client, interactive, timeout=timeout, reconnect_timeout=reconnect_timeout)

        async def open() -> "AsyncClient":
            await c._live()
            return c

        return _Opening(open, AsyncClient.close)

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> "AsyncClient":
        await self._live()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection; the daemon cancels this client's open calls."""
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    @property
    def welcome(self) -> Optional[Welcome]:
        """The ``welcome`` of the current connection (``None`` before connecting)."""
        return self._conn.welcome if self._conn is not None else None

    async def _live(self) -> _Conn:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._closed:
                raise ClientClosed("the client was closed")
            if self._conn is not None and self._conn.alive:
                return self._conn
            old, self._conn = self._conn, None
            if old is not None:
                await old.close()  # it ended; free its socket before making the next one
            wait = self.reconnect_timeout if old is not None else 0.0
            self._conn = await _open_retrying(self.socket_path, self.client_name, self.interactive, self.timeout, wait)
            return self._conn

    async def _send(self, msg: Mapping[str, Any], routes: Sequence[Tuple[RequestId, Any]]) -> Tuple[_Conn, _Mailbox]:
        """Register ``routes`` and send ``msg``; once more on a fresh connection when
        the old one was dead before the request left (see the sync client)."""
        frame = _core.encode_frame(msg)
        for attempt in (1, 2):
            conn = await self._live()
            box = _Mailbox()
            try:
                conn.router.expect(box, routes)
                await conn.send(frame)
                return conn, box
            except ConnectionLost:
                conn.router.forget(rid for rid, _ in routes)
                if attempt == 2 or isinstance(conn.router.ended, ServerError):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _request(
        self, build: Callable[[RequestId], Dict[str, Any]], answer: str, timeout: Optional[float] = None
    ) -> Dict[str, Any]:
        msg = build(self._new_id())
        conn, box = await self._send(msg, [(msg["id"], _core.ANY)])
        wait = self.timeout if timeout is None else timeout
        try:
            reply = await box.get(_core.deadline(wait))
        except BaseException:
            conn.router.forget([msg["id"]])
            raise
        return _core.expect_answer(reply, answer)

    # ------------------------------------------------------------------ requests

    async def ping(self) -> float:
        """Round trip to the daemon, in seconds."""
        start = time.monotonic()
        await self._request(_core.ping_message, "pong")
        return time.monotonic() - start

    async def tools(self, format: str = "native", groups: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
        """The tools, sorted by name, as ``native``, ``openai`` or ``mcp`` entries."""
        msg = await self._request(lambda rid: _core.tools_message(rid, format, groups), "tools")
        tools = msg.get("tools")
        return list(tools) if isinstance(tools, list) else []

    async def status(self) -> Status:
        """Workers, audit position, guards and calls in flight."""
        return Status.from_wire(await self._request(_core.status_message, "status"))

    async def restart(self, group: Optional[str] = None, timeout: Optional[float] = 120.0) -> None:
        """Restart the workers (of one ``group``) one at a time; returns when done."""
        await self._request(lambda rid: _core.restart_message(rid, group), "ack", timeout)

    async def grant(
        self,
        tools: Union[str, Sequence[str]],
        *,
        ttl_ms: int,
        trace_id: Optional[str] = None,
        paths: Optional[Sequence[str]] = None,
        reusable: bool = False,
    ) -> Token:
        """A grant token for ``confirm_token`` (see :meth:`toolvisor.Client.grant`)."""
        msg = await self._request(
            lambda rid: _core.grant_message(rid, tools, ttl_ms, trace_id, paths, reusable), "token"
        )
        return Token.from_wire(msg)

    async def explain(self, tool: str, args: Optional[Mapping[str, Any]] = None) -> Explanation:
        """What the policy would decide, without running the call."""
        msg = await self._request(lambda rid: _core.explain_message(rid, tool, args), "explanation")
        return Explanation.from_wire(msg)

    async def confirm(self, interaction: str, approve: bool, remember: str = "once") -> bool:
        """Answer a confirmation (see :meth:`toolvisor.Client.confirm`)."""
        frame = _core.encode_frame(_core.confirm_message(interaction, approve, remember))
        box = _Mailbox()
        await (await self._live()).send(frame, confirm=box)
        reply = _core.expect_answer(await box.get(_core.deadline(self.timeout)), "confirmed")
        return bool(reply.get("approve"))

    async def request(self, message: Mapping[str, Any], answer: str, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Send any request (a fresh ``id`` is added) and return its ``answer``."""
        return await self._request(lambda rid: dict(message, id=rid), answer, timeout)

    # ------------------------------------------------------------------ calls

    async def call(
        self,
        tool: str,
        args: Optional[Mapping[str, Any]] = None,
        *,
        timeout_ms: Optional[int] = None,
        trace_id: Optional[str] = None,
        confirm_token: Optional[str] = None,
        stream: StreamArg = None,
        on_confirm: Optional[OnConfirm] = None,
    ) -> Result:
        """Call a tool and return its result (see :meth:`toolvisor.Client.call`).
        Cancelling the awaiting task cancels the call."""
        handle = await self.start(
            tool,
            args,
            timeout_ms=timeout_ms,
            trace_id=trace_id,
            confirm_token=confirm_token,
            stream=stream,
            on_confirm=on_confirm,
        )
        return await handle._finish()

    async def start(
        self,
        tool: str,
        args: Optional[Mapping[str, Any]] = None,
        *,
        timeout_ms: Optional[int] = None,
        trace_id: Optional[str] = None,
        confirm_token: Optional[str] = None,
        stream: StreamArg = None,
        on_confirm: Optional[OnConfirm] = None,
    ) -> "AsyncCall":
        """Start a call; ``async for`` its output (``stream=True``), ``await
        result()``, ``await cancel()``."""
        rid = self._new_id()
        msg = dict(_core.call_fields(rid, tool, args, timeout_ms, trace_id, confirm_token, stream), type="call")
        progress = Progress([rid])
        conn, box = await self._send(msg, progress.routes())
        return AsyncCall(conn, box, progress, stream, on_confirm)

    async def batch(
        self,
        calls: Iterable[Union[Mapping[str, Any], Sequence[Any]]],
        *,
        stream: StreamArg = None,
        on_confirm: Optional[OnConfirm] = None,
    ) -> List[Result]:
        """Run a batch; the results in request order (see :meth:`toolvisor.Client.batch`)."""
        handle = await self.start_batch(calls, stream=stream, on_confirm=on_confirm)
        return await handle._finish()

    async def start_batch(
        self,
        calls: Iterable[Union[Mapping[str, Any], Sequence[Any]]],
        *,
        stream: StreamArg = None,
        on_confirm: Optional[OnConfirm] = None,
    ) -> "AsyncBatch":
        """Start a batch and return its handle at once."""
        entries = _core.batch_calls(self._new_id, calls, stream)
        bid = self._new_id()
        progress = Progress([c["id"] for c in entries], batch_id=bid)
        conn, box = await self._send({"type": "batch", "id": bid, "calls": entries}, progress.routes())
        return AsyncBatch(conn, box, progress, stream, on_confirm)

    async def cancel(self, call: Union["AsyncCall", "AsyncBatch", RequestId]) -> bool:
        """Cancel a running call or batch (a handle or its id); ``False`` if it was
        not running. Its result still comes, ``cancelled``."""
        if isinstance(call, (AsyncCall, AsyncBatch)):
            return await call.cancel()
        conn = self._conn
        if conn is None or not conn.alive or not conn.router.waiting(call):
            return False
        try:
            await conn.send(_core.encode_frame({"type": "cancel", "id": call}))
        except ConnectionLost:
            return False
        return True

    def subscribe(self, topics: Union[str, Sequence[str]] = _core.TOPICS) -> "_Opening[AsyncSubscription]":
        """Events on a connection of their own: ``sub = await tv.subscribe(...)`` or
        ``async with tv.subscribe(...) as sub``, then ``async for event in sub``."""
        path, name, timeout = self.socket_path, self.client_name, self.timeout
        return _Opening(lambda: AsyncSubscription._open(path, name, topics, timeout), AsyncSubscription.close)


class _Conversation(_core.ConversationBase):
    """What an async call and batch handle share."""

    _conn: _Conn
    _box: _Mailbox

    def __init__(
        self, conn: _Conn, box: _Mailbox, progress: Progress, stream: StreamArg, on_confirm: Optional[OnConfirm]
    ) -> None:
        super().__init__(conn, box, progress, stream, on_confirm)
        self._lock = asyncio.Lock()

    async def _pump(self, deadline: _core.Deadline) -> Tuple[str, Any]:
        kind, value = self._progress.feed(await self._box.get(deadline))
        if kind == "output" and self._on_output is not None:
            await _maybe_await(self._on_output(value))
        elif kind == "confirm":
            await self._answer(value)
        return kind, value

    async def _answer(self, request: ConfirmRequest) -> None:
        if self._on_confirm is None:
            return
        try:
            answer = _core.confirm_answer(await _maybe_await(self._on_confirm(request)))
        except BaseException:
            await self._reply(request, False)  # fail closed
            raise
        if answer is not None:
            await self._reply(request, answer)

    async def _reply(self, request: ConfirmRequest, approve: bool) -> None:
        try:
            await self._conn.send(self._confirm_frame(request, approve), confirm=_core.Discard())
        except ConnectionLost:
            pass  # the call ends with the connection; its waiter hears of it

    async def _wait_done(self, timeout: Optional[float]) -> None:
        deadline = _core.deadline(timeout)
        async with self._lock:
            while not self._progress.done:
                await self._pump(deadline)

    async def cancel(self) -> bool:
        """Ask the daemon to cancel; the result(s) still come (``cancelled``).
        Returns ``False`` if it had already ended."""
        frame = self._cancel_frame()
        if frame is None:
            return False
        try:
            await self._conn.send(frame)
        except ConnectionLost:
            return False
        return True

    def _abandon(self) -> None:
        """The waiter gave up (exception, task cancelled): cancel, stop routing."""
        frame = self._cancel_frame()
        if frame is not None:
            self._conn.send_nowait(frame)
            self._conn.router.forget(self._progress.open_ids())


class AsyncCall(_Conversation):
    """A running call: ``async for output in call`` (with ``stream=True``), ``await
    call.result()``, ``await call.cancel()``."""

    @property
    def id(self) -> RequestId:
        """The call's id on its connection."""
        return self._progress.ids[0]

    async def __aiter__(self) -> AsyncIterator[Output]:
        while True:
            async with self._lock:
                if self._progress.done:
                    return
                kind, value = await self._pump(None)
            if kind == "output":
                yield value

    async def result(self, timeout: Optional[float] = None) -> Result:
        """Wait (at most ``timeout`` seconds) for the result."""
        await self._wait_done(timeout)
        return self._progress.single()

    async def _finish(self) -> Result:
        try:
            return await self.result()
        except BaseException:
            self._abandon()
            raise


class AsyncBatch(_Conversation):
    """A running batch: ``await results()`` (request order), or ``async for`` each
    result as it arrives."""

    @property
    def id(self) -> RequestId:
        """The batch's own id."""
        return self._progress.batch_id  # type: ignore[return-value]

    @property
    def ids(self) -> List[RequestId]:
        """The ids of its calls, in request order."""
        return list(self._progress.ids)

    async def __aiter__(self) -> AsyncIterator[Result]:
        while True:
            async with self._lock:
                if self._progress.done:
                    return
                kind, value = await self._pump(None)
            if kind == "result":
                yield value

    async def results(self, timeout: Optional[float] = None) -> List[Result]:
        """Wait for ``batch_done``; the results in request order."""
        await self._wait_done(timeout)
        return self._progress.ordered()

    async def _finish(self) -> List[Result]:
        try:
            return await self.results()
        except BaseException:
            self._abandon()
            raise


class AsyncSubscription:
    """Events on a connection of their own: ``async for event in sub``; ``await
    sub.next(timeout)`` to wait with a deadline; ``await sub.close()`` to stop."""

    def __init__(self, conn: _Conn, box: _Mailbox, early: List[Event]) -> None:
        self._conn = conn
        self._box = box
        self._early = early

    @classmethod
    async def _open(
        cls, path: Path, client: str, topics: Union[str, Sequence[str]], timeout: Optional[float]
    ) -> "AsyncSubscription":
        msg = _core.subscribe_message("events", topics)
        conn = await _Conn.open(path, client, False, timeout)
        box = _Mailbox()
        early: List[Event] = []
        try:
            conn.router.expect_events(box)
            conn.router.expect(box, [("events", _core.ANY)])
            await conn.send(_core.encode_frame(msg))
            deadline = _core.deadline(timeout)
            while True:
                reply = await box.get(deadline)
                if reply["type"] != "event":
                    _core.expect_answer(reply, "subscribed")
                    break
                early.append(Event.from_wire(reply))
        except BaseException:
            await conn.close()
            raise
        return cls(conn, box, early)

    async def __aenter__(self) -> "AsyncSubscription":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __aiter__(self) -> "AsyncSubscription":
        return self

    async def __anext__(self) -> Event:
        try:
            return await self.next()
        except ClientClosed:
            raise StopAsyncIteration from None

    async def next(self, timeout: Optional[float] = None) -> Event:
        """The next event, waiting at most ``timeout`` seconds (``None``: for ever)."""
        if self._early:
            return self._early.pop(0)
        msg = await self._box.get(_core.deadline(timeout))
        if msg.get("type") != "event":
            raise ProtocolError("expected an event, got %r" % (msg,))
        return Event.from_wire(msg)

    async def close(self) -> None:
        """Stop: close the subscription's connection."""
        await self._conn.close()
