//! A message's parts as a turn takes them: text parts as the person's words, data parts as their
//! JSON, and file parts (`raw`: the file's bytes, base64) as files the person attaches, kept in
//! the host's file area before the turn starts. A file by `url` is not fetched: the agent takes
//! no address from a caller to read on its behalf.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use serde_json::Value;

use super::{Call, RpcError};
use crate::files::keep;
use agent_worker_contract::AttachmentRef;
use agent_worker_core::session::SessionId;

/// A file a message carries.
#[derive(Debug)]
pub(super) struct GivenFile {
    name: String,
    media_type: String,
    bytes: Vec<u8>,
}

/// The words of a message's parts (its text parts, and its data parts as JSON), and its files.
pub(super) fn read(parts: &[Value]) -> Result<(String, Vec<GivenFile>), RpcError> {
    let mut words = Vec::new();
    let mut files = Vec::new();
    for (at, part) in parts.iter().enumerate() {
        if let Some(text) = part.get("text").and_then(Value::as_str) {
            words.push(text.to_owned());
        } else if let Some(data) = part.get("data") {
            words.push(data.to_string());
        } else if let Some(raw) = part.get("raw").and_then(Value::as_str) {
            let bytes = STANDARD
                .decode(raw)
                .or_else(|_| URL_SAFE.decode(raw))
                .map_err(|e| RpcError::invalid_params(format!("parts[{at}].raw is not base64: {e}")))?;
            if bytes.is_empty() {
                return Err(RpcError::invalid_params(format!("parts[{at}].raw is empty")));
            }
            let text = |name: &str| part.get(name).and_then(Value::as_str).map(str::trim);
            files.push(GivenFile {
                name: text("filename")
                    .filter(|n| !n.is_empty())
                    .unwrap_or("file")
                    .to_owned(),
                media_type: text("mediaType")
                    .filter(|t| !t.is_empty())
                    .unwrap_or("application/octet-stream")
                    .to_ascii_lowercase(),
                bytes,
            });
        } else if part.get("url").is_some() {
            return Err(RpcError::invalid_params(format!(
                "parts[{at}] names a file by url, which this agent does not fetch: send its bytes (raw)"
            )));
        } else {
            return Err(RpcError::invalid_params(format!(
                "parts[{at}] is not a text, data or file part"
            )));
        }
    }
    Ok((words.join("\n"), files))
}

impl Call<'_> {
    /// Keeps `files` for the person's conversation `session` (theirs, and free for the turn:
    /// the caller asked `turns::admit` first, so a refusal keeps nothing): the references the
    /// turn carries.
    pub(super) async fn keep_files(
        &self,
        session: &SessionId,
        files: Vec<GivenFile>,
    ) -> Result<Vec<AttachmentRef>, RpcError> {
        if files.is_empty() {
            return Ok(Vec::new());
        }
        let uploads = self.host.uploads().ok_or_else(|| {
            RpcError::unsupported(
                "this agent keeps no files (FILES_BUCKET or FILES_DIR): send the words instead",
            )
        })?;
        let mut kept = Vec::new();
        for file in files {
            let id = format!("f-{}", uuid::Uuid::new_v4().simple());
            let reference = keep(
                uploads.as_ref(),
                session,
                id,
                file.name,
                file.media_type,
                file.bytes,
            )
            .await
            .map_err(|e| RpcError::internal(e.message()))?;
            kept.push(reference);
        }
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn words_and_files_are_read_and_a_file_by_address_is_refused() {
        let (words, files) = read(&[
            json!({"text": "Read this"}),
            json!({"data": {"n": 1}}),
            json!({"raw": STANDARD.encode("hello"), "filename": "a.txt", "mediaType": "Text/Plain"}),
        ])
        .unwrap();
        assert_eq!(words, "Read this\n{\"n\":1}");
        assert_eq!(files.len(), 1);
        assert_eq!(
            (files[0].name.as_str(), files[0].media_type.as_str()),
            ("a.txt", "text/plain")
        );
        assert_eq!(files[0].bytes, b"hello");
        for bad in [
            json!({"url": "http://169.254.169.254/"}),
            json!({"raw": "%%%"}),
            json!({}),
        ] {
            assert!(read(std::slice::from_ref(&bad)).is_err(), "{bad}");
        }
    }
}
