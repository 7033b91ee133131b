//! `toolvisor policy explain [--config FILE] [--json] TOOL [ARGS]`: what the policy
//! would do with a call. With `--config` it decides locally under that file (no
//! daemon); otherwise it asks the running daemon with an `explain` message. Exit 0
//! whatever the decision, 2 for a usage error, 1 when the daemon cannot be reached.

use toolvisor_protocol::client::Client;
use toolvisor_protocol::message::{ClientMessage, ServerMessage};
use toolvisor_protocol::tools::builtin;

use crate::cli::PolicyCommand;
use crate::workspace::Resolved;
use toolvisor_supervisor::policy::Policy;
use toolvisor_supervisor::policy::explain::{explain, render};
use toolvisor_supervisor::registry::Registry;

pub fn run(cmd: &PolicyCommand, r: &Resolved) -> i32 {
    let local = r.explicit_config;
    let PolicyCommand::Explain { tool, args, json } = cmd;
    let args = match crate::commands::parse_args(args.as_deref()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("toolvisor: {e}");
            return 2;
        }
    };
    let answer = if local {
        explain_locally(r, tool, &args)
    } else {
        ask_daemon(r, tool, args)
    };
    match answer {
        Ok(m) => {
            print(&m, *json);
            0
        }
        Err((code, why)) => {
            eprintln!("toolvisor: {why}");
            code
        }
    }
}

fn print(m: &ServerMessage, json: bool) {
    if json {
        match serde_json::to_string_pretty(m) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("toolvisor: {e}"),
        }
    } else {
        print!("{}", render(m));
    }
}

pub(crate) fn explain_locally(
    r: &Resolved,
    tool: &str,
    args: &serde_json::Value,
) -> Result<ServerMessage, (i32, String)> {
    let config = r.config().map_err(|e| (2, e))?;
    let roots = toolvisor_supervisor::workers::init::workspace_roots(&r.workspace, &config)
        .map_err(|e| (2, e.to_string()))?;
    let registry = Registry::new(builtin()).map_err(|e| (70, e.to_string()))?;
    let names = toolvisor_supervisor::service::tool_names(&config, &registry);
    let policy = Policy::for_config(&config, &roots, &names)
        .map_err(|e| (2, format!("bad [policy]: {e}")))?;
    Ok(explain("cli".into(), &policy, &registry, tool, args))
}

fn ask_daemon(
    r: &Resolved,
    tool: &str,
    args: serde_json::Value,
) -> Result<ServerMessage, (i32, String)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| (70, e.to_string()))?;
    rt.block_on(async {
        let mut c = Client::connect(&r.socket, crate::commands::CLIENT, false)
            .await
            .map_err(|e| {
                (
                    1,
                    format!("{e}; is `toolvisor serve` running? (or pass --config FILE)"),
                )
            })?;
        let id = "explain".into();
        let msg = ClientMessage::Explain {
            id: "explain".into(),
            tool: tool.to_owned(),
            args,
        };
        c.request(&msg, &id).await.map_err(|e| (1, e.to_string()))
    })
}
