//! The ids a store keys on: [`SessionId`] (a conversation) and [`TurnId`] (one turn of it).
//!
//! An id is checked once, where it enters (a payload, a route, the CLI, the engine's scope), and
//! is typed from there on: a store never sees a text that could not key it. What every id must
//! be is said by [`IdError`], decided here once for every route, protocol and queue: not blank,
//! no control character (NUL included), no character that is invisible or turns the direction of
//! text around it ([`is_spoofing`]: an id shown in a list must read as what it is), not `.` or
//! `..` (which name folders wherever an id becomes a path). Anything else is the caller's to
//! choose: `/`, `#`, `~`, `%` and letters of any script included; a store or a file area that
//! keeps an id in a key or a name escapes what it cannot hold. How long an id a store can key is
//! the store's own limit, checked with [`SessionId::fits`] / [`TurnId::fits`].

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Why a text cannot be an id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// Blank: empty, or white space only.
    #[error("must not be empty")]
    Empty,
    /// Holds a control character at this character position.
    #[error("holds a control character (at {0})")]
    Control(usize),
    /// Holds a character that is invisible or turns the direction of text (see
    /// [`is_spoofing`]) at this character position.
    #[error("holds U+{code:04X}, an invisible or direction-changing character (at {at})")]
    Invisible {
        /// The character's position.
        at: usize,
        /// Its code point.
        code: u32,
    },
    /// Is `.` or `..`.
    #[error("is {0:?}, which names a folder")]
    Folder(String),
    /// Is longer than a store can key.
    #[error("is {len} bytes, over the limit of {limit}")]
    TooLong {
        /// The id's length in bytes.
        len: usize,
        /// The store's limit in bytes.
        limit: usize,
    },
}

/// The problem with `id` as an id, if it has one (see [`IdError`]); `limit` is a store's longest
/// id in bytes, `None` for none.
///
/// ```
/// use agent_worker_contract::{IdError, id_problem};
///
/// assert_eq!(id_problem("conv-1", Some(16)), None);
/// assert_eq!(id_problem("a\0b", None), Some(IdError::Control(1)));
/// assert_eq!(id_problem("team/conv-1", None), None);
/// assert_eq!(id_problem("bob\u{202E}exe.pdf", None), Some(IdError::Invisible { at: 3, code: 0x202E }));
/// assert_eq!(id_problem("..", None).map(|e| e.to_string()).as_deref(), Some("is \"..\", which names a folder"));
/// assert_eq!(id_problem("abc", Some(2)), Some(IdError::TooLong { len: 3, limit: 2 }));
/// ```
pub fn id_problem(id: &str, limit: Option<usize>) -> Option<IdError> {
    if id.trim().is_empty() {
        return Some(IdError::Empty);
    }
    if let Some(at) = id.chars().position(char::is_control) {
        return Some(IdError::Control(at));
    }
    if let Some((at, c)) = id.chars().enumerate().find(|(_, c)| is_spoofing(*c)) {
        return Some(IdError::Invisible {
            at,
            code: u32::from(c),
        });
    }
    if matches!(id, "." | "..") {
        return Some(IdError::Folder(id.to_owned()));
    }
    limit
        .filter(|&limit| id.len() > limit)
        .map(|limit| IdError::TooLong { len: id.len(), limit })
}

/// Whether `c` hides or reorders the text around it, so that an id holding it shows as another
/// id in a list: the bidirectional embeddings, overrides and isolates (U+202A–U+202E,
/// U+2066–U+2069) and marks (U+200E, U+200F, U+061C), the zero-width characters (U+200B–U+200D,
/// U+2060, U+FEFF), and the line and paragraph separators (U+2028, U+2029).
///
/// ```
/// use agent_worker_contract::is_spoofing;
///
/// assert!(is_spoofing('\u{202E}'));
/// assert!(is_spoofing('\u{FEFF}'));
/// assert!(!is_spoofing('/'));
/// assert!(!is_spoofing('é'));
/// ```
pub fn is_spoofing(c: char) -> bool {
    matches!(
        c,
        '\u{202A}'..='\u{202E}'
            | '\u{2066}'..='\u{2069}'
            | '\u{200B}'..='\u{200F}'
            | '\u{061C}'
            | '\u{2060}'
            | '\u{FEFF}'
            | '\u{2028}'
            | '\u{2029}'
    )
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
        pub struct $name(String);

        impl $name {
            /// `id`, checked (see [`IdError`]).
            pub fn new(id: impl Into<String>) -> Result<Self, IdError> {
                let id = id.into();
                match id_problem(&id, None) {
                    Some(problem) => Err(problem),
                    None => Ok(Self(id)),
                }
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The id's text, owned.
            pub fn into_string(self) -> String {
                self.0
            }

            /// Whether a store whose longest id is `limit` bytes (`None`: no limit) can key it.
            pub fn fits(&self, limit: Option<usize>) -> Result<(), IdError> {
                match limit {
                    Some(limit) if self.0.len() > limit => Err(IdError::TooLong { len: self.0.len(), limit }),
                    _ => Ok(()),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                self.0 == *other
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(id: &str) -> Result<Self, IdError> {
                Self::new(id)
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(id: String) -> Result<Self, IdError> {
                Self::new(id)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = IdError;
            fn try_from(id: &str) -> Result<Self, IdError> {
                Self::new(id)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }
    };
}

id_type!(
    /// A conversation's id: the session a turn belongs to, as the caller named it.
    ///
    /// ```
    /// use agent_worker_contract::{IdError, SessionId};
    ///
    /// let id = SessionId::new("conv-1")?;
    /// assert_eq!(id, "conv-1");
    /// assert_eq!(SessionId::new(" "), Err(IdError::Empty));
    /// assert!(serde_json::from_str::<SessionId>("\"a\\u0000b\"").is_err());
    /// # Ok::<_, IdError>(())
    /// ```
    SessionId
);

id_type!(
    /// A turn's id: one turn of a conversation, the unit that runs once however often it is
    /// delivered.
    TurnId
);

/// 122 random bits (a version 4 UUID's) drawn from the operating system's random source when
/// called: never from a generator seeded earlier in the process, whose state every instance
/// restored from one snapshot (AgentCore Runtime's sessions, Lambda SnapStart) would share, and
/// so give each the same "random" values. Every per-request random value comes from here or
/// from a UUID made when it is needed.
pub fn fresh_random_bits() -> u128 {
    uuid::Uuid::new_v4().as_u128()
}

impl TurnId {
    /// A fresh turn id (a random UUID's text), for a turn its caller did not name.
    pub fn random() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_that_spoof_a_list_are_refused_in_every_id_and_others_are_taken() {
        let spoofing = [
            '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}', '\u{2068}',
            '\u{2069}', '\u{200B}', '\u{200C}', '\u{200D}', '\u{2060}', '\u{FEFF}', '\u{2028}', '\u{2029}',
        ];
        for c in spoofing {
            let id = format!("conv{c}1");
            let refused = Some(IdError::Invisible {
                at: 4,
                code: u32::from(c),
            });
            assert_eq!(id_problem(&id, None), refused, "U+{:04X}", u32::from(c));
            assert!(SessionId::new(id.clone()).is_err());
            assert!(TurnId::new(id.clone()).is_err());
            assert!(serde_json::from_value::<SessionId>(serde_json::json!(id)).is_err());
        }
        for plain in ["team/conv-1", "a#b", "m~1", "50%", "conversación", "会話"] {
            assert_eq!(id_problem(plain, None), None, "{plain}");
        }
    }
}
