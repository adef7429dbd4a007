//! The agent's configuration (`AGENT_WORKER_CONFIG`, or `--config`): a product's own tools,
//! policy and persona without writing Rust, read alike by every host, from a file, an S3 object
//! (`s3://bucket/key`) or an SSM parameter (`ssm:/name`).
//!
//! YAML or JSON; every key is checked, and a wrong one stops the start-up naming it:
//!
//! ```yaml
//! persona: You are Desk's assistant. You help agents of the help desk with their tickets.
//! # or systemPrompt: "…" (the whole prompt, verbatim), or systemPromptFile: prompts/desk.md
//! tools: [current_time]            # the example tools
//! openapi:
//!   - document: desk.openapi.json  # beside this file, https://…, or s3://bucket/key
//!     baseUrl: https://api.desk.example
//!     audience: agents             # or pa: only operations flagged `pa: true`
//!     actAs:
//!       token: { header: Authorization, prefix: "Bearer " }   # the payload's userToken
//!       userIdHeader: x-desk-user                             # and/or the ids, as headers
//!       accountIdHeader: x-desk-account
//!       assertion:                                            # or a signed assertion
//!         header: x-agent-assertion
//!         keySecret: arn:aws:secretsmanager:…:secret:desk-assertion-key   # or ssm:/name
//!     events:                      # for x-async-binding: the product's event declarations
//!       report:ready: { kind: completion, correlation: reportId }
//! policy:
//!   - tools: "delete_*"            # a name pattern (`*` is any run of characters)
//!     decision: deny
//!     reason: Deleting is done in the desk itself.
//!   - effect: mutate               # view, file, mutate, job or transaction
//!     decision: approve
//! admit: [attachment]              # tool classes offered besides the product's own
//! mcp:                             # MCP servers (feature `mcp`): tools named <name>_<tool>
//!   - name: everything
//!     url: https://mcp.example/mcp # Streamable HTTP; or command: + args: for stdio
//!     headers: { X-Api-Key: { secret: ssm:/desk/mcp-key } }   # or a plain "text"
//!     personToken: { header: Authorization, prefix: "Bearer " } # the turn's userToken, per call
//!     timeoutMs: 30000
//!     allow: [echo, get-sum]
//!     tools:                       # where the server's annotations say nothing
//!       get-sum: { effect: view, title: Add two numbers }
//! a2a:                             # remote A2A agents, each offered as one tool (its card describes it)
//!   - name: research_agent
//!     url: https://research.example   # its card at /.well-known/agent-card.json
//!     headers: { Authorization: { secret: ssm:/research/token } }
//!     timeoutMs: 120000
//! resultSchema:                    # every turn's typed result (a turn's own resultSchema wins)
//!   type: object
//!   properties: { category: { enum: [billing, bug, other] } }
//!   required: [category]
//! turnPolicy:                      # who asks shapes the turn (see `turns`): persona, tools
//!   - when: { accountId: acme }
//!     persona: You are Acme's assistant.
//!     tools: [current_time]
//! prepareStep:                     # before each model call: the step's tools, or a forced one
//!   - after: "search_*"
//!     tools: [answer]
//! skills: skills                   # Agent Skills: skills/<name>/SKILL.md, loaded on demand
//! instructions: AGENTS.md          # the project's instructions, after the persona
//! pdfAsDocument: true              # PDFs as document blocks the model reads itself
//! ```
//!
//! Each value of the environment still wins where it names the same thing (`SYSTEM_PROMPT`,
//! `TOOLS` adds to `tools`). The built-in rules cannot be switched off: a transaction or a
//! destructive call always needs the person's approval, and a deny always wins.

mod assertion;
mod load;
mod openapi_source;
mod policy;
mod prompt;
mod skills;
mod spending;
mod turns;
pub use openapi_source::{ActAsConfig, AudienceName, OpenApiSource};
pub use spending::{Amount, BudgetsFile, Daily};

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

pub use super::headers::{HeaderValue, SecretSource, TokenHeader};
pub use assertion::{
    AssertionConfig, AssertionError, Claims, DEFAULT_ASSERTION_TTL, DEFAULT_KEY_REFRESH,
    sign as sign_assertion, verify as verify_assertion,
};
pub use load::{DEFAULT_FETCH_TIMEOUT, DocumentSource, Fetch, FetchError, NoRemote, Remote, SourceError};

pub use policy::{ConfiguredPolicy, PolicyDecision, PolicyRule};
use prompt::system_prompt;
pub use prompt::{NoSystemPrompt, PERSONA_RULES};
pub use skills::{LOAD_SKILL, Skill, read_skills};
pub use turns::{ConfiguredTurns, StepRule, TurnMatch, TurnRule};

