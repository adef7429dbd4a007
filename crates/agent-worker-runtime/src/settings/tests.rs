//! The settings as the binaries read them: every name, every refusal.
use super::*;
use crate::metrics::DEFAULT_SERVICE;

use std::collections::HashMap;
use std::path::Path;

fn settings(pairs: &[(&str, &str)]) -> Result<WorkerSettings, SettingsError> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    WorkerSettings::from_lookup(|name| map.get(name).cloned())
}

/// `EMIT_URL` names the realtime server (with its key): a turn asks it for its stop, and
/// approvals wait in its store unless `APPROVAL_STORE=table` names the table.
#[test]
fn the_realtime_server_keeps_approvals_unless_the_table_is_named() {
    let base = [("TABLE_NAME", "t"), ("MODEL_ID", "m")];
    let plain = settings(&base).unwrap();
    assert_eq!((plain.realtime, plain.approvals_in), (None, ApprovalsIn::Table));
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut pairs = base.to_vec();
        pairs.extend_from_slice(extra);
        settings(&pairs)
    };
    assert_eq!(
        with(&[("EMIT_URL", "http://127.0.0.1:9")])
            .unwrap_err()
            .to_string(),
        "EMIT_API_KEY: is not set"
    );
    let server = [("EMIT_URL", "http://127.0.0.1:9"), ("EMIT_API_KEY", "k")];
    let wired = with(&server).unwrap();
    assert_eq!(
        wired.realtime,
        Some(RealtimeSettings {
            url: "http://127.0.0.1:9".into(),
            api_key: "k".into()
        })
    );
    assert_eq!(wired.approvals_in, ApprovalsIn::Realtime);
    let table = with(&[server[0], server[1], ("APPROVAL_STORE", "table")]).unwrap();
    assert_eq!(table.approvals_in, ApprovalsIn::Table);
    assert_eq!(
        with(&[("APPROVAL_STORE", "realtime")]).unwrap_err().to_string(),
        "APPROVAL_STORE: realtime needs EMIT_URL, the realtime server"
    );
    assert!(
        with(&[server[0], server[1], ("APPROVAL_STORE", "redis")])
            .unwrap_err()
            .to_string()
            .starts_with("APPROVAL_STORE: ")
    );
}

#[test]
fn attached_files_come_from_a_bucket_and_their_tools_need_it() {
    let base = [("TABLE_NAME", "t"), ("MODEL_ID", "m")];
    let plain = settings(&base).unwrap();
    assert_eq!((plain.files, plain.attachment_tools), (None, false));
    let mut pairs = base.to_vec();
    pairs.push(("FILES_BUCKET", "uploads"));
    pairs.push(("ATTACHMENT_TOOLS", "true"));
    let with_files = settings(&pairs).unwrap();
    assert_eq!(
        with_files.files,
        Some(FilesLocation {
            bucket: "uploads".into(),
            prefix: DEFAULT_FILES_PREFIX.into()
        })
    );
    assert!(with_files.attachment_tools);
    assert_eq!(with_files.prompt_caching, None);
    let mut no_cache = base.to_vec();
    no_cache.push(("PROMPT_CACHING", "false"));
    assert_eq!(settings(&no_cache).unwrap().prompt_caching, Some(false));
    let mut tools_only = base.to_vec();
    tools_only.push(("ATTACHMENT_TOOLS", "true"));
    assert_eq!(
        settings(&tools_only).unwrap_err().to_string(),
        "ATTACHMENT_TOOLS: needs FILES_BUCKET or FILES_DIR, where the files are"
    );
    let mut dir = base.to_vec();
    dir.push(("FILES_DIR", "/var/agent-files"));
    let local = settings(&dir).unwrap();
    assert_eq!(
        (local.files_dir.as_deref(), local.files),
        (Some(Path::new("/var/agent-files")), None)
    );
    dir.push(("ATTACHMENT_TOOLS", "true"));
    assert!(settings(&dir).unwrap().attachment_tools);
    dir.push(("FILES_BUCKET", "b"));
    assert!(
        settings(&dir)
            .unwrap_err()
            .to_string()
            .starts_with("FILES_DIR: is set, and so is FILES_BUCKET")
    );
}

