//! `POST /conversations/{id}/files?userId=U&accountId=A&name=N`: a file the person attaches, its
//! bytes as the body and its media type as `Content-Type`. It goes to the file area, and the
//! answer is its reference (`AttachmentRef`), which the next turn's payload carries in
//! `attachments`. 201 with the reference; 400 no name, an empty body, no media type, or a
//! conversation id that is not one; 404 not that person's conversation, or this host keeps no
//! files; 413 a body over the limit. An upload to a conversation no one owns yet makes it the
//! person's (see [`access`](super::access)).

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use serde::Deserialize;

use super::access::Acting;
use super::extract::Params;
use super::{ContainerHost, HostError};
use crate::engine::attachments::image_size;
use crate::protocol::{AttachmentKind, AttachmentRef};

/// The longest file name kept, in characters.
const MAX_NAME_CHARS: usize = 255;

/// The file's name.
#[derive(Debug, Deserialize)]
pub(super) struct UploadQuery {
    name: Option<String>,
}

/// `POST /conversations/{id}/files`.
pub(super) async fn upload(
    State(host): State<ContainerHost>,
    conversation: Acting,
    Params(query): Params<UploadQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<AttachmentRef>), HostError> {
    let files = host
        .inner
        .uploads
        .get()
        .ok_or_else(|| HostError::not_found("this host keeps no files (FILES_BUCKET or FILES_DIR)"))?;
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
            return Err(HostError::field(field, format!("{field} must not be empty")));
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
    match files.upload(&conversation.id, &reference, body.to_vec()).await {
        Ok(()) => Ok((StatusCode::CREATED, Json(reference))),
        Err(e) => {
            tracing::error!(error = %e, "could not keep an upload");
            Err(HostError::unavailable("the file area failed"))
        }
    }
}
