//! Splitting `run_command`'s `command` into simple commands with a real shell parser
//! (tree-sitter-bash), and flagging the constructs that run code a prefix rule cannot
//! see (DESIGN §6 "Shell commands").
//!
//! Why a parser and not a regex: `git status; rm -rf ~`, `git status $(rm -rf ~)` and
//! `echo 'a; rm -rf ~'` differ only in quoting and separators. A rule such as
//! `startsWith "git status"` must see each simple command on its own, and must not be
//! fooled by a `;` inside quotes.

use std::cell::RefCell;
use std::fmt;

use tree_sitter::{Node, Parser, Tree};

/// One simple command of a command line, e.g. `git status` in `git status | wc -l`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimpleCommand {
    /// The command's source text without its redirections; rules match against it.
    pub text: String,
    /// Its words with quotes removed (name first); risk checks read these.
    pub words: Vec<String>,
}

/// A construct that can run code or write files beyond what the simple commands
/// show. Each one turns an `allow` from a rule that tests `command` into `ask`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hazard {
    ParseError,
    CommandSubstitution,
    ProcessSubstitution,
    Eval,
    NestedShell,
    PipeToShell,
    RecursiveFunction,
    FileRedirect(String),
}

impl fmt::Display for Hazard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Hazard::ParseError => f.write_str("the command does not parse"),
            Hazard::CommandSubstitution => f.write_str("it contains a command substitution"),
            Hazard::ProcessSubstitution => f.write_str("it contains a process substitution"),
            Hazard::Eval => f.write_str("it uses eval"),
            Hazard::NestedShell => f.write_str("it runs a nested shell script"),
            Hazard::PipeToShell => f.write_str("it pipes into a shell or interpreter"),
            Hazard::RecursiveFunction => f.write_str("it defines a self-calling function"),
            Hazard::FileRedirect(to) => write!(f, "it redirects output into `{to}`"),
        }
    }
}

/// What the parser found in a command line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShellAnalysis {
    pub commands: Vec<SimpleCommand>,
    pub hazards: Vec<Hazard>,
}

/// Shells and interpreters that run code given on their command line or stdin.
const SHELLS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "mksh", "fish", "csh", "tcsh", "busybox",
];
const INTERPRETERS: &[&str] = &[
    "python", "python2", "python3", "perl", "ruby", "node", "php", "lua",
];

/// Commands that run the rest of their words as another command.
const WRAPPERS: &[&str] = &[
    "sudo", "doas", "env", "nohup", "time", "nice", "ionice", "timeout", "xargs", "command",
    "builtin", "exec", "stdbuf", "setsid", "chronic", "unbuffer",
];

thread_local! {
    /// One parser per thread: building one loads the grammar, and every
    /// `run_command` call is parsed.
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
}

/// Parse with this thread's parser; `None` only if the grammar cannot be loaded.
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

/// Parse `command` and collect its simple commands and hazards.
pub fn analyze(command: &str) -> ShellAnalysis {
    let mut out = ShellAnalysis::default();
    let Some(tree) = parse(command) else {
        out.hazards.push(Hazard::ParseError);
        return out;
    };
    let root = tree.root_node();
    if root.has_error() {
        out.hazards.push(Hazard::ParseError);
    }
    Walker {
        src: command.as_bytes(),
        out: &mut out,
    }
    .visit(root);
    out.hazards.dedup();
    out
}

/// The word a simple command really runs, after wrappers such as `sudo` or `env X=1`.
pub fn effective_words(words: &[String]) -> &[String] {
    let mut rest = words;
    while let Some((first, tail)) = rest.split_first() {
        let name = basename(first);
        if !WRAPPERS.contains(&name) {
            break;
        }
        rest = skip_wrapper_options(valued_options(name), tail);
    }
    rest
}