#[test]
fn the_required_values_are_named_when_missing() {
    assert_eq!(settings(&[]).unwrap_err().to_string(), "TABLE_NAME: is not set");
    assert_eq!(
        settings(&[("TABLE_NAME", "t")]).unwrap_err().to_string(),
        "MODEL_ID: is not set"
    );
    let ok = settings(&[("TABLE_NAME", "t"), ("MODEL_ID", "m")]).unwrap();
    assert_eq!(ok.sinks, vec![SinkKind::Stdout, SinkKind::Dynamo]);
    assert_eq!(ok.engine, EngineConfig::default());
}

#[test]
fn overrides_apply_and_bad_values_are_named() {
    let base = [("TABLE_NAME", "t"), ("MODEL_ID", "m")];
    let with = |extra: (&str, &str)| {
        let mut pairs = base.to_vec();
        pairs.push(extra);
        settings(&pairs)
    };
    assert_eq!(with(("MAX_ROUNDS", "4")).unwrap().engine.max_rounds, 4);
    assert_eq!(
        with(("MAX_REPEAT_CALLS", "0")).unwrap().engine.max_repeat_calls,
        0
    );
    let ms = Duration::from_millis;
    assert_eq!(
        with(("MODEL_CHUNK_TIMEOUT_MS", "250"))
            .unwrap()
            .engine
            .chunk_timeout,
        ms(250)
    );
    assert_eq!(
        with(("LEASE_MARGIN_MS", "500")).unwrap().engine.lease_margin,
        ms(500)
    );
    assert_eq!(with(("STORE_MARGIN_MS", "1000")).unwrap().store_margin, ms(1000));
    assert_eq!(
        with(("MIN_TURN_TIME_MS", "5000")).unwrap().min_turn_time,
        ms(5000)
    );
    assert_eq!(
        with(("REDRIVE_DELAY_MS", "1000")).unwrap().redrive.delay(3),
        ms(4000)
    );
    assert_eq!(
        with(("REDRIVE_DELAY_MS", "2000000")).unwrap_err().to_string(),
        "REDRIVE_DELAY_MS: the first redrive delay (2000s) is longer than the longest (900s)"
    );
    assert_eq!(
        with(("DYNAMODB_ATTEMPT_TIMEOUT_MS", "800"))
            .unwrap()
            .store_attempt_timeout,
        ms(800)
    );
    assert!(with(("DYNAMODB_ATTEMPT_TIMEOUT_MS", "0")).is_err());
    assert_eq!(
        with(("EVENT_SINKS", "stdout,http")).unwrap_err().to_string(),
        "EMIT_URL: is not set"
    );
    let mut pairs = base.to_vec();
    pairs.extend([
        ("EVENT_SINKS", "http"),
        ("EMIT_URL", "http://127.0.0.1:9"),
        ("EMIT_API_KEY", "k"),
    ]);
    assert_eq!(
        settings(&pairs).unwrap().sinks,
        vec![SinkKind::Http {
            url: "http://127.0.0.1:9".into(),
            api_key: "k".into()
        }]
    );
    assert_eq!(
        with(("UI_ANSWERS", "realtime")).unwrap_err().to_string(),
        "EMIT_URL: is not set"
    );
    assert!(
        with(("UI_ANSWERS", "tab"))
            .unwrap_err()
            .to_string()
            .starts_with("UI_ANSWERS: ")
    );
    assert_eq!(settings(&base).unwrap().ui_answers, UiAnswersFrom::Table);
    assert_eq!(
        with(("MODEL_PROVIDER", "openai")).unwrap_err().to_string(),
        "OPENAI_API_KEY: is not set"
    );
    assert_eq!(
        with(("MODEL_PROVIDER", "anthropic")).unwrap_err().to_string(),
        "ANTHROPIC_API_KEY: is not set"
    );
    assert!(
        with(("MODEL_PROVIDER", "azure"))
            .unwrap_err()
            .to_string()
            .starts_with("MODEL_PROVIDER: ")
    );
    assert_eq!(settings(&base).unwrap().provider, ModelProvider::Bedrock);
    pairs.push(("UI_ANSWERS", "realtime"));
    assert_eq!(
        settings(&pairs).unwrap().ui_answers,
        UiAnswersFrom::Realtime {
            url: "http://127.0.0.1:9".into(),
            api_key: "k".into()
        }
    );
    assert!(with(("MODEL_FIRST_CHUNK_TIMEOUT_MS", "0")).is_err());
    assert_eq!(
        with(("TURN_DEADLINE_MS", "60000")).unwrap().engine.turn_deadline,
        Duration::from_secs(60)
    );
    // A turn may go on across invocations for up to 12 hours, and no longer.
    assert_eq!(
        with(("TURN_DEADLINE_MS", "43200000"))
            .unwrap()
            .engine
            .turn_deadline,
        Duration::from_secs(12 * 3600)
    );
    assert!(with(("TURN_DEADLINE_MS", "43200001")).is_err());
    assert_eq!(
        with(("TOOLS", "current_time, add")).unwrap().tools,
        ["current_time", "add"]
    );
    assert!(
        with(("MAX_ROUNDS", "many"))
            .unwrap_err()
            .to_string()
            .starts_with("MAX_ROUNDS: \"many\" is not valid")
    );
    assert!(
        with(("TOOLS", "rm"))
            .unwrap_err()
            .to_string()
            .starts_with("TOOLS: \"rm\" is not an example tool")
    );
    assert!(
        with(("EVENT_SINKS", "kafka"))
            .unwrap_err()
            .to_string()
            .starts_with("EVENT_SINKS")
    );
    assert!(
        with(("TEMPERATURE", "2"))
            .unwrap_err()
            .to_string()
            .contains("temperature must be between 0 and 1")
    );
}

