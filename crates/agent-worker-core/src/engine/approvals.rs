//! Approvals bound to the exact call.
//!
//! A call needs the person's approval when its tool declares effect `transaction` (no policy can
//! waive that), declares `destructive`, or the host's [`ToolPolicy`] answers
//! [`ToolDecision::RequireApproval`]. A policy's [`Deny`](ToolDecision::Deny) always wins.
//!
//! The first such call of a turn is stored as a [`PendingApproval`] and the turn ends with
//! `stopReason: "approval_required"`; the caller gets an `approval_required` event with a
//! preview and a token. The token is an HMAC over the approval id, session, user, tool and the
//! SHA-256 of the arguments' canonical JSON (RFC 8785): it opens exactly that call, for that
//! person, once, before it expires. The model never sees it.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::attachments::FileInput;
use super::tools::{Effect, ToolClass, ToolSpec};
use crate::protocol::ErrorChain;
use crate::session::{ApprovalStatus, PendingApproval, SessionId, TurnId};

/// The code of a call that needs the person's approval where there is no way to ask for it
/// (no approval store, as over MCP): nothing was sent.
pub const APPROVAL_REQUIRED: &str = "APPROVAL_REQUIRED";

/// What a host's policy says of one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolDecision {
    /// It may run (unless its declaration needs approval anyway).
    Allow,
    /// It runs only with the person's approval.
    RequireApproval,
    /// It never runs; the reason goes to the model. Wins over an approval.
    Deny(String),
}

/// What a policy knows of a call.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ToolPolicyContext<'a> {
    /// The session.
    pub session: &'a SessionId,
    /// The person, when the caller named one.
    pub user_id: Option<&'a str>,
    /// The tool's declaration: its name, effect and destructive flag.
    pub tool: &'a ToolSpec,
    /// The call's arguments.
    pub args: &'a Value,
}

/// Decides, per call, whether it may run.
///
/// ```
/// use agent_worker_core::engine::{ToolDecision, ToolPolicy, ToolPolicyContext};
/// use agent_worker_core::engine::tools::Effect;
///
/// /// Writes need approval; nothing may delete.
/// #[derive(Debug)]
/// struct Careful;
///
/// impl ToolPolicy for Careful {
///     fn decide(&self, call: &ToolPolicyContext<'_>) -> ToolDecision {
///         match call.tool.effect {
///             Effect::Mutate if call.tool.destructive => ToolDecision::Deny("deleting is not allowed here".into()),
///             Effect::Mutate => ToolDecision::RequireApproval,
///             _ => ToolDecision::Allow,
///         }
///     }
/// }
/// ```
pub trait ToolPolicy: Send + Sync + fmt::Debug {
    /// The decision for one call.
    fn decide(&self, call: &ToolPolicyContext<'_>) -> ToolDecision;

    /// Whether tools of `class` are offered to the model at all. [`ToolClass::Backend`] and
    /// [`ToolClass::Ui`] are, by default; admit [`ToolClass::Attachment`] to let the model reach
    /// the conversation's files.
    fn admits(&self, class: ToolClass) -> bool {
        class.offered_by_default()
    }
}

/// A tool policy that allows every call (declarations still decide approvals) and admits the
/// given tool classes besides [`ToolClass::Backend`].
///
/// ```
/// use agent_worker_core::engine::{AdmitClasses, ToolPolicy};
/// use agent_worker_core::engine::tools::ToolClass;
///
/// let policy = AdmitClasses(vec![ToolClass::Attachment]);
/// assert!(policy.admits(ToolClass::Attachment) && policy.admits(ToolClass::Backend));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdmitClasses(pub Vec<ToolClass>);

impl ToolPolicy for AdmitClasses {
    fn decide(&self, _call: &ToolPolicyContext<'_>) -> ToolDecision {
        ToolDecision::Allow
    }

    fn admits(&self, class: ToolClass) -> bool {
        class.offered_by_default() || self.0.contains(&class)
    }
}

/// What the engine does with one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Run,
    NeedsApproval,
    Denied(String),
}

