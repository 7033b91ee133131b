//! The hazard table: programs that run code or write files through their arguments,
//! shells and interpreters, commands that run other commands, and environment
//! variables that change what runs. One place, documented in docs/POLICY.md; add a
//! program by adding a row to [`PROGRAMS`] (and a line to that document).
//!
//! Argument hazards ([`Kind::Argument`]) turn an allowed simple command into an ask
//! unless the rule that allowed it sets `hazards = "allow"`. Structural hazards
//! ([`Kind::Structural`]: a nested shell script, inline interpreter code, `eval`…)
//! always do, because no prefix of words can say what such code does.

use std::fmt;
use std::ops::Range;

use super::shell::word::Word;
use super::{awk, sed};

/// Something in a command that a prefix of its words does not show.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Hazard {
    /// A short name: `command substitution`, `git -c`, `sets EDITOR`.
    pub name: String,
    pub kind: Kind,
}

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
    pub fn structural(name: impl Into<String>) -> Hazard {
        Hazard {
            name: name.into(),
            kind: Kind::Structural,
        }
    }

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
    pub prog: &'a str,
    pub words: &'a [Word],
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

/// A program whose arguments can run code or write files.
pub struct Program {
    pub names: &'static [&'static str],
    /// What asks, in words (docs/POLICY.md shows the same list).
    pub summary: &'static str,
    check: fn(&Args<'_>, &mut Findings),
}

/// The argument hazards per program.
pub static PROGRAMS: &[Program] = &[
    Program {
        names: &["git"],
        summary: "-c, --config-env, --exec-path=, --git-dir, -C/--work-tree outside the workspace, \
                  --upload-pack, --receive-pack, -u (clone, ls-remote), --exec, --extcmd, \
                  -x/--exec (rebase), --output, -o (format-patch, archive), -O (grep), \
                  --template, the send-email/instaweb/daemon command options, an ext:: URL, \
                  `config` that writes, filter-branch, submodule foreach, bisect run, \
                  difftool, mergetool, instaweb, remote-ext",
        check: git,
    },
    Program {
        names: &["find"],
        summary: "-exec, -execdir, -ok, -okdir, -fprint, -fprint0, -fprintf, -fls, -delete",
        check: find,
    },
    Program {
        names: &["xargs"],
        summary: "a command that runs code or has argument hazards (its input becomes arguments)",
        check: xargs,
    },
    Program {
        names: &["awk", "gawk", "mawk", "nawk", "busybox-awk"],
        summary: "system(), output redirection or pipes of print/printf, getline from a command, \
                  -f/-E program files, -i/-l includes, a program known only at run time \
                  (read as awk parses it: `find -name '*exec*'` or `gsub(/e/, \"E\")` is fine)",
        check: awk_check,
    },
    Program {
        names: &["sed", "gsed"],
        summary: "the e command or flag, w/W to a file, -f script files, -i outside the \
                  workspace, a script known only at run time (as sed parses it: `s/e/E/` is fine)",
        check: sed_check,
    },
    Program {
        names: &["sort"],
        summary: "--compress-program, -o/--output outside the workspace",
        check: sort,
    },
    Program {
        names: &["uniq"],
        summary: "an output file outside the workspace",
        check: uniq,
    },
    Program {
        names: &["tar", "gtar", "bsdtar"],
        summary: "--checkpoint-action, --to-command, -I/--use-compress-program, \
                  -F/--info-script/--new-volume-script, --rsh-command, -P/--absolute-names, \
                  -x into a directory outside the workspace, an archive outside the workspace \
                  or on a remote host",
        check: tar,
    },
    Program {
        names: &["env"],
        summary: "-S/--split-string; variables of the environment table; the command it runs \
                  is decided as a part of its own",
        check: env,
    },
    Program {
        names: &["cargo"],
        summary: "--config, install/uninstall, --manifest-path, --target-dir, -C outside the workspace",
        check: cargo,
    },
    Program {
        names: &["make", "gmake"],
        summary: "-f/--file/--makefile, --eval/-E, variable overrides (`CC=…`), \
                  -C/-I outside the workspace",
        check: make,
    },
    Program {
        names: &["rsync"],
        summary: "-e/--rsh, --rsync-path, --write-batch, --only-write-batch, --log-file",
        check: rsync,
    },
    Program {
        names: &["ssh", "scp", "sftp"],
        summary: "-o ProxyCommand/LocalCommand/KnownHostsCommand/PKCS11Provider/…, -F, -I, -S (scp)",
        check: ssh,
    },
    Program {
        names: &["curl"],
        summary: "output files outside the workspace (-o, --output-dir, -D, -c, --trace, \
                  --libcurl, --stderr, --etag-save, --hsts, --alt-svc, -w %output{…}), \
                  -K/--config, --engine",
        check: curl,
    },
    Program {
        names: &["wget"],
        summary: "output files outside the workspace (-O, -o, -a, -P, --save-cookies, \
                  --warc-file), -e/--execute, --config, --use-askpass",
        check: wget,
    },
    Program {
        names: &["tee"],
        summary: "a file outside the workspace",
        check: tee,
    },
    Program {
        names: &["dd"],
        summary: "of= outside the workspace",
        check: dd,
    },
    Program {
        names: &["rg"],
        summary: "--pre (runs a preprocessor command)",
        check: rg,
    },
    Program {
        names: &["fd", "fdfind"],
        summary: "-x/--exec, -X/--exec-batch",
        check: fd,
    },
    Program {
        names: &["zip"],
        summary: "-TT/--unzip-command",
        check: zip,
    },
    Program {
        names: &["man"],
        summary: "-P/--pager, -H/--html",
        check: man,
    },
    Program {
        names: &["less", "more"],
        summary: "+commands",
        check: less,
    },
    Program {
        names: &["vi", "vim", "nvim", "view", "ex", "vimdiff"],
        summary: "+commands, -c, --cmd, -S, -u",
        check: vim,
    },
    Program {
        names: &["emacs"],
        summary: "--eval, -l/--load, -f/--funcall, --script",
        check: emacs,
    },
    Program {
        names: &["sqlite3"],
        summary: ".shell/.system, -init, -cmd",
        check: sqlite,
    },
];

/// Shells: `-c SCRIPT` (any cluster with `c`), rc files, or a script on stdin.
pub const SHELLS: &[&str] = &[
    "sh",
    "bash",
    "zsh",
    "dash",
    "ksh",
    "ksh93",
    "mksh",
    "pdksh",
    "yash",
    "ash",
    "fish",
    "csh",
    "tcsh",
    "rbash",
    "pwsh",
    "powershell",
];