use super::a2a_agents::{A2aAgent, a2a_tool};
use super::mcp::{McpServer, mcp_tools};
use agent_worker_contract::{ErrorChain, chain};
use agent_worker_core::engine::EngineBuilder;
use agent_worker_core::engine::tools::openapi::{EventDeclarations, EventWaiter};
use agent_worker_core::engine::tools::{Effect, Tool, ToolClass, ToolSource, examples};

/// The environment variable that names the configuration file, for the binaries.
pub const CONFIG_ENV: &str = "AGENT_WORKER_CONFIG";

/// The configuration file, as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConfigFile {
    /// The assistant's identity; the worker's own rules follow it.
    pub persona: Option<String>,
    /// The whole system prompt, verbatim.
    pub system_prompt: Option<String>,
    /// A file (beside this one) holding the whole system prompt.
    pub system_prompt_file: Option<PathBuf>,
    /// Example tools, by name.
    #[serde(default)]
    pub tools: Vec<String>,
    /// OpenAPI documents whose exposed operations become tools.
    #[serde(default)]
    pub openapi: Vec<OpenApiSource>,
    /// Tool policy rules.
    #[serde(default)]
    pub policy: Vec<PolicyRule>,
    /// Tool classes offered besides the product's own (`attachment`).
    #[serde(default)]
    pub admit: Vec<ClassName>,
    /// MCP servers whose tools become tools (feature `mcp`).
    #[serde(default)]
    pub mcp: Vec<McpServer>,
    /// Remote A2A agents, each a tool.
    #[serde(default)]
    pub a2a: Vec<A2aAgent>,
    /// The JSON Schema every turn's typed result must match, unless the turn names its own.
    pub result_schema: Option<serde_json::Value>,
    /// Who asks shapes the turn: its persona or system prompt, and its tools.
    #[serde(default)]
    pub turn_policy: Vec<TurnRule>,
    /// Before each model call: the step's tools, or one it must call.
    #[serde(default)]
    pub prepare_step: Vec<StepRule>,
    /// A folder (beside this file) of Agent Skills: `<name>/SKILL.md` each.
    pub skills: Option<PathBuf>,
    /// The project's instructions file (an `AGENTS.md`, beside this file).
    pub instructions: Option<PathBuf>,
    /// PDFs go to the model as document blocks it reads itself, where it takes them.
    #[serde(default)]
    pub pdf_as_document: bool,
    /// Models' prices, US dollars per million tokens, over the defaults.
    #[serde(default)]
    pub prices: std::collections::BTreeMap<String, agent_worker_core::engine::spending::Price>,
    /// What a turn, a conversation, a person and an account may spend.
    #[serde(default)]
    pub budgets: spending::BudgetsFile,
}

/// A tool class, as the file names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClassName {
    /// The `attachment_*` tools.
    Attachment,
}

/// A configuration that cannot be used: every problem, each naming its key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file.
    pub file: String,
    /// The problems: `key: what is wrong`.
    pub problems: Vec<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} cannot be used:", self.file)?;
        for problem in &self.problems {
            write!(f, "\n- {problem}")?;
        }
        Ok(())
    }
}

/// Where a tool came from, for `agent-worker tools`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolOrigin {
    /// The tool.
    pub name: String,
    /// `example`, or the OpenAPI document it came from.
    pub source: String,
    /// What calling it changes.
    pub effect: Effect,
    /// Whether every call needs the person's approval (by its declaration or the policy), or
    /// the policy denies it.
    pub approval: String,
}

/// What loading a configuration needs besides its file. The default reads files only, and waits
/// for no job.
#[derive(Clone, Default)]
pub struct Loader {
    /// Fetches documents that are not files (`https://`, `s3://`).
    pub fetch: Option<Arc<dyn Fetch>>,
    /// Waits for jobs to settle (`x-async-binding`); without one, a call that starts a job
    /// answers that it was dispatched.
    pub waiter: Option<Arc<dyn EventWaiter>>,
    /// Reads the keys of signed assertions (Secrets Manager).
    pub secrets: Option<Arc<dyn SecretSource>>,
}

impl fmt::Debug for Loader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loader")
            .field("fetch", &self.fetch.is_some())
            .field("waiter", &self.waiter)
            .field("secrets", &self.secrets.is_some())
            .finish()
    }
}

