"""The synchronous client against a real daemon: every request, calls, streaming,
cancel, batches, confirmations, grants, events, protocol errors."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import List

import pytest

import toolvisor
from toolvisor import Client, ConfirmRequest, Output

from conftest import Daemon

#: Seconds any single wait of these tests may take.
WAIT = 60


@pytest.fixture
def tv(daemon: Daemon):
    with Client.connect(socket=daemon.socket, client="pytest") as c:
        yield c


@pytest.fixture
def agent(daemon: Daemon):
    """An interactive client: the daemon asks it to confirm."""
    with Client.connect(socket=daemon.socket, client="pytest-agent", interactive=True) as c:
        yield c


# ---------------------------------------------------------------- connecting


def test_connect_finds_the_workspace_from_a_subdirectory(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    sub = daemon.workspace / "src" / "deep" / "er"
    sub.mkdir(parents=True)
    monkeypatch.delenv("TOOLVISOR_SOCKET", raising=False)
    monkeypatch.chdir(sub)
    with toolvisor.connect(client="from-subdir") as c:
        assert c.socket_path == daemon.socket.resolve()
        assert c.call("read_file", {"path": "README.md"}).content == "# demo\nhello from the readme\n"


def test_socket_argument_beats_the_environment_which_beats_the_workspace(
    daemon: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLVISOR_SOCKET", str(daemon.socket))
    # The workspace given has no daemon; the environment names the real socket.
    with Client.connect(workspace=tmp_path) as c:
        assert c.ping() >= 0
    with pytest.raises(toolvisor.ConnectError):
        Client.connect(socket=tmp_path / "nothing.sock")


def test_welcome_ping_and_status(tv: Client) -> None:
    w = tv.welcome
    assert w.protocol == 1 and w.server.startswith("toolvisor/") and w.tools == 19
    assert tv.session == w.session and w.session
    assert 0 <= tv.ping() < WAIT
    st = tv.status()
    assert st.uptime_ms > 0
    assert {w.group for w in st.workers} == {"search", "edit", "exec", "web", "state", "meta"}
    assert all(w.state == "ready" and w.pid for w in st.workers), st.workers
    assert st.audit["path"].endswith("audit.jsonl") and st.audit["seq"] >= 0
    assert set(st.guards) >= {"landlock", "openat2", "subreaper", "cgroup"}


def test_tools_in_three_formats(tv: Client) -> None:
    native = tv.tools()
    names = [t["name"] for t in native]
    assert names == sorted(names) and len(names) == 19
    read = next(t for t in native if t["name"] == "read_file")
    assert read["group"] == "search" and read["risk"] == "low" and read["parameters"]["required"] == ["path"]
    shell = next(t for t in native if t["name"] == "run_command")
    assert shell["aliases"] == ["shell"]
    openai = tv.tools(format="openai")
    assert all(t["type"] == "function" and set(t["function"]) == {"name", "description", "parameters"} for t in openai)
    mcp = tv.tools(format="mcp")
    assert all("inputSchema" in t and "readOnlyHint" in t["annotations"] for t in mcp)
    assert {t["name"] for t in tv.tools(groups=["exec"])} == {
        "run_command",
        "list_processes",
        "read_output",
        "write_input",
        "kill_process",
    }
    with pytest.raises(ValueError):
        tv.tools(format="yaml")


# ---------------------------------------------------------------- calls


def test_the_protocol_documents_bytes_against_the_daemon(daemon: Daemon) -> None:
    """docs/PROTOCOL.md §2.1, byte for byte: an integer id comes back an integer."""
    import socket

    from toolvisor import _core

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(WAIT)
        s.connect(str(daemon.socket))
        s.sendall(_core.encode_frame(_core.hello_message("py", False)))
        s.sendall(_core.encode_frame({"type": "ping", "id": 7}))
        got = b""
        want = bytes.fromhex("0000000f82a474797065a4706f6e67a2696407")
        while not got.endswith(want):
            chunk = s.recv(4096)
            assert chunk, "the daemon closed the connection; got %r" % got
            got += chunk
        head = int.from_bytes(got[:4], "big")
        assert _core.decode_message(got[4 : 4 + head])["type"] == "welcome"
        assert got[4 + head :] == want


def test_the_five_search_tools(tv: Client) -> None:
    results = tv.batch(
        [
            ("ls", {"path": "."}),
            ("glob", {"pattern": "**/*"}),
            ("grep", {"pattern": "hello", "filePattern": "*.rs"}),
            ("read_file", {"path": "src/main.rs", "startLine": 2, "endLine": 2}),
            ("read_many_files", {"paths": ["README.md", "src/*.rs"]}),
        ]
    )
    assert all(r.ok for r in results), results
    ls, glob, grep, read, many = (r.content for r in results)
    assert "README.md" in ls.splitlines() and "src/" in ls.splitlines()
    assert "src/main.rs" in glob.splitlines()
    assert grep == 'src/main.rs:2:     println!("hello");'
    assert read == '    println!("hello");\n'
    assert many.startswith("=== README.md ===\n# demo\n") and "=== src/main.rs ===" in many


def test_a_failed_call_is_a_result_not_an_exception(tv: Client) -> None:
    ok = tv.call("read_file", {"path": "README.md", "startLine": 2})
    assert ok.ok and ok.status == "ok" and ok.content == "hello from the readme\n"
    assert ok.error is None and ok.truncated is None and ok.meta["lines"] == 1
    assert ok.audit_seq is not None and ok.duration_ms >= 0 and ok.raise_for_status() is ok

    outside = tv.call("read_file", {"path": "../outside"})
    assert outside.status == "error" and outside.error is not None
    assert outside.error.type == "PathOutsideWorkspace" and outside.content.startswith("Error: ")
    with pytest.raises(toolvisor.CallFailed) as failed:
        outside.raise_for_status()
    assert failed.value.result is outside

    missing = tv.call("reed_file", {"path": "README.md"})
    assert missing.status == "error" and missing.error and missing.error.type == "ToolNotFound"
    assert "read_file" in missing.error.message  # the daemon suggests close names

    invalid = tv.call("read_file", {})
    assert invalid.error and invalid.error.type == "InvalidParams"


def test_command_failure_and_deadline(tv: Client) -> None:
    failed = tv.call("run_command", {"command": "echo out; exit 3"})
    assert failed.status == "error" and failed.error and failed.error.type == "ShellExecutionError"
    assert failed.content.startswith("out") and failed.meta["exit_code"] == 3
    slow = tv.call("run_command", {"command": "exec sleep 600"}, timeout_ms=300)
    assert slow.status == "timeout" and slow.error and slow.error.type == "Timeout"


def test_truncated_output_names_the_full_file(tv: Client) -> None:
    r = tv.call("run_command", {"command": "seq 1 20000"})
    assert r.ok and r.truncated is not None
    assert r.truncated.omitted_bytes > 0 and r.truncated.omitted_lines > 0 and r.truncated.full_output
    full = tv.call("read_file", {"path": r.truncated.full_output, "startLine": 20000})
    assert full.content == "20000\n"


def test_streaming_as_an_iterator(tv: Client) -> None:
    call = tv.start("run_command", {"command": "echo one; echo two >&2; echo three"}, stream=True)
    chunks: List[Output] = list(call)
    assert call.done
    assert all(c.id == call.id for c in chunks)
    out = "".join(c.data for c in chunks if c.stream == "stdout")
    err = "".join(c.data for c in chunks if c.stream == "stderr")
    assert (out, err) == ("one\nthree\n", "two\n")
    result = call.result(timeout=WAIT)
    assert result.ok and sorted(result.content.splitlines()) == ["one", "three", "two"]


def test_streaming_to_a_callback_arrives_before_the_result(tv: Client) -> None:
    seen: List[Output] = []
    result = tv.call("run_command", {"command": "for i in 1 2 3; do echo line$i; done"}, stream=seen.append)
    assert result.ok
    assert "".join(o.data for o in seen) == "line1\nline2\nline3\n"
    # Without stream, nothing is streamed and the result still has the output.
    quiet = tv.start("run_command", {"command": "echo quiet"})
    assert list(quiet) == [] and quiet.result(WAIT).content == "quiet\n"


def test_cancel_a_running_call(tv: Client) -> None:
    call = tv.start("run_command", {"command": "echo started; exec sleep 600"}, stream=True)
    first = next(iter(call))
    assert first.data == "started\n"  # it is running now
    assert tv.cancel(call) is True
    result = call.result(timeout=WAIT)
    assert result.status == "cancelled" and result.error and result.error.type == "Cancelled"
    assert result.content.startswith("started")
    assert call.cancel() is False and tv.cancel(call.id) is False  # it has ended


def test_an_exception_in_a_callback_cancels_the_call(tv: Client) -> None:
    def boom(out: Output) -> None:
        raise RuntimeError("callback failed on %r" % out.data)

    with tv.subscribe("calls") as events:
        with pytest.raises(RuntimeError, match="callback failed"):
            tv.call("run_command", {"command": "echo started; exec sleep 600"}, stream=boom)
        while True:  # the call was cancelled, not left running
            e = events.next(timeout=WAIT)
            if e.event == "call_finished" and e["session"] == tv.session and e["tool"] == "run_command":
                assert e["status"] == "cancelled"
                break


def test_batch_results_come_in_request_order(tv: Client) -> None:
    results = tv.batch(
        [
            ("read_file", {"path": "README.md"}),
            {"tool": "glob", "args": {"pattern": "**/*.rs"}},
            {"tool": "read_file", "args": {"path": "nope.txt"}},
            ("run_command", {"command": "echo from-batch"}),
        ]
    )
    assert [r.status for r in results] == ["ok", "ok", "error", "ok"]
    assert results[0].content.startswith("# demo") and results[1].content == "src/main.rs"
    assert results[2].error and results[2].error.type == "FileNotFoundError"
    assert results[3].content == "from-batch\n"
    assert len({r.id for r in results}) == 4


def test_cancel_a_batch(tv: Client) -> None:
    started = []

    def on_output(out: Output) -> None:
        if out.data == "started\n":  # the command runs: cancel the whole batch
            started.append(out.id)
            assert batch.cancel() is True

    batch = tv.start_batch(
        [
            ("ls", {"path": "."}),
            ("run_command", {"command": "echo started; exec sleep 600"}),
            ("read_file", {"path": "README.md"}),
        ],
        stream=on_output,
    )
    results = batch.results(timeout=WAIT)
    assert [r.status for r in results] == ["ok", "cancelled", "cancelled"]
    assert started == [batch.ids[1]] and [r.id for r in results] == batch.ids
    assert batch.done and batch.cancel() is False


def test_calls_from_many_threads_share_one_connection(tv: Client) -> None:
    session = tv.session
    results = {}
    errors = []

    def work(n: int) -> None:
        try:
            results[n] = tv.call("run_command", {"command": "echo %d" % n})
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert not errors and len(results) == 16
    assert all(r.content == "%d\n" % n for n, r in results.items())
    assert len({r.id for r in results.values()}) == 16
    assert {r.meta["call_id"].split(":")[0] for r in results.values()} == {session}


# ---------------------------------------------------------------- confirmations


def test_on_confirm_approves(agent: Client) -> None:
    asked: List[ConfirmRequest] = []

    def approve(req: ConfirmRequest) -> bool:
        asked.append(req)
        return True

    result = agent.call("run_command", {"command": "echo confirm-me"}, on_confirm=approve)
    assert result.ok and result.content == "confirm-me\n"
    [req] = asked
    assert req.id == result.id and req.tool == "run_command" and req.risk == "high"
    assert req.preview == "echo confirm-me" and req.interaction and req.expires_in_ms > 0


def test_on_confirm_denies(agent: Client) -> None:
    result = agent.call("run_command", {"command": "echo confirm-me > denied.txt"}, on_confirm=lambda req: False)
    assert result.status == "denied" and result.error and result.error.type == "PolicyDenied"


def test_an_edit_asks_and_shows_its_diff(agent: Client, daemon: Daemon) -> None:
    previews: List[str] = []

    def approve(req: ConfirmRequest) -> bool:
        previews.append(req.preview or "")
        return True

    result = agent.call("write_file", {"path": "notes/new.txt", "content": "written\n"}, on_confirm=approve)
    assert result.ok and (daemon.workspace / "notes" / "new.txt").read_text() == "written\n"
    assert len(previews) == 1 and "+written" in previews[0]


def test_on_confirm_exception_denies_and_propagates(agent: Client) -> None:
    def broken(req: ConfirmRequest) -> bool:
        raise KeyError("no person here")

    call = agent.start("run_command", {"command": "echo confirm-me > never.txt"}, on_confirm=broken)
    with pytest.raises(KeyError):
        call.result(timeout=WAIT)
    result = call.result(timeout=WAIT)  # the handle goes on: the denial arrives
    assert result.status == "denied" and result.error and result.error.type == "PolicyDenied"


def test_on_confirm_none_leaves_it_to_another_connection(agent: Client, daemon: Daemon) -> None:
    asked: List[ConfirmRequest] = []
    with (
        Client.connect(socket=daemon.socket, client="approver") as approver,
        approver.subscribe(["confirmations"]) as events,
    ):
        call = agent.start(
            "run_command", {"command": "echo confirm-me elsewhere"}, on_confirm=lambda r: asked.append(r)
        )
        while True:
            e = events.next(timeout=WAIT)
            if e.event == "confirm_required" and e["id"] == call.id and e.get("preview") == "echo confirm-me elsewhere":
                break
        question = e.confirm_request()
        assert question.preview == "echo confirm-me elsewhere"
        assert approver.confirm(question.interaction, True) is True
        result = call.result(timeout=WAIT)
        assert result.ok and result.content == "confirm-me elsewhere\n"
        assert [q.interaction for q in asked] == [question.interaction]
        # Answering again: the interaction is over.
        with pytest.raises(toolvisor.UnknownInteraction):
            approver.confirm(question.interaction, False)


def test_a_non_interactive_client_is_never_asked(tv: Client) -> None:
    asked: List[ConfirmRequest] = []
    result = tv.call("run_command", {"command": "echo confirm-me"}, on_confirm=asked.append)
    assert result.status == "denied" and result.error and result.error.type == "ConfirmationRequired"
    assert asked == []


def test_grant_token_lets_a_call_pass_once(tv: Client) -> None:
    token = tv.grant(["run_command"], ttl_ms=60_000, paths=["."])
    assert len(token.token) >= 16 and token.expires_at.endswith("Z")
    result = tv.call("run_command", {"command": "echo confirm-me granted"}, confirm_token=token.token)
    assert result.ok and result.content == "confirm-me granted\n"
    again = tv.call("run_command", {"command": "echo confirm-me again"}, confirm_token=token.token)
    assert again.status == "denied" and again.error and again.error.type == "TokenInvalid"
    reusable = tv.grant("run_command", ttl_ms=60_000, reusable=True)
    for _ in range(2):
        assert tv.call("run_command", {"command": "echo confirm-me"}, confirm_token=reusable.token).ok
    with pytest.raises(toolvisor.BadMessage):
        tv.grant([], ttl_ms=1000)


def test_explain_decides_without_running(tv: Client, daemon: Daemon) -> None:
    ex = tv.explain("run_command", {"command": "echo confirm-me > explained.txt"})
    assert ex.decision == "ask" and ex.risk == "high" and ex.rule == 0
    assert not (daemon.workspace / "explained.txt").exists()
    assert tv.explain("ls", {"path": "."}).decision == "allow"
    bad = tv.explain("read_file", {})
    assert bad.decision == "error" and bad.error and bad.error.type == "InvalidParams"


# ---------------------------------------------------------------- events


def test_subscribe_sees_a_call_start_and_finish(tv: Client) -> None:
    with tv.subscribe("calls") as events:
        result = tv.call("ls", {"path": "."})
        seen = []
        while "call_finished" not in seen:
            e = events.next(timeout=WAIT)
            if e.get("id") == result.id and e.get("session") == tv.session:
                seen.append(e.event)
                if e.event == "call_finished":
                    assert e["status"] == "ok" and e.topic == "calls" and e.dropped == 0
        assert seen == ["call_started", "call_finished"]
    with pytest.raises(StopIteration):
        next(events)
    with pytest.raises(ValueError):
        tv.subscribe(["nope"])


def test_restart_a_group(tv: Client) -> None:
    before = {w.pid for w in tv.status().workers if w.group == "search"}
    tv.restart("search")
    after = {w.pid for w in tv.status().workers if w.group == "search"}
    assert before.isdisjoint(after) and len(after) == len(before)
    with pytest.raises(toolvisor.BadMessage):
        tv.restart("nope")


# ---------------------------------------------------------------- protocol errors


def test_unknown_message_echoes_the_id_and_keeps_the_connection(tv: Client) -> None:
    with pytest.raises(toolvisor.UnknownMessage) as err:
        tv.request({"type": "dance"}, "danced", timeout=WAIT)
    assert err.value.type == "UnknownMessage" and isinstance(err.value.id, str)
    assert tv.ping() >= 0


def test_bad_fields_are_bad_message_for_that_request_only(tv: Client) -> None:
    with pytest.raises(toolvisor.BadMessage):
        tv.call("read_file", {"path": b"bytes are not allowed in args"})
    with pytest.raises(TypeError):
        tv.call("read_file", {"path": object()})  # refused before sending
    with pytest.raises(TypeError):
        tv.call("read_file", ["not", "a", "map"])  # type: ignore[arg-type]
    assert tv.call("read_file", {"path": "README.md"}).ok


def test_a_frame_over_the_limit_closes_the_connection_and_the_next_call_reconnects(tv: Client) -> None:
    first = tv.session
    with pytest.raises(toolvisor.FrameTooLarge) as err:
        tv.call("write_file", {"path": "big.txt", "content": "x" * (9 << 20)})
    assert isinstance(err.value, toolvisor.ConnectionLost)
    assert tv.call("read_file", {"path": "README.md"}).ok
    assert tv.session != first


def test_a_closed_client_refuses_new_requests(daemon: Daemon) -> None:
    c = Client.connect(socket=daemon.socket)
    call = c.start("run_command", {"command": "echo started; exec sleep 600"}, stream=True)
    next(iter(call))
    c.close()
    with pytest.raises(toolvisor.ClientClosed):
        call.result(timeout=WAIT)
    with pytest.raises(toolvisor.ClientClosed):
        c.ping()


def test_env_is_not_needed_for_the_default_socket(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLVISOR_SOCKET", raising=False)
    with Client.connect(workspace=daemon.workspace) as c:
        assert Path(c.socket_path) == Path(os.path.realpath(daemon.socket))