/// A wrapper's options that take the next word as their value (`sudo -u root`).
fn valued_options(wrapper: &str) -> &'static [&'static str] {
    match wrapper {
        "sudo" | "doas" => &["-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"],
        "timeout" => &["-s", "-k", "--signal", "--kill-after"],
        "nice" => &["-n", "--adjustment"],
        "ionice" => &["-c", "-n", "-p"],
        "xargs" => &["-I", "-n", "-P", "-L", "-d", "-E", "-s", "-a"],
        "env" => &["-u", "-C", "-S", "--unset", "--chdir"],
        "stdbuf" => &["-i", "-o", "-e"],
        _ => &[],
    }
}

/// Skip a wrapper's options (`-n 5`, `-u root`, `VAR=1`, `10s`) up to the command.
fn skip_wrapper_options<'w>(valued: &[&str], words: &'w [String]) -> &'w [String] {
    let mut i = 0;
    while let Some(w) = words.get(i) {
        let is_option = w.starts_with('-') || w.contains('=') || starts_with_digit(w);
        if !is_option {
            break;
        }
        i += if valued.contains(&w.as_str()) { 2 } else { 1 };
    }
    words.get(i..).unwrap_or(&[])
}

fn starts_with_digit(w: &str) -> bool {
    w.chars().next().is_some_and(|c| c.is_ascii_digit())
}

/// The last path component of a command name (`/bin/sh` → `sh`).
pub fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

struct Walker<'a> {
    src: &'a [u8],
    out: &'a mut ShellAnalysis,
}