/// A configuration made ready: its tools built, its documents read, its policy checked.
#[derive(Clone, Default)]
pub struct Configured {
    /// The system prompt it gives, if any.
    pub system_prompt: Option<String>,
    /// Its tools, examples and OpenAPI operations.
    pub tools: Vec<Arc<dyn Tool>>,
    /// Its tools whose list may change: one source per MCP server.
    pub sources: Vec<Arc<dyn ToolSource>>,
    /// Its policy.
    pub policy: ConfiguredPolicy,
    /// Where each tool came from.
    pub origins: Vec<ToolOrigin>,
    /// The event declarations of its documents: what a product may report to settle a job.
    pub events: EventDeclarations,
    /// What loading it read besides files: its `s3://` documents (as S3 object ARNs) and the
    /// secrets and parameters of its keys and headers (as named), for the deployer to grant.
    pub reads: Vec<String>,
    /// The JSON Schema every turn's typed result must match (checked to compile).
    pub result_schema: Option<serde_json::Value>,
    /// Its turn policy (`turnPolicy`, `prepareStep`), when it has one.
    pub turns: Option<ConfiguredTurns>,
    /// Its skills (`skills`), read and checked.
    pub skills: Vec<Skill>,
    /// What goes after every system prompt (the deployment's or a turn's): the project's
    /// instructions and the skills' listing, the same bytes every turn.
    pub prompt_additions: Option<String>,
    /// PDFs as document blocks (`pdfAsDocument`).
    pub pdf_as_document: bool,
    /// The models' prices (`prices`, over the defaults).
    pub prices: agent_worker_core::engine::spending::Prices,
    /// Its budgets (`budgets`).
    pub budgets: agent_worker_core::engine::spending::Budgets,
    /// Whether it was read from a file (the default, no file, gives nothing and requires nothing).
    pub from_file: bool,
}

impl fmt::Debug for Configured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Configured")
            .field("system_prompt", &self.system_prompt.is_some())
            .field("tools", &self.origins.iter().map(|o| &o.name).collect::<Vec<_>>())
            .field("policy", &self.policy)
            .finish()
    }
}

impl ConfigFile {
    /// Reads `path` (YAML or JSON): a key that is not one, or a value of the wrong kind, is
    /// refused naming it.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let fail = |problem: String| ConfigError {
            file: path.display().to_string(),
            problems: vec![problem],
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot be read: {e}")))?;
        serde_yaml::from_str(&text).map_err(|e| fail(e.to_string()))
    }

    /// What loading it reads besides files: its `s3://` documents (as S3 object ARNs), and the
    /// secrets and parameters of its assertion keys and MCP headers (as it names them).
    pub fn reads(&self) -> Vec<String> {
        let mut reads = BTreeSet::new();
        for source in &self.openapi {
            if let Ok(DocumentSource::S3 { bucket, key }) = DocumentSource::parse(&source.document) {
                reads.insert(format!("arn:aws:s3:::{bucket}/{key}"));
            }
            if let Some(assertion) = &source.act_as.assertion {
                reads.insert(assertion.key_secret.clone());
            }
        }
        let agent_headers = self.a2a.iter().flat_map(|agent| agent.headers.values());
        for value in agent_headers {
            if let HeaderValue::Secret { secret } = value {
                reads.insert(secret.clone());
            }
        }
        for server in &self.mcp {
            for value in server.headers.values() {
                if let HeaderValue::Secret { secret } = value {
                    reads.insert(secret.clone());
                }
            }
        }
        reads.into_iter().collect()
    }

    /// Reads the configuration at `location`, and the folder its relative paths start in: a
    /// file, an S3 object (`s3://bucket/key`, through `loader`'s fetch) or an SSM parameter
    /// (`ssm:<name>`, through its secrets). One read from S3 or SSM names no file: its documents
    /// are `https://` or `s3://`, its prompt is `persona` or `systemPrompt`.
    pub async fn locate(location: &str, loader: &Loader) -> Result<(Self, PathBuf), ConfigError> {
        let fail = |problems: Vec<String>| ConfigError {
            file: location.to_owned(),
            problems,
        };
        let text = if location.starts_with("s3://") {
            let source = DocumentSource::parse(location).map_err(|e| fail(vec![e.to_string()]))?;
            let fetch: &dyn Fetch = loader.fetch.as_deref().unwrap_or(&NoRemote);
            fetch.fetch(&source).await.map_err(|e| fail(vec![chain(&e)]))?
        } else if location.starts_with("ssm:") {
            let secrets = loader
                .secrets
                .as_deref()
                .ok_or_else(|| fail(vec!["no SSM client to read it with".into()]))?;
            secrets
                .secret(location)
                .await
                .map_err(|e| fail(vec![format!("cannot be read: {}", ErrorChain(&e))]))?
        } else {
            let path = Path::new(location);
            let base = path.parent().unwrap_or(Path::new(".")).to_path_buf();
            return Ok((Self::read(path)?, base));
        };
        let file: Self = serde_yaml::from_str(&text).map_err(|e| fail(vec![e.to_string()]))?;
        let mut problems = Vec::new();
        if file.system_prompt_file.is_some() {
            problems.push(
                "systemPromptFile: one read from S3 or SSM names no file; give persona or systemPrompt"
                    .into(),
            );
        }
        for (i, source) in file.openapi.iter().enumerate() {
            if let Ok(DocumentSource::File(path)) = DocumentSource::parse(&source.document) {
                problems.push(format!(
                    "openapi[{i}].document: {path} is a file; one read from S3 or SSM names its documents by https:// or s3://"
                ));
            }
        }
        if problems.is_empty() {
            Ok((file, PathBuf::new()))
        } else {
            Err(fail(problems))
        }
    }
}

