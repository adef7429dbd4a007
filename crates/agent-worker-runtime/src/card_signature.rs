//! Signed A2A agent cards: a JWS (ES256) over the card's canonical form, RFC 8785 (JCS), as A2A
//! 1.0 defines it and its SDKs compute it: the card without `signatures`, with every empty value
//! (null, `""`, `[]`, `{}`) left out, its keys ordered by their UTF-16 code units. A signature is
//! `{protected, signature}`: the JWS's protected header (`{"alg": "ES256", "kid", "typ": "JOSE"}`)
//! and signature, base64url, the payload detached.
//!
//! [`CardSigner`] signs the card a server serves (`AGENT_CARD_SIGNING_KEY`); [`CardKey`] checks
//! the card of a remote agent a configuration names with its signer's public key.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey};
use serde_json::{Value, json};

/// The deepest nesting a card may have to be canonicalized.
const MAX_DEPTH: usize = 128;

/// Why a card has no canonical form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    /// A number that is no double (not finite).
    #[error("the number {0} has no canonical form")]
    Number(String),
    /// Nesting past [`MAX_DEPTH`].
    #[error("nesting exceeds {MAX_DEPTH} levels")]
    TooDeep,
}

/// Why a key cannot sign or check cards.
#[derive(Debug, thiserror::Error)]
#[error("not an EC P-256 key in PEM ({0})")]
pub struct CardKeyError(#[source] jsonwebtoken::errors::Error);

/// Why a card's signatures are not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The card carries no signature.
    #[error("the card is not signed")]
    Unsigned,
    /// None of its signatures is the key's, over this card.
    #[error("no signature of the card is the configured key's over the card as served")]
    NoneValid,
    /// The card has no canonical form.
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
}

/// The private key that signs the cards a server serves, and its id (`kid`).
#[derive(Clone)]
pub struct CardSigner {
    key: EncodingKey,
    kid: String,
}

impl std::fmt::Debug for CardSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CardSigner")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl CardSigner {
    /// An EC P-256 private key in PEM (PKCS#8, as `openssl genpkey -algorithm EC -pkeyopt
    /// ec_paramgen_curve:P-256` writes it), named `kid`.
    pub fn from_pem(pem: &str, kid: impl Into<String>) -> Result<Self, CardKeyError> {
        let key = EncodingKey::from_ec_pem(pem.as_bytes()).map_err(CardKeyError)?;
        let signer = Self { key, kid: kid.into() };
        // A key that cannot sign fails here, at start, not at the first card.
        if let Err(SignOrCanonical::Sign(e)) = signer.signature_of(&json!({})) {
            return Err(CardKeyError(e));
        }
        Ok(signer)
    }

    /// `card`, signed: its signature added to its `signatures`.
    pub fn sign(&self, card: &mut Value) -> Result<(), CanonicalError> {
        let signature = match self.signature_of(card) {
            Ok(signature) => signature,
            Err(SignOrCanonical::Canonical(e)) => return Err(e),
            // A key that signed at start signs again; should the provider fail, the card goes
            // out unsigned rather than not at all.
            Err(SignOrCanonical::Sign(e)) => {
                tracing::warn!(error = %e, "the agent card could not be signed");
                return Ok(());
            }
        };
        match card.get_mut("signatures").and_then(Value::as_array_mut) {
            Some(signatures) => signatures.push(signature),
            None => card["signatures"] = json!([signature]),
        }
        Ok(())
    }

    fn signature_of(&self, card: &Value) -> Result<Value, SignOrCanonical> {
        let header = json!({"alg": "ES256", "kid": self.kid, "typ": "JOSE"});
        let protected = URL_SAFE_NO_PAD.encode(header.to_string());
        let input = signing_input(&protected, card).map_err(SignOrCanonical::Canonical)?;
        let signature = jsonwebtoken::crypto::sign(input.as_bytes(), &self.key, Algorithm::ES256)
            .map_err(SignOrCanonical::Sign)?;
        Ok(json!({"protected": protected, "signature": signature}))
    }
}

enum SignOrCanonical {
    Sign(jsonwebtoken::errors::Error),
    Canonical(CanonicalError),
}

