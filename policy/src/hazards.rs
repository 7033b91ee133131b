//! The hazard table: programs that run code or write files through their arguments,
//! shells and interpreters, commands that run other commands, and environment
//! variables that change what runs. One place, documented in docs/POLICY.md; add a
//! program by adding a row to [`PROGRAMS`] (and a line to that document).
//!
//! Argument hazards ([`Kind::Argument`]) turn an allowed simple command into an ask
//! unless the rule that allowed it sets `hazards = "allow"`. Structural hazards
//! ([`Kind::Structural`]: a nested shell script, inline interpreter code, `eval`…)
//! always do, because no prefix of words can say what such code does.
//!
//! The parts: the table of programs and what asks in each ([`table`], the checks in
//! [`programs`], [`git`], [`text`], [`transfer`], [`tools`], reading their options with
//! [`options`]), the lists of shells, interpreters, wrappers and builtins ([`names`],
//! checked in [`builtins`]), and the environment variables that change what runs
//! ([`environment`]).

use std::fmt;
use std::ops::Range;

use crate::word::Word;
use builtins::{builtin, inline_code, shell, shell_in_arguments, wrapped};

mod builtins;
mod environment;
mod git;
mod names;
mod options;
mod programs;
mod table;
mod text;
mod tools;
mod transfer;

pub use environment::is_env_hazard;
pub use names::{
    CODE_BUILTINS, INTERPRETERS, NAME_BUILTINS, NEUTRAL, RUN_SHELLS, SHELLS, WRAPPERS,
};
pub use table::{PROGRAMS, Program};

/// Something in a command that a prefix of its words does not show.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Hazard {
    /// A short name: `command substitution`, `git -c`, `sets EDITOR`.
    pub name: String,
    /// Whether a rule can lift it.
    pub kind: Kind,
}

/// What lifts a hazard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Code nobody can read from the words: always asks.
    Structural,
    /// An argument or variable of an allowed program: `hazards = "allow"` lifts it.
    Argument,
}

impl Kind {
    /// Hazards a rule's `hazards = "allow"` lifts.
    pub fn overridable(self) -> bool {
        self == Kind::Argument
    }
}

impl Hazard {
    /// A hazard no rule lifts.
    pub fn structural(name: impl Into<String>) -> Hazard {
        Hazard {
            name: name.into(),
            kind: Kind::Structural,
        }
    }

    /// A hazard `hazards = "allow"` lifts.
    pub fn argument(name: impl Into<String>) -> Hazard {
        Hazard {
            name: name.into(),
            kind: Kind::Argument,
        }
    }
}

impl fmt::Display for Hazard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// Where paths land: the hazards of writing "outside the workspace" need to know.
pub trait Paths {
    /// True when `path` (as written in the command, relative to its cwd) may be
    /// outside every workspace root. Unknown text (`$X`, `~`) counts as outside.
    fn outside(&self, path: &str) -> bool;
}

/// What the table found in one simple command.
#[derive(Debug, Default)]
pub struct Findings {
    /// Everything found, each once.
    pub hazards: Vec<Hazard>,
    /// Ranges of the arguments (indexes after the program word) that form commands
    /// of their own (`env X=1 ls`, `find -exec rm {} ;`): each is decided as a part.
    pub nested: Vec<Range<usize>>,
    /// The literal script of `sh -c SCRIPT`, to be read as commands of their own.
    pub script: Option<String>,
}

impl Findings {
    fn arg(&mut self, name: impl Into<String>) {
        self.hazards.push(Hazard::argument(name));
    }

    fn structural(&mut self, name: impl Into<String>) {
        self.hazards.push(Hazard::structural(name));
    }
}

/// One program's arguments, with the helpers its check needs.
pub struct Args<'a> {
    /// The program's name (its last path component).
    pub prog: &'a str,
    /// The words after the program.
    pub words: &'a [Word],
    /// Where paths land, for the checks about writing outside the workspace.
    pub paths: &'a dyn Paths,
}

