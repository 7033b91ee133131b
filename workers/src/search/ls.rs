//! The `ls` tool (alias `list_dir`): a directory's entries, relative to it, one per line,
//! directories ending in `/`, sorted; recursive listings go `maxDepth` levels deep
//! (default 3). Discovery filters apply (see [`super::walk`]).

use serde_json::{Value, json};
use toolvisor_protocol::worker::Outcome;

use super::walk::{Found, Kind, Visitor, WalkOptions, lossy, walk};
use super::{opt_bool, opt_count, plural, str_arg};
use crate::{ToolContext, ToolError, truncate};

/// Depth of a recursive listing when `maxDepth` is not given.
const DEFAULT_DEPTH: usize = 3;

pub fn run(args: &Value, ctx: &ToolContext) -> Result<Outcome, ToolError> {
    let path = str_arg(args, "path")?;
    let recursive = opt_bool(args, "recursive")?.unwrap_or(false);
    let depth = match recursive {
        true => opt_count(args, "maxDepth")?.unwrap_or(DEFAULT_DEPTH),
        false => 1,
    };
    let opts = WalkOptions {
        include_hidden: opt_bool(args, "includeHidden")?.unwrap_or(false),
        max_depth: Some(depth),
    };
    let dir = ctx.resolver.resolve(path)?;
    let mut entries: Vec<String> = walk(ctx, &dir, &opts, Entries::default)?
        .into_iter()
        .flat_map(|e| e.0)
        .collect();
    entries.sort_unstable();
    let cut = truncate::listing(&entries, &ctx.init.limits);
    let mut o = Outcome::ok(cut.text);
    o.truncated = cut.truncated;
    o.display = format!(
        "{}: {}",
        dir.display,
        plural(entries.len() as u64, "entry", "entries")
    );
    o.meta.insert("entries".into(), json!(entries.len()));
    Ok(o)
}

/// Collects entry names relative to the listed directory.
#[derive(Default)]
struct Entries(Vec<String>);

impl Visitor for Entries {
    fn visit(&mut self, found: &Found) -> bool {
        let mut name = lossy(&found.under);
        if found.kind == Kind::Dir {
            name.push('/');
        }
        self.0.push(name);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Ws, err_kind, ws, ws_with};
    use proptest::prelude::*;
    use serde_json::json;
    use std::collections::BTreeSet;
    use toolvisor_protocol::ErrorType;
    use toolvisor_protocol::worker::Limits;

    fn ls(w: &Ws, args: serde_json::Value) -> Vec<String> {
        let o = w.run("ls", args);
        assert!(o.error.is_none(), "{}", o.content);
        o.content.lines().map(str::to_owned).collect()
    }

    #[test]
    fn lists_sorted_with_dir_slashes() {
        let w = ws_with(Limits::default(), &[".toolvisor"]);
        w.write("b.txt", "");
        w.write("a/x.rs", "");
        w.write(".hidden", "");
        w.write(".toolvisor/audit.jsonl", "");
        w.write(".git/HEAD", "");
        w.write("ignored.log", "");
        w.write(".gitignore", "*.log\n");
        assert_eq!(ls(&w, json!({"path": "."})), ["a/", "b.txt"]);
        assert_eq!(
            ls(&w, json!({"path": ".", "includeHidden": true})),
            [".gitignore", ".hidden", "a/", "b.txt"]
        );
        assert_eq!(ls(&w, json!({"path": "a"})), ["x.rs"]);
        assert_eq!(
            ls(&w, json!({"path": ".", "recursive": true})),
            ["a/", "a/x.rs", "b.txt"]
        );
    }

    #[test]
    fn errors() {
        let w = ws();
        w.write("f", "");
        let kind = |p: &str| err_kind(&w.run("ls", json!({"path": p})));
        assert_eq!(kind("f"), Some(ErrorType::InvalidParams));
        assert_eq!(kind("nope"), Some(ErrorType::FileNotFoundError));
        assert_eq!(kind(".."), Some(ErrorType::PathOutsideWorkspace));
    }

    #[test]
    fn long_listing_is_truncated() {
        let w = ws_with(
            Limits {
                list_max: 10,
                list_keep: 4,
                ..Limits::default()
            },
            &[],
        );
        for i in 0..20 {
            w.write(&format!("f{i:02}"), "");
        }
        let o = w.run("ls", json!({"path": "."}));
        let lines: Vec<_> = o.content.lines().collect();
        assert_eq!(lines[..4], ["f00", "f01", "f02", "f03"]);
        assert_eq!(
            lines[4],
            "[Output truncated: 16 lines and 64 characters omitted]"
        );
        assert_eq!(o.truncated.unwrap().omitted_lines, 16);
    }

    /// A small tree: each entry is (path with depth ≤ 3, hidden?).
    fn tree() -> impl Strategy<Value = BTreeSet<Vec<String>>> {
        let name = prop_oneof![3 => "[a-c]{1,2}", 1 => "\\.[a-c]{1,2}"];
        proptest::collection::btree_set(proptest::collection::vec(name, 1..5), 1..12)
    }

    fn build(w: &Ws, paths: &BTreeSet<Vec<String>>) -> BTreeSet<String> {
        // A path that is a prefix of another becomes a directory; others are files.
        let mut files = BTreeSet::new();
        for p in paths {
            let is_prefix = paths
                .iter()
                .any(|q| q.len() > p.len() && q[..p.len()] == p[..]);
            if !is_prefix
                && !files
                    .iter()
                    .any(|f: &String| p.join("/").starts_with(&format!("{f}/")))
            {
                files.insert(p.join("/"));
            }
        }
        for f in &files {
            w.write(f, "x");
        }
        files
    }

    /// Every entry (dirs with `/`) up to `depth`, optionally without hidden ones.
    fn expected(files: &BTreeSet<String>, depth: usize, hidden: bool) -> Vec<String> {
        let mut out = BTreeSet::new();
        for f in files {
            let parts: Vec<&str> = f.split('/').collect();
            for i in 1..=parts.len().min(depth) {
                if !hidden && parts[..i].iter().any(|p| p.starts_with('.')) {
                    break;
                }
                let dir = if i < parts.len() { "/" } else { "" };
                out.insert(format!("{}{dir}", parts[..i].join("/")));
            }
        }
        let mut v: Vec<String> = out.into_iter().collect();
        v.sort_unstable();
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Properties 22 and 23: all (non-hidden) entries, recursion bounded by maxDepth.
        #[test]
        fn listing_completeness(paths in tree(), depth in 1usize..5, hidden: bool, recursive: bool) {
            let w = ws();
            let files = build(&w, &paths);
            let args = json!({"path": ".", "recursive": recursive, "includeHidden": hidden, "maxDepth": depth});
            let want = expected(&files, if recursive { depth } else { 1 }, hidden);
            prop_assert_eq!(ls(&w, args), want);
        }
    }
}
