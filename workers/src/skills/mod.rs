//! The `meta` group: skills. A skill is a directory with a `SKILL.md` (YAML front
//! matter `name` and `description`, then instructions) under one of `[skills] paths`.
//!
//! At every start the worker finds the skills ([`discover`]) and announces
//! `activate_skill` with their names as its `enum` — or nothing when there is none, so
//! the tool is listed only while a skill exists. A SIGHUP restarts the worker, which
//! finds them again. `activate_skill` returns the body of the skill's `SKILL.md` and
//! the list of its directory's files.
//!
//! Every path goes through the confined [`Resolver`] (no `..` or symlink leaves the
//! workspace; the state directory and config stay protected), and this worker cannot
//! write anywhere (Landlock). A `SKILL.md` that cannot be read as a skill is skipped
//! with a warning in the daemon's log naming the file and why.

pub mod frontmatter;

use std::io::Read;
use std::os::fd::OwnedFd;

use serde_json::{Value, json};
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::tools::activate_skill::{
    self, MAX_DESCRIPTION, MAX_NAME, MAX_SKILLS, Skill,
};
use toolvisor_protocol::tools::{self};
use toolvisor_protocol::worker::{AnnouncedTool, Outcome};

use crate::context::outcome;
use crate::paths::Resolver;
use crate::{ToolContext, ToolError, truncate};

/// The file that makes a directory a skill.
pub const SKILL_FILE: &str = "SKILL.md";

/// The largest SKILL.md read.
const MAX_SKILL_FILE: u64 = 256 * 1024;

/// How deep and how long a skill's file list goes.
const LIST_DEPTH: usize = 4;
const LIST_MAX: usize = 2000;

/// A skill found in the workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// Its name and description, as listed.
    pub skill: Skill,
    /// Its directory, as a tool path (`.skills/pdf`).
    pub dir: String,
}

/// The skills under `paths`, sorted by name (the first of a name wins), and a warning
/// for each `SKILL.md` skipped.
pub fn discover(resolver: &Resolver, paths: &[String]) -> (Vec<Found>, Vec<String>) {
    let mut found: Vec<Found> = Vec::new();
    let mut warnings = Vec::new();
    for base in paths {
        for dir in skill_dirs(resolver, base, &mut warnings) {
            let file = format!("{dir}/{SKILL_FILE}");
            match read_skill(resolver, &file) {
                Ok(Some(skill)) if found.iter().any(|f| f.skill.name == skill.name) => warnings
                    .push(format!(
                        "{file}: another skill is already named `{}`; skipped",
                        skill.name
                    )),
                Ok(Some(skill)) => found.push(Found { skill, dir }),
                Ok(None) => {}
                Err(why) => warnings.push(format!("{file}: {why}; skipped")),
            }
        }
    }
    found.sort_by(|a, b| a.skill.name.cmp(&b.skill.name));
    if found.len() > MAX_SKILLS {
        warnings.push(format!(
            "{} skills found; only the first {MAX_SKILLS} by name are offered",
            found.len()
        ));
        found.truncate(MAX_SKILLS);
    }
    (found, warnings)
}

/// `activate_skill` as this worker announces it: with the skills found, or nothing.
pub fn announce(resolver: &Resolver, paths: &[String]) -> Vec<AnnouncedTool> {
    let (found, warnings) = discover(resolver, paths);
    for w in &warnings {
        tracing::warn!(group = "meta", "skill {w}");
    }
    if found.is_empty() {
        return Vec::new();
    }
    let skills: Vec<Skill> = found.into_iter().map(|f| f.skill).collect();
    tracing::info!(group = "meta", skills = skills.len(), "skills found");
    let def = activate_skill::def(&skills);
    vec![AnnouncedTool {
        name: def.name,
        title: Some(def.title),
        description: def.description,
        input_schema: def.parameters,
        output_schema: None,
        annotations: Default::default(),
        risk: Some(def.risk),
        paths: Vec::new(),
    }]
}

/// Run one `meta` tool (blocking; the worker calls it on a blocking thread).
pub fn run(tool: &str, args: &Value, ctx: &ToolContext) -> Outcome {
    outcome(match tool {
        tools::activate_skill::NAME => activate(args, ctx),
        other => Err(ToolError::new(
            ErrorType::ToolNotFound,
            format!("the meta group has no tool `{other}`"),
        )),
    })
}

