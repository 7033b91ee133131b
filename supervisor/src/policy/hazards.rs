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
use builtins::{builtin, inline_code, shell, shell_in_arguments, wrapped};

mod builtins;
mod options;
mod programs;
mod tools;
mod transfer;

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
        check: programs::git,
    },
    Program {
        names: &["find"],
        summary: "-exec, -execdir, -ok, -okdir, -fprint, -fprint0, -fprintf, -fls, -delete",
        check: programs::find,
    },
    Program {
        names: &["xargs"],
        summary: "a command that runs code or has argument hazards (its input becomes arguments)",
        check: programs::xargs,
    },
    Program {
        names: &["awk", "gawk", "mawk", "nawk", "busybox-awk"],
        summary: "system(), output redirection or pipes of print/printf, getline from a command, \
                  -f/-E program files, -i/-l includes, a program known only at run time \
                  (read as awk parses it: `find -name '*exec*'` or `gsub(/e/, \"E\")` is fine)",
        check: programs::awk_check,
    },
    Program {
        names: &["sed", "gsed"],
        summary: "the e command or flag, w/W to a file, -f script files, -i outside the \
                  workspace, a script known only at run time (as sed parses it: `s/e/E/` is fine)",
        check: programs::sed_check,
    },
    Program {
        names: &["sort"],
        summary: "--compress-program, -o/--output outside the workspace",
        check: programs::sort,
    },
    Program {
        names: &["uniq"],
        summary: "an output file outside the workspace",
        check: programs::uniq,
    },
    Program {
        names: &["tar", "gtar", "bsdtar"],
        summary: "--checkpoint-action, --to-command, -I/--use-compress-program, \
                  -F/--info-script/--new-volume-script, --rsh-command, -P/--absolute-names, \
                  -x into a directory outside the workspace, an archive outside the workspace \
                  or on a remote host",
        check: programs::tar,
    },
    Program {
        names: &["env"],
        summary: "-S/--split-string; variables of the environment table; the command it runs \
                  is decided as a part of its own",
        check: programs::env,
    },
    Program {
        names: &["cargo"],
        summary: "--config, install/uninstall, --manifest-path, --target-dir, -C outside the workspace",
        check: programs::cargo,
    },
    Program {
        names: &["make", "gmake"],
        summary: "-f/--file/--makefile, --eval/-E, variable overrides (`CC=…`), \
                  -C/-I outside the workspace",
        check: programs::make,
    },
    Program {
        names: &["rsync"],
        summary: "-e/--rsh, --rsync-path, --write-batch, --only-write-batch, --log-file",
        check: transfer::rsync,
    },
    Program {
        names: &["ssh", "scp", "sftp"],
        summary: "-o ProxyCommand/LocalCommand/KnownHostsCommand/PKCS11Provider/…, -F, -I, -S (scp)",
        check: transfer::ssh,
    },
    Program {
        names: &["curl"],
        summary: "output files outside the workspace (-o, --output-dir, -D, -c, --trace, \
                  --libcurl, --stderr, --etag-save, --hsts, --alt-svc, -w %output{…}), \
                  -K/--config, --engine",
        check: transfer::curl,
    },
    Program {
        names: &["wget"],
        summary: "output files outside the workspace (-O, -o, -a, -P, --save-cookies, \
                  --warc-file), -e/--execute, --config, --use-askpass",
        check: transfer::wget,
    },
    Program {
        names: &["tee"],
        summary: "a file outside the workspace",
        check: transfer::tee,
    },
    Program {
        names: &["dd"],
        summary: "of= outside the workspace",
        check: transfer::dd,
    },
    Program {
        names: &["rg"],
        summary: "--pre (runs a preprocessor command)",
        check: tools::rg,
    },
    Program {
        names: &["fd", "fdfind"],
        summary: "-x/--exec, -X/--exec-batch",
        check: tools::fd,
    },
    Program {
        names: &["zip"],
        summary: "-TT/--unzip-command",
        check: tools::zip,
    },
    Program {
        names: &["man"],
        summary: "-P/--pager, -H/--html",
        check: tools::man,
    },
    Program {
        names: &["less", "more"],
        summary: "+commands",
        check: tools::less,
    },
    Program {
        names: &["vi", "vim", "nvim", "view", "ex", "vimdiff"],
        summary: "+commands, -c, --cmd, -S, -u",
        check: tools::vim,
    },
    Program {
        names: &["emacs"],
        summary: "--eval, -l/--load, -f/--funcall, --script",
        check: tools::emacs,
    },
    Program {
        names: &["sqlite3"],
        summary: ".shell/.system, -init, -cmd",
        check: tools::sqlite,
    },
];

/// Shells: `-c SCRIPT` (any cluster with `c`), rc files, or a script on stdin.
#[rustfmt::skip]
pub const SHELLS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "ksh93", "mksh", "pdksh", "yash", "ash", "fish", "csh",
    "tcsh", "rbash", "pwsh", "powershell",
];

