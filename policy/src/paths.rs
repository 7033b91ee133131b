//! Lexical path scoping for policy decisions (docs/PROTOCOL.md "Paths", docs/POLICY.md).
//!
//! Rules and grants compare path parameters in one resolved form, so that
//! `./src/../a.rs`, `private:/a.rs` and `/home/me/ws/a.rs` all read `a.rs`, and a rule
//! written for `src/` cannot be dodged by spelling the path differently. This is purely
//! lexical: symlinks are the worker's business (it resolves without a race and refuses
//! escapes); the policy only needs a stable name to match and to show a person.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use toolvisor_protocol::worker::Roots;

/// Which root a path lives under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// The workspace (`private:/`, or no scope).
    Private,
    /// `shared:/`.
    Shared,
    /// `public:/`: read-only for commands, high risk for edits.
    Public,
}

impl Scope {
    /// The prefix a path in this scope is written with (`private` needs none).
    fn prefix(self) -> &'static str {
        match self {
            Scope::Private => "",
            Scope::Shared => "shared:/",
            Scope::Public => "public:/",
        }
    }
}

/// A path parameter after lexical resolution.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ScopedPath {
    /// Inside a root; `rel` is normalised, `/`-separated, without leading `./`
    /// (`""` for the root itself).
    Inside {
        /// The root.
        scope: Scope,
        /// The path beneath it.
        rel: String,
    },
    /// Outside every root: the normalised absolute host path. The worker refuses it;
    /// the policy treats it as high risk.
    Outside(String),
}

impl ScopedPath {
    /// True when the path is under `public:/` (mode `workspace` asks for those).
    pub fn is_public(&self) -> bool {
        matches!(
            self,
            ScopedPath::Inside {
                scope: Scope::Public,
                ..
            }
        )
    }

    /// True when the path leaves every root.
    pub fn is_outside(&self) -> bool {
        matches!(self, ScopedPath::Outside(_))
    }

    /// True when `self` equals `prefix` or lies below it (whole components only, so
    /// `src` covers `src/a.rs` but not `srcx`). The private root (`.`) covers every
    /// private path and nothing in other scopes.
    pub fn is_under(&self, prefix: &ScopedPath) -> bool {
        match (self, prefix) {
            (
                ScopedPath::Inside { scope, rel },
                ScopedPath::Inside {
                    scope: pscope,
                    rel: prel,
                },
            ) => scope == pscope && component_prefix(rel, prel),
            (ScopedPath::Outside(p), ScopedPath::Outside(pp)) => component_prefix(p, pp),
            _ => false,
        }
    }
}

/// `rel` equals `prefix` or continues it after a `/`.
fn component_prefix(rel: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    if prefix.is_empty() {
        return true;
    }
    rel == prefix
        || rel
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

impl fmt::Display for ScopedPath {
    /// The form rules match and people read: `a.rs`, `.` for the workspace root,
    /// `shared:/x`, `public:/x`, or an absolute host path outside every root.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScopedPath::Inside {
                scope: Scope::Private,
                rel,
            } if rel.is_empty() => f.write_str("."),
            ScopedPath::Inside { scope, rel } => write!(f, "{}{rel}", scope.prefix()),
            ScopedPath::Outside(p) => f.write_str(p),
        }
    }
}

/// A relative root could not be made absolute: the current directory is unreadable.
#[derive(Debug, thiserror::Error)]
#[error("cannot resolve root {}: {source}", root.display())]
pub struct ScopesError {
    /// The root as configured.
    pub root: PathBuf,
    /// Why the current directory could not be read.
    #[source]
    pub source: std::io::Error,
}

/// The configured roots, normalised once, used to resolve path parameters.
#[derive(Clone, Debug)]
pub struct Scopes {
    private: PathBuf,
    shared: Option<PathBuf>,
    public: Option<PathBuf>,
}

impl Scopes {
    /// Normalise the roots. Relative roots are taken against the current directory,
    /// since the policy must compare them with absolute paths from calls.
    pub fn new(roots: &Roots) -> Result<Scopes, ScopesError> {
        let abs = |p: &Path| -> Result<PathBuf, ScopesError> {
            let p = if p.is_absolute() {
                p.to_path_buf()
            } else {
                std::env::current_dir()
                    .map_err(|source| ScopesError {
                        root: p.to_path_buf(),
                        source,
                    })?
                    .join(p)
            };
            // Real, as the paths compared with them are.
            Ok(real_path(&normalise_abs(&p)))
        };
        Ok(Scopes {
            private: abs(&roots.private)?,
            shared: roots.shared.as_deref().map(abs).transpose()?,
            public: roots.public.as_deref().map(abs).transpose()?,
        })
    }

