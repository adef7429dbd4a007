//! `agent-worker record`: one model call against Bedrock (or the endpoint given), its raw
//! ConverseStream answer written as a fixture the stand-in replays byte for byte
//! (`Reply::Raw`), so drift between the stand-in and the live service shows when a fixture is
//! recorded again. The request is kept beside it; account ids are scrubbed, and no credential or
//! header is written. Without credentials it refuses, saying so, and sends nothing.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use agent_worker::engine::BedrockModel;
use agent_worker::engine::model::{CachePlan, Model, ModelEvent, ModelRequest, ToolChoice};
use agent_worker::session::Message;
use aws_credential_types::provider::ProvideCredentials as _;
use aws_sdk_bedrockruntime::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_bedrockruntime::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_types::body::SdkBody;
use base64::Engine as _;
use futures_util::StreamExt as _;
use serde_json::{Value, json};

use crate::failure::CliError;
use agent_worker::protocol::chain;

#[derive(Debug, clap::Args)]
pub(crate) struct RecordArgs {
    /// Where the fixture is written (JSON).
    #[arg(long)]
    out: std::path::PathBuf,
    /// What the person says in the recorded call.
    #[arg(
        long,
        default_value = "In one short sentence: what is a fixture in software testing?"
    )]
    prompt: String,
    #[command(flatten)]
    live: LiveArgs,
}

/// Where a live command calls Bedrock: the model, the endpoint, the region (`record`, `eval`).
#[derive(Debug, clap::Args)]
pub(crate) struct LiveArgs {
    /// The model, inference profile or ARN.
    #[arg(long, env = "MODEL_ID", default_value = "us.anthropic.claude-sonnet-4-6")]
    pub(crate) model_id: String,
    /// Bedrock Runtime's endpoint (the stand-in's, to try the command without an account).
    #[arg(long)]
    pub(crate) endpoint_url: Option<String>,
    /// The AWS region.
    #[arg(long, env = "AWS_REGION")]
    pub(crate) region: Option<String>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a call sent and got, as the wire carried it.
#[derive(Debug, Clone, Default)]
struct Recorder {
    request: Arc<Mutex<Vec<u8>>>,
    response: Arc<Mutex<Vec<u8>>>,
    content_type: Arc<Mutex<String>>,
}

impl Intercept for Recorder {
    fn name(&self) -> &'static str {
        "Recorder"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let (Some(bytes), Ok(mut kept)) = (context.request().body().bytes(), self.request.lock()) {
            *kept = bytes.to_vec();
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let response = context.response_mut();
        if let (Some(kind), Ok(mut kept)) = (response.headers().get("content-type"), self.content_type.lock())
        {
            *kept = kind.to_owned();
        }
        let body = std::mem::replace(response.body_mut(), SdkBody::taken());
        *response.body_mut() = SdkBody::from_body_1_x(Tee {
            inner: body,
            copy: self.response.clone(),
        });
        Ok(())
    }
}

/// A body that keeps a copy of every byte it passes on.
struct Tee {
    inner: SdkBody,
    copy: Arc<Mutex<Vec<u8>>>,
}

impl http_body::Body for Tee {
    type Data = bytes::Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let (Some(data), Ok(mut copy)) = (frame.data_ref(), self.copy.lock())
        {
            copy.extend_from_slice(data);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        http_body::Body::is_end_stream(&self.inner)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::Body::size_hint(&self.inner)
    }
}

/// Twelve-digit account ids, as `123456789012`.
fn scrubbed(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut digits = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        out.push_str(if digits.len() == 12 {
            "123456789012"
        } else {
            &digits
        });
        digits.clear();
        out.push(c);
    }
    out.pop();
    out
}

/// Refuses `command` when `shared` finds no AWS credentials, saying so: nothing is sent.
pub(crate) async fn require_credentials(
    shared: &aws_config::SdkConfig,
    command: &str,
) -> Result<(), CliError> {
    let credentials = match shared.credentials_provider() {
        Some(provider) => provider
            .provide_credentials()
            .await
            .map(|_| ())
            .map_err(|e| chain(&e)),
        None => Err("no credentials provider".to_owned()),
    };
    credentials.map_err(|why| {
        CliError::from(format!(
            "{command} needs AWS credentials for Bedrock (a profile, AWS_ACCESS_KEY_ID, or a role), and found none: {why}; nothing was sent"
        ))
    })
}

/// `agent-worker record`.
pub(crate) async fn record(args: RecordArgs) -> Result<(), CliError> {
    let shared = crate::aws_config(args.live.region.as_deref()).await?;
    require_credentials(&shared, "record").await?;
    let recorder = Recorder::default();
    let mut config = aws_sdk_bedrockruntime::config::Builder::from(&shared).interceptor(recorder.clone());
    if let Some(url) = &args.live.endpoint_url {
        config = config.endpoint_url(url);
    }
    let model = BedrockModel::new(
        aws_sdk_bedrockruntime::Client::from_conf(config.build()),
        &args.live.model_id,
    )
    .with_prompt_caching(false);
    let request = ModelRequest {
        system: vec!["You are a concise assistant.".to_owned()],
        messages: vec![Message::user_text(&args.prompt)],
        tools: Vec::new(),
        tool_choice: ToolChoice::Auto,
        max_tokens: 256,
        temperature: 0.2,
        cache: CachePlan::default(),
    };
    let mut said = String::new();
    let mut stream = model.stream(request);
    while let Some(event) = stream.next().await {
        match event {
            Ok(ModelEvent::TextDelta(text)) => said.push_str(&text),
            Ok(_) => {}
            Err(e) => return Err(CliError::from(format!("the recorded call failed: {e}"))),
        }
    }
    let take = |kept: &Arc<Mutex<Vec<u8>>>| kept.lock().map(|k| k.clone()).unwrap_or_default();
    let request_body: Value = serde_json::from_slice(&take(&recorder.request)).unwrap_or(Value::Null);
    let content_type = recorder
        .content_type
        .lock()
        .map(|c| c.clone())
        .unwrap_or_default();
    let fixture = json!({
        "recordedBy": "agent-worker record",
        "modelId": scrubbed(&args.live.model_id),
        "request": serde_json::from_str::<Value>(&scrubbed(&request_body.to_string())).unwrap_or(Value::Null),
        "response": {
            "contentType": content_type,
            "bodyBase64": base64::engine::general_purpose::STANDARD.encode(take(&recorder.response)),
        },
    });
    let text = serde_json::to_string_pretty(&fixture).map_err(|e| chain(&e))?;
    std::fs::write(&args.out, text + "\n")
        .map_err(|e| CliError::from(format!("{} cannot be written: {e}", args.out.display())))?;
    eprintln!(
        "recorded {} ({} characters said)",
        args.out.display(),
        said.chars().count()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::scrubbed;

    #[test]
    fn account_ids_are_scrubbed_and_other_numbers_kept() {
        assert_eq!(
            scrubbed("arn:aws:bedrock:us-east-1:987654321098:inference-profile/x 2026 1234567890123"),
            "arn:aws:bedrock:us-east-1:123456789012:inference-profile/x 2026 1234567890123"
        );
    }
}
