"""A WebSocket client (`websockets`, from the project's venv) run against AgentCore's `GET /ws`,
as an application behind AgentCore Runtime talks to its agent. The plan is the one argument:
{url, headers, steps: [{send, repeat, binary, until}]}: each step sends `send` (JSON as a text
message, with every `{fill}` in it replaced by `fill` x's; a string as it is, `repeat` times
over; with `binary`, its UTF-8 bytes as a binary message), then reads messages
until one is of kind `until`: a message `type` ("session", "turn", "command", "action",
"error"), "end" (an event that ends a turn: `completed` or `failed`, or `stream_ended`), or
"close" (the server closed the socket). Without `until`, it reads nothing. It prints one JSON
line: {frames, closed, reason} (every message read, and the close code and reason when the
server closed), or {error}."""

import asyncio
import json
import sys

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

ENDS = {"completed", "failed", "stream_ended"}


def kind(frame):
    if frame.get("type") == "event":
        return "end" if frame["event"].get("type") in ENDS else "event"
    return frame.get("type")


def closed_by_server(out, closed):
    out["closed"] = closed.rcvd.code if closed.rcvd else None
    out["reason"] = closed.rcvd.reason if closed.rcvd else None


async def main() -> None:
    plan = json.loads(sys.argv[1])
    out = {"frames": [], "closed": None, "reason": None}
    try:
        async with connect(plan["url"], additional_headers=plan.get("headers", {}), max_size=None) as ws:
            for step in plan["steps"]:
                if "send" in step:
                    message = step["send"]
                    if isinstance(message, str):
                        text = message * step.get("repeat", 1)
                    else:
                        text = json.dumps(message).replace("{fill}", "x" * step.get("fill", 0))
                    await ws.send(text.encode() if step.get("binary") else text)
                until = step.get("until")
                while until:
                    try:
                        frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
                    except ConnectionClosed as closed:
                        closed_by_server(out, closed)
                        break
                    out["frames"].append(frame)
                    if kind(frame) == until:
                        break
    except ConnectionClosed as closed:
        closed_by_server(out, closed)
    except Exception as e:  # what the client could not do is what the test looks at
        out["error"] = repr(e)
    print(json.dumps(out))


asyncio.run(main())
