//! The client commands that talk to the daemon: each [`Command`] to its module of
//! `commands/`, on a runtime of its own.

use toolvisor_protocol::client::{Client, ClientError};
use toolvisor_protocol::message::ClientMessage;

use super::Command;
use crate::commands::{
    CLIENT, approve, attach, call, connect, doctor, exec, grant, restart, status, tools, undo,
};
use crate::workspace::Resolved;

/// Run a client command; returns the exit code.
pub fn run(cmd: &Command, r: &Resolved) -> i32 {
    let rt = match crate::commands::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolvisor: {e}");
            return 70;
        }
    };
    match rt.block_on(dispatch(cmd, r)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("toolvisor: {e}");
            if matches!(e, ClientError::Connect { .. }) {
                eprintln!(
                    "toolvisor: is `toolvisor serve` running for {}?",
                    r.workspace.display()
                );
            }
            1
        }
    }
}

async fn dispatch(cmd: &Command, r: &Resolved) -> Result<i32, ClientError> {
    match cmd {
        Command::Call {
            tool,
            args,
            json,
            timeout_ms,
            trace,
            token,
            interactive,
        } => {
            let opts = call::Options {
                tool: tool.clone(),
                args: args.clone(),
                json: *json,
                timeout_ms: *timeout_ms,
                trace: trace.clone(),
                token: token.clone(),
            };
            if *interactive {
                return attach::call_interactive(r, opts).await;
            }
            call::run(r, opts).await
        }
        Command::Attach { process } => {
            let mut c = Client::connect(&r.socket, CLIENT, true).await?;
            attach::attach_existing(&mut c, &r.socket, process).await
        }
        Command::Approve {
            all,
            session,
            count,
        } => approve::run(r, *all, *session, *count).await,
        Command::Tools { json, format } => {
            let mut c = connect(r).await?;
            tools::run(&mut c, *json, *format).await
        }
        Command::Status { json } => {
            let mut c = connect(r).await?;
            status::run(&mut c, *json).await
        }
        Command::Doctor { json } => {
            let mut c = connect(r).await?;
            doctor::run(&mut c, *json).await
        }
        Command::Undo {
            calls,
            trace,
            last,
            dry_run,
            json,
        } => {
            let o = undo::Options {
                calls: calls.clone(),
                trace: trace.clone(),
                last: *last,
                dry_run: *dry_run,
                json: *json,
            };
            undo::run(r, o).await
        }
        Command::Restart { group } => {
            let mut c = connect(r).await?;
            restart(&mut c, group.clone()).await
        }
        Command::Grant {
            tools,
            trace,
            paths,
            ttl,
            reusable,
        } => {
            let mut c = connect(r).await?;
            let msg = ClientMessage::Grant {
                id: "grant".into(),
                tools: tools.clone(),
                trace_id: trace.clone(),
                paths: (!paths.is_empty()).then(|| paths.clone()),
                ttl_ms: *ttl,
                reusable: Some(*reusable),
            };
            grant(&mut c, &msg).await
        }
        Command::Exec(a) => Ok(exec::run(r, a).await),
        Command::Serve { .. }
        | Command::Init { .. }
        | Command::Hook { .. }
        | Command::Worker { .. }
        | Command::Reap { .. }
        | Command::Audit { .. }
        | Command::Mcp { .. }
        | Command::Policy { .. } => Ok(2),
    }
}
