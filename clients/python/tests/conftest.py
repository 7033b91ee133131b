"""Fixtures: a real ``toolvisor serve`` on a temporary workspace.

The binary is ``$TOOLVISOR_BIN`` (scripts/test.sh passes the one it just built), else
``target/debug/toolvisor`` of this checkout. Every wait has a deadline: the daemon's
start is awaited on its ``serving`` log line, its stop on its exit, and each test runs
under a watchdog that dumps every thread's stack and fails the run if it hangs.
"""

from __future__ import annotations

import faulthandler
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

REPO = Path(__file__).resolve().parents[3]
#: How long a debug daemon may take to start on a loaded 2-core machine.
START_DEADLINE = 60.0
#: How long a test may run before the watchdog ends the run.
TEST_DEADLINE = 180

#: run_command asks when the command contains ``confirm-me``, and is allowed otherwise;
#: the other tools follow the default mode (low risk allowed, medium asks): the
#: confined tier is off, so an edit asks as these tests expect.
POLICY = """
[policy]
confined = "ask"
confirm_timeout_ms = 60000

[[policy.rules]]
tool = "run_command"
action = "ask"
conditions = [{ param = "command", operator = "contains", value = "confirm-me" }]

[[policy.rules]]
tool = "run_command"
action = "allow"
"""


def toolvisor_bin() -> Path:
    """The daemon binary under test."""
    path = Path(os.environ.get("TOOLVISOR_BIN") or REPO / "target" / "debug" / "toolvisor")
    if not path.is_file():
        pytest.fail("no toolvisor binary at %s: build it (cargo build) or set TOOLVISOR_BIN" % path)
    return path


def client_env() -> Dict[str, str]:
    """The environment without a socket override (tests choose their socket)."""
    env = dict(os.environ)
    env.pop("TOOLVISOR_SOCKET", None)
    return env


class Daemon:
    """``toolvisor serve --workspace WS``, its log lines, start, stop and restart."""

    def __init__(self, workspace: Path, config: str = POLICY, env: Optional[Dict[str, str]] = None) -> None:
        self.workspace = workspace
        self.env = env or {}
        workspace.mkdir(parents=True, exist_ok=True)
        (workspace / "toolvisor.toml").write_text(config)
        self.proc: Optional[subprocess.Popen] = None
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()
        self.log: List[str] = []
        self._socket: Optional[Path] = None

    @property
    def socket(self) -> Path:
        """The socket path, as the daemon logged it when it began serving."""
        assert self._socket is not None, "the daemon has not served yet"
        return self._socket

    def start(self) -> "Daemon":
        """Start it; return once it serves and every worker is ready."""
        env = client_env()
        env.update(RUST_LOG="info", **self.env)
        self.proc = subprocess.Popen(
            [str(toolvisor_bin()), "serve", "--workspace", str(self.workspace)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.lines = queue.Queue()
        self._pump_thread = threading.Thread(target=self._pump, args=(self.proc, self.lines), daemon=True)
        self._pump_thread.start()
        serving = self.wait_log("serving", START_DEADLINE)
        found = re.search(r"socket=(\S+)", serving)
        assert found, "no socket in %r" % serving
        self._socket = Path(found.group(1))
        self.wait_ready(START_DEADLINE)
        return self

    def wait_ready(self, deadline: float) -> None:
        """Wait for the ``worker ready`` line of each worker that status does not
        show ready yet (the socket accepts before the workers are up)."""
        import toolvisor

        with toolvisor.Client.connect(socket=self.socket, timeout=deadline) as c:
            pending = {"group=%s index=%d" % (w.group, w.index) for w in c.status().workers if w.state != "ready"}
        end = time.monotonic() + deadline
        while pending:
            line = self.wait_log("worker ready", max(0.0, end - time.monotonic()))
            pending = {p for p in pending if p not in line}

    @staticmethod
    def _pump(proc: subprocess.Popen, lines: "queue.Queue[Optional[str]]") -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            lines.put(raw.decode("utf-8", "replace").rstrip("\n"))
        lines.put(None)

    def wait_log(self, needle: str, deadline: float) -> str:
        """The first log line (from now) containing ``needle``."""
        end = time.monotonic() + deadline
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                raise AssertionError("no log line with %r within %ss:\n%s" % (needle, deadline, self.tail())) from None
            if line is None:
                code = self.proc.wait() if self.proc else None
                raise AssertionError("the daemon exited (%s) before logging %r:\n%s" % (code, needle, self.tail()))
            self.log.append(line)
            if needle in line:
                return line

    def tail(self) -> str:
        """The last lines it logged (for failure messages)."""
        return "\n".join(self.log[-40:])

    def stop(self, deadline: float = 30.0) -> Optional[int]:
        """SIGTERM, and wait for the exit (SIGKILL past the deadline)."""
        return self._end(signal.SIGTERM, deadline)

    def kill9(self, deadline: float = 30.0) -> Optional[int]:
        """SIGKILL (no drain: the connections just end), and wait for the exit."""
        return self._end(signal.SIGKILL, deadline)

    def _end(self, sig: int, deadline: float) -> Optional[int]:
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(sig)
        try:
            code = proc.wait(timeout=deadline)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=deadline)
            raise AssertionError("the daemon did not stop within %ss of signal %d" % (deadline, sig)) from None
        finally:
            self._pump_thread.join(deadline)  # its log ends with the process
            assert proc.stderr is not None
            proc.stderr.close()
        return code

    def restart(self) -> None:
        """Stop it and start it again on the same workspace."""
        self.stop()
        self.start()


@pytest.fixture(autouse=True)
def watchdog() -> Iterator[None]:
    """Fail the run (with every thread's stack) if one test hangs."""
    faulthandler.dump_traceback_later(TEST_DEADLINE, exit=True, file=sys.stderr)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon shared by the tests of one module (with :data:`POLICY`)."""
    d = Daemon(tmp_path_factory.mktemp("ws")).start()
    (d.workspace / "README.md").write_text("# demo\nhello from the readme\n")
    (d.workspace / "src").mkdir()
    (d.workspace / "src" / "main.rs").write_text('fn main() {\n    println!("hello");\n}\n')
    yield d
    d.stop()


@pytest.fixture
def own_daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A daemon of the test's own (for restarts), stopped at the end."""
    d = Daemon(tmp_path / "ws").start()
    (d.workspace / "README.md").write_text("# own\n")
    yield d
    d.stop()
