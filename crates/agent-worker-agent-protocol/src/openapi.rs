//! The operations of Agent Protocol v1, and the OpenAPI document made from them.
//!
//! [`Operation`] is the one list of routes: the server routes each to its handler by an
//! exhaustive `match`, and [`document`] declares each from the same table and the schemas beside
//! the wire types. Neither can gain or lose a route without the other.

use serde_json::{Map, Value, json};

use super::types::{
    ApiSchema, Artifact, Pagination, Step, StepRequestBody, Task, TaskArtifactsListResponse,
    TaskListResponse, TaskRequestBody, TaskStepsListResponse, artifact_upload_schema, free_form_schemas,
    schema_ref,
};

/// The path prefix of every operation.
pub const BASE_PATH: &str = "/ap/v1/agent/tasks";

/// An HTTP method an operation uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// GET.
    Get,
    /// POST.
    Post,
}

impl Method {
    /// Its lower-case name, as OpenAPI keys it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::Post => "post",
        }
    }
}

/// One operation of the protocol, named by its `operationId`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// `POST /ap/v1/agent/tasks`
    CreateAgentTask,
    /// `GET /ap/v1/agent/tasks`
    ListAgentTasks,
    /// `GET /ap/v1/agent/tasks/{task_id}`
    GetAgentTask,
    /// `GET /ap/v1/agent/tasks/{task_id}/steps`
    ListAgentTaskSteps,
    /// `POST /ap/v1/agent/tasks/{task_id}/steps`
    ExecuteAgentTaskStep,
    /// `GET /ap/v1/agent/tasks/{task_id}/steps/{step_id}`
    GetAgentTaskStep,
    /// `GET /ap/v1/agent/tasks/{task_id}/artifacts`
    ListAgentTaskArtifacts,
    /// `POST /ap/v1/agent/tasks/{task_id}/artifacts`
    UploadAgentTaskArtifacts,
    /// `GET /ap/v1/agent/tasks/{task_id}/artifacts/{artifact_id}`
    DownloadAgentTaskArtifact,
}

/// What an operation answers with 200.
enum Answer {
    Json(&'static str),
    Binary,
}

/// What an operation reads from its body.
enum Body {
    None,
    Json(&'static str),
    Multipart,
}

impl Operation {
    /// Every operation, in the specification's order.
    pub const ALL: [Operation; 9] = [
        Self::CreateAgentTask,
        Self::ListAgentTasks,
        Self::GetAgentTask,
        Self::ListAgentTaskSteps,
        Self::ExecuteAgentTaskStep,
        Self::GetAgentTaskStep,
        Self::ListAgentTaskArtifacts,
        Self::UploadAgentTaskArtifacts,
        Self::DownloadAgentTaskArtifact,
    ];

    /// Its `operationId`.
    pub const fn id(self) -> &'static str {
        match self {
            Self::CreateAgentTask => "createAgentTask",
            Self::ListAgentTasks => "listAgentTasks",
            Self::GetAgentTask => "getAgentTask",
            Self::ListAgentTaskSteps => "listAgentTaskSteps",
            Self::ExecuteAgentTaskStep => "executeAgentTaskStep",
            Self::GetAgentTaskStep => "getAgentTaskStep",
            Self::ListAgentTaskArtifacts => "listAgentTaskArtifacts",
            Self::UploadAgentTaskArtifacts => "uploadAgentTaskArtifacts",
            Self::DownloadAgentTaskArtifact => "downloadAgentTaskArtifact",
        }
    }

    /// Its method.
    pub const fn method(self) -> Method {
        match self {
            Self::CreateAgentTask | Self::ExecuteAgentTaskStep | Self::UploadAgentTaskArtifacts => {
                Method::Post
            }
            _ => Method::Get,
        }
    }

