//! An MCP server's `CallToolResult` as a worker outcome: the text of its content blocks
//! (other blocks described in a line) for native clients, the blocks themselves in
//! `meta.mcp_content` (an MCP host gets them as they came: images, audio, resources),
//! its `structuredContent` in `meta.structured`, and `isError` as status `error`,
//! `McpToolError`. Content is cut like the other tools' output (`limits.many_max`,
//! then the frame); the blocks follow the cut, and whatever of them a frame cannot
//! hold is left out with a line that says so — a result never outgrows its frame.

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents, ServerResult};
use serde_json::{Value, json};
use toolvisor_protocol::worker::{Limits, Outcome};
use toolvisor_protocol::{ErrorBody, ErrorType};

use super::CONTENT_META;

/// Longest first line of an error's content used as its message.
const MAX_MESSAGE: usize = 500;

/// The outcome of a finished call.
pub fn of(r: CallToolResult) -> Outcome {
    let mut text = r
        .content
        .iter()
        .map(block_text)
        .collect::<Vec<_>>()
        .join("\n");
    if text.is_empty()
        && let Some(s) = &r.structured_content
    {
        text = s.to_string();
    }
    let mut o = if r.is_error == Some(true) {
        let mut o = Outcome::err(ErrorBody::new(ErrorType::McpToolError, message(&text)));
        o.content = text.clone();
        o.display = text;
        o
    } else {
        Outcome::ok(text)
    };
    if let Ok(items) = serde_json::to_value(&r.content) {
        o.meta.insert(CONTENT_META.into(), items);
    }
    if let Some(s) = r.structured_content {
        o.meta.insert("structured".into(), s);
    }
    o
}

/// The error message: the first line of what the tool said.
fn message(text: &str) -> String {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty());
    let Some(line) = line else {
        return "the tool reported an error".into();
    };
    let mut end = line.len().min(MAX_MESSAGE);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_owned()
}

/// One content block as text.
fn block_text(b: &ContentBlock) -> String {
    if let Some(t) = b.as_text() {
        return t.text.clone();
    }
    if let Some(i) = b.as_image() {
        return format!("[image: {}, {} bytes of base64]", i.mime_type, i.data.len());
    }
    if let Some(a) = b.as_audio() {
        return format!("[audio: {}, {} bytes of base64]", a.mime_type, a.data.len());
    }
    if let Some(r) = b.as_resource() {
        return match &r.resource {
            ResourceContents::TextResourceContents { text, .. } => text.clone(),
            ResourceContents::BlobResourceContents { uri, blob, .. } => {
                format!("[resource {uri}: {} bytes of base64]", blob.len())
            }
            _ => "[a resource of an unknown kind]".into(),
        };
    }
    if let Some(l) = b.as_resource_link() {
        return format!("[resource link: {} ({})]", l.uri, l.name);
    }
    "[content of an unknown kind]".into()
}

/// Cut an outcome to the limits and the frame, whatever the server sent.
pub fn fit(o: &mut Outcome, limits: &Limits) {
    let cut = toolvisor_workers::truncate::text(&o.content, limits.many_max, limits.many_max);
    if cut.truncated.is_some() {
        let same = o.display == o.content;
        o.content = cut.text;
        o.truncated = cut.truncated;
        if same {
            o.display = o.content.clone();
        }
    }
    let budget = limits.max_frame_bytes / 4;
    let too_big = o
        .meta
        .get("structured")
        .is_some_and(|s| serde_json::to_vec(s).map_or(true, |b| b.len() > budget));
    if too_big {
        o.meta.remove("structured");
        o.meta
            .insert("structured_omitted".into(), Value::Bool(true));
    }
    toolvisor_workers::truncate::fit_frame(o, limits.max_frame_bytes);
    if o.truncated.is_some() {
        cut_text_items(o);
    }
    fit_items(o, limits.max_frame_bytes);
}

/// The server's text items, after the content was cut: one text item with the cut
/// content, before its other items (the cut keeps the head and tail of all the text).
fn cut_text_items(o: &mut Outcome) {
    if let Some(Value::Array(items)) = o.meta.get_mut(CONTENT_META) {
        let others = items.drain(..).filter(|i| i["type"] != "text");
        let text = json!({"type": "text", "text": o.content});
        *items = std::iter::once(text).chain(others).collect();
    }
}

