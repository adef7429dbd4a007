//! A side's one turn: a prompt side's on its engine (built once per agent and side), a handler
//! side's through its handler.

use super::*;

impl Session {
    pub(super) async fn prompt_turn(
        &self,
        side: Side,
        config: &PromptSide,
        record: &ThreadRecord,
        context: Vec<String>,
    ) -> Result<SideOutcome, TurnFailure> {
        let engine = self.engine(side, config)?;
        let inbound: Vec<&str> = record.inbound(side).iter().map(|m| m.text.as_str()).collect();
        let mut parts = context;
        parts.push(if inbound.is_empty() {
            "(The other side has nothing to add; go on.)".to_owned()
        } else {
            inbound.join("\n\n")
        });
        let text = parts.join("\n\n");
        let mut events = engine.invoke(self.side_scope(side, record)?, Prompt::text(text));
        let mut said = String::new();
        let mut outcome = SideOutcome::default();
        let mut terminal = None;
        while let Some(event) = events.next().await {
            match &event {
                AgentEvent::Text { delta } => said.push_str(delta),
                AgentEvent::ToolStarted { name, args, .. } => {
                    if let Some(binding) = config.session_status.as_ref().filter(|b| &b.name == name) {
                        let status = bound_message(binding, args);
                        self.out.emit(
                            SessionEvent::SideStatus {
                                side,
                                status_text: &status,
                            }
                            .event(),
                        );
                        outcome.status = Some(status);
                    }
                }
                _ => {}
            }
            if event.is_terminal() {
                terminal = Some(event);
                break;
            }
            self.out.emit(event);
        }
        match terminal {
            Some(AgentEvent::Completed { data }) => {
                let handoffs: Vec<&str> = self
                    .inner
                    .catalog
                    .get_prompt(&config.prompt)
                    .into_iter()
                    .flat_map(|p| p.tools.iter())
                    .filter(|t| self.inner.catalog.get_agent(t).is_some())
                    .map(String::as_str)
                    .collect();
                apply_stop_rules(config, &handoffs, data.as_ref(), said, &mut outcome);
                Ok(outcome)
            }
            Some(AgentEvent::Failed {
                details,
                retryable,
                code,
            }) => Err(TurnFailure {
                details: format!("{} failed its turn: {details}", side.as_str()),
                retryable,
                code: code.unwrap_or_else(|| codes::INTERNAL.into()),
            }),
            _ => Err(TurnFailure {
                details: format!("{}'s turn ended without a result", side.as_str()),
                retryable: true,
                code: codes::INTERNAL.into(),
            }),
        }
    }

    pub(super) async fn handler_turn(
        &self,
        side: Side,
        name: &str,
        record: &ThreadRecord,
        context: Vec<String>,
    ) -> Result<SideOutcome, TurnFailure> {
        let handler = self
            .inner
            .handlers
            .get(name)
            .cloned()
            .ok_or_else(|| TurnFailure {
                details: format!("no handler `{name}` is registered"),
                retryable: false,
                code: codes::INTERNAL.into(),
            })?;
        let relationships: Vec<SubagentRelationship> = self
            .side(side)
            .subagents()
            .iter()
            .filter(|r| r.is_enabled())
            .cloned()
            .collect();
        let port = match relationships.is_empty() {
            true => None,
            false => Some(ChildPort {
                inner: self.inner.me.clone(),
                relationships,
                turn_id: self.side_turn(record)?,
            }),
        };
        let mut state = ThreadState::new(&self.scope.session, side, &record.transcript, context, port)
            .with_env(self.definition.env.clone());
        handler.turn(&mut state).await.map_err(|e| TurnFailure {
            details: format!("handler `{name}` failed: {}", e.message),
            retryable: e.retryable,
            code: codes::INTERNAL.into(),
        })?;
        let message = (!state.replies.is_empty()).then(|| state.replies.join("\n\n"));
        if let Some(message) = &message {
            self.out.emit(AgentEvent::text(message.clone()));
        }
        if let Some(status) = &state.status {
            self.out.emit(
                SessionEvent::SideStatus {
                    side,
                    status_text: status,
                }
                .event(),
            );
        }
        let end = state.end.map(|end| match end {
            HandlerEnd::Stop(message) => (
                SessionStatus::Completed,
                SessionEnd {
                    message: Some(message),
                    attachments: None,
                    reason: "handler".into(),
                },
            ),
            HandlerEnd::Fail(message) => (
                SessionStatus::Failed,
                SessionEnd {
                    message: Some(message),
                    attachments: None,
                    reason: "handler".into(),
                },
            ),
        });
        Ok(SideOutcome {
            message,
            status: state.status,
            end,
            handoff: None,
        })
    }

    /// The engine of a prompt side, built once per agent and side.
    pub(super) fn engine(&self, side: Side, config: &PromptSide) -> Result<Engine, TurnFailure> {
        let key = (self.definition.name.clone(), side);
        let mut engines = self.inner.engines.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(engine) = engines.get(&key) {
            return Ok(engine.clone());
        }
        let engine = build_engine(&self.inner, side, config).map_err(|details| TurnFailure {
            details,
            retryable: false,
            code: codes::INTERNAL.into(),
        })?;
        engines.insert(key, engine.clone());
        Ok(engine)
    }
}
