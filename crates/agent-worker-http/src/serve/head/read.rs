//! A request head read as hyper reads it (the same parser, `httparse`, and hyper's rules for a
//! body's length), within the guard's bounds: taken, with what follows it, or refused, saying
//! why and naming the part at fault.

use axum::http::{Method, StatusCode, Uri};

use super::{Chunk, Framing, HeadLimits, REQUEST_LINE_SLACK, RefusedHead, line_end};

/// What reading a head found.
#[derive(Debug)]
pub(super) enum HeadRead {
    /// More bytes are needed.
    Partial,
    /// A head of this many bytes that hyper takes, and what follows it.
    Complete(usize, Framing),
    /// A head hyper would refuse, or one past the bounds.
    Refused(RefusedHead),
}

/// The head at the start of `bytes`, read as hyper reads it.
pub(super) fn read_head(bytes: &[u8], limits: HeadLimits) -> HeadRead {
    if bytes.is_empty() {
        return HeadRead::Partial;
    }
    let line = request_line(bytes);
    let path = line.map_or_else(|| "/".to_owned(), |(_, target)| path_of(target));
    if let Some((_, target)) = line
        && target.len() > limits.max_target_bytes
    {
        return HeadRead::Refused(target_too_long(target, limits, path));
    }
    let mut headers = vec![httparse::EMPTY_HEADER; limits.max_headers.max(1)];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(bytes) {
        Ok(httparse::Status::Complete(len)) if len > limits.max_head_bytes => {
            HeadRead::Refused(head_too_large(limits, path))
        }
        Ok(httparse::Status::Complete(len)) => match check(&request, limits, path) {
            Ok(next) => HeadRead::Complete(len, next),
            Err(refused) => HeadRead::Refused(refused),
        },
        Ok(httparse::Status::Partial) => {
            if line.is_none() && bytes.len() > limits.max_target_bytes + REQUEST_LINE_SLACK {
                let message = format!(
                    "the request's target is over the {} bytes this server takes",
                    limits.max_target_bytes
                );
                HeadRead::Refused(RefusedHead::new(StatusCode::URI_TOO_LONG, "path", message, path))
            } else if bytes.len() > limits.max_head_bytes {
                HeadRead::Refused(head_too_large(limits, path))
            } else {
                HeadRead::Partial
            }
        }
        Err(error) => HeadRead::Refused(parse_refusal(error, line, limits, path)),
    }
}

/// The method and target of the request line at the start of `bytes` (after any empty lines,
/// which HTTP lets a client send first), once the line is whole.
fn request_line(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let start = bytes.iter().position(|&b| b != b'\r' && b != b'\n')?;
    let rest = &bytes[start..];
    let line = &rest[..line_end(rest)? - 1];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut parts = line.splitn(3, |&b| b == b' ');
    let method = parts.next()?;
    let target = parts.next()?;
    Some((method, target))
}

/// The path of `target` (before its query), when it is plain ASCII; `/` otherwise.
fn path_of(target: &[u8]) -> String {
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    match std::str::from_utf8(path) {
        Ok(path) if path.starts_with('/') && path.bytes().all(|b| b.is_ascii_graphic()) => path.to_owned(),
        _ => "/".to_owned(),
    }
}

fn target_too_long(target: &[u8], limits: HeadLimits, path: String) -> RefusedHead {
    let in_path = target.split(|&b| b == b'?').next().unwrap_or_default().len();
    let field = if in_path > limits.max_target_bytes {
        "path"
    } else {
        "query"
    };
    let message = format!(
        "the request's target is {} bytes; this server takes at most {}",
        target.len(),
        limits.max_target_bytes
    );
    RefusedHead::new(StatusCode::URI_TOO_LONG, field, message, path)
}

fn head_too_large(limits: HeadLimits, path: String) -> RefusedHead {
    let message = format!(
        "the request's head is over the {} bytes this server takes",
        limits.max_head_bytes
    );
    RefusedHead::new(
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "headers",
        message,
        path,
    )
}

/// Whether `b` may stand in a request target as it is (anything else is percent-encoded).
fn is_url_byte(b: u8) -> bool {
    b.is_ascii_graphic() && !matches!(b, b'"' | b'<' | b'>' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}')
}

