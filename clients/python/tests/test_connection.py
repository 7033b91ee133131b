"""Connections that end or never work: daemon restarts (graceful and killed), new
calls reconnecting, and the typed errors for every way a connection can fail (a
scripted fake server plays the broken daemons)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable, Iterator, List, Optional

import pytest

import toolvisor
from toolvisor import AsyncClient, Client, _core

from conftest import POLICY, Daemon

WAIT = 60
#: A short drain, so a graceful stop does not wait 10 s for the running test call.
QUICK_DRAIN = POLICY + "\n[server]\ndrain_grace_ms = 200\n"


@pytest.fixture
def restartable(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path / "ws", config=QUICK_DRAIN).start()
    (d.workspace / "README.md").write_text("# restartable\n")
    yield d
    d.stop()


def started(call: toolvisor.Call) -> None:
    out = next(iter(call))
    assert out.data == "started\n"


# ---------------------------------------------------------------- restarts


def test_killed_daemon_fails_the_open_call_and_a_new_call_reconnects(restartable: Daemon) -> None:
    with Client.connect(socket=restartable.socket, reconnect_timeout=WAIT) as tv:
        first = tv.welcome
        call = tv.start("run_command", {"command": "echo started; exec sleep 600"}, stream=True)
        started(call)
        restartable.kill9()
        with pytest.raises(toolvisor.ConnectionLost):
            call.result(timeout=WAIT)
        restartable.start()
        r = tv.call("read_file", {"path": "README.md"})
        assert r.ok and r.content == "# restartable\n"
        assert tv.welcome is not first


def test_a_new_call_waits_for_a_restarting_daemon(restartable: Daemon) -> None:
    with Client.connect(socket=restartable.socket, reconnect_timeout=WAIT) as tv:
        assert tv.ping() >= 0
        restartable.stop()
        # Bring it back from another thread while the call below is already trying.
        back = threading.Thread(target=restartable.start)
        back.start()
        try:
            assert tv.call("ls", {"path": "."}).ok
        finally:
            back.join(WAIT)


def test_graceful_stop_cancels_the_running_call_then_reconnects(restartable: Daemon) -> None:
    with Client.connect(socket=restartable.socket, reconnect_timeout=WAIT) as tv:
        call = tv.start("run_command", {"command": "echo started; exec sleep 600"}, stream=True)
        started(call)
        assert restartable.proc is not None
        restartable.proc.send_signal(signal.SIGTERM)
        result = call.result(timeout=WAIT)  # the drain ends it before the daemon exits
        assert result.status == "cancelled"
        restartable.stop()
        restartable.start()
        assert tv.call("read_file", {"path": "README.md"}).ok


def test_without_a_daemon_a_new_call_fails_after_reconnect_timeout(restartable: Daemon) -> None:
    with Client.connect(socket=restartable.socket, reconnect_timeout=0.3) as tv:
        restartable.stop()
        with pytest.raises(toolvisor.ConnectError) as err:
            tv.call("ls", {"path": "."})
        assert err.value.socket == str(restartable.socket)


def test_async_client_reconnects_after_a_kill(restartable: Daemon) -> None:
    async def body() -> None:
        async with AsyncClient.connect(socket=restartable.socket, reconnect_timeout=WAIT) as tv:
            call = await tv.start("run_command", {"command": "echo started; exec sleep 600"}, stream=True)
            async for out in call:
                assert out.data == "started\n"
                break
            restartable.kill9()
            with pytest.raises(toolvisor.ConnectionLost):
                await call.result(timeout=WAIT)
            restartable.start()
            assert (await tv.call("read_file", {"path": "README.md"})).ok
            async with tv.subscribe("workers") as events:
                restartable.stop()
                with pytest.raises(toolvisor.ConnectionLost):
                    while True:  # worker_exited events of the drain, then the end
                        await events.next(timeout=WAIT)

    asyncio.run(asyncio.wait_for(body(), WAIT * 2))


def test_a_subscription_ends_with_connection_lost(restartable: Daemon) -> None:
    with Client.connect(socket=restartable.socket) as tv, tv.subscribe("workers") as events:
        restartable.kill9()
        with pytest.raises(toolvisor.ConnectionLost):
            while True:
                events.next(timeout=WAIT)


# ---------------------------------------------------------------- broken daemons


class FakeServer:
    """A Unix socket that accepts one connection and runs ``script(conn)`` on it."""

    def __init__(self, path: Path, script: Callable[[socket.socket], None]) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(4)
        self.sock.settimeout(WAIT)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(script,), daemon=True)
        self.thread.start()

    def _serve(self, script: Callable[[socket.socket], None]) -> None:
        try:
            conn, _ = self.sock.accept()
            with conn:
                conn.settimeout(WAIT)
                script(conn)
        finally:
            self.done.set()

    def close(self) -> None:
        self.sock.close()
        self.thread.join(WAIT)


def read_frame(conn: socket.socket) -> Optional[dict]:
    head = _exactly(conn, 4)
    if head is None:
        return None
    body = _exactly(conn, int.from_bytes(head, "big"))
    return _core.decode_message(body) if body is not None else None


def _exactly(conn: socket.socket, n: int) -> Optional[bytes]:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def welcome(conn: socket.socket) -> None:
    hello = read_frame(conn)
    assert hello is not None and hello["type"] == "hello" and hello["protocol"] == 1
    conn.sendall(
        _core.encode_frame({"type": "welcome", "protocol": 1, "server": "fake/0", "session": "f1", "tools": 0})
    )


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[Callable[[Callable[[socket.socket], None]], FakeServer]]:
    servers: List[FakeServer] = []

    def make(script: Callable[[socket.socket], None]) -> FakeServer:
        s = FakeServer(tmp_path / ("fake%d.sock" % len(servers)), script)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


def test_no_socket_a_file_and_a_dead_socket_are_connect_errors(tmp_path: Path) -> None:
    with pytest.raises(toolvisor.ConnectError, match="does not exist"):
        Client.connect(socket=tmp_path / "none.sock")
    regular = tmp_path / "file.sock"
    regular.write_text("not a socket")
    with pytest.raises(toolvisor.ConnectError):
        Client.connect(socket=regular)
    dead = tmp_path / "dead.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(dead))
    s.close()  # bound, never listening: connection refused
    with pytest.raises(toolvisor.ConnectError, match="no toolvisor daemon listens"):
        Client.connect(socket=dead)


PLANTED = """
import os, socket, sys
os.setgid(65534)
os.setuid(65534)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
s.listen(4)
print("listening", flush=True)
for _ in range(2):  # the sync client, then the async one
    conn, _ = s.accept()
    print("got %d bytes" % len(conn.recv(1 << 16)), flush=True)
    conn.close()