    /// Its path template, `{name}` for a parameter (the form both OpenAPI and axum use).
    pub const fn path(self) -> &'static str {
        match self {
            Self::CreateAgentTask | Self::ListAgentTasks => "/ap/v1/agent/tasks",
            Self::GetAgentTask => "/ap/v1/agent/tasks/{task_id}",
            Self::ListAgentTaskSteps | Self::ExecuteAgentTaskStep => "/ap/v1/agent/tasks/{task_id}/steps",
            Self::GetAgentTaskStep => "/ap/v1/agent/tasks/{task_id}/steps/{step_id}",
            Self::ListAgentTaskArtifacts | Self::UploadAgentTaskArtifacts => {
                "/ap/v1/agent/tasks/{task_id}/artifacts"
            }
            Self::DownloadAgentTaskArtifact => "/ap/v1/agent/tasks/{task_id}/artifacts/{artifact_id}",
        }
    }

    const fn summary(self) -> &'static str {
        match self {
            Self::CreateAgentTask => "Creates a task for the agent.",
            Self::ListAgentTasks => "List all tasks that have been created for the agent.",
            Self::GetAgentTask => "Get details about a specified agent task.",
            Self::ListAgentTaskSteps => "List all steps for the specified task.",
            Self::ExecuteAgentTaskStep => "Execute a step in the specified agent task.",
            Self::GetAgentTaskStep => "Get details about a specified task step.",
            Self::ListAgentTaskArtifacts => "List all artifacts that have been created for the given task.",
            Self::UploadAgentTaskArtifacts => "Upload an artifact for the specified task.",
            Self::DownloadAgentTaskArtifact => "Download a specified artifact.",
        }
    }

    const fn is_list(self) -> bool {
        matches!(
            self,
            Self::ListAgentTasks | Self::ListAgentTaskSteps | Self::ListAgentTaskArtifacts
        )
    }

    const fn body(self) -> Body {
        match self {
            Self::CreateAgentTask => Body::Json(TaskRequestBody::NAME),
            Self::ExecuteAgentTaskStep => Body::Json(StepRequestBody::NAME),
            Self::UploadAgentTaskArtifacts => Body::Multipart,
            _ => Body::None,
        }
    }

    const fn answer(self) -> Answer {
        match self {
            Self::CreateAgentTask | Self::GetAgentTask => Answer::Json(Task::NAME),
            Self::ListAgentTasks => Answer::Json(TaskListResponse::NAME),
            Self::ListAgentTaskSteps => Answer::Json(TaskStepsListResponse::NAME),
            Self::ExecuteAgentTaskStep | Self::GetAgentTaskStep => Answer::Json(Step::NAME),
            Self::ListAgentTaskArtifacts => Answer::Json(TaskArtifactsListResponse::NAME),
            Self::UploadAgentTaskArtifacts => Answer::Json(Artifact::NAME),
            Self::DownloadAgentTaskArtifact => Answer::Binary,
        }
    }

    /// The names of its path parameters, in order.
    pub fn path_params(self) -> impl Iterator<Item = &'static str> {
        self.path()
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
    }

    fn declaration(self) -> Value {
        let mut parameters: Vec<Value> = self
            .path_params()
            .map(|name| {
                json!({
                    "name": name, "in": "path", "required": true,
                    "description": format!("ID of the {}", name.trim_end_matches("_id")),
                    "schema": { "type": "string" },
                })
            })
            .collect();
        if self.is_list() {
            for (name, description, default) in [
                ("current_page", "Page number", super::types::DEFAULT_CURRENT_PAGE),
                (
                    "page_size",
                    "Number of items per page",
                    super::types::DEFAULT_PAGE_SIZE,
                ),
            ] {
                parameters.push(json!({
                    "name": name, "in": "query", "required": false, "description": description,
                    "schema": { "type": "integer", "format": "int32", "default": default, "minimum": 1 },
                }));
            }
        }
        let ok = match self.answer() {
            Answer::Json(schema) => json!({
                "description": "OK",
                "content": { "application/json": { "schema": schema_ref(schema) } },
            }),
            Answer::Binary => json!({
                "description": "Returned the content of the artifact.",
                "content": { "application/octet-stream": { "schema": { "type": "string", "format": "binary" } } },
            }),
        };
        let mut responses = Map::new();
        responses.insert("200".into(), ok);
        if self.path_params().next().is_some() {
            responses.insert("404".into(), json!({ "$ref": "#/components/responses/NotFound" }));
        }
        if self.is_list() || !matches!(self.body(), Body::None) {
            responses.insert(
                "422".into(),
                json!({ "$ref": "#/components/responses/UnprocessableEntity" }),
            );
        }
        if matches!(self, Self::UploadAgentTaskArtifacts) {
            responses.insert(
                "413".into(),
                json!({ "$ref": "#/components/responses/PayloadTooLarge" }),
            );
        }
        responses.insert(
            "default".into(),
            json!({ "description": "Internal Server Error" }),
        );
        let mut operation = json!({
            "operationId": self.id(),
            "summary": self.summary(),
            "tags": ["agent"],
            "responses": responses,
        });
        if !parameters.is_empty() {
            operation["parameters"] = Value::Array(parameters);
        }
        match self.body() {
            Body::None => {}
            Body::Json(schema) => {
                operation["requestBody"] =
                    json!({ "content": { "application/json": { "schema": schema_ref(schema) } } });
            }
            Body::Multipart => {
                operation["requestBody"] = json!({ "content": { "multipart/form-data": { "schema": schema_ref("ArtifactUpload") } } });
            }
        }
        operation
    }
}