/// The verdict for a call of `spec`, given the policy's decision.
pub(crate) fn verdict(spec: &ToolSpec, decision: ToolDecision) -> Verdict {
    match decision {
        ToolDecision::Deny(reason) => Verdict::Denied(reason),
        _ if spec.effect == Effect::Transaction || spec.destructive => Verdict::NeedsApproval,
        ToolDecision::RequireApproval => Verdict::NeedsApproval,
        ToolDecision::Allow => Verdict::Run,
    }
}

/// JSON in the canonical form of RFC 8785: no white space, object members sorted by their
/// names' UTF-16 code units, strings and numbers as `serde_json` writes them (which matches
/// RFC 8785 for integers and for the fractions tools take).
pub(crate) fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (name, value)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(name.clone()).to_string());
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// SHA-256, in hex, of the canonical JSON of `args`.
pub(crate) fn args_hash(args: &Value) -> String {
    Sha256::digest(canonical_json(args).as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Signs and checks approval tokens with a secret key.
#[derive(Clone)]
pub struct ApprovalSigner {
    /// HMAC-SHA256 keyed once; each token starts from a clone.
    keyed: Hmac<Sha256>,
}

impl fmt::Debug for ApprovalSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApprovalSigner { .. }")
    }
}

/// A key too short to sign approvals.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the approval key must be at least 32 bytes, not {0}")]
pub struct WeakKey(pub usize);

impl ApprovalSigner {
    /// A signer with `key`, at least 32 bytes.
    pub fn new(key: impl Into<Vec<u8>>) -> Result<Self, WeakKey> {
        let key = key.into();
        if key.len() < 32 {
            return Err(WeakKey(key.len()));
        }
        let keyed = <Hmac<Sha256> as KeyInit>::new_from_slice(&key).map_err(|_| WeakKey(key.len()))?;
        Ok(Self { keyed })
    }

    fn mac(&self, approval: &PendingApproval) -> Hmac<Sha256> {
        let mut mac = self.keyed.clone();
        for part in [
            approval.id.as_str(),
            approval.session.as_str(),
            approval.user_id.as_str(),
            approval.tool.as_str(),
            approval.args_hash.as_str(),
        ] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        mac
    }

    /// The token that opens exactly this call.
    pub fn sign(&self, approval: &PendingApproval) -> String {
        URL_SAFE_NO_PAD.encode(self.mac(approval).finalize().into_bytes())
    }

    /// Whether `token` opens this call (in constant time).
    pub fn verify(&self, approval: &PendingApproval, token: &str) -> bool {
        match URL_SAFE_NO_PAD.decode(token.trim()) {
            Ok(bytes) => self.mac(approval).verify_slice(&bytes).is_ok(),
            Err(_) => false,
        }
    }
}

pub use crate::protocol::ApprovalDecision;

pub(crate) use crate::clock::now_ms;