/// The refusal of a target that is not a URL: which part holds the byte that may not stand in
/// one, and where.
fn bad_target(target: &[u8], path: String) -> RefusedHead {
    let query_at = target.iter().position(|&b| b == b'?');
    let bad = target.iter().position(|&b| !is_url_byte(b));
    let field = match (bad, query_at) {
        (Some(bad), Some(query)) if bad > query => "query",
        _ => "path",
    };
    let message = match bad {
        Some(at) => format!(
            "the request's {field} holds byte 0x{:02X} (at {at}), which a URL may not hold: percent-encode it",
            target[at]
        ),
        None => format!("the request's {field} is not a URL"),
    };
    RefusedHead::new(StatusCode::BAD_REQUEST, field, message, path)
}

/// The refusal of a head `httparse` could not read.
fn parse_refusal(
    error: httparse::Error,
    line: Option<(&[u8], &[u8])>,
    limits: HeadLimits,
    path: String,
) -> RefusedHead {
    let bad = |field, message: &str| RefusedHead::new(StatusCode::BAD_REQUEST, field, message, path.clone());
    match error {
        httparse::Error::TooManyHeaders => RefusedHead::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers",
            format!("the request has more than {} headers", limits.max_headers),
            path.clone(),
        ),
        httparse::Error::Token => match line {
            Some((method, target)) if Method::from_bytes(method).is_ok() => bad_target(target, path.clone()),
            _ => bad("method", "the request's method is not a token"),
        },
        httparse::Error::Version => bad("version", "the request is not HTTP/1.0 or HTTP/1.1"),
        httparse::Error::HeaderName | httparse::Error::HeaderValue => bad(
            "headers",
            "a header's name or value holds a character HTTP does not allow",
        ),
        _ => bad("headers", "the request's head is not well formed"),
    }
}

/// What hyper checks of a head `httparse` read whole, and the framing of its body.
fn check(
    request: &httparse::Request<'_, '_>,
    limits: HeadLimits,
    path: String,
) -> Result<Framing, RefusedHead> {
    let refuse = |status, field, message: String| Err(RefusedHead::new(status, field, message, path.clone()));
    let method = request.method.unwrap_or_default();
    if Method::from_bytes(method.as_bytes()).is_err() {
        return refuse(
            StatusCode::BAD_REQUEST,
            "method",
            "the request's method is not one".into(),
        );
    }
    if method == "CONNECT" {
        return refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "method",
            "this server takes no CONNECT".into(),
        );
    }
    let target = request.path.unwrap_or_default().as_bytes();
    if target.len() > limits.max_target_bytes {
        return Err(target_too_long(target, limits, path.clone()));
    }
    if Uri::try_from(target).is_err() {
        return Err(bad_target(target, path.clone()));
    }
    let http_11 = request.version == Some(1);
    let (mut te, mut chunked, mut length) = (false, false, None::<u64>);
    let upgrade = http_11
        && request
            .headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("upgrade"));
    for header in request.headers.iter() {
        if header.name.len() >= 1 << 16 {
            return Err(head_too_large(limits, path.clone()));
        }
        if header.name.eq_ignore_ascii_case("transfer-encoding") {
            if !http_11 {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    "Transfer-Encoding",
                    "an HTTP/1.0 request has no Transfer-Encoding".into(),
                );
            }
            te = true;
            length = None;
            chunked = std::str::from_utf8(header.value).is_ok_and(|value| {
                value
                    .rsplit(',')
                    .next()
                    .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"))
            });
        } else if header.name.eq_ignore_ascii_case("content-length") && !te {
            let Some(declared) = digits(header.value).filter(|&n| n < u64::MAX - 1) else {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    "Content-Length",
                    "Content-Length is not a length".into(),
                );
            };
            if length.is_some_and(|before| before != declared) {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    "Content-Length",
                    "the request gives two lengths".into(),
                );
            }
            length = Some(declared);
        }
    }
    if te && !chunked {
        return refuse(
            StatusCode::BAD_REQUEST,
            "Transfer-Encoding",
            "a request's last Transfer-Encoding must be chunked".into(),
        );
    }
    Ok(match (te, length) {
        (true, _) => Framing::Chunked(Chunk::Size),
        (false, Some(length)) if length > 0 => Framing::Body(length),
        // A request to switch protocols (a WebSocket's): what follows is the new protocol's,
        // passed unread (hyper reads it as HTTP again only if the switch is refused).
        _ if upgrade => Framing::Raw,
        _ => Framing::Head,
    })
}

/// `bytes` as a decimal number, digits only (as hyper reads `Content-Length`).
fn digits(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() {
        return None;
    }
    bytes.iter().try_fold(0u64, |n, &b| match b {
        b'0'..=b'9' => n.checked_mul(10)?.checked_add(u64::from(b - b'0')),
        _ => None,
    })
}
