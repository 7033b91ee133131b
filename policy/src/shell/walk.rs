//! The walk over the syntax tree, each node kind by a handler written for it (an
//! allow-list). Here: the entry ([`analyze`]: limits, parse, the raw scan for what the
//! tree does not show), the walker's state and the hazards it records. The handlers:
//! lists, pipelines and redirected statements in [`statements`], compound commands
//! (`if`, loops, `case`, functions) in [`compound`] with the flow of which variables
//! hold integers in [`flow`], simple commands in [`command`], words, expansions and
//! arithmetic in [`expand`].

use std::cell::RefCell;
use std::ops::Range;

use tree_sitter::{Node, Parser, Tree};

use super::check::{self, Finding, Landmarks};
use super::vars::{SafeVars, is_integer, is_name, is_numeric_special};
use super::word::{self, Word, WordBuilder};
use super::{Analysis, Part, Via};
use crate::hazards::{self, Hazard, Paths};

mod command;
mod compound;
mod expand;
mod flow;
mod redirect;
mod statements;

/// Deeper than this, nesting is not read (and the command asks).
const MAX_DEPTH: usize = 64;
/// A syntax tree deeper than this is not walked at all (every walk stays far from
/// the end of a thread's stack).
const MAX_TREE_DEPTH: usize = 256;
/// Longer commands are not read (and ask): real ones are a few KiB.
const MAX_COMMAND: usize = 128 * 1024;
/// Raw-scan findings placed in parts; past that one more changes nothing.
const MAX_FINDINGS: usize = 1024;
/// `sh -c` scripts inside scripts are read this many levels deep.
const MAX_SCRIPT_DEPTH: usize = 3;

/// Reserved words bash never runs as a program name.
const RESERVED: &[&str] = &[
    "if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do",
    "done", "in", "function", "{", "}", "!", "[[", "]]",
];

/// Tokens the statement handlers expect between their statements.
const TOKENS: &[&str] = &[
    ";", "&", "&&", "||", "|", "|&", "\n", ";;", ";&", ";;&", "{", "}", "(", ")", "((", "))", "!",
    "if", "then", "elif", "else", "fi", "while", "until", "do", "done", "for", "select", "in",
    "case", "esac", "function", "[[", "]]", "[", "]", "$(", "`", "<(", ">(",
];

thread_local! {
    /// One parser per thread: building one loads the grammar.
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
}

fn parse(command: &str) -> Option<Tree> {
    PARSER.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            let mut parser = Parser::new();
            parser
                .set_language(&tree_sitter_bash::LANGUAGE.into())
                .ok()?;
            *slot = Some(parser);
        }
        slot.as_mut()?.parse(command, None)
    })
}

pub(super) fn analyze(command: &str, paths: &dyn Paths, script_depth: usize) -> Analysis {
    let mut out = Analysis::default();
    if let Err(why) = check::text(command) {
        out.undecidable = Some(why);
        return out;
    }
    if command.len() > MAX_COMMAND {
        out.undecidable = Some(format!(
            "the command is longer than the policy reads ({MAX_COMMAND} bytes)"
        ));
        return out;
    }
    let Some(tree) = parse(command) else {
        out.undecidable = Some("the shell grammar could not be loaded".into());
        return out;
    };
    let root = tree.root_node();
    if check::deeper_than(root, MAX_TREE_DEPTH) {
        out.undecidable = Some("the command nests too deeply".into());
        return out;
    }
    let mut w = Walker {
        src: command,
        paths,
        out,
        stack: Vec::new(),
        vars: SafeVars::default(),
        depth: 0,
        script_depth,
        wrapped: Default::default(),
    };
    if root.has_error() {
        w.undecidable("the command does not parse as bash");
    }
    if let Err(why) = check::gaps(root, command) {
        w.undecidable(why);
    }
    let marks = w.landmarks(root);
    w.stmt(root);
    for (at, finding) in check::scan(command, &marks).into_iter().take(MAX_FINDINGS) {
        let name = match finding {
            Finding::CommandSubstitution => "command substitution",
            Finding::ProcessSubstitution => "process substitution",
            Finding::UnparsedArithmetic => "arithmetic the policy cannot read",
            Finding::UnparsedExpansion => "expansion the policy cannot read",
        };
        w.hazard_at(at, Hazard::structural(name));
    }
    w.out
}

struct Walker<'a> {
    src: &'a str,
    paths: &'a dyn Paths,
    out: Analysis,
    /// The parts we are inside, innermost last.
    stack: Vec<usize>,
    vars: SafeVars,
    depth: usize,
    script_depth: usize,
    /// A part → the part of the command its wrapper runs (`env X=1 ls` → `ls`).
    wrapped: std::collections::HashMap<usize, usize>,
}

