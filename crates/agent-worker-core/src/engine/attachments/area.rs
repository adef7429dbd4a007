//! [`FileArea`]: where the host keeps the files people attach, and [`LocalFileArea`], the
//! embedded default in a local directory.

use crate::Failure;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;

use crate::protocol::{AttachmentRef, AttachmentStatus, ErrorChain};

/// Why a file cannot be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unavailable {
    /// Its check has not finished.
    Pending,
    /// It is not there (deleted, expired, or never this conversation's).
    Gone,
    /// Its check refused it.
    Refused,
    /// It is there, but not something the model can be given; the text says why.
    Unsupported(String),
    /// The file area failed.
    Store(Failure),
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pending => f.write_str("pending"),
            Self::Gone => f.write_str("gone"),
            Self::Refused => f.write_str("refused"),
            Self::Unsupported(why) => write!(f, "unsupported: {why}"),
            Self::Store(why) => write!(f, "store error: {}", ErrorChain(why)),
        }
    }
}

/// How a file is to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadAs {
    /// Its bytes, for a picture.
    Image,
    /// Its text.
    Text,
    /// Its bytes, for a document.
    Document,
}

/// Where the host keeps the files people attach, by conversation (`owner`).
#[async_trait]
pub trait FileArea: Send + Sync + fmt::Debug {
    /// The stored reference of file `id` of `owner`, whatever its check says.
    async fn reference(&self, id: &str, owner: &str) -> Result<AttachmentRef, Unavailable>;

    /// What is known of each of `ids`, in order; a file that cannot be had (or has not passed
    /// its check) says why.
    async fn describe(&self, ids: &[String], owner: &str) -> Vec<Result<AttachmentRef, Unavailable>> {
        let mut described = Vec::with_capacity(ids.len());
        for id in ids {
            described.push(self.reference(id, owner).await.and_then(ready));
        }
        described
    }

    /// A file's bytes (or the `range` of them).
    async fn load(
        &self,
        id: &str,
        owner: &str,
        load_as: LoadAs,
        range: Option<Range<u64>>,
    ) -> Result<Vec<u8>, Unavailable>;

    /// Every file of the conversation.
    async fn list(&self, owner: &str) -> Result<Vec<AttachmentRef>, Unavailable>;

    /// A link that gives file `id` of `owner` to whoever holds it, for `expires_in`, saved as
    /// a download (never shown in the page that follows it); `None` where the area signs no
    /// links (a local directory: the host serves the bytes itself). The caller checked that
    /// the conversation is the asker's.
    async fn presign_download(
        &self,
        id: &str,
        owner: &str,
        expires_in: Duration,
    ) -> Result<Option<String>, Unavailable> {
        let _ = (id, owner, expires_in);
        Ok(None)
    }

    /// The tokens earlier turns' files gave the model, for the conversation's cap; `None` when
    /// the area keeps no count (then only the turn's own budget applies).
    async fn conversation_usage(&self, owner: &str) -> Option<u64> {
        let _ = owner;
        None
    }

    /// Removes every file of the conversation, with their references and its count: it was
    /// deleted. Returns how many files went; a conversation with none is `Ok(0)`.
    async fn remove_conversation(&self, owner: &str) -> Result<u64, Unavailable>;

    /// Adds a finished turn's estimated file tokens to the conversation's count. The default
    /// keeps no count.
    async fn record_usage(&self, owner: &str, tokens: u64) -> Result<(), Unavailable> {
        let _ = (owner, tokens);
        Ok(())
    }
}

#[async_trait]
impl<T: FileArea + ?Sized> FileArea for std::sync::Arc<T> {
    async fn reference(&self, id: &str, owner: &str) -> Result<AttachmentRef, Unavailable> {
        (**self).reference(id, owner).await
    }

    async fn describe(&self, ids: &[String], owner: &str) -> Vec<Result<AttachmentRef, Unavailable>> {
        (**self).describe(ids, owner).await
    }

    async fn load(
        &self,
        id: &str,
        owner: &str,
        load_as: LoadAs,
        range: Option<Range<u64>>,
    ) -> Result<Vec<u8>, Unavailable> {
        (**self).load(id, owner, load_as, range).await
    }

    async fn list(&self, owner: &str) -> Result<Vec<AttachmentRef>, Unavailable> {
        (**self).list(owner).await
    }

    async fn presign_download(
        &self,
        id: &str,
        owner: &str,
        expires_in: Duration,
    ) -> Result<Option<String>, Unavailable> {
        (**self).presign_download(id, owner, expires_in).await
    }

    async fn conversation_usage(&self, owner: &str) -> Option<u64> {
        (**self).conversation_usage(owner).await
    }

    async fn remove_conversation(&self, owner: &str) -> Result<u64, Unavailable> {
        (**self).remove_conversation(owner).await
    }

