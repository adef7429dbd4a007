//! A conformance checker any [`Agent`] can be run through.
//!
//! Give [`check`] a [`Subject`]: a case that completes, one that fails, one that hangs until
//! cancelled (with a future that resolves once the agent has cleaned up), and optionally a
//! [`Pair`] of independent instances that share only external state. The [`Report`] lists every
//! rule it checked and each violation by name:
//!
//! | rule | what is checked |
//! | --- | --- |
//! | MUST 1 | consumed to its end, a stream's last event is its one terminal |
//! | MUST 2 | polling never panics, and a failure arrives as a `failed` event |
//! | MUST 3 | dropping a hanging stream cleans up within [`Limits::cleanup_within`] |
//! | MUST 6 | a second instance continues a session the first one started |
//! | JSON | every event serialises, deserialises back to itself and serialises the same |
//!
//! ```
//! use std::sync::Arc;
//! use agent_worker_contract::{agent_fn, AgentEvent, Prompt, Scope};
//! use agent_worker_contract::conformance::{check, Case, CleanupProbe, Hanging, Subject};
//!
//! let probe = CleanupProbe::new();
//! let on_drop = probe.clone();
//! let hanging = agent_fn(move |_: Scope, _: Prompt| {
//!     let guard = on_drop.guard();
//!     async_stream_like(guard)
//! });
//! # fn async_stream_like(guard: agent_worker_contract::conformance::CleanupGuard)
//! #     -> impl futures_core::Stream<Item = AgentEvent> + Send + 'static {
//! #     use futures_util::StreamExt;
//! #     futures_util::stream::once(async { AgentEvent::text("working") })
//! #         .chain(futures_util::stream::pending())
//! #         .map(move |e| { let _ = &guard; e })
//! # }
//! let subject = Subject::new(
//!     Case::new(agent_fn(|_: Scope, _: Prompt| futures_util::stream::iter([AgentEvent::completed()])), Scope::new("s".parse().unwrap()), Prompt::text("hi")),
//!     Case::new(agent_fn(|_: Scope, _: Prompt| futures_util::stream::iter([AgentEvent::failed("no", false, None)])), Scope::new("s".parse().unwrap()), Prompt::text("hi")),
//!     Hanging::new(Case::new(hanging, Scope::new("s".parse().unwrap()), Prompt::text("hi")), probe.wait()),
//! );
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let report = check(subject).await;
//! assert!(report.is_conformant(), "{report}");
//! # });
//! ```

use std::fmt;
use std::future::{Future, poll_fn};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::watch;

use super::{Agent, AgentEvent, Collected, EventStream, Prompt, Scope};

/// One invocation to check: an agent, and what to invoke it with.
#[derive(Clone)]
pub struct Case {
    /// The agent under test.
    pub agent: Arc<dyn Agent>,
    /// The scope to invoke it with.
    pub scope: Scope,
    /// The prompt to invoke it with.
    pub prompt: Prompt,
}

impl Case {
    /// A case invoking `agent` with `scope` and `prompt`.
    pub fn new(agent: impl Agent + 'static, scope: Scope, prompt: Prompt) -> Self {
        Self {
            agent: Arc::new(agent),
            scope,
            prompt,
        }
    }
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Case")
            .field("scope", &self.scope)
            .field("prompt", &self.prompt)
            .finish_non_exhaustive()
    }
}

/// A future that resolves once an agent has released what a turn held.
pub type Cleanup = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A case whose turn does not end by itself, and a future that resolves once the agent has
/// cleaned up after the caller dropped the stream.
pub struct Hanging {
    /// The case; its agent should emit an event, then wait forever.
    pub case: Case,
    /// Resolves when the agent has aborted its work.
    pub cleaned_up: Cleanup,
}

impl Hanging {
    /// A hanging case with its cleanup probe.
    pub fn new(case: Case, cleaned_up: impl Future<Output = ()> + Send + 'static) -> Self {
        Self {
            case,
            cleaned_up: Box::pin(cleaned_up),
        }
    }
}

impl fmt::Debug for Hanging {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hanging")
            .field("case", &self.case)
            .finish_non_exhaustive()
    }
}

/// What the second turn of a [`Pair`] must show.
pub type PairExpectation = Box<dyn Fn(&Collected) -> Result<(), String> + Send + Sync>;

