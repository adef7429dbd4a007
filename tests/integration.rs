//! Every integration test of the root package, as the modules of one test binary: one build
//! and one link instead of one per file. Each module is one area's tests (its own docs say
//! which); a module whose test target required features before is gated on them here (the
//! suite runs with every feature: `make test`). Run one area with
//! `cargo test --all-features --test integration <module>::` (a filter is a substring:
//! `faults::` takes `engine_faults::` too; `--skip` leaves one out).
//!
//! A topic too large for one file is two modules (`engine_bedrock` and `engine_faults`,
//! `agent_protocol` and `agent_protocol_serving`, `lambda_batch` and `lambda_batch_people`,
//! `approvals` and `approvals_stored`, `config` and `config_secrets`); their shared helpers are
//! modules of `tests/support/`.

mod support;

mod a2a;
mod a2a_agents;
mod a2a_edge;
mod a2a_list;
mod a2a_push;
mod agent_definitions;
mod agent_protocol;
mod agent_protocol_key;
mod agent_protocol_serving;
mod agent_protocol_suite;
mod agent_sessions;
mod agent_subagents;
mod agentcore;
mod agentcore_ws;
mod agui;
#[cfg(feature = "s3")]
mod api_function;
#[cfg(feature = "s3")]
mod api_function_streaming;
mod approvals;
mod approvals_stored;
#[cfg(feature = "s3")]
mod attachment_tools;
#[cfg(feature = "s3")]
mod attachments;
mod bedrock_fixtures;
#[cfg(feature = "s3")]
mod bootstrap;
mod cli;
mod compaction;
mod config;
mod config_jobs;
mod config_secrets;
mod conformance;
mod console;
mod container_http;
mod container_people;
mod container_queue;
mod conversations;
mod crash_recovery;
mod durable_continuations;
mod durable_crashes;
mod durable_poll_crashes;
mod durable_turns;
mod dynamo_limits;
mod dynamo_store;
mod engine_bedrock;
mod engine_faults;
mod error_chains;
mod error_shape;
mod eval_live;
mod faults;
mod fork;
mod hostile_edge;
mod hostile_input;
mod hostile_routes;
mod http_sink;
mod kill_switch;
mod lambda_batch;
mod lambda_batch_people;
#[cfg(feature = "s3")]
mod large_content;
mod mcp;
mod mcp_approvals;
mod mcp_server;
mod metrics;
mod middleware;
mod one_turn_at_a_time;
mod openapi;
mod openapi_tools;
mod payload_schema;
mod pdf_documents;
mod people_by_tokens;
mod prompt_cache;
mod provider_matrix;
mod providers;
mod realtime_server;
mod record_fixture;
mod round_trips;
mod secrets;
mod server_limits;
mod skills;
mod snapshot_ids;
mod spending;
mod steering;
mod steering_hosts;
mod stops;
mod template;
mod template_agentcore;
mod template_api;
mod template_deployments;
mod template_settings;
mod token_keys;
mod traces;
mod turn_logger;
mod turn_policy;
mod typed_results;
mod typescript_client;
mod ui_actions;
