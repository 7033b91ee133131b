//! Deciding an event's calls: through the daemon when it answers within
//! [`DEADLINE`] (which also records them in its audit log, with the host as the
//! client), else from the workspace's config alone, with the same policy code and so
//! the same answer (and nothing recorded).

use std::time::Duration;

use toolvisor_protocol::client::{Client, ClientError};
use toolvisor_protocol::message::{ClientMessage, HookPhase, ServerMessage};

use super::event::{Answer, Call, Decision};
use crate::workspace::Resolved;

/// How long the daemon may take for a whole event (hosts give hooks 5 to 60 s).
pub const DEADLINE: Duration = Duration::from_secs(3);

/// Who reports: the client name in `hello`, and the host's call id.
pub struct Reporter<'a> {
    pub client: &'a str,
    pub call_id: &'a str,
    /// Record the decision (`requested`/`rejected`) or only explain it.
    pub record: bool,
}

/// The decision on all of `calls` together: the strictest of theirs. Where it came
/// from (`daemon` or `config`) goes to stderr.
pub fn before(r: &Resolved, who: &Reporter, calls: &[Call]) -> Answer {
    let answers = match with_daemon(r, who.client, |c| ask_daemon(c, who, calls)) {
        Ok(a) => a,
        Err(why) => {
            eprintln!("toolvisor hook: deciding from the config alone ({why})");
            calls.iter().map(|c| locally(r, c)).collect()
        }
    };
    strictest(answers)
}

/// Record how the host's call ended (daemon only; nothing is recorded without one).
pub fn after(r: &Resolved, who: &Reporter, calls: &[Call], ok: bool, summary: &str) {
    let sent = with_daemon(r, who.client, |mut c| async move {
        for (i, call) in calls.iter().enumerate() {
            let msg = hook(who, i, calls.len(), call, HookPhase::After, ok, summary);
            c.request(&msg, &"hook".into()).await?;
        }
        Ok(())
    });
    if let Err(why) = sent {
        eprintln!("toolvisor hook: the end of the call is not recorded ({why})");
    }
}

/// Run `f` on a connection to the daemon, all within [`DEADLINE`].
fn with_daemon<T, F, Fut>(r: &Resolved, client: &str, f: F) -> Result<T, String>
where
    F: FnOnce(Client) -> Fut,
    Fut: std::future::Future<Output = Result<T, ClientError>>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let work = async {
            let c = Client::connect(&r.socket, client, false).await?;
            f(c).await
        };
        match tokio::time::timeout(DEADLINE, work).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(format!("the daemon: {e}")),
            Err(_) => Err(format!("the daemon did not answer within {DEADLINE:?}")),
        }
    })
}

async fn ask_daemon(
    mut c: Client,
    who: &Reporter<'_>,
    calls: &[Call],
) -> Result<Vec<Answer>, ClientError> {
    let mut out = Vec::with_capacity(calls.len());
    for (i, call) in calls.iter().enumerate() {
        let msg = if who.record {
            hook(who, i, calls.len(), call, HookPhase::Before, true, "")
        } else {
            ClientMessage::Explain {
                id: "hook".into(),
                tool: call.tool.clone(),
                args: call.args.clone(),
            }
        };
        let m = c.request(&msg, &"hook".into()).await?;
        out.push(verdict(&m).map_err(ClientError::Unexpected)?);
    }
    Ok(out)
}

/// The `hook` message for the `i`th of `n` calls (ids `ID`, or `ID#i` when several).
fn hook(
    who: &Reporter,
    i: usize,
    n: usize,
    call: &Call,
    phase: HookPhase,
    ok: bool,
    summary: &str,
) -> ClientMessage {
    let id = if n == 1 {
        who.call_id.to_owned()
    } else {
        format!("{}#{i}", who.call_id)
    };
    let after = phase == HookPhase::After;
    ClientMessage::Hook {
        id: "hook".into(),
        phase,
        call: id,
        tool: call.tool.clone(),
        args: call.args.clone(),
        status: after.then(|| if ok { "ok" } else { "error" }.to_owned()),
        summary: after.then(|| summary.to_owned()),
    }
}

fn locally(r: &Resolved, call: &Call) -> Answer {
    match crate::commands::policy::explain_locally(r, &call.tool, &call.args) {
        Ok(m) => verdict(&m).unwrap_or_else(|m| Answer::NoOpinion(format!("{m:?}"))),
        Err((_, why)) => Answer::NoOpinion(format!("cannot decide: {why}")),
    }
}

/// An `explanation` as an answer; an error (unknown tool, invalid arguments) is no
/// opinion. Another message is given back.
pub fn verdict(m: &ServerMessage) -> Result<Answer, Box<ServerMessage>> {
    let ServerMessage::Explanation {
        decision,
        reason,
        error,
        ..
    } = m
    else {
        return Err(Box::new(m.clone()));
    };
    let decision = match decision.as_str() {
        "allow" => Decision::Allow,
        "ask" => Decision::Ask,
        "deny" => Decision::Deny,
        _ => {
            let why = error.as_ref().map_or(reason.clone(), |e| e.message.clone());
            return Ok(Answer::NoOpinion(format!(
                "toolvisor cannot decide it: {why}"
            )));
        }
    };
    Ok(Answer::Decided {
        decision,
        reason: format!("toolvisor: {reason}"),
        rewrite: None,
    })
}

/// Deny over ask over no opinion over allow; the reasons of the decisive ones.
fn strictest(answers: Vec<Answer>) -> Answer {
    let rank = |a: &Answer| match a {
        Answer::Decided { decision, .. } if *decision == Decision::Allow => 0,
        Answer::NoOpinion(_) => 1,
        Answer::Decided { decision, .. } if *decision == Decision::Ask => 2,
        Answer::Decided { .. } => 3,
    };
    answers
        .into_iter()
        .max_by_key(rank)
        .unwrap_or_else(|| Answer::NoOpinion("nothing to decide".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decided(d: Decision) -> Answer {
        Answer::Decided {
            decision: d,
            reason: d.as_str().into(),
            rewrite: None,
        }
    }

    #[test]
    fn the_strictest_answer_wins() {
        let all = vec![
            decided(Decision::Allow),
            decided(Decision::Deny),
            decided(Decision::Ask),
        ];
        assert_eq!(strictest(all), decided(Decision::Deny));
        let some = vec![decided(Decision::Allow), Answer::NoOpinion("x".into())];
        assert_eq!(strictest(some), Answer::NoOpinion("x".into()));
        assert_eq!(
            strictest(vec![decided(Decision::Allow)]),
            decided(Decision::Allow)
        );
    }
}
