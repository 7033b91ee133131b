//! The walk per node kind and per hazard.

use super::*;
use crate::hazards::Kind;

/// Paths under `/ws` (the workspace) or relative ones that do not climb are inside.
pub(crate) struct Ws;

impl Paths for Ws {
    fn outside(&self, p: &str) -> bool {
        p.starts_with('~')
            || p.contains('$')
            || p.contains("..")
            || p.starts_with('/') && !p.starts_with("/ws")
    }
}

fn a(cmd: &str) -> Analysis {
    analyze(cmd, &Ws)
}

fn hazards(cmd: &str) -> Vec<String> {
    a(cmd).all_hazards().map(|h| h.name.clone()).collect()
}

fn words(cmd: &str) -> Vec<Vec<String>> {
    a(cmd).decided().map(|(_, p)| p.texts()).collect()
}

fn w(s: &str) -> Vec<String> {
    s.split(' ').map(String::from).collect()
}

#[track_caller]
fn clean(cmd: &str) {
    let x = a(cmd);
    assert!(x.undecidable.is_none(), "{cmd:?}: {:?}", x.undecidable);
    let h: Vec<&str> = x.all_hazards().map(|h| h.name.as_str()).collect();
    assert!(h.is_empty(), "{cmd:?}: {h:?}");
}

#[track_caller]
fn has(cmd: &str, needle: &str) {
    let h = hazards(cmd);
    assert!(
        h.iter().any(|x| x.contains(needle)),
        "{cmd:?}: {h:?} lacks {needle:?}"
    );
}

#[track_caller]
fn undecidable(cmd: &str) {
    assert!(
        a(cmd).undecidable.is_some(),
        "{cmd:?} should be undecidable"
    );
}

// ---- statements ----

#[test]
fn lists_pipelines_and_groups_split_into_parts() {
    assert_eq!(
        words("git status; rm -rf ~"),
        [w("git status"), w("rm -rf ~")]
    );
    assert_eq!(words("a && b || c"), [w("a"), w("b"), w("c")]);
    assert_eq!(words("a | b |& c"), [w("a"), w("b"), w("c")]);
    assert_eq!(words("a & b"), [w("a"), w("b")]);
    assert_eq!(words("{ a; b; }"), [w("a"), w("b")]);
    assert_eq!(words("(a; b)"), [w("a"), w("b")]);
    assert_eq!(words("! a"), [w("a")]);
    assert_eq!(words("a\nb"), [w("a"), w("b")]);
    clean("git status; cargo test && ls | wc -l");
}

#[test]
fn compound_statements() {
    assert_eq!(
        words("if a; then b; elif c; then d; else e; fi"),
        [w("a"), w("b"), w("c"), w("d"), w("e")]
    );
    assert_eq!(words("while a; do b; done"), [w("a"), w("b")]);
    assert_eq!(words("until a; do b; done"), [w("a"), w("b")]);
    assert_eq!(words("for f in x y; do wc $f; done")[0][0], "wc");
    assert_eq!(words("select x in a; do b; done"), [w("b")]);
    assert_eq!(words("case $x in a|b) c;; *) d;; esac"), [w("c"), w("d")]);
    assert_eq!(
        words("for ((i=0; i<3; i++)); do echo $i; done")[0][0],
        "echo"
    );
    clean("if [ -f x ]; then cat x; fi");
    clean("for i in 1 2 3; do echo $((i * 2)); done");
    clean("for ((i=0; i<3; i++)); do echo $((i + 1)); done");
    clean("case x in x) echo y;; esac");
}

#[test]
fn test_commands_are_transparent() {
    assert!(words("[[ -d src ]]").is_empty());
    assert_eq!(words("[ -f x ] && ls"), [w("ls")]);
    clean("[[ $x == y* && -n $z ]]");
    clean("[[ a =~ ^(b|c)$ ]]");
    has("[[ $X -eq 1 ]]", "arithmetic reads `X`");
    has("[[ X -gt 1 ]]", "arithmetic reads `X`");
    has("[[ -v a[i] ]]", "subscript");
    has("[ -v \"$X\" ]", "subscript");
    clean("[ \"$X\" -eq 1 ]");
}

