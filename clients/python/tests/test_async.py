"""The asyncio client against a real daemon: concurrent calls on one connection,
streaming, cancel (explicit and by task cancellation), batches, confirmations,
grants, events. Each test runs its own event loop with a deadline."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, List

import pytest

import toolvisor
from toolvisor import AsyncClient, ConfirmRequest, Output

from conftest import Daemon

WAIT = 60


def run(make: Callable[[], Awaitable[Any]]) -> Any:
    """Run one test coroutine on a fresh loop, with a deadline."""

    async def bounded() -> Any:
        return await asyncio.wait_for(make(), WAIT * 2)

    return asyncio.run(bounded())


def test_connect_as_context_manager_and_awaitable(daemon: Daemon) -> None:
    async def body() -> None:
        async with AsyncClient.connect(socket=daemon.socket, client="aio") as tv:
            assert tv.welcome is not None and tv.welcome.tools == 19
            assert await tv.ping() >= 0
            assert len(await tv.tools(format="openai")) == 19
            st = await tv.status()
            assert {w.group for w in st.workers} == {"search", "edit", "exec", "web", "state", "meta"}
            assert all(w.state == "ready" and w.pid for w in st.workers), st.workers
        tv2 = await AsyncClient.connect(socket=daemon.socket)
        assert (await tv2.call("read_file", {"path": "README.md"})).ok
        await tv2.close()
        with pytest.raises(toolvisor.ClientClosed):
            await tv2.ping()
        with pytest.raises(toolvisor.ConnectError):
            await AsyncClient.connect(socket=daemon.workspace / "missing.sock")

    run(body)


def test_many_concurrent_calls_share_one_connection(daemon: Daemon) -> None:
    async def body() -> None:
        async with AsyncClient.connect(socket=daemon.socket) as tv:
            session = tv.welcome.session  # type: ignore[union-attr]
            calls = [tv.call("run_command", {"command": "echo %d" % n}) for n in range(24)]
            calls += [tv.call("read_file", {"path": "README.md"}) for _ in range(24)]
            results = await asyncio.gather(*calls)
            assert all(r.ok for r in results)
            assert [r.content for r in results[:24]] == ["%d\n" % n for n in range(24)]
            assert len({r.id for r in results}) == 48
            assert {r.meta["call_id"].split(":")[0] for r in results} == {session}

    run(body)


def test_a_fan_out_past_the_open_call_limit_gets_results_not_exceptions(daemon: Daemon) -> None:
    async def body() -> None:
        async with AsyncClient.connect(socket=daemon.socket) as tv:
            results = await asyncio.gather(*[tv.call("read_file", {"path": "README.md"}) for _ in range(150)])
            assert len({r.id for r in results}) == 150
            for r in results:  # 64 open calls at most (server.max_open_calls): the rest Overloaded
                assert r.ok or (r.status == "error" and r.error and r.error.type == "Overloaded"), r
            assert any(r.ok for r in results)

    run(body)


def test_a_blocked_call_does_not_hold_up_the_others(daemon: Daemon) -> None:
    async def body() -> None:
        async with AsyncClient.connect(socket=daemon.socket) as tv:
            slow = await tv.start("run_command", {"command": "echo started; exec sleep 600"}, stream=True)
            async for out in slow:
                assert out.data == "started\n"
                break
            # While it runs, other calls on the same connection come and go.
            quick = await asyncio.gather(*[tv.call("ls", {"path": "."}) for _ in range(5)])
            assert all(r.ok for r in quick) and not slow.done
            assert await slow.cancel() is True
            result = await slow.result(timeout=WAIT)
            assert result.status == "cancelled" and result.content == "started\n"

    run(body)


def test_streaming_to_a_coroutine_callback(daemon: Daemon) -> None:
    async def body() -> None:
        seen: List[Output] = []

        async def on_output(out: Output) -> None:
            seen.append(out)

        async with AsyncClient.connect(socket=daemon.socket) as tv:
            r = await tv.call("run_command", {"command": "echo a; echo b >&2"}, stream=on_output)
            assert r.ok
            assert sorted((o.stream, o.data) for o in seen) == [("stderr", "b\n"), ("stdout", "a\n")]

    run(body)


def test_cancelling_the_awaiting_task_cancels_the_call(daemon: Daemon) -> None:
    async def body() -> None:
        async with AsyncClient.connect(socket=daemon.socket) as tv, tv.subscribe("calls") as events:
            started = asyncio.Event()

            def on_output(out: Output) -> None:
                started.set()

            task = asyncio.ensure_future(
                tv.call("run_command", {"command": "echo go; exec sleep 600"}, stream=on_output)
            )
            await asyncio.wait_for(started.wait(), WAIT)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            while True:
                e = await events.next(timeout=WAIT)
                if e.event == "call_finished" and e["session"] == tv.welcome.session:  # type: ignore[union-attr]
                    assert e["tool"] == "run_command" and e["status"] == "cancelled"
                    break
            assert (await tv.call("ls", {"path": "."})).ok  # the connection is fine

    run(body)


def test_batch_in_order_and_as_results_arrive(daemon: Daemon) -> None:
    async def body() -> None:
        async with AsyncClient.connect(socket=daemon.socket) as tv:
            results = await tv.batch([("read_file", {"path": "README.md"}), ("read_file", {"path": "missing"})])
            assert [r.status for r in results] == ["ok", "error"]
            batch = await tv.start_batch([("ls", {"path": "."}), ("glob", {"pattern": "**/*.rs"})])
            arrived = [r async for r in batch]
            assert sorted(r.id for r in arrived) == sorted(batch.ids)
            assert [r.id for r in await batch.results()] == batch.ids

    run(body)


def test_on_confirm_as_a_coroutine_and_answered_elsewhere(daemon: Daemon) -> None:
    async def body() -> None:
        async with AsyncClient.connect(socket=daemon.socket, interactive=True) as agent:

            async def approve(req: ConfirmRequest) -> bool:
                decided = asyncio.get_running_loop().create_future()  # a real one asks someone
                decided.set_result(req.tool == "run_command")
                return await decided

            ok = await agent.call("run_command", {"command": "echo confirm-me async"}, on_confirm=approve)
            assert ok.ok and ok.content == "confirm-me async\n"
            denied = await agent.call("run_command", {"command": "echo confirm-me no"}, on_confirm=lambda r: False)
            assert denied.status == "denied" and denied.error and denied.error.type == "PolicyDenied"

            async with (
                AsyncClient.connect(socket=daemon.socket) as approver,
                approver.subscribe(["confirmations"]) as events,
            ):
                call = await agent.start(
                    "run_command", {"command": "echo confirm-me by another"}, on_confirm=lambda r: None
                )
                waiting = asyncio.ensure_future(call.result(timeout=WAIT))  # pumps on_confirm
                while True:
                    e = await events.next(timeout=WAIT)
                    if e.event == "confirm_required" and e["id"] == call.id:
                        break
                assert await approver.confirm(e["interaction"], True) is True
                result = await waiting
                assert result.ok and result.content == "confirm-me by another\n"

    run(body)


def test_grant_explain_and_protocol_errors(daemon: Daemon) -> None:
    async def body() -> None:
        async with AsyncClient.connect(socket=daemon.socket) as tv:
            token = await tv.grant("run_command", ttl_ms=60_000)
            r = await tv.call("run_command", {"command": "echo confirm-me token"}, confirm_token=token.token)
            assert r.ok
            with pytest.raises(toolvisor.UnknownMessage) as err:
                await tv.request({"type": "dance"}, "danced")
            assert err.value.id is not None
            with pytest.raises(toolvisor.BadMessage):
                await tv.call("ls", {"path": b"raw"})
            assert await tv.ping() >= 0

    run(body)