/// A signer's public key, which a remote agent's card must be signed with.
#[derive(Clone)]
pub struct CardKey(DecodingKey);

impl std::fmt::Debug for CardKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CardKey(..)")
    }
}

impl CardKey {
    /// An EC P-256 public key in PEM (`-----BEGIN PUBLIC KEY-----`).
    pub fn from_pem(pem: &str) -> Result<Self, CardKeyError> {
        DecodingKey::from_ec_pem(pem.as_bytes())
            .map(Self)
            .map_err(CardKeyError)
    }

    /// Whether one of `card`'s signatures is this key's over the card as it is (ES256 only: a
    /// signature whose header names another algorithm is passed over).
    pub fn verify(&self, card: &Value) -> Result<(), SignatureError> {
        let signatures = card["signatures"].as_array().filter(|s| !s.is_empty());
        let signatures = signatures.ok_or(SignatureError::Unsigned)?;
        for signature in signatures {
            let (Some(protected), Some(value)) =
                (signature["protected"].as_str(), signature["signature"].as_str())
            else {
                continue;
            };
            // Only ES256: a header naming another algorithm is not believed.
            let header = URL_SAFE_NO_PAD
                .decode(protected)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
            if header.as_ref().and_then(|h| h["alg"].as_str()) != Some("ES256") {
                continue;
            }
            let input = signing_input(protected, card)?;
            if jsonwebtoken::crypto::verify(value, input.as_bytes(), &self.0, Algorithm::ES256)
                .unwrap_or(false)
            {
                return Ok(());
            }
        }
        Err(SignatureError::NoneValid)
    }
}

/// The JWS signing input: the protected header, then the canonical card, base64url.
fn signing_input(protected: &str, card: &Value) -> Result<String, CanonicalError> {
    Ok(format!(
        "{protected}.{}",
        URL_SAFE_NO_PAD.encode(canonical_card(card)?)
    ))
}

/// The card's canonical form: without `signatures`, its empty values left out, in JCS.
pub fn canonical_card(card: &Value) -> Result<String, CanonicalError> {
    let mut unsigned = card.clone();
    if let Some(fields) = unsigned.as_object_mut() {
        fields.remove("signatures");
    }
    let cleaned = without_empty(&unsigned, 1)?.unwrap_or_else(|| json!({}));
    let mut out = String::new();
    canonical(&cleaned, &mut out)?;
    Ok(out)
}

