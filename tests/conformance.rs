//! The conformance checker, run against the real engine (on the Bedrock stand-in) and against
//! deliberately broken agents, each of which it must catch by name.

use crate::support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use agent_worker::protocol::conformance::{Case, CleanupProbe, Hanging, Limits, Pair, Rule, Subject, check};
use agent_worker::protocol::{AgentEvent, Prompt, Scope, agent_fn};
use agent_worker::session::MemoryStore;
use agent_worker_testkit::{BedrockStandIn, Reply, StreamScript};
use futures_util::{StreamExt, stream};
use serde_json::json;
use support::*;

fn fast_limits() -> Limits {
    Limits {
        case_timeout: Duration::from_secs(10),
        first_event_timeout: Duration::from_secs(5),
        cleanup_within: Duration::from_secs(5),
    }
}

/// Subject cases on the real engine; the pair shares `pair_store` between two engines.
/// The stand-ins are returned so that they outlive the check.
async fn engine_subject(pair_store: (MemoryStore, MemoryStore)) -> (Subject, Vec<BedrockStandIn>) {
    let completing = BedrockStandIn::start().await.unwrap();
    completing.push(Reply::text("Hello."));
    let failing = BedrockStandIn::start().await.unwrap();
    failing.push(Reply::http_error(
        400,
        "ValidationException",
        "messages.0 is empty",
    ));
    let hanging = BedrockStandIn::start().await.unwrap();
    hanging.push(StreamScript::new().open_text("Let me think").hang().into_reply());
    let mut closed = hanging.closed_early();
    let pair = Arc::new(BedrockStandIn::start().await.unwrap());
    pair.push(Reply::text("Nice to meet you, Ada."));
    pair.push(Reply::text("You are Ada."));

    let first = engine(&pair, &pair_store.0, config(), vec![]);
    let second = engine(&pair, &pair_store.1, config(), vec![]);
    let seen = pair.clone();
    let subject = Subject::new(
        Case::new(
            engine(&completing, &MemoryStore::new(), config(), vec![]),
            Scope::new("c".parse().unwrap()),
            Prompt::text("Hi"),
        ),
        Case::new(
            engine(&failing, &MemoryStore::new(), config(), vec![]),
            Scope::new("f".parse().unwrap()),
            Prompt::text("Hi"),
        ),
        Hanging::new(
            Case::new(
                engine(&hanging, &MemoryStore::new(), config(), vec![]),
                Scope::new("h".parse().unwrap()),
                Prompt::text("Hi"),
            ),
            async move {
                let _ = closed.wait_for(|n| *n > 0).await;
            },
        ),
    )
    .with_pair(Pair {
        first: Case::new(first, Scope::new("p".parse().unwrap()), Prompt::text("I am Ada")),
        second: Case::new(
            second,
            Scope::new("p".parse().unwrap()),
            Prompt::text("Who am I?"),
        ),
        expect: Box::new(move |_| {
            let requests = seen.requests();
            let sent = requests
                .last()
                .map(|r| r.body["messages"].to_string())
                .unwrap_or_default();
            if sent.contains("I am Ada") && sent.contains("Nice to meet you, Ada.") {
                Ok(())
            } else {
                Err(format!("the second instance sent {sent}"))
            }
        }),
    })
    .with_limits(fast_limits());
    (subject, vec![completing, failing, hanging])
}

#[tokio::test]
async fn the_engine_conforms_completing_failing_cancelled_and_portable() {
    let shared = MemoryStore::new();
    let (subject, _stand_ins) = engine_subject((shared.clone(), shared)).await;
    let report = check(subject).await;
    assert!(report.is_conformant(), "{report}");
    let rules: HashSet<Rule> = report.checked.iter().map(|(r, _)| *r).collect();
    for rule in [
        Rule::ExactlyOneTerminal,
        Rule::FailuresAreEvents,
        Rule::RespondsToCancellation,
        Rule::NoLocationDependence,
        Rule::JsonRoundTrip,
    ] {
        assert!(rules.contains(&rule), "{rule} was not checked");
    }
}

#[tokio::test]
async fn two_engines_without_shared_state_are_not_portable() {
    let (subject, _stand_ins) = engine_subject((MemoryStore::new(), MemoryStore::new())).await;
    let report = check(subject).await;
    let violated: HashSet<Rule> = report.violations.iter().map(|v| v.rule).collect();
    assert_eq!(violated, HashSet::from([Rule::NoLocationDependence]), "{report}");
}

// --- Deliberately broken agents -------------------------------------------------------------

fn completes() -> Case {
    Case::new(
        agent_fn(|_: Scope, _: Prompt| stream::iter([AgentEvent::text("ok"), AgentEvent::completed()])),
        Scope::new("s".parse().unwrap()),
        Prompt::text("x"),
    )
}

fn fails() -> Case {
    Case::new(
        agent_fn(|_: Scope, _: Prompt| stream::iter([AgentEvent::failed("no", false, None)])),
        Scope::new("s".parse().unwrap()),
        Prompt::text("x"),
    )
}

