//! A2A's task shapes, shared with the worker's pushes ([`agent_worker_runtime::a2a_task`]).

pub(super) use agent_worker_runtime::a2a_task::*;
