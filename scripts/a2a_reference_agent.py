"""a2a-sdk's own server, for the A2A TCK to run against beside ours: `python a2a_reference_agent.py
<port> <token>` (from the project's .venv; `A2A_TCK_SUT=reference make test-a2a` starts it).

The SDK's DefaultRequestHandlerV2 on an in-memory task store, its JSON-RPC and HTTP+JSON routes at
/a2a, its card at /.well-known/agent-card.json and /a2a/.well-known/agent-card.json, shaped as
`serve`'s is: both bindings, streaming, no push notifications, a bearer scheme that every request
but the card's must carry; a request with no A2A-Version header is taken as 1.0, as `serve` takes it. Its agent does what `serve` on the Bedrock stand-in does: the task
submitted, working, one artifact saying the words back, completed. A test that fails here and on
`serve` alike is the TCK's (conformance/a2a-tck-reference.txt keeps the run).
"""

import sys

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse

from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers.default_request_handler_v2 import DefaultRequestHandlerV2
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    Part,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
    TaskState,
    TaskStatus,
)

port, token = int(sys.argv[1]), sys.argv[2]
CARD_PATHS = ("/.well-known/agent-card.json", "/a2a/.well-known/agent-card.json")


class Echo(AgentExecutor):
    async def execute(self, context, event_queue):
        words = context.get_user_input()
        if context.current_task is None:
            await event_queue.enqueue_event(
                Task(
                    id=context.task_id,
                    context_id=context.context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    history=[context.message],
                )
            )
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.start_work()
        await updater.add_artifact([Part(text="echo: " + words)], name="answer")
        await updater.complete()

    async def cancel(self, context, event_queue):
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class AsServeTakesIt:
    """Every request but the card's must carry the bearer token; one that names no A2A-Version is
    taken as 1.0, as `serve` takes it (the TCK sends none, which the SDK alone reads as 0.3 and
    refuses with -32009: every call would fail on that, whatever the test)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if scope["path"] not in CARD_PATHS and headers.get(b"authorization") != f"Bearer {token}".encode():
                refusal = JSONResponse({"error": "unauthorized"}, status_code=401, headers={"WWW-Authenticate": "Bearer"})
                return await refusal(scope, receive, send)
            if b"a2a-version" not in headers:
                scope = dict(scope, headers=scope["headers"] + [(b"a2a-version", b"1.0")])
        await self.app(scope, receive, send)


url = f"http://localhost:{port}/a2a"
card = AgentCard(
    name="reference",
    description="a2a-sdk's own server, saying back what it is told.",
    version="1.0.0",
    supported_interfaces=[
        AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
        AgentInterface(url=url, protocol_binding="HTTP+JSON", protocol_version="1.0"),
    ],
    capabilities=AgentCapabilities(streaming=True, push_notifications=False),
    security_schemes={
        "bearer": SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer", bearer_format="JWT"))
    },
    security_requirements=[SecurityRequirement(schemes={"bearer": StringList()})],
    default_input_modes=["text/plain", "application/json"],
    default_output_modes=["text/plain", "application/json"],
    skills=[AgentSkill(id="converse", name="reference", description="Says back the words it was sent", tags=["conversation"])],
)
handler = DefaultRequestHandlerV2(Echo(), InMemoryTaskStore(), card)
routes = [r for path in CARD_PATHS for r in create_agent_card_routes(card, card_url=path)]
routes += create_jsonrpc_routes(handler, "/a2a") + create_rest_routes(handler, path_prefix="/a2a")
app = Starlette(routes=routes)
app.add_middleware(AsServeTakesIt)
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
