//! [`EngineError`]: why an engine cannot be built.

use super::config::ConfigError;
use super::tools::ToolsetError;

/// An engine that cannot be built; the message names what is missing or wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// A required part was not given.
    #[error("the engine needs a {0}: call EngineBuilder::{0}")]
    Missing(&'static str),
    /// A tuning value is out of range.
    #[error("invalid engine config")]
    Config(#[from] ConfigError),
    /// The tools cannot be offered to a model.
    #[error("invalid tools")]
    Tools(#[from] ToolsetError),
    /// The result schema cannot be used.
    #[error(transparent)]
    Result(#[from] super::result::BadResultSchema),
    /// Spending cannot be counted for the model.
    #[error(transparent)]
    Spending(#[from] super::spending::SpendingError),
}