/// `value` with every null, `""`, `[]` and `{}` left out (`None` when it is itself empty).
fn without_empty(value: &Value, depth: usize) -> Result<Option<Value>, CanonicalError> {
    if depth > MAX_DEPTH && (value.is_object() || value.is_array()) {
        return Err(CanonicalError::TooDeep);
    }
    Ok(match value {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::Object(fields) => {
            let mut kept = serde_json::Map::new();
            for (key, value) in fields {
                if let Some(value) = without_empty(value, depth + 1)? {
                    kept.insert(key.clone(), value);
                }
            }
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        Value::Array(items) => {
            let mut kept = Vec::new();
            for item in items {
                kept.extend(without_empty(item, depth + 1)?);
            }
            (!kept.is_empty()).then_some(Value::Array(kept))
        }
        other => Some(other.clone()),
    })
}

/// `value` in RFC 8785's form, onto `out`.
fn canonical(value: &Value, out: &mut String) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number(n)?),
        Value::String(s) => string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out)?;
            }
            out.push(']');
        }
        Value::Object(fields) => {
            let mut keys: Vec<&String> = fields.keys().collect();
            keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                string(key, out);
                out.push(':');
                canonical(&fields[key], out)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// A string: `"` and `\` escaped, the C0 controls as `\b \f \n \r \t` or `\u00xx`, the rest as
/// it is.
fn string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A number as ECMAScript writes it (`Number.prototype.toString`), as RFC 8785 asks.
fn number(n: &serde_json::Number) -> Result<String, CanonicalError> {
    const SAFE: i128 = (1 << 53) - 1;
    let integer = n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from));
    if let Some(i) = integer.filter(|i| (-SAFE..=SAFE).contains(i)) {
        return Ok(i.to_string());
    }
    // Past ±(2^53 - 1), as the double a JSON reader holds (RFC 8785 reads every number so).
    let f = n
        .as_f64()
        .filter(|f| f.is_finite())
        .ok_or_else(|| CanonicalError::Number(n.to_string()))?;
    if f == 0.0 {
        return Ok("0".to_owned());
    }
    // The shortest digits that read back as `f`, and the exponent of the first.
    let scientific = format!("{:e}", f.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (k, n) = (digits.len() as i32, exponent + 1);
    let written = if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let rest = if k > 1 {
            format!(".{}", &digits[1..])
        } else {
            String::new()
        };
        let sign = if n > 0 { "+" } else { "-" };
        format!("{}{rest}e{sign}{}", &digits[..1], (n - 1).abs())
    };
    Ok(if f < 0.0 { format!("-{written}") } else { written })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_canonical_form_is_rfc_8785s() {
        // RFC 8785 section 3.2.2's example: numbers as ECMAScript writes them, strings with their
        // own characters but the escapes JSON needs.
        let value: Value = serde_json::from_str(
            r#"{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001, -0, 100, 1e21, 1e-7],
                "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
                "literals": [null, true, false]}"#,
        )
        .unwrap();
        let mut out = String::new();
        canonical(&value, &mut out).unwrap();
        assert_eq!(
            out,
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27,0,100,1e+21,1e-7],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
        // Section 3.2.3's sorting example: by UTF-16 code units, so U+1F600 (a surrogate pair,
        // 0xD83D …) comes before U+FB33, as it would not by code points.
        let keys: Value = serde_json::from_str(
            r#"{"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh",
                "1": "One", "\ud83d\ude00": "Emoji: Grinning Face", "\u0080": "Control", "\u00f6": "Latin Small Letter O With Diaeresis"}"#,
        )
        .unwrap();
        let mut out = String::new();
        canonical(&keys, &mut out).unwrap();
        let positions: Vec<usize> = [
            "\\r",
            "\"1\"",
            "\u{80}",
            "\u{f6}",
            "\u{20ac}",
            "\u{1f600}",
            "\u{fb33}",
        ]
        .iter()
        .map(|key| out.find(key).unwrap())
        .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{out}");
        assert_eq!(
            number(&serde_json::Number::from(1u64 << 60)).unwrap(),
            "1152921504606847000"
        );
        assert_eq!(
            number(&serde_json::Number::from(u64::MAX)).unwrap(),
            "18446744073709552000"
        );
    }

    #[test]
    fn a_card_signed_is_checked_by_its_key_and_by_no_other_and_not_once_changed() {
        // The test kit's keys (`crates/agent-worker-testkit/keys/`), made for the tests alone.
        let signer = CardSigner::from_pem(TEST_PRIVATE, "card-1").unwrap();
        let key = CardKey::from_pem(TEST_PUBLIC).unwrap();
        let mut card =
            json!({"name": "desk", "description": "", "skills": [], "capabilities": {"streaming": true}});
        assert_eq!(key.verify(&card), Err(SignatureError::Unsigned));
        signer.sign(&mut card).unwrap();
        key.verify(&card).unwrap();
        let protected = card["signatures"][0]["protected"].as_str().unwrap();
        let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(protected).unwrap()).unwrap();
        assert_eq!(header, json!({"alg": "ES256", "kid": "card-1", "typ": "JOSE"}));
        // Empty values are not part of what is signed; a changed value is.
        card["description"] = json!(null);
        key.verify(&card).unwrap();
        card["name"] = json!("evil");
        assert_eq!(key.verify(&card), Err(SignatureError::NoneValid));
        let other = CardKey::from_pem(OTHER_PUBLIC).unwrap();
        card["name"] = json!("desk");
        assert_eq!(other.verify(&card), Err(SignatureError::NoneValid));
        assert!(CardSigner::from_pem("not a key", "k").is_err());
    }

    const TEST_PRIVATE: &str = include_str!("../../agent-worker-testkit/keys/card-signing.pem");
    const TEST_PUBLIC: &str = include_str!("../../agent-worker-testkit/keys/card-signing.pub.pem");
    const OTHER_PUBLIC: &str = include_str!("../../agent-worker-testkit/keys/other.pub.pem");
}
