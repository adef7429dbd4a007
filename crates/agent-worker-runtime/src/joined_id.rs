//! Ids a protocol hands out that name two of ours at once (an A2A task: its conversation and its
//! turn; an AG-UI frontend call: its turn and the model's call), so that any instance finds what
//! one names from the table alone. The first is base64url-encoded (so it holds no dot), then a
//! dot, then the second as it is.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// `first` and `second` as one id.
pub fn join(first: &str, second: &str) -> String {
    format!("{}.{second}", URL_SAFE_NO_PAD.encode(first))
}

/// The two parts of an id [`join`] made, if it is one.
pub fn split(id: &str) -> Option<(String, &str)> {
    let (first, second) = id.split_once('.')?;
    let first = String::from_utf8(URL_SAFE_NO_PAD.decode(first).ok()?).ok()?;
    Some((first, second))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_joined_id_splits_back_into_its_parts_whatever_they_hold() {
        for (first, second) in [("conv-1", "turn-1"), ("a.b/c d", "x.y.z"), ("é", "")] {
            assert_eq!(split(&join(first, second)), Some((first.to_owned(), second)));
        }
        for bad in ["no-dot", "!!.x", "/w==.x"] {
            assert_eq!(split(bad), None, "{bad:?}");
        }
    }
}