#[test]
fn metrics_are_on_with_a_namespace_as_powertools_reads_it() {
    let base = [("TABLE_NAME", "t"), ("MODEL_ID", "m1")];
    assert_eq!(settings(&base).unwrap().metrics, None);
    let with = |more: &[(&'static str, &'static str)]| {
        let mut pairs = base.to_vec();
        pairs.extend_from_slice(more);
        settings(&pairs)
    };
    let on = with(&[("POWERTOOLS_METRICS_NAMESPACE", "Agents")]).unwrap();
    let expected = MetricsConfig::new("Agents", DEFAULT_SERVICE).unwrap();
    assert_eq!(on.metrics, Some(expected));
    let named = with(&[
        ("POWERTOOLS_METRICS_NAMESPACE", "Agents"),
        ("POWERTOOLS_SERVICE_NAME", "desk"),
        ("METRICS_DIMENSIONS", "model=m1, agent=helper"),
    ])
    .unwrap();
    let expected = MetricsConfig::new("Agents", "desk")
        .unwrap()
        .dimension("model", "m1")
        .and_then(|c| c.dimension("agent", "helper"))
        .unwrap();
    assert_eq!(named.metrics, Some(expected));
    let off = with(&[
        ("POWERTOOLS_METRICS_NAMESPACE", "Agents"),
        ("POWERTOOLS_METRICS_DISABLED", "true"),
    ])
    .unwrap();
    assert_eq!(off.metrics, None);
    let bad = with(&[
        ("POWERTOOLS_METRICS_NAMESPACE", "Agents"),
        ("METRICS_DIMENSIONS", "agent"),
    ]);
    assert_eq!(
        bad.unwrap_err().to_string(),
        "METRICS_DIMENSIONS: \"agent\" is not name=value"
    );
    let reserved = with(&[
        ("POWERTOOLS_METRICS_NAMESPACE", "Agents"),
        ("METRICS_DIMENSIONS", "outcome=x"),
    ]);
    assert!(
        reserved
            .unwrap_err()
            .to_string()
            .starts_with("METRICS_DIMENSIONS: metrics: the dimension \"outcome\"")
    );
}

#[test]
fn stop_grace_and_file_budgets_are_settings() {
    let base = [("TABLE_NAME", "t"), ("MODEL_ID", "m")];
    let defaults = settings(&base).unwrap().engine;
    assert_eq!(
        defaults.stop_grace,
        agent_worker_core::engine::config::DEFAULT_STOP_GRACE
    );
    let mut pairs = base.to_vec();
    pairs.extend([
        ("STOP_GRACE_MS", "500"),
        ("TURN_FILE_TOKENS", "1000"),
        ("CONVERSATION_FILE_TOKENS", "5000"),
    ]);
    let engine = settings(&pairs).unwrap().engine;
    assert_eq!(engine.stop_grace, Duration::from_millis(500));
    assert_eq!(
        (engine.turn_file_tokens, engine.conversation_file_tokens),
        (1000, 5000)
    );
    let mut bad = base.to_vec();
    bad.push(("TURN_FILE_TOKENS", "-1"));
    assert!(
        settings(&bad)
            .unwrap_err()
            .to_string()
            .starts_with("TURN_FILE_TOKENS: \"-1\" is not valid")
    );
}

