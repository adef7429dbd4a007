//! `relay_pipe`: the built-in handler of the relay pattern. Model-less: it passes each message
//! of the other side to its side's first subagent, speaking as that child's human side, and
//! passes the child's answer back. When the child's session ends, so does the relay's.

use async_trait::async_trait;

use super::handler::{Handler, HandlerError, ThreadState};
use super::thread::SessionStatus;

/// The built-in relay handler's name.
pub const RELAY_PIPE: &str = "relay_pipe";

/// The relay handler; every runtime registers it as `relay_pipe`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RelayPipe;

/// The relay handler.
pub fn relay_pipe() -> RelayPipe {
    RelayPipe
}

#[async_trait]
impl Handler for RelayPipe {
    async fn turn(&self, state: &mut ThreadState) -> Result<(), HandlerError> {
        let Some(child) = state.subagents().first().map(|s| (*s).to_owned()) else {
            return Err(HandlerError::permanent("relay_pipe needs a subagent on its side"));
        };
        let inbound = state.inbound();
        let reply = state.message_subagent(&child, &inbound).await?;
        if !reply.said.is_empty() {
            state.append_message(reply.said.clone());
        }
        if reply.ended() {
            let result = reply.message.unwrap_or_default();
            if reply.status == SessionStatus::Failed {
                state.fail_session(result);
            } else {
                state.stop_session(result);
            }
        }
        Ok(())
    }
}
