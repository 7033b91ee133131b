//! The `read_many_files` tool: `=== path ===\n<content>\n` per file, in the order given,
//! globs expanded in sorted order (with the discovery filters: `.gitignore`, no
//! dot-files, no `.git`, no protected paths). A failing file's body is `Error: <message>`
//! and the call still succeeds; each file is truncated on its own (as `read_file`), and
//! `truncated` sums what was left out. A path named explicitly follows `read_file`'s
//! rules (an artifact file is readable, `.git` is refused); globs only ever match what
//! discovery shows. The whole output is capped too (`limits.many_max`): past it the
//! text ends with the marker, which counts what the remaining sections held.

use serde_json::{Value, json};
use toolvisor_protocol::Truncated;
use toolvisor_protocol::worker::Outcome;

use super::guard::Target;
use super::read_file::{LineRange, read_text};
use super::{glob, plural};
use crate::{ToolContext, ToolError};

pub fn run(args: &Value, ctx: &ToolContext) -> Result<Outcome, ToolError> {
    let paths = path_args(args)?;
    let mut out = Output {
        cap: ctx.init.limits.many_max,
        ..Output::default()
    };
    for p in paths {
        ctx.cancel.check()?;
        if is_glob(p) {
            match expand(ctx, p) {
                Ok(files) if files.is_empty() => out.error(p, "no files match this pattern"),
                Ok(files) => files.iter().for_each(|f| out.file(ctx, f)),
                Err(e) => out.error(p, &e.message),
            }
        } else {
            out.file(ctx, p);
        }
    }
    Ok(out.finish())
}

/// The `paths` array (the schema guarantees a non-empty array of strings).
fn path_args(args: &Value) -> Result<Vec<&str>, ToolError> {
    let list = args
        .get("paths")
        .and_then(Value::as_array)
        .ok_or_else(|| ToolError::invalid("`paths` must be an array of strings"))?;
    list.iter()
        .map(|v| {
            v.as_str()
                .ok_or_else(|| ToolError::invalid("`paths` must be an array of strings"))
        })
        .collect()
}

fn is_glob(p: &str) -> bool {
    p.contains(['*', '?', '[', '{'])
}

/// Expand a glob: walk its literal leading directories, match the rest root-relative.
fn expand(ctx: &ToolContext, p: &str) -> Result<Vec<String>, ToolError> {
    let (scope, body) = match p.split_once(":/") {
        Some((s, b)) if ["private", "shared", "public"].contains(&s) => (format!("{s}:/"), b),
        _ if p.starts_with('/') => ("/".to_owned(), &p[1..]),
        _ => (String::new(), p),
    };
    let parts: Vec<&str> = body.split('/').filter(|c| !c.is_empty()).collect();
    let literal = parts.iter().take_while(|c| !is_glob(c)).count();
    let base_path = format!("{scope}{}", parts[..literal].join("/"));
    let base = ctx.resolver.resolve(if base_path.is_empty() {
        "."
    } else {
        &base_path
    })?;
    let mut pattern = base.rel.to_string_lossy().into_owned();
    for c in &parts[literal..] {
        if !pattern.is_empty() {
            pattern.push('/');
        }
        pattern.push_str(c);
    }
    let matcher = glob::compile(&pattern)?;
    glob::find(ctx, &base, &matcher, false, false)
}

/// The text being built, with counts.
#[derive(Default)]
struct Output {
    text: String,
    files: u64,
    errors: u64,
    truncated: Option<Truncated>,
    /// `limits.many_max`: the most `text` may hold.
    cap: usize,
    /// What did not fit under the cap (bytes, lines), once it was reached.
    over: Option<(u64, u64)>,
}

impl Output {
    /// Read one file and append its section (or its error).
    fn file(&mut self, ctx: &ToolContext, p: &str) {
        let target = match Target::of(ctx, p) {
            Ok(t) => t,
            Err(e) => return self.error(p, &e.message),
        };
        let shown = target.display();
        match target
            .open(ctx)
            .and_then(|f| read_text(ctx, f, shown, LineRange::ALL))
        {
            Ok(read) => {
                self.section(shown, &read.cut.text);
                self.files += 1;
                if let Some(t) = read.cut.truncated {
                    let sum = self.truncated.get_or_insert_with(Truncated::default);
                    sum.omitted_bytes += t.omitted_bytes;
                    sum.omitted_lines += t.omitted_lines;
                }
            }
            Err(e) => self.error(shown, &e.message),
        }
    }

    fn error(&mut self, p: &str, message: &str) {
        self.section(p, &format!("Error: {message}"));
        self.errors += 1;
    }

