//! [`AttachmentRef`]: a reference to a file the person attached, as it travels on a turn and in
//! history. It never carries the file's bytes or text.

use serde::{Deserialize, Serialize};

/// What kind of file a reference points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum AttachmentKind {
    /// A picture.
    Image,
    /// Plain text (text/*, JSON, CSV, Markdown).
    Text,
    /// A document such as a PDF.
    Document,
    /// Anything else.
    #[default]
    Other,
}

/// Where a file's check stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum AttachmentStatus {
    /// Checked and usable.
    #[default]
    Ready,
    /// Not checked yet.
    Pending,
    /// Refused by the check.
    Refused,
}

/// A file the person attached: its id in the host's file area and what is known of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AttachmentRef {
    /// Its id in the file area.
    pub id: String,
    /// The name the person gave it.
    pub name: String,
    /// Its checked media type, such as `image/png`.
    pub media_type: String,
    /// What kind of file it is.
    #[serde(default)]
    pub kind: AttachmentKind,
    /// Its size in bytes.
    pub size: u64,
    /// A picture's width in pixels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    /// A picture's height in pixels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    /// Where its check stands.
    #[serde(default)]
    pub status: AttachmentStatus,
}

impl AttachmentRef {
    /// A ready reference to `id`.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        media_type: impl Into<String>,
        size: u64,
    ) -> Self {
        let media_type = media_type.into();
        let kind = kind_of(&media_type);
        Self {
            id: id.into(),
            name: name.into(),
            media_type,
            kind,
            size,
            width: None,
            height: None,
            status: AttachmentStatus::Ready,
        }
    }
}

impl AttachmentRef {
    /// The line that stands for the file where its content is not given: its id, name, type and
    /// size as one JSON object, the name cleaned of control characters and cut to 200 characters.
    pub fn reference_line(&self) -> String {
        format!("[attachment {}]", self.summary())
    }

    /// What the model is told of the file: its id, name (cleaned of control characters and cut
    /// to 200 characters), type and size.
    pub fn summary(&self) -> serde_json::Value {
        let name: String = self.name.chars().filter(|c| !c.is_control()).take(200).collect();
        let mut fields = serde_json::Map::new();
        fields.insert("id".into(), self.id.clone().into());
        fields.insert("name".into(), name.into());
        fields.insert("type".into(), self.media_type.clone().into());
        fields.insert("size".into(), self.size.into());
        serde_json::Value::Object(fields)
    }
}

/// The kind a media type belongs to.
pub fn kind_of(media_type: &str) -> AttachmentKind {
    match media_type {
        t if t.starts_with("image/") => AttachmentKind::Image,
        t if t.starts_with("text/") => AttachmentKind::Text,
        "application/json" | "application/xml" | "application/x-yaml" => AttachmentKind::Text,
        "application/pdf" => AttachmentKind::Document,
        _ => AttachmentKind::Other,
    }
}
