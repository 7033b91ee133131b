#!/usr/bin/env python3
"""An OpenAI-style tool loop on toolvisor: tools as OpenAI functions -> model -> tool
calls -> results back to the model, until it answers.

    python examples/python/openai_loop.py --self-test
        A scripted fake model, a daemon of its own on a temporary workspace: no network,
        no API key. Exits 0 when the loop behaved as expected.

    OPENAI_API_KEY=… python examples/python/openai_loop.py "What does this project do?"
        A real model (Chat Completions over HTTPS, standard library only; OPENAI_MODEL
        and OPENAI_BASE_URL are honoured) on the daemon of the current workspace.
        Add --interactive to be asked before calls the policy wants confirmed.

Several tool calls in one model turn run as one toolvisor batch. A call that fails or
is refused is not an exception: its `content` ("Error: …") goes back to the model,
which decides what to do next.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

try:
    import toolvisor
except ImportError:  # run from a checkout without `pip install ./clients/python`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python" / "src"))
    import toolvisor

Message = Dict[str, Any]
#: A model: (messages, tools in OpenAI format) -> the assistant's next message.
Model = Callable[[List[Message], List[Dict[str, Any]]], Message]

SYSTEM = (
    "You are a coding agent. Use the tools to look at the workspace before answering. "
    "Tool results that start with 'Error:' tell you what went wrong."
)


# ---------------------------------------------------------------- the loop


def run_tool_calls(tv: toolvisor.Client, calls: List[Dict[str, Any]], trace_id: str, on_confirm: Any) -> List[Message]:
    """Run a turn's tool calls (as one batch when there are several) and return the
    ``tool`` messages to append, in the order of the calls."""
    out: List[Optional[Message]] = [None] * len(calls)
    runnable = []
    for i, call in enumerate(calls):
        fn = call.get("function", {})
        try:
            args = json.loads(fn.get("arguments") or "{}")
            if not isinstance(args, dict):
                raise ValueError("the arguments are not a JSON object")
        except ValueError as e:
            out[i] = tool_message(call, "Error: invalid arguments for %s: %s" % (fn.get("name"), e))
            continue
        runnable.append((i, {"tool": fn.get("name", ""), "args": args, "trace_id": trace_id}))
    if len(runnable) == 1:
        i, spec = runnable[0]
        results = [tv.call(spec["tool"], spec["args"], trace_id=trace_id, on_confirm=on_confirm)]
    elif runnable:
        results = tv.batch([spec for _, spec in runnable], on_confirm=on_confirm)
    else:
        results = []
    for (i, _), result in zip(runnable, results):
        out[i] = tool_message(calls[i], result.content)
    return [m for m in out if m is not None]


def tool_message(call: Dict[str, Any], content: str) -> Message:
    """The message that gives a tool call's result back to the model."""
    return {"role": "tool", "tool_call_id": call["id"], "content": content}


def agent_loop(
    tv: toolvisor.Client, model: Model, question: str, max_turns: int = 8, on_confirm: Any = None
) -> List[Message]:
    """Ask ``model`` with the daemon's tools until it answers without tool calls;
    return the whole transcript (the last message is the answer)."""
    tools = tv.tools(format="openai")
    messages: List[Message] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    trace_id = "loop-%d" % os.getpid()
    for _ in range(max_turns):
        reply = model(messages, tools)
        messages.append(reply)
        calls = reply.get("tool_calls") or []
        if not calls:
            return messages
        messages.extend(run_tool_calls(tv, calls, trace_id, on_confirm))
    messages.append({"role": "assistant", "content": "(stopped after %d turns)" % max_turns})
    return messages


# ---------------------------------------------------------------- models