    /// Append a section, or the part of it under the cap (then only count the rest).
    fn section(&mut self, p: &str, body: &str) {
        let section = format!("=== {p} ===\n{body}\n");
        let room = self.cap.saturating_sub(self.text.len());
        if self.over.is_none() && section.len() <= room {
            self.text.push_str(&section);
            return;
        }
        let (bytes, lines) = self.over.get_or_insert((0, 0));
        let kept = match room {
            _ if *bytes > 0 || *lines > 0 => 0,
            r => crate::truncate::floor_boundary(&section, r),
        };
        let rest = &section[kept..];
        *bytes += rest.len() as u64;
        *lines += crate::truncate::count_lines(rest.as_bytes());
        if kept > 0 {
            self.text.push_str(&section[..kept]);
        }
    }

    fn finish(mut self) -> Outcome {
        if let Some((bytes, lines)) = self.over {
            if !self.text.ends_with('\n') {
                self.text.push('\n');
            }
            self.text.push_str(&crate::truncate::marker(lines, bytes));
            let sum = self.truncated.get_or_insert_with(Truncated::default);
            sum.omitted_bytes += bytes;
            sum.omitted_lines += lines;
        }
        let mut o = Outcome::ok(self.text);
        o.truncated = self.truncated;
        o.display = match self.errors {
            0 => format!("read {}", plural(self.files, "file", "files")),
            n => format!("read {}, {n} failed", plural(self.files, "file", "files")),
        };
        o.meta.insert("files".into(), json!(self.files));
        o.meta.insert("errors".into(), json!(self.errors));
        o
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{ws, ws_with};
    use proptest::prelude::*;
    use serde_json::json;
    use toolvisor_protocol::worker::Limits;

    #[test]
    fn sections_in_order_with_inline_errors_and_sorted_globs() {
        let w = ws();
        w.write("b.txt", "B\n");
        w.write("src/z.rs", "Z");
        w.write("src/a.rs", "A");
        w.write("src/.h.rs", "H");
        w.write("bin", b"\0");
        let o = w.run(
            "read_many_files",
            json!({"paths": ["b.txt", "missing", "src/*.rs", "bin", "*.md"]}),
        );
        assert!(o.error.is_none());
        assert_eq!(
            o.content,
            "=== b.txt ===\nB\n\n=== missing ===\nError: `missing` does not exist\n=== src/a.rs ===\nA\n=== src/z.rs ===\nZ\n=== bin ===\nError: `bin` is a binary file\n=== *.md ===\nError: no files match this pattern\n"
        );
        assert_eq!(o.meta["files"], 3);
        assert_eq!(o.meta["errors"], 3);
        let abs = format!("{}/src/*.rs", w.root().display());
        let o = w.run("read_many_files", json!({"paths": [abs, "../x"]}));
        assert!(
            o.content
                .starts_with("=== src/a.rs ===\nA\n=== src/z.rs ===\nZ\n=== ../x ===\nError:"),
            "{}",
            o.content
        );
    }

    #[test]
    fn the_whole_output_is_capped_with_one_marker() {
        let w = ws_with(
            Limits {
                many_max: 100,
                ..Limits::default()
            },
            &[],
        );
        let names: Vec<String> = (0..20).map(|i| format!("f{i:02}.txt")).collect();
        for n in &names {
            w.write(n, "0123456789\n");
        }
        let o = w.run("read_many_files", json!({"paths": names}));
        assert!(o.error.is_none(), "{}", o.content);
        let (kept, marker) = o.content.rsplit_once('\n').unwrap();
        assert!(kept.len() <= 100, "{}", o.content);
        assert!(marker.starts_with("[Output truncated: "), "{marker}");
        assert_eq!(o.content.matches("[Output truncated").count(), 1);
        let t = o.truncated.unwrap();
        let whole: usize = names
            .iter()
            .map(|n| format!("=== {n} ===\n0123456789\n\n").len())
            .sum();
        assert_eq!(t.omitted_bytes as usize + kept.len() + 1, whole);
    }

    #[test]
    fn each_file_truncated_on_its_own() {
        let w = ws_with(
            Limits {
                file_max: 10,
                file_keep: 4,
                ..Limits::default()
            },
            &[],
        );
        w.write("a", "0123456789abc");
        w.write("b", "short");
        let o = w.run("read_many_files", json!({"paths": ["a", "b"]}));
        assert_eq!(
            o.content,
            "=== a ===\n0123\n[Output truncated: 1 lines and 9 characters omitted]\n=== b ===\nshort\n"
        );
        assert_eq!(o.truncated.unwrap().omitted_bytes, 9);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Property 9: each path appears as a header followed by its content.
        #[test]
        fn headers_and_contents(files in proptest::collection::btree_map("[a-z]{1,6}\\.txt", "[a-z \n]{0,40}", 1..6)) {
            let w = ws();
            for (p, c) in &files {
                w.write(p, c);
            }
            let paths: Vec<&String> = files.keys().collect();
            let o = w.run("read_many_files", json!({"paths": paths}));
            let want: String = files.iter().map(|(p, c)| format!("=== {p} ===\n{c}\n")).collect();
            prop_assert_eq!(o.content, want);
        }
    }
}