#[test]
fn neutral_builtins_and_bare_assignments() {
    let x = a("true; false; : ok; test -f x; cargo test || true");
    assert_eq!(x.decided().filter(|(_, p)| p.neutral).count(), 5);
    assert!(words("x=1").is_empty());
    assert!(words("x=1 y=2").is_empty());
    assert!(words("export A=1 B").is_empty());
    assert_eq!(
        words("FOO=1 cargo test"),
        [w("cargo test")],
        "a plain prefix is not a word"
    );
    assert_eq!(words("LC_ALL=C git status"), [w("git status")]);
    assert_eq!(words("EDITOR=vim git commit"), [w("EDITOR=vim git commit")]);
    has("EDITOR=vim git commit", "sets EDITOR");
    has("PATH=/tmp/x; ls", "sets PATH");
    has("export PATH=/tmp; ls", "sets PATH");
    assert_eq!(words("export -n X")[0], w("export -n X"));
}

#[test]
fn functions_and_code_builtins() {
    for (cmd, h) in [
        ("f() { ls; }; f", "function definition"),
        ("function f { ls; }", "function definition"),
        (":(){ :|:& };:", "self-calling function"),
        ("eval ls", "eval"),
        ("exec ls", "exec"),
        ("source x.sh", "source"),
        (". x.sh", "."),
        ("trap 'touch M' EXIT", "trap"),
        ("alias ls='touch M'", "alias"),
        ("coproc ls", "coproc"),
        ("enable -f ./x.so x", "enable -f"),
        ("hash -p ./x ls", "hash -p"),
        ("set -k", "set -k"),
        ("set -o keyword", "set -o keyword"),
        ("shopt -s extglob", "shopt extglob"),
        ("shopt -s expand_aliases", "shopt expand_aliases"),
    ] {
        has(cmd, h);
    }
    clean("set -euo pipefail");
    clean("shopt -s nullglob");
    assert_eq!(
        words("f() { ls; }"),
        [w("ls")],
        "a function body's commands are parts"
    );
}

// ---- words ----

#[test]
fn quote_removal() {
    for (cmd, want) in [
        ("'r'm -rf x", "rm -rf x"),
        ("\\rm -rf x", "rm -rf x"),
        ("\"rm\" -rf x", "rm -rf x"),
        ("'l's  -la", "ls -la"),
        ("$'\\x6c\\x73' -la", "ls -la"),
        ("echo 'a; b'", "echo a; b"),
        ("echo \"a\\\"b\"", "echo a\"b"),
        ("echo a\\ b", "echo a b"),
        ("cargo test \\\n  --all", "cargo test --all"),
    ] {
        let x = a(cmd);
        let joined = x.decided().next().map(|(_, p)| p.joined());
        assert_eq!(joined.as_deref(), Some(want), "{cmd:?}");
    }
    clean("echo 'single $(quoted)' \"$HOME\" $'tab\\t'");
}

#[test]
fn known_and_unknown_words() {
    let x = a("ls src/*.rs *.md ~/x {a,b} \"$HOME\" $X");
    let p = &x.parts[0];
    let lit: Vec<bool> = p.words.iter().map(|w| w.literal()).collect();
    assert_eq!(lit, [true, false, false, false, false, false, false]);
    let anything: Vec<bool> = p.words.iter().map(|w| w.may_be_anything()).collect();
    assert_eq!(anything, [false, false, true, true, true, true, true]);
    assert!(p.words[6].splits);
    has("$X -la", "program name known only at run time");
    has("l? -la", "program name known only at run time");
    undecidable("{ls,-la}");
    has("\"$(echo ls)\" -la", "command substitution");
}

#[test]
fn texts_bash_reads_differently_are_undecidable() {
    for cmd in [
        "ls\r-la",
        "ls\u{0}; touch M",
        "cargo test\\\n--all",
        "l\\\ns -la",
        "echo \\$(touch M)",
        "echo $((echo a); (touch M))",
        "ls !(x)",
        "ls {fd}>f",
        "cat <<E\"O\"F\n$(x)\nEOF",
        "cat <<EOF\nbody",
        "echo 'unterminated",
        "git status (",
        "ls <>f",
        "if x",
        "1a=x/../../usr/bin/touch ls",
        "cat <<\"EOF\n\"\n$(touch M)\nEOF",
    ] {
        undecidable(cmd);
    }
    // A no-break space is a word character to bash, and to the policy.
    assert_eq!(
        words("ls\u{a0};touch M"),
        [vec!["ls\u{a0}".to_string()], w("touch M")]
    );
}

#[test]
fn ansi_c_and_translated_strings() {
    assert_eq!(
        words("ls $'\\'; touch M; #'"),
        [vec!["ls".to_string(), "'; touch M; #".to_string()]]
    );
    has("echo $\"hi\"", "translated string");
    clean("grep \"\\.rs$\" f");
    assert_eq!(words("echo \"a$\" \"$\""), [w("echo a$ $")]);
    let x = a("echo $'a\\0b'");
    assert!(
        !x.parts[0].words[1].literal(),
        "NUL truncates: value not known"
    );
}

