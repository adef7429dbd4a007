//! The step handlers an Agent Protocol server holds: one per task, bounded, the oldest idle ones
//! dropped past the bound (a dropped task's next step starts its handler again).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::handler::StepHandler;

/// A task's step handler, behind a mutex so that its steps run one at a time.
pub(super) type SharedStepHandler = Arc<tokio::sync::Mutex<Box<dyn StepHandler>>>;

/// The step handlers this server holds, bounded; a mutex each, so a task's steps run one at a
/// time.
#[derive(Default)]
pub(super) struct StepHandlers {
    pub(super) by_task: HashMap<String, SharedStepHandler>,
    /// Task ids, oldest first.
    order: VecDeque<String>,
}

impl StepHandlers {
    /// The task's handler: the one held, or `started`.
    pub(super) fn keep(
        &mut self,
        task_id: &str,
        started: Box<dyn StepHandler>,
        max: usize,
    ) -> SharedStepHandler {
        if let Some(held) = self.by_task.get(task_id) {
            return held.clone();
        }
        let handler = Arc::new(tokio::sync::Mutex::new(started));
        self.by_task.insert(task_id.to_owned(), handler.clone());
        self.order.push_back(task_id.to_owned());
        // Drop the oldest idle handlers (no step running, nobody waiting) past the bound.
        let mut looked = 0;
        while self.by_task.len() > max.max(1) && looked < self.order.len() {
            looked += 1;
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            let idle = self
                .by_task
                .get(&oldest)
                .is_some_and(|h| Arc::strong_count(h) == 1);
            if idle {
                self.by_task.remove(&oldest);
            } else {
                self.order.push_back(oldest);
            }
        }
        handler
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle() -> Box<dyn StepHandler> {
        Box::new(super::super::step_fn(|_input| async {
            Ok(super::super::StepResult::default())
        }))
    }
    #[test]
    fn step_handlers_past_the_bound_drop_the_oldest_idle_one() {
        let mut held = StepHandlers::default();
        let first = held.keep("t1", idle(), 2);
        let again = held.keep("t1", idle(), 2);
        assert!(Arc::ptr_eq(&first, &again), "a held handler is reused");
        drop((first, again));
        let busy = held.keep("t2", idle(), 2);
        held.keep("t3", idle(), 2);
        assert!(!held.by_task.contains_key("t1"), "the oldest idle one went");
        held.keep("t4", idle(), 2);
        assert!(held.by_task.contains_key("t2"), "one in use stays");
        assert!(!held.by_task.contains_key("t3"));
        assert_eq!(held.by_task.len(), 2);
        drop(busy);
    }
}
