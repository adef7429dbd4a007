//! `attachment_list`, `attachment_view` and `attachment_read`: the model reaches every file of
//! the conversation by its id. They are of the [`ToolClass::Attachment`] class, offered only
//! when the tool policy admits it. A picture viewed and text read go to the model with that
//! call's result only ([`ToolReply::shown`]); the stored result names the file.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{FileArea, MAX_TEXT_CHARS, Unavailable, page_of, picture, text_window};
use crate::engine::tools::{Tool, ToolClass, ToolContext, ToolError, ToolReply, ToolSpec};
use crate::protocol::{AttachmentKind, AttachmentRef, AttachmentStatus, kind_of};
use crate::session::ContentBlock;

#[derive(Debug, Clone, Copy)]
enum Which {
    List,
    View,
    Read,
}

/// One of the three tools, on the engine's file area.
#[derive(Debug)]
struct AttachmentTool {
    spec: ToolSpec,
    which: Which,
    area: Arc<dyn FileArea>,
}

/// The three attachment tools on `area`. With `read_kept`, the engine keeps large content in
/// the area and gives the model its first page: `attachment_read` is then offered by default
/// (the tool policy need not admit [`ToolClass::Attachment`]), as the way to read the rest.
pub(crate) fn attachment_tools(area: &Arc<dyn FileArea>, read_kept: bool) -> Vec<Arc<dyn Tool>> {
    let id = json!({"type": "string", "minLength": 1, "description": "The file's id, as its reference line gives it."});
    let specs = [
        (
            Which::List,
            ToolSpec::new(
                "attachment_list",
                "Lists every file the person attached in this conversation: id, name, type, size and whether it can be read.",
                json!({"type": "object", "properties": {}, "additionalProperties": false}),
            ),
        ),
        (
            Which::View,
            ToolSpec::new(
                "attachment_view",
                "Shows you a picture the person attached in this conversation (PNG, JPEG or WebP), by its id.",
                json!({"type": "object", "properties": {"id": id}, "required": ["id"], "additionalProperties": false}),
            ),
        ),
        (
            Which::Read,
            ToolSpec::new(
                "attachment_read",
                format!(
                    "Reads the text of a text file or PDF the person attached in this conversation, or of content \
                     kept for it (a long result, a long pasted text), by its id: \
                     up to {MAX_TEXT_CHARS} characters from character `from` (0 when left out)."
                ),
                json!({
                    "type": "object",
                    "properties": {"id": id, "from": {"type": "integer", "minimum": 0}},
                    "required": ["id"],
                    "additionalProperties": false
                }),
            ),
        ),
    ];
    specs
        .into_iter()
        .map(|(which, spec)| {
            let class = match which {
                Which::Read if read_kept => ToolClass::Backend,
                _ => ToolClass::Attachment,
            };
            Arc::new(AttachmentTool {
                spec: spec.class(class).args_sensitive(false),
                which,
                area: area.clone(),
            }) as Arc<dyn Tool>
        })
        .collect()
}

fn not_available(id: &str, why: &Unavailable) -> ToolError {
    ToolError::new(format!("file {id:?} is not available: {why}"))
}

impl AttachmentTool {
    /// The conversation's file `id`, when it has passed its check.
    async fn ready(&self, id: &str, owner: &str) -> Result<AttachmentRef, ToolError> {
        let found = self.area.describe(&[id.to_owned()], owner).await;
        match found.into_iter().next() {
            Some(Ok(reference)) => Ok(reference),
            Some(Err(why)) => Err(not_available(id, &why)),
            None => Err(not_available(id, &Unavailable::Gone)),
        }
    }

    async fn list(&self, owner: &str) -> Result<ToolReply, ToolError> {
        let files = self
            .area
            .list(owner)
            .await
            .map_err(|why| ToolError::new(format!("the files cannot be listed: {why}")))?;
        let files: Vec<Value> = files
            .iter()
            .map(|f| {
                let mut summary = f.summary();
                let status = match f.status {
                    AttachmentStatus::Ready => "ready",
                    AttachmentStatus::Pending => "pending",
                    AttachmentStatus::Refused => "refused",
                };
                summary["status"] = status.into();
                summary
            })
            .collect();
        Ok(json!({ "files": files }).into())
    }

    async fn view(&self, id: &str, owner: &str) -> Result<ToolReply, ToolError> {
        let reference = self.ready(id, owner).await?;
        if kind_of(&reference.media_type) != AttachmentKind::Image {
            return Err(ToolError::new(format!(
                "file {id:?} is {}, not a picture; attachment_read reads text",
                reference.media_type
            )));
        }
        let shown = picture(self.area.as_ref(), owner, &reference)
            .await
            .map_err(|why| not_available(id, &why))?;
        Ok(ToolReply {
            content: json!({
                "shown": reference.summary(),
                "note": "The picture is with this result for this turn only.",
            }),
            shown,
        })
    }

    async fn read(&self, id: &str, from: usize, owner: &str) -> Result<ToolReply, ToolError> {
        let reference = self.ready(id, owner).await?;
        let window = text_window(self.area.as_ref(), owner, &reference, from, MAX_TEXT_CHARS)
            .await
            .map_err(|why| not_available(id, &why))?;
        let page = page_of(&reference, &window);
        let end = window.end();
        Ok(ToolReply {
            content: json!({
                "read": reference.summary(),
                "from": from,
                "chars": page.chars,
                "total": page.total,
                "next": (end < page.total).then_some(end),
                "note": "The text is with this result for this turn only.",
            }),
            shown: vec![ContentBlock::text(page.enclosed)],
        })
    }
}

#[async_trait]
impl Tool for AttachmentTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        self.reply(input, ctx).await.map(|reply| reply.content)
    }

    async fn reply(&self, input: Value, ctx: ToolContext) -> Result<ToolReply, ToolError> {
        let owner = ctx.session.as_str();
        let id = input["id"].as_str().unwrap_or_default();
        match self.which {
            Which::List => self.list(owner).await,
            Which::View => self.view(id, owner).await,
            Which::Read => {
                let from = input["from"]
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .unwrap_or(0);
                self.read(id, from, owner).await
            }
        }
    }
}
