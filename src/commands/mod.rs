//! The client commands of the CLI, each a short conversation over the socket.

pub mod policy;

use std::io::{IsTerminal, Write};

use serde_json::Value;
use toolvisor_protocol::client::{Client, ClientError};
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage, Status, ToolFormat};

use crate::cli::{Command, FormatArg, Resolved};

/// Run a client command; returns the exit code.
pub fn run(cmd: &Command, r: &Resolved) -> i32 {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
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
                eprintln!("toolvisor: is `toolvisor serve` running for this workspace?");
            }
            1
        }
    }
}

async fn dispatch(cmd: &Command, r: &Resolved) -> Result<i32, ClientError> {
    let interactive = matches!(cmd, Command::Call { .. }) && std::io::stdin().is_terminal();
    let mut c = Client::connect(&r.socket, "toolvisor-cli", interactive).await?;
    match cmd {
        Command::Tools { format } => tools(&mut c, *format).await,
        Command::Call {
            tool,
            args,
            json,
            timeout_ms,
            trace,
            token,
        } => {
            let args = match parse_args(args.as_deref()) {
                Ok(a) => a,
                Err(e) => {
                    eprintln!("toolvisor: {e}");
                    return Ok(2);
                }
            };
            let mut req = CallRequest::new("cli-1", tool.clone(), args);
            req.timeout_ms = *timeout_ms;
            req.trace_id = trace.clone();
            req.confirm_token = token.clone();
            req.stream = Some(!*json);
            call(&mut c, req, *json).await
        }
        Command::Status { json } => status(&mut c, *json).await,
        Command::Restart { group } => {
            let id = "restart".into();
            match c
                .request(
                    &ClientMessage::Restart {
                        id: "restart".into(),
                        group: group.clone(),
                    },
                    &id,
                )
                .await?
            {
                ServerMessage::Ack { .. } => Ok(0),
                other => refused(other),
            }
        }
        Command::Approve {
            all,
            session,
            count,
        } => approve(&mut c, *all, *session, *count).await,
        Command::Grant {
            tools,
            trace,
            paths,
            ttl,
            reusable,
        } => {
            let msg = ClientMessage::Grant {
                id: "grant".into(),
                tools: tools.clone(),
                trace_id: trace.clone(),
                paths: (!paths.is_empty()).then(|| paths.clone()),
                ttl_ms: *ttl,
                reusable: Some(*reusable),
            };
            match c.request(&msg, &"grant".into()).await? {
                ServerMessage::Token {
                    token, expires_at, ..
                } => {
                    println!("{token}");
                    eprintln!(
                        "expires at {expires_at}; pass it as confirm_token (toolvisor call --token …)"
                    );
                    Ok(0)
                }
                other => refused(other),
            }
        }
        Command::Serve
        | Command::Worker { .. }
        | Command::Reap { .. }
        | Command::Audit { .. }
        | Command::Mcp { .. }
        | Command::Policy { .. } => Ok(2),
    }
}

pub(crate) fn parse_args(text: Option<&str>) -> Result<Value, String> {
    let v: Value = match text {
        None => Value::Object(Default::default()),
        Some(t) => {
            serde_json::from_str(t).map_err(|e| format!("the arguments are not JSON: {e}"))?
        }
    };
    if !v.is_object() {
        return Err("the arguments must be a JSON object".into());
    }
    Ok(v)
}

fn refused(m: ServerMessage) -> Result<i32, ClientError> {
    match m {
        ServerMessage::Error { error, .. } => {
            eprintln!("toolvisor: {}: {}", error.kind, error.message);
            Ok(1)
        }
        other => Err(ClientError::Unexpected(Box::new(other))),
    }
}

async fn tools(c: &mut Client, format: FormatArg) -> Result<i32, ClientError> {
    let format = match format {
        FormatArg::Native => ToolFormat::Native,
        FormatArg::Openai => ToolFormat::Openai,
        FormatArg::Mcp => ToolFormat::Mcp,
    };
    let id = "tools".into();
    match c
        .request(
            &ClientMessage::ListTools {
                id: "tools".into(),
                format: Some(format),
                groups: None,
            },
            &id,
        )
        .await?
    {
        ServerMessage::Tools { tools, .. } => {
            println!(
                "{}",
                serde_json::to_string_pretty(&tools).unwrap_or_default()
            );
            Ok(0)
        }
        other => refused(other),
    }
}

async fn call(c: &mut Client, req: CallRequest, json: bool) -> Result<i32, ClientError> {
    let mut streamed = false;
    let id = req.id.clone();
    c.send(&ClientMessage::Call(req)).await?;
    let result = loop {
        let (_, m) = c.recv_matching(|m| belongs(m, &id).then_some(())).await?;
        match m {
            ServerMessage::Output { data, .. } => {
                streamed = true;
                print!("{data}");
                let _ = std::io::stdout().flush();
            }
            ServerMessage::ConfirmRequired {
                interaction,
                tool,
                description,
                risk,
                locations,
                preview,
                ..
            } => {
                show_confirmation(&tool, &description, &risk, &locations, preview.as_deref());
                let approve = ask_line("Allow this call? [y/N] ")
                    .await
                    .is_some_and(|a| a == "y" || a == "yes");
                c.send(&ClientMessage::Confirm {
                    interaction,
                    approve,
                    remember: None,
                })
                .await?;
            }
            ServerMessage::Result(r) => break r,
            ServerMessage::Error { error, .. } => return Err(ClientError::Refused(error)),
            _ => {}
        }
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&result).unwrap_or_default()
        );
    } else if !streamed || result.truncated.is_some() {
        print!("{}", result.content);
        if !result.content.ends_with('\n') && !result.content.is_empty() {
            println!();
        }
    }
    if result.status == Status::Ok {
        return Ok(0);
    }
    if !json && let Some(e) = &result.error {
        eprintln!("toolvisor: {} ({})", result.status.as_str(), e.kind);
    }
    Ok(1)
}