/// A hanging agent that cleans up when dropped.
fn hangs() -> Hanging {
    let probe = CleanupProbe::new();
    let on_drop = probe.clone();
    let agent = agent_fn(move |_: Scope, _: Prompt| {
        let guard = on_drop.guard();
        stream::once(async { AgentEvent::text("working") })
            .chain(stream::pending())
            .map(move |e| {
                let _ = &guard;
                e
            })
    });
    Hanging::new(
        Case::new(agent, Scope::new("s".parse().unwrap()), Prompt::text("x")),
        probe.wait(),
    )
}

fn violated(report: &agent_worker::protocol::conformance::Report) -> HashSet<Rule> {
    report.violations.iter().map(|v| v.rule).collect()
}

#[tokio::test]
async fn a_well_behaved_agent_passes() {
    let report = check(Subject::new(completes(), fails(), hangs()).with_limits(fast_limits())).await;
    assert!(report.is_conformant(), "{report}");
}

#[tokio::test]
async fn two_terminals_are_caught() {
    let twice = Case::new(
        agent_fn(|_: Scope, _: Prompt| stream::iter([AgentEvent::completed(), AgentEvent::completed()])),
        Scope::new("s".parse().unwrap()),
        Prompt::text("x"),
    );
    let report = check(Subject::new(twice, fails(), hangs()).with_limits(fast_limits())).await;
    assert_eq!(
        violated(&report),
        HashSet::from([Rule::ExactlyOneTerminal]),
        "{report}"
    );
    assert!(
        report.violations[0].message.contains("2 terminal events"),
        "{report}"
    );
}

#[tokio::test]
async fn an_event_after_the_terminal_is_caught() {
    let late = Case::new(
        agent_fn(|_: Scope, _: Prompt| stream::iter([AgentEvent::completed(), AgentEvent::text("late")])),
        Scope::new("s".parse().unwrap()),
        Prompt::text("x"),
    );
    let report = check(Subject::new(late, fails(), hangs()).with_limits(fast_limits())).await;
    assert_eq!(
        violated(&report),
        HashSet::from([Rule::ExactlyOneTerminal]),
        "{report}"
    );
    assert!(
        report.violations[0].message.contains("`text` event followed"),
        "{report}"
    );
}

#[tokio::test]
async fn a_stream_without_terminal_is_caught() {
    let silent = Case::new(
        agent_fn(|_: Scope, _: Prompt| stream::iter([AgentEvent::text("bye")])),
        Scope::new("s".parse().unwrap()),
        Prompt::text("x"),
    );
    let report = check(Subject::new(silent, fails(), hangs()).with_limits(fast_limits())).await;
    assert_eq!(
        violated(&report),
        HashSet::from([Rule::ExactlyOneTerminal]),
        "{report}"
    );
}

#[tokio::test]
async fn a_throw_is_caught() {
    let throws = Case::new(
        agent_fn(|_: Scope, _: Prompt| {
            stream::iter([AgentEvent::text("a")]).chain(stream::poll_fn(
                |_| -> std::task::Poll<Option<AgentEvent>> { panic!("the engine crashed") },
            ))
        }),
        Scope::new("s".parse().unwrap()),
        Prompt::text("x"),
    );
    let report = check(Subject::new(completes(), throws, hangs()).with_limits(fast_limits())).await;
    assert!(violated(&report).contains(&Rule::FailuresAreEvents), "{report}");
    assert!(report.to_string().contains("the engine crashed"), "{report}");
}

#[tokio::test]
async fn a_failure_reported_as_success_is_caught() {
    let report = check(Subject::new(completes(), completes(), hangs()).with_limits(fast_limits())).await;
    assert_eq!(
        violated(&report),
        HashSet::from([Rule::FailuresAreEvents]),
        "{report}"
    );
}

#[tokio::test]
async fn no_cleanup_on_cancel_is_caught() {
    // The agent hands its work to a detached task that outlives the stream.
    let probe = CleanupProbe::new();
    let leaked = probe.clone();
    let agent = agent_fn(move |_: Scope, _: Prompt| {
        let leaked = leaked.clone();
        tokio::spawn(async move {
            let _guard = leaked.guard();
            std::future::pending::<()>().await;
        });
        stream::once(async { AgentEvent::text("working") }).chain(stream::pending())
    });
    let hanging = Hanging::new(
        Case::new(agent, Scope::new("s".parse().unwrap()), Prompt::text("x")),
        probe.wait(),
    );
    let report = check(Subject::new(completes(), fails(), hanging).with_limits(fast_limits())).await;
    assert_eq!(
        violated(&report),
        HashSet::from([Rule::RespondsToCancellation]),
        "{report}"
    );
}

#[tokio::test]
async fn an_event_that_does_not_round_trip_is_caught() {
    // A known type without its fields cannot be read back.
    let bad = Case::new(
        agent_fn(|_: Scope, _: Prompt| {
            stream::iter([
                AgentEvent::Other(json!({"type": "text"})),
                AgentEvent::completed(),
            ])
        }),
        Scope::new("s".parse().unwrap()),
        Prompt::text("x"),
    );
    let report = check(Subject::new(bad, fails(), hangs()).with_limits(fast_limits())).await;
    assert_eq!(
        violated(&report),
        HashSet::from([Rule::JsonRoundTrip]),
        "{report}"
    );
}