    async fn record_usage(&self, owner: &str, tokens: u64) -> Result<(), Unavailable> {
        (**self).record_usage(owner, tokens).await
    }
}

/// The name of the file that keeps a conversation's token count in a local file area.
const USAGE_FILE: &str = ".usage";

/// Where a person's client sends a file's bytes itself, straight into the file area: for a
/// file too large for a request's body (a Lambda function takes 6 MB).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PresignedUpload {
    /// The URL to send the bytes to.
    pub url: String,
    /// The method to send them with: `PUT`.
    pub method: String,
    /// The headers the request must carry as they are (the file's media type and length are
    /// signed into the URL: the area takes no other).
    pub headers: BTreeMap<String, String>,
    /// Seconds the URL is good for.
    pub expires_in: u64,
}

/// A file area a host can put people's uploads into (the container's upload route).
#[async_trait]
pub trait FileUploads: FileArea {
    /// Stores `bytes` as file `reference.id` of `owner`, with its reference beside it.
    async fn upload(&self, owner: &str, reference: &AttachmentRef, bytes: Vec<u8>)
    -> Result<(), Unavailable>;

    /// Keeps `reference` now and answers where the person's client sends its bytes, good for
    /// `expires_in`; `None` where the area takes bytes through [`upload`](Self::upload) alone
    /// (a local directory).
    async fn presign_upload(
        &self,
        _owner: &str,
        _reference: &AttachmentRef,
        _expires_in: Duration,
    ) -> Result<Option<PresignedUpload>, Unavailable> {
        Ok(None)
    }
}

#[async_trait]
impl FileUploads for LocalFileArea {
    async fn upload(
        &self,
        owner: &str,
        reference: &AttachmentRef,
        bytes: Vec<u8>,
    ) -> Result<(), Unavailable> {
        self.put(owner, reference, &bytes)
            .map_err(|e| Unavailable::Store(Failure::caused_by("storing an upload", e)))
    }
}

/// A file area in a local directory: `<root>/<owner>/<id>` (the owner as [`owner_segment`]
/// escapes it) and its reference beside it in `<id>.json`. The embedded default.
#[derive(Debug, Clone)]
pub struct LocalFileArea {
    root: PathBuf,
}

impl LocalFileArea {
    /// Files under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// Stores `bytes` as file `reference.id` of `owner` (for hosts and tests).
    pub fn put(&self, owner: &str, reference: &AttachmentRef, bytes: &[u8]) -> std::io::Result<()> {
        let folder = self
            .folder(owner)
            .ok_or_else(|| std::io::Error::other("not a plain owner"))?;
        let file = plain_segment(&reference.id).ok_or_else(|| std::io::Error::other("not a plain id"))?;
        std::fs::create_dir_all(&folder)?;
        std::fs::write(folder.join(file), bytes)?;
        let json = serde_json::to_vec(reference).map_err(std::io::Error::other)?;
        std::fs::write(folder.join(format!("{file}.json")), json)
    }

    fn folder(&self, owner: &str) -> Option<PathBuf> {
        owner_segment(owner).map(|o| self.root.join(o.as_ref()))
    }
}

/// A conversation's id (`owner`) as one path or key segment, for every file area: `%`, `/`, `\`
/// and NUL escaped as `%25`, `%2F`, `%5C`, `%00`, so that any id a conversation may have keeps
/// its files, each apart from every other id's (no two ids give one segment, and no id's files
/// are under another's prefix); an id without those characters is its own segment. `None` for
/// an empty id, `.` or `..`, which no conversation has.
///
/// ```
/// use agent_worker_core::engine::attachments::owner_segment;
///
/// assert_eq!(owner_segment("conv-1").as_deref(), Some("conv-1"));
/// assert_eq!(owner_segment("team/conv-1").as_deref(), Some("team%2Fconv-1"));
/// assert_eq!(owner_segment("team%2Fconv-1").as_deref(), Some("team%252Fconv-1"));
/// assert_eq!(owner_segment(".."), None);
/// ```
pub fn owner_segment(owner: &str) -> Option<std::borrow::Cow<'_, str>> {
    if owner.is_empty() || owner == "." || owner == ".." {
        return None;
    }
    if !owner.contains(['%', '/', '\\', '\0']) {
        return Some(std::borrow::Cow::Borrowed(owner));
    }
    let mut escaped = String::with_capacity(owner.len() + 8);
    for c in owner.chars() {
        match c {
            '%' => escaped.push_str("%25"),
            '/' => escaped.push_str("%2F"),
            '\\' => escaped.push_str("%5C"),
            '\0' => escaped.push_str("%00"),
            c => escaped.push(c),
        }
    }
    Some(std::borrow::Cow::Owned(escaped))
}

