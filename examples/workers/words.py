#!/usr/bin/env python3
"""An external toolvisor worker: a few text tools, served over the worker protocol.

Configure it in toolvisor.toml (PYTHONPATH only if the `toolvisor` package is not
installed; `pip install ./clients/python` installs it):

    [workers.words]
    command = ["python3", "examples/workers/words.py"]
    env = { PYTHONPATH = "clients/python/src" }
    risk = "low"

Its tools then appear in `toolvisor tools` beside the built-in ones, and every call is
validated against the schema below, decided by the policy and audited before this
program sees it. docs/PROTOCOL.md, "Worker protocol", describes the frames.
"""

import os
import time

from toolvisor.worker import Tool, ToolFailure, Worker


def word_count(args, ctx):
    words = args["text"].split()
    return f"{len(words)} words"


def line_count(args, ctx):
    """Lines of a workspace file. The policy already refused paths outside every
    root; the worker still resolves symlinks itself before it reads."""
    root = os.path.realpath(ctx.init["roots"]["private"])
    path = os.path.realpath(os.path.join(root, args["path"]))
    if os.path.commonpath([root, path]) != root:
        raise ToolFailure("PathOutsideWorkspace", f"{args['path']} is outside the workspace")
    try:
        with open(path, "rb") as f:
            return f"{sum(1 for _ in f)} lines"
    except FileNotFoundError:
        raise ToolFailure("FileNotFoundError", f"{args['path']} does not exist")


def slow_echo(args, ctx):
    """Echo `text` after `seconds`, streaming a dot a tenth of a second; stops on cancel."""
    end = time.monotonic() + args.get("seconds", 1)
    while time.monotonic() < end:
        ctx.check()
        ctx.output(".")
        time.sleep(0.1)
    return args["text"]


def obj(properties, required):
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}


TOOLS = [
    Tool("word_count", "Count the words of a text.",
         obj({"text": {"type": "string"}}, ["text"]), word_count, risk="low", read_only=True),
    Tool("line_count", "Count the lines of a workspace file.",
         obj({"path": {"type": "string", "minLength": 1}}, ["path"]), line_count,
         risk="low", read_only=True, paths=["path"]),
    Tool("slow_echo", "Echo a text after a delay, streaming progress dots.",
         obj({"text": {"type": "string"},
              "seconds": {"type": "number", "minimum": 0, "maximum": 60}}, ["text"]),
         slow_echo, risk="low", read_only=True),
]

if __name__ == "__main__":
    Worker(TOOLS).run()
