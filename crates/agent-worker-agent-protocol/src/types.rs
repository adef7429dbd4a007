//! The wire types of Agent Protocol v1, each beside the schema the OpenAPI document declares for
//! it, so the two are written once and a test holds them together.
//!
//! Fields are snake_case. An optional field is an `Option`: a missing key and `null` both decode
//! to `None`, and `None` encodes as a missing key.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Free-form JSON input or output (`TaskInput`, `StepInput`, `StepOutput`): any object.
pub type JsonObject = Map<String, Value>;

/// A type the OpenAPI document declares under `components/schemas`.
pub(crate) trait ApiSchema {
    /// Its name under `components/schemas`.
    const NAME: &'static str;
    /// Its schema (OpenAPI 3.0).
    fn schema() -> Value;
}

/// A `$ref` to a component schema.
pub(crate) fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

/// The body of `createAgentTask`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskRequestBody {
    /// The task's prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// Anything else the agent takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_input: Option<JsonObject>,
}

impl TaskRequestBody {
    /// A body with `input`.
    pub fn new(input: impl Into<String>) -> Self {
        Self {
            input: Some(input.into()),
            additional_input: None,
        }
    }
}

impl ApiSchema for TaskRequestBody {
    const NAME: &'static str = "TaskRequestBody";
    fn schema() -> Value {
        json!({
            "description": "Body of the task request.",
            "type": "object",
            "properties": {
                "input": { "description": "Input prompt for the task.", "type": "string", "nullable": true },
                "additional_input": schema_ref("TaskInput"),
            },
        })
    }
}

/// The body of `executeAgentTaskStep`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepRequestBody {
    /// The step's prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// Anything else the step takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_input: Option<JsonObject>,
}

impl StepRequestBody {
    /// A body with `input`.
    pub fn new(input: impl Into<String>) -> Self {
        Self {
            input: Some(input.into()),
            additional_input: None,
        }
    }
}

impl ApiSchema for StepRequestBody {
    const NAME: &'static str = "StepRequestBody";
    fn schema() -> Value {
        json!({
            "description": "Body of the task request.",
            "type": "object",
            "properties": {
                "input": { "description": "Input prompt for the step.", "type": "string", "nullable": true },
                "additional_input": schema_ref("StepInput"),
            },
        })
    }
}

/// A file created by or uploaded to the agent. Its content lives at
/// `<workspace>/<task_id>/<relative_path>/<file_name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// Its id.
    pub artifact_id: String,
    /// Whether the agent made it (rather than a caller uploading it).
    pub agent_created: bool,
    /// Its file name.
    pub file_name: String,
    /// Its folder in the task's workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relative_path: Option<String>,
}

impl Artifact {
    /// An artifact the agent made, with a new id.
    pub fn agent_created(file_name: impl Into<String>, relative_path: Option<String>) -> Self {
        Self {
            artifact_id: uuid::Uuid::now_v7().to_string(),
            agent_created: true,
            file_name: file_name.into(),
            relative_path,
        }
    }
}

impl ApiSchema for Artifact {
    const NAME: &'static str = "Artifact";
    fn schema() -> Value {
        json!({
            "description": "An Artifact either created by or submitted to the agent.",
            "type": "object",
            "properties": {
                "artifact_id": { "description": "ID of the artifact.", "type": "string" },
                "agent_created": { "description": "Whether the artifact has been created by the agent.", "type": "boolean" },
                "file_name": { "description": "Filename of the artifact.", "type": "string" },
                "relative_path": { "description": "Relative path of the artifact in the agent's workspace.", "type": "string", "nullable": true },
            },
            "required": ["artifact_id", "agent_created", "file_name"],
        })
    }
}

/// A task: what a caller asked for, and the artifacts it holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// Its id.
    pub task_id: String,
    /// The task's prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// Anything else the caller gave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_input: Option<JsonObject>,
    /// The artifacts uploaded to it and made by its steps, oldest first.
    #[serde(default)]
    pub artifacts: Vec<Artifact>,
}

impl ApiSchema for Task {
    const NAME: &'static str = "Task";
    fn schema() -> Value {
        json!({
            "allOf": [
                schema_ref(TaskRequestBody::NAME),
                {
                    "type": "object",
                    "description": "Definition of an agent task.",
                    "required": ["task_id", "artifacts"],
                    "properties": {
                        "task_id": { "description": "The ID of the task.", "type": "string" },
                        "artifacts": {
                            "description": "A list of artifacts that the task has produced.",
                            "type": "array",
                            "items": schema_ref(Artifact::NAME),
                            "default": [],
                        },
                    },
                },
            ],
        })
    }
}

