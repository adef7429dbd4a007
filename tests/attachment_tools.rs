//! The attachment tools: offered only when the policy admits them, showing files to the model
//! alone; a file input checked before the call and named in the approval preview.

use crate::attachments::{PNG_1X1, SECRET_TEXT, completed_data, engine_with, files, put};
use crate::support;
use agent_worker::session::HistoryStore as _;

use std::sync::Arc;

use agent_worker::engine::AdmitClasses;
use agent_worker::engine::tools::{Effect, ToolClass, ToolSpec, tool_fn};
use agent_worker::protocol::{Agent, AgentEvent, AttachmentRef, AttachmentStatus, Prompt, Scope};
use agent_worker::session::MemoryStore;
use agent_worker_testkit::{self, BedrockStandIn, Reply, StreamScript, sid, tid};
use base64::Engine as _;
use futures_util::StreamExt;
use serde_json::json;

#[tokio::test]
async fn attachment_tools_are_offered_only_when_admitted_and_show_files_to_the_model_only() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let files = files();
    let png = base64::engine::general_purpose::STANDARD.decode(PNG_1X1).unwrap();
    put(&files, "conv-t", "p1", "dot.png", "image/png", &png);
    let report = put(
        &files,
        "conv-t",
        "d1",
        "report.pdf",
        "application/pdf",
        &agent_worker_testkit::files::pdf(&[SECRET_TEXT]),
    );
    put(
        &files,
        "elsewhere",
        "x1",
        "theirs.txt",
        "text/plain",
        b"not yours",
    );

    // Without a policy that admits the class, the tools are not offered.
    let plain = engine_with(&bedrock, &store, &files, support::config(), None, Vec::new());
    bedrock.push(Reply::text("Hello."));
    plain
        .invoke(
            Scope::new("conv-t".parse().unwrap()).with_turn_id(tid("t0")),
            Prompt::text("Hi"),
        )
        .collect::<Vec<_>>()
        .await;
    assert!(bedrock.requests()[0].body.get("toolConfig").is_none());

    let engine = engine_with(
        &bedrock,
        &store,
        &files,
        support::config(),
        Some(AdmitClasses(vec![ToolClass::Attachment])),
        Vec::new(),
    );
    bedrock.push(Reply::tool_call("c-list", "attachment_list", "{}"));
    bedrock.push(
        StreamScript::new()
            .tool_use("c-view", "attachment_view", r#"{"id":"p1"}"#, 1)
            .tool_use("c-read", "attachment_read", r#"{"id":"d1"}"#, 1)
            .tool_use("c-theirs", "attachment_read", r#"{"id":"x1"}"#, 1)
            .stop("tool_use")
            .into_reply(),
    );
    bedrock.push(Reply::text("A dot, and the numbers."));
    let events: Vec<AgentEvent> = engine
        .invoke(
            Scope::new("conv-t".parse().unwrap()).with_turn_id(tid("t1")),
            Prompt::text("What did I send?"),
        )
        .collect()
        .await;
    completed_data(&events);
    let requests = bedrock.requests();
    let offered: Vec<&str> = requests[1].body["toolConfig"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["toolSpec"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, ["attachment_list", "attachment_view", "attachment_read"]);

    let listed = &requests[2].body["messages"].as_array().unwrap()[4]["content"][0]["toolResult"];
    let names: Vec<&str> = listed["content"][0]["json"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["report.pdf", "dot.png"]);

    // The last step's user message: three results, then what two calls showed.
    let last = requests[3].body["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(last.len(), 3 + 2 + 1, "{last:#?}");
    assert_eq!(
        last[0]["toolResult"]["content"][0]["json"]["shown"]["name"],
        "dot.png"
    );
    assert_eq!(
        last[1]["toolResult"]["content"][0]["json"]["read"],
        report.summary()
    );
    assert_eq!(last[2]["toolResult"]["status"], "error");
    assert!(
        last[2]["toolResult"]["content"][0]["json"]["error"]
            .as_str()
            .unwrap()
            .contains("not available: gone"),
        "another conversation's file is not reached: {}",
        last[2]
    );
    assert_eq!(
        last[3]["text"],
        json!(format!(
            "[attachment {}]",
            json!({"id":"p1","name":"dot.png","type":"image/png","size":png.len()})
        ))
    );
    assert_eq!(last[4]["image"]["source"]["bytes"], PNG_1X1);
    assert_eq!(
        last[5]["text"],
        json!(format!(
            "{}\n<attachment>\n{SECRET_TEXT}\n</attachment>",
            report.reference_line()
        ))
    );

    // Stored history and events hold the references, never the picture or the text.
    let stored = serde_json::to_string(&store.load_history(&sid("conv-t")).await.unwrap()).unwrap();
    assert!(stored.contains("report.pdf") && stored.contains("\"c-view\""));
    assert!(
        !stored.contains(PNG_1X1) && !stored.contains(SECRET_TEXT),
        "{stored}"
    );
    let streamed = serde_json::to_string(
        &events
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect::<Vec<_>>(),
    )
    .unwrap();
    assert!(!streamed.contains(PNG_1X1) && !streamed.contains(SECRET_TEXT));
    assert!(completed_data(&events)["estimatedFileTokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn a_file_input_is_checked_before_the_call_and_named_in_the_approval_preview() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let files = files();
    let report = put(
        &files,
        "conv-f",
        "d1",
        "report.pdf",
        "application/pdf",
        &agent_worker_testkit::files::pdf(&["Invoice 7"]),
    );
    put(&files, "conv-f", "t1", "notes.txt", "text/plain", b"notes");
    let mut pending = AttachmentRef::new("w1", "wait.pdf", "application/pdf", 3);
    pending.status = AttachmentStatus::Pending;
    files.area.put("conv-f", &pending, b"%PD").unwrap();
    put(
        &files,
        "elsewhere",
        "o1",
        "other.pdf",
        "application/pdf",
        b"%PDF-",
    );
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = sent.clone();
    let send = tool_fn(
        ToolSpec::new(
            "send_report",
            "Sends a report to the accountant.",
            json!({"type": "object", "properties": {
                "report": {"type": "string", "title": "Report", "format": "oui-attachment", "contentMediaType": "application/pdf"}
            }, "required": ["report"]}),
        )
        .effect(Effect::Transaction),
        move |_, _| {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { Ok(json!({"sent": true})) }
        },
    );
    let engine = engine_with(
        &bedrock,
        &store,
        &files,
        support::config(),
        None,
        vec![Arc::new(send)],
    );
    bedrock.push(
        StreamScript::new()
            .tool_use("c-txt", "send_report", r#"{"report":"t1"}"#, 1)
            .tool_use("c-other", "send_report", r#"{"report":"o1"}"#, 1)
            .tool_use("c-wait", "send_report", r#"{"report":"w1"}"#, 1)
            .tool_use("c-pdf", "send_report", r#"{"report":"d1"}"#, 1)
            .stop("tool_use")
            .into_reply(),
    );
    let events: Vec<AgentEvent> = engine
        .invoke(
            Scope::new("conv-f".parse().unwrap())
                .with_turn_id(tid("t1"))
                .with("userId", "ada"),
            Prompt::text("Send my report."),
        )
        .collect()
        .await;
    let errors: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolEnded {
                is_error: true,
                content,
                ..
            } => Some(content["error"].as_str().unwrap().to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 3, "{events:#?}");
    assert!(
        errors[0].contains("/report: file \"t1\" is text/plain, and this input takes application/pdf"),
        "{}",
        errors[0]
    );
    assert!(
        errors[1].contains("not a usable file of this conversation (gone)"),
        "{}",
        errors[1]
    );
    assert!(errors[2].contains("(pending)"), "{}", errors[2]);
    let approval = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::Other(raw) if raw["type"] == "approval_required" => Some(raw.clone()),
            _ => None,
        })
        .expect("the good call waits for approval");
    assert_eq!(approval["callId"], "c-pdf");
    let field = &approval["preview"]["fields"][0];
    assert_eq!(field["label"], "Report");
    assert_eq!(field["files"][0]["name"], "report.pdf");
    assert_eq!(field["files"][0]["size"], report.size);
    assert_eq!(
        sent.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "nothing ran before approval"
    );
}
