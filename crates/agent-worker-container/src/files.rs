//! `POST /conversations/{id}/files?userId=U&accountId=A&name=N`: a file the person attaches.
//!
//! - Its bytes as the body and its media type as `Content-Type`: it goes to the file area, and
//!   the answer (201) is its reference (`AttachmentRef`), which the next turn's payload carries
//!   in `attachments`.
//! - Or, for a file too large for a request (a Lambda function takes 6 MB), no body, its media
//!   type as `Content-Type` and its length as `size=S`: the reference is kept now, and the
//!   answer (201) is `{reference, upload: {url, method, headers, expiresIn}}`, where the person's
//!   client sends the bytes itself, within [`PRESIGNED_UPLOAD_TTL`] and with exactly that type
//!   and length ([`MAX_PRESIGNED_BYTES`] at most). Where the file area cannot take bytes that
//!   way (a local directory), 400 naming `size`.
//!
//! 400 no name, an empty body, no media type, or a conversation id that is not one; 404 not that
//! person's conversation, or this host keeps no files; 413 a body over the limit. An upload to a
//! conversation no one owns yet makes it the person's (see [`access`](super::access)).
//!
//! `GET /conversations/{id}/files/{file}?userId=U&accountId=A`: a file of the person's
//! conversation, whole: one they attached, or content kept for it (a long result or pasted text,
//! a picture; its id is `content-<sha256>`). Where the file area signs links (S3), 303 to a link
//! good for [`DOWNLOAD_LINK_TTL`]; else the bytes. Either way as a download of its media type,
//! never shown as a page. 404 not the person's conversation, or no such file in it; 409 a file
//! whose check has not passed.

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::access::{Acting, Owned};
use super::answers::PresignedFile;
use super::extract::Params;
use super::{ContainerHost, HostError};
use agent_worker_contract::{AttachmentKind, AttachmentRef, AttachmentStatus};
use agent_worker_core::engine::attachments::{FileUploads, LoadAs, Unavailable, image_size};
use agent_worker_core::session::SessionId;

/// How long a file's signed link is good for.
pub const DOWNLOAD_LINK_TTL: Duration = Duration::from_secs(5 * 60);
/// The longest file name kept, in characters.
const MAX_NAME_CHARS: usize = 255;
/// How long a presigned upload's URL is good for.
pub const PRESIGNED_UPLOAD_TTL: Duration = Duration::from_secs(15 * 60);
/// The largest file a presigned upload takes, in bytes.
pub const MAX_PRESIGNED_BYTES: u64 = 512 * 1024 * 1024;

/// The file's name, and its length when the client sends the bytes itself.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(super) struct UploadQuery {
    /// The file's name, as the person gave it.
    name: Option<String>,
    /// Its length in bytes, instead of its bytes in the body: the answer says where to send them
    /// (a file area in S3 alone).
    size: Option<u64>,
}

/// `POST /conversations/{id}/files`.
pub(super) async fn upload(
    State(host): State<ContainerHost>,
    conversation: Acting,
    Params(query): Params<UploadQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, HostError> {
    let files = host
        .uploads()
        .ok_or_else(|| HostError::not_found("this host keeps no files (FILES_BUCKET or FILES_DIR)"))?;
    let name = shown_name(query.name.as_deref().unwrap_or_default());
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
        ("body", body.is_empty() && query.size.is_none()),
    ] {
        if empty {
            return Err(HostError::field(field, format!("{field} must not be empty")));
        }
    }
    let id = format!("f-{}", uuid::Uuid::new_v4().simple());
    if let Some(size) = query.size {
        if !body.is_empty() {
            return Err(HostError::field(
                "size",
                "give the file's bytes or its size, not both",
            ));
        }
        if size == 0 || size > MAX_PRESIGNED_BYTES {
            return Err(HostError::field(
                "size",
                format!("size must be between 1 and {MAX_PRESIGNED_BYTES} bytes"),
            ));
        }
        let reference = AttachmentRef::new(id, name, media_type, size);
        return match files
            .presign_upload(&conversation.id, &reference, PRESIGNED_UPLOAD_TTL)
            .await
        {
            Ok(Some(upload)) => {
                Ok((StatusCode::CREATED, Json(PresignedFile { reference, upload })).into_response())
            }
            Ok(None) => Err(HostError::field(
                "size",
                "this host takes the file's bytes in the body (its file area is not S3)",
            )),
            Err(e) => {
                tracing::error!(error = %e, "could not presign an upload");
                Err(HostError::unavailable("the file area failed"))
            }
        };
    }
    let reference = keep(
        files.as_ref(),
        &conversation.id,
        id,
        name,
        media_type,
        body.to_vec(),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(reference)).into_response())
}