// ---- redirections ----

#[test]
fn redirections() {
    clean("git status 2>/dev/null");
    clean("git status >/dev/null 2>&1");
    clean("ls >&2");
    clean("ls 2>&-");
    clean("wc -l < input.txt");
    clean("cat <<'EOF'\n$(touch M) `x`\nEOF");
    clean("cat <<\\EOF\n$(touch M)\nEOF");
    clean("cat <<-\"EOF\"\n\t$(x)\n\tEOF");
    clean("cat <<EOF\nplain $HOME\nEOF");
    clean("grep x <<< \"$y\"");
    assert_eq!(words("cat < f > /dev/null"), [w("cat")]);
    for (cmd, to) in [
        ("git status > ~/.bashrc", "~/.bashrc"),
        ("ls >> log", "log"),
        ("ls &> out", "out"),
        ("ls &>> out", "out"),
        ("ls 2> err", "err"),
        ("ls >| f", "f"),
        ("ls >& f", "f"),
        ("ls > $F", "$F"),
        ("{ ls; } > f", "f"),
        ("ls > /dev/nul?", "/dev/nul?"),
    ] {
        has(cmd, &format!("redirection to `{to}`"));
    }
}

#[test]
fn heredocs() {
    has("cat <<EOF\n`touch M`\nEOF", "command substitution");
    has("cat <<EOF\n$(touch M)\nEOF", "command substitution");
    has(
        "cat <<EOF\n$((X))\nEOF",
        "arithmetic the policy cannot read",
    );
    has("cat <<EOF\n${!X}\nEOF", "indirect expansion");
    has("cat <<EOF\n${X@P}\nEOF", "prompt expansion");
    has("bash <<'EOF'\ntouch M\nEOF", "here-document into a shell");
    has("python3 <<< 'import os'", "here-document into a shell");
    has("cat <<EOF | sh\nx\nEOF", "pipe into a shell");
    assert_eq!(
        words("cat <<EOF && touch M\nx\nEOF"),
        [w("cat"), w("touch M")]
    );
}

// ---- substitutions and expansions ----

#[test]
fn substitutions_anywhere() {
    for cmd in [
        "ls $(touch M)",
        "ls `touch M`",
        "ls \"$(touch M)\"",
        "ls ${PATH#$(touch M)}",
        "ls ${PATH%`touch M`}",
        "echo ${PATH:+`touch M`}",
        "echo ${PATH/a/$(touch M)}",
        "echo ${PATH^$(touch M)}",
        "echo ${PATH,$(touch M)}",
        "echo ${PATH:-$(touch M)}",
        "echo ${a[$(touch M)]}",
        "echo $(( $(touch M) ))",
        "a[$(touch M)]=1",
        "x=$(touch M)",
        "[[ $(touch M) ]]",
        "case $(touch M) in *) ;; esac",
        "for i in $(touch M); do :; done",
        "f() { ls $(touch M); }",
        "echo \"${x:-$(touch M)}\"",
        "ls > $(touch M)",
        "cat <<< $(touch M)",
    ] {
        has(cmd, "command substitution");
    }
    has("diff <(ls) >(wc)", "process substitution");
    clean("echo '$(x)' \"\\$(y)\"");
}

/// A command that must ask: undecidable, or with a hazard.
#[track_caller]
fn asks(cmd: &str) {
    let x = a(cmd);
    assert!(
        x.undecidable.is_some() || x.all_hazards().next().is_some(),
        "{cmd:?} reads as clean, but bash runs its substitution"
    );
}

