//! `toolvisor tools`: on a terminal, a table a person can read (name, group, risk and
//! the first sentence of each description, cut to the terminal's width); JSON with
//! `--json`, with `--format`, or when stdout is not a terminal (scripts and agents).

use clap::ValueEnum;
use std::io::IsTerminal;

use serde_json::Value;
use toolvisor_protocol::client::{Client, ClientError};
use toolvisor_protocol::message::{ClientMessage, ServerMessage, ToolFormat};

use crate::commands::refused;

/// `--format` of `toolvisor tools`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum FormatArg {
    Native,
    Openai,
    Mcp,
}

pub async fn run(
    c: &mut Client,
    json: bool,
    format: Option<FormatArg>,
) -> Result<i32, ClientError> {
    let table = !json && format.is_none() && std::io::stdout().is_terminal();
    let format = match format.unwrap_or(FormatArg::Native) {
        FormatArg::Native => ToolFormat::Native,
        FormatArg::Openai => ToolFormat::Openai,
        FormatArg::Mcp => ToolFormat::Mcp,
    };
    let id = "tools".into();
    let msg = ClientMessage::ListTools {
        id: "tools".into(),
        format: Some(format),
        groups: None,
    };
    match c.request(&msg, &id).await? {
        ServerMessage::Tools { tools, .. } if table => {
            print!("{}", render(&tools, crate::term::width()));
            Ok(0)
        }
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

/// The table of a native listing, each line at most `width` columns.
pub fn render(tools: &[Value], width: usize) -> String {
    // An external worker names and describes its own tools: show, never obey, escapes.
    let text = |t: &Value, k: &str| {
        let raw = t.get(k).and_then(Value::as_str).unwrap_or("");
        crate::term::sanitize(raw, k == "description")
    };
    let rows: Vec<[String; 4]> = tools
        .iter()
        .map(|t| {
            [
                text(t, "name"),
                text(t, "group"),
                text(t, "risk"),
                first_sentence(&text(t, "description")),
            ]
        })
        .collect();
    let w = |i: usize, head: &str| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain([head.len()])
            .max()
            .unwrap_or(0)
    };
    let (wn, wg, wr) = (w(0, "NAME"), w(1, "GROUP"), w(2, "RISK"));
    let mut out = String::new();
    let mut line = |cells: [&str; 4]| {
        let l = format!(
            "{:<wn$}  {:<wg$}  {:<wr$}  {}",
            cells[0], cells[1], cells[2], cells[3]
        );
        out.push_str(&cut(l.trim_end(), width));
        out.push('\n');
    };
    line(["NAME", "GROUP", "RISK", "DESCRIPTION"]);
    for r in &rows {
        line([&r[0], &r[1], &r[2], &r[3]]);
    }
    out
}

/// The first sentence (or line) of a description.
fn first_sentence(d: &str) -> String {
    let line = d.lines().next().unwrap_or("").trim();
    match line.find(". ") {
        Some(i) => line[..=i].to_owned(),
        None => line.to_owned(),
    }
}

/// `s` cut to `width` characters, with `…` when cut.
fn cut(s: &str, width: usize) -> String {
    if s.chars().count() <= width || width < 2 {
        return s.to_owned();
    }
    let mut t: String = s.chars().take(width - 1).collect();
    t.push('…');
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_table_row_per_tool_with_the_first_sentence() {
        let tools = vec![
            json!({"name": "read_file", "group": "search", "risk": "low",
                   "description": "Read a file. Long text follows.\nMore."}),
            json!({"name": "run_command", "group": "exec", "risk": "high",
                   "description": "Run a shell command"}),
        ];
        let t = render(&tools, 200);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("NAME") && lines[0].contains("DESCRIPTION"));
        assert!(
            lines[1].starts_with("read_file") && lines[1].ends_with("Read a file."),
            "{t}"
        );
        assert!(lines[2].contains("exec") && lines[2].contains("high"));
        let narrow = render(&tools, 30);
        assert!(narrow.lines().all(|l| l.chars().count() <= 30), "{narrow}");
        assert!(narrow.contains('…'));
    }
}