impl Walker<'_> {
    fn text(&self, n: Node<'_>) -> &str {
        &self.src[n.byte_range()]
    }

    fn undecidable(&mut self, why: impl Into<String>) {
        if self.out.undecidable.is_none() {
            self.out.undecidable = Some(why.into());
        }
    }

    /// A hazard of the innermost part we are in (or of the command).
    fn hazard(&mut self, h: Hazard) {
        match self.stack.last() {
            Some(&i) => push_unique(&mut self.out.parts[i].hazards, h),
            None => push_unique(&mut self.out.hazards, h),
        }
    }

    /// A hazard at a byte offset: it belongs to the innermost part around it.
    fn hazard_at(&mut self, at: usize, h: Hazard) {
        let inner = self
            .out
            .parts
            .iter()
            .enumerate()
            .filter(|(_, p)| p.via == Via::Command && p.span.contains(&at))
            .min_by_key(|(_, p)| p.span.len())
            .map(|(i, _)| i);
        match inner {
            Some(i) => push_unique(&mut self.out.parts[i].hazards, h),
            None => push_unique(&mut self.out.hazards, h),
        }
    }

    /// Where the raw scan must look, from one pass over the tree. Here-documents are
    /// checked on the way: their extent must be the one bash sees.
    fn landmarks(&mut self, root: Node<'_>) -> Landmarks {
        let mut m = Landmarks::default();
        let mut todo = vec![root];
        while let Some(n) = todo.pop() {
            let r = n.byte_range();
            // bash deletes `\<newline>` before it reads names and operators: in
            // `$((a\<newline>b))` it reads the variable `ab`, where the parser's nodes
            // show `a` and `b`. Inside what holds names, arithmetic or operators, the
            // tree cannot show bash's reading: ask.
            let joins = matches!(
                n.kind(),
                "expansion" | "arithmetic_expansion" | "subscript" | "c_style_for_statement"
            ) || (n.kind() == "compound_statement" && first_token(n) == Some("(("));
            if joins && self.text(n).contains("\\\n") {
                self.undecidable("a line continuation inside an expansion or arithmetic");
            }
            match n.kind() {
                "raw_string" | "ansi_c_string" | "comment" if quotes_as_written(n) => {
                    m.inert.push(r);
                }
                "expansion" => {
                    m.expansions.insert(r.start);
                }
                "arithmetic_expansion" => {
                    m.arithmetic.insert(r.start);
                }
                "heredoc_redirect" => match check::heredoc(n, self.src) {
                    Ok(h) => {
                        if let Some(body) = h.body.filter(|_| h.quoted) {
                            m.inert.push(body);
                        }
                    }
                    Err(why) => self.undecidable(why),
                },
                _ => {}
            }
            if n.is_missing() || n.is_error() {
                self.undecidable(format!("the parser could not read `{}`", self.text(n)));
            }
            let mut c = n.walk();
            todo.extend(n.children(&mut c));
        }
        m
    }
}

/// Node kinds in which bash reads `'…'`, `$'…'` and `#` as the parser does: the
/// command level, where single quotes quote and nothing inside them expands.
///
/// Everywhere else bash's reading differs by context, and the parser's does not: inside
/// a double-quoted string, a `$"…"`, an unquoted here-document body, arithmetic and
/// subscripts, a `'` is a plain character and `$(…)` inside it runs (`"${x:-'$(c)'}"`,
/// `$(('$(c)'))`, `a['$(c)']=1`); inside `${…}` it depends on the operator and on where
/// the `${…}` sits. So a quoted string is inert to the raw scan only when every node
/// around it is one of these; elsewhere its text is scanned like any other (a
/// substitution in it asks, even where bash would not have run it).
const QUOTING_KINDS: &[&str] = &[
    "program",
    "list",
    "pipeline",
    "redirected_statement",
    "command",
    "command_name",
    "concatenation",
    "file_redirect",
    "herestring_redirect",
    "heredoc_redirect",
    "variable_assignment",
    "variable_assignments",
    "declaration_command",
    "unset_command",
    "for_statement",
    "case_statement",
    "case_item",
    "if_statement",
    "elif_clause",
    "else_clause",
    "while_statement",
    "do_group",
    "subshell",
    "function_definition",
    "negated_command",
    "command_substitution",
    "process_substitution",
    "array",
];

/// Does bash take this `'…'`, `$'…'` or comment as the quoting the parser took it
/// for? Only when every node around it is at the command level ([`QUOTING_KINDS`];
/// `{ …; }` is, `(( … ))` is arithmetic).
fn quotes_as_written(n: Node<'_>) -> bool {
    let mut up = n.parent();
    while let Some(p) = up {
        let command_level = QUOTING_KINDS.contains(&p.kind())
            || (p.kind() == "compound_statement" && first_token(p) != Some("(("));
        if !command_level {
            return false;
        }
        up = p.parent();
    }
    true
}

/// At most this many distinct hazards are kept per part: one is enough to ask, and a
/// command made of thousands must not cost quadratic time.
const MAX_HAZARDS: usize = 64;

fn push_unique(list: &mut Vec<Hazard>, h: Hazard) {
    if list.len() < MAX_HAZARDS && !list.contains(&h) {
        list.push(h);
    }
}

fn first_token<'a>(n: Node<'a>) -> Option<&'a str> {
    n.child(0).filter(|c| !c.is_named()).map(|c| c.kind())
}

fn has_token(n: Node<'_>, kind: &str) -> bool {
    let mut c = n.walk();
    n.children(&mut c)
        .any(|k| !k.is_named() && k.kind() == kind)
}

/// The operator of an expression node: its `operator` field, else its first token.
fn op_text(n: Node<'_>, src: &str) -> String {
    if let Some(o) = n.child_by_field_name("operator") {
        return src[o.byte_range()].to_owned();
    }
    let mut c = n.walk();
    n.children(&mut c)
        .find(|k| !k.is_named() || k.kind() == "test_operator")
        .map(|k| src[k.byte_range()].to_owned())
        .unwrap_or_default()
}

/// A newline in `gap` that is not a line continuation.
fn bare_newline(gap: &str) -> bool {
    gap.match_indices('\n')
        .any(|(i, _)| !gap[..i].ends_with('\\'))
}

/// `{name}` right before a redirection: bash stores a new descriptor in `name`.
fn is_fd_variable(t: &str) -> bool {
    t.strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .is_some_and(is_name)
}

/// Could this value start with `(` when bash expands it?
fn may_start_with_paren(w: &Word) -> bool {
    w.prefix().starts_with('(') || (w.prefix().is_empty() && !w.literal())
}

fn literal_word(t: &str, span: Range<usize>) -> Word {
    Word {
        text: t.to_owned(),
        known: t.len(),
        splits: false,
        numeric: false,
        span,
    }
}