/// Quotes are read as bash reads them where the substitution sits: a `'` inside a
/// double-quoted `${…}`, a here-document body, arithmetic or a subscript does not
/// quote, and bash deletes `\<newline>` before it reads anything else. Each of these
/// makes bash run `touch M` (bash 5.2, checked by hand and by the differential test).
#[test]
fn quotes_bash_does_not_take_for_quotes() {
    for cmd in [
        "echo \"${x:-'$(touch M)'}\"",
        "echo \"${x-'$(touch M)'}\"",
        "echo \"${x:='$(touch M)'}\"",
        "echo \"${PWD:+'$(touch M)'}\"",
        "echo \"${x:-'`touch M`'}\"",
        "echo \"${x:-${y:-'$(touch M)'}}\"",
        "echo \"${x:-\"'$(touch M)'\"}\"",
        "echo \"${x:-$'$(touch M)'}\"",
        "echo \"${x:-$\"$(touch M)\"}\"",
        "echo \"${PWD:0:'$(touch M)'}\"",
        "echo ${PWD:0:'$(touch M)'}",
        "echo \"${a['$(touch M)']}\"",
        "echo ${a['$(touch M)']}",
        "echo \"${PWD[$'$(touch M)']}\"",
        "echo $(( '$(touch M)' ))",
        "echo $[ '$(touch M)' ]",
        "(( $'$(touch M)' ))",
        "for ((i='$(touch M)'; i<0;)); do :; done",
        "a['$(touch M)']=1",
        "a[$'$(touch M)']=1",
        "echo \"$'$(touch M)'\"",
        "echo $\"'$(touch M)'\"",
        "echo $\"${x:-'$(touch M)'}\"",
        "cat <<EOF\n${x:-'$(touch M)'}\nEOF",
        "cat <<EOF\n'$(touch M)'\nEOF",
        "cat <<EOF\n$'$(touch M)'\nEOF",
        "for i in 1; do echo \"${x:-'$(touch M)'}\"; done",
        "echo \"${x:-'$(touch M)'}\" | cat",
        "true && grep x \"${x:-'$(touch M)'}\"",
        // Line continuations: between `$` and `(`, `<` and `(`, inside `$((`.
        "echo ${x:-$\\\n(touch M)}",
        "echo \"${x:-$\\\n(touch M)}\"",
        "echo $\\\n(touch M)",
        "echo \"$\\\n(touch M)\"",
        "echo <\\\n(touch M)",
        "echo $(\\\n(x[$(touch M)]))",
        "echo \"$((1+\\\n$(touch M)))\"",
        "cat <<EOF\n$\\\n(touch M)\nEOF",
        "echo $\\\n{x@P}",
        // bash joins names and operators across a continuation; the tree splits them.
        "a=1; b=2; echo $((a\\\nb))",
        "echo \"${x:-a\\\nb}\"",
        "echo \"${x:0:a\\\nb}\"",
        "echo ${a[x\\\ny]}",
        "for ((i=0; i<a\\\nb; i++)); do :; done",
        // Two here-documents on one line: each body is read by its own delimiter.
        "cat <<A <<'B'\n$(touch M)\nA\nx\nB",
        "cat <<'A' <<B\nx\nA\n$(touch M)\nB",
        // A continuation inside a word joins it for bash, not for the parser.
        "echo hi; e\\\nval 'touch M'",
        "echo hi; decl\\\nare DIRSTACK='($(touch M))'",
        // `$'…'` escapes: no `$(` in the text, but bash decodes the value and reads it
        // again in a double-quoted `${…}`, arithmetic and subscripts.
        "echo \"${x:-$'\\x24(touch M)'}\"",
        "echo \"${x:-$'\\x60touch M\\x60'}\"",
        "echo \"${PWD[$'\\x24(touch M)']}\"",
        "echo $(( $'\\x24(touch M)' ))",
        "echo ${a[$'\\x24(touch M)']}",
        "a[$'\\x24(touch M)']=1",
        "[[ $'a[\\x24(touch M)]' -eq 1 ]]",
        "declare -a a=$'(\\x24(touch M))'",
        "cat <<EOF\n${x:-$'\\x24(touch M)'}\nEOF",
        // `[[ -eq ]]` evaluates its operands as arithmetic, quotes or not.
        "[[ 'a[$(touch M)]' -eq 1 ]]",
    ] {
        asks(cmd);
    }
    // What bash does leave alone stays clean.
    for cmd in [
        "echo '$(x)' $'$(y)' \"\\$(z)\"",
        "echo \"a'b\" '$(x)'",
        "x='$(y)'; echo \"$x\"",
        "a=('$(x)')",
        "case a in '$(x)') ;; esac",
        "for i in '$(x)'; do :; done",
        "cat <<'EOF'\n${x:-'$(touch M)'}\nEOF",
        "cat <<'EOF'\n$\\\n(touch M)\nEOF",
        "echo '$\\\n(touch M)'",
        "{ echo '$(x)'; }",
        "(echo '$(x)')",
        "echo a # '$(x)'",
    ] {
        clean(cmd);
    }
}