/// The names `from_lookup` asks for when given `pairs`, which must be settings it takes.
fn names_read(pairs: &[(&str, &str)]) -> std::collections::BTreeSet<String> {
    let asked = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let map: HashMap<&str, &str> = pairs.iter().copied().collect();
    let read = WorkerSettings::from_lookup(|name| {
        asked.borrow_mut().insert(name.to_owned());
        map.get(name).map(|v| (*v).to_owned())
    });
    assert!(read.is_ok(), "{pairs:?}: {read:?}");
    asked.into_inner()
}

/// `WORKER_SETTINGS` (and `TRACE_SETTINGS`) are the names read, all of them: every branch's
/// names are asked for by one of these lookups, and nothing else is.
#[test]
fn the_list_of_names_is_what_from_lookup_reads() {
    let base = [("TABLE_NAME", "t"), ("MODEL_ID", "m")];
    let scenarios: [&[(&str, &str)]; 4] = [
        &base,
        &[
            ("TABLE_NAME", "t"),
            ("MODEL_ID", "m"),
            ("EVENT_SINKS", "stdout,http"),
            ("EMIT_URL", "http://127.0.0.1:9"),
            ("EMIT_API_KEY", "k"),
            ("UI_ANSWERS", "realtime"),
            ("MODEL_PROVIDER", "anthropic"),
            ("ANTHROPIC_API_KEY", "sk-ant"),
            ("FILES_BUCKET", "b"),
            ("PROMPT_CACHING", "true"),
            ("POWERTOOLS_METRICS_NAMESPACE", "Agents"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318"),
        ],
        &[
            ("TABLE_NAME", "t"),
            ("MODEL_ID", "m"),
            ("MODEL_PROVIDER", "openai"),
            ("OPENAI_API_KEY", "sk"),
            ("AGENTS_DIR", "/opt"),
            ("DEFAULT_AGENT", "desk"),
        ],
        &[
            ("TABLE_NAME", "t"),
            ("MODEL_ID", "m"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://localhost:4318/v1/traces",
            ),
        ],
    ];
    let read: std::collections::BTreeSet<String> =
        scenarios.iter().flat_map(|pairs| names_read(pairs)).collect();
    let listed: std::collections::BTreeSet<String> = WORKER_SETTINGS
        .iter()
        .chain(TRACE_SETTINGS.iter())
        .map(|name| (*name).to_owned())
        .collect();
    assert_eq!(
        WORKER_SETTINGS.len() + TRACE_SETTINGS.len(),
        listed.len() + 1,
        "POWERTOOLS_SERVICE_NAME is in both lists, and nothing else twice"
    );
    let unlisted: Vec<&String> = read.difference(&listed).collect();
    assert!(
        unlisted.is_empty(),
        "read, and not in WORKER_SETTINGS: {unlisted:?}"
    );
    let unread: Vec<&String> = listed.difference(&read).collect();
    assert!(unread.is_empty(), "listed, and never read: {unread:?}");
}

/// Pushes are off unless `A2A_PUSH=on`; plain `http` to loopback only where asked, never on Lambda.
#[test]
fn a2a_pushes_are_off_by_default_and_loopback_only_off_lambda() {
    let base = [("TABLE_NAME", "t"), ("MODEL_ID", "m")];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut pairs = base.to_vec();
        pairs.extend_from_slice(extra);
        settings(&pairs)
    };
    let strict = crate::a2a_push::PushPolicy { loopback: false };
    assert_eq!(with(&[]).unwrap().a2a_push, None);
    assert_eq!(with(&[("A2A_PUSH", "off")]).unwrap().a2a_push, None);
    assert_eq!(with(&[("A2A_PUSH", "on")]).unwrap().a2a_push, Some(strict));
    let local = with(&[("A2A_PUSH", "on"), ("A2A_PUSH_LOOPBACK", "true")]).unwrap();
    assert_eq!(
        local.a2a_push,
        Some(crate::a2a_push::PushPolicy { loopback: true })
    );
    let on_lambda = with(&[
        ("A2A_PUSH", "on"),
        ("A2A_PUSH_LOOPBACK", "true"),
        ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
    ]);
    assert!(
        on_lambda
            .unwrap_err()
            .to_string()
            .starts_with("A2A_PUSH_LOOPBACK: ")
    );
    assert!(
        with(&[("A2A_PUSH", "maybe")])
            .unwrap_err()
            .to_string()
            .starts_with("A2A_PUSH: ")
    );
}
