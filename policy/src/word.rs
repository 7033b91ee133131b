//! A word of a simple command after quote removal: what the shell parser (`shell/`)
//! produces and the hazard table (`hazards/`) reads. A leaf, so that neither imports
//! the other for it.

use std::ops::Range;

/// One word of a simple command after quote removal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Word {
    /// The text after quote removal. Pieces known only when the command runs
    /// (`$HOME`, `$(…)`, a glob, a brace expansion) are kept as written.
    pub text: String,
    /// How many leading bytes of `text` are known now; `text.len()` when all are.
    pub known: usize,
    /// An unquoted expansion: bash may split it into several words of any content.
    pub splits: bool,
    /// Every unknown piece is arithmetic: the word is its known part and a number.
    pub numeric: bool,
    /// Where the word is in the command line.
    pub span: Range<usize>,
}

impl Word {
    /// A word known in full before the command runs.
    pub fn literal(&self) -> bool {
        self.known == self.text.len() && !self.splits
    }

    /// The part of the word known now.
    pub fn prefix(&self) -> &str {
        &self.text[..self.known]
    }

    /// Could bash turn this word into an option (`-x`, `--x=…`) of its program, or into
    /// several words? A word whose known part already fixes it (`src/$x`, `--out=$x`)
    /// cannot.
    pub fn may_be_anything(&self) -> bool {
        if self.literal() || self.numeric {
            return false;
        }
        if self.splits {
            return true;
        }
        let p = self.prefix();
        let fixed_option = p.starts_with('-') && p.contains('=');
        let fixed_path = !p.starts_with('-') && p.contains('/');
        !(fixed_option || fixed_path)
    }
}
