"""The synchronous client: :class:`Client`, its call handles and subscriptions.

One connection per client, shared by any number of threads: a reader thread decodes
frames and routes each message to the thread that waits for it (see ``_core.Router``).
User callbacks (``stream``, ``on_confirm``) run in the thread that waits for the call,
never in the reader. When the daemon goes away, every waiter gets
:class:`~toolvisor.ConnectionLost`, and the next new request connects again.
"""

from __future__ import annotations

import queue
import socket as _socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from . import _core, discovery
from ._core import DEFAULT_CLIENT, OnConfirm, Progress, StreamArg
from .errors import ClientClosed, ConnectError, ConnectionLost, ProtocolError, RequestId, RequestTimeout, ServerError
from .types import ConfirmRequest, Event, Explanation, Output, Result, Status, Token, Welcome


class _Mailbox(_core.MailboxBase):
    """A thread-safe queue of one waiter's messages."""

    def __init__(self) -> None:
        self._q: "queue.SimpleQueue[Tuple[bool, Any]]" = queue.SimpleQueue()

    def put(self, msg: Dict[str, Any]) -> None:
        self._q.put((True, msg))

    def fail(self, exc: BaseException) -> None:
        self._q.put((False, exc))

    def get(self, deadline: _core.Deadline) -> Dict[str, Any]:
        """The next message; raise the connection's end, or RequestTimeout."""
        self._check_ended()
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return self._unwrap(self._q.get(timeout=timeout))
        except queue.Empty:
            raise self._timed_out() from None


class _Conn:
    """One connected, welcomed socket and its reader thread."""

    def __init__(self, path: Path, client: str, interactive: bool, timeout: Optional[float]) -> None:
        self.path = path
        self.router = _core.Router()
        self._wlock = threading.Lock()
        self._sock = _connect(path, timeout)
        try:
            _core.check_peer(self._sock, path)
            self.welcome = self._handshake(client, interactive)
        except BaseException:
            self._sock.close()
            raise
        self._sock.settimeout(None)
        self._reader = threading.Thread(target=self._read_loop, name="toolvisor-reader", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        """Whether the connection is still up (as far as the reader knows)."""
        return self.router.ended is None

    def _handshake(self, client: str, interactive: bool) -> Welcome:
        try:
            self._sock.sendall(_core.encode_frame(_core.hello_message(client, interactive)))
            msg = self._read_one()
        except _socket.timeout:
            raise RequestTimeout("the daemon at %s did not answer hello in time" % self.path) from None
        except OSError as e:
            raise ConnectionLost("the daemon at %s closed the connection during hello: %s" % (self.path, e)) from None
        return Welcome.from_wire(_core.expect_answer(msg, "welcome"))

    def send(self, frame: bytes, confirm: Optional[_core.Sink] = None) -> None:
        """Write one encoded frame (frames of concurrent senders never interleave).
        With ``confirm``, the frame is a ``confirm`` whose answer goes there (answers
        come back in the order the confirms were written).

        A failed write means the daemon closed the connection; the reader then reads
        what the daemon said last (``FrameTooLarge``, say) before the end, and that
        reason is raised."""
        try:
            with self._wlock:
                if confirm is not None:
                    self.router.expect_confirm(confirm)
                self._sock.sendall(frame)
        except OSError as e:
            if confirm is not None:
                self.router.forget_confirm(confirm)
            self._reader.join(timeout=5)
            self.router.end(ConnectionLost("writing to the daemon failed: %s" % e))
            raise self.router.ended from None  # type: ignore[misc]

    def close(self) -> None:
        """End the connection (the daemon cancels its open calls) and the reader."""
        self.router.end(ClientClosed("the client was closed"))
        try:
            self._sock.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass
        if self._reader is not threading.current_thread():
            self._reader.join(timeout=10)
        self._sock.close()

    def _read_loop(self) -> None:
        reason: BaseException
        try:
            while True:
                self.router.dispatch(self._read_one())
        except (ConnectionLost, ProtocolError) as e:
            reason = e
        except OSError as e:
            reason = ConnectionLost("reading from the daemon failed: %s" % e)
        self.router.end(reason)

    def _read_one(self) -> Dict[str, Any]:
        n = _core.frame_length(self._exactly(4, at_boundary=True))
        return _core.decode_message(self._exactly(n, at_boundary=False))

    def _exactly(self, n: int, at_boundary: bool) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:])
            if k == 0:
                if at_boundary and got == 0:
                    raise ConnectionLost("the daemon closed the connection")
                raise ConnectionLost("the daemon closed the connection in the middle of a frame")
            got += k
        return bytes(buf)