/// Two turns of one session on two independent instances (MUST 6). `first` runs to its end on
/// one instance, then `second` on the other; `expect` checks that the second saw the first.
pub struct Pair {
    /// The first turn, on the first instance.
    pub first: Case,
    /// The second turn, same session, on the second instance.
    pub second: Case,
    /// Checks the second turn's result.
    pub expect: PairExpectation,
}

impl fmt::Debug for Pair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pair")
            .field("first", &self.first)
            .field("second", &self.second)
            .finish_non_exhaustive()
    }
}

/// How long the checker waits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// For a case consumed to its end.
    pub case_timeout: Duration,
    /// For the hanging case's first event, before the checker cancels it.
    pub first_event_timeout: Duration,
    /// For cleanup after the caller drops a stream: what "promptly" means in MUST 3.
    pub cleanup_within: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            case_timeout: Duration::from_secs(30),
            first_event_timeout: Duration::from_secs(10),
            cleanup_within: Duration::from_secs(1),
        }
    }
}

/// Everything the checker runs.
#[derive(Debug)]
pub struct Subject {
    /// A case that should end with `completed`.
    pub completing: Case,
    /// A case that should end with `failed`.
    pub failing: Case,
    /// A case that should still be running when the checker cancels it.
    pub hanging: Hanging,
    /// Two independent instances sharing only external state, for the portable rule.
    pub pair: Option<Pair>,
    /// How long to wait for each step.
    pub limits: Limits,
}

impl Subject {
    /// A subject without a pair, with default limits.
    pub fn new(completing: Case, failing: Case, hanging: Hanging) -> Self {
        Self {
            completing,
            failing,
            hanging,
            pair: None,
            limits: Limits::default(),
        }
    }

    /// Adds the pair for MUST 6.
    #[must_use]
    pub fn with_pair(mut self, pair: Pair) -> Self {
        self.pair = Some(pair);
        self
    }

    /// Replaces the limits.
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }
}

/// A rule of the Agent Handler specification that the checker verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rule {
    /// MUST 1: exactly one terminal, last.
    ExactlyOneTerminal,
    /// MUST 2: failures are events, polling never panics.
    FailuresAreEvents,
    /// MUST 3: cancellation releases the turn's work promptly.
    RespondsToCancellation,
    /// MUST 6: no location dependence.
    NoLocationDependence,
    /// Every event is JSON and round-trips.
    JsonRoundTrip,
    /// The subject did not behave as its case said (a completing case that failed, ...).
    Subject,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ExactlyOneTerminal => "MUST 1 (exactly one terminal)",
            Self::FailuresAreEvents => "MUST 2 (failures are events)",
            Self::RespondsToCancellation => "MUST 3 (responds to cancellation)",
            Self::NoLocationDependence => "MUST 6 (no location dependence)",
            Self::JsonRoundTrip => "JSON round trip",
            Self::Subject => "subject",
        })
    }
}

/// A rule broken in one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// The case: `completing`, `failing`, `hanging`, `pair.first` or `pair.second`.
    pub case: &'static str,
    /// What happened.
    pub message: String,
}

/// What [`check`] found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Every rule checked, with the case it was checked on.
    pub checked: Vec<(Rule, &'static str)>,
    /// Every violation found.
    pub violations: Vec<Violation>,
}

impl Report {
    /// True when nothing was violated.
    pub fn is_conformant(&self) -> bool {
        self.violations.is_empty()
    }

    /// Whether `rule` was violated in any case.
    pub fn violates(&self, rule: Rule) -> bool {
        self.violations.iter().any(|v| v.rule == rule)
    }

    fn checked(&mut self, rule: Rule, case: &'static str) {
        self.checked.push((rule, case));
    }

    fn violation(&mut self, rule: Rule, case: &'static str, message: impl Into<String>) {
        self.violations.push(Violation {
            rule,
            case,
            message: message.into(),
        });
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} checks, {} violations",
            self.checked.len(),
            self.violations.len()
        )?;
        for v in &self.violations {
            writeln!(f, "- {} in {}: {}", v.rule, v.case, v.message)?;
        }
        Ok(())
    }
}

/// A probe a hanging agent marks when it cleans up; [`wait`](Self::wait) resolves after that.
#[derive(Debug, Clone)]
pub struct CleanupProbe {
    marked: Arc<watch::Sender<bool>>,
}

impl Default for CleanupProbe {
    fn default() -> Self {
        Self::new()
    }
}

impl CleanupProbe {
    /// A probe not yet marked.
    pub fn new() -> Self {
        Self {
            marked: Arc::new(watch::Sender::new(false)),
        }
    }

