//! [`ToolSource`]: tools whose list changes while the engine runs, such as an MCP server's after
//! it says `tools/list_changed`.

use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::Tool;

/// Tools whose list may change while the engine runs.
///
/// A turn offers what every source had when the turn started, for the whole turn: its model
/// calls, approvals and prompt cache all see one list. The engine asks [`generation`] at each
/// turn's start and reads [`tools`] again only when it changed.
///
/// [`generation`]: ToolSource::generation
/// [`tools`]: ToolSource::tools
pub trait ToolSource: Send + Sync + fmt::Debug {
    /// Its tools now.
    fn tools(&self) -> Vec<Arc<dyn Tool>>;

    /// A number that changes whenever [`tools`](ToolSource::tools) would answer differently.
    fn generation(&self) -> u64;

    /// Resolves once the generation is no longer `seen`. A source that never changes never
    /// resolves (the default).
    fn changed(&self, seen: u64) -> BoxFuture<'_, ()> {
        let _ = seen;
        Box::pin(std::future::pending())
    }
}
