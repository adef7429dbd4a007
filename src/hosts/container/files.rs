//! `POST /conversations/{id}/files?userId=U&accountId=A&name=N`: a file the person attaches, its
//! bytes as the body and its media type as `Content-Type`. It goes to the file area, and the
//! answer is its reference (`AttachmentRef`), which the next turn's payload carries in
//! `attachments`. 201 with the reference; 400 no name, an empty body or no media type; 404 not
//! that person's conversation, or this host keeps no files; 413 a body over the limit.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{ContainerHost, check_owner, error};
use crate::engine::attachments::image_size;
use crate::protocol::{AttachmentKind, AttachmentRef};

/// The longest file name kept, in characters.
const MAX_NAME_CHARS: usize = 255;

/// Who uploads, and the file's name.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct UploadQuery {
    user_id: Option<String>,
    account_id: Option<String>,
    name: Option<String>,
}

/// `POST /conversations/{id}/files`.
pub(super) async fn upload(
    State(host): State<ContainerHost>,
    Path(conversation): Path<String>,
    Query(query): Query<UploadQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(files) = host.inner.uploads.get() else {
        return error(
            StatusCode::NOT_FOUND,
            "this host keeps no files (FILES_BUCKET or FILES_DIR)",
        );
    };
    let missing = format!("no conversation {conversation} of yours");
    if let Err(refused) = check_owner(
        &host,
        &conversation,
        query.user_id.as_deref(),
        query.account_id.as_deref(),
        &missing,
    )
    .await
    {
        return refused;
    }
    let name: String = query
        .name
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_NAME_CHARS)
        .collect();
    let media_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    for (field, empty) in [
        ("name", name.trim().is_empty()),
        ("Content-Type", media_type.is_empty()),
        ("body", body.is_empty()),
    ] {
        if empty {
            return error(StatusCode::BAD_REQUEST, format!("{field} must not be empty"));
        }
    }
    let id = format!("f-{}", uuid::Uuid::new_v4().simple());
    let mut reference = AttachmentRef::new(id, name, media_type, body.len() as u64);
    if reference.kind == AttachmentKind::Image
        && let Some((width, height)) = image_size(&body)
    {
        reference.width = Some(width);
        reference.height = Some(height);
    }
    match files.upload(&conversation, &reference, body.to_vec()).await {
        Ok(()) => (StatusCode::CREATED, axum::Json(reference)).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "could not keep an upload");
            error(StatusCode::SERVICE_UNAVAILABLE, "the file area failed")
        }
    }
}
