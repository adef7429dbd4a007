//! Checks a [`Prompt`] and turns it into the turn's user message.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::ImageFormat;
use crate::protocol::Prompt;
use crate::session::{ContentBlock, Message, Role};

/// The image types a prompt may carry: every [`ImageFormat`].
pub const IMAGE_TYPES: [ImageFormat; 4] = ImageFormat::ALL;

/// The largest image a prompt may carry, decoded (Bedrock's limit).
pub const MAX_IMAGE_BYTES: usize = 3_750_000;

/// A prompt the engine refuses; `field` names the part at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {reason}")]
pub struct InvalidPrompt {
    /// The field, as a path: `prompt.text`, `prompt.images[1].mimeType`.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> InvalidPrompt {
    InvalidPrompt {
        field: field.into(),
        reason: reason.into(),
    }
}

/// The user message for `prompt`: its pictures, then its text.
pub fn user_message(prompt: &Prompt) -> Result<Message, InvalidPrompt> {
    if prompt.text.trim().is_empty() && prompt.images.is_empty() && prompt.attachments.is_empty() {
        return Err(invalid(
            "prompt.text",
            "is empty, and there are no images or files",
        ));
    }
    let mut content = Vec::with_capacity(prompt.images.len() + 1);
    for (i, image) in prompt.images.iter().enumerate() {
        let Some(format) = ImageFormat::from_mime_type(&image.mime_type) else {
            return Err(invalid(
                format!("prompt.images[{i}].mimeType"),
                format!(
                    "{:?} is not supported; use one of {}",
                    image.mime_type,
                    ImageFormat::list(&IMAGE_TYPES)
                ),
            ));
        };
        let field = format!("prompt.images[{i}].data");
        let bytes = BASE64
            .decode(image.data.trim())
            .map_err(|e| invalid(&field, format!("is not base64: {e}")))?;
        if bytes.is_empty() {
            return Err(invalid(field, "is empty"));
        }
        if bytes.len() > MAX_IMAGE_BYTES {
            return Err(invalid(
                field,
                format!("is {} bytes, over the limit of {MAX_IMAGE_BYTES}", bytes.len()),
            ));
        }
        if !format.has_signature(&bytes) {
            return Err(invalid(field, format!("is not a {} image", image.mime_type)));
        }
        content.push(ContentBlock::Image {
            mime_type: image.mime_type.clone(),
            data: BASE64.encode(&bytes),
        });
    }
    for (i, attachment) in prompt.attachments.iter().enumerate() {
        if attachment.id.trim().is_empty() {
            return Err(invalid(format!("prompt.attachments[{i}].id"), "is empty"));
        }
    }
    content.extend(super::attachments::reference_blocks(&prompt.attachments));
    if !prompt.text.trim().is_empty() {
        content.push(ContentBlock::text(prompt.text.clone()));
    }
    Ok(Message::new(Role::User, content))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ImageRef;

    const PNG_1X1: &str =
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

    fn image(mime: &str, data: &str) -> ImageRef {
        ImageRef {
            mime_type: mime.into(),
            data: data.into(),
        }
    }

    #[test]
    fn text_and_images_become_one_user_message() {
        let msg =
            user_message(&Prompt::text("what is this?").with_image(image("image/png", PNG_1X1))).unwrap();
        assert_eq!(msg.role, Role::User);
        assert!(matches!(&msg.content[0], ContentBlock::Image { mime_type, .. } if mime_type == "image/png"));
        assert_eq!(msg.content[1], ContentBlock::text("what is this?"));
        assert!(user_message(&Prompt::text("").with_image(image("image/png", PNG_1X1))).is_ok());
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases = [
            (
                Prompt::text("  "),
                "prompt.text is empty, and there are no images or files",
            ),
            (
                Prompt::text("x")
                    .with_image(image("image/png", PNG_1X1))
                    .with_image(image("image/bmp", PNG_1X1)),
                "prompt.images[1].mimeType \"image/bmp\" is not supported",
            ),
            (
                Prompt::text("x").with_image(image("image/png", "not base64!")),
                "prompt.images[0].data is not base64",
            ),
            (
                Prompt::text("x").with_image(image("image/jpeg", PNG_1X1)),
                "prompt.images[0].data is not a image/jpeg image",
            ),
            (
                Prompt::text("x").with_image(image("image/gif", "")),
                "prompt.images[0].data is empty",
            ),
        ];
        for (prompt, expected) in cases {
            let err = user_message(&prompt).unwrap_err().to_string();
            assert!(err.starts_with(expected), "{err}");
        }
    }
}