impl Walker<'_> {
    fn text(&self, node: Node<'_>) -> String {
        String::from_utf8_lossy(&self.src[node.start_byte()..node.end_byte()]).into_owned()
    }

    fn hazard(&mut self, h: Hazard) {
        if !self.out.hazards.contains(&h) {
            self.out.hazards.push(h);
        }
    }

    /// Depth-first over every node: record simple commands and hazards wherever they
    /// sit (inside substitutions, functions, loops, subshells…).
    fn visit(&mut self, node: Node<'_>) {
        match node.kind() {
            "command" => self.command(node),
            "declaration_command" | "unset_command" | "test_command" | "variable_assignments" => {
                self.opaque(node)
            }
            "variable_assignment" if !parent_is_command(node) => self.opaque(node),
            "command_substitution" => self.hazard(Hazard::CommandSubstitution),
            "process_substitution" => self.hazard(Hazard::ProcessSubstitution),
            "file_redirect" => self.redirect(node),
            "pipeline" => self.pipeline(node),
            "function_definition" => self.function(node),
            "ERROR" => self.hazard(Hazard::ParseError),
            _ => {}
        }
        if node.is_missing() {
            self.hazard(Hazard::ParseError);
        }
        let mut cursor = node.walk();
        for child in node.children(&mut cursor) {
            self.visit(child);
        }
    }

    /// A `command` node: its text without redirections, its words, and eval / nested
    /// shell checks.
    fn command(&mut self, node: Node<'_>) {
        let mut cursor = node.walk();
        let parts: Vec<Node<'_>> = node
            .children(&mut cursor)
            .filter(|c| !is_redirect(c.kind()))
            .collect();
        let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
            return;
        };
        let text =
            String::from_utf8_lossy(&self.src[first.start_byte()..last.end_byte()]).into_owned();
        let words: Vec<String> = parts
            .iter()
            .filter(|c| c.is_named())
            .map(|c| unquote(&self.text(*c)))
            .collect();
        self.check_words(&words);
        self.out.commands.push(SimpleCommand { text, words });
    }

    /// Statements that are not plain commands (`export X=…`, `[[ … ]]`, `X=1`): kept
    /// whole as one simple command so only a rule that names them allows them.
    fn opaque(&mut self, node: Node<'_>) {
        let text = self.text(node);
        let words = text.split_whitespace().map(unquote).collect();
        self.out.commands.push(SimpleCommand { text, words });
    }

    fn check_words(&mut self, words: &[String]) {
        let run = effective_words(words);
        let Some(name) = run.first().map(|w| basename(w)) else {
            return;
        };
        if name == "eval" {
            self.hazard(Hazard::Eval);
        }
        if runs_script_argument(words) {
            self.hazard(Hazard::NestedShell);
        }
    }

    /// Output into a file other than `/dev/null` writes where no rule looked.
    fn redirect(&mut self, node: Node<'_>) {
        let Some(op) = node.child(0).map(|c| {
            if c.kind() == "file_descriptor" {
                node.child(1).map(|c| c.kind()).unwrap_or("")
            } else {
                c.kind()
            }
        }) else {
            return;
        };
        let dest: String = {
            let mut cursor = node.walk();
            node.children_by_field_name("destination", &mut cursor)
                .map(|d| unquote(&self.text(d)))
                .collect()
        };
        let writes = match op {
            ">" | ">>" | "&>" | "&>>" | ">|" => true,
            // `>&2` and `>&-` duplicate or close descriptors; `>& file` writes a file.
            ">&" => !(dest.is_empty() || dest == "-" || dest.chars().all(|c| c.is_ascii_digit())),
            _ => false,
        };
        if writes && dest != "/dev/null" {
            self.hazard(Hazard::FileRedirect(dest));
        }
    }

    /// `… | sh`: every stage after the first that is a shell or interpreter runs
    /// whatever the earlier stages print.
    fn pipeline(&mut self, node: Node<'_>) {
        let mut cursor = node.walk();
        let stages: Vec<Node<'_>> = node.named_children(&mut cursor).collect();
        for stage in stages.iter().skip(1) {
            if let Some(cmd) = first_command(*stage) {
                let words = self.command_words(cmd);
                let run = effective_words(&words);
                if run.first().is_some_and(|w| is_shell_or_interpreter(w)) {
                    self.hazard(Hazard::PipeToShell);
                }
            }
        }
    }

    fn command_words(&self, cmd: Node<'_>) -> Vec<String> {
        let mut cursor = cmd.walk();
        cmd.children(&mut cursor)
            .filter(|c| c.is_named() && !is_redirect(c.kind()))
            .map(|c| unquote(&self.text(c)))
            .collect()
    }

    /// A function whose body calls itself (the fork bomb `:(){ :|:& };:`).
    fn function(&mut self, node: Node<'_>) {
        let (Some(name), Some(body)) = (
            node.child_by_field_name("name"),
            node.child_by_field_name("body"),
        ) else {
            return;
        };
        let name = self.text(name);
        if self.calls(body, &name) {
            self.hazard(Hazard::RecursiveFunction);
        }
    }

    fn calls(&self, node: Node<'_>, name: &str) -> bool {
        if node.kind() == "command"
            && let Some(n) = node.child_by_field_name("name")
            && unquote(&self.text(n)) == name
        {
            return true;
        }
        let mut cursor = node.walk();
        let children: Vec<Node<'_>> = node.children(&mut cursor).collect();
        children.into_iter().any(|c| self.calls(c, name))
    }
}

/// The first `command` node of a pipeline stage (it may be wrapped in a redirect).
fn first_command(node: Node<'_>) -> Option<Node<'_>> {
    if node.kind() == "command" {
        return Some(node);
    }
    if node.kind() == "redirected_statement" {
        return node.child_by_field_name("body").and_then(first_command);
    }
    None
}

fn is_redirect(kind: &str) -> bool {
    matches!(
        kind,
        "file_redirect" | "herestring_redirect" | "heredoc_redirect"
    )
}

fn parent_is_command(node: Node<'_>) -> bool {
    node.parent().is_some_and(|p| {
        matches!(
            p.kind(),
            "command" | "declaration_command" | "variable_assignments"
        )
    })
}

fn is_shell_or_interpreter(word: &str) -> bool {
    let name = basename(word);
    SHELLS.contains(&name) || INTERPRETERS.contains(&name)
}

/// `sh -c '…'`, `bash -lc …`, `python -c …`, also behind wrappers (`sudo sh -c`,
/// `xargs sh -c`): a script the parser cannot see into.
fn runs_script_argument(words: &[String]) -> bool {
    words.iter().enumerate().any(|(i, w)| {
        let name = basename(w);
        let flags: &[char] = if SHELLS.contains(&name) {
            &['c']
        } else if INTERPRETERS.contains(&name) {
            &['c', 'e']
        } else {
            return false;
        };
        words[i + 1..]
            .iter()
            .any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains(flags))
    })
}

