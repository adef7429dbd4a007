//! [`Failure`]: an outside failure (a backend call, a file, a peer) kept whole inside one of the
//! crate's errors.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// What was being done when something outside the process failed, with that failure kept as the
/// [`source`](Error::source) so a log that walks the chain sees the SDK's own error.
///
/// Shared, so the errors that carry it stay `Clone`; two failures are equal when they say the
/// same thing.
#[derive(Clone)]
pub struct Failure {
    context: String,
    source: Option<Arc<dyn Error + Send + Sync + 'static>>,
}

impl Failure {
    /// A failure described by `context` alone (nothing underneath it to keep).
    pub fn new(context: impl Into<String>) -> Self {
        Self {
            context: context.into(),
            source: None,
        }
    }

    /// A failure described by `context`, caused by `source`.
    pub fn caused_by(context: impl Into<String>, source: impl Error + Send + Sync + 'static) -> Self {
        Self {
            context: context.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// What was being done, and what went wrong as far as this crate can tell.
    pub fn context(&self) -> &str {
        &self.context
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.context)
    }
}

impl fmt::Debug for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("Failure");
        debug.field("context", &self.context);
        if let Some(source) = &self.source {
            debug.field("source", source);
        }
        debug.finish()
    }
}

impl Error for Failure {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}

impl PartialEq for Failure {
    fn eq(&self, other: &Self) -> bool {
        self.context == other.context
    }
}

impl Eq for Failure {}

impl From<String> for Failure {
    fn from(context: String) -> Self {
        Self::new(context)
    }
}

impl From<&str> for Failure {
    fn from(context: &str) -> Self {
        Self::new(context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_is_the_source_and_the_context_the_message() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let failure = Failure::caused_by("reading the session", io);
        assert_eq!(failure.to_string(), "reading the session");
        let source = failure.source().map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("refused"));
        assert!(Failure::new("alone").source().is_none());
        assert_eq!(failure.clone(), Failure::new("reading the session"));
    }
}