#[test]
fn substitution_commands_are_parts_of_their_own() {
    let x = a("echo $(rm -rf x) `ls`");
    let texts: Vec<String> = x.decided().map(|(_, p)| p.joined()).collect();
    assert_eq!(texts, ["echo $(rm -rf x) `ls`", "rm -rf x", "ls"]);
    assert_eq!(x.parts[1].parent, Some(0));
    let x = a("env X=1 rm -rf y");
    assert_eq!(x.parts[1].joined(), "rm -rf y");
    assert_eq!(x.parts[1].via, Via::Wrapper);
    let x = a("bash -c 'rm -rf z; ls'");
    let script: Vec<String> = x
        .parts
        .iter()
        .filter(|p| p.via == Via::Script)
        .map(|p| p.joined())
        .collect();
    assert_eq!(script, ["rm -rf z", "ls"]);
}

#[test]
fn dynamic_evaluation() {
    has("echo ${!X}", "indirect expansion");
    has("echo ${X@P}", "prompt expansion");
    clean("echo ${!prefix*} ${!arr[@]} ${X@Q} ${#X} ${X:-d} ${X,,}");
    has("echo $((X))", "arithmetic reads `X`");
    has("echo $[X+1]", "arithmetic reads `X`");
    has("echo $(( $X + 1 ))", "arithmetic reads `X`");
    has("echo ${a[i]}", "arithmetic reads `i`");
    has("echo ${X:i:2}", "arithmetic reads `i`");
    has("((X++))", "arithmetic reads `X`");
    has("let y=X+1", "arithmetic reads `X`");
    has("X=$Y; echo $((X))", "arithmetic reads `X`");
    has("echo $((X)); X=1", "arithmetic reads `X`");
    has("X=1 | true; echo $((X))", "arithmetic reads `X`");
    has("true || X=1; echo $((X))", "arithmetic reads `X`");
    has(
        "while true; do echo $((X)); X=$Y; done",
        "arithmetic reads `X`",
    );
    has("X='a[$(x)]'; echo $((X))", "arithmetic reads `X`");
    has("printf -v 'a[$(x)]' %s y", "subscript");
    has("read 'a[$(x)]'", "subscript");
    has("declare -i x=$Y", "declare -i");
    clean("X=5; echo $((X * 2))");
    clean("echo $((1 + 2)) $[3] $#");
    clean("let i=1 j=i+1");
    clean("x=3; y=4; echo $((x * y))");
    clean("if true; then X=1; else X=2; fi; echo $((X))");
    clean("i=0; while [ $i -lt 3 ]; do i=$((i + 1)); done; echo $((i * 2))");
    has(
        "i=0; while true; do echo $((i)); i=$X; done",
        "arithmetic reads `i`",
    );
    has("i=x$((1)); echo $((i))", "arithmetic reads `i`");
}

// ---- argument hazards through the walk ----

#[test]
fn argument_hazards_are_argument_kind() {
    let x = a("git -c alias.x='!touch M' x");
    let h = &x.parts[0].hazards;
    assert!(
        h.iter()
            .any(|h| h.name == "git -c" && h.kind == Kind::Argument),
        "{h:?}"
    );
    let x = a("bash -c 'ls'");
    assert!(
        x.parts[0]
            .hazards
            .iter()
            .any(|h| h.name == "bash -c" && h.kind == Kind::Structural)
    );
    has("ls | sudo bash", "pipe into a shell");
    has("ls | env python3", "pipe into a shell");
    has("find . -exec touch M \\;", "find -exec");
    assert!(
        a("find . -exec touch M \\;")
            .parts
            .iter()
            .any(|p| p.joined() == "touch M")
    );
    clean("find . -name '*exec*'");
    clean("sed 's/e/E/' README.md");
}

/// `declare`, `typeset` and `local` read a value that starts with `(` again as an
/// array assignment when the variable is an array — whatever quoted it. bash 5.2 runs
/// `touch M` in each of these.
#[test]
fn quoted_compound_assignments_ask() {
    for cmd in [
        "declare DIRSTACK='($(touch M))'",
        "declare a=(1); declare a='($(touch M))'",
        "a=(1); declare a='($(touch M))'",
        "typeset a=\"($(touch M))\"",
        "declare -a a='($(touch M))'",
        "declare -A a='([x]=$(touch M))'",
        "declare -ga a='($(touch M))'",
        "declare -a 'a=($(touch M))'",
        "x='($(touch M))'; declare -a a=$x",
        "x='($(touch M))'; declare DIRSTACK=$x",
        "declare -a $x",
        "f() { local -a a='($(touch M))'; }; f",
        "readonly -a a='($(touch M))'",
    ] {
        has(cmd, "array assignment");
    }
    clean("declare a=(1 2) b=x c=\"x$HOME\"");
    clean("declare -a a=('$(x)')");
}
