"""The official A2A client (a2a-sdk, from the project's venv) against an agent, one scenario per
run: `python client.py '<plan JSON>'` with {url, token, scenario, text, contextId, binding, file}
(`binding`: the transport the client prefers, "JSONRPC" by default or "HTTP+JSON"; `file`:
{name, mediaType, text}, a file part sent with the message). It resolves
the agent card (parsed as the SDK's AgentCard), then:

- "send": sends a message without streaming and prints the task;
- "stream": sends a message streaming, prints each update, then gets the task and lists the
  context's tasks;
- "cancel": sends a message with returnImmediately, cancels the task, prints what cancel answered
  and the task as got after it;
- "answer": sends a message, then a second one on the task it made (taskId, contextId) saying
  `answer` (an approval's "approve" or "decline"), prints both answers, the task as got after
  them, and the context's tasks;
- "push": sends a message with `push` ({url, token}) as its push config (returnImmediately,
  so the task's updates reach the webhook alone), then on the task: creates a second config
  (`push2`, {id, url}), gets it, lists both, deletes it, lists again, and prints each answer;
- "card": prints the card, and with `cardKey` (a public key's PEM file) whether the SDK's own
  verifier takes its signature: `verified` true, or the verifier's error.

Prints one JSON object on stdout; on a failure {"error": "..."} and exit 1.
"""

import asyncio
import json
import sys
import traceback
import uuid

import httpx
from google.protobuf import json_format

from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskPushNotificationConfig,
)


def as_json(message):
    return json_format.MessageToDict(message)


async def run(plan):
    headers = {"Authorization": f"Bearer {plan['token']}"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        card = await A2ACardResolver(http, plan["url"]).get_agent_card()
        binding = plan.get("binding") or "JSONRPC"

        def client_of(streaming):
            config = ClientConfig(
                streaming=streaming, httpx_client=http, supported_protocol_bindings=[binding]
            )
            return ClientFactory(config).create(card)

        client = client_of(plan["scenario"] == "stream")
        message = Message(
            message_id=plan.get("messageId") or str(uuid.uuid4()),
            role=Role.ROLE_USER,
            parts=[Part(text=plan["text"])],
        )
        if plan.get("contextId"):
            message.context_id = plan["contextId"]
        if plan.get("file"):
            given = plan["file"]
            message.parts.append(
                Part(
                    raw=given["text"].encode(),
                    filename=given["name"],
                    media_type=given["mediaType"],
                )
            )
        out = {"card": as_json(card)}
        if plan["scenario"] == "card":
            if plan.get("cardKey"):
                from a2a.utils.signing import create_signature_verifier

                with open(plan["cardKey"]) as pem:
                    key = pem.read()
                try:
                    create_signature_verifier(lambda kid, jku: key, ["ES256"])(card)
                    out["verified"] = True
                except Exception as e:  # the verifier's refusal is what the test looks at
                    out["verified"] = f"{type(e).__name__}: {e}"
            return out
        if plan["scenario"] == "cancel":
            request = SendMessageRequest(
                message=message, configuration=SendMessageConfiguration(return_immediately=True)
            )
            client = client_of(False)
            started = [as_json(r) async for r in client.send_message(request)]
            task_id = started[-1]["task"]["id"]
            out["started"] = started
            out["canceled"] = as_json(await client.cancel_task(CancelTaskRequest(id=task_id)))
            out["got"] = as_json(await client.get_task(GetTaskRequest(id=task_id)))
            return out
        if plan["scenario"] == "push":
            return await push(client_of(False), message, plan, out)
        if plan["scenario"] == "answer":
            asked = [as_json(r) async for r in client.send_message(SendMessageRequest(message=message))]
            task = asked[-1]["task"]
            reply = Message(
                message_id=str(uuid.uuid4()),
                role=Role.ROLE_USER,
                parts=[Part(text=plan["answer"])],
                task_id=task["id"],
                context_id=task["contextId"],
            )
            out["asked"] = asked
            out["answered"] = [
                as_json(r) async for r in client.send_message(SendMessageRequest(message=reply))
            ]
            out["got"] = as_json(await client.get_task(GetTaskRequest(id=task["id"])))
            out["listed"] = as_json(
                await client.list_tasks(ListTasksRequest(context_id=task["contextId"]))
            )
            return out
        updates = [as_json(r) async for r in client.send_message(SendMessageRequest(message=message))]
        out["updates"] = updates
        last = updates[-1]
        task = last.get("task") or {}
        task_id = task.get("id") or (last.get("statusUpdate") or {}).get("taskId")
        context_id = task.get("contextId") or (last.get("statusUpdate") or {}).get("contextId")
        out["got"] = as_json(await client.get_task(GetTaskRequest(id=task_id)))
        out["listed"] = as_json(await client.list_tasks(ListTasksRequest(context_id=context_id)))
        return out


async def push(client, message, plan, out):
    from a2a.types.a2a_pb2 import (
        DeleteTaskPushNotificationConfigRequest,
        GetTaskPushNotificationConfigRequest,
        ListTaskPushNotificationConfigsRequest,
    )

    given = plan["push"]
    configuration = SendMessageConfiguration(
        return_immediately=True,
        task_push_notification_config=TaskPushNotificationConfig(
            url=given["url"], token=given.get("token", "")
        ),
    )
    started = [
        as_json(r)
        async for r in client.send_message(SendMessageRequest(message=message, configuration=configuration))
    ]
    task_id = started[-1]["task"]["id"]
    out["started"] = started
    second = plan["push2"]
    out["created"] = as_json(
        await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task_id, id=second["id"], url=second["url"])
        )
    )
    out["gotConfig"] = as_json(
        await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id=second["id"])
        )
    )
    listing = ListTaskPushNotificationConfigsRequest(task_id=task_id)
    out["listed"] = as_json(await client.list_task_push_notification_configs(listing))
    await client.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=task_id, id=second["id"])
    )
    out["listedAfterDelete"] = as_json(await client.list_task_push_notification_configs(listing))
    return out


def main():
    plan = json.loads(sys.argv[1])
    try:
        print(json.dumps(asyncio.run(run(plan))))
    except Exception:  # noqa: BLE001 - the test reads what failed
        print(json.dumps({"error": traceback.format_exc()}))
        sys.exit(1)


main()