    /// Marks the probe: the agent has cleaned up.
    pub fn mark(&self) {
        self.marked.send_replace(true);
    }

    /// A guard that marks the probe when dropped; move it into the turn's stream.
    pub fn guard(&self) -> CleanupGuard {
        CleanupGuard { probe: self.clone() }
    }

    /// Resolves once the probe is marked.
    pub fn wait(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut marked = self.marked.subscribe();
        async move {
            let _ = marked.wait_for(|m| *m).await;
        }
    }
}

/// Marks its [`CleanupProbe`] when dropped.
#[derive(Debug)]
pub struct CleanupGuard {
    probe: CleanupProbe,
}

impl Drop for CleanupGuard {
    fn drop(&mut self) {
        self.probe.mark();
    }
}

/// Runs `subject` and reports every rule it breaks.
pub async fn check(subject: Subject) -> Report {
    let mut report = Report::default();
    let limits = subject.limits;

    let completing = drain(&subject.completing, limits).await;
    judge_drained(&mut report, "completing", &completing, Expect::Completed);

    let failing = drain(&subject.failing, limits).await;
    judge_drained(&mut report, "failing", &failing, Expect::Failed);

    check_hanging(&mut report, subject.hanging, limits).await;

    if let Some(pair) = subject.pair {
        check_pair(&mut report, pair, limits).await;
    }
    report
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    Completed,
    Failed,
}

/// A case consumed to its end, or to the point where it broke.
struct Drained {
    events: Vec<AgentEvent>,
    panic: Option<String>,
    /// Set when the stream had not ended after this long.
    timed_out: Option<Duration>,
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

fn start(case: &Case) -> Result<EventStream, String> {
    let agent = case.agent.clone();
    let (scope, prompt) = (case.scope.clone(), case.prompt.clone());
    catch_unwind(AssertUnwindSafe(move || agent.invoke(scope, prompt))).map_err(|p| panic_message(&*p))
}

/// The stream's next event; `Err` when polling panicked.
async fn next_event(stream: &mut EventStream) -> Result<Option<AgentEvent>, String> {
    poll_fn(
        |cx| match catch_unwind(AssertUnwindSafe(|| stream.as_mut().poll_next(cx))) {
            Ok(Poll::Ready(event)) => Poll::Ready(Ok(event)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(panic_message(&*payload))),
        },
    )
    .await
}

async fn drain(case: &Case, limits: Limits) -> Drained {
    let mut drained = Drained {
        events: Vec::new(),
        panic: None,
        timed_out: None,
    };
    let mut stream = match start(case) {
        Ok(stream) => stream,
        Err(panic) => {
            drained.panic = Some(format!("invoke panicked: {panic}"));
            return drained;
        }
    };
    let read_all = async {
        loop {
            match next_event(&mut stream).await {
                Ok(Some(event)) => drained.events.push(event),
                Ok(None) => return,
                Err(panic) => {
                    drained.panic = Some(format!("polling the stream panicked: {panic}"));
                    return;
                }
            }
        }
    };
    if tokio::time::timeout(limits.case_timeout, read_all).await.is_err() {
        drained.timed_out = Some(limits.case_timeout);
    }
    drained
}

fn judge_drained(report: &mut Report, case: &'static str, drained: &Drained, expect: Expect) {
    report.checked(Rule::FailuresAreEvents, case);
    if let Some(panic) = &drained.panic {
        report.violation(Rule::FailuresAreEvents, case, panic.clone());
    }

    report.checked(Rule::ExactlyOneTerminal, case);
    let terminals: Vec<usize> = drained
        .events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.is_terminal())
        .map(|(i, _)| i)
        .collect();
    if let Some(limit) = drained.timed_out {
        report.violation(
            Rule::ExactlyOneTerminal,
            case,
            format!("the stream did not end within {} ms", limit.as_millis()),
        );
    }
    match terminals.as_slice() {
        [] if drained.panic.is_none() && drained.timed_out.is_none() => report.violation(
            Rule::ExactlyOneTerminal,
            case,
            "the stream ended without a terminal event",
        ),
        [] => {}
        [only] => {
            if let Some(after) = drained.events.get(only + 1) {
                report.violation(
                    Rule::ExactlyOneTerminal,
                    case,
                    format!("a `{}` event followed the terminal", after.type_name()),
                );
            }
        }
        many => report.violation(
            Rule::ExactlyOneTerminal,
            case,
            format!("{} terminal events in one stream", many.len()),
        ),
    }

