//! [`ImageFormat`]: the one list of picture types, with their media types, file extensions and
//! signatures. A prompt's pictures, attached files, the Bedrock request and the command line all
//! ask it.

use std::fmt;

/// A picture type the engine knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageFormat {
    /// `image/png`.
    Png,
    /// `image/jpeg`.
    Jpeg,
    /// `image/gif`: a prompt's picture, not an attached file.
    Gif,
    /// `image/webp`.
    Webp,
}

impl ImageFormat {
    /// Every format, in the order messages list them.
    pub const ALL: [Self; 4] = [Self::Png, Self::Jpeg, Self::Gif, Self::Webp];

    /// The formats an attached file may have (the ones whose pixel size can be read from the
    /// header, for the token budget).
    pub const ATTACHABLE: [Self; 3] = [Self::Png, Self::Jpeg, Self::Webp];

    /// Its media type, such as `image/png`.
    pub const fn mime_type(self) -> &'static str {
        match self {
            Self::Png => "image/png",
            Self::Jpeg => "image/jpeg",
            Self::Gif => "image/gif",
            Self::Webp => "image/webp",
        }
    }

    /// The format of `mime_type`, if it is one.
    pub fn from_mime_type(mime_type: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.mime_type() == mime_type)
    }

    /// The format a file name's extension names (`png`, `jpg`, `jpeg`, `gif`, `webp`, any case).
    pub fn from_extension(extension: &str) -> Option<Self> {
        match extension.to_ascii_lowercase().as_str() {
            "png" => Some(Self::Png),
            "jpg" | "jpeg" => Some(Self::Jpeg),
            "gif" => Some(Self::Gif),
            "webp" => Some(Self::Webp),
            _ => None,
        }
    }

    /// Whether `bytes` start the way a file of this format does.
    pub fn has_signature(self, bytes: &[u8]) -> bool {
        match self {
            Self::Png => bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
            Self::Jpeg => bytes.starts_with(&[0xFF, 0xD8, 0xFF]),
            Self::Gif => bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a"),
            Self::Webp => bytes.get(..4) == Some(b"RIFF") && bytes.get(8..12) == Some(b"WEBP"),
        }
    }

    /// The format `bytes` start with, if any.
    pub fn sniff(bytes: &[u8]) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.has_signature(bytes))
    }

    /// The media types of `formats`, comma-separated, for a message.
    pub fn list(formats: &[Self]) -> String {
        formats
            .iter()
            .map(|f| f.mime_type())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for ImageFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mime_type())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_format_round_trips_and_knows_its_signature() {
        for format in ImageFormat::ALL {
            assert_eq!(ImageFormat::from_mime_type(format.mime_type()), Some(format));
        }
        assert_eq!(ImageFormat::from_mime_type("image/bmp"), None);
        assert_eq!(ImageFormat::from_extension("JPG"), Some(ImageFormat::Jpeg));
        assert_eq!(ImageFormat::from_extension("tiff"), None);
        assert_eq!(
            ImageFormat::sniff(b"\x89PNG\r\n\x1a\n...."),
            Some(ImageFormat::Png)
        );
        assert_eq!(ImageFormat::sniff(b"GIF89a..."), Some(ImageFormat::Gif));
        assert_eq!(
            ImageFormat::sniff(b"RIFF\0\0\0\0WEBPVP8 "),
            Some(ImageFormat::Webp)
        );
        assert_eq!(ImageFormat::sniff(b"%PDF-1.7"), None);
        assert!(!ImageFormat::Png.has_signature(&[0xFF, 0xD8, 0xFF]));
        assert_eq!(
            ImageFormat::list(&ImageFormat::ATTACHABLE),
            "image/png, image/jpeg, image/webp"
        );
    }
}