/// `GET /conversations/{id}/files/{file}`.
pub(super) async fn download(
    State(host): State<ContainerHost>,
    conversation: Owned,
    Path((_, file)): Path<(String, String)>,
) -> Result<Response, HostError> {
    let files = host
        .uploads()
        .ok_or_else(|| HostError::not_found("this host keeps no files (FILES_BUCKET or FILES_DIR)"))?;
    let failed = |e: Unavailable| {
        tracing::error!(error = %e, "could not read a file");
        HostError::unavailable("the file area failed")
    };
    let missing = || HostError::not_found(format!("no file {file} in conversation {}", conversation.id));
    let reference = match files.reference(&file, &conversation.id).await {
        Ok(reference) => reference,
        Err(Unavailable::Gone) => return Err(missing()),
        Err(e) => return Err(failed(e)),
    };
    if reference.status != AttachmentStatus::Ready {
        return Err(HostError::new(
            StatusCode::CONFLICT,
            format!("file {file} has not passed its check"),
        ));
    }
    if let Some(link) = files
        .presign_download(&file, &conversation.id, DOWNLOAD_LINK_TTL)
        .await
        .map_err(failed)?
    {
        return Ok((StatusCode::SEE_OTHER, [(header::LOCATION, link)]).into_response());
    }
    let bytes = match files.load(&file, &conversation.id, LoadAs::Document, None).await {
        Ok(bytes) => bytes,
        Err(Unavailable::Gone) => return Err(missing()),
        Err(e) => return Err(failed(e)),
    };
    Ok((
        [
            (header::CONTENT_TYPE, reference.media_type),
            (header::CONTENT_DISPOSITION, "attachment".to_owned()),
            // Never read as another type (every answer's security headers then forbid running
            // anything of it as a page of this origin).
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
        ],
        bytes,
    )
        .into_response())
}

/// A file's name as it is kept and shown: without control characters or those that hide or
/// reorder the text around them (which would let a name pass for another in a list), at most
/// [`MAX_NAME_CHARS`].
fn shown_name(name: &str) -> String {
    name.chars()
        .filter(|&c| !c.is_control() && !agent_worker_contract::is_spoofing(c))
        .take(MAX_NAME_CHARS)
        .collect()
}

/// Keeps file `bytes` the person gives in `files`, for conversation `session` (theirs: the
/// caller checked), as `id`: its reference, with a picture's size.
pub(super) async fn keep(
    files: &dyn FileUploads,
    session: &SessionId,
    id: String,
    name: String,
    media_type: String,
    bytes: Vec<u8>,
) -> Result<AttachmentRef, HostError> {
    let name = Some(shown_name(&name))
        .filter(|name| !name.trim().is_empty())
        .unwrap_or_else(|| "file".to_owned());
    let mut reference = AttachmentRef::new(id, name, media_type, bytes.len() as u64);
    if reference.kind == AttachmentKind::Image
        && let Some((width, height)) = image_size(&bytes)
    {
        reference.width = Some(width);
        reference.height = Some(height);
    }
    match files.upload(session, &reference, bytes).await {
        Ok(()) => Ok(reference),
        Err(e) => {
            tracing::error!(error = %e, "could not keep an upload");
            Err(HostError::unavailable("the file area failed"))
        }
    }
}
