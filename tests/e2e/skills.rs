//! `activate_skill` through the real socket: listed only while a skill exists, its
//! `name` an enum of them, medium risk on a skill's first successful activation in a
//! session and low after, rescanned on SIGHUP (with `tools_changed`), and broken or
//! escaping skills skipped with a warning.

use std::time::Duration;

use serde_json::{Value, json};
use toolvisor_protocol::client::Client;
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage, ToolFormat, Topic};
use toolvisor_protocol::tools::builtin;
use toolvisor_protocol::{ErrorType, Id, Status, ToolResult};

use crate::harness::*;

fn skill(dir: &std::path::Path, rel: &str, name: &str, description: &str, body: &str) {
    let d = dir.join(rel);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: {description}\n---\n{body}"),
    )
    .unwrap();
}

/// A workspace with `config` and skills made by `make`, and the server on it.
fn start_with(config: &str, make: impl FnOnce(&std::path::Path)) -> Server {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolvisor.toml"), config).unwrap();
    make(dir.path());
    Server::start_in(dir)
}

async fn listing(c: &mut Client) -> Vec<Value> {
    let id: Id = "l".into();
    match c
        .request(
            &ClientMessage::ListTools {
                id: id.clone(),
                format: Some(ToolFormat::Native),
                groups: None,
            },
            &id,
        )
        .await
        .unwrap()
    {
        ServerMessage::Tools { tools, .. } => tools,
        other => panic!("{other:?}"),
    }
}

fn find<'a>(tools: &'a [Value], name: &str) -> Option<&'a Value> {
    tools.iter().find(|t| t["name"] == name)
}

async fn activate(c: &mut Client, id: &str, name: &str) -> ToolResult {
    call_on(c, id, "activate_skill", json!({"name": name})).await
}

#[test]
fn a_skill_is_listed_activated_and_lower_risk_the_second_time() {
    let allow = "[[policy.rules]]\ntool = \"activate_skill\"\naction = \"allow\"\n";
    let s = start_with(allow, |ws| {
        skill(
            ws,
            ".skills/pdf",
            "pdf",
            "Read PDF files",
            "# PDF\nUse scripts/x.py.\n",
        );
        skill(
            ws,
            ".claude/skills/git",
            "git-tricks",
            "Git tricks",
            "Rebase often.\n",
        );
        std::fs::write(ws.join(".skills/pdf/notes.md"), "n").unwrap();
    });
    block(T, async {
        let mut c = s.client().await;
        let tools = listing(&mut c).await;
        assert_eq!(tools.len(), builtin().len() + 1);
        let t = find(&tools, "activate_skill").expect("listed");
        assert_eq!(t["risk"], "medium");
        assert_eq!(t["group"], "meta");
        assert_eq!(
            t["parameters"]["properties"]["name"]["enum"],
            json!(["git-tricks", "pdf"])
        );
        let d = t["description"].as_str().unwrap();
        assert!(
            d.contains("- pdf: Read PDF files") && d.contains("- git-tricks: Git tricks"),
            "{d}"
        );
        let r = activate(&mut c, "a1", "pdf").await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(
            r.content,
            "# PDF\nUse scripts/x.py.\n\nSkill directory: .skills/pdf\nFiles:\nSKILL.md\nnotes.md"
        );
        assert_eq!(r.meta["policy"]["risk"], "medium", "first activation");
        let r = activate(&mut c, "a2", "pdf").await;
        assert_eq!(
            r.meta["policy"]["risk"], "low",
            "second activation in the session"
        );
        let r = activate(&mut c, "a3", "git-tricks").await;
        assert_eq!(r.meta["policy"]["risk"], "medium", "per skill");
        let r = activate(&mut c, "a4", "nope").await;
        assert_eq!(
            r.error.map(|e| e.kind),
            Some(ErrorType::InvalidParams),
            "not in the enum"
        );
        let mut other = s.client().await;
        let r = activate(&mut other, "b1", "pdf").await;
        assert_eq!(r.meta["policy"]["risk"], "medium", "per session");
    });
}

