//! The `glob` tool: files whose path matches a glob, one per line, sorted, relative to
//! the workspace root (`scope:/x` for the shared and public roots).
//!
//! `*` does not cross `/` (`literal_separator`), `**` does. The pattern is matched
//! against the path relative to `directory` (the workspace-relative path when
//! `directory` is not given) and, failing that, against the root-relative path, so both
//! `*.rs` with `directory: "src"` and `src/**/*.rs` find `src/a.rs`. Directories are not
//! listed; symlinks are (not followed).

use globset::{GlobBuilder, GlobMatcher};
use serde_json::{Value, json};
use toolvisor_protocol::worker::Outcome;

use super::walk::{Found, Kind, Visitor, WalkOptions, walk};
use super::{opt_bool, opt_count, opt_str, plural, str_arg};
use crate::paths::Resolved;
use crate::{ToolContext, ToolError, truncate};

pub fn run(args: &Value, ctx: &ToolContext) -> Result<Outcome, ToolError> {
    let matcher = compile(str_arg(args, "pattern")?)?;
    let dir = ctx
        .resolver
        .resolve(opt_str(args, "directory")?.unwrap_or("."))?;
    let include_hidden = opt_bool(args, "includeHidden")?.unwrap_or(false);
    let mut paths = find(ctx, &dir, &matcher, include_hidden, true)?;
    let total = paths.len();
    if let Some(n) = opt_count(args, "maxResults")? {
        paths.truncate(n);
    }
    let cut = truncate::listing(&paths, &ctx.init.limits);
    let mut o = Outcome::ok(cut.text);
    o.truncated = cut.truncated;
    o.display = match total == paths.len() {
        true => plural(total as u64, "file", "files"),
        false => format!(
            "{} of {}",
            paths.len(),
            plural(total as u64, "file", "files")
        ),
    };
    o.meta.insert("files".into(), json!(paths.len()));
    o.meta.insert("total".into(), json!(total));
    Ok(o)
}

/// A glob with shell semantics; a bad pattern is `InvalidParams` with the parser's words.
pub fn compile(pattern: &str) -> Result<GlobMatcher, ToolError> {
    let p = pattern.strip_prefix("./").unwrap_or(pattern);
    GlobBuilder::new(p)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| ToolError::invalid(format!("invalid glob `{pattern}`: {e}")))
}

/// Display paths of the non-directory entries under `dir` matching `matcher`, sorted.
/// The root-relative path is always tried; the `dir`-relative one when `match_under`.
pub fn find(
    ctx: &ToolContext,
    dir: &Resolved,
    matcher: &GlobMatcher,
    include_hidden: bool,
    match_under: bool,
) -> Result<Vec<String>, ToolError> {
    let opts = WalkOptions {
        include_hidden,
        max_depth: None,
    };
    let make = || Matches {
        matcher: matcher.clone(),
        root: dir.root,
        match_under,
        ctx,
        found: Vec::new(),
    };
    let mut paths: Vec<String> = walk(ctx, dir, &opts, make)?
        .into_iter()
        .flat_map(|m| m.found)
        .collect();
    paths.sort_unstable();
    paths.dedup();
    Ok(paths)
}

/// Collects the display paths of matching entries.
struct Matches<'a> {
    matcher: GlobMatcher,
    root: usize,
    match_under: bool,
    ctx: &'a ToolContext,
    found: Vec<String>,
}

impl Visitor for Matches<'_> {
    fn visit(&mut self, found: &Found) -> bool {
        let hit = (self.match_under && self.matcher.is_match(&found.under))
            || self.matcher.is_match(&found.rel);
        if found.kind != Kind::Dir && hit {
            let shown = self.ctx.resolver.make(self.root, found.rel.clone());
            self.found.push(shown.display);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Ws, err_kind, ws};
    use proptest::prelude::*;
    use serde_json::json;
    use std::collections::BTreeSet;
    use toolvisor_protocol::ErrorType;

    fn glob(w: &Ws, args: serde_json::Value) -> Vec<String> {
        let o = w.run("glob", args);
        assert!(o.error.is_none(), "{}", o.content);
        o.content.lines().map(str::to_owned).collect()
    }

    #[test]
    fn matches_with_shell_semantics() {
        let w = ws();
        for f in [
            "a.rs",
            "src/b.rs",
            "src/c/d.rs",
            "src/e.txt",
            ".h.rs",
            "out/x.rs",
        ] {
            w.write(f, "");
        }
        w.write(".gitignore", "out/\n");
        assert_eq!(glob(&w, json!({"pattern": "*.rs"})), ["a.rs"]);
        assert_eq!(
            glob(&w, json!({"pattern": "**/*.rs"})),
            ["a.rs", "src/b.rs", "src/c/d.rs"]
        );
        assert_eq!(
            glob(&w, json!({"pattern": "*.rs", "directory": "src"})),
            ["src/b.rs"]
        );
        assert_eq!(
            glob(&w, json!({"pattern": "*.rs", "includeHidden": true})),
            [".h.rs", "a.rs"]
        );
        assert_eq!(
            glob(&w, json!({"pattern": "**/*.rs", "maxResults": 2})),
            ["a.rs", "src/b.rs"]
        );
        let bad = w.run("glob", json!({"pattern": "a[b"}));
        assert_eq!(err_kind(&bad), Some(ErrorType::InvalidParams));
    }

    #[test]
    fn cancelled_walk_reports_cancelled() {
        let w = ws();
        w.write("a/b.rs", "");
        w.ctx.cancel.cancel();
        let o = w.run("glob", json!({"pattern": "**"}));
        assert_eq!(err_kind(&o), Some(ErrorType::Cancelled));
    }

    fn files() -> impl Strategy<Value = BTreeSet<String>> {
        let seg = prop_oneof![4 => "[ab]{1,2}", 1 => "\\.[ab]"];
        let file = (
            proptest::collection::vec(seg, 0..3),
            "[ab]{1,2}",
            prop_oneof!["\\.rs", "\\.txt", ""],
        )
            .prop_map(|(dirs, stem, ext)| {
                let mut p = dirs.join("/");
                if !p.is_empty() {
                    p.push('/');
                }
                format!("{p}{stem}{ext}")
            });
        proptest::collection::btree_set(file, 1..15)
    }

    /// Keep only paths that are never a directory of another path.
    fn realisable(fs: BTreeSet<String>) -> BTreeSet<String> {
        fs.iter()
            .filter(|f| !fs.iter().any(|g| g.starts_with(&format!("{f}/"))))
            .cloned()
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Properties 16, 17, 18: all and only matching files, at most maxResults, hidden
        /// ones only with includeHidden.
        #[test]
        fn glob_properties(fs in files(), pat in prop_oneof!["\\*\\*/\\*\\.rs", "\\*", "\\*\\*", "a/\\*", "\\*\\*/b\\*"],
                           hidden: bool, max in proptest::option::of(1usize..6)) {
            let fs = realisable(fs);
            let w = ws();
            for f in &fs {
                w.write(f, "");
            }
            let m = globset::GlobBuilder::new(&pat).literal_separator(true).build().unwrap().compile_matcher();
            let mut want: Vec<String> = fs.iter()
                .filter(|f| hidden || !f.split('/').any(|s| s.starts_with('.')))
                .filter(|f| m.is_match(f.as_str()))
                .cloned().collect();
            want.sort_unstable();
            if let Some(n) = max {
                want.truncate(n);
            }
            let got = glob(&w, json!({"pattern": pat, "includeHidden": hidden, "maxResults": max}));
            prop_assert_eq!(got, want);
        }
    }
}