/// Interpreters and their options that take program text (or load code).
pub static INTERPRETERS: &[(&str, &str, &[&str])] = &[
    // (name or name prefix, short option letters, long options)
    ("python", "c", &["command"]),
    ("pypy", "c", &[]),
    ("perl", "eEMm", &[]),
    ("ruby", "er", &["require"]),
    ("irb", "r", &[]),
    (
        "node",
        "epr",
        &[
            "eval",
            "print",
            "require",
            "import",
            "loader",
            "experimental-loader",
            "env-file",
        ],
    ),
    (
        "nodejs",
        "epr",
        &["eval", "print", "require", "import", "loader"],
    ),
    ("deno", "", &["eval"]),
    ("bun", "epr", &["eval", "print", "preload"]),
    ("php", "rBREd", &[]),
    ("lua", "el", &[]),
    ("luajit", "el", &[]),
    ("tclsh", "", &[]),
    ("wish", "", &[]),
    ("R", "e", &[]),
    ("Rscript", "e", &[]),
    ("julia", "eEL", &["eval", "print", "load"]),
    ("osascript", "e", &[]),
    ("gdb", "x", &["ex", "eval-command", "command"]),
    ("expect", "cf", &[]),
    ("jshell", "", &[]),
    ("groovy", "e", &[]),
    ("scala", "e", &[]),
];

/// Commands that run their arguments as another command, each decided as a part of
/// its own: (name, short options with a value, long options with a value, leading
/// operands before the command).
pub static WRAPPERS: &[(&str, &str, &[&str], usize)] = &[
    (
        "sudo",
        "ugCDhprtUT",
        &[
            "user",
            "group",
            "close-from",
            "chdir",
            "host",
            "prompt",
            "role",
            "type",
            "other-user",
            "command-timeout",
        ],
        0,
    ),
    ("doas", "uC", &[], 0),
    ("nohup", "", &[], 0),
    ("time", "fo", &["format", "output"], 0),
    ("nice", "n", &["adjustment"], 0),
    (
        "ionice",
        "cnpP",
        &["class", "classdata", "pid", "pgid", "uid"],
        0,
    ),
    ("timeout", "sk", &["signal", "kill-after"], 1),
    ("stdbuf", "ioe", &["input", "output", "error"], 0),
    ("setsid", "", &[], 0),
    ("chronic", "", &[], 0),
    ("unbuffer", "", &[], 0),
    ("command", "", &[], 0),
    ("builtin", "", &[], 0),
    ("exec", "a", &[], 0),
    ("taskset", "", &[], 1),
    ("chrt", "", &[], 1),
    (
        "numactl",
        "CNmip",
        &[
            "cpunodebind",
            "membind",
            "physcpubind",
            "interleave",
            "preferred",
        ],
        0,
    ),
    ("nsenter", "tSGU", &["target", "setuid", "setgid"], 0),
    ("unshare", "", &[], 0),
    ("chroot", "", &["userspec", "groups"], 1),
    ("faketime", "", &[], 1),
    ("strace", "eoOpPsuIXa", &["output", "attach", "user"], 0),
    ("ltrace", "eoOpsuIAlLnx", &["output"], 0),
    ("valgrind", "", &[], 0),
    ("busybox", "", &[], 0),
    ("flock", "wEs", &["timeout", "conflict-exit-code"], 1),
    ("caffeinate", "t", &[], 0),
];

/// Programs that hand their arguments to a shell: a script nobody can see.
pub const RUN_SHELLS: &[(&str, &str)] = &[
    ("watch", "watch runs its arguments in a shell"),
    ("parallel", "parallel runs its arguments in a shell"),
    ("su", "su runs a shell"),
    ("runuser", "runuser runs a shell"),
    ("script", "script runs a shell"),
    ("tmux", "tmux runs a shell"),
    ("screen", "screen runs a shell"),
];

/// Builtins that run or define code the words do not show.
pub const CODE_BUILTINS: &[&str] = &["eval", "exec", "source", ".", "trap", "alias", "coproc"];

/// Builtins that take variable names: a name with a subscript (`a[$(cmd)]`) is
/// evaluated as arithmetic.
pub const NAME_BUILTINS: &[&str] = &[
    "read",
    "mapfile",
    "readarray",
    "printf",
    "getopts",
    "unset",
    "declare",
    "typeset",
    "local",
    "export",
    "readonly",
    "wait",
    "test",
    "[",
];

/// Builtins that run nothing: they need no rule (a deny or ask rule that names them
/// still applies).
pub const NEUTRAL: &[&str] = &["true", "false", ":", "test", "["];

