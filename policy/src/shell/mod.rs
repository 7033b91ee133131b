//! `run_command`'s command as bash will run it: its simple commands ("parts"), each
//! with its words after quote removal and its hazards, read from the whole
//! tree-sitter-bash syntax tree (docs/POLICY.md).
//!
//! The walk is an allow-list: every node kind is handled on purpose, and anything else
//! (an error node, a construct a later grammar adds) makes the command undecidable,
//! which asks. Hazards are collected wherever they sit — inside `${…}`, `$((…))`,
//! subscripts, here-documents, `[[ ]]`, `case`, loops and function bodies — and the raw
//! text is scanned too, for what the parser builds no node for.

mod check;
mod vars;
mod walk;
pub mod word;

use std::ops::Range;

use super::hazards::{Hazard, Paths};
use word::Word;

/// How a part came to be decided on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// A simple command of the command line (possibly inside `$(…)`, a loop…).
    Command,
    /// The command a wrapper runs (`env X=1 ls`, `sudo ls`, `find -exec ls {} ;`).
    Wrapper,
    /// A command of a literal `sh -c SCRIPT`.
    Script,
}

/// One simple command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// Its source text.
    pub text: String,
    /// Its words after quote removal: the program first. Assignment prefixes are left
    /// out unless they set an environment hazard; redirections are never words.
    pub words: Vec<Word>,
    /// What it does that its words do not show.
    pub hazards: Vec<Hazard>,
    /// A builtin that runs nothing (`true`, `test`…): needs no rule of its own.
    pub neutral: bool,
    /// The part this one sits in (a substitution's command, a wrapper's).
    pub parent: Option<usize>,
    /// How it is reached (a plain command, a wrapper, a substitution).
    pub via: Via,
    /// Its bytes in the command line.
    pub span: Range<usize>,
}

impl Part {
    /// The words' texts.
    pub fn texts(&self) -> Vec<String> {
        self.words.iter().map(|w| w.text.clone()).collect()
    }

    /// The words re-joined with single spaces: what `command` conditions test.
    pub fn joined(&self) -> String {
        self.texts().join(" ")
    }
}

/// What the policy knows about a command line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Analysis {
    /// Every simple command, in order of appearance.
    pub parts: Vec<Part>,
    /// Hazards outside every simple command (a function definition, `((X))`, `PATH=…`).
    pub hazards: Vec<Hazard>,
    /// Why the command cannot be decided part by part, if it cannot.
    pub undecidable: Option<String>,
    /// Environment hazards the command sets itself (`PATH=…`, `env EDITOR=…`).
    pub env_keys: Vec<String>,
}

impl Analysis {
    /// Every hazard, in a part or not.
    pub fn all_hazards(&self) -> impl Iterator<Item = &Hazard> {
        self.hazards
            .iter()
            .chain(self.parts.iter().flat_map(|p| p.hazards.iter()))
    }

    /// The parts a rule decides (a part without words, such as `>f`, has none).
    pub fn decided(&self) -> impl Iterator<Item = (usize, &Part)> {
        self.parts
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.words.is_empty())
    }
}

/// Read `command` as bash will. `paths` tells the hazard table where paths land.
pub fn analyze(command: &str, paths: &dyn Paths) -> Analysis {
    walk::analyze(command, paths, 0)
}

#[cfg(test)]
mod tests;