impl Args<'_> {
    fn text(&self, i: usize) -> Option<&str> {
        self.words.get(i).map(|w| w.text.as_str())
    }

    fn texts(&self) -> impl Iterator<Item = &str> {
        self.words.iter().map(|w| w.text.as_str())
    }

    /// A path value that may lie outside the workspace (`-` is a standard stream).
    fn outside(&self, value: Option<&Word>) -> bool {
        match value {
            None => false,
            Some(w) if w.text == "-" => false,
            Some(w) if !w.literal() => true,
            Some(w) => self.paths.outside(&w.text),
        }
    }

    fn outside_text(&self, value: &str) -> bool {
        value != "-" && self.paths.outside(value)
    }
}

/// The last path component of a program word (`/bin/sh` → `sh`).
pub fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// A shell (`bash`, `/bin/sh`).
pub fn is_shell(prog: &str) -> bool {
    SHELLS.contains(&basename(prog))
}

/// An interpreter's row: `python3.12` is `python`, `perl5.36` is `perl`.
fn interpreter(
    prog: &str,
) -> Option<&'static (&'static str, &'static str, &'static [&'static str])> {
    let name = basename(prog);
    INTERPRETERS.iter().find(|(n, _, _)| {
        name == *n
            || name
                .strip_prefix(n)
                .is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit() || c == '.'))
    })
}

/// Runs code it reads from its stdin or arguments: a shell or an interpreter.
pub fn is_shell_or_interpreter(prog: &str) -> bool {
    is_shell(prog) || interpreter(prog).is_some()
}

/// A wrapper's row, if `prog` is one.
pub fn wrapper(
    prog: &str,
) -> Option<&'static (&'static str, &'static str, &'static [&'static str], usize)> {
    let name = basename(prog);
    WRAPPERS.iter().find(|(n, _, _, _)| *n == name)
}

/// Does the table know `prog` as running code through its arguments or input?
fn runs_code(prog: &str) -> bool {
    let name = basename(prog);
    is_shell_or_interpreter(prog)
        || wrapper(prog).is_some()
        || program(prog).is_some()
        || CODE_BUILTINS.contains(&name)
        || RUN_SHELLS.iter().any(|(n, _)| *n == name)
}

fn program(prog: &str) -> Option<&'static Program> {
    let name = basename(prog);
    PROGRAMS.iter().find(|p| p.names.contains(&name))
}

/// Everything the table says about a simple command `prog args…`.
pub fn check(prog: &Word, args: &[Word], paths: &dyn Paths) -> Findings {
    let mut f = Findings::default();
    let name = basename(&prog.text);
    let a = Args {
        prog: name,
        words: args,
        paths,
    };
    if CODE_BUILTINS.contains(&prog.text.as_str()) {
        f.structural(prog.text.clone());
    }
    if let Some((_, why)) = RUN_SHELLS.iter().find(|(n, _)| *n == name) {
        f.structural(*why);
    }
    if is_shell(&prog.text) {
        shell(&a, &mut f);
    } else if let Some(row) = interpreter(&prog.text) {
        inline_code(&a, row, &mut f);
    } else if wrapper(&prog.text).is_none() && name != "env" && name != "xargs" {
        shell_in_arguments(&a, &mut f);
    }
    if let Some(row) = wrapper(&prog.text).filter(|_| name != "env") {
        wrapped(&a, row, &mut f);
    }
    builtin(&prog.text, &a, &mut f);
    if let Some(p) = program(&prog.text) {
        for w in args.iter().filter(|w| w.may_be_anything()) {
            f.arg(format!("{name} {} (known only at run time)", w.text));
        }
        (p.check)(&a, &mut f);
    }
    dedup(&mut f.hazards);
    f
}

fn dedup(h: &mut Vec<Hazard>) {
    let mut seen = std::collections::HashSet::new();
    h.retain(|x| seen.insert(x.clone()));
}

#[cfg(test)]
mod tests;