def _connect(path: Path, timeout: Optional[float]) -> _socket.socket:
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
    except BaseException as e:
        sock.close()
        if isinstance(e, OSError):
            raise _core.connect_failure(path, e) from None
        raise
    return sock


class Client(_core.Settings):
    """A connection to the toolvisor daemon, usable from many threads at once.

    Make one with :meth:`connect` (or the module's :func:`toolvisor.connect`); use it
    as a context manager to close it. ``timeout`` bounds every wait for an answer other
    than a call's result (a call ends by its own deadline, see ``timeout_ms``);
    ``reconnect_timeout`` is how long a new request keeps trying to reach a daemon that
    is restarting. Requests in flight when the connection is lost raise
    :class:`~toolvisor.ConnectionLost`; new ones connect again.
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
        self._lock = threading.Lock()

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
    ) -> "Client":
        """Connect to the daemon of ``workspace`` (found from the current directory
        when ``None``) or at ``socket``, and say hello.

        ``interactive=True`` lets the daemon ask this client to confirm calls
        (``on_confirm``); a non-interactive client's calls that need asking end
        ``denied`` / ``ConfirmationRequired`` unless they carry a ``confirm_token``.
        Raises :class:`~toolvisor.ConnectError` when no daemon answers.
        """
        c = cls(workspace, socket, client, interactive, timeout=timeout, reconnect_timeout=reconnect_timeout)
        c._live()
        return c

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection; the daemon cancels this client's open calls."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    @property
    def welcome(self) -> Welcome:
        """The ``welcome`` of the current connection (connecting if needed)."""
        return self._live().welcome

    @property
    def session(self) -> str:
        """The daemon's id for the current connection (audit records carry it)."""
        return self.welcome.session

    def _live(self) -> _Conn:
        with self._lock:
            if self._closed:
                raise ClientClosed("the client was closed")
            if self._conn is not None and self._conn.alive:
                return self._conn
            old, self._conn = self._conn, None
            if old is not None:
                old.close()  # it ended; free its socket before making the next one
            wait = self.reconnect_timeout if old is not None else 0.0
            self._conn = _open_retrying(self.socket_path, self.client_name, self.interactive, self.timeout, wait)
            return self._conn

    def _send(self, msg: Mapping[str, Any], routes: Sequence[Tuple[RequestId, Any]]) -> Tuple[_Conn, _Mailbox]:
        """Register ``routes`` and send ``msg``. When the connection turns out dead
        before the request left, the request never reached a daemon: send it once more
        on a fresh connection (a daemon that restarted), unless the daemon closed the
        connection with a reason of its own (``FrameTooLarge``)."""
        frame = _core.encode_frame(msg)
        for attempt in (1, 2):
            conn = self._live()
            box = _Mailbox()
            try:
                conn.router.expect(box, routes)
                conn.send(frame)
                return conn, box
            except ConnectionLost:
                conn.router.forget(rid for rid, _ in routes)
                if attempt == 2 or isinstance(conn.router.ended, ServerError):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _request(
        self, build: Callable[[RequestId], Dict[str, Any]], answer: str, timeout: Optional[float] = None
    ) -> Dict[str, Any]:
        """Send the request ``build(id)`` and return its ``answer`` message."""
        msg = build(self._new_id())
        conn, box = self._send(msg, [(msg["id"], _core.ANY)])
        wait = self.timeout if timeout is None else timeout
        try:
            reply = box.get(_core.deadline(wait))
        except RequestTimeout:
            conn.router.forget([msg["id"]])
            raise RequestTimeout("no %s from the daemon within %ss" % (answer, wait)) from None
        return _core.expect_answer(reply, answer)

    # ------------------------------------------------------------------ requests

    def ping(self) -> float:
        """Round trip to the daemon, in seconds."""
        start = time.monotonic()
        self._request(_core.ping_message, "pong")
        return time.monotonic() - start

    def tools(self, format: str = "native", groups: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
        """The tools, sorted by name: ``native`` (name, description, group, risk,
        parameters, aliases), ``openai`` (function definitions to pass to a model) or
        ``mcp`` (MCP tool definitions); ``groups`` keeps only those groups' tools."""
        msg = self._request(lambda rid: _core.tools_message(rid, format, groups), "tools")
        tools = msg.get("tools")
        return list(tools) if isinstance(tools, list) else []

    def status(self) -> Status:
        """Workers, audit position, guards and calls in flight."""
        return Status.from_wire(self._request(_core.status_message, "status"))

    def restart(self, group: Optional[str] = None, timeout: Optional[float] = 120.0) -> None:
        """Restart the workers (of one ``group``) one at a time; returns when done."""
        self._request(lambda rid: _core.restart_message(rid, group), "ack", timeout)

    def grant(
        self,
        tools: Union[str, Sequence[str]],
        *,
        ttl_ms: int,
        trace_id: Optional[str] = None,
        paths: Optional[Sequence[str]] = None,
        reusable: bool = False,
    ) -> Token:
        """A token that lets matching calls of ``tools`` pass an ``ask`` (never a deny):
        pass ``token.token`` as a call's ``confirm_token``. Single use unless
        ``reusable``; ``paths`` are workspace-relative prefixes the calls must stay
        under; ``trace_id`` binds it to calls carrying that trace id."""
        msg = self._request(lambda rid: _core.grant_message(rid, tools, ttl_ms, trace_id, paths, reusable), "token")
        return Token.from_wire(msg)

    def explain(self, tool: str, args: Optional[Mapping[str, Any]] = None) -> Explanation:
        """What the policy would decide for this call, without running it or asking
        anyone. A daemon that predates ``explain`` raises
        :class:`~toolvisor.UnknownMessage`."""
        msg = self._request(lambda rid: _core.explain_message(rid, tool, args), "explanation")
        return Explanation.from_wire(msg)

    def confirm(self, interaction: str, approve: bool, remember: str = "once") -> bool:
        """Answer a confirmation (from any client of the same user). ``remember=
        "session"`` also approves later identical calls of the asking session.
        Returns the answer the daemon recorded; raises
        :class:`~toolvisor.UnknownInteraction` if it was already answered or expired."""
        frame = _core.encode_frame(_core.confirm_message(interaction, approve, remember))
        box = _Mailbox()
        self._live().send(frame, confirm=box)
        reply = _core.expect_answer(box.get(_core.deadline(self.timeout)), "confirmed")
        return bool(reply.get("approve"))

    def request(self, message: Mapping[str, Any], answer: str, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Send any request (a fresh ``id`` is added) and return its ``answer`` message:
        for message types this client has no method for."""
        return self._request(lambda rid: dict(message, id=rid), answer, timeout)

    # ------------------------------------------------------------------ calls

    def call(
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
        """Call a tool and wait for its :class:`~toolvisor.Result`.

        A call that fails is a result (``status`` not ``"ok"``), not an exception.
        ``timeout_ms`` caps the run (the group's limits still apply); ``stream`` is a
        callback that gets each :class:`~toolvisor.Output` while ``run_command`` runs
        (for an iterator use :meth:`start`); ``on_confirm(request)`` answers the
        daemon's question on an interactive client: ``True`` runs the call, ``False``
        denies it, ``None`` leaves it to someone else (``toolvisor approve``) or to
        time out. If waiting is interrupted (an exception in a callback, Ctrl-C), the
        call is cancelled.
        """
        handle = self.start(
            tool,
            args,
            timeout_ms=timeout_ms,
            trace_id=trace_id,
            confirm_token=confirm_token,
            stream=stream,
            on_confirm=on_confirm,
        )
        return handle._finish()

    def start(
        self,
        tool: str,
        args: Optional[Mapping[str, Any]] = None,
        *,
        timeout_ms: Optional[int] = None,
        trace_id: Optional[str] = None,
        confirm_token: Optional[str] = None,
        stream: StreamArg = None,
        on_confirm: Optional[OnConfirm] = None,
    ) -> "Call":
        """Start a call and return its :class:`Call` handle at once: iterate it for
        streamed output (``stream=True``), ``result()`` to wait, ``cancel()`` to stop."""
        rid = self._new_id()
        msg = dict(_core.call_fields(rid, tool, args, timeout_ms, trace_id, confirm_token, stream), type="call")
        progress = Progress([rid])
        conn, box = self._send(msg, progress.routes())
        return Call(conn, box, progress, stream, on_confirm)

    def batch(
        self,
        calls: Iterable[Union[Mapping[str, Any], Sequence[Any]]],
        *,
        stream: StreamArg = None,
        on_confirm: Optional[OnConfirm] = None,
    ) -> List[Result]:
        """Run several calls as one ``batch`` and return their results in request
        order. Each call is ``(tool, args)`` or a mapping with ``tool``, ``args`` and
        optionally ``timeout_ms``, ``trace_id``, ``confirm_token``, ``stream``. Low-risk
        calls the policy allows run concurrently; the others one at a time."""
        return self.start_batch(calls, stream=stream, on_confirm=on_confirm)._finish()

    def start_batch(
        self,
        calls: Iterable[Union[Mapping[str, Any], Sequence[Any]]],
        *,
        stream: StreamArg = None,
        on_confirm: Optional[OnConfirm] = None,
    ) -> "Batch":
        """Start a batch and return its :class:`Batch` handle at once."""
        entries = _core.batch_calls(self._new_id, calls, stream)
        bid = self._new_id()
        progress = Progress([c["id"] for c in entries], batch_id=bid)
        conn, box = self._send({"type": "batch", "id": bid, "calls": entries}, progress.routes())
        return Batch(conn, box, progress, stream, on_confirm)

    def cancel(self, call: Union["Call", "Batch", RequestId]) -> bool:
        """Cancel a running call or batch (a handle or its id). Its result still comes,
        with status ``cancelled``. Returns ``False`` when it was not running."""
        if isinstance(call, (Call, Batch)):
            return call.cancel()
        conn = self._conn
        if conn is None or not conn.alive or not conn.router.waiting(call):
            return False
        try:
            conn.send(_core.encode_frame({"type": "cancel", "id": call}))
        except ConnectionLost:
            return False
        return True

    def subscribe(self, topics: Union[str, Sequence[str]] = _core.TOPICS) -> "Subscription":
        """Events of ``topics`` (``calls``, ``confirmations``, ``workers``) on a
        connection of their own, as an iterator of :class:`~toolvisor.Event`; close it
        (or leave its ``with`` block) to stop. ``confirmations`` starts with one
        ``confirm_required`` event per question already pending."""
        return Subscription(self.socket_path, self.client_name, topics, self.timeout)


def _open_retrying(path: Path, client: str, interactive: bool, timeout: Optional[float], wait: float) -> _Conn:
    """Connect, trying again for up to ``wait`` seconds while the daemon is not (yet)
    there or drops the connection during hello (it is restarting)."""
    for pause in _core.retry_pauses(wait):
        try:
            return _Conn(path, client, interactive, timeout)
        except (ConnectError, ConnectionLost) as e:
            if pause is None or isinstance(e, ServerError):
                raise
        time.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover


class _Conversation(_core.ConversationBase):
    """What a call and a batch handle share: pumping messages, callbacks, cancel."""

    _conn: _Conn
    _box: _Mailbox

    def __init__(
        self, conn: _Conn, box: _Mailbox, progress: Progress, stream: StreamArg, on_confirm: Optional[OnConfirm]
    ) -> None:
        super().__init__(conn, box, progress, stream, on_confirm)
        self._lock = threading.RLock()

    def _pump(self, deadline: _core.Deadline) -> Tuple[str, Any]:
        """Wait for and handle the next message; return what it was."""
        kind, value = self._progress.feed(self._box.get(deadline))
        if kind == "output" and self._on_output is not None:
            self._on_output(value)
        elif kind == "confirm":
            self._answer(value)
        return kind, value

    def _answer(self, request: ConfirmRequest) -> None:
        if self._on_confirm is None:
            return
        try:
            answer = _core.confirm_answer(self._on_confirm(request))
        except BaseException:
            self._reply(request, False)  # fail closed
            raise
        if answer is not None:
            self._reply(request, answer)

    def _reply(self, request: ConfirmRequest, approve: bool) -> None:
        try:
            self._conn.send(self._confirm_frame(request, approve), confirm=_core.Discard())
        except ConnectionLost:
            pass  # the call ends with the connection; its waiter hears of it

    def _wait_done(self, timeout: Optional[float]) -> None:
        deadline = _core.deadline(timeout)
        with self._lock:
            while not self._progress.done:
                self._pump(deadline)

    def cancel(self) -> bool:
        """Ask the daemon to cancel; the result(s) still come (``cancelled``).
        Returns ``False`` if it had already ended."""
        frame = self._cancel_frame()
        if frame is None:
            return False
        try:
            self._conn.send(frame)
        except ConnectionLost:
            return False
        return True

    def _abandon(self) -> None:
        """The waiter gave up (exception, Ctrl-C): cancel, and stop routing."""
        if not self._progress.done:
            self.cancel()
            self._conn.router.forget(self._progress.open_ids())


class Call(_Conversation):
    """A running call. Iterate it for its :class:`~toolvisor.Output` (when started
    with ``stream=True``); the iteration ends when the result arrives. ``on_confirm``
    and ``stream`` callbacks run in the thread that iterates or waits."""

    @property
    def id(self) -> RequestId:
        """The call's id on its connection."""
        return self._progress.ids[0]

    def __iter__(self) -> Iterator[Output]:
        while True:
            with self._lock:
                if self._progress.done:
                    return
                kind, value = self._pump(None)
            if kind == "output":
                yield value

    def result(self, timeout: Optional[float] = None) -> Result:
        """Wait (at most ``timeout`` seconds; ``None``: until it ends) for the result.
        Output not yet iterated is passed to the ``stream`` callback, if any, and
        dropped otherwise (the result's ``content`` has all of it)."""
        self._wait_done(timeout)
        return self._progress.single()

    def _finish(self) -> Result:
        try:
            return self.result()
        except BaseException:
            self._abandon()
            raise


class Batch(_Conversation):
    """A running batch: ``results()`` waits for every call's result (request order);
    iterating yields each :class:`~toolvisor.Result` as it arrives."""

    @property
    def id(self) -> RequestId:
        """The batch's own id."""
        return self._progress.batch_id  # type: ignore[return-value]

    @property
    def ids(self) -> List[RequestId]:
        """The ids of its calls, in request order."""
        return list(self._progress.ids)

    def __iter__(self) -> Iterator[Result]:
        while True:
            with self._lock:
                if self._progress.done:
                    return
                kind, value = self._pump(None)
            if kind == "result":
                yield value

    def results(self, timeout: Optional[float] = None) -> List[Result]:
        """Wait for ``batch_done`` and return the results in request order."""
        self._wait_done(timeout)
        return self._progress.ordered()

    def _finish(self) -> List[Result]:
        try:
            return self.results()
        except BaseException:
            self._abandon()
            raise


class Subscription:
    """An iterator of :class:`~toolvisor.Event` on a connection of its own.

    Iteration ends when the subscription is closed; it raises
    :class:`~toolvisor.ConnectionLost` when the daemon goes away (subscribe again to
    follow a restarted daemon). Use ``next(timeout)`` to wait with a deadline.
    """

    def __init__(self, path: Path, client: str, topics: Union[str, Sequence[str]], timeout: Optional[float]) -> None:
        self._conn = _Conn(path, client, False, timeout)
        self._box = _Mailbox()
        self._closed = False
        try:
            rid = "events"
            msg = _core.subscribe_message(rid, topics)
            self._conn.router.expect_events(self._box)
            self._conn.router.expect(self._box, [(rid, _core.ANY)])
            self._conn.send(_core.encode_frame(msg))
            self._early: List[Event] = []
            while True:
                reply = self._box.get(_core.deadline(timeout))
                if reply["type"] == "event":
                    self._early.append(Event.from_wire(reply))
                    continue
                _core.expect_answer(reply, "subscribed")
                break
        except BaseException:
            self._conn.close()
            raise

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> "Subscription":
        return self

    def __next__(self) -> Event:
        try:
            return self.next()
        except ClientClosed:
            raise StopIteration from None

    def next(self, timeout: Optional[float] = None) -> Event:
        """The next event, waiting at most ``timeout`` seconds (``None``: for ever).
        Raises :class:`~toolvisor.RequestTimeout` when none came in time."""
        if self._early:
            return self._early.pop(0)
        msg = self._box.get(_core.deadline(timeout))
        if msg.get("type") != "event":
            raise ProtocolError("expected an event, got %r" % (msg,))
        return Event.from_wire(msg)

    def close(self) -> None:
        """Stop: close the subscription's connection."""
        self._closed = True
        self._conn.close()