    /// Resolve a path parameter as the worker will open it: lexically, then through
    /// the symlinks that exist now (a rule on `src/generated/` holds for
    /// `src/gen2/x` when `src/gen2` links there, and a grant for `src` does not reach
    /// `src/up/x` when `src/up` links to the root).
    pub fn resolve(&self, raw: &str) -> ScopedPath {
        let (scope, rest) = split_scope(raw);
        let base = match scope {
            Some(Scope::Private) | None => Some(&self.private),
            Some(Scope::Shared) => self.shared.as_ref(),
            Some(Scope::Public) => self.public.as_ref(),
        };
        let Some(base) = base else {
            // A scope that is not configured: keep the written form so a rule can
            // still see it; the worker refuses the call.
            return ScopedPath::Inside {
                scope: scope.unwrap_or(Scope::Private),
                rel: normalise_rel(rest).unwrap_or_default(),
            };
        };
        let rest = if scope.is_some() {
            rest.trim_start_matches('/')
        } else {
            rest
        };
        let joined = if Path::new(rest).is_absolute() {
            PathBuf::from(rest)
        } else {
            base.join(rest)
        };
        self.classify(&real_path(&normalise_abs(&joined)))
    }

    /// Which root an absolute, normalised host path lies in (the innermost wins when
    /// roots nest, so `shared` inside the workspace reads `shared:/…`).
    fn classify(&self, abs: &Path) -> ScopedPath {
        let mut best: Option<(usize, Scope, String)> = None;
        let candidates = [
            (Scope::Private, Some(&self.private)),
            (Scope::Shared, self.shared.as_ref()),
            (Scope::Public, self.public.as_ref()),
        ];
        for (scope, root) in candidates {
            let Some(root) = root else { continue };
            if let Ok(rel) = abs.strip_prefix(root) {
                let depth = root.components().count();
                if best.as_ref().is_none_or(|(d, _, _)| depth > *d) {
                    best = Some((depth, scope, to_slash(rel)));
                }
            }
        }
        match best {
            Some((_, scope, rel)) => ScopedPath::Inside { scope, rel },
            None => ScopedPath::Outside(to_slash(abs)),
        }
    }
}

/// `abs` with its longest existing ancestor replaced by that ancestor's real path (what
/// does not exist yet cannot be a symlink). Unchanged when nothing of it resolves.
fn real_path(abs: &Path) -> PathBuf {
    let mut existing = abs;
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            let mut out = real;
            out.extend(rest.iter().rev());
            return out;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return abs.to_path_buf(),
        }
    }
}

/// Split `shared:/x` into its scope and the rest; no prefix means no explicit scope.
fn split_scope(raw: &str) -> (Option<Scope>, &str) {
    for (prefix, scope) in [
        ("private:", Scope::Private),
        ("shared:", Scope::Shared),
        ("public:", Scope::Public),
    ] {
        if let Some(rest) = raw.strip_prefix(prefix) {
            return (Some(scope), rest);
        }
    }
    (None, raw)
}

/// Lexically normalise an absolute path: drop `.`, apply `..` (never above `/`).
fn normalise_abs(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(s) => out.push(s),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Normalise a relative path on its own; `None` when `..` climbs above it.
fn normalise_rel(p: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s),
        }
    }
    Some(parts.join("/"))
}

/// A path as `/`-separated text (lossy for non-UTF-8, which rules cannot name anyway).
fn to_slash(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scopes() -> Scopes {
        Scopes::new(&Roots {
            private: "/ws".into(),
            shared: Some("/data/shared".into()),
            public: Some("/srv/pub".into()),
        })
        .unwrap()
    }

    fn r(p: &str) -> String {
        scopes().resolve(p).to_string()
    }

    #[test]
    fn relative_paths_normalise_lexically() {
        assert_eq!(r("./src/../a.rs"), "a.rs");
        assert_eq!(r("a//b/./c"), "a/b/c");
        assert_eq!(r("."), ".");
        assert_eq!(r(""), ".");
        assert_eq!(r("private:/src/x"), "src/x");
    }

    #[test]
    fn scoped_paths_stay_scoped() {
        assert_eq!(r("shared:/x"), "shared:/x");
        assert_eq!(r("shared:/a/../b"), "shared:/b");
        assert_eq!(r("public:/site/index.html"), "public:/site/index.html");
        assert!(scopes().resolve("public:/x").is_public());
    }

    #[test]
    fn absolute_paths_map_to_their_root() {
        assert_eq!(r("/ws/src/main.rs"), "src/main.rs");
        assert_eq!(r("/ws"), ".");
        assert_eq!(r("/data/shared/k"), "shared:/k");
        assert_eq!(r("/etc/passwd"), "/etc/passwd");
        assert!(scopes().resolve("/etc/passwd").is_outside());
    }

    #[test]
    fn escapes_are_outside() {
        assert_eq!(r("../x"), "/x");
        assert!(scopes().resolve("../../etc").is_outside());
        assert!(scopes().resolve("shared:/../../ws/a").is_inside_private());
    }

    #[test]
    fn prefixes_are_whole_components() {
        let s = scopes();
        assert!(s.resolve("src/a.rs").is_under(&s.resolve("src")));
        assert!(!s.resolve("srcx/a.rs").is_under(&s.resolve("src")));
        assert!(s.resolve("anything").is_under(&s.resolve(".")));
        assert!(!s.resolve("shared:/a").is_under(&s.resolve(".")));
        assert!(s.resolve("shared:/a/b").is_under(&s.resolve("shared:/a")));
    }

    impl ScopedPath {
        fn is_inside_private(&self) -> bool {
            matches!(
                self,
                ScopedPath::Inside {
                    scope: Scope::Private,
                    ..
                }
            )
        }
    }
}