impl Configured {
    /// Its tools as they are now (its sources' included), and those of `extra` whose names it
    /// does not already have (the example tools `TOOLS` or `--tool` add): what a host that takes
    /// a fixed list (Standard Agents, the conversations API) registers.
    pub fn tools_with(&self, extra: impl IntoIterator<Item = Arc<dyn Tool>>) -> Vec<Arc<dyn Tool>> {
        let mut tools = self.current_tools();
        let added = not_named(&tools, extra);
        tools.extend(added);
        tools
    }

    /// `builder` given its tools and those of `extra` it does not have, with its sources kept
    /// live: each turn offers an MCP server's list as it was when the turn started.
    pub fn equip(
        &self,
        builder: EngineBuilder,
        extra: impl IntoIterator<Item = Arc<dyn Tool>>,
    ) -> EngineBuilder {
        let added = not_named(&self.current_tools(), extra);
        let fixed = self.tools.iter().cloned().chain(added);
        let builder = match &self.result_schema {
            Some(schema) => builder.result_schema(schema.clone()),
            None => builder,
        };
        let builder = match &self.turns {
            Some(turns) => builder.turn_policy(turns.clone()),
            None => builder,
        }
        .pdf_as_document(self.pdf_as_document);
        self.sources
            .iter()
            .fold(builder.tools(fixed), |b, source| b.tool_source(source.clone()))
    }

    /// Its tools now: the fixed ones and its sources' current lists.
    fn current_tools(&self) -> Vec<Arc<dyn Tool>> {
        let mut tools = self.tools.clone();
        tools.extend(self.sources.iter().flat_map(|s| s.tools()));
        tools
    }

    /// Reads the configuration at `location` (a file, `s3://bucket/key` or `ssm:<name>`: see
    /// [`ConfigFile::locate`]), checks every key, and loads what it names: documents through
    /// `loader` (`https://`, `s3://`), files beside it.
    pub async fn load(location: impl AsRef<Path>, loader: &Loader) -> Result<Self, ConfigError> {
        let location = location.as_ref().to_string_lossy();
        let location = location.as_ref();
        let (file, base) = ConfigFile::locate(location, loader).await?;
        Self::from_file(&file, &base, loader)
            .await
            .map_err(|problems| ConfigError {
                file: location.to_owned(),
                problems,
            })
    }

