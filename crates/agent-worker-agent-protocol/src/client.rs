//! A typed Agent Protocol v1 client; each method is named after its `operationId`.

use std::fmt;

use bytes::Bytes;
use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::types::{
    Artifact, ArtifactUpload, PageRequest, Step, StepRequestBody, Task, TaskArtifactsListResponse,
    TaskListResponse, TaskRequestBody, TaskStepsListResponse,
};

/// What a call came to when it did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// 404: no such task, step or artifact.
    #[error("not found: {message}")]
    NotFound {
        /// The server's message.
        message: String,
    },
    /// 422: the server could not decode the request.
    #[error("unprocessable: {message}")]
    Unprocessable {
        /// The server's message.
        message: String,
    },
    /// Any other status (500: the agent failed).
    #[error("the server answered {status}: {message}")]
    Server {
        /// The status.
        status: StatusCode,
        /// The server's message, or the body as text.
        message: String,
    },
    /// The request did not reach the server or its answer did not arrive.
    #[error("the request failed")]
    Transport(#[from] reqwest::Error),
    /// A request body did not encode.
    #[error("the request does not encode")]
    Encode(#[source] serde_json::Error),
    /// The answer was not what the operation returns.
    #[error("the answer does not decode")]
    Decode(#[source] serde_json::Error),
    /// The base URL cannot take a path.
    #[error("the base URL {0} cannot take a path")]
    BaseUrl(String),
    /// The base URL given is not a URL.
    #[error("the base URL {url} is not a URL")]
    NotAUrl {
        /// The base URL, as given.
        url: String,
        /// Why it is not one.
        #[source]
        cause: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A client of one Agent Protocol server. Cheap to clone.
///
/// ```no_run
/// use agent_worker_agent_protocol::{AgentProtocolClient, StepRequestBody, TaskRequestBody};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = AgentProtocolClient::new("http://127.0.0.1:8000")?;
/// let task = client
///     .create_agent_task(&TaskRequestBody::new("Write 'Washington' to output.txt"))
///     .await?;
/// let step = client.execute_agent_task_step(&task.task_id, None).await?;
/// println!("{}", step.output.unwrap_or_default());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AgentProtocolClient {
    http: reqwest::Client,
    base: Url,
}

impl fmt::Debug for AgentProtocolClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentProtocolClient")
            .field("base", &self.base.as_str())
            .finish_non_exhaustive()
    }
}

impl AgentProtocolClient {
    /// A client of the server at `base_url` (such as `http://localhost:8000`).
    pub fn new(base_url: &str) -> Result<Self, ClientError> {
        Self::with_http(reqwest::Client::new(), base_url)
    }

    /// The same, over `http` (for timeouts, proxies and TLS settings of your own).
    pub fn with_http(http: reqwest::Client, base_url: &str) -> Result<Self, ClientError> {
        let base = Url::parse(base_url).map_err(|cause| ClientError::NotAUrl {
            url: base_url.to_owned(),
            cause: Box::new(cause),
        })?;
        if base.cannot_be_a_base() {
            return Err(ClientError::BaseUrl(base_url.to_owned()));
        }
        Ok(Self { http, base })
    }

    /// `POST /ap/v1/agent/tasks`
    pub async fn create_agent_task(&self, body: &TaskRequestBody) -> Result<Task, ClientError> {
        self.json(Method::POST, &[], None, Some(body)).await
    }

    /// `GET /ap/v1/agent/tasks`
    pub async fn list_agent_tasks(&self, page: PageRequest) -> Result<TaskListResponse, ClientError> {
        self.json(Method::GET, &[], Some(page), None::<&()>).await
    }

    /// `GET /ap/v1/agent/tasks/{task_id}`
    pub async fn get_agent_task(&self, task_id: &str) -> Result<Task, ClientError> {
        self.json(Method::GET, &[task_id], None, None::<&()>).await
    }

    /// `GET /ap/v1/agent/tasks/{task_id}/steps`
    pub async fn list_agent_task_steps(
        &self,
        task_id: &str,
        page: PageRequest,
    ) -> Result<TaskStepsListResponse, ClientError> {
        self.json(Method::GET, &[task_id, "steps"], Some(page), None::<&()>)
            .await
    }

    /// `POST /ap/v1/agent/tasks/{task_id}/steps`; `None` sends no body.
    pub async fn execute_agent_task_step(
        &self,
        task_id: &str,
        body: Option<&StepRequestBody>,
    ) -> Result<Step, ClientError> {
        self.json(Method::POST, &[task_id, "steps"], None, body).await
    }

    /// `GET /ap/v1/agent/tasks/{task_id}/steps/{step_id}`
    pub async fn get_agent_task_step(&self, task_id: &str, step_id: &str) -> Result<Step, ClientError> {
        self.json(Method::GET, &[task_id, "steps", step_id], None, None::<&()>)
            .await
    }

    /// `GET /ap/v1/agent/tasks/{task_id}/artifacts`
    pub async fn list_agent_task_artifacts(
        &self,
        task_id: &str,
        page: PageRequest,
    ) -> Result<TaskArtifactsListResponse, ClientError> {
        self.json(Method::GET, &[task_id, "artifacts"], Some(page), None::<&()>)
            .await
    }

    /// `POST /ap/v1/agent/tasks/{task_id}/artifacts`: a `file` part and, when given, a
    /// `relative_path` field.
    pub async fn upload_agent_task_artifacts(
        &self,
        task_id: &str,
        upload: ArtifactUpload,
    ) -> Result<Artifact, ClientError> {
        let file = reqwest::multipart::Part::bytes(upload.content).file_name(upload.file_name);
        let mut form = reqwest::multipart::Form::new().part("file", file);
        if let Some(relative_path) = upload.relative_path {
            form = form.text("relative_path", relative_path);
        }
        let url = self.url(&[task_id, "artifacts"], None)?;
        let response = self.http.post(url).multipart(form).send().await?;
        decode(checked(response).await?).await
    }

    /// `GET /ap/v1/agent/tasks/{task_id}/artifacts/{artifact_id}`: the file's bytes.
    pub async fn download_agent_task_artifact(
        &self,
        task_id: &str,
        artifact_id: &str,
    ) -> Result<Bytes, ClientError> {
        let url = self.url(&[task_id, "artifacts", artifact_id], None)?;
        let response = self.http.get(url).send().await?;
        Ok(checked(response).await?.bytes().await?)
    }

    /// The URL of `/ap/v1/agent/tasks/<segments…>`, each segment percent-encoded.
    fn url(&self, segments: &[&str], page: Option<PageRequest>) -> Result<Url, ClientError> {
        let mut url = self.base.clone();
        {
            let mut path = url
                .path_segments_mut()
                .map_err(|()| ClientError::BaseUrl(self.base.to_string()))?;
            path.pop_if_empty()
                .extend(["ap", "v1", "agent", "tasks"])
                .extend(segments);
        }
        if let Some(page) = page {
            url.query_pairs_mut()
                .append_pair("current_page", &page.current_page.to_string())
                .append_pair("page_size", &page.page_size.to_string());
        }
        Ok(url)
    }

    async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        page: Option<PageRequest>,
        body: Option<&impl Serialize>,
    ) -> Result<T, ClientError> {
        let mut request = self.http.request(method, self.url(segments, page)?);
        if let Some(body) = body {
            let text = serde_json::to_vec(body).map_err(ClientError::Encode)?;
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(text);
        }
        decode(checked(request.send().await?).await?).await
    }
}

/// The response when it succeeded; the typed error otherwise.
async fn checked(response: reqwest::Response) -> Result<reqwest::Response, ClientError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let text = response.text().await.unwrap_or_default();
    let message = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
        .unwrap_or(text);
    Err(match status {
        StatusCode::NOT_FOUND => ClientError::NotFound { message },
        StatusCode::UNPROCESSABLE_ENTITY => ClientError::Unprocessable { message },
        status => ClientError::Server { status, message },
    })
}

async fn decode<T: DeserializeOwned>(response: reqwest::Response) -> Result<T, ClientError> {
    let bytes = response.bytes().await?;
    serde_json::from_slice(&bytes).map_err(ClientError::Decode)
}