fn belongs(m: &ServerMessage, id: &toolvisor_protocol::Id) -> bool {
    match m {
        ServerMessage::Output { id: i, .. } | ServerMessage::ConfirmRequired { id: i, .. } => {
            i == id
        }
        ServerMessage::Confirmed { .. } => false,
        other => toolvisor_protocol::client::answers(other, id),
    }
}

fn show_confirmation(
    tool: &str,
    description: &str,
    risk: &str,
    locations: &[String],
    preview: Option<&str>,
) {
    eprintln!("\n== {tool} ({risk} risk): {description}");
    if !locations.is_empty() {
        eprintln!("   paths: {}", locations.join(", "));
    }
    if let Some(p) = preview {
        eprintln!("{}", p.trim_end());
    }
}

/// One line from stdin (blocking, off the runtime); `None` at end of input.
async fn ask_line(prompt: &str) -> Option<String> {
    eprint!("{prompt}");
    let _ = std::io::stderr().flush();
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        match std::io::stdin().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim().to_lowercase()),
        }
    })
    .await
    .ok()
    .flatten()
}

/// `toolvisor approve`: show each pending confirmation and answer it.
async fn approve(
    c: &mut Client,
    all: bool,
    session: bool,
    count: Option<usize>,
) -> Result<i32, ClientError> {
    use toolvisor_protocol::message::{Remember, Topic};
    let id = "approve".into();
    match c
        .request(
            &ClientMessage::Subscribe {
                id: "approve".into(),
                topics: vec![Topic::Confirmations],
            },
            &id,
        )
        .await?
    {
        ServerMessage::Subscribed { .. } => {}
        other => return refused(other),
    }
    let mut answered = 0usize;
    let mut approve_all = all;
    while count.is_none_or(|n| answered < n) {
        let (_, m) = c
            .recv_matching(|m| {
                matches!(m, ServerMessage::Event { event, .. } if event == "confirm_required")
                    .then_some(())
            })
            .await?;
        let ServerMessage::Event { fields, .. } = m else {
            continue;
        };
        let text = |k: &str| {
            fields
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let locations: Vec<String> = fields
            .get("locations")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        show_confirmation(
            &text("tool"),
            &text("description"),
            &text("risk"),
            &locations,
            fields.get("preview").and_then(Value::as_str),
        );
        let (yes, remember) = if approve_all {
            (true, session)
        } else {
            match ask_line("[y]es / [n]o / [s]ession (same call again without asking) / [a]ll: ")
                .await
                .as_deref()
            {
                Some("y" | "yes") => (true, false),
                Some("s" | "session") => (true, true),
                Some("a" | "all") => {
                    approve_all = true;
                    (true, session)
                }
                None => return Ok(0),
                _ => (false, false),
            }
        };
        let remember = Some(if remember {
            Remember::Session
        } else {
            Remember::Once
        });
        c.send(&ClientMessage::Confirm {
            interaction: text("interaction"),
            approve: yes,
            remember,
        })
        .await?;
        answered += 1;
    }
    Ok(0)
}

async fn status(c: &mut Client, json: bool) -> Result<i32, ClientError> {
    let id = "status".into();
    let m = c
        .request(
            &ClientMessage::Status {
                id: "status".into(),
            },
            &id,
        )
        .await?;
    let ServerMessage::Status {
        uptime_ms,
        workers,
        audit,
        guards,
        ..
    } = &m
    else {
        return refused(m);
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&m).unwrap_or_default());
        return Ok(0);
    }
    println!(
        "uptime {:.1}s   audit {} (seq {})",
        *uptime_ms as f64 / 1000.0,
        audit.path,
        audit.seq
    );
    let landlock = guards
        .landlock
        .map_or("off".to_owned(), |abi| format!("ABI {abi}"));
    println!(
        "guards: landlock {landlock}, openat2 {}, subreaper {}, cgroup {}",
        guards.openat2, guards.subreaper, guards.cgroup
    );
    println!(
        "sandbox: namespaces {}, network {}, limits {}, protected {}",
        guards.namespaces,
        guards.network,
        guards.limits.as_deref().unwrap_or("none"),
        guards.protected.join(" ")
    );
    println!(
        "{:<8} {:>5} {:>8} {:<10} {:>8} {:>9} {:>10} {:>6}",
        "GROUP", "INDEX", "PID", "STATE", "RESTARTS", "IN-FLIGHT", "RSS", "CPU%"
    );
    for w in workers {
        let pid = w.pid.map_or("-".to_owned(), |p| p.to_string());
        println!(
            "{:<8} {:>5} {:>8} {:<10} {:>8} {:>9} {:>9}K {:>6.1}",
            w.group,
            w.index,
            pid,
            w.state,
            w.restarts,
            w.in_flight,
            w.rss_bytes / 1024,
            w.cpu_percent
        );
    }
    Ok(0)
}
