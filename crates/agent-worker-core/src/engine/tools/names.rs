//! Tool names: one made from something else's name, and a pattern matched against one.

/// Whether tool name `name` matches `pattern`, where `*` is any run of characters (and a
/// pattern without one is the name itself).
pub fn name_matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// `raw` made a tool name model APIs take: each character outside `A-Z a-z 0-9 _ -` becomes
/// `_`, and at most 64 are kept (for tools named after something else: an MCP server's, a
/// page's actions).
pub fn tool_name_from(raw: &str) -> String {
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_as_globs() {
        assert!(name_matches("delete_*", "delete_ticket"));
        assert!(!name_matches("delete_*", "undelete_ticket"));
        assert!(name_matches("*_ticket", "get_ticket"));
        assert!(name_matches("a*b*c", "axxbyyc"));
        assert!(!name_matches("a*b*c", "axxcyyb"));
        assert!(name_matches("exact", "exact"));
        assert!(!name_matches("exact", "exactly"));
        assert!(name_matches("*", "anything"));
    }
}
