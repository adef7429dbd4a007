//! [`redact`]: what a message from AWS may carry that a client must not see.

/// `text` with ARNs and 12-digit account ids replaced by `<arn>` and `<account>`: an AWS error
/// message (an access denial names the role, the account and the resource) made fit for a
/// client. The worker's log keeps the original.
///
/// ```
/// use agent_worker_contract::redact;
/// let said = "User: arn:aws:sts::123456789012:assumed-role/worker/fn is not authorized (account 123456789012)";
/// assert_eq!(redact(said), "User: <arn> is not authorized (account <account>)");
/// ```
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("arn:") {
        let (before, from) = rest.split_at(at);
        let starts_a_word = before.chars().last().is_none_or(|c| !c.is_ascii_alphanumeric());
        out.push_str(&redact_accounts(before));
        let end = from
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | ')' | ']' | '}' | '>'))
            .unwrap_or(from.len());
        if starts_a_word {
            out.push_str("<arn>");
        } else {
            out.push_str(&redact_accounts(&from[..end]));
        }
        rest = &from[end..];
    }
    out.push_str(&redact_accounts(rest));
    out
}

/// Runs of exactly 12 digits, as account ids are written.
fn redact_accounts(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut digits = String::new();
    for c in text.chars().chain(std::iter::once('\0')) {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        if digits.len() == 12 {
            out.push_str("<account>");
        } else {
            out.push_str(&digits);
        }
        digits.clear();
        if c != '\0' {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arns_and_account_ids_go_and_the_rest_stays() {
        assert_eq!(
            redact("on resource: arn:aws:bedrock:us-east-1::foundation-model/x, retry"),
            "on resource: <arn>, retry"
        );
        assert_eq!(
            redact("barn:owl 1234567890123 and 123456789012."),
            "barn:owl 1234567890123 and <account>."
        );
        assert_eq!(redact("plain words"), "plain words");
    }
}