/// A variable that names a program, a library, start-up code or a config home.
pub enum EnvKey {
    Exact(&'static str),
    Prefix(&'static str),
    Suffix(&'static str),
}

/// The environment hazards: a call `env`, an assignment prefix (`X=1 cmd`), `env X=1`
/// or a bare assignment setting one of these is high risk and asks.
pub static ENV_KEYS: &[EnvKey] = {
    use EnvKey::{Exact as E, Prefix as P, Suffix as S};
    &[
        E("PATH"),
        P("LD_"),
        P("DYLD_"),
        P("BASH_"),
        E("ENV"),
        E("EXECIGNORE"),
        E("SHELLOPTS"),
        E("BASHOPTS"),
        E("IFS"),
        E("PS4"),
        E("PROMPT_COMMAND"),
        E("POSIXLY_CORRECT"),
        E("TEXTDOMAIN"),
        E("TEXTDOMAINDIR"),
        E("CDPATH"),
        E("SHELL"),
        E("CONFIG_SHELL"),
        P("GIT_"),
        S("_COMMAND"),
        S("_EDITOR"),
        S("PAGER"),
        S("_ASKPASS"),
        S("_WRAPPER"),
        S("_OPTIONS"),
        S("_OPTS"),
        E("EDITOR"),
        E("VISUAL"),
        E("LESSOPEN"),
        E("LESSCLOSE"),
        E("MANOPT"),
        E("BROWSER"),
        E("HOME"),
        P("XDG_CONFIG_"),
        P("XDG_DATA_"),
        E("RUSTC"),
        P("RUSTC_"),
        E("RUSTFLAGS"),
        E("RUSTDOC"),
        E("RUSTDOCFLAGS"),
        P("RUSTUP_"),
        P("CARGO_"),
        E("NODE_OPTIONS"),
        E("NODE_PATH"),
        E("PYTHONPATH"),
        E("PYTHONSTARTUP"),
        E("PYTHONHOME"),
        E("PYTHONUSERBASE"),
        E("PYTHONEXECUTABLE"),
        E("PYTHONBREAKPOINT"),
        E("PYTHONWARNINGS"),
        E("PERL5OPT"),
        E("PERL5LIB"),
        E("PERLLIB"),
        E("PERL5DB"),
        E("RUBYOPT"),
        E("RUBYLIB"),
        P("LUA_"),
        E("PHPRC"),
        E("PHP_INI_SCAN_DIR"),
        E("TCLLIBPATH"),
        P("R_PROFILE"),
        P("npm_config_"),
        P("NPM_CONFIG_"),
        E("GEM_HOME"),
        E("GEM_PATH"),
        E("CC"),
        E("CXX"),
        E("CPP"),
        E("LD"),
        E("AR"),
        E("AS"),
        E("NM"),
        E("RANLIB"),
        E("STRIP"),
        E("OBJCOPY"),
        E("FC"),
        E("CFLAGS"),
        E("CXXFLAGS"),
        E("CPPFLAGS"),
        E("LDFLAGS"),
        E("MAKE"),
        E("MAKEFLAGS"),
        E("MAKEFILES"),
        E("GNUMAKEFLAGS"),
        E("MFLAGS"),
        E("GCONV_PATH"),
        E("GLIBC_TUNABLES"),
        E("LOCPATH"),
        E("OPENSSL_CONF"),
        E("OPENSSL_ENGINES"),
        E("KUBECONFIG"),
        E("DOCKER_CONFIG"),
        E("AWS_CONFIG_FILE"),
        E("CURL_HOME"),
        E("WGETRC"),
        E("JAVA_HOME"),
        E("CLASSPATH"),
    ]
};

/// Does setting `key` change what runs? (`PATH[0]` sets `PATH`; `BASH_CMDS[ls]`
/// sets where bash finds `ls`.)
pub fn is_env_hazard(key: &str) -> bool {
    let key = key.split('[').next().unwrap_or(key);
    ENV_KEYS.iter().any(|k| match k {
        EnvKey::Exact(e) => key == *e,
        EnvKey::Prefix(p) => key.starts_with(p),
        EnvKey::Suffix(s) => key.ends_with(s),
    })
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

// ---- option parsing shared by the checks ----

/// One item of a GNU-style command line.
#[derive(Debug, PartialEq)]
enum Item<'a> {
    Short(char, Option<&'a Word>, &'a str),
    Long(&'a str, Option<&'a str>, Option<&'a Word>),
    Operand(&'a Word),
}

/// Parse `words` the way getopt_long does: `short_valued` letters and `long_valued`
/// names (or unambiguous abbreviations of them) take a value.
fn parse<'a>(words: &'a [Word], short_valued: &str, long_valued: &[&str]) -> Vec<Item<'a>> {
    parse_with(words, short_valued, "", long_valued)
}

/// Like [`parse`], with `optional` letters whose value can only be stuck to them
/// (`sed -i.bak`): they take the rest of their cluster, never the next word.
fn parse_with<'a>(
    words: &'a [Word],
    short_valued: &str,
    optional: &str,
    long_valued: &[&str],
) -> Vec<Item<'a>> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut operands_only = false;
    while let Some(w) = words.get(i) {
        i += 1;
        let t = w.text.as_str();
        if operands_only || t == "-" || !t.starts_with('-') {
            out.push(Item::Operand(w));
            continue;
        }
        if t == "--" {
            operands_only = true;
            continue;
        }
        if let Some(long) = t.strip_prefix("--") {
            match long.split_once('=') {
                Some((name, value)) => out.push(Item::Long(name, Some(value), Some(w))),
                None if long_valued.iter().any(|l| abbreviates(long, l)) => {
                    let v = words.get(i);
                    i += 1;
                    out.push(Item::Long(long, v.map(|w| w.text.as_str()), v));
                }
                None => out.push(Item::Long(long, None, None)),
            }
            continue;
        }
        let cluster = &t[1..];
        for (pos, c) in cluster.char_indices() {
            if optional.contains(c) {
                out.push(Item::Short(c, Some(w), &cluster[pos + c.len_utf8()..]));
                break;
            }
            if short_valued.contains(c) {
                let rest = &cluster[pos + c.len_utf8()..];
                if rest.is_empty() {
                    let v = words.get(i);
                    i += 1;
                    out.push(Item::Short(c, v, v.map_or("", |w| w.text.as_str())));
                } else {
                    out.push(Item::Short(c, Some(w), rest));
                }
                break;
            }
            out.push(Item::Short(c, None, ""));
        }
    }
    out
}

/// `given` names the long option `full` (GNU accepts unambiguous prefixes; any
/// prefix counts here, which errs on the side of asking).
fn abbreviates(given: &str, full: &str) -> bool {
    !given.is_empty() && full.starts_with(given)
}

fn long<'a>(items: &'a [Item<'a>], full: &str) -> impl Iterator<Item = Option<&'a str>> + 'a {
    let full = full.to_owned();
    items.iter().filter_map(move |i| match i {
        Item::Long(name, v, _) if abbreviates(name, &full) => Some(*v),
        _ => None,
    })
}

fn has_long(items: &[Item<'_>], full: &str) -> bool {
    long(items, full).next().is_some()
}

fn short<'a>(items: &'a [Item<'a>], c: char) -> impl Iterator<Item = &'a str> + 'a {
    items.iter().filter_map(move |i| match i {
        Item::Short(x, _, v) if *x == c => Some(*v),
        _ => None,
    })
}

fn operands<'a>(items: &'a [Item<'a>]) -> impl Iterator<Item = &'a Word> + 'a {
    items.iter().filter_map(|i| match i {
        Item::Operand(w) => Some(*w),
        _ => None,
    })
}

/// Long options of `items` that name a hazard in `names`: the first match's full name.
fn long_hazards(items: &[Item<'_>], names: &[&str], prog: &str, f: &mut Findings) {
    for n in names {
        if has_long(items, n) {
            f.arg(format!("{prog} --{n}"));
        }
    }
}

// ---- shells, interpreters, wrappers, builtins ----

fn shell(a: &Args<'_>, f: &mut Findings) {
    let mut script = None;
    for (i, w) in a.words.iter().enumerate() {
        let t = w.text.as_str();
        if t == "--" || !t.starts_with('-') && !t.starts_with('+') {
            break;
        }
        let runs = if let Some(long) = t.strip_prefix("--") {
            ["rcfile", "init-file", "command", "init-command"]
                .iter()
                .any(|l| abbreviates(long.split('=').next().unwrap_or(long), l))
        } else {
            t[1..].contains(['c', 'C'])
        };
        if runs {
            f.structural(format!("{} -c", a.prog));
            script = a
                .words
                .get(i + 1)
                .filter(|w| w.literal())
                .map(|w| w.text.clone());
            break;
        }
    }
    f.script = script;
}

/// `cargo run -- bash -c '…'`, `ssh host sh -c …`: a script handed on to a shell
/// somewhere in the arguments.
fn shell_in_arguments(a: &Args<'_>, f: &mut Findings) {
    for (i, w) in a.words.iter().enumerate() {
        if !is_shell(&w.text) {
            continue;
        }
        let flagged = a.words[i + 1..]
            .iter()
            .any(|x| x.text.starts_with('-') && !x.text.starts_with("--") && x.text.contains('c'));
        if flagged {
            f.arg(format!("{} -c in the arguments", basename(&w.text)));
            return;
        }
    }
}

fn inline_code(a: &Args<'_>, row: &(&str, &str, &[&str]), f: &mut Findings) {
    let (name, shorts, longs) = *row;
    for w in a.words {
        let t = w.text.as_str();
        if t == "--" {
            break;
        }
        let inline = if let Some(long) = t.strip_prefix("--") {
            let long = long.split('=').next().unwrap_or(long);
            longs.iter().any(|l| abbreviates(long, l))
        } else if let Some(cluster) = t.strip_prefix('-') {
            cluster
                .chars()
                .take_while(|c| c.is_ascii_alphabetic())
                .any(|c| shorts.contains(c))
        } else {
            name == "deno" && t == "eval"
        };
        if inline {
            f.structural(format!("{name} inline code"));
            return;
        }
    }
}

/// The command a wrapper runs is a part of its own.
fn wrapped(a: &Args<'_>, row: &(&str, &str, &[&str], usize), f: &mut Findings) {
    let (name, short_valued, long_valued, leading) = *row;
    if name == "command"
        && a.words
            .first()
            .is_some_and(|w| w.text.starts_with("-v") || w.text.starts_with("-V"))
    {
        return;
    }
    let mut i = 0;
    while let Some(t) = a.text(i) {
        if t == "--" {
            i += 1;
            break;
        }
        if !t.starts_with('-') || t == "-" {
            break;
        }
        i += 1;
        if let Some(long) = t.strip_prefix("--") {
            if !long.contains('=') && long_valued.iter().any(|l| abbreviates(long, l)) {
                i += 1;
            }
        } else if t.len() == 2 && short_valued.contains(&t[1..]) {
            i += 1;
        }
    }
    if name == "sudo" || name == "doas" {
        while a
            .text(i)
            .is_some_and(|t| t.contains('=') && !t.starts_with('='))
        {
            env_assignment(a.text(i).unwrap_or_default(), f);
            i += 1;
        }
    }
    i += leading;
    if i < a.words.len() {
        f.nested.push(i..a.words.len());
    }
}

fn builtin(prog: &str, a: &Args<'_>, f: &mut Findings) {
    let subscripted = |w: &Word| w.text.contains('[') || !w.literal();
    match prog {
        "enable" if a.texts().any(|t| t.starts_with('-') && t.contains('f')) => {
            f.structural("enable -f");
        }
        "hash" if a.texts().any(|t| t.starts_with('-') && t.contains('p')) => {
            f.structural("hash -p");
        }
        "set" => set_options(a, f),
        "shopt" => shopt_options(a, f),
        "printf" => {
            let mut it = a.words.iter();
            while let Some(w) = it.next() {
                if w.text == "-v" && it.next().is_some_and(subscripted)
                    || w.text.starts_with("-v") && w.text.len() > 2 && w.text.contains('[')
                {
                    f.structural("a variable name with a subscript");
                }
            }
        }
        "test" | "[" => {
            let mut it = a.words.iter();
            while let Some(w) = it.next() {
                if w.text == "-v" && it.next().is_some_and(subscripted) {
                    f.structural("a variable name with a subscript");
                }
            }
        }
        p if NAME_BUILTINS.contains(&p) && a.words.iter().any(|w| w.text.contains('[')) => {
            f.structural("a variable name with a subscript");
        }
        "declare" | "typeset" | "local" | "export" | "readonly"
            if a.texts()
                .any(|t| t.starts_with(['-', '+']) && t.contains(['i', 'n'])) =>
        {
            f.structural(format!("{prog} -i/-n"));
        }
        _ => {}
    }
    if matches!(
        prog,
        "declare" | "typeset" | "local" | "export" | "readonly"
    ) {
        for t in a.texts().filter(|t| !t.starts_with(['-', '+'])) {
            env_assignment(t, f);
        }
    }
    // Builtins that store into the variables they are given (`printf -v PATH .`).
    if matches!(
        prog,
        "read" | "mapfile" | "readarray" | "printf" | "getopts" | "wait"
    ) {
        for t in a.texts().filter(|t| !t.starts_with('-')) {
            if is_env_hazard(t) && t.chars().next().is_some_and(|c| c.is_ascii_uppercase()) {
                f.structural(format!("sets {}", t.split('[').next().unwrap_or(t)));
            }
        }
    }
}

/// `set` options that change how bash reads the rest of the command.
fn set_options(a: &Args<'_>, f: &mut Findings) {
    let mut it = a.words.iter();
    while let Some(w) = it.next() {
        let t = w.text.as_str();
        if t == "--" || !(t.starts_with('-') || t.starts_with('+')) {
            break;
        }
        if t[1..].contains(['k', 'H']) {
            f.structural(format!("set {t}"));
        }
        if t.ends_with('o') {
            match it.next() {
                Some(o) if !o.literal() => f.structural("set -o"),
                Some(o)
                    if matches!(
                        o.text.as_str(),
                        "keyword" | "posix" | "history" | "histexpand"
                    ) =>
                {
                    f.structural(format!("set -o {}", o.text));
                }
                _ => {}
            }
        }
    }
}

/// `shopt` options that change parsing or make aliases and debugging hooks live.
fn shopt_options(a: &Args<'_>, f: &mut Findings) {
    const HARMLESS: &[&str] = &[
        "nullglob",
        "failglob",
        "dotglob",
        "globstar",
        "nocaseglob",
        "nocasematch",
        "lastpipe",
        "inherit_errexit",
        "pipefail",
        "errexit",
        "nounset",
        "xtrace",
    ];
    let setting = a
        .texts()
        .any(|t| t.starts_with('-') && t.contains(['s', 'o']));
    if !setting {
        return;
    }
    for w in a.words.iter().filter(|w| !w.text.starts_with('-')) {
        if !w.literal() || !HARMLESS.contains(&w.text.as_str()) {
            f.structural(format!("shopt {}", w.text));
        }
    }
}

/// `KEY=value` that sets an environment hazard.
fn env_assignment(t: &str, f: &mut Findings) {
    if let Some((key, _)) = t.split_once('=')
        && is_env_hazard(key.trim_end_matches('+'))
    {
        let key = key.trim_end_matches('+');
        f.arg(format!("sets {}", key.split('[').next().unwrap_or(key)));
    }
}

// ---- the programs ----

fn git(a: &Args<'_>, f: &mut Findings) {
    let t: Vec<&str> = a.texts().collect();
    let mut i = 0;
    while let Some(&w) = t.get(i) {
        i += 1;
        if !w.starts_with('-') {
            i -= 1;
            break;
        }
        match w {
            "-c" | "--config-env" => {
                f.arg(format!("git {w}"));
                i += 1;
            }
            "-C" | "--work-tree" => {
                if a.outside(a.words.get(i)) {
                    f.arg(format!("git {w} outside the workspace"));
                }
                i += 1;
            }
            "--git-dir" => {
                f.arg("git --git-dir");
                i += 1;
            }
            "--namespace" | "--super-prefix" | "--list-cmds" => i += 1,
            w if w.starts_with("-c") && !w.starts_with("--") => f.arg("git -c"),
            w if w.starts_with("--config-env=") => f.arg("git --config-env"),
            w if w.starts_with("--exec-path=") => f.arg("git --exec-path"),
            w if w.starts_with("--git-dir=") => f.arg("git --git-dir"),
            w if w.starts_with("--work-tree=") && a.outside_text(&w["--work-tree=".len()..]) => {
                f.arg("git --work-tree outside the workspace");
            }
            _ => {}
        }
    }
    let sub = t.get(i).copied().unwrap_or("");
    let rest = t.get(i + 1..).unwrap_or(&[]);
    const LONG: &[&str] = &[
        "upload-pack",
        "receive-pack",
        "exec",
        "extcmd",
        "output",
        "output-directory",
        "open-files-in-pager",
        "template",
        "sendmail-cmd",
        "smtp-server",
        "to-cmd",
        "cc-cmd",
        "header-cmd",
        "httpd",
        "browser",
        "access-hook",
        "unsafe-paths",
    ];
    for w in rest {
        if let Some(long) = w.strip_prefix("--") {
            let name = long.split('=').next().unwrap_or(long);
            if let Some(h) = LONG.iter().find(|h| abbreviates(name, h)) {
                f.arg(format!("git --{h}"));
            }
            if sub == "clone" && abbreviates(name, "config") {
                f.arg("git clone --config");
            }
        } else if let Some(cluster) = w.strip_prefix('-') {
            let letter = |c: char| cluster.starts_with(c);
            let found = match sub {
                "clone" | "ls-remote" if letter('u') => Some("-u"),
                "clone" if letter('c') => Some("-c"),
                "rebase" if cluster.contains('x') => Some("-x"),
                "format-patch" | "archive" if letter('o') => Some("-o"),
                "grep" if letter('O') => Some("-O"),
                _ => None,
            };
            if let Some(o) = found {
                f.arg(format!("git {sub} {o}"));
            }
        }
    }
    if t.iter().any(|w| w.contains("ext::")) {
        f.arg("git ext:: URL");
    }
    match sub {
        "config" if git_config_writes(rest) => f.arg("git config"),
        "filter-branch" | "difftool" | "mergetool" | "instaweb" | "web--browse" | "remote-ext"
        | "daemon" => f.arg(format!("git {sub}")),
        "submodule" if rest.contains(&"foreach") => f.arg("git submodule foreach"),
        "bisect" if rest.first() == Some(&"run") => f.arg("git bisect run"),
        _ => {}
    }
}

/// `git config` that only reads (`--get`, `--list`, `get`, `list`).
fn git_config_writes(rest: &[&str]) -> bool {
    const READ: &[&str] = &[
        "--get",
        "--get-all",
        "--get-regexp",
        "--get-urlmatch",
        "--get-color",
        "--get-colorbool",
        "-l",
        "--list",
    ];
    let positional = rest.iter().filter(|w| !w.starts_with('-')).count();
    let reads = rest.iter().any(|w| READ.contains(w))
        || matches!(rest.first(), Some(&"get") | Some(&"list"));
    let edits = rest.iter().any(|w| {
        matches!(
            *w,
            "-e" | "--edit"
                | "--add"
                | "--unset"
                | "--unset-all"
                | "--replace-all"
                | "--rename-section"
                | "--remove-section"
        )
    });
    !(reads && !edits && positional <= 3)
}

fn find(a: &Args<'_>, f: &mut Findings) {
    const RUNS: &[&str] = &["-exec", "-execdir", "-ok", "-okdir"];
    const WRITES: &[&str] = &["-fprint", "-fprint0", "-fprintf", "-fls", "-delete"];
    let mut i = 0;
    while let Some(t) = a.text(i) {
        if RUNS.contains(&t) {
            f.arg(format!("find {t}"));
            let end = (i + 1..a.words.len())
                .find(|&j| matches!(a.text(j), Some(";" | "+")))
                .unwrap_or(a.words.len());
            if end > i + 1 {
                f.nested.push(i + 1..end);
            }
            i = end;
        } else if WRITES.contains(&t) {
            f.arg(format!("find {t}"));
        }
        i += 1;
    }
}

fn xargs(a: &Args<'_>, f: &mut Findings) {
    let items = parse_with(
        a.words,
        "adEILnPs",
        "eil",
        &[
            "arg-file",
            "delimiter",
            "eof",
            "replace",
            "max-lines",
            "max-args",
            "max-procs",
            "max-chars",
            "process-slot-var",
        ],
    );
    let Some(first) = operands(&items).next() else {
        return;
    };
    let start = a
        .words
        .iter()
        .position(|w| std::ptr::eq(w, first))
        .unwrap_or(a.words.len());
    f.nested.push(start..a.words.len());
    let replace: Vec<&str> = items
        .iter()
        .filter_map(|i| match i {
            Item::Short('I', _, v) => Some(*v),
            Item::Short('i', _, v) => Some(if v.is_empty() { "{}" } else { *v }),
            Item::Long(n, v, _) if abbreviates(n, "replace") => Some(v.unwrap_or("{}")),
            _ => None,
        })
        .collect();
    let replaced = replace
        .iter()
        .any(|r| !r.is_empty() && first.text.contains(r));
    if !first.literal() || replaced || runs_code(&first.text) {
        f.arg(format!("xargs {}", first.text));
    }
}

fn awk_check(a: &Args<'_>, f: &mut Findings) {
    let items = parse_with(
        a.words,
        "fvFeilEWZ",
        "dDLop",
        &[
            "file",
            "assign",
            "field-separator",
            "source",
            "include",
            "load",
            "exec",
            "profile",
            "dump-variables",
            "pretty-print",
        ],
    );
    let sandbox = items
        .iter()
        .any(|i| matches!(i, Item::Long("sandbox", None, None)));
    for (opt, long) in [
        ('f', "file"),
        ('E', "exec"),
        ('i', "include"),
        ('l', "load"),
        ('W', "W"),
    ] {
        if short(&items, opt).next().is_some() || has_long(&items, long) {
            f.arg(format!("{} -{opt}", a.prog));
        }
    }
    for long in ["profile", "dump-variables", "pretty-print"] {
        if has_long(&items, long) {
            f.arg(format!("{} --{long}", a.prog));
        }
    }
    // (program text, known now)
    let mut programs: Vec<(&str, bool)> = items
        .iter()
        .filter_map(|i| match i {
            Item::Short('e', v, t) => Some((*t, v.is_none_or(|w| w.literal()))),
            Item::Long(n, Some(t), w) if abbreviates(n, "source") => {
                Some((*t, w.is_none_or(|w| w.literal())))
            }
            _ => None,
        })
        .collect();
    let uses_files = short(&items, 'f').next().is_some() || has_long(&items, "file");
    if programs.is_empty() && !uses_files {
        programs.extend(
            operands(&items)
                .next()
                .map(|w| (w.text.as_str(), w.literal())),
        );
    }
    for (text, known) in programs {
        if !known {
            f.arg(format!("{} program known only at run time", a.prog));
        } else if !sandbox {
            for h in awk::hazards(text) {
                f.arg(format!("{} {h}", a.prog));
            }
        }
    }
}

fn sed_check(a: &Args<'_>, f: &mut Findings) {
    let items = parse_with(a.words, "efl", "i", &["expression", "file", "line-length"]);
    if short(&items, 'f').next().is_some() || has_long(&items, "file") {
        f.arg(format!("{} -f", a.prog));
    }
    let sandbox = items
        .iter()
        .any(|i| matches!(i, Item::Long("sandbox", None, None)));
    let mut scripts: Vec<Option<&str>> = items
        .iter()
        .filter_map(|i| match i {
            Item::Short('e', v, s) => Some(v.map(|w| w.literal()).unwrap_or(true).then_some(*s)),
            Item::Long(n, v, w) if abbreviates(n, "expression") => {
                Some(w.is_none_or(|w| w.literal()).then_some(v.unwrap_or("")))
            }
            _ => None,
        })
        .collect();
    let mut files = operands(&items);
    if scripts.is_empty() && !has_long(&items, "file") && short(&items, 'f').next().is_none() {
        scripts.extend(files.next().map(|w| w.literal().then_some(w.text.as_str())));
    }
    for s in scripts {
        match s {
            None => f.arg(format!("{} script known only at run time", a.prog)),
            Some(_) if sandbox => {}
            Some(s) => match sed::hazards(s) {
                Ok(hs) => hs
                    .into_iter()
                    .for_each(|h| f.arg(format!("{} {h}", a.prog))),
                Err(why) => f.arg(format!("{} script not understood ({why})", a.prog)),
            },
        }
    }
    let in_place = short(&items, 'i').next().is_some() || has_long(&items, "in-place");
    if in_place && files.any(|w| a.outside(Some(w))) {
        f.arg(format!("{} -i outside the workspace", a.prog));
    }
}

fn sort(a: &Args<'_>, f: &mut Findings) {
    let items = parse(
        a.words,
        "ktSTo",
        &[
            "key",
            "field-separator",
            "buffer-size",
            "temporary-directory",
            "output",
            "compress-program",
            "parallel",
            "batch-size",
            "files0-from",
            "random-source",
            "sort",
        ],
    );
    long_hazards(&items, &["compress-program"], "sort", f);
    let outs = short(&items, 'o').chain(long(&items, "output").map(|v| v.unwrap_or("")));
    for o in outs.collect::<Vec<_>>() {
        if a.outside_text(o) || o.contains('$') {
            f.arg("sort -o outside the workspace");
        }
    }
}

fn uniq(a: &Args<'_>, f: &mut Findings) {
    let items = parse(
        a.words,
        "fsw",
        &["skip-fields", "skip-chars", "check-chars"],
    );
    if let Some(out) = operands(&items).nth(1)
        && a.outside(Some(out))
    {
        f.arg("uniq output outside the workspace");
    }
}

fn tar(a: &Args<'_>, f: &mut Findings) {
    // Old style: the first word is a cluster of letters without a dash (`tar xzf a.tgz`).
    let mut words: Vec<Word> = a.words.to_vec();
    if let Some(first) = words.first()
        && !first.text.starts_with('-')
        && first.text.chars().all(|c| c.is_ascii_alphabetic())
    {
        let letters: Vec<char> = first.text.chars().collect();
        let mut expanded: Vec<Word> = Vec::new();
        let mut values = words[1..].iter();
        let mut after: Vec<Word> = Vec::new();
        for c in letters {
            let mut w = first.clone();
            w.text = format!("-{c}");
            w.known = w.text.len();
            expanded.push(w);
            if "fCITXbgHKLNVF".contains(c)
                && let Some(v) = values.next()
            {
                expanded.push(v.clone());
            }
        }
        after.extend(values.cloned());
        expanded.extend(after);
        words = expanded;
    }
    let items = parse(
        &words,
        "fCITXbgHKLNVIF",
        &[
            "file",
            "directory",
            "files-from",
            "exclude-from",
            "blocking-factor",
            "listed-incremental",
            "format",
            "starting-file",
            "tape-length",
            "newer",
            "label",
            "use-compress-program",
            "info-script",
            "new-volume-script",
            "to-command",
            "checkpoint-action",
            "rsh-command",
            "index-file",
            "volno-file",
            "transform",
            "exclude",
            "owner",
            "group",
            "mode",
            "mtime",
        ],
    );
    long_hazards(
        &items,
        &[
            "checkpoint-action",
            "to-command",
            "use-compress-program",
            "info-script",
            "new-volume-script",
            "rsh-command",
            "absolute-names",
        ],
        "tar",
        f,
    );
    for (c, name) in [('I', "-I"), ('F', "-F"), ('P', "-P")] {
        if short(&items, c).next().is_some() {
            f.arg(format!("tar {name}"));
        }
    }
    let extracting = short(&items, 'x').next().is_some()
        || has_long(&items, "extract")
        || has_long(&items, "get");
    let writing = ['c', 'r', 'u', 'A']
        .iter()
        .any(|c| short(&items, *c).next().is_some())
        || ["create", "append", "update", "catenate"]
            .iter()
            .any(|l| has_long(&items, l));
    let dirs: Vec<&str> = short(&items, 'C')
        .chain(long(&items, "directory").map(|v| v.unwrap_or("")))
        .collect();
    if extracting && dirs.iter().any(|d| a.outside_text(d) || d.contains('$')) {
        f.arg("tar -x outside the workspace");
    }
    let archives: Vec<&str> = short(&items, 'f')
        .chain(long(&items, "file").map(|v| v.unwrap_or("")))
        .collect();
    let force_local = has_long(&items, "force-local");
    for ar in archives {
        if ar.contains(':') && !force_local {
            f.arg("tar remote archive");
        }
        if writing && (a.outside_text(ar) || ar.contains('$')) {
            f.arg("tar writes outside the workspace");
        }
    }
    for l in ["index-file", "volno-file", "listed-incremental"] {
        for v in long(&items, l) {
            if v.is_none_or(|v| a.outside_text(v)) {
                f.arg(format!("tar --{l} outside the workspace"));
            }
        }
    }
}

fn env(a: &Args<'_>, f: &mut Findings) {
    let mut i = 0;
    while let Some(t) = a.text(i) {
        if t == "--" {
            i += 1;
            break;
        }
        if !t.starts_with('-') || t == "-" {
            break;
        }
        i += 1;
        let long = t
            .strip_prefix("--")
            .map(|l| l.split('=').next().unwrap_or(l));
        let split = match long {
            Some(l) => abbreviates(l, "split-string"),
            None => t.contains('S'),
        };
        if split {
            f.arg("env -S");
            return;
        }
        let valued = match long {
            Some(l) => !t.contains('=') && ["unset", "chdir"].iter().any(|o| abbreviates(l, o)),
            None => t.ends_with('u') || t.ends_with('C'),
        };
        if valued {
            i += 1;
        }
    }
    while let Some(t) = a.text(i).filter(|t| t.contains('=')) {
        env_assignment(t, f);
        i += 1;
    }
    if i < a.words.len() {
        f.nested.push(i..a.words.len());
    }
}

fn cargo(a: &Args<'_>, f: &mut Findings) {
    let items = parse(
        a.words,
        "pjCZ",
        &[
            "config",
            "manifest-path",
            "target-dir",
            "artifact-dir",
            "out-dir",
            "package",
            "jobs",
            "bin",
            "example",
            "test",
            "bench",
            "features",
            "target",
            "profile",
            "color",
            "message-format",
            "root",
            "index",
            "registry",
            "git",
            "branch",
            "tag",
            "rev",
            "path",
            "exclude",
            "lockfile-path",
        ],
    );
    long_hazards(&items, &["config"], "cargo", f);
    if let Some(sub) = operands(&items).next()
        && matches!(sub.text.as_str(), "install" | "uninstall")
    {
        f.arg(format!("cargo {}", sub.text));
    }
    for l in ["manifest-path", "target-dir", "artifact-dir", "out-dir"] {
        for v in long(&items, l) {
            if v.is_none_or(|v| a.outside_text(v) || v.contains('$')) {
                f.arg(format!("cargo --{l} outside the workspace"));
            }
        }
    }
    if short(&items, 'C').any(|v| a.outside_text(v)) {
        f.arg("cargo -C outside the workspace");
    }
}

fn make(a: &Args<'_>, f: &mut Findings) {
    let items = parse_with(
        a.words,
        "CfIoWE",
        "jlO",
        &[
            "directory",
            "file",
            "makefile",
            "include-dir",
            "old-file",
            "assume-old",
            "what-if",
            "new-file",
            "assume-new",
            "eval",
        ],
    );
    for (c, name) in [('f', "-f"), ('E', "--eval")] {
        if short(&items, c).next().is_some() {
            f.arg(format!("make {name}"));
        }
    }
    long_hazards(&items, &["file", "makefile", "eval"], "make", f);
    let dirs = short(&items, 'C')
        .chain(short(&items, 'I'))
        .chain(long(&items, "directory").map(|v| v.unwrap_or("")))
        .chain(long(&items, "include-dir").map(|v| v.unwrap_or("")));
    if dirs
        .collect::<Vec<_>>()
        .iter()
        .any(|d| a.outside_text(d) || d.contains('$'))
    {
        f.arg("make -C/-I outside the workspace");
    }
    if operands(&items).any(|w| w.text.contains('=')) {
        f.arg("make variable override");
    }
}

fn rsync(a: &Args<'_>, f: &mut Findings) {
    let items = parse(
        a.words,
        "eBfT",
        &[
            "rsh",
            "rsync-path",
            "filter",
            "log-file",
            "write-batch",
            "only-write-batch",
            "temp-dir",
        ],
    );
    if short(&items, 'e').next().is_some() {
        f.arg("rsync -e");
    }
    long_hazards(
        &items,
        &["rsh", "rsync-path", "write-batch", "only-write-batch"],
        "rsync",
        f,
    );
    for v in long(&items, "log-file") {
        if v.is_none_or(|v| a.outside_text(v)) {
            f.arg("rsync --log-file outside the workspace");
        }
    }
}

fn ssh(a: &Args<'_>, f: &mut Findings) {
    const RUNS: &[&str] = &[
        "proxycommand",
        "localcommand",
        "permitlocalcommand",
        "knownhostscommand",
        "pkcs11provider",
        "securitykeyprovider",
        "include",
        "match",
    ];
    let items = parse(a.words, "bcDEeFIiJLlmOopQRSWwBPX", &[]);
    for v in short(&items, 'o') {
        let key = v
            .split(['=', ' ', '\t'])
            .next()
            .unwrap_or(v)
            .to_ascii_lowercase();
        if RUNS.contains(&key.as_str()) || v.contains('$') {
            f.arg(format!(
                "{} -o {}",
                a.prog,
                v.split(['=', ' ']).next().unwrap_or(v)
            ));
        }
    }
    if short(&items, 'F').next().is_some() {
        f.arg(format!("{} -F", a.prog));
    }
    if short(&items, 'I').next().is_some() && a.prog == "ssh" {
        f.arg("ssh -I");
    }
    if short(&items, 'S').next().is_some() && a.prog != "ssh" {
        f.arg(format!("{} -S", a.prog));
    }
}

fn curl(a: &Args<'_>, f: &mut Findings) {
    let items = parse(
        a.words,
        "AbcCdDeEFHKmoPQrTtuUwxXyYz",
        &[
            "output",
            "output-dir",
            "dump-header",
            "cookie-jar",
            "trace",
            "trace-ascii",
            "libcurl",
            "stderr",
            "etag-save",
            "hsts",
            "alt-svc",
            "config",
            "write-out",
            "engine",
            "header",
            "data",
            "user",
            "url",
            "request",
            "user-agent",
            "referer",
            "cookie",
            "form",
            "proxy",
            "upload-file",
            "max-time",
            "connect-timeout",
            "data-raw",
            "data-binary",
            "json",
        ],
    );
    let outputs = short(&items, 'o')
        .chain(short(&items, 'D'))
        .chain(short(&items, 'c'))
        .chain(
            [
                "output",
                "output-dir",
                "dump-header",
                "cookie-jar",
                "trace",
                "trace-ascii",
                "libcurl",
                "stderr",
                "etag-save",
                "hsts",
                "alt-svc",
            ]
            .iter()
            .flat_map(|l| long(&items, l).map(|v| v.unwrap_or(""))),
        );
    if outputs
        .collect::<Vec<_>>()
        .iter()
        .any(|o| a.outside_text(o) || o.contains('$'))
    {
        f.arg("curl writes outside the workspace");
    }
    if short(&items, 'K').next().is_some() || has_long(&items, "config") {
        f.arg("curl --config");
    }
    long_hazards(&items, &["engine"], "curl", f);
    let write_out = short(&items, 'w').chain(long(&items, "write-out").map(|v| v.unwrap_or("")));
    if write_out
        .collect::<Vec<_>>()
        .iter()
        .any(|w| w.contains("%output{"))
    {
        f.arg("curl --write-out %output");
    }
}

fn wget(a: &Args<'_>, f: &mut Findings) {
    let items = parse(
        a.words,
        "aABDeiIlOoPQRtTUwX",
        &[
            "output-document",
            "output-file",
            "append-output",
            "directory-prefix",
            "save-cookies",
            "warc-file",
            "execute",
            "config",
            "use-askpass",
            "rejected-log",
            "input-file",
            "user-agent",
            "header",
            "tries",
            "timeout",
            "user",
            "password",
        ],
    );
    let outputs = short(&items, 'O')
        .chain(short(&items, 'o'))
        .chain(short(&items, 'a'))
        .chain(short(&items, 'P'))
        .chain(
            [
                "output-document",
                "output-file",
                "append-output",
                "directory-prefix",
                "save-cookies",
                "warc-file",
                "rejected-log",
            ]
            .iter()
            .flat_map(|l| long(&items, l).map(|v| v.unwrap_or(""))),
        );
    if outputs
        .collect::<Vec<_>>()
        .iter()
        .any(|o| a.outside_text(o) || o.contains('$'))
    {
        f.arg("wget writes outside the workspace");
    }
    if short(&items, 'e').next().is_some() {
        f.arg("wget -e");
    }
    long_hazards(&items, &["execute", "config", "use-askpass"], "wget", f);
}

fn tee(a: &Args<'_>, f: &mut Findings) {
    let items = parse(a.words, "", &[]);
    if operands(&items).any(|w| a.outside(Some(w))) {
        f.arg("tee writes outside the workspace");
    }
}

fn dd(a: &Args<'_>, f: &mut Findings) {
    for w in a.words {
        if let Some(of) = w.text.strip_prefix("of=")
            && (!w.literal() || a.outside_text(of))
        {
            f.arg("dd of= outside the workspace");
        }
    }
}

fn rg(a: &Args<'_>, f: &mut Findings) {
    let items = parse(a.words, "", &["pre"]);
    if items
        .iter()
        .any(|i| matches!(i, Item::Long(n, _, _) if *n == "pre" || n.starts_with("pre=")))
    {
        f.arg("rg --pre");
    }
}

fn fd(a: &Args<'_>, f: &mut Findings) {
    let items = parse(a.words, "", &[]);
    if short(&items, 'x').next().is_some() || has_long(&items, "exec") {
        f.arg(format!("{} --exec", a.prog));
    }
    if short(&items, 'X').next().is_some() || has_long(&items, "exec-batch") {
        f.arg(format!("{} --exec-batch", a.prog));
    }
}

fn zip(a: &Args<'_>, f: &mut Findings) {
    if a.texts()
        .any(|t| t.starts_with("-TT") || t.starts_with("--unzip-command"))
    {
        f.arg("zip --unzip-command");
    }
}

fn man(a: &Args<'_>, f: &mut Findings) {
    let items = parse(
        a.words,
        "PHLMmSsCe",
        &["pager", "html", "config-file", "preprocessor"],
    );
    if short(&items, 'P').next().is_some() || has_long(&items, "pager") {
        f.arg("man --pager");
    }
    if short(&items, 'H').next().is_some() || has_long(&items, "html") {
        f.arg("man --html");
    }
}

fn less(a: &Args<'_>, f: &mut Findings) {
    if a.texts()
        .any(|t| t.starts_with('+') || t.starts_with("--lesskey"))
    {
        f.arg(format!("{} +command", a.prog));
    }
}

fn vim(a: &Args<'_>, f: &mut Findings) {
    if a.texts().any(|t| {
        t.starts_with('+') || matches!(t, "-c" | "--cmd" | "-S" | "-u" | "-s" | "-w" | "-W")
    }) {
        f.arg(format!("{} command", a.prog));
    }
}

fn emacs(a: &Args<'_>, f: &mut Findings) {
    if a.texts().any(|t| {
        matches!(
            t,
            "-l" | "-f" | "--load" | "--funcall" | "--eval" | "--script" | "-x"
        ) || t.starts_with("--eval=")
            || t.starts_with("--load=")
    }) {
        f.arg("emacs code");
    }
}

fn sqlite(a: &Args<'_>, f: &mut Findings) {
    if a.texts()
        .any(|t| t.contains(".shell") || t.contains(".system") || t == "-init" || t == "-cmd")
    {
        f.arg("sqlite3 shell command");
    }
}

#[cfg(test)]
mod tests;
