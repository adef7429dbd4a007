"""The official MCP Python SDK's client (`mcp`, from the project's venv), run against
agent-worker's MCP server as an MCP host runs it: it connects over Streamable HTTP in the mode the
plan names (`auto`: `server/discover`, the stateless revision, falling back to `initialize`;
`legacy`: the handshake), lists the tools, and calls those the plan names. The plan is the one
argument: {url, headers, mode, elicit, calls: [{name, arguments}]} (with `elicit`, the client
declares elicitation and answers each one with that action: "accept", "decline" or "cancel"). It
prints one JSON line: {protocol, tools, results, elicited} (a call the client raised on is {thrown,
code}; `elicited` the elicitations' messages), or {error}."""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.types import ElicitResult
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    plan = json.loads(sys.argv[1])
    http = httpx2.AsyncClient(headers=plan.get("headers", {}), timeout=60)
    transport = streamable_http_client(plan["url"], http_client=http)
    elicited = []

    async def elicitation(_context, params):
        elicited.append(params.message)
        return ElicitResult(action=plan["elicit"])

    callbacks = {"elicitation_callback": elicitation} if plan.get("elicit") else {}
    try:
        async with Client(transport, mode=plan.get("mode", "auto"), **callbacks) as client:
            out = {"protocol": client.protocol_version}
            listed = await client.list_tools()
            out["tools"] = [tool.name for tool in listed.tools]
            out["results"] = []
            for call in plan.get("calls", []):
                try:
                    result = await client.call_tool(call["name"], call.get("arguments", {}))
                    out["results"].append(result.model_dump(by_alias=True, mode="json", exclude_none=True))
                except Exception as e:  # the client's own refusal is what the test looks at
                    error = getattr(e, "error", None)
                    out["results"].append({"thrown": str(e), "code": getattr(error, "code", None)})
            out["elicited"] = elicited
    except Exception as e:
        out = {"error": repr(e)}
    print(json.dumps(out))


asyncio.run(main())