/// Where a step is. Every step this server stores is [`Completed`](StepStatus::Completed): a
/// step runs within its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Not started.
    Created,
    /// Running.
    Running,
    /// Done.
    Completed,
}

/// One step of a task: its input, what it produced, and whether the task is done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// The task it belongs to.
    pub task_id: String,
    /// Its id.
    pub step_id: String,
    /// Its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where it is.
    pub status: StepStatus,
    /// The step's prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// Anything else the caller gave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_input: Option<JsonObject>,
    /// What it produced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Anything else it produced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_output: Option<JsonObject>,
    /// The artifacts it made.
    #[serde(default)]
    pub artifacts: Vec<Artifact>,
    /// Whether it is the task's last step.
    #[serde(default)]
    pub is_last: bool,
}

impl ApiSchema for Step {
    const NAME: &'static str = "Step";
    fn schema() -> Value {
        json!({
            "allOf": [
                schema_ref(StepRequestBody::NAME),
                {
                    "type": "object",
                    "required": ["step_id", "task_id", "status", "is_last", "artifacts"],
                    "properties": {
                        "task_id": { "description": "The ID of the task this step belongs to.", "type": "string" },
                        "step_id": { "description": "The ID of the task step.", "type": "string" },
                        "name": { "description": "The name of the task step.", "type": "string", "nullable": true },
                        "status": {
                            "description": "The status of the task step.",
                            "type": "string",
                            "enum": ["created", "running", "completed"],
                        },
                        "output": { "description": "Output of the task step.", "type": "string", "nullable": true },
                        "additional_output": schema_ref("StepOutput"),
                        "artifacts": {
                            "description": "A list of artifacts that the step has produced.",
                            "type": "array",
                            "items": schema_ref(Artifact::NAME),
                            "default": [],
                        },
                        "is_last": { "description": "Whether this is the last step in the task.", "type": "boolean", "default": false },
                    },
                },
            ],
        })
    }
}

/// Where a page sits in a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pagination {
    /// Items in the whole list.
    pub total_items: u64,
    /// Pages in the whole list.
    pub total_pages: u64,
    /// This page's number, from 1.
    pub current_page: u32,
    /// Items a page.
    pub page_size: u32,
}

impl ApiSchema for Pagination {
    const NAME: &'static str = "Pagination";
    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "total_items": { "description": "Total number of items.", "type": "integer" },
                "total_pages": { "description": "Total number of pages.", "type": "integer" },
                "current_page": { "description": "Current_page page number.", "type": "integer" },
                "page_size": { "description": "Number of items per page.", "type": "integer" },
            },
            "required": ["total_items", "total_pages", "current_page", "page_size"],
        })
    }
}

/// Which page of a list to answer: `current_page` and `page_size`, each at least 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageRequest {
    /// The page, from 1 (default 1).
    pub current_page: u32,
    /// Items a page (default 10).
    pub page_size: u32,
}

/// The page number when none is asked for.
pub const DEFAULT_CURRENT_PAGE: u32 = 1;
/// The page size when none is asked for.
pub const DEFAULT_PAGE_SIZE: u32 = 10;
/// The largest page a list answers: a page is read whole, so its size bounds the work one
/// request can cause.
pub const MAX_PAGE_SIZE: u32 = 100;

impl Default for PageRequest {
    fn default() -> Self {
        Self {
            current_page: DEFAULT_CURRENT_PAGE,
            page_size: DEFAULT_PAGE_SIZE,
        }
    }
}

impl PageRequest {
    /// Page `current_page` of `page_size` items.
    pub const fn new(current_page: u32, page_size: u32) -> Self {
        Self {
            current_page,
            page_size,
        }
    }

    /// The page of `items`, and where it sits.
    pub fn slice<T: Clone>(self, items: &[T]) -> (Vec<T>, Pagination) {
        let size = self.page_size.max(1) as usize;
        let start = (self.current_page.max(1) as usize - 1).saturating_mul(size);
        let page = items.iter().skip(start).take(size).cloned().collect();
        let total_items = items.len() as u64;
        let pagination = Pagination {
            total_items,
            total_pages: total_items.div_ceil(size as u64),
            current_page: self.current_page,
            page_size: self.page_size,
        };
        (page, pagination)
    }
}

/// A page of tasks (`listAgentTasks`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskListResponse {
    /// The page's tasks, oldest first.
    pub tasks: Vec<Task>,
    /// Where the page sits.
    pub pagination: Pagination,
}

/// A page of a task's steps (`listAgentTaskSteps`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStepsListResponse {
    /// The page's steps, in the order they ran.
    pub steps: Vec<Step>,
    /// Where the page sits.
    pub pagination: Pagination,
}