/// The skill's instructions and its files.
fn activate(args: &Value, ctx: &ToolContext) -> Result<Outcome, ToolError> {
    let name = args.get("name").and_then(Value::as_str).unwrap_or_default();
    let (found, _) = discover(&ctx.resolver, &ctx.init.skills.paths);
    let Some(skill) = found.into_iter().find(|f| f.skill.name == name) else {
        return Err(ToolError::new(
            ErrorType::FileNotFoundError,
            format!("there is no skill `{name}` (any more)"),
        ));
    };
    let file = format!("{}/{SKILL_FILE}", skill.dir);
    let text = read_text(&ctx.resolver, &file)?;
    let doc = frontmatter::parse(&text).map_err(|e| ToolError::invalid(format!("{file}: {e}")))?;
    let body = truncate::file(doc.body.trim_start_matches(['\r', '\n']), &ctx.init.limits);
    let files = list_files(&ctx.resolver, &skill.dir)?;
    let listing = truncate::listing(&files, &ctx.init.limits);
    let content = format!(
        "{}\n\nSkill directory: {}\nFiles:\n{}",
        body.text.trim_end(),
        skill.dir,
        listing.text
    );
    let mut o = Outcome::ok(content);
    o.truncated = body.truncated.or(listing.truncated);
    o.display = format!("Activated the skill `{name}` ({} files)", files.len());
    o.meta.insert("skill".into(), json!(name));
    o.meta.insert("dir".into(), json!(skill.dir));
    o.meta.insert("files".into(), json!(files.len()));
    Ok(o)
}

/// The subdirectories of `base` that may be skills (as tool paths); a missing `base`
/// has none.
fn skill_dirs(resolver: &Resolver, base: &str, warnings: &mut Vec<String>) -> Vec<String> {
    let fd = match resolver.resolve(base).and_then(|r| resolver.open_dir(&r)) {
        Ok(fd) => fd,
        Err(e) if e.kind == ErrorType::FileNotFoundError => return Vec::new(),
        Err(e) => {
            warnings.push(format!("{base}: {}", e.message));
            return Vec::new();
        }
    };
    let base = base.trim_end_matches('/');
    let mut dirs: Vec<String> = entries(fd)
        .into_iter()
        .filter(|(_, kind)| *kind != rustix::fs::FileType::RegularFile)
        .map(|(name, _)| format!("{base}/{name}"))
        .collect();
    dirs.sort();
    dirs
}

/// The skill `file` describes, `Ok(None)` when there is no such file (not a skill).
fn read_skill(resolver: &Resolver, file: &str) -> Result<Option<Skill>, String> {
    let text = match read_text(resolver, file) {
        Ok(t) => t,
        Err(e) if e.kind == ErrorType::FileNotFoundError => return Ok(None),
        Err(e) if e.kind == ErrorType::InvalidParams && e.message.contains("directory") => {
            return Ok(None);
        }
        Err(e) => return Err(e.message),
    };
    let doc = frontmatter::parse(&text).map_err(|e| e.to_string())?;
    let field = |k: &str| {
        doc.fields
            .get(k)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let name = field("name").ok_or("its front matter has no `name`")?;
    let valid = name.len() <= MAX_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !valid {
        return Err(format!(
            "the name `{}` is not 1 to {MAX_NAME} letters, digits, `-`, `_` or `.`",
            name.chars().take(80).collect::<String>()
        ));
    }
    let description = field("description").ok_or("its front matter has no `description`")?;
    let description: String = description
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(MAX_DESCRIPTION)
        .collect();
    Ok(Some(Skill { name, description }))
}

/// A text file of the workspace, confined, at most [`MAX_SKILL_FILE`] bytes, lossily
/// UTF-8.
fn read_text(resolver: &Resolver, file: &str) -> Result<String, ToolError> {
    let r = resolver.resolve(file)?;
    let f = resolver.open_read(&r)?;
    let mut bytes = Vec::new();
    f.take(MAX_SKILL_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ToolError::internal(format!("{file}: {e}")))?;
    if bytes.len() as u64 > MAX_SKILL_FILE {
        return Err(ToolError::invalid(format!(
            "{file} is larger than {MAX_SKILL_FILE} bytes"
        )));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The files of a skill directory, relative to it, sorted; directories end in `/`.
/// Symlinks are listed, not followed; `.git` is not entered.
fn list_files(resolver: &Resolver, dir: &str) -> Result<Vec<String>, ToolError> {
    let mut out = Vec::new();
    let mut pending = vec![(String::new(), 1usize)];
    while let Some((rel, depth)) = pending.pop() {
        let path = if rel.is_empty() {
            dir.to_owned()
        } else {
            format!("{dir}/{rel}")
        };
        let fd = resolver.open_dir(&resolver.resolve(&path)?)?;
        for (name, kind) in entries(fd) {
            if out.len() >= LIST_MAX {
                break;
            }
            let shown = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            if kind == rustix::fs::FileType::Directory {
                out.push(format!("{shown}/"));
                if depth < LIST_DEPTH && name != ".git" {
                    pending.push((shown, depth + 1));
                }
            } else {
                out.push(shown);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The entries of a directory (names that are UTF-8, without `.` and `..`), with
/// their types as the directory reports them (symlinks not followed).
fn entries(fd: OwnedFd) -> Vec<(String, rustix::fs::FileType)> {
    let Ok(dir) = rustix::fs::Dir::read_from(&fd) else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_str().ok()?.to_owned();
            (name != "." && name != "..").then(|| (name, e.file_type()))
        })
        .collect()
}

#[cfg(test)]
mod tests;