    /// What `file` (whose relative paths start at `base`) yields, or every problem with it.
    pub async fn from_file(file: &ConfigFile, base: &Path, loader: &Loader) -> Result<Self, Vec<String>> {
        let mut problems = Vec::new();
        let system_prompt = system_prompt(file, base, &mut problems);
        let reads = file.reads();
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        let mut origins = Vec::new();
        for (i, name) in file.tools.iter().enumerate() {
            match examples::by_name(name) {
                Some(tool) => {
                    origins.push(origin(tool.as_ref(), "example"));
                    tools.push(tool);
                }
                None => problems.push(format!(
                    "tools[{i}]: no example tool {name:?} (there are {})",
                    examples::NAMES.join(", ")
                )),
            }
        }
        let mut events = EventDeclarations::default();
        for (i, source) in file.openapi.iter().enumerate() {
            if let Some(declared) = &source.events {
                events.merge(declared);
            }
            match load::openapi_tools(source, base, loader).await {
                Ok(loaded) => {
                    for tool in loaded {
                        origins.push(origin(tool.as_ref(), &source.document));
                        tools.push(tool);
                    }
                }
                Err(why) => problems.extend(why.into_iter().map(|p| format!("openapi[{i}]: {p}"))),
            }
        }
        let mut sources = Vec::new();
        for (i, server) in file.mcp.iter().enumerate() {
            match mcp_tools(server, loader.secrets.as_deref()).await {
                Ok(source) => {
                    for tool in source.tools() {
                        origins.push(origin(tool.as_ref(), &format!("mcp:{}", server.name)));
                    }
                    sources.push(source);
                }
                Err(why) => problems.push(format!("mcp[{i}] ({}): {}", server.name, ErrorChain(&why))),
            }
        }
        for (i, agent) in file.a2a.iter().enumerate() {
            match a2a_tool(agent, reqwest::Client::new(), loader.secrets.as_deref()).await {
                Ok(tool) => {
                    origins.push(origin(tool.as_ref(), &format!("a2a:{}", agent.url)));
                    tools.push(tool);
                }
                Err(why) => problems.push(format!("a2a[{i}] ({}): {}", agent.name, ErrorChain(&why))),
            }
        }
        let skills = match &file.skills {
            Some(folder) => read_skills(&base.join(folder)).unwrap_or_else(|why| {
                problems.extend(why);
                Vec::new()
            }),
            None => Vec::new(),
        };
        if !skills.is_empty() {
            let tool = skills::load_skill_tool(&skills);
            let folder = file.skills.as_deref().unwrap_or(Path::new("")).display();
            origins.push(origin(tool.as_ref(), &format!("skills:{folder}")));
            tools.push(tool);
        }
        let instructions =
            file.instructions
                .as_ref()
                .and_then(|path| match std::fs::read_to_string(base.join(path)) {
                    Ok(text) if !text.trim().is_empty() => Some(text.trim().to_owned()),
                    Ok(_) => {
                        problems.push(format!("instructions: {} is empty", path.display()));
                        None
                    }
                    Err(e) => {
                        problems.push(format!("instructions: {} cannot be read: {e}", path.display()));
                        None
                    }
                });
        let prompt_additions = [
            instructions.map(|text| format!("The project's instructions:\n{text}")),
            (!skills.is_empty()).then(|| skills::listing(&skills)),
        ]
        .into_iter()
        .flatten()
        .reduce(|a, b| format!("{a}\n\n{b}"));
        let mut seen = BTreeSet::new();
        for origin in &origins {
            if !seen.insert(origin.name.as_str()) {
                problems.push(format!("tool {} comes twice", origin.name));
            }
        }
        let admit = file
            .admit
            .iter()
            .map(|c| match c {
                ClassName::Attachment => ToolClass::Attachment,
            })
            .collect();
        if let Some(schema) = &file.result_schema
            && let Err(bad) = agent_worker_core::engine::result::ResultSchema::new(schema.clone())
        {
            problems.push(bad.to_string());
        }
        let policy = ConfiguredPolicy::new(file.policy.clone(), admit).unwrap_or_else(|why| {
            problems.extend(why);
            ConfiguredPolicy::default()
        });
        let turns = ConfiguredTurns::new(&file.turn_policy, &file.prepare_step, prompt_additions.as_deref())
            .unwrap_or_else(|why| {
                problems.extend(why);
                None
            });
        let prices = spending::prices(&file.prices, &mut problems);
        let budgets = file.budgets.budgets(&mut problems);
        if !problems.is_empty() {
            return Err(problems);
        }
        for origin in &mut origins {
            origin.approval = policy.describe(origin);
        }
        Ok(Self {
            system_prompt,
            tools,
            sources,
            policy,
            origins,
            events,
            reads,
            result_schema: file.result_schema.clone(),
            turns,
            skills,
            prompt_additions,
            pdf_as_document: file.pdf_as_document,
            prices,
            budgets,
            from_file: true,
        })
    }
}

/// The tools of `extra` whose names are neither in `tools` nor earlier in `extra`.
fn not_named(tools: &[Arc<dyn Tool>], extra: impl IntoIterator<Item = Arc<dyn Tool>>) -> Vec<Arc<dyn Tool>> {
    let mut added: Vec<Arc<dyn Tool>> = Vec::new();
    for tool in extra {
        let name = &tool.spec().name;
        if !tools.iter().chain(&added).any(|t| &t.spec().name == name) {
            added.push(tool);
        }
    }
    added
}

fn origin(tool: &dyn Tool, source: &str) -> ToolOrigin {
    let spec = tool.spec();
    ToolOrigin {
        name: spec.name.clone(),
        source: source.to_owned(),
        effect: spec.effect,
        approval: if spec.effect == Effect::Transaction || spec.destructive {
            "always (declared)".into()
        } else {
            "no".into()
        },
    }
}