/// A page of a task's artifacts (`listAgentTaskArtifacts`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskArtifactsListResponse {
    /// The page's artifacts, oldest first.
    pub artifacts: Vec<Artifact>,
    /// Where the page sits.
    pub pagination: Pagination,
}

fn list_schema(items_key: &str, item: &str) -> Value {
    json!({
        "type": "object",
        "properties": {
            items_key: { "type": "array", "items": schema_ref(item) },
            "pagination": schema_ref(Pagination::NAME),
        },
        "required": [items_key, "pagination"],
    })
}

impl ApiSchema for TaskListResponse {
    const NAME: &'static str = "TaskListResponse";
    fn schema() -> Value {
        list_schema("tasks", Task::NAME)
    }
}

impl ApiSchema for TaskStepsListResponse {
    const NAME: &'static str = "TaskStepsListResponse";
    fn schema() -> Value {
        list_schema("steps", Step::NAME)
    }
}

impl ApiSchema for TaskArtifactsListResponse {
    const NAME: &'static str = "TaskArtifactsListResponse";
    fn schema() -> Value {
        list_schema("artifacts", Artifact::NAME)
    }
}

/// The multipart body of `uploadAgentTaskArtifacts`: a `file` part and an optional
/// `relative_path` field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactUpload {
    /// The file's name, sent as the `file` part's filename.
    pub file_name: String,
    /// The file's bytes.
    pub content: Vec<u8>,
    /// Its folder in the task's workspace: relative, without `..`.
    pub relative_path: Option<String>,
}

impl ArtifactUpload {
    /// An upload of `content` named `file_name`.
    pub fn new(file_name: impl Into<String>, content: impl Into<Vec<u8>>) -> Self {
        Self {
            file_name: file_name.into(),
            content: content.into(),
            relative_path: None,
        }
    }

    /// The same upload into `relative_path`.
    pub fn with_relative_path(mut self, relative_path: impl Into<String>) -> Self {
        self.relative_path = Some(relative_path.into());
        self
    }
}

/// The schemas the upload declares: [`ArtifactUpload`] has no serde form (it is multipart).
pub(crate) fn artifact_upload_schema() -> Value {
    json!({
        "description": "Artifact to upload to the agent.",
        "type": "object",
        "properties": {
            "file": { "description": "File to upload.", "type": "string", "format": "binary" },
            "relative_path": { "description": "Relative path of the artifact in the agent's workspace.", "type": "string" },
        },
        "required": ["file"],
    })
}

/// The free-form object schemas: `TaskInput`, `StepInput` and `StepOutput`.
pub(crate) fn free_form_schemas() -> [(&'static str, Value); 3] {
    [
        (
            "TaskInput",
            json!({ "description": "Input parameters for the task. Any value is allowed.", "type": "object" }),
        ),
        (
            "StepInput",
            json!({ "description": "Input parameters for the task step. Any value is allowed.", "type": "object" }),
        ),
        (
            "StepOutput",
            json!({ "description": "Output that the task step has produced. Any value is allowed.", "type": "object", "nullable": true }),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_is_a_missing_key_and_null_is_none() {
        let body: TaskRequestBody =
            serde_json::from_str(r#"{"input": null, "additional_input": null}"#).unwrap();
        assert_eq!(body, TaskRequestBody::default());
        assert_eq!(serde_json::to_string(&body).unwrap(), "{}");
        let step: StepRequestBody = serde_json::from_str("{}").unwrap();
        assert_eq!(step.input, None);
    }

    #[test]
    fn a_wrongly_typed_field_does_not_decode() {
        assert!(serde_json::from_str::<TaskRequestBody>(r#"{"input": 5}"#).is_err());
        assert!(serde_json::from_str::<TaskRequestBody>(r#"{"additional_input": "x"}"#).is_err());
        assert!(serde_json::from_str::<StepRequestBody>(r#"{"input": {}}"#).is_err());
    }

    #[test]
    fn pages_slice_and_count() {
        let items: Vec<u32> = (1..=25).collect();
        let (page, p) = PageRequest::new(3, 10).slice(&items);
        assert_eq!(page, vec![21, 22, 23, 24, 25]);
        assert_eq!(
            (p.total_items, p.total_pages, p.current_page, p.page_size),
            (25, 3, 3, 10)
        );
        let (page, p) = PageRequest::new(9, 10).slice(&items);
        assert!(page.is_empty());
        assert_eq!(p.total_pages, 3);
        let (page, p) = PageRequest::default().slice::<u32>(&[]);
        assert!(page.is_empty());
        assert_eq!((p.total_items, p.total_pages), (0, 0));
    }
}