"""


@pytest.mark.skipif(os.getuid() != 0, reason="serving as another user needs root (CI runs as root)")
def test_a_socket_served_by_another_user_is_refused() -> None:
    box = Path(tempfile.mkdtemp(prefix="toolvisor-planted-", dir="/tmp"))  # reachable by nobody
    box.chmod(0o777)
    path = box / "planted.sock"
    proc = subprocess.Popen([sys.executable, "-c", PLANTED, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "listening\n"
        with pytest.raises(toolvisor.ConnectError, match="served by uid 65534"):
            Client.connect(socket=path)
        with pytest.raises(toolvisor.ConnectError, match="served by uid 65534"):
            asyncio.run(asyncio.wait_for(AsyncClient.connect(socket=path), WAIT))
        # Both hung up before saying anything: not even hello reached the planted server.
        out, _ = proc.communicate(timeout=WAIT)
        assert out == "got 0 bytes\ngot 0 bytes\n"
    finally:
        proc.kill()
        proc.wait(WAIT)
        assert proc.stdout is not None
        proc.stdout.close()
        shutil.rmtree(box)


def test_a_server_that_hangs_up_during_hello(fake) -> None:
    srv = fake(lambda conn: None)
    with pytest.raises(toolvisor.ConnectionLost):
        Client.connect(socket=srv.path)


def test_a_server_that_never_answers_hits_the_timeout(fake) -> None:
    srv = fake(lambda conn: (read_frame(conn), read_frame(conn)))
    with pytest.raises(toolvisor.RequestTimeout):
        Client.connect(socket=srv.path, timeout=0.3)


def test_garbage_and_oversized_frames_are_protocol_errors(fake) -> None:
    def garbage(conn: socket.socket) -> None:
        read_frame(conn)
        conn.sendall(b"\x00\x00\x00\x02\xc1\xc1")

    with pytest.raises(toolvisor.ProtocolError, match="does not decode"):
        Client.connect(socket=fake(garbage).path)

    def huge(conn: socket.socket) -> None:
        read_frame(conn)
        conn.sendall((1 << 30).to_bytes(4, "big"))

    with pytest.raises(toolvisor.ProtocolError, match="frame of"):
        Client.connect(socket=fake(huge).path)

    def not_a_message(conn: socket.socket) -> None:
        read_frame(conn)
        conn.sendall(_core.encode_frame({"no": "type"}))

    with pytest.raises(toolvisor.ProtocolError, match="not a message"):
        Client.connect(socket=fake(not_a_message).path)


def test_another_protocol_version_is_refused(fake) -> None:
    def refuse(conn: socket.socket) -> None:
        read_frame(conn)
        conn.sendall(_core.encode_frame({"type": "error", "error": {"type": "ProtocolVersion", "message": "speaks 2"}}))

    with pytest.raises(toolvisor.ProtocolVersion) as err:
        Client.connect(socket=fake(refuse).path)
    assert err.value.message == "speaks 2" and isinstance(err.value, toolvisor.ServerError)


def test_a_connection_lost_mid_call_and_a_broken_frame_mid_session(fake) -> None:
    def drop_on_call(conn: socket.socket) -> None:
        welcome(conn)
        call = read_frame(conn)
        assert call is not None and call["type"] == "call"
        conn.sendall(_core.encode_frame({"type": "output", "id": call["id"], "stream": "stdout", "data": "x"})[:7])

    srv = fake(drop_on_call)
    with Client.connect(socket=srv.path, reconnect_timeout=0) as tv:
        with pytest.raises(toolvisor.ConnectionLost, match="middle of a frame"):
            tv.call("run_command", {"command": "true"}, stream=True)
        # The fake accepts one connection only: the next call finds nobody.
        srv.done.wait(WAIT)
        srv.sock.close()
        with pytest.raises(toolvisor.ConnectError):
            tv.ping()


def test_unknown_result_status_is_kept_and_is_not_ok(fake) -> None:
    def odd(conn: socket.socket) -> None:
        welcome(conn)
        call = read_frame(conn)
        assert call is not None
        conn.sendall(
            _core.encode_frame(
                {
                    "type": "result",
                    "id": call["id"],
                    "status": "exploded",
                    "content": "Error: ?",
                    "display": "",
                    "error": {"type": "Novel", "message": "?"},
                    "meta": {},
                    "duration_ms": 1,
                    "audit_seq": 3,
                    "future_field": [1, 2],
                }
            )
        )
        read_frame(conn)  # until the client leaves

    with Client.connect(socket=fake(odd).path) as tv:
        r = tv.call("ls", {"path": "."})
        assert r.status == "exploded" and not r.ok and r.error and r.error.type == "Novel"
        assert r.raw["future_field"] == [1, 2]
