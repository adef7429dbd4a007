//! [`chain`]: an error and its causes, each said once.
//!
//! An error of the workspace says what went wrong at its own level and keeps what caused it as
//! its [`source`](Error::source), never repeating the source's text in its own message. Where an
//! error leaves the process (a log line, the command line's last words), [`chain`] (or
//! [`ErrorChain`], which writes the same without a `String`) prints it whole: its message, then
//! each cause's, joined by `": "`.

use std::error::Error;
use std::fmt;

/// `error`'s message and those of its causes ([`Error::source`], walked once), joined by `": "`:
/// `the session store failed: writing turn t-1: connection refused`.
///
/// A cause that says exactly what the error it caused says is left out: some errors (the AWS
/// SDK's operation errors among them) write their inner error's text as their own and return it
/// as their source too.
///
/// ```
/// use agent_worker_contract::chain;
///
/// #[derive(Debug)]
/// struct Outer(std::io::Error);
/// impl std::fmt::Display for Outer {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         f.write_str("the notes cannot be read")
///     }
/// }
/// impl std::error::Error for Outer {
///     fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
///         Some(&self.0)
///     }
/// }
///
/// let error = Outer(std::io::Error::other("disk full"));
/// assert_eq!(chain(&error), "the notes cannot be read: disk full");
/// ```
pub fn chain(error: &dyn Error) -> String {
    ErrorChain(error).to_string()
}

/// Displays an error as [`chain`] says it, for a log's field (`error = %ErrorChain(&e)`) or a
/// `format!` without an intermediate `String`.
#[derive(Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a dyn Error);

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut said = self.0.to_string();
        f.write_str(&said)?;
        let mut cause = self.0.source();
        while let Some(error) = cause {
            let text = error.to_string();
            if text != said {
                write!(f, ": {text}")?;
                said = text;
            }
            cause = error.source();
        }
        Ok(())
    }
}

impl fmt::Debug for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error saying `message`, caused by `source`.
    #[derive(Debug)]
    struct Layer {
        message: &'static str,
        source: Option<Box<dyn Error + Send + Sync>>,
    }

    impl fmt::Display for Layer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.message)
        }
    }

    impl Error for Layer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.source.as_deref().map(|e| e as &(dyn Error + 'static))
        }
    }

    #[test]
    fn an_error_alone_is_its_message() {
        let alone = std::io::Error::other("disk full");
        assert_eq!(chain(&alone), "disk full");
    }

    #[test]
    fn each_cause_is_said_once_in_order() {
        let io = std::io::Error::other("connection refused");
        let middle = Layer {
            message: "writing turn t-1",
            source: Some(Box::new(io)),
        };
        let top = Layer {
            message: "the session store failed",
            source: Some(Box::new(middle)),
        };
        let said = chain(&top);
        assert_eq!(
            said,
            "the session store failed: writing turn t-1: connection refused"
        );
        for part in [
            "the session store failed",
            "writing turn t-1",
            "connection refused",
        ] {
            assert_eq!(said.matches(part).count(), 1, "{said}");
        }
        assert_eq!(ErrorChain(&top).to_string(), said);
        assert_eq!(format!("{:?}", ErrorChain(&top)), said);
    }

    #[test]
    fn a_cause_that_repeats_its_errors_words_is_said_once() {
        // As an AWS SDK operation error does: its inner error's text, and that error as its source.
        let inner = Layer {
            message: "InvalidMessageContents: a character is not allowed",
            source: None,
        };
        let operation = Layer {
            message: "InvalidMessageContents: a character is not allowed",
            source: Some(Box::new(inner)),
        };
        let top = Layer {
            message: "the turns queue did not take the turn",
            source: Some(Box::new(operation)),
        };
        assert_eq!(
            chain(&top),
            "the turns queue did not take the turn: InvalidMessageContents: a character is not allowed"
        );
    }
}
