//! Artifacts as MCP resources: a truncated call links `toolvisor://artifacts/<name>`,
//! and `resources/read` returns that file's text.
//!
//! The bridge never opens the file itself: it reads it through the daemon with
//! `read_file` (the one path the daemon lets read inside its state directory, checked
//! there), page by page, since `read_file` truncates what it returns: a page of lines
//! that comes back truncated is asked again smaller; a single line longer than a page
//! is returned cut, with the daemon's marker.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use toolvisor_protocol::message::{CallRequest, Status, ToolResult};

/// The URI scheme and host of artifacts.
pub const PREFIX: &str = "toolvisor://artifacts/";
/// Most text one `resources/read` returns; the rest is named at the end.
const MAX_TEXT: usize = 8 << 20;
/// Lines asked for in the first page.
const FIRST_PAGE: u64 = 256;

/// Why a resource cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("unknown resource `{0}`: only toolvisor://artifacts/<name> resources exist")]
    NotFound(String),
    #[error("{0}")]
    Failed(String),
}

/// `toolvisor://artifacts/<name>`.
pub fn uri_of(name: &str) -> String {
    format!("{PREFIX}{name}")
}

/// The file name of an artifact path as `truncated.full_output` gives it.
pub fn artifact_name(full_output: &str) -> Option<String> {
    let name = full_output.rsplit(['/', ':']).next()?;
    valid_name(name).then(|| name.to_owned())
}

/// A plain file name: no separators, no leading dot.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Where the artifacts are, as `read_file` names them.
#[derive(Clone, Debug)]
pub struct ArtifactDir {
    /// `Some(rel)`: the state directory inside the workspace, at `rel`.
    inside: Option<PathBuf>,
}

impl ArtifactDir {
    pub fn new(workspace: &Path, state_dir: &Path) -> ArtifactDir {
        let inside = state_dir
            .strip_prefix(workspace)
            .ok()
            .map(|rel| rel.join("artifacts"));
        ArtifactDir { inside }
    }

    /// The `read_file` path of the artifact a URI names.
    pub fn path_of(&self, uri: &str) -> Result<String, ReadError> {
        let name = uri
            .strip_prefix(PREFIX)
            .filter(|n| valid_name(n))
            .ok_or_else(|| ReadError::NotFound(uri.to_owned()))?;
        Ok(match &self.inside {
            Some(dir) => dir.join(name).display().to_string(),
            None => format!("artifacts:/{name}"),
        })
    }
}

/// Read a whole artifact through `read`, a call of `read_file` on the daemon.
pub async fn read_all<F, Fut>(path: &str, mut read: F) -> Result<String, ReadError>
where
    F: FnMut(CallRequest) -> Fut,
    Fut: std::future::Future<Output = Result<ToolResult, ReadError>>,
{
    let mut text = String::new();
    let mut start: u64 = 1;
    let mut page = FIRST_PAGE;
    loop {
        if text.len() >= MAX_TEXT {
            text.push_str(&format!(
                "\n[Resource cut at {MAX_TEXT} bytes: read the rest with read_file at `{path}` from line {start}]\n"
            ));
            return Ok(text);
        }
        let args = json!({"path": path, "startLine": start, "endLine": start + page - 1});
        let r = read(CallRequest::new("r", "read_file", args)).await?;
        match r.status {
            Status::Ok => {}
            // Past the end (the previous page ended exactly at the last line).
            Status::Error if start > 1 && is_invalid(&r) => return Ok(text),
            _ => return Err(ReadError::Failed(crate::mcp::result::text(&r))),
        }
        let lines = r.meta.get("lines").and_then(Value::as_u64).unwrap_or(0);
        if r.truncated.is_some() && page > 1 {
            page = (page / 4).max(1);
            continue;
        }
        text.push_str(&r.content);
        if lines < page {
            return Ok(text);
        }
        start += lines.max(1);
        if r.truncated.is_none() && r.content.len() < 2048 {
            page = (page * 2).min(1 << 16);
        }
    }
}

fn is_invalid(r: &ToolResult) -> bool {
    r.error
        .as_ref()
        .is_some_and(|e| e.kind == toolvisor_protocol::ErrorType::InvalidParams)
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolvisor_protocol::message::Truncated;
    use toolvisor_protocol::{ErrorBody, ErrorType, Id};

    #[test]
    fn names_and_paths() {
        assert_eq!(
            artifact_name(".toolvisor/artifacts/c1.log").as_deref(),
            Some("c1.log")
        );
        assert_eq!(
            artifact_name("artifacts:/c1-2.log").as_deref(),
            Some("c1-2.log")
        );
        assert_eq!(artifact_name("x/.."), None);
        let inside = ArtifactDir::new(Path::new("/w"), Path::new("/w/.toolvisor"));
        assert_eq!(
            inside.path_of("toolvisor://artifacts/c1.log").unwrap(),
            ".toolvisor/artifacts/c1.log"
        );
        let outside = ArtifactDir::new(Path::new("/w"), Path::new("/var/tv"));
        assert_eq!(
            outside.path_of("toolvisor://artifacts/c1.log").unwrap(),
            "artifacts:/c1.log"
        );
        for bad in [
            "toolvisor://artifacts/../audit.jsonl",
            "toolvisor://artifacts/",
            "toolvisor://artifacts/a/b",
            "toolvisor://artifacts/.hidden",
            "file:///etc/passwd",
        ] {
            assert!(inside.path_of(bad).is_err(), "{bad}");
        }
    }

    /// A fake `read_file` over `lines` that truncates pages above `max` bytes.
    fn fake(
        lines: Vec<String>,
        max: usize,
    ) -> impl FnMut(CallRequest) -> std::future::Ready<Result<ToolResult, ReadError>> {
        move |req| {
            let a = req.args["startLine"].as_u64().unwrap() as usize;
            let b = req.args["endLine"].as_u64().unwrap() as usize;
            let mut r = ToolResult {
                id: Id::Str("r".into()),
                status: Status::Ok,
                content: String::new(),
                display: String::new(),
                error: None,
                truncated: None,
                meta: json!({}),
                duration_ms: 0,
                audit_seq: 0,
            };
            if a > lines.len() {
                r.status = Status::Error;
                r.error = Some(ErrorBody::new(ErrorType::InvalidParams, "past the end"));
                return std::future::ready(Ok(r));
            }
            let page: Vec<&String> = lines.iter().skip(a - 1).take(b - a + 1).collect();
            let text: String = page.iter().map(|s| s.as_str()).collect();
            r.meta = json!({"lines": page.len()});
            if text.len() > max {
                r.content = format!("{}\n[Output truncated]", &text[..max / 2]);
                r.truncated = Some(Truncated {
                    omitted_bytes: 1,
                    omitted_lines: 1,
                    full_output: None,
                });
            } else {
                r.content = text;
            }
            std::future::ready(Ok(r))
        }
    }

    #[test]
    fn pages_add_up_to_the_whole_file() {
        let lines: Vec<String> = (0..5000)
            .map(|i| format!("line {i} {}\n", "x".repeat(i % 50)))
            .collect();
        let want: String = lines.concat();
        let got = crate::mcp::tests::block_on(read_all("p", fake(lines, 10_000))).unwrap();
        assert_eq!(got, want);
        let exact: Vec<String> = (0..FIRST_PAGE).map(|i| format!("{i}\n")).collect();
        let got = crate::mcp::tests::block_on(read_all("p", fake(exact.clone(), 10_000))).unwrap();
        assert_eq!(got, exact.concat());
    }
}