fn message_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": { "application/json": { "schema": {
            "type": "object",
            "properties": { "message": { "type": "string" } },
            "required": ["message"],
        } } },
    })
}

/// The OpenAPI 3.0 document of this server, as `GET /openapi.json` answers it.
pub fn document() -> Value {
    let mut paths = Map::new();
    for operation in Operation::ALL {
        let entry = paths
            .entry(operation.path())
            .or_insert_with(|| Value::Object(Map::new()));
        entry[operation.method().as_str()] = operation.declaration();
    }
    let mut schemas = Map::new();
    schemas.insert(Pagination::NAME.into(), Pagination::schema());
    schemas.insert(TaskListResponse::NAME.into(), TaskListResponse::schema());
    schemas.insert(
        TaskStepsListResponse::NAME.into(),
        TaskStepsListResponse::schema(),
    );
    schemas.insert(
        TaskArtifactsListResponse::NAME.into(),
        TaskArtifactsListResponse::schema(),
    );
    for (name, schema) in free_form_schemas() {
        schemas.insert(name.into(), schema);
    }
    schemas.insert(Artifact::NAME.into(), Artifact::schema());
    schemas.insert("ArtifactUpload".into(), artifact_upload_schema());
    schemas.insert(TaskRequestBody::NAME.into(), TaskRequestBody::schema());
    schemas.insert(Task::NAME.into(), Task::schema());
    schemas.insert(StepRequestBody::NAME.into(), StepRequestBody::schema());
    schemas.insert(Step::NAME.into(), Step::schema());
    json!({
        "openapi": "3.0.1",
        "info": {
            "title": "Agent Protocol",
            "description": "Specification of the API protocol for communication with an agent.",
            "version": "v1",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "responses": {
                "UnprocessableEntity": message_response("Unable to process request. Likely due to improperly formatted request."),
                "NotFound": message_response("Unable to find entity with a given identifier"),
                "PayloadTooLarge": message_response("The upload is larger than the server takes."),
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_has_a_distinct_method_and_path() {
        let mut seen = std::collections::HashSet::new();
        for op in Operation::ALL {
            assert!(op.path().starts_with(BASE_PATH), "{op:?}");
            assert!(seen.insert((op.method(), op.path())), "{op:?} repeats a route");
        }
        assert_eq!(
            Operation::GetAgentTaskStep.path_params().collect::<Vec<_>>(),
            ["task_id", "step_id"]
        );
    }

    #[test]
    fn every_schema_reference_resolves() {
        let doc = document();
        let text = doc.to_string();
        for reference in text.split("\"$ref\":\"").skip(1) {
            let target = &reference[..reference.find('"').unwrap()];
            let pointer = target.trim_start_matches('#');
            assert!(doc.pointer(pointer).is_some(), "{target} does not resolve");
        }
    }
}