/// `name` when it is one plain path or key segment: not empty, not `.` or `..`, no separator or
/// NUL. File areas name a file (its id) with it; a conversation's id goes through
/// [`owner_segment`] instead, which escapes what a segment cannot hold.
pub fn plain_segment(name: &str) -> Option<&str> {
    let bad = name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\', '\0']);
    (!bad).then_some(name)
}

/// A stored reference (`<id>.json`), decoded.
pub fn decode_reference(bytes: &[u8]) -> Result<AttachmentRef, Unavailable> {
    serde_json::from_slice(bytes)
        .map_err(|e| Unavailable::Store(Failure::caused_by("a reference does not decode", e)))
}

/// The reference when its file has passed its check; why not otherwise.
fn ready(reference: AttachmentRef) -> Result<AttachmentRef, Unavailable> {
    match reference.status {
        AttachmentStatus::Ready => Ok(reference),
        AttachmentStatus::Pending => Err(Unavailable::Pending),
        AttachmentStatus::Refused => Err(Unavailable::Refused),
    }
}

/// What failed when a conversation's folder could not be listed.
const LISTING: &str = "the conversation's files cannot be listed";
/// What failed when a conversation's usage could not be written.
const RECORDING_USAGE: &str = "the conversation's usage cannot be recorded";

fn read_error(e: std::io::Error) -> Unavailable {
    if e.kind() == std::io::ErrorKind::NotFound {
        Unavailable::Gone
    } else {
        Unavailable::Store(Failure::caused_by("a file cannot be read", e))
    }
}

#[async_trait]
impl FileArea for LocalFileArea {
    async fn reference(&self, id: &str, owner: &str) -> Result<AttachmentRef, Unavailable> {
        let path = self
            .folder(owner)
            .zip(plain_segment(id))
            .map(|(f, id)| f.join(format!("{id}.json")))
            .ok_or(Unavailable::Gone)?;
        let bytes = tokio::fs::read(&path).await.map_err(read_error)?;
        decode_reference(&bytes)
    }

    async fn load(
        &self,
        id: &str,
        owner: &str,
        _load_as: LoadAs,
        range: Option<Range<u64>>,
    ) -> Result<Vec<u8>, Unavailable> {
        let path = self
            .folder(owner)
            .zip(plain_segment(id))
            .map(|(f, id)| f.join(id))
            .ok_or(Unavailable::Gone)?;
        let bytes = tokio::fs::read(&path).await.map_err(read_error)?;
        Ok(match range {
            Some(range) => {
                let end = (range.end as usize).min(bytes.len());
                let start = (range.start as usize).min(end);
                bytes[start..end].to_vec()
            }
            None => bytes,
        })
    }

    async fn list(&self, owner: &str) -> Result<Vec<AttachmentRef>, Unavailable> {
        let folder = self.folder(owner).ok_or(Unavailable::Gone)?;
        let mut entries = match tokio::fs::read_dir(&folder).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Unavailable::Store(Failure::caused_by(LISTING, e))),
        };
        let mut references = Vec::new();
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(|e| Unavailable::Store(Failure::caused_by(LISTING, e)))?
        {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "json")
                && let Ok(bytes) = tokio::fs::read(&path).await
            {
                references.extend(serde_json::from_slice::<AttachmentRef>(&bytes).ok());
            }
        }
        references.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(references)
    }

    async fn conversation_usage(&self, owner: &str) -> Option<u64> {
        let path = self.folder(owner)?.join(USAGE_FILE);
        let text = tokio::fs::read_to_string(path).await.ok()?;
        text.trim().parse().ok()
    }

    async fn remove_conversation(&self, owner: &str) -> Result<u64, Unavailable> {
        let folder = self.folder(owner).ok_or(Unavailable::Gone)?;
        let failed = |e: std::io::Error| {
            Unavailable::Store(Failure::caused_by(
                "the conversation's files cannot be removed",
                e,
            ))
        };
        let mut entries = match tokio::fs::read_dir(&folder).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(failed(e)),
        };
        let mut files = 0;
        while let Some(entry) = entries.next_entry().await.map_err(failed)? {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if !name.ends_with(".json") && name != USAGE_FILE {
                files += 1;
            }
        }
        tokio::fs::remove_dir_all(&folder).await.map_err(failed)?;
        Ok(files)
    }

    async fn record_usage(&self, owner: &str, tokens: u64) -> Result<(), Unavailable> {
        let folder = self.folder(owner).ok_or(Unavailable::Gone)?;
        let used = self.conversation_usage(owner).await.unwrap_or(0);
        tokio::fs::create_dir_all(&folder)
            .await
            .map_err(|e| Unavailable::Store(Failure::caused_by(RECORDING_USAGE, e)))?;
        tokio::fs::write(folder.join(USAGE_FILE), used.saturating_add(tokens).to_string())
            .await
            .map_err(|e| Unavailable::Store(Failure::caused_by(RECORDING_USAGE, e)))
    }
}
