"""examples/python/openai_loop.py: its self-test as a user runs it, and its loop
against the shared daemon with models that misbehave."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

from conftest import REPO, Daemon, client_env, toolvisor_bin

import toolvisor

EXAMPLE = REPO / "examples" / "python" / "openai_loop.py"


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("openai_loop", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_self_test_runs_without_network_or_key(tmp_path: Path) -> None:
    env = client_env()
    env.pop("OPENAI_API_KEY", None)
    env["TOOLVISOR_BIN"] = str(toolvisor_bin())
    env["TMPDIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--self-test"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.splitlines()[-1] == "self-test: ok"
    assert '"role": "tool"' in done.stdout


def test_without_a_key_it_says_how_to_run(tmp_path: Path) -> None:
    env = client_env()
    env.pop("OPENAI_API_KEY", None)
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 2 and "--self-test" in done.stderr


def test_the_loop_feeds_errors_back_and_stops_after_max_turns(daemon: Daemon) -> None:
    example = load_example()
    seen: List[List[Dict[str, Any]]] = []

    def stubborn(messages: List[Dict[str, Any]], tools: List[Dict[str, Any]]) -> Dict[str, Any]:
        seen.append([m for m in messages if m["role"] == "tool"])
        return {"role": "assistant", "content": None, "tool_calls": [example.tool_call(len(seen), "no_such_tool", {})]}

    with toolvisor.connect(socket=daemon.socket) as tv:
        transcript = example.agent_loop(tv, stubborn, "loop for ever", max_turns=3)
    assert len(seen) == 3
    assert transcript[-1]["content"] == "(stopped after 3 turns)"
    last_tool = [m for m in transcript if m["role"] == "tool"][-1]
    assert last_tool["content"].startswith("Error: ") and "no_such_tool" in last_tool["content"]