/// Keep the whole outcome within 7/8 of a frame (its fields and the envelope take the
/// rest): the largest content item becomes a line that describes it, until it fits;
/// when even that is too much, the items are left out (`mcp_content_omitted`).
fn fit_items(o: &mut Outcome, max_frame: usize) {
    let limit = max_frame / 8 * 7;
    let size = |o: &Outcome| serde_json::to_vec(o).map_or(usize::MAX, |b| b.len());
    while size(o) > limit {
        let Some(Value::Array(items)) = o.meta.get_mut(CONTENT_META) else {
            return;
        };
        let biggest = items
            .iter()
            .enumerate()
            .map(|(i, v)| (i, v.to_string().len()))
            .filter(|(_, n)| *n > 1024)
            .max_by_key(|(_, n)| *n);
        match biggest {
            Some((i, _)) => {
                let said = match serde_json::from_value::<ContentBlock>(items[i].clone()) {
                    Ok(b) => block_text(&b),
                    Err(_) => "[content of an unknown kind]".into(),
                };
                let said: String = said.chars().take(512).collect();
                items[i] = json!({
                    "type": "text",
                    "text": format!("{said} (left out: the result is larger than a frame)"),
                });
            }
            None => {
                o.meta.remove(CONTENT_META);
                o.meta
                    .insert("mcp_content_omitted".into(), Value::Bool(true));
                return;
            }
        }
    }
}

/// A short name for an unexpected answer.
pub fn kind(r: &ServerResult) -> &'static str {
    match r {
        ServerResult::CreateTaskResult(_) => "a task",
        ServerResult::InputRequiredResult(_) => "a request for input",
        ServerResult::EmptyResult(_) => "an empty result",
        _ => "another result",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolvisor_protocol::message::Status;

    fn result(v: Value) -> CallToolResult {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn text_blocks_and_structured_content() {
        let o = of(result(json!({
            "content": [{"type": "text", "text": "a"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}],
            "structuredContent": {"n": 1}
        })));
        assert_eq!(o.status, Status::Ok);
        assert_eq!(o.content, "a\n[image: image/png, 4 bytes of base64]");
        assert_eq!(o.meta["structured"], json!({"n": 1}));
        let o = of(result(
            json!({"content": [], "structuredContent": {"n": 2}}),
        ));
        assert_eq!(o.content, "{\"n\":2}");
    }

    #[test]
    fn is_error_is_an_mcp_tool_error() {
        let o = of(result(json!({
            "content": [{"type": "text", "text": "\nno such repo\nmore"}],
            "isError": true
        })));
        assert_eq!(o.status, Status::Error);
        let e = o.error.unwrap();
        assert_eq!(e.kind, ErrorType::McpToolError);
        assert_eq!(e.message, "no such repo");
        assert_eq!(o.content, "\nno such repo\nmore");
    }

    #[test]
    fn content_items_pass_as_they_came_and_follow_the_cut() {
        let items = json!([
            {"type": "text", "text": "a\n".repeat(3000)},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "audio", "data": "UklG", "mimeType": "audio/wav", "_meta": {"k": 1}}
        ]);
        let o = of(result(json!({"content": items.clone()})));
        assert_eq!(o.meta[CONTENT_META], items);
        let limits = Limits {
            many_max: 1024,
            max_frame_bytes: 1 << 20,
            ..Limits::default()
        };
        let mut cut = o.clone();
        fit(&mut cut, &limits);
        assert!(cut.truncated.is_some());
        let kept = cut.meta[CONTENT_META].as_array().unwrap();
        assert_eq!(kept.len(), 3);
        assert_eq!(kept[0]["text"], json!(cut.content));
        assert_eq!((&kept[1], &kept[2]), (&items[1], &items[2]));
        // An item no frame holds becomes a line that says so.
        let mut huge = of(result(json!({"content": [
            {"type": "text", "text": "hi"},
            {"type": "image", "data": "A".repeat(200_000), "mimeType": "image/png"}
        ]})));
        fit(
            &mut huge,
            &Limits {
                max_frame_bytes: 65536,
                ..limits
            },
        );
        let kept = huge.meta[CONTENT_META].as_array().unwrap();
        assert_eq!(kept[0]["text"], "hi");
        let said = kept[1]["text"].as_str().unwrap();
        assert!(
            said.starts_with("[image: image/png, 200000 bytes")
                && said.ends_with("larger than a frame)"),
            "{said}"
        );
    }

    #[test]
    fn huge_results_are_cut() {
        let limits = Limits {
            many_max: 4096,
            max_frame_bytes: 16384,
            ..Limits::default()
        };
        let mut o = Outcome::ok("x\n".repeat(10_000));
        o.meta
            .insert("structured".into(), json!("y".repeat(10_000)));
        fit(&mut o, &limits);
        assert!(o.content.len() < 4200, "{}", o.content.len());
        assert!(o.truncated.is_some());
        assert_eq!(o.meta["structured_omitted"], json!(true));
    }
}