    if let Some(&first) = terminals.first() {
        let got = &drained.events[first];
        match (expect, got) {
            (Expect::Completed, AgentEvent::Completed { .. })
            | (Expect::Failed, AgentEvent::Failed { .. }) => {}
            (Expect::Failed, other) => report.violation(
                Rule::FailuresAreEvents,
                case,
                format!(
                    "the failing case ended with `{}`, not `failed`",
                    other.type_name()
                ),
            ),
            (Expect::Completed, other) => report.violation(
                Rule::Subject,
                case,
                format!(
                    "the completing case ended with {}",
                    serde_json::to_string(other).unwrap_or_default()
                ),
            ),
        }
    }

    check_json(report, case, &drained.events);
}

fn check_json(report: &mut Report, case: &'static str, events: &[AgentEvent]) {
    report.checked(Rule::JsonRoundTrip, case);
    for event in events {
        let problem = match serde_json::to_value(event) {
            Err(e) => Some(format!("does not serialise: {e}")),
            Ok(json) => match serde_json::from_value::<AgentEvent>(json.clone()) {
                Err(e) => Some(format!("{json} does not deserialise: {e}")),
                Ok(back) if back != *event => Some(format!("{json} deserialises to a different event")),
                Ok(back) => match serde_json::to_value(&back) {
                    Ok(again) if again == json => None,
                    _ => Some(format!("{json} serialises differently after a round trip")),
                },
            },
        };
        if let Some(problem) = problem {
            report.violation(
                Rule::JsonRoundTrip,
                case,
                format!("`{}` event {problem}", event.type_name()),
            );
        }
    }
}

async fn check_hanging(report: &mut Report, hanging: Hanging, limits: Limits) {
    const CASE: &str = "hanging";
    report.checked(Rule::RespondsToCancellation, CASE);
    let mut stream = match start(&hanging.case) {
        Ok(stream) => stream,
        Err(panic) => {
            report.violation(Rule::FailuresAreEvents, CASE, format!("invoke panicked: {panic}"));
            return;
        }
    };
    let mut seen = Vec::new();
    // Read until the agent is busy: its first event, or a quiet first_event_timeout.
    if let Ok(next) = tokio::time::timeout(limits.first_event_timeout, next_event(&mut stream)).await {
        match next {
            Ok(Some(event)) if event.is_terminal() => {
                report.violation(
                    Rule::Subject,
                    CASE,
                    format!("the hanging case ended on its own with `{}`", event.type_name()),
                );
                return;
            }
            Ok(Some(event)) => seen.push(event),
            Ok(None) => {
                report.violation(
                    Rule::ExactlyOneTerminal,
                    CASE,
                    "the stream ended without a terminal event",
                );
                return;
            }
            Err(panic) => {
                report.violation(
                    Rule::FailuresAreEvents,
                    CASE,
                    format!("polling the stream panicked: {panic}"),
                );
                return;
            }
        }
    }
    drop(stream);
    if tokio::time::timeout(limits.cleanup_within, hanging.cleaned_up)
        .await
        .is_err()
    {
        report.violation(
            Rule::RespondsToCancellation,
            CASE,
            format!(
                "its work was not released within {} ms of the caller dropping the stream",
                limits.cleanup_within.as_millis()
            ),
        );
    }
    check_json(report, CASE, &seen);
}

async fn check_pair(report: &mut Report, pair: Pair, limits: Limits) {
    report.checked(Rule::NoLocationDependence, "pair.second");
    if pair.first.scope.session != pair.second.scope.session {
        report.violation(
            Rule::Subject,
            "pair.second",
            "the pair's two cases must use the same session",
        );
        return;
    }
    let first = drain(&pair.first, limits).await;
    judge_drained(report, "pair.first", &first, Expect::Completed);
    let second = drain(&pair.second, limits).await;
    judge_drained(report, "pair.second", &second, Expect::Completed);

    let collected = super::collect(futures_util::stream::iter(second.events)).await;
    match collected {
        Ok(collected) => {
            if let Err(why) = (pair.expect)(&collected) {
                report.violation(
                    Rule::NoLocationDependence,
                    "pair.second",
                    format!("the second instance did not continue the session: {why}"),
                );
            }
        }
        Err(e) => report.violation(
            Rule::NoLocationDependence,
            "pair.second",
            format!("the second instance did not complete: {e}"),
        ),
    }
}