def tool_call(n: int, name: str, args: Dict[str, Any]) -> Dict[str, Any]:
    """A tool call as an OpenAI assistant message carries it."""
    return {"id": "call_%d" % n, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


class ScriptedModel:
    """A fake model that plays a fixed plan but reads the tool results it gets, as a
    real one would: list the Markdown files and grep for TODO (two calls in one turn:
    a batch); read the first file's title and try to count its lines with a shell
    command (which a non-interactive client may not run); then answer from what it saw."""

    def __init__(self) -> None:
        self.turn = 0

    def __call__(self, messages: List[Message], tools: List[Dict[str, Any]]) -> Message:
        names = {t["function"]["name"] for t in tools}
        assert {"glob", "grep", "read_file", "run_command"} <= names, "the daemon lists the tools"
        self.turn += 1
        results = [m["content"] for m in messages if m["role"] == "tool"]
        if self.turn == 1:
            return self._calls(tool_call(1, "glob", {"pattern": "**/*.md"}), tool_call(2, "grep", {"pattern": "TODO"}))
        if self.turn == 2:
            first = results[0].splitlines()[0]
            self.file = first
            self.todos = (
                0 if results[1].startswith("Error") else len([line for line in results[1].splitlines() if ":" in line])
            )
            return self._calls(
                tool_call(3, "read_file", {"path": first, "startLine": 1, "endLine": 1}),
                tool_call(4, "run_command", {"command": "wc -l %s" % first}),
                {"id": "call_5", "type": "function", "function": {"name": "ls", "arguments": "{not json"}},
            )
        title, shell, bad = results[2].strip(), results[3], results[4]
        refused = shell.startswith("Error")
        shell_note = (
            "I could not count its lines (%s)" % shell.splitlines()[0] if refused else "wc says " + shell.strip()
        )
        answer = "%s starts with %r; %d TODO line(s) in the workspace; %s; one call of mine had bad arguments (%s)." % (
            self.file,
            title,
            self.todos,
            shell_note,
            "reported" if bad.startswith("Error: invalid arguments") else "not reported",
        )
        return {"role": "assistant", "content": answer}

    @staticmethod
    def _calls(*calls: Dict[str, Any]) -> Message:
        return {"role": "assistant", "content": None, "tool_calls": list(calls)}


def openai_model(api_key: str, model: str, base_url: str) -> Model:
    """Chat Completions over HTTPS with the standard library (no SDK needed)."""

    def complete(messages: List[Message], tools: List[Dict[str, Any]]) -> Message:
        body = json.dumps({"model": model, "messages": messages, "tools": tools}).encode()
        req = urllib.request.Request(
            base_url.rstrip("/") + "/chat/completions",
            data=body,
            headers={"Authorization": "Bearer " + api_key, "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=120) as resp:
            msg = json.load(resp)["choices"][0]["message"]
        return {k: v for k, v in msg.items() if k in ("role", "content", "tool_calls")}

    return complete


def ask_on_terminal(request: toolvisor.ConfirmRequest) -> Optional[bool]:
    """``on_confirm`` for a person at a terminal: show the call, read y/N."""
    if not sys.stdin.isatty():
        return None  # leave it to `toolvisor approve`
    print("\n%s wants to run: %s" % (request.tool, request.preview or request.description), file=sys.stderr)
    return input("Allow? [y/N] ").strip().lower() in ("y", "yes")


# ---------------------------------------------------------------- self-test


def find_binary() -> str:
    """The daemon to start: $TOOLVISOR_BIN, `toolvisor` on PATH, or this checkout's build."""
    repo = Path(__file__).resolve().parents[2]
    for candidate in (
        os.environ.get("TOOLVISOR_BIN"),
        shutil.which("toolvisor"),
        str(repo / "target" / "debug" / "toolvisor"),
        str(repo / "target" / "release" / "toolvisor"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit("openai_loop: no toolvisor binary (set TOOLVISOR_BIN or build it)")


def start_daemon(binary: str, workspace: Path, deadline: float = 60.0) -> subprocess.Popen:
    """``toolvisor serve`` on ``workspace``; returns once it logs ``serving``. Its log
    is read to the end by a thread (a full pipe would stall the daemon)."""
    env = dict(os.environ, RUST_LOG="info")
    env.pop("TOOLVISOR_SOCKET", None)
    proc = subprocess.Popen(
        [binary, "serve", "--workspace", str(workspace)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    seen = threading.Event()  # set at "serving", or when the daemon's log ends
    serving: List[bool] = []

    def drain() -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            if b"serving" in raw and not serving:
                serving.append(True)
                seen.set()
        seen.set()

    threading.Thread(target=drain, daemon=True).start()
    if not seen.wait(deadline) or not serving:
        proc.kill()
        proc.wait()
        raise SystemExit("openai_loop: the daemon exited, or did not serve within %ss" % deadline)
    return proc


def self_test() -> int:
    """Run the loop with the scripted model on a throwaway workspace; 0 if it went as
    planned."""
    with tempfile.TemporaryDirectory(prefix="openai-loop-") as tmp:
        ws = Path(tmp)
        (ws / "README.md").write_text("# Demo project\n\nTODO: write docs\n")
        (ws / "docs").mkdir()
        (ws / "docs" / "notes.md").write_text("nothing to do here\n")
        proc = start_daemon(find_binary(), ws)
        try:
            with toolvisor.connect(workspace=ws, client="openai-loop-self-test") as tv:
                transcript = agent_loop(tv, ScriptedModel(), "What is this project, and what is left to do?")
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    answer = transcript[-1]["content"]
    print(json.dumps(transcript, indent=2))
    tool_msgs = [m for m in transcript if m["role"] == "tool"]
    checks = {
        "five tool results, in call order": [m["tool_call_id"] for m in tool_msgs]
        == ["call_%d" % n for n in range(1, 6)],
        "read the title": answer.startswith(
            "README.md starts with '# Demo project'; 1 TODO line(s) in the workspace; "
        ),
        "the shell command needed a confirmation": "I could not count its lines (Error: " in answer,
        "bad arguments reported to the model": answer.endswith("one call of mine had bad arguments (reported)."),
    }
    for what, passed in checks.items():
        print("%-4s %s" % ("ok" if passed else "FAIL", what), file=sys.stderr)
    ok = all(checks.values())
    print("self-test: %s" % ("ok" if ok else "FAILED"), file=sys.stderr)
    return 0 if ok else 1


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("question", nargs="?", default="Give me a short tour of this workspace.")
    p.add_argument("--self-test", action="store_true", help="scripted model, own daemon, no network")
    p.add_argument("--workspace", help="the workspace whose daemon to use (default: found from the cwd)")
    p.add_argument("--socket", help="the daemon's socket (default: from the workspace)")
    p.add_argument("--interactive", action="store_true", help="answer confirmations on this terminal")
    args = p.parse_args(argv)
    if args.self_test:
        return self_test()
    key = os.environ.get("OPENAI_API_KEY")
    if not key:
        print("openai_loop: set OPENAI_API_KEY to use a real model, or run --self-test", file=sys.stderr)
        return 2
    model = openai_model(
        key,
        os.environ.get("OPENAI_MODEL", "gpt-4o-mini"),
        os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
    )
    with toolvisor.connect(
        workspace=args.workspace, socket=args.socket, client="openai-loop", interactive=args.interactive
    ) as tv:
        transcript = agent_loop(tv, model, args.question, on_confirm=ask_on_terminal if args.interactive else None)
    print(transcript[-1].get("content") or "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
