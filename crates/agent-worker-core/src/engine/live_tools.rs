//! The engine a turn runs with when some of its tools come from a [`ToolSource`]: the fixed
//! tools and each source's current list, made into one [`Toolset`] again only when a source's
//! generation changed.

use std::sync::{Arc, PoisonError, RwLock};

use super::tools::{Tool, ToolSource, Toolset};
use super::{EngineInner, ToolPolicy, admitted};
use crate::protocol::ErrorChain;

/// The fixed tools, the sources, and the engine made from them at the generations it was made.
pub(super) struct LiveTools {
    fixed: Vec<Arc<dyn Tool>>,
    sources: Vec<Arc<dyn ToolSource>>,
    tool_policy: Option<Arc<dyn ToolPolicy>>,
    current: RwLock<(Vec<u64>, Arc<EngineInner>)>,
}

impl LiveTools {
    /// Keeps `first`, made from `fixed` and the sources at `generations`.
    pub(super) fn new(
        fixed: Vec<Arc<dyn Tool>>,
        sources: Vec<Arc<dyn ToolSource>>,
        generations: Vec<u64>,
        first: Arc<EngineInner>,
    ) -> Self {
        let tool_policy = first.tool_policy.clone();
        Self {
            fixed,
            sources,
            tool_policy,
            current: RwLock::new((generations, first)),
        }
    }

    /// The engine for a turn starting now: the one made last, or, when a source has changed
    /// since, one made with its new list. A list that cannot be used (a name twice, a bad
    /// schema) is logged, and turns keep the last good one.
    pub(super) fn engine(&self) -> Arc<EngineInner> {
        let now: Vec<u64> = self.sources.iter().map(|s| s.generation()).collect();
        {
            let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
            if current.0 == now {
                return current.1.clone();
            }
        }
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if current.0 != now {
            match Toolset::new(tools_of(&self.fixed, &self.sources, self.tool_policy.as_ref())) {
                Ok(tools) => {
                    tracing::info!(tools = ?tools, "a tool source changed its list: turns from now offer it");
                    current.1 = Arc::new(EngineInner {
                        tools,
                        ..(*current.1).clone()
                    });
                }
                Err(error) => {
                    tracing::error!(error = %ErrorChain(&error), "a tool source's new list cannot be used: turns keep the last good one");
                }
            }
            current.0 = now;
        }
        current.1.clone()
    }
}

/// The fixed tools and those of every source the tool policy admits.
pub(super) fn tools_of(
    fixed: &[Arc<dyn Tool>],
    sources: &[Arc<dyn ToolSource>],
    tool_policy: Option<&Arc<dyn ToolPolicy>>,
) -> Vec<Arc<dyn Tool>> {
    let mut tools = fixed.to_vec();
    for source in sources {
        tools.extend(
            source
                .tools()
                .into_iter()
                .filter(|tool| admitted(tool_policy, tool.as_ref())),
        );
    }
    tools
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};

    use serde_json::json;

    use super::*;
    use crate::engine::model::{Model, ModelRequest, ModelStream};
    use crate::engine::tools::{ToolSpec, tool_fn};
    use crate::engine::{Engine, Toolset};
    use crate::session::MemoryStore;

    #[derive(Debug)]
    struct Unused;

    impl Model for Unused {
        fn id(&self) -> &str {
            "unused"
        }
        fn stream(&self, _request: ModelRequest) -> ModelStream {
            Box::pin(futures_util::stream::empty())
        }
    }

    fn named(name: &str) -> Arc<dyn Tool> {
        let spec = ToolSpec::new(name, "A tool.", json!({"type": "object"}));
        Arc::new(tool_fn(spec, |_, _| async { Ok(json!({})) }))
    }

    #[derive(Debug, Default)]
    struct Changing {
        names: Mutex<Vec<&'static str>>,
        generation: AtomicU64,
    }

    impl Changing {
        fn set(&self, names: &[&'static str]) {
            *self.names.lock().unwrap() = names.to_vec();
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl ToolSource for Changing {
        fn tools(&self) -> Vec<Arc<dyn Tool>> {
            self.names.lock().unwrap().iter().map(|n| named(n)).collect()
        }
        fn generation(&self) -> u64 {
            self.generation.load(Ordering::SeqCst)
        }
    }

    fn names(tools: &Toolset) -> Vec<String> {
        tools.specs().map(|s| s.name.clone()).collect()
    }

    #[test]
    fn a_turn_gets_the_list_as_it_is_and_a_list_that_cannot_be_used_keeps_the_last_good_one() {
        let source = Arc::new(Changing::default());
        source.set(&["remote_a"]);
        let engine = Engine::builder()
            .model(Unused)
            .store(MemoryStore::new())
            .tool(named("fixed"))
            .tool_source(source.clone())
            .build()
            .unwrap();
        let live = engine.live.as_ref().unwrap();
        let first = live.engine();
        assert_eq!(names(&first.tools), ["fixed", "remote_a"]);
        assert!(Arc::ptr_eq(&first, &live.engine()), "unchanged: the same engine");

        source.set(&["remote_a", "remote_b"]);
        let grown = live.engine();
        assert_eq!(names(&grown.tools), ["fixed", "remote_a", "remote_b"]);
        assert_eq!(
            names(&first.tools),
            ["fixed", "remote_a"],
            "a turn keeps its list"
        );

        source.set(&["fixed"]);
        assert_eq!(
            names(&live.engine().tools),
            ["fixed", "remote_a", "remote_b"],
            "a name twice: the last good list stays"
        );
    }
}