#[test]
fn the_first_activation_asks_and_only_a_success_counts() {
    let s = start_with("", |ws| skill(ws, ".skills/pdf", "pdf", "PDFs", "body\n"));
    block(T, async {
        // Not interactive: asked → denied, and a denial does not make it familiar.
        let mut c = s.client().await;
        for id in ["n1", "n2"] {
            let r = activate(&mut c, id, "pdf").await;
            assert_eq!(r.status, Status::Denied, "{r:?}");
            assert_eq!(
                r.error.map(|e| e.kind),
                Some(ErrorType::ConfirmationRequired)
            );
        }
        // Interactive: the first asks (medium); approved, it runs; the next does not ask.
        let mut agent = Client::connect(&s.socket(), "agent", true).await.unwrap();
        agent
            .send(&ClientMessage::Call(CallRequest::new(
                "i1",
                "activate_skill",
                json!({"name": "pdf"}),
            )))
            .await
            .unwrap();
        let (_, m) = agent
            .recv_matching(|m| matches!(m, ServerMessage::ConfirmRequired { .. }).then_some(()))
            .await
            .unwrap();
        let ServerMessage::ConfirmRequired {
            interaction,
            risk,
            description,
            ..
        } = m
        else {
            unreachable!()
        };
        assert_eq!(risk, "medium");
        assert_eq!(description, "Activate the skill `pdf`");
        agent
            .send(&ClientMessage::Confirm {
                interaction,
                approve: true,
                remember: None,
            })
            .await
            .unwrap();
        let (_, m) = agent
            .recv_matching(|m| matches!(m, ServerMessage::Result(_)).then_some(()))
            .await
            .unwrap();
        let ServerMessage::Result(r) = m else {
            unreachable!()
        };
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let t = agent
            .call(
                CallRequest::new("i2", "activate_skill", json!({"name": "pdf"})),
                |_, _| {},
            )
            .await
            .unwrap();
        assert!(
            t.confirmations.is_empty(),
            "asked again: {:?}",
            t.confirmations
        );
        assert_eq!(t.result.unwrap().status, Status::Ok);
    });
}

#[test]
fn no_skill_no_tool_and_sighup_rescans() {
    let mut s = start_with("", |ws| {
        std::fs::create_dir_all(ws.join(".skills/plain")).unwrap();
        std::fs::write(ws.join(".skills/plain/SKILL.md"), "# No front matter\n").unwrap();
    });
    s.wait_log("has no YAML front matter", START_DEADLINE);
    block(T, async {
        let mut c = s.client().await;
        let tools = listing(&mut c).await;
        assert!(find(&tools, "activate_skill").is_none());
        assert_eq!(tools.len(), builtin().len());
        let r = activate(&mut c, "x", "plain").await;
        assert_eq!(r.error.map(|e| e.kind), Some(ErrorType::ToolNotFound));
    });
    skill(s.ws(), ".skills/new", "new-skill", "Fresh", "Hello.\n");
    let outside = tempfile::tempdir().unwrap();
    skill(outside.path(), "evil", "evil", "outside", "x");
    std::os::unix::fs::symlink(outside.path().join("evil"), s.ws().join(".skills/evil")).unwrap();
    block(T, async {
        let mut sub = s.client().await;
        let id: Id = "sub".into();
        sub.request(
            &ClientMessage::Subscribe {
                id: id.clone(),
                topics: vec![Topic::Workers],
            },
            &id,
        )
        .await
        .unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(s.pid() as i32),
            nix::sys::signal::Signal::SIGHUP,
        )
        .unwrap();
        let (_, m) = tokio::time::timeout(
            Duration::from_secs(60),
            sub.recv_matching(|m| match m {
                ServerMessage::Event { event, fields, .. }
                    if event == "tools_changed" && fields["group"] == "meta" =>
                {
                    Some(())
                }
                _ => None,
            }),
        )
        .await
        .expect("tools_changed in time")
        .unwrap();
        let ServerMessage::Event { fields, .. } = m else {
            unreachable!()
        };
        assert_eq!(fields["tools"], json!(["activate_skill"]));
        let mut c = s.client().await;
        let tools = listing(&mut c).await;
        let t = find(&tools, "activate_skill").expect("listed after SIGHUP");
        assert_eq!(
            t["parameters"]["properties"]["name"]["enum"],
            json!(["new-skill"]),
            "no escaped skill"
        );
    });
    s.wait_log("skill .skills/evil/SKILL.md", START_DEADLINE);
}
