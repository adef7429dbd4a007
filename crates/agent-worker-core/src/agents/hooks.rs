//! Hooks: code that decorates a side's turns. A hook runs before the turn and may give the side
//! context (added before what the side is told). An agent's own `hooks` run on both its sides;
//! a composed child's `parentHooks` run on the parent side that composes it, `before_parent`
//! ones before the parent's own and the rest after.

use std::fmt;
use std::future::Future;

use async_trait::async_trait;

use super::thread::{Side, ThreadMessage};

/// The key a hook is registered under: its id in its package's namespace (`package/id`), or the
/// id alone for the runtime's own namespace (agents of no `packageName`). Agents name hooks by id;
/// the runtime looks for them in the namespace of the package that declares them.
pub fn hook_key(package: Option<&str>, id: &str) -> String {
    match package {
        Some(package) => format!("{package}/{id}"),
        None => id.to_owned(),
    }
}

/// What a hook sees: the session and side about to take a turn, and the thread so far.
#[derive(Debug, Clone)]
pub struct HookContext {
    /// The agent.
    pub agent: String,
    /// The session.
    pub session: crate::session::SessionId,
    /// The side about to take its turn.
    pub side: Side,
    /// The thread so far.
    pub transcript: Vec<ThreadMessage>,
}

/// A hook failed: the side's turn does not run (the invocation fails, and may be retried).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HookError(pub String);

/// Decorates a side's turns.
#[async_trait]
pub trait Hook: Send + Sync + 'static {
    /// Runs before the turn; text it returns is given to the side as context.
    async fn before_turn(&self, context: &HookContext) -> Result<Option<String>, HookError>;
}

/// A [`Hook`] made from a function; see [`hook_fn`].
pub struct HookFn<F>(F);

impl<F> fmt::Debug for HookFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HookFn")
    }
}

/// A hook from `f(context) -> async Result<Option<String>, HookError>`.
pub fn hook_fn<F, Fut>(f: F) -> HookFn<F>
where
    F: Fn(HookContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<String>, HookError>> + Send,
{
    HookFn(f)
}

#[async_trait]
impl<F, Fut> Hook for HookFn<F>
where
    F: Fn(HookContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<String>, HookError>> + Send,
{
    async fn before_turn(&self, context: &HookContext) -> Result<Option<String>, HookError> {
        (self.0)(context.clone()).await
    }
}
