"""An A2A 1.0 agent on the official SDK (a2a-sdk's DefaultRequestHandlerV2, an in-memory task
store), for tests that call a remote agent: `python echo_agent.py <port> <token> [<signing key>]`
(with a signing key, an EC P-256 private key's PEM file, its card is signed by the SDK's own
signer, key id "echo"). It answers a
message with one artifact, `echo: <the words>`; a message saying "need input" ends its task
input-required with a question; one saying "fail" fails it. Every request must carry
`Authorization: Bearer <token>` (the card too), and it logs each message's id, context and words
as JSON lines on stdout for the test to read.
"""

import json
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse

from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers.default_request_handler_v2 import DefaultRequestHandlerV2
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)

port, token = int(sys.argv[1]), sys.argv[2]
signing_key = sys.argv[3] if len(sys.argv) > 3 else None


class Echo(AgentExecutor):
    async def execute(self, context, event_queue):
        words = context.get_user_input()
        message = context.message
        print(json.dumps({"messageId": message.message_id, "contextId": message.context_id, "words": words}), flush=True)
        await event_queue.enqueue_event(
            Task(
                id=context.task_id,
                context_id=context.context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                history=[message],
            )
        )
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.start_work()
        if "need input" in words:
            question = Message(message_id="q-" + message.message_id, role=Role.ROLE_AGENT, parts=[Part(text="Which account?")])
            await updater.requires_input(message=question)
            return
        if "fail" in words:
            await updater.failed(message=Message(message_id="f-" + message.message_id, role=Role.ROLE_AGENT, parts=[Part(text="cannot do that")]))
            return
        await updater.add_artifact([Part(text="echo: " + words)], name="answer")
        await updater.complete()

    async def cancel(self, context, event_queue):
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class Bearer(BaseHTTPMiddleware):
    async def dispatch(self, request, call_next):
        if request.headers.get("authorization") != f"Bearer {token}":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return await call_next(request)


card = AgentCard(
    name="echo",
    description="Repeats what it is told.",
    version="1.0.0",
    supported_interfaces=[AgentInterface(url=f"http://127.0.0.1:{port}/a2a", protocol_binding="JSONRPC", protocol_version="1.0")],
    capabilities=AgentCapabilities(streaming=True),
    default_input_modes=["text/plain"],
    default_output_modes=["text/plain"],
    skills=[AgentSkill(id="echo", name="echo", description="Says back the words it was sent", tags=["echo"])],
)
if signing_key:
    from a2a.utils.signing import create_agent_card_signer

    with open(signing_key) as pem:
        sign = create_agent_card_signer(pem.read(), {"alg": "ES256", "kid": "echo", "typ": "JOSE"})
    card = sign(card)
handler = DefaultRequestHandlerV2(Echo(), InMemoryTaskStore(), card)
app = Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/a2a"))
app.add_middleware(Bearer)
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