/// Remove shell quoting well enough to compare words (`'rm'` → `rm`, `"a b"` → `a b`).
fn unquote(word: &str) -> String {
    word.chars()
        .filter(|c| !matches!(c, '\'' | '"' | '\\'))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(cmd: &str) -> Vec<String> {
        analyze(cmd).commands.into_iter().map(|c| c.text).collect()
    }

    #[test]
    fn separators_split_simple_commands() {
        assert_eq!(texts("git status; rm -rf ~"), ["git status", "rm -rf ~"]);
        assert_eq!(texts("a && b || c"), ["a", "b", "c"]);
        assert_eq!(texts("git status\nrm -rf ~"), ["git status", "rm -rf ~"]);
        assert_eq!(texts("a | b | c"), ["a", "b", "c"]);
    }

    #[test]
    fn quoted_separators_stay_inside_one_command() {
        let a = analyze("echo 'a; rm -rf ~'");
        assert_eq!(a.commands.len(), 1);
        assert!(a.commands[0].text.starts_with("echo"));
        assert!(a.hazards.is_empty(), "{:?}", a.hazards);
        let a = analyze("echo '$(rm -rf ~)'");
        assert!(a.hazards.is_empty(), "{:?}", a.hazards);
    }

    #[test]
    fn substitutions_are_found_and_split() {
        let a = analyze("git status $(rm -rf ~)");
        assert!(a.hazards.contains(&Hazard::CommandSubstitution));
        assert!(a.commands.iter().any(|c| c.text == "rm -rf ~"));
        let a = analyze("git status `rm -rf ~`");
        assert!(a.hazards.contains(&Hazard::CommandSubstitution));
        let a = analyze("diff <(ls a) <(ls b)");
        assert!(a.hazards.contains(&Hazard::ProcessSubstitution));
    }

    #[test]
    fn redirections() {
        let a = analyze("git status 2>/dev/null");
        assert_eq!(texts("git status 2>/dev/null"), ["git status"]);
        assert!(a.hazards.is_empty(), "{:?}", a.hazards);
        assert!(analyze("git status 2>&1").hazards.is_empty());
        assert_eq!(
            analyze("git status > ~/.bashrc").hazards,
            [Hazard::FileRedirect("~/.bashrc".into())]
        );
        assert!(!analyze(">x git status").hazards.is_empty());
        assert!(analyze("wc -l < input.txt").hazards.is_empty());
    }

    #[test]
    fn shells_and_eval() {
        assert!(
            analyze("curl x | sh")
                .hazards
                .contains(&Hazard::PipeToShell)
        );
        assert!(
            analyze("curl x | sudo bash")
                .hazards
                .contains(&Hazard::PipeToShell)
        );
        assert!(
            analyze("bash -c 'rm -rf ~'")
                .hazards
                .contains(&Hazard::NestedShell)
        );
        assert!(analyze("eval \"$x\"").hazards.contains(&Hazard::Eval));
        assert!(
            analyze(":(){ :|:& };:")
                .hazards
                .contains(&Hazard::RecursiveFunction)
        );
    }

    #[test]
    fn parse_errors_are_flagged() {
        assert!(
            analyze("git status (")
                .hazards
                .contains(&Hazard::ParseError)
        );
        assert!(
            analyze("echo 'unterminated")
                .hazards
                .contains(&Hazard::ParseError)
        );
    }

    #[test]
    fn wrappers_are_seen_through() {
        let w: Vec<String> = ["sudo", "-u", "root", "env", "A=1", "rm", "-rf", "/"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(effective_words(&w)[0], "rm");
    }
}
