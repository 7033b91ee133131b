//! Programs known by what they are rather than by an option: shells, interpreters and
//! the options that take program text, commands that run another command, programs
//! that hand their arguments to a shell, and the builtins that run code, take
//! variable names, or run nothing.

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