/// The preview the person decides on. Its words come only from the declaration: the tool's
/// title, its consequence or description, and its input schema's property titles.
pub(crate) fn preview(spec: &ToolSpec, args: &Value, files: &[FileInput]) -> Value {
    let properties = spec.input_schema.get("properties").and_then(Value::as_object);
    let fields: Vec<Value> = args
        .as_object()
        .map(|args| {
            args.iter()
                .map(|(name, value)| {
                    let label = properties
                        .and_then(|p| p.get(name))
                        .and_then(|p| p.get("title"))
                        .and_then(Value::as_str)
                        .unwrap_or(name);
                    let mut field = json!({ "name": name, "label": label, "value": value });
                    let pointer = format!("/{name}");
                    let named: Vec<Value> = files
                        .iter()
                        .filter(|f| f.pointer == pointer || f.pointer.starts_with(&format!("{pointer}/")))
                        .map(|f| {
                            let mut summary = f.reference.summary();
                            summary["at"] = f.pointer.clone().into();
                            summary
                        })
                        .collect();
                    if !named.is_empty() {
                        field["files"] = named.into();
                    }
                    field
                })
                .collect()
        })
        .unwrap_or_default();
    json!({
        "title": spec.title.clone().unwrap_or_else(|| spec.name.clone()),
        "consequence": spec.consequence.clone().unwrap_or_else(|| spec.description.clone()),
        "fields": fields,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval(args: Value) -> PendingApproval {
        PendingApproval {
            id: "ap-1".into(),
            session: crate::session::test_ids::sid("s"),
            user_id: "u".into(),
            turn_id: crate::session::test_ids::tid("t"),
            tool: "pay".into(),
            args_hash: args_hash(&args),
            args,
            created_at: 0,
            expires_at: 0,
            preview: None,
        }
    }

    #[test]
    fn canonical_json_sorts_members_and_drops_white_space() {
        let value: Value =
            serde_json::from_str(r#"{ "b": [1, {"z": true, "a": null}], "a": "x\n", "é": 1.5 }"#).unwrap();
        assert_eq!(
            canonical_json(&value),
            r#"{"a":"x\n","b":[1,{"a":null,"z":true}],"é":1.5}"#
        );
        // The order members came in does not change the hash.
        let reordered: Value =
            serde_json::from_str(r#"{"é":1.5,"a":"x\n","b":[1,{"a":null,"z":true}]}"#).unwrap();
        assert_eq!(args_hash(&value), args_hash(&reordered));
    }

    #[test]
    fn a_token_opens_exactly_its_call() {
        let signer = ApprovalSigner::new([7u8; 32]).unwrap();
        let original = approval(json!({"amount": 12, "to": "acme"}));
        let token = signer.sign(&original);
        assert!(signer.verify(&original, &token));
        let mut other_args = approval(json!({"amount": 1200, "to": "acme"}));
        other_args.args_hash = args_hash(&other_args.args);
        assert!(!signer.verify(&other_args, &token));
        let mut other_user = original.clone();
        other_user.user_id = "mallory".into();
        assert!(!signer.verify(&other_user, &token));
        assert!(!signer.verify(&original, "not-a-token"));
        assert!(
            !ApprovalSigner::new([7u8; 32])
                .unwrap()
                .verify(&original, &format!("{token}A"))
        );
        assert!(!ApprovalSigner::new([8u8; 32]).unwrap().verify(&original, &token));
        assert_eq!(ApprovalSigner::new([1u8; 8]).unwrap_err(), WeakKey(8));
    }

    #[test]
    fn a_deny_wins_and_transactions_always_need_approval() {
        let spec = ToolSpec::new("pay", "Pays.", json!({"type": "object"})).effect(Effect::Transaction);
        assert_eq!(verdict(&spec, ToolDecision::Allow), Verdict::NeedsApproval);
        assert_eq!(
            verdict(&spec, ToolDecision::Deny("no".into())),
            Verdict::Denied("no".into())
        );
        let delete = ToolSpec::new("rm", "Removes.", json!({"type": "object"})).destructive(true);
        assert_eq!(verdict(&delete, ToolDecision::Allow), Verdict::NeedsApproval);
        let read = ToolSpec::new("get", "Reads.", json!({"type": "object"}));
        assert_eq!(verdict(&read, ToolDecision::Allow), Verdict::Run);
        assert_eq!(
            verdict(&read, ToolDecision::RequireApproval),
            Verdict::NeedsApproval
        );
    }

    #[test]
    fn the_preview_takes_its_words_from_the_declaration() {
        let spec = ToolSpec::new(
            "pay",
            "Pays an invoice.",
            json!({"type": "object", "properties": {"amount": {"type": "number", "title": "Amount (EUR)"}}}),
        )
        .title("Pay an invoice")
        .consequence("Money leaves your account.");
        let preview = preview(&spec, &json!({"amount": 12, "memo": "x"}), &[]);
        assert_eq!(preview["title"], "Pay an invoice");
        assert_eq!(preview["consequence"], "Money leaves your account.");
        assert_eq!(
            preview["fields"][0],
            json!({"name": "amount", "label": "Amount (EUR)", "value": 12})
        );
        assert_eq!(preview["fields"][1]["label"], "memo");
    }
}

/// A call held for approval during a step.
#[derive(Debug, Clone)]
pub(crate) struct HeldCall {
    pub(crate) call_id: String,
    pub(crate) tool: String,
    pub(crate) args: Value,
    /// The files its inputs name, shown in the preview by name and size.
    pub(crate) files: Vec<FileInput>,
}

/// JSON safe to put inside an `<approval>` block: it cannot close the block.
fn quoted(value: &Value) -> String {
    value.to_string().replace("</", "<\\/")
}

/// The `<approval>` block that tells the model what became of a decision.
pub(crate) fn block(id: &str, tool: &str, outcome: &str, detail: &str) -> String {
    let attr = |s: &str| s.replace(['"', '<', '>', '&'], "_");
    format!(
        "<approval id=\"{}\" tool=\"{}\" outcome=\"{outcome}\">{}</approval>",
        attr(id),
        attr(tool),
        super::framing::inert(detail, "approval")
    )
}

pub(crate) fn ran_detail(result: &Value, is_error: bool) -> String {
    if is_error {
        format!(
            "The person approved the call; it ran and failed: {}",
            quoted(result)
        )
    } else {
        format!(
            "The person approved the call; it ran. Its result: {}",
            quoted(result)
        )
    }
}

/// Stores the held call and tells the caller; the turn then ends with `approval_required`.
pub(crate) async fn request(
    engine: &super::EngineInner,
    session: &SessionId,
    user_id: Option<&str>,
    turn_id: &TurnId,
    held: HeldCall,
    out: &super::turn_stream::Emitter,
) -> Result<(), String> {
    let Some((store, signer)) = &engine.approvals else {
        return Err("no approval store".into());
    };
    let Some(spec) = engine.tools.spec(&held.tool) else {
        return Err(format!("no tool named {}", held.tool));
    };
    let now = now_ms();
    let shown = preview(spec, &held.args, &held.files);
    let approval = PendingApproval {
        id: format!("ap-{}", uuid::Uuid::new_v4().simple()),
        session: session.clone(),
        user_id: user_id.unwrap_or_default().to_owned(),
        turn_id: turn_id.clone(),
        tool: held.tool.clone(),
        args_hash: args_hash(&held.args),
        args: held.args.clone(),
        created_at: now,
        expires_at: now
            .saturating_add(u64::try_from(engine.config.approval_ttl.as_millis()).unwrap_or(u64::MAX)),
        preview: Some(shown.clone()),
    };
    store.put_approval(&approval).await.map_err(|e| {
        tracing::error!(error = %ErrorChain(&e), "could not store the approval");
        e.client_message()
    })?;
    if spec.args_sensitive {
        tracing::info!(approval_id = %approval.id, tool = %approval.tool, "a call waits for the person's approval");
    } else {
        tracing::info!(approval_id = %approval.id, tool = %approval.tool, args = %approval.args, "a call waits for the person's approval");
    }
    out.emit(
        super::EngineEvent::ApprovalRequired {
            token: signer.sign(&approval),
            preview: shown,
            approval_id: approval.id,
            call_id: held.call_id,
            tool: approval.tool,
            expires_at: approval.expires_at,
        }
        .into(),
    );
    Ok(())
}

/// Withdraws the waiting approvals of the turns `superseded` replaces: a barge-in takes back
/// the cards of the turn it cut short, so none of them can run anything later.
pub(crate) async fn withdraw(
    engine: &super::EngineInner,
    session: &SessionId,
    superseded: &[crate::session::TurnId],
) {
    let Some((store, _)) = &engine.approvals else {
        return;
    };
    for turn_id in superseded {
        match store.withdraw_turn_approvals(session, turn_id).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(superseded = %turn_id, withdrawn = n, "withdrew the replaced turn's waiting approvals")
            }
            Err(e) => {
                tracing::warn!(superseded = %turn_id, error = %ErrorChain(&e), "could not withdraw the replaced turn's waiting approvals")
            }
        }
    }
}

/// Acts on the person's decision: runs exactly the stored call once if it is approved with a
/// valid token, and returns the `<approval>` block that tells the model what happened.
/// Who a turn runs for, as a redeemed call needs to know.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Person<'a> {
    pub(crate) user_id: Option<&'a str>,
    pub(crate) account_id: Option<&'a str>,
    pub(crate) user_token: Option<&'a crate::protocol::UserToken>,
}

pub(crate) async fn redeem(
    engine: &super::EngineInner,
    session: &SessionId,
    person: Person<'_>,
    turn_id: &TurnId,
    decision: &ApprovalDecision,
    out: &super::turn_stream::Emitter,
) -> String {
    let Person {
        user_id,
        account_id,
        user_token,
    } = person;
    let refuse = |tool: &str, why: &str| {
        tracing::warn!(approval_id = %decision.approval_id, reason = why, "an approval was not honoured");
        block(
            &decision.approval_id,
            tool,
            "refused",
            &format!("Nothing ran: {why}."),
        )
    };
    let Some((store, signer)) = &engine.approvals else {
        return refuse("?", "this worker has no approval store");
    };
    let (approval, status) = match store.get_approval(session, &decision.approval_id).await {
        Ok(Some(found)) => found,
        Ok(None) => return refuse("?", "there is no such approval in this conversation"),
        Err(e) => {
            return refuse(
                "?",
                &format!("the approval could not be read ({})", ErrorChain(&e)),
            );
        }
    };
    let tool = approval.tool.clone();
    if status != ApprovalStatus::Pending {
        return refuse(&tool, &format!("this approval was already {}", status.as_str()));
    }
    if now_ms() > approval.expires_at {
        let _ = store
            .settle_approval(session, &approval.id, ApprovalStatus::Expired)
            .await;
        return refuse(&tool, "the approval expired before it was given");
    }
    if approval.user_id != user_id.unwrap_or_default() {
        return refuse(&tool, "the approval belongs to another person");
    }
    match decision.decision.as_str() {
        ApprovalDecision::DECLINE => {
            return match store
                .settle_approval(session, &approval.id, ApprovalStatus::Declined)
                .await
            {
                Ok(true) => block(
                    &approval.id,
                    &tool,
                    "declined",
                    "The person declined; the call did not run.",
                ),
                Ok(false) => refuse(&tool, "the approval was settled by another turn first"),
                Err(e) => refuse(
                    &tool,
                    &format!("the decline could not be recorded ({})", ErrorChain(&e)),
                ),
            };
        }
        ApprovalDecision::APPROVE => {}
        other => {
            return refuse(
                &tool,
                &format!("{other:?} is not a decision (approve or decline)"),
            );
        }
    }
    let token_ok = decision
        .token
        .as_deref()
        .is_some_and(|token| signer.verify(&approval, token));
    if !token_ok || approval.args_hash != args_hash(&approval.args) {
        return refuse(&tool, "the token does not open this call");
    }
    // A deny wins over an approval too: the policy is asked again, as it stands now.
    if let Verdict::Denied(reason) = engine.verdict(session, user_id, &tool, &approval.args) {
        if let Err(e) = store
            .settle_approval(session, &approval.id, ApprovalStatus::Declined)
            .await
        {
            tracing::warn!(error = %ErrorChain(&e), "could not settle an approval the policy now denies");
        }
        return refuse(&tool, &format!("the tool policy now denies this call ({reason})"));
    }
    // One conditional write: of two turns racing with this token, one runs the call.
    match store
        .settle_approval(session, &approval.id, ApprovalStatus::Redeemed)
        .await
    {
        Ok(true) => {}
        Ok(false) => return refuse(&tool, "this approval was already used"),
        Err(e) => {
            return refuse(
                &tool,
                &format!("the approval could not be redeemed ({})", ErrorChain(&e)),
            );
        }
    }
    let call_id = format!("{}-approved", approval.id);
    out.emit(crate::protocol::AgentEvent::ToolStarted {
        id: call_id.clone(),
        name: tool.clone(),
        args: approval.args.clone(),
    });
    let ctx = super::tools::ToolContext {
        session: session.clone(),
        turn_id: turn_id.clone(),
        call_id: call_id.clone(),
        user_id: user_id.map(str::to_owned),
        account_id: account_id.map(str::to_owned),
        user_token: user_token.cloned(),
    };
    let checked = serde_json::json!({ "approvalId": approval.id, "argsHash": approval.args_hash });
    if let Some(request) = engine.ui_request(turn_id, &call_id, &tool, &approval.args, Some(checked)) {
        out.emit(request);
    }
    let outcome = engine
        .tools
        .run(&tool, &approval.args, ctx, engine.config.tool_timeout)
        .await;
    let outcome = engine.kept(session, &call_id, outcome).await;
    out.emit(crate::protocol::AgentEvent::ToolEnded {
        id: call_id,
        is_error: outcome.is_error,
        content: outcome.content.clone(),
    });
    block(
        &approval.id,
        &tool,
        "approved",
        &ran_detail(&outcome.content, outcome.is_error),
    )
}