/// Interpreters and their options that take program text (or load code).
#[rustfmt::skip]
pub static INTERPRETERS: &[(&str, &str, &[&str])] = &[
    // (name or name prefix, short option letters, long options)
    ("python", "c", &["command"]), ("pypy", "c", &[]), ("perl", "eEMm", &[]),
    ("ruby", "er", &["require"]), ("irb", "r", &[]),
    ("node", "epr", &["eval", "print", "require", "import", "loader", "experimental-loader", "env-file"]),
    ("nodejs", "epr", &["eval", "print", "require", "import", "loader"]),
    ("deno", "", &["eval"]), ("bun", "epr", &["eval", "print", "preload"]),
    ("php", "rBREd", &[]), ("lua", "el", &[]), ("luajit", "el", &[]), ("tclsh", "", &[]),
    ("wish", "", &[]), ("R", "e", &[]), ("Rscript", "e", &[]),
    ("julia", "eEL", &["eval", "print", "load"]), ("osascript", "e", &[]),
    ("gdb", "x", &["ex", "eval-command", "command"]), ("expect", "cf", &[]), ("jshell", "", &[]),
    ("groovy", "e", &[]), ("scala", "e", &[]),
];

/// Commands that run their arguments as another command, each decided as a part of
/// its own: (name, short options with a value, long options with a value, leading
/// operands before the command).
#[rustfmt::skip]
pub static WRAPPERS: &[(&str, &str, &[&str], usize)] = &[
    ("sudo", "ugCDhprtUT", &["user", "group", "close-from", "chdir", "host", "prompt", "role", "type", "other-user", "command-timeout"], 0),
    ("doas", "uC", &[], 0),
    ("nohup", "", &[], 0),
    ("time", "fo", &["format", "output"], 0),
    ("nice", "n", &["adjustment"], 0),
    ("ionice", "cnpP", &["class", "classdata", "pid", "pgid", "uid"], 0),
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
    ("numactl", "CNmip", &["cpunodebind", "membind", "physcpubind", "interleave", "preferred"], 0),
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
#[rustfmt::skip]
pub const NAME_BUILTINS: &[&str] = &[
    "read", "mapfile", "readarray", "printf", "getopts", "unset", "declare", "typeset",
    "local", "export", "readonly", "wait", "test", "[",
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
#[rustfmt::skip]
pub static ENV_KEYS: &[EnvKey] = {
    use EnvKey::{Exact as E, Prefix as P, Suffix as S};
    &[
        E("PATH"), P("LD_"), P("DYLD_"), P("BASH_"), E("ENV"), E("EXECIGNORE"), E("SHELLOPTS"),
        E("BASHOPTS"), E("IFS"), E("PS4"), E("PROMPT_COMMAND"), E("POSIXLY_CORRECT"),
        E("TEXTDOMAIN"), E("TEXTDOMAINDIR"), E("CDPATH"), E("SHELL"), E("CONFIG_SHELL"),
        P("GIT_"), S("_COMMAND"), S("_EDITOR"), S("PAGER"), S("_ASKPASS"), S("_WRAPPER"),
        S("_OPTIONS"), S("_OPTS"), E("EDITOR"), E("VISUAL"), E("LESSOPEN"), E("LESSCLOSE"),
        E("MANOPT"), E("BROWSER"), E("HOME"), P("XDG_CONFIG_"), P("XDG_DATA_"), E("RUSTC"),
        P("RUSTC_"), E("RUSTFLAGS"), E("RUSTDOC"), E("RUSTDOCFLAGS"), P("RUSTUP_"),
        P("CARGO_"), E("NODE_OPTIONS"), E("NODE_PATH"), E("PYTHONPATH"), E("PYTHONSTARTUP"),
        E("PYTHONHOME"), E("PYTHONUSERBASE"), E("PYTHONEXECUTABLE"), E("PYTHONBREAKPOINT"),
        E("PYTHONWARNINGS"), E("PERL5OPT"), E("PERL5LIB"), E("PERLLIB"), E("PERL5DB"),
        E("RUBYOPT"), E("RUBYLIB"), P("LUA_"), E("PHPRC"), E("PHP_INI_SCAN_DIR"),
        E("TCLLIBPATH"), P("R_PROFILE"), P("npm_config_"), P("NPM_CONFIG_"), E("GEM_HOME"),
        E("GEM_PATH"), E("CC"), E("CXX"), E("CPP"), E("LD"), E("AR"), E("AS"), E("NM"),
        E("RANLIB"), E("STRIP"), E("OBJCOPY"), E("FC"), E("CFLAGS"), E("CXXFLAGS"),
        E("CPPFLAGS"), E("LDFLAGS"), E("MAKE"), E("MAKEFLAGS"), E("MAKEFILES"),
        E("GNUMAKEFLAGS"), E("MFLAGS"), E("GCONV_PATH"), E("GLIBC_TUNABLES"), E("LOCPATH"),
        E("OPENSSL_CONF"), E("OPENSSL_ENGINES"), E("KUBECONFIG"), E("DOCKER_CONFIG"),
        E("AWS_CONFIG_FILE"), E("CURL_HOME"), E("WGETRC"), E("JAVA_HOME"), E("CLASSPATH"),
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

// ---- shells, interpreters, wrappers, builtins ----

// ---- the programs ----

#[cfg(test)]
mod tests;
